"""Per-activation dual solvers of the exact implicit engine.

The recursions they solve are those of :ref:`theory-exact` and :ref:`theory-ntk`.

A solver prepares per-sample quantities (the diagonal fixed points and what
the off-diagonal solve needs) and solves a block of entries: closed forms of
the dual activation where the activation carries them
(:class:`sk_deq.activations.DualFormula`; :class:`_ClosedFormDual`, with an
exact table inversion for piecewise-linear ones, :class:`_ReluDual`), a
Hermite (Mehler) expansion with a polar-quadrature fallback otherwise
(:class:`~sk_deq.kernels._mehler.MehlerDual`).
:func:`sk_deq.kernels.engine.dual_for` picks the solver of an activation.
"""

from __future__ import annotations

import math

import numpy as np

from .._scaling import squared_norms
from ..activations import Activation, DualFormula
from .._runtime import SOLVE_CHUNK_ENTRIES
from ._compiled import compiled_series
from ._compiled_closed import compiled_closed_form
from ._numerics import diagonal_newton, newton

__all__ = ["Samples"]

# ===========================================================================
# Exact infinite-width implicit kernels (theory page, 'Exact implicit kernels' and 'Implicit-NTK')
#
# Every entry is a scalar fixed point.  With a_i = G*_ii (the diagonal fixed
# point of sample i, a function of ||x_i||^2 only), s_ij = sqrt(a_i a_j) and
# the correlation rho_ij = G*_ij / s_ij, the off-diagonal equation reads
#
#     s rho - sigma_a2 F_c(s rho; a_i, a_j) - sigma_b2 x_i^T x_j = 0,
#
# F_c(G) = E[(phi0(u) - c)(phi0(v) - c)] with (u, v) ~ N(0, [[a_i, G], [G, a_j]])
# and c the centring constant fixed by the training scale tau0.  Its
# derivative in G is E[phi0'(u) phi0'(v)] (Price's theorem), which is also
# the Sigma-dot of the Implicit-NTK.  The left-hand side is increasing in rho
# wherever sigma_a2 E[phi0'(u) phi0'(v)] < 1, so a safeguarded Newton
# iteration on rho in [-1, 1] finds the root.
# ===========================================================================

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_INV_SQRT_2PI = 1.0 / _SQRT_2PI
_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(48)  # E[h(xi)] ~ sum(_GH_W * h(_GH_X)), xi ~ N(0, 1)
_GH_W = _GH_W / _SQRT_2PI


# ---------------------------------------------------------------------------
# per-sample state


class Samples:
    """Per-sample quantities a kernel block needs (sliceable by rows)."""

    def __init__(self, **arrays):
        self.arrays = arrays
        self._parts: dict = {}  # the samples of a row range, kept: their column maxima are computed once
        self._largest: dict = {}

    def __getattr__(self, name):
        try:
            return self.__dict__["arrays"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __getstate__(self):
        return {"arrays": self.arrays}  # the kept parts and maxima are rebuilt on use, not pickled

    def __setstate__(self, state):
        self.__init__(**state["arrays"])

    def take(self, rows) -> Samples:
        """The samples ``rows`` (an index array, or a slice: views, and the same object for the same range)."""
        if not isinstance(rows, slice):
            return Samples(**{k: v[rows] for k, v in self.arrays.items()})
        key = rows.indices(len(self))
        part = self._parts.get(key)
        if part is None:
            part = self._parts.setdefault(key, Samples(**{k: v[rows] for k, v in self.arrays.items()}))
        return part

    def largest(self, name: str) -> np.ndarray:
        """Column maxima of the per-sample table ``name`` (zeros where there are no samples), computed once."""
        top = self._largest.get(name)
        if top is None:
            top = self._largest.setdefault(name, np.max(self.arrays[name], axis=0, initial=0.0))
        return top

    def __len__(self):
        return len(next(iter(self.arrays.values())))  # one entry per sample in every array


# ---------------------------------------------------------------------------
# dual activations


class _Dual:
    """Interface: per-sample preparation and the block solve of one activation.

    :meth:`block` forms the inner products of a block with one matrix
    product, then solves the entries in row chunks of about
    :data:`~sk_deq._runtime.SOLVE_CHUNK_ENTRIES` entries: bounded
    temporaries, and numpy operations long enough for the engine's threads
    to run side by side.
    """

    name = "generic"

    def __init__(self, act: Activation, sa: float, sb: float, c: float, tol: float):
        self.act, self.sa, self.sb, self.c, self.tol = act, sa, sb, c, tol

    def diagonal(self, n_sq: np.ndarray) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def prepare(self, X: np.ndarray) -> Samples:
        X = np.ascontiguousarray(X, dtype=np.float64)
        n_sq = squared_norms(X)
        a = self.diagonal(n_sq)
        return Samples(X=X, n_sq=n_sq, a=a, s=np.sqrt(a), **self.extra(X, n_sq, a))

    def extra(self, X, n_sq, a) -> dict:
        return {}

    def diagonal_values(self, S: Samples, kernel: str) -> np.ndarray:
        """Exact diagonal ``K(x_i, x_i)``."""
        sa, sb = self.sa, self.sb
        if kernel == "ck":
            return S.a.copy()
        feat = (S.a - sb * S.n_sq) / sa
        if kernel == "feature":
            return feat
        return feat / (1.0 - sa * self.dot_at_diagonal(S))

    def dot_at_diagonal(self, S: Samples) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def gram(self, R: Samples, C: Samples) -> np.ndarray:
        return R.X @ C.X.T

    def block(
        self, R: Samples, C: Samples, kernel: str, out=None, bias: float = 0.0, upper: bool = False
    ) -> np.ndarray:
        """The kernel block of rows ``R`` and columns ``C``, plus ``bias``, written into ``out`` when given.

        ``out`` may be a view of the whole kernel matrix (strided rows): each
        chunk is written there as it is solved, with no block-sized
        intermediate and no copy afterwards.  With ``upper`` the block lies on
        the diagonal of a symmetric kernel (``R`` and ``C`` the same samples)
        and only its entries on and above the diagonal are asked for: each
        chunk of rows leaves out the columns left of its first row, and the
        caller mirrors the upper triangle (a quarter of the block fewer
        entries solved at two chunks per block).
        """
        P = self.gram(R, C)
        nr, nc = P.shape
        step = max(1, SOLVE_CHUNK_ENTRIES // max(nc, 1))
        if out is None and step >= nr and not bias:
            return self.chunk(P, R, C, kernel)
        out = np.empty_like(P) if out is None else out
        for i0 in range(0, nr, step):
            sl, cols = slice(i0, i0 + step), slice(i0 if upper else 0, nc)
            part = C if cols.start == 0 else C.take(cols)
            self.chunk_into(P[sl, cols], R.take(sl), part, kernel, out[sl, cols])
            if bias:
                out[sl, cols] += bias  # while the chunk is in cache
        return out

    def chunk(self, P, R, C, kernel):  # pragma: no cover - interface
        raise NotImplementedError

    def chunk_into(self, P, R, C, kernel, out) -> None:
        """:meth:`chunk` written into ``out``; a dual that can write there directly overrides it."""
        out[...] = self.chunk(P, R, C, kernel)


class _ClosedFormDual(_Dual):
    """Activations whose dual ``E[phi0(u) phi0(v)]`` has a closed form: the activation's :class:`DualFormula`."""

    def __init__(self, act: Activation, sa: float, sb: float, c: float, tol: float, formula: DualFormula):
        super().__init__(act, sa, sb, c, tol)
        self.formula = formula
        self.name = formula.name

    @property
    def compiled(self):
        """The formula's compiled Newton steps (:mod:`._compiled_closed`), or None: asked at every chunk,
        as :func:`~sk_deq.kernels._series.numpy_ops` is."""
        return compiled_closed_form(self.formula)

    def pre(self, ai, aj) -> dict:
        """Entry-wise quantities that do not change during the Newton iteration."""
        return self.formula.pre(ai, aj)

    def pair(self, G, pre):
        """``(E[phi0(u) phi0(v)], E[phi0'(u) phi0'(v)])`` for covariance G."""
        return self.formula.pair(G, pre)

    def mean(self, a):
        return self.formula.mean(a)

    #: Relative step of the central difference that gives ``dV/da`` to Newton (about 1e-10 relative).
    _DIFF_STEP = 1e-5

    def diagonal(self, n_sq):
        """Diagonal fixed points ``a = sa V(a) + sb ||x||^2`` (:func:`~sk_deq.kernels._numerics.diagonal_newton`).

        ``V`` is the closed form; Newton's slope ``dV/da`` is its central
        difference (only the step uses it: the root is that of the closed
        form).  A plain fixed-point iteration crawls where the recursion is
        barely contracting: an erf sample of zero norm at ``sigma_a2`` just
        above ``pi / 4``, where 0 repels and the root is small, took more than
        10,000 steps.
        """
        sa, sb, c = self.sa, self.sb, self.c

        def V(a):
            a = np.maximum(a, 0.0)
            F, _ = self.pair(a, self.pre(a, a))
            return F - 2.0 * c * self.mean(a) + c * c

        def V_and_dV(a):
            h = self._DIFF_STEP * a
            return V(a), (V(a + h) - V(a - h)) / (2.0 * h)

        a0 = sb * n_sq + sa * (self.act.variance(1.0) if n_sq.size else 0.0)
        return diagonal_newton(V_and_dV, sa, sb, n_sq, a0)

    def extra(self, X, n_sq, a):
        return {"m": self.mean(a), "dm": self.mean_derivative(a)}

    def mean_derivative(self, a):
        """``E[phi0'(u)]`` for ``u ~ N(0, a)`` (Gauss-Hermite, 48 nodes): with
        the mean, the dual's value and slope at ``G = 0``, which only start
        the Newton iteration (any accuracy will do)."""
        s = np.sqrt(np.maximum(a, 0.0))
        return self.act.derivative(s[:, None] * _GH_X) @ _GH_W

    def dot_at_diagonal(self, S):
        return self.pair(S.a, self.pre(S.a, S.a))[1]

    _ACTIVE_ITER = 8  # Newton steps on the shrinking set of unconverged entries before the guarded solver

    def chunk(self, P, R, C, kernel):
        sa, sb, c = self.sa, self.sb, self.c
        shape = P.shape
        compiled = self.compiled
        if compiled is not None:
            s, rhs, rho, zero, state = compiled.start(P, R, C, sa, sb, c)
        else:
            s, rhs, rho, zero, state = self._start(P, R, C)
        any_zero = bool(zero.any())
        need_F = kernel == "feature"
        rho, F, D = self._solve(rho.reshape(-1), s.reshape(-1), rhs.reshape(-1), state, need_F, compiled)
        rho, D = rho.reshape(shape), D.reshape(shape)
        F = F.reshape(shape) if need_F else None
        pre = self.pre(R.a[:, None], C.a[None, :]) if kernel == "ntk" or any_zero else None
        if kernel == "ntk":  # E[phi' phi'] at the returned iterate
            F, D = self.pair(s * rho, pre)
        if any_zero:
            rho[zero] = 0.0
        shift = None if kernel == "ck" and not any_zero else self._shift(R, C)
        if kernel == "ck":
            G = s * rho
            if any_zero:
                F0, _ = self.pair(np.zeros_like(G), pre)
                G[zero] = (sa * (F0 + shift) + sb * P)[zero]
            return G
        F += shift
        if kernel == "feature":
            return F
        D *= -sa
        D += 1.0
        F /= D
        return F

    def _shift(self, R, C):
        """``c^2 - c (m_i + m_j)``: what centring by ``c`` adds to every entry of the dual."""
        return self.c * self.c - self.c * (R.m[:, None] + C.m[None, :])

    def _start(self, P, R, C):
        """``(s, rhs, rho, zero, state)`` as :meth:`CompiledClosedForm.start` gives them, in numpy."""
        sa, sb = self.sa, self.sb
        s = R.s[:, None] * C.s[None, :]
        rhs = sb * P
        rhs += sa * self._shift(R, C)
        zero = s <= 1e-300
        if zero.any():
            s = np.where(zero, 1.0, s)
        # start: the linear part of the dual, F(G) = m_i m_j + m'_i m'_j G + O(G^2)
        rho = np.multiply.outer(R.m, C.m)
        rho *= sa
        rho += rhs
        d = np.multiply.outer(R.dm, C.dm)
        d *= -sa
        d += 1.0
        d *= s
        rho /= d
        np.clip(rho, -1.0, 1.0, out=rho)
        pre = self.pre(R.a[:, None], C.a[None, :])
        return s, rhs, rho, zero, {k: np.broadcast_to(v, P.shape).reshape(-1) for k, v in pre.items()}

    def _step(self, rho, s, rhs, pre, need_F, stop, compiled):
        """One Newton step of flat entries: ``(new, F, D, |step|, bad)``, ``F`` moved to ``new`` when ``need_F``."""
        if compiled is not None:
            return compiled.step(rho, s, rhs, pre, need_F, self.sa, stop)
        sa = self.sa
        G = s * rho
        F, D = self.pair(G, pre)
        g = F * -sa
        g += G
        g -= rhs
        dg = D * -sa
        dg += 1.0
        dg *= s
        new = np.divide(g, dg)
        np.subtract(rho, new, out=new)
        np.clip(new, -1.0, 1.0, out=new)
        step = np.subtract(new, rho, out=g)
        if need_F:
            dg = np.multiply(s, step, out=dg)
            dg *= D
            F += dg
        np.abs(step, out=step)
        return new, F, D, step, step > stop

    def _solve(self, rho, s, rhs, pre, need_F=True, compiled=None):
        """Newton on flat entries, restricted to the unconverged ones once they are few.

        Returns the correlations and ``F``, ``D``: ``F`` moved to them to
        first order (None unless ``need_F``), ``D`` at the previous iterate.
        Entries not converged after ``_ACTIVE_ITER`` steps are handed to
        :func:`newton` (with its bracketed fallback) from their starts.
        ``pre`` is the iteration's state: the formula's ``pre`` (numpy) or,
        with ``compiled``, :meth:`CompiledClosedForm.start`'s.
        """
        sa = self.sa
        stop = max(self.tol, 0.1 * math.sqrt(self.tol))
        full = None  # (rho, F, D, idx) of all entries once the iteration runs on a subset
        start = rho
        for _ in range(self._ACTIVE_ITER):
            new, F, D, step, bad = self._step(rho, s, rhs, pre, need_F, stop, compiled)
            n_bad = int(np.count_nonzero(bad))
            if full is not None:
                r_all, F_all, D_all, idx = full
                r_all[idx], D_all[idx] = new, D
                if need_F:
                    F_all[idx] = F
            if n_bad == 0:
                return (new, F, D) if full is None else full[:3]
            if full is None and n_bad > bad.size // 4:
                rho = new  # most entries still moving: iterate on all of them
                continue
            keep = np.flatnonzero(bad)
            if full is None:
                full = (new, F, D, keep)
            else:
                full = (*full[:3], full[3][keep])
            rho, s, rhs, start = new[keep], s[keep], rhs[keep], start[keep]
            pre = {k: v[keep] for k, v in pre.items()}
        if compiled is not None:  # the formula's own quantities, for the guarded solver
            pre = self.pre(pre["ai"], pre["aj"])

        def fun(r):
            G = s * r
            F, D = self.pair(G, pre)
            return G - sa * F - rhs, s * (1.0 - sa * D), F, D

        r, (_, _, F, D), step = newton(fun, start, tol=self.tol, full=True)
        F += D * (s * step)
        if full is None:
            return r, F, D
        r_all, F_all, D_all, idx = full
        r_all[idx], F_all[idx], D_all[idx] = r, F, D
        return r_all, F_all, D_all


class _ReluDual(_Dual):
    """Leaky ReLU ``max(alpha x, beta x)`` (ReLU: ``alpha = 1, beta = 0``).

    Positive homogeneity makes the correlation equation universal::

        h(rho) = (1 - sa ab) rho - sa (alpha - beta)^2 kappa(rho) = r_ij,
        kappa(rho) = (sin t + (pi - t) cos t) / (2 pi),   t = arccos(rho),
        r_ij = (sb x_ij + sa c^2) / (s_i s_j) - sa c mu (1/s_i + 1/s_j),

    with ``mu = (alpha - beta) / sqrt(2 pi)`` (so ``E_a[phi0] = mu sqrt(a)``).
    ``r_ij`` comes out of one matrix product of scaled inputs plus a rank-3
    term, and
    ``h^{-1}`` is a precomputed piecewise-cubic table in ``v = sqrt(h(1) - r)``
    (which removes the square-root behaviour at ``rho = 1``), accurate to
    about 1e-13, with Newton steps for the entries near ``rho = -1``.
    """

    _N = 2049

    def __init__(self, act: Activation, sa: float, sb: float, c: float, tol: float, formula: DualFormula):
        super().__init__(act, sa, sb, c, tol)
        self.name = formula.name
        assert formula.slopes is not None  # a piecewise-linear formula
        self.alpha, self.beta = map(float, formula.slopes)
        al, be = self.alpha, self.beta
        self.lin = 1.0 - sa * al * be
        self.curv = sa * (al - be) ** 2
        self.mu = (al - be) * _INV_SQRT_2PI
        if not (self.lin - 0.5 * self.curv > 0 and self.lin > 0):
            raise ValueError(
                f"The kernel recursion is not contracting for this leaky ReLU at sigma_a2={sa:g}; "
                "try a smaller sigma_a2."
            )
        self._build_table()

    def _h(self, rho):
        rho = np.clip(rho, -1.0, 1.0)
        t = np.arccos(rho)
        kap = (np.sqrt(np.maximum(1.0 - rho * rho, 0.0)) + (math.pi - t) * rho) / (2.0 * math.pi)
        return self.lin * rho - self.curv * kap, self.lin - self.curv * (math.pi - t) / (2.0 * math.pi)

    def _build_table(self):
        self.h_hi = float(self._h(np.array(1.0))[0])
        self.h_lo = float(self._h(np.array(-1.0))[0])
        self.v_max = math.sqrt(self.h_hi - self.h_lo)
        v = np.linspace(0.0, self.v_max, self._N)
        r = self.h_hi - v * v
        lo, hi = -np.ones_like(r), np.ones_like(r)
        for _ in range(64):
            mid = 0.5 * (lo + hi)
            below = self._h(mid)[0] < r
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        rho = 0.5 * (lo + hi)
        for _ in range(3):
            hv, dh = self._h(rho)
            rho = np.clip(rho - (hv - r) / dh, -1.0, 1.0)
        rho[0], rho[-1] = 1.0, -1.0
        drho = -2.0 * v / self._h(rho)[1]  # d rho / d v
        dv = v[1] - v[0]
        y0, y1 = rho[:-1], rho[1:]
        d0, d1 = drho[:-1] * dv, drho[1:] * dv
        self._coef = np.stack([y0, d0, 3.0 * (y1 - y0) - 2.0 * d0 - d1, 2.0 * (y0 - y1) + d0 + d1]).copy()
        self._inv_dv = (self._N - 1) / self.v_max

    def _invert(self, r, si=None, sj=None, out=None):
        """``h^{-1}(r)`` of the 2-d ``r``; with ``si`` and ``sj``, times ``si[i]`` then ``sj[j]`` (the CK).

        Written into ``out`` (an array of ``r``'s shape, strided rows allowed)
        when given, and returned.
        """
        compiled = compiled_series()
        if compiled is None:
            rho = self._invert_table(r)
            low = rho < -0.75  # (1 + rho)^{3/2} behaviour of kappa near rho = -1
        else:  # the same operations, and the scaling of the entries not low, in one compiled pass
            top = self._N - 1 - 1e-9
            rho, low = compiled.table_inverse(r, self._coef, self.h_hi, self._inv_dv, top, si, sj, out=out)
        if low.any():
            rl, tl = rho[low], r[low]
            for _ in range(4):
                hv, dh = self._h(rl)
                rl = np.clip(rl - (hv - tl) / dh, -1.0, 1.0)
            if compiled is not None and si is not None:  # the entries the compiled pass left unscaled
                rl *= np.broadcast_to(si[:, None], r.shape)[low]
                rl *= np.broadcast_to(sj[None, :], r.shape)[low]
            rho[low] = rl
        if compiled is None and si is not None:
            rho *= si[:, None]
            rho *= sj[None, :]
        if out is not None and rho is not out:
            out[...] = rho
            return out
        return rho

    def _invert_table(self, r):
        """The table's piecewise-cubic inverse at ``r``, in numpy (the compiled loop's reference)."""
        v = np.subtract(self.h_hi, r)
        np.maximum(v, 0.0, out=v)
        np.sqrt(v, out=v)
        v *= self._inv_dv
        np.minimum(v, self._N - 1 - 1e-9, out=v)
        idx = v.astype(np.intp)
        v -= idx
        c0, c1, c2, c3 = self._coef
        rho = c3.take(idx)
        rho *= v
        rho += c2.take(idx)
        rho *= v
        rho += c1.take(idx)
        rho *= v
        rho += c0.take(idx)
        return rho

    def diagonal(self, n_sq):
        # a = s^2 with s^2 (1 - sa (al^2 + be^2)/2) + 2 sa c mu s - sa c^2 - sb n = 0
        sa, sb, c, al, be = self.sa, self.sb, self.c, self.alpha, self.beta
        A = 1.0 - sa * (al * al + be * be) / 2.0
        B = 2.0 * sa * c * self.mu
        Cc = -(sa * c * c + sb * n_sq)
        if not A > 0:
            raise ValueError(f"The diagonal kernel fixed point diverges at sigma_a2={sa:g}; try a smaller sigma_a2.")
        s = (-B + np.sqrt(np.maximum(B * B - 4.0 * A * Cc, 0.0))) / (2.0 * A)
        return s * s

    def extra(self, X, n_sq, a):
        sa, sb, c = self.sa, self.sb, self.c
        s = np.sqrt(a)
        with np.errstate(divide="ignore"):
            q = np.where(s > 0, 1.0 / s, 0.0)
        k = sa * c * self.mu
        # r_ij = sx_i . sx_j + aux_left_i . aux_right_j (one product plus a rank-3 term)
        sx = (math.sqrt(sb) * q)[:, None] * X
        aux_left = np.column_stack([q, -k * q, np.ones_like(q)])
        aux_right = np.column_stack([sa * c * c * q, np.ones_like(q), -k * q])
        return {"sx": sx, "aux_left": aux_left, "aux_right": aux_right}

    def dot_at_diagonal(self, S):
        al, be = self.alpha, self.beta
        return np.full_like(S.a, (al * al + be * be) / 2.0)

    def gram(self, R, C):
        r = R.sx @ C.sx.T
        r += R.aux_left @ C.aux_right.T
        return r

    def chunk_into(self, r, R, C, kernel, out) -> None:
        if kernel == "ck":  # the compiled inversion writes the CK straight into out
            self._invert(r, R.s, C.s, out=out)
        else:
            super().chunk_into(r, R, C, kernel, out)

    def chunk(self, r, R, C, kernel):
        if kernel == "ck":
            return self._invert(r, R.s, C.s)
        rho = self._invert(r)
        feat = rho - r
        feat *= R.s[:, None] * (1.0 / self.sa)
        feat *= C.s[None, :]
        feat += self.c * self.c
        feat -= (self.c * self.mu) * (R.s[:, None] + C.s[None, :])
        if kernel == "feature":
            return feat
        # E[phi'(u) phi'(v)] has a square-root singularity at rho = 1:
        # identical samples (r at rounding distance from h(1)) get rho = 1
        np.copyto(rho, 1.0, where=(self.h_hi - r) < 1e-13)
        D = np.arccos(rho)
        D *= -((self.alpha - self.beta) ** 2) / (2.0 * math.pi)
        D += self.alpha * self.beta + (self.alpha - self.beta) ** 2 / 2.0
        D *= -self.sa
        D += 1.0
        feat /= D
        return feat
