"""The Hermite-series Newton of the exact implicit engine, written once for numpy and torch.

An activation without a closed-form dual (and every activation on a torch
device except leaky ReLU) has its dual written as the Mehler series
``F_c(G) = sum_k h_k(i) h_k(j) rho^k``, ``h_k(i)`` the normalised Hermite
coefficients of ``phi0(sqrt(a_i) xi) - c`` (see
:class:`~sk_deq.kernels._mehler.MehlerDual`).  The truncation error after
degree ``K`` is at most ``|rho|^(K+1) sqrt(tail_i(K) tail_j(K))`` with the
exact tails from Parseval, so the degree follows each entry's correlation:
the whole block at the degree of a split correlation, the entries above it
gathered, sorted and solved in groups at their own degrees, and the few
entries no degree up to the largest resolves by two-dimensional quadrature
(on the host).  Duplicate samples and zero-norm rows get exact values.

:class:`HermiteSeries` solves a block for arrays of either library: its
:class:`ArrayOps` names the namespace (``numpy`` or ``torch``) and the few
operations the two spell differently (:data:`NUMPY_OPS` here, the torch
counterpart in :mod:`sk_deq.kernels.torch_engine`).  The degree choice
always runs on the host, in numpy.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple
from collections.abc import Callable

import numpy as np

from ._compiled import compiled_series
from ._numerics import newton

__all__ = ["NUMPY_OPS", "ArrayOps", "HermiteSeries", "numpy_ops"]

_MARGIN = 0.05  # correlation margin of the degree choice
_PRE_TOL = 1e-8  # truncation tolerance of the low-degree pre-solve
_START_TOL = 1e-4  # truncation tolerance of the first Newton step
#: What a degree of an entry near correlation one costs, in degrees of the bulk's entries: the near ones are
#: gathered, sorted and summed one at a time, the bulk's in rows the compiled loops vectorise
#: (``python -m benchmarks.kernels exact``; the benchmarks page, "How the defaults were chosen").
_NEAR_COST = 12
_SPLITS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class ArrayOps(NamedTuple):
    """The array namespace a :class:`HermiteSeries` computes in, and what it spells its own way.

    Attributes
    ----------
    xp : module
        ``numpy`` or ``torch``: ``where``, ``outer``, ``clip``, ``subtract``,
        ``sqrt``, ``maximum``, ``argsort``, ``concatenate``, ``zeros_like`` and
        ``empty_like`` are taken from it.
    addr_ : callable
        ``addr_(t, a, b)`` adds the outer product of ``a`` and ``b`` to ``t`` in place.
    addcmul_ : callable
        ``addcmul_(t, a, b)`` adds ``a * b`` to ``t`` in place.
    nonzero : callable
        ``nonzero(mask)``: the tuple of index arrays of the true entries.
    to_host : callable
        ``to_host(x)``: ``x`` as a numpy array.
    from_host : callable
        ``from_host(x, like)``: the numpy array ``x`` as an array like ``like``.
    cache_terms : bool
        Whether the series coefficients of a block are kept once computed
        (else recomputed in place at every evaluation: no memory beyond the block's).
    compiled : CompiledSeries or None
        Compiled loops that sum the series and its equations instead
        (:mod:`sk_deq.kernels._compiled`, numpy arrays only), or None.
    """

    xp: Any
    addr_: Callable
    addcmul_: Callable
    nonzero: Callable
    to_host: Callable
    from_host: Callable
    cache_terms: bool
    compiled: Any = None


def _np_addr(t, a, b):
    t += np.multiply.outer(a, b)
    return t


def _np_addcmul(t, a, b):
    t += a * b
    return t


#: :class:`ArrayOps` of numpy (the engine without a device).
NUMPY_OPS = ArrayOps(np, _np_addr, _np_addcmul, np.nonzero, lambda x: x, lambda x, like: x, True)


def numpy_ops() -> ArrayOps:
    """:data:`NUMPY_OPS`, with the compiled series where numba is installed and not turned off (:mod:`._compiled`)."""
    compiled = compiled_series()
    return NUMPY_OPS if compiled is None else NUMPY_OPS._replace(cache_terms=False, compiled=compiled)


class _OuterTerms:
    """Coefficients ``c_k = Hr[:, k] Hc[:, k]^T`` of a block.

    Kept once computed where ``ops.cache_terms`` (small numpy chunks, which
    the Newton iterations evaluate again and again); else never stored, added
    in place (the large blocks of a device).
    """

    paired = False

    def __init__(self, ops, Hr, Hc):
        self.ops, self.Hr, self.Hc = ops, Hr, Hc
        self._cache = {} if ops.cache_terms else None
        self._columns = None

    def _product(self, k):
        return self.ops.xp.outer(self.Hr[:, k], self.Hc[:, k])

    def _add(self, t, k):
        return self.ops.addr_(t, self.Hr[:, k], self.Hc[:, k])

    def _cached(self, k):
        c = self._cache.get(k)
        if c is None:
            c = self._cache[k] = self._product(k)
        return c

    def first(self, k):
        return self._product(k) if self._cache is None else self._cached(k).copy()

    def add_(self, t, k):
        if self._cache is None:
            return self._add(t, k)
        t += self._cached(k)
        return t

    def columns(self, K):
        """``Hc[:, :K + 1]`` transposed, contiguous (numpy; kept for the next evaluation)."""
        if self._columns is None or len(self._columns) <= K:
            self._columns = np.ascontiguousarray(self.Hc[:, : K + 1].T)
        return self._columns

    def take(self, mask):
        ii, jj = self.ops.nonzero(mask)
        return _PairedTerms(self.ops, self.Hr, self.Hc, ii, jj)


class _PairedTerms(_OuterTerms):
    """Coefficients ``c_k = Hr[rows, k] * Hc[cols, k]`` of gathered entries (entry ``e`` is ``(rows[e], cols[e])``).

    The rows are gathered (up to degree ``K``) at the first evaluation of the
    array library's loops; the compiled ones index ``Hr`` and ``Hc`` directly.
    """

    paired = True

    def __init__(self, ops, Hr, Hc, rows, cols, K=None):
        super().__init__(ops, Hr, Hc)
        self.rows, self.cols, self.K = rows, cols, K
        self._gathered = None

    def _pair(self):
        if self._gathered is None:
            top = None if self.K is None else self.K + 1
            self._gathered = self.Hr[self.rows, :top], self.Hc[self.cols, :top]
        return self._gathered

    def _product(self, k):
        hr, hc = self._pair()
        return hr[:, k] * hc[:, k]

    def _add(self, t, k):
        hr, hc = self._pair()
        return self.ops.addcmul_(t, hr[:, k], hc[:, k])

    def take(self, mask):
        return _PairedTerms(self.ops, self.Hr, self.Hc, self.rows[mask], self.cols[mask], self.K)


class _Bounds(NamedTuple):
    """What the truncation bound of a block needs (host arrays), from the largest tails of its rows and columns."""

    root: np.ndarray  # sqrt(tail_r tail_c) per degree
    droot: np.ndarray | None  # sqrt(dtail_r dtail_c) per degree for the NTK, else None
    scale: float
    ntk: bool


def _block_bounds(tail_r, tail_c, dtail_r, dtail_c, scale: float, ntk: bool) -> _Bounds:
    """The :class:`_Bounds` of a block: the products of its tails' square roots, taken once."""
    droot = np.sqrt(dtail_r * dtail_c) if ntk else None
    return _Bounds(np.sqrt(tail_r * tail_c), droot, scale, ntk)


def _copy_into(out, x):
    out[...] = x
    return out


def _amax(x) -> float:
    return float(x.max()) if math.prod(x.shape) else 0.0


class HermiteSeries:
    """Kernel blocks from the truncated Hermite series, by Newton on each entry's correlation.

    Parameters
    ----------
    sa, sb : float
        Weight variances ``sigma_a2`` and ``sigma_b2``.
    tol : float
        Tolerance of every entry.
    max_degree : int
        Largest degree of the series.
    odd : bool
        Whether ``phi0 - c`` is odd (its even coefficients vanish).
    polar : callable
        ``polar(rho0, s, rhs, si, sj) -> (rho, p, dp)`` in numpy: the entries
        no degree resolves, by quadrature.
    ops : ArrayOps
        The array library of the blocks.
    group : int
        Entries above the split solved per group.
    """

    # largest final correction taken with the pre-solve's derivative: its error is
    # the correction times the relative error of that derivative (below ~1e-5),
    # so at most ~1e-12 and typically far less
    _ACCEPT = 1e-7

    def __init__(self, sa, sb, tol, max_degree, odd, polar, ops, group):
        self.sa, self.sb, self.tol, self.K, self.odd = sa, sb, tol, int(max_degree), odd
        self.polar, self.ops, self.group = polar, ops, group

    # -- degrees (on the host, from the exact truncation bounds) ----------------
    def _degrees(self, rho_abs, b: _Bounds, tol=None):
        """Smallest degree meeting the tolerance for each correlation bound (``K + 1`` where none does)."""
        return self._degree_table(rho_abs, b, (self.tol if tol is None else tol,))[0]

    def _degree_table(self, rho_abs, b: _Bounds, tols):
        """:meth:`_degrees` for each tolerance of ``tols`` (rows) at once: one bound, one comparison per tolerance."""
        K = np.arange(self.K + 1)
        rho_abs = np.minimum(np.atleast_1d(np.asarray(rho_abs, dtype=np.float64)), 1.0)
        with np.errstate(under="ignore", divide="ignore"):
            lr = np.log(np.maximum(rho_abs, 1e-300))[:, None]
            bound = self.sa * np.exp(lr * (K + 1)) * b.root
            if b.ntk:
                bound = np.maximum(bound, self.sa * np.exp(lr * K) * b.droot * b.scale)
        ok = bound[None] <= (np.asarray(tols, dtype=np.float64) * b.scale)[:, None, None]
        return np.where(ok.any(axis=2), ok.argmax(axis=2), self.K + 1)

    def _ks(self, K, top=None):
        """The degrees in use up to ``K`` (at least one; up to ``top`` when given)."""
        ks = list(range(1, K + 1, 2)) if self.odd else list(range(K + 1))
        return ks if top is None else ks[: max(1, sum(k <= top for k in ks))]

    def _split(self, size, top, counts, b: _Bounds):
        """Split correlation and bulk degree minimising (entries x degree + ``_NEAR_COST`` x near entries x their degree).

        ``size`` entries start at most ``top`` in absolute value, ``counts[c]``
        of them above ``_SPLITS[c]``.
        """
        Kc = self._degrees(np.fmin(np.append(_SPLITS, top) + _MARGIN, 1.0), b)  # the splits', then the top's (NaN: 1)
        Kc, k_top = Kc[:-1], min(int(Kc[-1]), self.K)
        best = None
        for cand, k_c, count in zip(_SPLITS, Kc, counts):
            if k_c > self.K:
                continue
            cost = size * max(k_c, 1) + _NEAR_COST * int(count) * k_top
            if best is None or cost < best[0]:
                best = (cost, cand, int(k_c))
        return (0.0, 1) if best is None else best[1:]

    # -- the truncated series -------------------------------------------------
    def _series(self, rho, terms, ks, derivative=True):
        """Value and (unless not ``derivative``) rho-derivative of ``sum_{k in ks} c_k rho^k`` (Horner)."""
        if self.ops.compiled is not None:
            return self.ops.compiled.evaluate(rho, terms, ks, self.odd, derivative)
        x = rho * rho if self.odd else rho  # odd: rho q(rho^2)
        p = terms.first(ks[-1])
        dp = self.ops.xp.zeros_like(p) if derivative else None
        for k in ks[-2::-1]:
            if derivative:
                dp *= x
                dp += p
            p *= x
            terms.add_(p, k)
        if self.odd:
            if derivative:
                dp *= 2.0 * x
                dp += p
            p *= rho
        return p, dp

    def _equation(self, s, rhs, terms, ks):
        """``rho -> (g, dg, p, dp)`` of ``g(rho) = s rho - sa sum_k c_k rho^k - rhs``."""
        sa = self.sa
        if self.ops.compiled is not None:
            return lambda rho: self.ops.compiled.evaluate(rho, terms, ks, self.odd, equation=(sa, s, rhs))

        def fun(rho):
            p, dp = self._series(rho, terms, ks)
            g = p * -sa
            g += s * rho
            g -= rhs
            dg = dp * -sa
            dg += s
            return g, dg, p, dp

        return fun

    def _solve(self, rho0, s, rhs, terms, K, exact_derivative, K_pre=None, K_start=None):
        """Roots of the degree-``K`` equation.

        Without ``K_pre``: Newton at degree ``K``.  With it: one Newton step at
        degree ``K_start`` (truncated to ``_START_TOL``), Newton at degree
        ``K_pre`` (truncated to ``_PRE_TOL``), then one correction with the
        degree-``K`` value and the pre-solve's last derivative; entries whose
        correction exceeds ``_ACCEPT`` get full-degree Newton iterations.
        ``rho0`` lies in [-1, 1], as every start here does (a block's start is
        clipped, and so is every Newton step).  Returns ``rho`` and the
        series' value and derivative there (the
        derivative exactly only with ``exact_derivative``; else that of a
        point within ~1e-5).
        """
        xp, ks = self.ops.xp, self._ks(K)
        if K_pre is None or K_pre >= K - 2:
            eq, at = self._equation(s, rhs, terms, ks), self._stepper(s, rhs, terms, ks, ("p", "dp", "step"))
            rho, (_, _, p, dp), step = newton(eq, rho0, tol=self.tol, full=True, xp=xp, step_at=at, clipped=True)
            if exact_derivative:  # the NTK needs E[phi' phi'] at the returned iterate
                return (rho, *self._series(rho, terms, ks))
            p += dp * step  # values at the previous iterate, moved to the returned one to first order
            return rho, p, dp
        rho = rho0
        if K_start is not None and K_start < K_pre:
            rho = self._step(rho, s, rhs, terms, self._ks(K, K_start))
        ks_pre = self._ks(K, K_pre)
        pre, at = self._equation(s, rhs, terms, ks_pre), self._stepper(s, rhs, terms, ks_pre, ("dg", "dp"))
        rho, (_, dg, _, dp), _ = newton(
            pre, rho, tol=_PRE_TOL, max_iter=8, strict=False, full=True, xp=xp, step_at=at, clipped=True
        )
        rho, p, step, delta = self._correct(rho, s, rhs, terms, ks, dg, dp)  # full-degree value, pre-solve slopes
        if exact_derivative:
            p, dp = self._series(rho, terms, ks)
        bad = None if delta <= self._ACCEPT else abs(step) > self._ACCEPT  # a NaN delta: check every step
        if bad is not None and bad.any():
            rho[bad], p[bad], dp[bad] = self._solve(rho[bad], s[bad], rhs[bad], terms.take(bad), K, exact_derivative)
        return rho, p, dp

    def _stepper(self, s, rhs, terms, ks, keep):
        """Whole Newton steps of :meth:`_equation` in one compiled pass, or None (``newton``'s own steps).

        Of the evaluation and the step, only those named in ``keep`` come back.
        """
        compiled = self.ops.compiled
        if compiled is None:
            return None
        return lambda rho: compiled.newton_step(rho, terms, ks, self.odd, (self.sa, s, rhs), keep)

    def _step(self, rho, s, rhs, terms, ks):
        """One Newton step at degrees ``ks`` (clipped)."""
        if self.ops.compiled is not None:
            return self.ops.compiled.newton_step(rho, terms, ks, self.odd, (self.sa, s, rhs), keep=())[0]
        g, dg, _, _ = self._equation(s, rhs, terms, ks)(rho)
        g /= dg
        rho = self.ops.xp.subtract(rho, g, out=g)
        self.ops.xp.clip(rho, -1.0, 1.0, out=rho)
        return rho

    def _correct(self, rho, s, rhs, terms, ks, dg, dp):
        """A Newton step with the series at degrees ``ks`` and the slopes ``dg``, ``dp`` of a nearby point:
        ``(new, p, step, delta)``, ``p`` the series' value at ``rho`` moved to ``new`` to first order,
        ``delta`` at least ``max |step|`` (NaN: not known)."""
        if self.ops.compiled is not None:
            return self.ops.compiled.correct(rho, terms, ks, self.odd, (self.sa, s, rhs), dg, dp)
        xp = self.ops.xp
        p, _ = self._series(rho, terms, ks, derivative=False)
        g = p * -self.sa
        g += s * rho
        g -= rhs
        g /= dg
        new = xp.subtract(rho, g, out=g)
        xp.clip(new, -1.0, 1.0, out=new)
        step = new - rho
        p += dp * step
        return new, p, step, float("nan")  # no bound on the steps: every one checked

    # -- one block ----------------------------------------------------------------
    def block(self, P, R, C, hR, hC, kernel, out=None):
        """The block of ``kernel`` between rows ``R`` and columns ``C`` (written into ``out`` when given).

        ``P`` holds their inner products; ``R`` and ``C`` (arrays of the
        library of ``ops``) carry ``n_sq``, ``a``, ``s``, ``H``, ``d2``,
        ``tail`` and ``dtail``; ``hR`` and ``hC`` the same samples' ``a``,
        ``tail`` and ``dtail`` on the host.
        """
        s, rhs, rho0, dup, zero, counts, top = self._start(P, R, C)
        special = dup | zero
        has_special = bool(special.any())
        scale = float(max(np.max(hR.a, initial=0.0), np.max(hC.a, initial=0.0), 1e-300))
        tails = [hR.largest("tail"), hC.largest("tail"), hR.largest("dtail"), hC.largest("dtail")]
        b = _block_bounds(*tails, scale, kernel == "ntk")
        choice = self._split(math.prod(rho0.shape), top, counts, b)
        rho, p, dp = self._correlations(rho0, s, rhs, R, C, special if has_special else None, b, choice)
        xp = self.ops.xp
        if kernel == "ck":
            out = xp.multiply(s, rho, out=out)
        elif kernel == "feature":
            out = p if out is None else _copy_into(out, p)
        else:
            dp /= s
            dp *= -self.sa
            dp += 1.0
            out = xp.divide(p, dp, out=out)
        if has_special:
            self._special_values(out, kernel, dup, zero, R, C, rhs)
        return out

    def _start(self, P, R, C):
        """``(s, rhs, rho0, dup, zero, counts, top)`` of a block (see :meth:`CompiledSeries.block_start`).

        ``s`` is one where it vanishes; ``rho0``, the linear part of the series
        solved, ``F(G) = h_0 h_0 + h_1 h_1 rho + O(rho^2)``, is zero at
        duplicate and zero-norm entries.
        """
        if self.ops.compiled is not None:
            return self.ops.compiled.block_start(P, R, C, self.sa, self.sb, _SPLITS)
        xp = self.ops.xp
        s = R.s[:, None] * C.s[None, :]
        rhs = self.sb * P
        nsum = R.n_sq[:, None] + C.n_sq[None, :]
        dup = (nsum - 2.0 * P) <= 1e-13 * nsum
        zero = s <= 1e-300
        special = dup | zero
        has_special = bool(special.any())
        s = xp.where(zero, 1.0, s) if has_special else s
        rho0 = rhs + self.sa * xp.outer(R.H[:, 0], C.H[:, 0])
        rho0 /= s - self.sa * xp.outer(R.H[:, 1], C.H[:, 1])
        xp.clip(rho0, -1.0, 1.0, out=rho0)
        if has_special:
            rho0[special] = 0.0
        abs0 = abs(rho0)
        counts = [int(xp.count_nonzero(abs0 > cand)) for cand in _SPLITS]
        return s, rhs, rho0, dup, zero, counts, _amax(abs0)

    def _correlations(self, rho0, s, rhs, R, C, special, b: _Bounds, choice):
        """Every entry's correlation and series value and slope: the bulk at one degree, then the near entries.

        ``choice`` is :meth:`_split`'s: the split correlation and the bulk's degree.
        """
        split, K_bulk = choice
        K_pre, K_start = (
            int(k) for k in self._degree_table(min(1.0, split + _MARGIN), b, (_PRE_TOL, _START_TOL))[:, 0]
        )
        # entries starting beyond the split are solved again below: kept out of
        # the bulk iteration (a zero right-hand side), they do not hold up its convergence
        rho_bulk, rhs_bulk = self._bulk_inputs(rho0, rhs, split)
        terms = _OuterTerms(self.ops, R.H, C.H)
        rho, p, dp = self._solve(rho_bulk, s, rhs_bulk, terms, max(K_bulk, 1), b.ntk, K_pre, K_start)
        ii, jj, start = self._near_entries(rho, rho0, split, split + _MARGIN, special)
        if len(ii):
            rho[ii, jj], p[ii, jj], dp[ii, jj] = self._near(start, s[ii, jj], rhs[ii, jj], R, C, ii, jj, b)
        return rho, p, dp

    def _bulk_inputs(self, rho0, rhs, split):
        """``rho0`` and ``rhs``, zero where ``|rho0| > split``."""
        if self.ops.compiled is not None:
            return self.ops.compiled.bulk_inputs(rho0, rhs, split)
        xp = self.ops.xp
        far = abs(rho0) > split
        if not bool(far.any()):
            return rho0, rhs
        return xp.where(far, 0.0, rho0), xp.where(far, 0.0, rhs)

    def _near_entries(self, rho, rho0, split, limit, special):
        """Rows, columns and starts of the entries left to :meth:`_near`: ``|rho| > limit`` or
        ``|rho0| > split`` (starting from ``rho0`` there, else from ``rho``), not ``special``."""
        if self.ops.compiled is not None:
            return self.ops.compiled.near_entries(rho, rho0, split, limit, special)
        xp = self.ops.xp
        far = abs(rho0) > split
        near = abs(rho) > limit
        near |= far
        if special is not None:
            near &= ~special
        ii, jj = self.ops.nonzero(near)
        return ii, jj, xp.where(far[ii, jj], rho0[ii, jj], rho[ii, jj])

    def _near(self, rho0, s, rhs, R, C, ii, jj, b: _Bounds):
        """Entries with large correlations: sorted groups at their own degree,
        two-dimensional quadrature where the Hermite bound is not met."""
        xp = self.ops.xp
        rho, p, dp = xp.empty_like(rho0), xp.empty_like(rho0), xp.empty_like(rho0)
        order = xp.argsort(abs(rho0))
        polar = []
        for g0 in range(0, len(order), self.group):
            idx = order[g0 : g0 + self.group]
            rmax = _amax(abs(rho0[idx])) + _MARGIN
            K, K_pre, K_start = (
                int(k) for k in self._degree_table(min(1.0, rmax), b, (self.tol, _PRE_TOL, _START_TOL))[:, 0]
            )
            K = max(1, min(K, self.K))
            gi, gj = ii[idx], jj[idx]
            terms = _PairedTerms(self.ops, R.H, C.H, gi, gj, K)
            r_, p_, dp_ = self._solve(rho0[idx], s[idx], rhs[idx], terms, K, b.ntk, K_pre, K_start)
            # exact per-entry bound at the final correlation
            ar = abs(r_)
            with np.errstate(under="ignore"):
                bound = self.sa * ar ** (K + 1) * xp.sqrt(R.tail[gi, K] * C.tail[gj, K])
                if b.ntk:
                    bound = xp.maximum(bound, self.sa * ar**K * xp.sqrt(R.dtail[gi, K] * C.dtail[gj, K]) * s[idx])
            bad = bound > self.tol * max(b.scale, 1e-300)
            rho[idx], p[idx], dp[idx] = r_, p_, dp_
            if bad.any():
                polar.append(idx[bad])
        if polar:
            k = xp.concatenate(polar)
            host = [self.ops.to_host(t) for t in (rho[k], s[k], rhs[k], R.s[ii[k]], C.s[jj[k]])]
            rho[k], p[k], dp[k] = (self.ops.from_host(v, rho) for v in self.polar(*host))
        return rho, p, dp

    def _special_values(self, out, kernel, dup, zero, R, C, rhs):
        """Exact values of duplicate samples (the diagonal's) and of zero-norm rows, written into ``out``."""
        sa, sb = self.sa, self.sb
        if dup.any():
            di, dj = self.ops.nonzero(dup)
            a = R.a[di]
            feat = (a - sb * R.n_sq[di]) / sa
            out[di, dj] = a if kernel == "ck" else (feat if kernel == "feature" else feat / (1.0 - sa * R.d2[di]))
        if zero.any():
            feat0 = self.ops.xp.outer(R.H[:, 0], C.H[:, 0])[zero]
            out[zero] = sa * feat0 + rhs[zero] if kernel == "ck" else feat0
