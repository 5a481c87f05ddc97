"""Per-activation dual solvers of the exact implicit engine.

The recursions they solve are those of :ref:`theory-exact` and :ref:`theory-ntk`.

A solver prepares per-sample quantities (the diagonal fixed points and what
the off-diagonal solve needs) and solves a block of entries: closed forms of
the dual activation where the activation carries them
(:class:`sk_deq.activations.DualFormula`; :class:`_ClosedFormDual`, with an
exact table inversion for piecewise-linear ones, :class:`_ReluDual`), a
Hermite (Mehler) expansion with a polar-quadrature fallback otherwise
(:class:`_MehlerDual`).  :func:`dual_for` picks the solver of an activation.
"""

from __future__ import annotations

import math

import numpy as np

from .._inputs import squared_norms
from ..activations import Activation, DualFormula
from .memory import CHUNK_ENTRIES
from .numerics import (
    chebyshev_interpolation_matrix,
    chebyshev_points,
    diagonal_newton,
    hermite_table,
    newton,
    polar_expectation,
    safeguarded_newton,
    sample_nodes,
    vector_fixed_point,
)

__all__ = ["MEHLER_MAX_DEGREE", "Samples", "dual_for"]

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

#: Largest Hermite degree of the generic (Mehler) dual activation.
MEHLER_MAX_DEGREE = 256


# ---------------------------------------------------------------------------
# per-sample state


class Samples:
    """Per-sample quantities a kernel block needs (sliceable by rows)."""

    def __init__(self, **arrays):
        self.arrays = arrays

    def __getattr__(self, name):
        try:
            return self.__dict__["arrays"][name]
        except KeyError:
            raise AttributeError(name) from None

    def take(self, rows: slice) -> Samples:
        return Samples(**{k: v[rows] for k, v in self.arrays.items()})

    def __len__(self):
        return len(self.arrays["n_sq"])


# ---------------------------------------------------------------------------
# dual activations


class _Dual:
    """Interface: per-sample preparation and the block solve of one activation.

    :meth:`block` forms the inner products of a block with one matrix
    product, then solves the entries in row chunks small enough for the
    elementwise work to stay in cache.
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

    def block(self, R: Samples, C: Samples, kernel: str) -> np.ndarray:
        P = self.gram(R, C)
        nr, nc = P.shape
        step = max(1, CHUNK_ENTRIES // max(nc, 1))
        if step >= nr:
            return self.chunk(P, R, C, kernel)
        out = np.empty_like(P)
        for i0 in range(0, nr, step):
            sl = slice(i0, i0 + step)
            out[sl] = self.chunk(P[sl], R.take(sl), C, kernel)
        return out

    def chunk(self, P, R, C, kernel):  # pragma: no cover - interface
        raise NotImplementedError


class _ClosedFormDual(_Dual):
    """Activations whose dual ``E[phi0(u) phi0(v)]`` has a closed form: the activation's :class:`DualFormula`."""

    def __init__(self, act: Activation, sa: float, sb: float, c: float, tol: float, formula: DualFormula):
        super().__init__(act, sa, sb, c, tol)
        self.formula = formula
        self.name = formula.name

    def pre(self, ai, aj) -> dict:
        """Entry-wise quantities that do not change during the Newton iteration."""
        return self.formula.pre(ai, aj)

    def pair(self, G, pre):
        """``(E[phi0(u) phi0(v)], E[phi0'(u) phi0'(v)])`` for covariance G."""
        return self.formula.pair(G, pre)

    def mean(self, a):
        return self.formula.mean(a)

    def diagonal(self, n_sq):
        sa, sb, c = self.sa, self.sb, self.c

        def update(a):
            a = np.maximum(a, 0.0)
            F, _ = self.pair(a, self.pre(a, a))
            return sa * (F - 2.0 * c * self.mean(a) + c * c) + sb * n_sq

        return vector_fixed_point(update, sb * n_sq + sa * c * c + 1e-300)

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
        pre = self.pre(R.a[:, None], C.a[None, :])
        s = R.s[:, None] * C.s[None, :]
        shift = c * c - c * (R.m[:, None] + C.m[None, :])
        rhs = sb * P
        rhs += sa * shift
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
        flat = {k: np.broadcast_to(v, shape).reshape(-1) for k, v in pre.items()}
        need_F = kernel == "feature"
        rho, F, D = self._solve(rho.reshape(-1), s.reshape(-1), rhs.reshape(-1), flat, need_F)
        rho, D = rho.reshape(shape), D.reshape(shape)
        F = F.reshape(shape) if need_F else None
        if kernel == "ntk":  # E[phi' phi'] at the returned iterate
            F, D = self.pair(s * rho, pre)
        if zero.any():
            rho[zero] = 0.0
        if kernel == "ck":
            G = s * rho
            if zero.any():
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

    def _solve(self, rho, s, rhs, pre, need_F=True):
        """Newton on flat entries, restricted to the unconverged ones once they are few.

        Returns the correlations and ``F``, ``D``: ``F`` moved to them to
        first order (None unless ``need_F``), ``D`` at the previous iterate.
        Entries not converged after ``_ACTIVE_ITER`` steps are handed to
        :func:`newton` (with its bracketed fallback) from their starts.
        """
        sa = self.sa
        stop = max(self.tol, 0.1 * math.sqrt(self.tol))
        full = None  # (rho, F, D, idx) of all entries once the iteration runs on a subset
        start = rho
        for _ in range(self._ACTIVE_ITER):
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
            bad = step > stop
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

    def _invert(self, r):
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
        low = rho < -0.75  # (1 + rho)^{3/2} behaviour of kappa near rho = -1
        if low.any():
            rl, tl = rho[low], r[low]
            for _ in range(4):
                hv, dh = self._h(rl)
                rl = np.clip(rl - (hv - tl) / dh, -1.0, 1.0)
            rho[low] = rl
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

    def chunk(self, r, R, C, kernel):
        rho = self._invert(r)
        if kernel == "ck":
            rho *= R.s[:, None]
            rho *= C.s[None, :]
            return rho
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


class _MehlerDual(_Dual):
    """Any activation: Hermite (Mehler) expansion of the dual activation.

    ``F_c(G) = sum_k h_k(i) h_k(j) rho^k`` with ``h_k(i)`` the normalised
    Hermite coefficients of ``phi0(sqrt(a_i) xi) - c`` (per-sample vectors,
    computed once by quadrature).  The truncation error after degree K is at
    most ``|rho|^(K+1) sqrt(tail_i(K) tail_j(K))`` with the exact tails from
    Parseval, so the degree follows each entry's correlation: most entries
    (small correlations) are solved together at a low degree, the others
    sorted by correlation and solved in groups, each at the degree its
    largest correlation needs.  Entries close to ``|rho| = 1`` whose bound is
    not met at degree ``MEHLER_MAX_DEGREE`` (kinked or saturating
    activations) are computed by two-dimensional quadrature in polar
    coordinates, split at the kinks.
    """

    name = "Hermite expansion"
    _MARGIN = 0.05
    _GROUP = 4096

    def __init__(self, act, sa, sb, c, tol, max_degree=MEHLER_MAX_DEGREE):
        super().__init__(act, sa, sb, c, tol)
        self.K = int(max_degree)
        self.bps = tuple(act.breakpoints)
        self.odd = bool(act.odd) and abs(c - act._value_at_zero()) <= 1e-15 * max(1.0, abs(c))

    def _f(self, x):
        return self.act(x) - self.c

    def diagonal(self, n_sq):
        """Diagonal fixed points ``a = sa E[(phi0(sqrt(a) xi) - c)^2] + sb ||x||^2`` (:func:`diagonal_newton`)."""
        sa, sb = self.sa, self.sb
        f = self._f

        def V_and_dV(a):
            s = np.sqrt(a)
            xi, w = sample_nodes(s, self.bps)
            f2 = f(s[:, None] * xi) ** 2
            V = np.sum(w * f2, axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                dV = np.sum(w * (xi * xi - 1.0) * f2, axis=1) / (2.0 * a)
            return V, dV

        a = sb * n_sq + sa * (self.act.variance(1.0) if n_sq.size else 0.0)
        return diagonal_newton(V_and_dV, sa, sb, n_sq, a)

    # -- per-sample quantities: all functions of the squared norm alone
    #
    # a_i, h_k(i), the Parseval totals and E[phi0'^2] depend on x_i only
    # through ||x_i||^2.  Many distinct norms are therefore served by a
    # Chebyshev interpolant in log ||x||^2 through a few directly computed
    # samples; the interpolant is accepted only if it reproduces direct
    # computations between its nodes, else (and for norms far from the
    # bulk, and for few distinct norms) every sample is computed directly.

    _INTERP_MIN = 96  # at most this many distinct norms: computed directly
    _INTERP_NODES = (24, 40, 64)  # interpolant sizes tried in turn
    _INTERP_SPAN = 16.0  # interpolated norms within median / span .. median * span
    _INTERP_RTOL = 1e-13  # accepted interpolation error (relative, see _interpolation_error)

    def prepare(self, X):
        X = np.ascontiguousarray(X, dtype=np.float64)
        n_sq = squared_norms(X)
        per = self.per_sample(n_sq)
        return Samples(X=X, n_sq=n_sq, s=np.sqrt(per["a"]), **per)

    def per_sample(self, n_sq, interpolate=True):
        """``a``, ``H``, ``tail``, ``dtail`` and ``d2`` of samples with squared norms ``n_sq``.

        ``interpolate=False`` computes every distinct norm directly.
        """
        u, inv = np.unique(n_sq, return_inverse=True)
        if interpolate and len(u) > self._INTERP_MIN:
            a, H, V, d2 = self._interpolated(n_sq, u)
            return {"a": a, **self._tails(a, H, V, d2)}
        a, H, V, d2 = self._direct(u)
        out = {"a": a, **self._tails(a, H, V, d2)}
        return {k: v[inv] for k, v in out.items()}

    def extra(self, X, n_sq, a):
        return self._tails(a, *self._coefficients(a))

    def _direct(self, n_sq):
        a = self.diagonal(n_sq)
        return (a, *self._coefficients(a))

    def _interpolated(self, n_sq, u):
        """:meth:`_direct` at squared norms ``n_sq`` (sorted distinct values ``u``) through a checked interpolant."""
        n = len(n_sq)
        a = np.empty(n)
        H = np.empty((n, self.K + 1))
        V, d2 = np.empty(n), np.empty(n)
        med = float(np.median(u))
        lo = max(float(u[0]), med / self._INTERP_SPAN)
        hi = min(float(u[-1]), med * self._INTERP_SPAN)
        ok = med > 0 and hi > lo * (1.0 + 1e-9) and np.count_nonzero((u >= lo) & (u <= hi)) > self._INTERP_MIN
        inside = (n_sq >= lo) & (n_sq <= hi) if ok else np.zeros(n, bool)
        done = False
        if ok:
            tlo, thi = math.log(lo), math.log(hi)
            x = np.clip((2.0 * np.log(n_sq[inside]) - (thi + tlo)) / (thi - tlo), -1.0, 1.0)
            for m in self._INTERP_NODES:
                nodes = self._stack(*self._direct(self._log_norms(chebyshev_points(m), tlo, thi)))
                # the interpolant's error is largest between its nodes
                xt = np.cos(np.arange(1, m) * math.pi / m)
                test = self._stack(*self._direct(self._log_norms(xt, tlo, thi)))
                if self._interpolation_error(chebyshev_interpolation_matrix(xt, m) @ nodes, test) <= 1.0:
                    vals = chebyshev_interpolation_matrix(x, m) @ nodes
                    a[inside], V[inside], d2[inside], H[inside] = vals[:, 0], vals[:, 1], vals[:, 2], vals[:, 3:]
                    done = True
                    break
        rest = ~inside if done else np.ones(n, bool)
        if rest.any():
            ur, inv = np.unique(n_sq[rest], return_inverse=True)
            ar, Hr, Vr, d2r = self._direct(ur)
            a[rest], H[rest], V[rest], d2[rest] = ar[inv], Hr[inv], Vr[inv], d2r[inv]
        return a, H, V, d2

    @staticmethod
    def _log_norms(x, tlo, thi):
        return np.exp(0.5 * (thi + tlo) + 0.5 * (thi - tlo) * x)

    @staticmethod
    def _stack(a, H, V, d2):
        return np.column_stack([a, V, d2, H])

    def _interpolation_error(self, approx, exact):
        """Largest interpolation error in units of the accepted one: relative
        for ``a``, ``V`` and ``E[phi0'^2]``, relative to ``sqrt(V)`` for the
        Hermite coefficients (whose squares sum to ``V``)."""
        err = np.abs(approx - exact)
        scale = np.empty_like(exact)
        scale[:, :3] = np.abs(exact[:, :3])
        scale[:, 3:] = np.sqrt(np.abs(exact[:, 1:2]))
        scale = np.maximum(scale, 1e-300) * self._INTERP_RTOL
        with np.errstate(invalid="ignore"):
            worst = np.max(err / scale, initial=0.0)
        return float(worst) if np.isfinite(worst) else np.inf

    def _coefficients(self, a):
        """Hermite coefficients ``H`` (n, K + 1), ``V = E[(phi0 - c)^2]`` and
        ``d2 = E[phi0'^2]`` at the variances ``a`` (by quadrature)."""
        s = np.sqrt(a)
        n = len(a)
        K = self.K
        f, df = self._f, self.act.derivative
        xi, w = sample_nodes(s, self.bps)
        H = np.empty((n, K + 1))
        if xi.shape[0] == 1:
            Hw = hermite_table(xi[0], K) * w[0][:, None]
            fv = f(s[:, None] * xi)
            H[:] = fv @ Hw
            V = fv**2 @ w[0]
            d2 = df(s[:, None] * xi) ** 2 @ w[0]
        else:
            V = np.empty(n)
            d2 = np.empty(n)
            for i0 in range(0, n, 32):
                sl = slice(i0, i0 + 32)
                x, ww = xi[sl], w[sl]
                fv = f(s[sl, None] * x)
                H[sl] = np.einsum("iq,iqk->ik", fv * ww, hermite_table(x, K))
                V[sl] = np.sum(ww * fv**2, axis=1)
                d2[sl] = np.sum(ww * df(s[sl, None] * x) ** 2, axis=1)
        return H, V, d2

    def _tails(self, a, H, V, d2):
        HH = H * H
        tail = np.cumsum(HH, axis=1)
        np.subtract(V[:, None], tail, out=tail)
        np.maximum(tail, 0.0, out=tail)
        HH *= np.arange(self.K + 1, dtype=float)
        dtail = np.cumsum(HH, axis=1)
        np.subtract((a * d2)[:, None], dtail, out=dtail)
        np.maximum(dtail, 0.0, out=dtail)
        return {"H": H, "tail": tail, "dtail": dtail, "d2": d2}

    def dot_at_diagonal(self, S):
        return S.d2

    def _degrees(self, rho_abs, tail_r, tail_c, dtail_r, dtail_c, scale, ntk, tol=None):
        """Smallest degree meeting the tolerance (``self.tol`` by default) for
        each correlation bound in ``rho_abs`` (``K + 1`` where even
        ``MEHLER_MAX_DEGREE`` does not)."""
        K = np.arange(self.K + 1)
        rho_abs = np.minimum(np.atleast_1d(rho_abs), 1.0)
        with np.errstate(under="ignore", divide="ignore"):
            lr = np.log(np.maximum(rho_abs, 1e-300))[:, None]
            bound = self.sa * np.exp(lr * (K + 1)) * np.sqrt(tail_r * tail_c)
            if ntk:
                bound = np.maximum(bound, self.sa * np.exp(lr * K) * np.sqrt(dtail_r * dtail_c) * scale)
        ok = bound <= (self.tol if tol is None else tol) * scale
        return np.where(ok.any(axis=1), ok.argmax(axis=1), self.K + 1)

    def _coeffs(self, Hr, Hc, K, outer):
        """Entry-wise polynomial coefficients ``Hr_k Hc_k`` for the degrees in use."""
        ks = self._degrees_used(K)
        if outer:
            return ks, Hr[:, ks].T[:, :, None] * Hc[:, ks].T[:, None, :]
        return ks, (Hr[:, ks] * Hc[:, ks]).T

    def _degrees_used(self, K):
        # odd activations (phi0 - c odd) have vanishing even coefficients
        return np.arange(1, K + 1, 2) if self.odd else np.arange(K + 1)

    def _horner(self, rho, coef, ks):
        """Value and rho-derivative of sum_k coef_k rho^k over degrees ``ks``."""
        if self.odd:  # rho * q(rho^2)
            y = rho * rho
            q = coef[-1].copy()
            dq = np.zeros_like(q)
            for c in coef[-2::-1]:
                dq *= y
                dq += q
                q *= y
                q += c
            # p = rho q(y), dp = q(y) + 2 y q'(y)
            dq *= 2.0 * y
            dq += q
            q *= rho
            return q, dq
        p = coef[-1].copy()
        dp = np.zeros_like(p)
        for c in coef[-2::-1]:
            dp *= rho
            dp += p
            p *= rho
            p += c
        return p, dp

    def _horner_value(self, rho, coef):
        """Value alone of sum_k coef_k rho^k (half the work of :meth:`_horner`)."""
        if self.odd:
            y = rho * rho
            q = coef[-1].copy()
            for c in coef[-2::-1]:
                q *= y
                q += c
            q *= rho
            return q
        p = coef[-1].copy()
        for c in coef[-2::-1]:
            p *= rho
            p += c
        return p

    _PRE_TOL = 1e-8  # truncation tolerance of the low-degree pre-solve
    _START_TOL = 1e-4  # truncation tolerance of the first Newton step
    # largest final correction taken with the pre-solve's derivative: its
    # error is the correction times the relative error of that derivative
    # (below ~1e-5), so at most ~1e-12 and typically far less
    _ACCEPT = 1e-7

    def _solve(self, rho0, s, rhs, Hr, Hc, K, outer, exact_derivative=False, K_pre=None, K_start=None):
        """Roots of the degree-``K`` equation.

        Without ``K_pre``: Newton at degree ``K``.  With it: one Newton step at
        degree ``K_start`` (truncated to ``_START_TOL``), Newton at degree
        ``K_pre`` (truncated to ``_PRE_TOL``), then one correction with the
        degree-``K`` value and the pre-solve's last derivative; entries whose
        correction exceeds ``_ACCEPT`` get full-degree Newton iterations.
        Returns ``rho`` and the series' value and derivative there (the
        derivative exactly only with ``exact_derivative``; else that of a
        point within ~1e-5)."""
        sa = self.sa
        ks, coef = self._coeffs(Hr, Hc, K, outer)

        def make(cf):
            def fun(rho):
                p, dp = self._horner(rho, cf, ks)
                g = p * -sa
                g += s * rho
                g -= rhs
                dg = dp * -sa
                dg += s
                return g, dg, p, dp

            return fun

        if K_pre is None or K_pre >= K - 2:
            rho, (_, _, p, dp), step = newton(make(coef), rho0, tol=self.tol, full=True)
            if exact_derivative:  # the NTK needs E[phi' phi'] at the returned iterate
                p, dp = self._horner(rho, coef, ks)
            else:  # values at the previous iterate, moved to the returned one to first order
                p += dp * step
            return rho, p, dp

        rho = rho0
        if K_start is not None and K_start < K_pre:
            g, dg, _, _ = make(coef[: max(1, int(np.count_nonzero(ks <= K_start)))])(rho)
            g /= dg
            rho = np.subtract(rho, g, out=g)
            np.clip(rho, -1.0, 1.0, out=rho)
        n_pre = max(1, int(np.count_nonzero(ks <= K_pre)))
        rho, (_, dg, _, dp), _ = newton(make(coef[:n_pre]), rho, tol=self._PRE_TOL, max_iter=8, strict=False, full=True)
        # full-degree value, pre-solve derivative
        p = self._horner_value(rho, coef)
        g = p * -sa
        g += s * rho
        g -= rhs
        g /= dg
        new = np.subtract(rho, g, out=g)
        np.clip(new, -1.0, 1.0, out=new)
        step = new - rho
        p += dp * step
        rho = new
        bad = np.abs(step) > self._ACCEPT
        if exact_derivative:
            p, dp = self._horner(rho, coef, ks)
        if bad.any():
            cb, s_b, rhs_b = coef[:, bad], s[bad], rhs[bad]

            def fun(r):
                pb, dpb = self._horner(r, cb, ks)
                return s_b * r - sa * pb - rhs_b, s_b - sa * dpb, pb, dpb

            rb, (_, _, pb, dpb), sb_ = newton(fun, rho[bad], tol=self.tol, full=True)
            if exact_derivative:
                pb, dpb = self._horner(rb, cb, ks)
            else:
                pb += dpb * sb_
            rho[bad], p[bad], dp[bad] = rb, pb, dpb
        return rho, p, dp

    def chunk(self, P, R, C, kernel):
        sa, sb = self.sa, self.sb
        s = R.s[:, None] * C.s[None, :]
        rhs = sb * P
        nsum = R.n_sq[:, None] + C.n_sq[None, :]
        dup = (nsum - 2.0 * P) <= 1e-13 * nsum
        zero = s <= 1e-300
        special = dup | zero
        has_special = bool(special.any())
        s_safe = np.where(zero, 1.0, s) if has_special else s
        Hr, Hc = R.H, C.H
        rho0 = rhs + sa * np.multiply.outer(Hr[:, 0], Hc[:, 0])
        rho0 /= s_safe - sa * np.multiply.outer(Hr[:, 1], Hc[:, 1])
        np.clip(rho0, -1.0, 1.0, out=rho0)
        if has_special:
            rho0[special] = 0.0
        scale = float(max(np.max(R.a, initial=0.0), np.max(C.a, initial=0.0), 1e-300))
        ntk = kernel == "ntk"
        bounds = (
            np.max(R.tail, axis=0, initial=0.0),
            np.max(C.tail, axis=0, initial=0.0),
            np.max(R.dtail, axis=0, initial=0.0),
            np.max(C.dtail, axis=0, initial=0.0),
            scale,
            ntk,
        )
        abs0 = np.abs(rho0)
        # bulk: the whole chunk at the degree of a split correlation chosen to
        # minimise (chunk size x degree + 2 x near entries x their degrees)
        cands = np.array([0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
        Kc = self._degrees(np.minimum(cands + self._MARGIN, 1.0), *bounds)
        k_top = int(min(self._degrees(min(1.0, float(np.max(abs0, initial=0.0)) + self._MARGIN), *bounds)[0], self.K))
        best = None
        for cand, k_c in zip(cands, Kc):
            if k_c > self.K:
                continue
            n_near = int(np.count_nonzero(abs0 > cand))
            cost = abs0.size * max(k_c, 1) + 2 * n_near * k_top
            if best is None or cost < best[0]:
                best = (cost, cand, int(k_c))
        if best is None:
            split, K_bulk = 0.0, 1
        else:
            _, split, K_bulk = best
        r_split = min(1.0, split + self._MARGIN)
        K_pre = int(self._degrees(r_split, *bounds, tol=self._PRE_TOL)[0])
        K_start = int(self._degrees(r_split, *bounds, tol=self._START_TOL)[0])
        # entries starting beyond the split are solved again below: kept out of
        # the bulk iteration (a zero right-hand side), they do not hold up its convergence
        far = abs0 > split
        has_far = bool(far.any())
        rhs_bulk = np.where(far, 0.0, rhs) if has_far else rhs
        rho_bulk = np.where(far, 0.0, rho0) if has_far else rho0
        rho, p, dp = self._solve(rho_bulk, s_safe, rhs_bulk, Hr, Hc, max(K_bulk, 1), True, ntk, K_pre, K_start)
        near = np.abs(rho) > split + self._MARGIN
        near |= far
        if has_special:
            near &= ~special
        if near.any():
            ii, jj = np.nonzero(near)
            start = np.where(far[ii, jj], rho0[ii, jj], rho[ii, jj])
            vals = self._near(start, s_safe[ii, jj], rhs[ii, jj], R, C, ii, jj, ntk, bounds)
            rho[ii, jj], p[ii, jj], dp[ii, jj] = vals
        if kernel == "ck":
            out = s * rho
        elif kernel == "feature":
            out = p
        else:
            dp /= s_safe
            dp *= -sa
            dp += 1.0
            out = p / dp
        if has_special:
            if dup.any():
                di, dj = np.nonzero(dup)
                a = R.a[di]
                feat = (a - sb * R.n_sq[di]) / sa
                out[di, dj] = a if kernel == "ck" else (feat if kernel == "feature" else feat / (1.0 - sa * R.d2[di]))
            if zero.any():
                feat0 = np.multiply.outer(Hr[:, 0], Hc[:, 0])[zero]
                out[zero] = sa * feat0 + rhs[zero] if kernel == "ck" else feat0
        return out

    def _near(self, rho0, s, rhs, R, C, ii, jj, ntk, bounds):
        """Entries with large correlations: sorted groups at their own degree,
        two-dimensional quadrature where the Hermite bound is not met."""
        rho, p, dp = np.empty_like(rho0), np.empty_like(rho0), np.empty_like(rho0)
        order = np.argsort(np.abs(rho0))
        polar = []
        for g0 in range(0, len(order), self._GROUP):
            idx = order[g0 : g0 + self._GROUP]
            rmax = min(1.0, float(np.max(np.abs(rho0[idx]))) + self._MARGIN)
            K = int(self._degrees(rmax, *bounds)[0])
            K_pre = int(self._degrees(rmax, *bounds, tol=self._PRE_TOL)[0])
            K_start = int(self._degrees(rmax, *bounds, tol=self._START_TOL)[0])
            K = max(1, min(K, self.K))
            Hr, Hc = R.H[ii[idx], : K + 1], C.H[jj[idx], : K + 1]
            r_, p_, dp_ = self._solve(rho0[idx], s[idx], rhs[idx], Hr, Hc, K, False, ntk, K_pre, K_start)
            # exact per-entry bound at the final correlation
            ar = np.abs(r_)
            with np.errstate(under="ignore"):
                bound = self.sa * ar ** (K + 1) * np.sqrt(R.tail[ii[idx], K] * C.tail[jj[idx], K])
                if ntk:
                    bound = np.maximum(
                        bound, self.sa * ar**K * np.sqrt(R.dtail[ii[idx], K] * C.dtail[jj[idx], K]) * s[idx]
                    )
            bad = bound > self.tol * np.maximum(bounds[4], 1e-300)
            rho[idx], p[idx], dp[idx] = r_, p_, dp_
            if bad.any():
                polar.append(idx[bad])
        if polar:
            k = np.concatenate(polar)
            rho[k], p[k], dp[k] = self._polar_solve(rho[k], s[k], rhs[k], R.s[ii[k]], C.s[jj[k]])
        return rho, p, dp

    def _polar_solve(self, rho0, s, rhs, si, sj):
        sa = self.sa
        f, df = self._f, self.act.derivative

        def fun(rho):
            p = polar_expectation(f, f, si, sj, rho, self.bps)
            dp = polar_expectation(df, df, si, sj, rho, self.bps) * s
            return s * rho - sa * p - rhs, s - sa * dp

        rho = safeguarded_newton(fun, rho0, tol=self.tol)
        p = polar_expectation(f, f, si, sj, rho, self.bps)
        dp = polar_expectation(df, df, si, sj, rho, self.bps) * s
        return rho, p, dp


def dual_for(act: Activation, sa: float, sb: float, c: float, tol: float) -> _Dual:
    """The solver of ``act``, chosen by its :class:`DualFormula` (``act.dual``).

    The table inversion for piecewise-linear formulas (``slopes``), the
    formula's closed forms for the others the engine may use
    (``implicit``), and the Hermite expansion where there is no formula.
    """
    formula = act.dual
    if formula is None or not formula.implicit:
        return _MehlerDual(act, sa, sb, c, tol)
    if formula.slopes is not None:
        return _ReluDual(act, sa, sb, c, tol, formula)
    return _ClosedFormDual(act, sa, sb, c, tol, formula)
