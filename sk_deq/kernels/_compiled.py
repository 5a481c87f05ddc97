"""The Hermite series of the numpy engine and the ReLU table's inversion, compiled when numba is installed.

:class:`~sk_deq.kernels._series.HermiteSeries` spends most of a generic
activation's kernel (tanh, SiLU, any callable) summing the series
``sum_k h_k(i) h_k(j) rho^k`` by Horner's rule, and the Newton equation
around it.  In numpy that is a handful of whole-array operations per degree:
memory-bound, and each one a call back into the interpreter, which the
engine's threads must take turns at.  Here the same sums run in one compiled
pass that holds no interpreter lock, so the threads truly run side by side.
The same pass also finishes a whole Newton step (the step, its clipping and
the largest step) or the final correction, and three more passes do the
rest of a block around the solve: its start, the bulk's inputs and the
gathering of the entries near correlation one.
The (leaky) ReLU kernel's inversion of its correlation equation, a
piecewise-cubic table (``_ReluDual._invert``), is a dozen whole-array
operations per entry in numpy; compiled, it is one pass too.

The compiled loops perform the numpy code's operations on every entry in the
same order, each rounded once (numba does not fuse a product and a sum unless
asked to), so both give the same bits; ``tests/kernels/test_compiled.py``
checks it.  numba is optional (``pip install sk_deq[fast]``): without it, or
with the environment variable ``SK_DEQ_COMPILED=0``, the engine runs the
numpy code.  The loops are compiled at their first use (about two seconds)
and cached on disk where numba can write; a later process imports numba and
loads them in a few tenths of a second.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

import numpy as np

__all__ = ["COMPILED_ENV", "CompiledSeries", "compiled_series", "jit_loops"]

#: The environment variable that, set to ``'0'``, keeps the exact kernels on numpy's loops even with numba installed.
COMPILED_ENV = "SK_DEQ_COMPILED"


def compiled_series() -> CompiledSeries | None:
    """The compiled Horner sums, or None without numba or with ``SK_DEQ_COMPILED=0``.

    Returns
    -------
    CompiledSeries or None
        What :class:`~sk_deq.kernels._series.HermiteSeries` evaluates its
        series and equations with, when not None.
    """
    if os.environ.get(COMPILED_ENV, "").strip() == "0":
        return None
    with _BUILD_LOCK:  # the engine's threads ask at once: one set of loops, compiled (or loaded) once
        return _build()


_BUILD_LOCK = threading.Lock()


@functools.cache
def _build() -> CompiledSeries | None:
    loops = jit_loops(LOOPS, (_clip1, _tail, _nonneg, _horner_rest, _abs_max, _bits_value))
    return None if loops is None else CompiledSeries(*loops)


_JITABLE: set = set()


def jit_loops(loops, helpers=()) -> list | None:
    """``loops`` compiled without the interpreter lock (with ``helpers``, the functions they call), or None without numba."""
    try:
        import numba
    except ImportError:
        return None
    options: dict[str, Any] = {"nogil": True, "boundscheck": False, "error_model": "numpy"}
    for helper in helpers:
        if helper not in _JITABLE:  # once each: a second overload of the same function would be ambiguous
            numba.extending.register_jitable(helper)
            _JITABLE.add(helper)
    try:  # cached on disk where numba finds a writable place (NUMBA_CACHE_DIR, the package, the user's cache)
        jit = numba.njit(cache=True, **options)
        return [jit(f) for f in loops]
    except RuntimeError:  # no place to cache: compiled in every process
        jit = numba.njit(cache=False, **options)
        return [jit(f) for f in loops]


class CompiledSeries:
    """Series values, slopes and Newton equations of a block's entries, in compiled loops.

    Parameters
    ----------
    outer, paired, table, start, bulk, near, tails : callable
        The compiled :data:`LOOPS`.
    """

    def __init__(self, outer, paired, table, start, bulk, near, tails):
        self._outer, self._paired, self._table = outer, paired, table
        self._start, self._bulk, self._near, self._tails = start, bulk, near, tails

    def tails(self, a, H, V, d2):
        """``MehlerDual._tails``' ``tail`` and ``dtail`` of samples (rows of ``H``), in one pass, numpy's bits."""
        H = np.ascontiguousarray(H, dtype=np.float64)
        tail, dtail = np.empty_like(H), np.empty_like(H)
        V, ad2 = np.ascontiguousarray(V, dtype=np.float64), np.ascontiguousarray(a * d2, dtype=np.float64)
        self._tails(H, V, ad2, tail, dtail)
        return tail, dtail

    def block_start(self, P, R, C, sa: float, sb: float, splits):
        """``HermiteSeries.block``'s start of the block ``P`` between samples ``R`` and ``C``, in one pass.

        Returns ``(s, rhs, rho0, dup, zero, counts, top)``: ``s`` with ones
        where it vanishes, the start ``rho0`` (zero at duplicate and
        zero-norm entries), how many ``|rho0|`` exceed each of ``splits``
        and the largest.
        """
        P = np.ascontiguousarray(P, dtype=np.float64)
        s, rhs, rho0 = (np.empty_like(P) for _ in range(3))
        dup, zero = np.empty(P.shape, dtype=np.bool_), np.empty(P.shape, dtype=np.bool_)
        counts = np.empty(len(splits), dtype=np.int64)
        vec = [np.ascontiguousarray(v, dtype=np.float64) for v in (R.s, C.s, R.n_sq, C.n_sq)]
        vec += [np.ascontiguousarray(H[:, k], dtype=np.float64) for k in (0, 1) for H in (R.H, C.H)]
        top = self._start(
            P, *vec, float(sa), float(sb), np.asarray(splits, dtype=np.float64), s, rhs, rho0, dup, zero, counts
        )
        return s, rhs, rho0, dup, zero, counts, float(top)

    def table_inverse(self, r, coef, h_hi: float, inv_dv: float, top: float, si=None, sj=None, out=None):
        """The piecewise-cubic inverse of ``_ReluDual``'s table at the 2-d ``r``, numpy's bits, and its low entries.

        ``coef`` holds the four coefficient rows of the cubics in ``v =
        sqrt(h_hi - r) inv_dv`` (clipped to ``[0, top]``), one cubic per
        integer part of ``v``.  With ``si`` and ``sj`` every entry not below
        -0.75 is also scaled, ``(rho si[i]) sj[j]``.  Returns ``(rho, low)``,
        ``low`` the entries below -0.75 (left unscaled: the caller refines
        them first).  ``rho`` is ``out`` when given: a float64 array of
        ``r``'s shape with unit column stride (a block of a larger matrix).
        """
        r = np.ascontiguousarray(r, dtype=np.float64)
        if out is None or out.dtype != np.float64 or out.shape != r.shape or out.strides[1] != 8:
            out = np.empty_like(r)
        low = np.empty(r.shape, dtype=np.bool_)
        scale = si is not None
        si, sj = (np.ascontiguousarray(v, dtype=np.float64) for v in ((si, sj) if scale else ((), ())))
        coef = np.ascontiguousarray(coef, dtype=np.float64)
        self._table(r, coef, h_hi, inv_dv, top, scale, si, sj, out, low)
        return out, low

    def bulk_inputs(self, rho0, rhs, split: float):
        """``HermiteSeries._correlations``' bulk start and right-hand side (zero where ``|rho0| > split``), one pass.

        Returns ``(rho, rhs)``.
        """
        rho_b, rhs_b = np.empty_like(rho0), np.empty_like(rhs)
        self._bulk(rho0, rhs, float(split), rho_b, rhs_b)
        return rho_b, rhs_b

    def near_entries(self, rho, rho0, split: float, limit: float, special):
        """Rows, columns and starts of the entries ``|rho| > limit`` or ``|rho0| > split``, not ``special``.

        The start is ``rho0`` where ``|rho0| > split``, else ``rho``.
        """
        has = special is not None
        special = special if has else np.empty((0, 0), dtype=np.bool_)
        size = rho.size // 16 + 16
        while True:  # a second pass when the guess was short
            ii, jj, start = np.empty(size, np.int64), np.empty(size, np.int64), np.empty(size)
            count = self._near(rho, rho0, float(split), float(limit), special, has, ii, jj, start)
            if count <= size:
                return ii[:count], jj[:count], start[:count]
            size = count

    def evaluate(self, rho, terms, ks, odd, derivative=True, equation=None):
        """``sum_{k in ks} c_k rho^k`` and its slope; with ``equation = (sa, s, rhs)`` also ``g`` and ``g'``.

        ``g(rho) = s rho - sa sum_k c_k rho^k - rhs`` is the Newton equation of
        every entry.  ``terms`` are the block's coefficients (whole block or
        gathered entries); ``ks`` the degrees in use, ascending, every one
        (``odd=False``) or every other one from 1 (``odd=True``).

        Returns
        -------
        tuple
            ``(p, dp)`` (``dp`` None without ``derivative``), or
            ``(g, dg, p, dp)`` with an ``equation``.
        """
        rho = np.ascontiguousarray(rho, dtype=np.float64)
        p, dp = np.empty_like(rho), np.empty_like(rho)
        if equation is None:
            none = np.empty((0,) * rho.ndim)  # same types as with an equation: one compiled version
            self._run(rho, terms, ks, odd, derivative, SUMS, 0.0, none, none, p, dp, none, none, none, none)
            return p, (dp if derivative else None)
        g, dg = np.empty_like(rho), np.empty_like(rho)
        self._run(rho, terms, ks, odd, True, EQUATION, *equation, p, dp, g, dg, g[:0], g[:0])
        return g, dg, p, dp

    def newton_step(self, rho, terms, ks, odd, equation, keep=("g", "dg", "p", "dp", "step")):
        """One step of :func:`~sk_deq.kernels._numerics.newton` on the equation, its bits, in one pass.

        Returns ``(new, (g, dg, p, dp), step, delta)``: the clipped iterate,
        the evaluation at ``rho``, ``new - rho`` and ``max |step|`` (NaN
        where a step is).  Of ``g``, ``dg``, ``p``, ``dp`` and ``step`` only
        those named in ``keep`` are written (the others are None; gathered
        entries keep all).
        """
        rho = np.ascontiguousarray(rho, dtype=np.float64)
        names = ("g", "dg", "p", "dp", "step")
        keep = names if terms.paired else keep
        g, dg, p, dp, step = (np.empty_like(rho) if k in keep else rho[:0] for k in names)
        new = np.empty_like(rho)
        delta = self._run(rho, terms, ks, odd, True, STEP, *equation, p, dp, g, dg, new, step)
        g, dg, p, dp, step = (v if k in keep else None for k, v in zip(names, (g, dg, p, dp, step)))
        return new, (g, dg, p, dp), step, delta

    def correct(self, rho, terms, ks, odd, equation, dg, dp):
        """``HermiteSeries._solve``'s correction, its bits, in one pass: a Newton step with the series at
        degree ``ks[-1]`` and the pre-solve's slopes ``dg``, ``dp`` (the value ``p`` moved along).

        Returns ``(new, p, step, delta)`` as :meth:`newton_step` does.
        """
        rho = np.ascontiguousarray(rho, dtype=np.float64)
        dg, dp = (np.ascontiguousarray(v, dtype=np.float64) for v in (dg, dp))
        p, g, new, step = (np.empty_like(rho) for _ in range(4))
        delta = self._run(rho, terms, ks, odd, False, CORRECT, *equation, p, dp, g, dg, new, step)
        return new, p, step, delta

    def _run(self, rho, terms, ks, odd, derivative, mode, sa, s, rhs, *arrays):
        s, rhs = (np.ascontiguousarray(v, dtype=np.float64) for v in (s, rhs))
        args = (ks[0], ks[-1], 2 if odd else 1, bool(odd), bool(derivative), -float(sa), s, rhs)
        args = (*args, *arrays[:4], mode, *arrays[4:])
        if terms.paired:
            Hr, Hc = (np.ascontiguousarray(H, dtype=np.float64) for H in (terms.Hr, terms.Hc))
            return float(self._paired(rho, Hr, Hc, _index(terms.rows), _index(terms.cols), *args))
        return float(self._outer(rho, np.ascontiguousarray(terms.Hr, dtype=np.float64), terms.columns(ks[-1]), *args))


def _index(i):
    return np.ascontiguousarray(i, dtype=np.int64)


# The loops below are plain Python (numba compiles them; they also run, slowly,
# as they are).  Each entry follows HermiteSeries._series and its equation:
#   p = c_K; dp = 0; for k = K - step .. k0: dp = dp x + p; p = p x + c_k
#   odd: dp = dp (2 x) + p; p = p rho          (x = rho^2 if odd else rho)
#   g = (p (-sa) + s rho) - rhs; dg = dp (-sa) + s
# with c_k = Hr[i, k] Hc[j, k], every operation rounded once.  What follows the
# sums is the ``mode``'s:
#   SUMS      p (and dp)
#   EQUATION  also g and dg
#   STEP      also Newton's step of numerics.newton: new = clip(rho - g / dg),
#             step = new - rho; returns max |step| (NaN if any step is NaN)
#   CORRECT   (no dp: dp and dg hold the pre-solve's slopes) the correction of
#             HermiteSeries._solve: g = (p (-sa) + s rho) - rhs; new = clip(rho - g / dg);
#             step = new - rho; p += dp step; returns max |step|
SUMS, EQUATION, STEP, CORRECT = 0, 1, 2, 3


def _clip1(v):
    if v < -1.0:
        return -1.0
    if v > 1.0:
        return 1.0
    return v  # NaN stays NaN, as in np.clip


def _tail(mode, neg_sa, r, s, rhs, p, dp, dg):
    """The ``mode``'s work after the sums, for one entry: ``(p, g, dg, new, step)``."""
    gv = (p * neg_sa + s * r) - rhs
    if mode == CORRECT:  # dg is the pre-solve's slope
        nv = _clip1(r - gv / dg)
        sv = nv - r
        return p + dp * sv, gv, dg, nv, sv
    dgv = dp * neg_sa + s
    if mode == STEP:
        nv = _clip1(r - gv / dgv)
        return p, gv, dgv, nv, nv - r
    return p, gv, dgv, r, 0.0


def _outer_sums(rho, Hr, HcT, k0, kmax, step, odd, derivative, neg_sa, s, rhs, p, dp, g, dg, mode, new, stp):
    n, m = rho.shape
    x = np.empty(m)
    rows = np.empty((5, m))  # the rows of p, dp, g, stp and dg where they are not kept (no rows)
    top = 0  # the bits of the largest |step| (see _abs_max)
    for i in range(n):
        r = rho[i]
        pi = p[i] if p.shape[0] else rows[0]
        dpi = dp[i] if dp.shape[0] else rows[1]
        for j in range(m):
            x[j] = r[j] * r[j] if odd else r[j]
        h, hc = Hr[i, kmax], HcT[kmax]
        for j in range(m):
            pi[j] = h * hc[j]
        if derivative:
            dpi[:] = 0.0
        _horner_rest(Hr[i], HcT, x, pi, dpi, k0, kmax - step, step, derivative)
        if odd:
            if derivative:
                for j in range(m):
                    dpi[j] = dpi[j] * (2.0 * x[j]) + pi[j]
            for j in range(m):
                pi[j] = pi[j] * r[j]
        if mode == SUMS:
            continue
        si, ri = s[i], rhs[i]
        gi = g[i] if g.shape[0] else rows[2]
        dgi = dg[i] if dg.shape[0] else rows[4]
        if mode == EQUATION:
            for j in range(m):
                gi[j] = (pi[j] * neg_sa + si[j] * r[j]) - ri[j]
                dgi[j] = dpi[j] * neg_sa + si[j]
            continue
        ni = new[i]
        sti = stp[i] if stp.shape[0] else rows[3]
        for j in range(m):  # no reduction here: the loop is vectorised
            pi[j], gi[j], dgi[j], ni[j], sti[j] = _tail(mode, neg_sa, r[j], si[j], ri[j], pi[j], dpi[j], dgi[j])
        top = _abs_max(sti, top)
    return np.nan if top > _INF_BITS else _bits_value(top)


def _horner_rest(h, HcT, x, p, dp, k0, k, step, derivative):
    """Horner's rule from degree ``k`` down to ``k0`` on a row (``p`` holds the terms above ``k``): two degrees per
    pass over the row, ``p`` and ``dp`` kept in registers between them (the same operations as one degree at a time)."""
    m = p.shape[0]
    while k - step >= k0:
        h1, c1, h2, c2 = h[k], HcT[k], h[k - step], HcT[k - step]
        if derivative:
            for j in range(m):
                xj = x[j]
                d = dp[j] * xj + p[j]
                q = p[j] * xj + h1 * c1[j]
                dp[j] = d * xj + q
                p[j] = q * xj + h2 * c2[j]
        else:
            for j in range(m):
                xj = x[j]
                q = p[j] * xj + h1 * c1[j]
                p[j] = q * xj + h2 * c2[j]
        k -= 2 * step
    if k >= k0:
        h1, c1 = h[k], HcT[k]
        if derivative:
            for j in range(m):
                dp[j] = dp[j] * x[j] + p[j]
                p[j] = p[j] * x[j] + h1 * c1[j]
        else:
            for j in range(m):
                p[j] = p[j] * x[j] + h1 * c1[j]


#: The bits of +inf: a float's magnitude, read as an integer, exceeds them only for a NaN.
_INF_BITS = int(np.float64(np.inf).view(np.int64))
_MAGNITUDE = 0x7FFFFFFFFFFFFFFF


def _abs_max(v, top):
    """The larger of ``top`` and the largest ``|v[j]|``, as the integer bits of the magnitudes (their order is the
    floats' order, a NaN above +inf): an integer maximum, which vectorises where a float one with NaNs does not."""
    bits = v.view(np.int64)
    for j in range(v.shape[0]):
        b = bits[j] & _MAGNITUDE
        top = b if b > top else top
    return top


def _bits_value(b):
    """The float whose bits are the integer ``b``."""
    return np.array([b], dtype=np.int64).view(np.float64)[0]


def _paired_sums(
    rho, Hr, Hc, rows, cols, k0, kmax, step, odd, derivative, neg_sa, s, rhs, p, dp, g, dg, mode, new, stp
):
    for e in range(rho.shape[0]):
        r = rho[e]
        x = r * r if odd else r
        hr, hc = Hr[rows[e]], Hc[cols[e]]
        pe = hr[kmax] * hc[kmax]
        dpe = 0.0
        k = kmax - step
        while k >= k0:
            if derivative:
                dpe = dpe * x + pe
            pe = pe * x + hr[k] * hc[k]
            k -= step
        if odd:
            if derivative:
                dpe = dpe * (2.0 * x) + pe
            pe = pe * r
        if derivative:
            dp[e] = dpe
        if mode == SUMS:
            p[e] = pe
            continue
        if mode == CORRECT:
            dpe = dp[e]
        p[e], g[e], dg[e], ne, se = _tail(mode, neg_sa, r, s[e], rhs[e], pe, dpe, dg[e])
        if mode >= STEP:
            new[e], stp[e] = ne, se
    if mode < STEP:
        return 0.0
    top = _abs_max(stp, 0)
    return np.nan if top > _INF_BITS else _bits_value(top)


# HermiteSeries.block's start, per entry (numpy's bits):
#   s = si sj; rhs = sb P; nsum = ni + nj; dup = (nsum - 2 P) <= 1e-13 nsum; zero = s <= 1e-300;
#   s_safe = 1 where zero; rho0 = clip((rhs + sa (h0i h0j)) / (s_safe - sa (h1i h1j))), 0 where dup or zero;
# and, for the degree choice, how many |rho0| exceed each split and the largest (NaN if any is).


def _block_start(P, Rs, Cs, Rn, Cn, H0r, H0c, H1r, H1c, sa, sb, splits, s, rhs, rho0, dup, zero, counts):
    n, m = P.shape
    top, nan = 0.0, False
    counts[:] = 0
    mag = np.empty(m)  # |rho0| of a row
    for i in range(n):
        Pi, si, ri, oi, di, zi = P[i], s[i], rhs[i], rho0[i], dup[i], zero[i]
        for j in range(m):  # vectorised
            sv = Rs[i] * Cs[j]
            rv = sb * Pi[j]
            nsum = Rn[i] + Cn[j]
            d = (nsum - 2.0 * Pi[j]) <= 1e-13 * nsum
            z = sv <= 1e-300
            sv = 1.0 if z else sv
            v = _clip1((rv + sa * (H0r[i] * H0c[j])) / (sv - sa * (H1r[i] * H1c[j])))
            v = 0.0 if d or z else v
            si[j], ri[j], oi[j], di[j], zi[j], mag[j] = sv, rv, v, d, z, abs(v)
        for c in range(splits.size):  # vectorised counts, one split at a time
            split, above = splits[c], 0
            for j in range(m):
                above += mag[j] > split
            counts[c] += above
        for j in range(m):
            a = mag[j]
            if a > top:
                top = a
            elif a != a:
                nan = True
    return np.nan if nan else top


# HermiteSeries._correlations around the bulk solve (numpy's bits): entries starting beyond
# the split, |rho0| > split, enter the bulk with rho0 = rhs = 0; afterwards the near entries,
# |rho| > limit or far and not special, are gathered with their start (rho0 if far, else rho).


def _bulk_inputs(rho0, rhs, split, rho_b, rhs_b):
    n, m = rho0.shape
    for i in range(n):
        r, h, rb, hb = rho0[i], rhs[i], rho_b[i], rhs_b[i]
        for j in range(m):  # selects, no branches: vectorised
            f = abs(r[j]) > split
            rb[j] = 0.0 if f else r[j]
            hb[j] = 0.0 if f else h[j]


def _near_entries(rho, rho0, split, limit, special, has_special, ii, jj, start):
    n, m = rho.shape
    e = 0
    for i in range(n):
        for j in range(m):
            far = abs(rho0[i, j]) > split
            if (abs(rho[i, j]) > limit or far) and not (has_special and special[i, j]):
                if e < ii.size:
                    ii[e], jj[e], start[e] = i, j, rho0[i, j] if far else rho[i, j]
                e += 1
    return e


# MehlerDual._tails per sample (numpy's bits): running sums of h_k^2 and of k h_k^2 in
# degree order (as cumsum adds), tail_k = max(V - sum, 0), dtail_k = max(a d2 - sum, 0).


def _nonneg(v):
    return v if (v >= 0.0 or v != v) else 0.0  # np.maximum(v, 0.0): a NaN stays NaN, -0.0 stays


def _tails(H, V, ad2, tail, dtail):
    n, K1 = H.shape
    for i in range(n):
        acc, dacc = 0.0, 0.0
        for k in range(K1):
            hh = H[i, k] * H[i, k]
            acc += hh
            dacc += hh * k
            tail[i, k] = _nonneg(V[i] - acc)
            dtail[i, k] = _nonneg(ad2[i] - dacc)


# _ReluDual._invert: v = sqrt(max(h_hi - r, 0)) inv_dv, clipped to top; k = int(v); v -= k;
# rho = ((c3[k] v + c2[k]) v + c1[k]) v + c0[k]; low = rho < -0.75; scaled: (rho si) sj unless low.
# Every operation rounded once.  A NaN stays NaN.


def _table_inverse(r, coef, h_hi, inv_dv, top, scale, si, sj, out, low):
    c0, c1, c2, c3 = coef[0], coef[1], coef[2], coef[3]
    n, m = r.shape
    vr = np.empty(m)  # a row's v: its square roots in a loop of their own, vectorised
    for i in range(n):
        ri, oi, li = r[i], out[i], low[i]
        s_i = si[i] if scale else 1.0
        for j in range(m):
            v = h_hi - ri[j]
            v = 0.0 if v < 0.0 else v
            v = np.sqrt(v) * inv_dv
            vr[j] = top if v > top else v
        for j in range(m):
            v = vr[j]
            k = int(v if v == v else 0.0)  # a NaN stays NaN below, through v - k
            v = v - k
            x = c3[k] * v
            x = x + c2[k]
            x = x * v
            x = x + c1[k]
            x = x * v
            x = x + c0[k]
            lo = x < -0.75
            if scale:
                xs = x * s_i
                xs = xs * sj[j]
                x = x if lo else xs
            oi[j], li[j] = x, lo


#: The loops of :class:`CompiledSeries`, in the order of its parameters (plain Python until compiled).
LOOPS = (_outer_sums, _paired_sums, _table_inverse, _block_start, _bulk_inputs, _near_entries, _tails)
