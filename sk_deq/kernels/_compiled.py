"""The Hermite series of the numpy engine and the ReLU table's inversion, compiled when numba is installed.

:class:`~sk_deq.kernels._series.HermiteSeries` spends most of a generic
activation's kernel (tanh, SiLU, any callable) summing the series
``sum_k h_k(i) h_k(j) rho^k`` by Horner's rule, and the Newton equation
around it.  In numpy that is a handful of whole-array operations per degree:
memory-bound, and each one a call back into the interpreter, which the
engine's threads must take turns at.  Here the same sums run in one compiled
pass that holds no interpreter lock, so the threads truly run side by side.
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

__all__ = ["COMPILED_ENV", "CompiledSeries", "compiled_series"]

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
    try:
        import numba
    except ImportError:
        return None
    options: dict[str, Any] = {"nogil": True, "boundscheck": False, "error_model": "numpy"}
    try:  # cached on disk where numba finds a writable place (NUMBA_CACHE_DIR, the package, the user's cache)
        jit = numba.njit(cache=True, **options)
        return CompiledSeries(jit(_outer_sums), jit(_paired_sums), jit(_table_inverse))
    except RuntimeError:  # no place to cache: compiled in every process
        jit = numba.njit(cache=False, **options)
        return CompiledSeries(jit(_outer_sums), jit(_paired_sums), jit(_table_inverse))


class CompiledSeries:
    """Series values, slopes and Newton equations of a block's entries, in compiled loops.

    Parameters
    ----------
    outer, paired, table : callable
        The compiled :func:`_outer_sums`, :func:`_paired_sums` and
        :func:`_table_inverse`.
    """

    def __init__(self, outer, paired, table):
        self._outer, self._paired, self._table = outer, paired, table

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
            sa, s, rhs, g, dg = 0.0, none, none, none, none
        else:
            sa, s, rhs = equation
            s, rhs = (np.ascontiguousarray(v, dtype=np.float64) for v in (s, rhs))
            g, dg = np.empty_like(rho), np.empty_like(rho)
        args = (ks[0], ks[-1], 2 if odd else 1, bool(odd), bool(derivative), -float(sa), s, rhs, p, dp, g, dg)
        if terms.paired:
            Hr, Hc = (np.ascontiguousarray(H, dtype=np.float64) for H in (terms.Hr, terms.Hc))
            self._paired(rho, Hr, Hc, _index(terms.rows), _index(terms.cols), *args)
        else:
            self._outer(rho, np.ascontiguousarray(terms.Hr, dtype=np.float64), terms.columns(ks[-1]), *args)
        if equation is not None:
            return g, dg, p, dp
        return p, (dp if derivative else None)


def _index(i):
    return np.ascontiguousarray(i, dtype=np.int64)


# The loops below are plain Python (numba compiles them; they also run, slowly,
# as they are).  Each entry follows HermiteSeries._series and its equation:
#   p = c_K; dp = 0; for k = K - step .. k0: dp = dp x + p; p = p x + c_k
#   odd: dp = dp (2 x) + p; p = p rho          (x = rho^2 if odd else rho)
#   g = (p (-sa) + s rho) - rhs; dg = dp (-sa) + s
# with c_k = Hr[i, k] Hc[j, k], every operation rounded once.


def _outer_sums(rho, Hr, HcT, k0, kmax, step, odd, derivative, neg_sa, s, rhs, p, dp, g, dg):
    n, m = rho.shape
    x = np.empty(m)
    equation = g.size > 0
    for i in range(n):
        r, pi, dpi = rho[i], p[i], dp[i]
        for j in range(m):
            x[j] = r[j] * r[j] if odd else r[j]
        h, hc = Hr[i, kmax], HcT[kmax]
        for j in range(m):
            pi[j] = h * hc[j]
        if derivative:
            dpi[:] = 0.0
        k = kmax - step
        while k >= k0:
            h, hc = Hr[i, k], HcT[k]
            if derivative:
                for j in range(m):
                    dpi[j] = dpi[j] * x[j] + pi[j]
                    pi[j] = pi[j] * x[j] + h * hc[j]
            else:
                for j in range(m):
                    pi[j] = pi[j] * x[j] + h * hc[j]
            k -= step
        if odd:
            if derivative:
                for j in range(m):
                    dpi[j] = dpi[j] * (2.0 * x[j]) + pi[j]
            for j in range(m):
                pi[j] = pi[j] * r[j]
        if equation:
            si, ri, gi, dgi = s[i], rhs[i], g[i], dg[i]
            for j in range(m):
                gi[j] = (pi[j] * neg_sa + si[j] * r[j]) - ri[j]
                dgi[j] = dpi[j] * neg_sa + si[j]


def _paired_sums(rho, Hr, Hc, rows, cols, k0, kmax, step, odd, derivative, neg_sa, s, rhs, p, dp, g, dg):
    equation = g.size > 0
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
        p[e] = pe
        if derivative:
            dp[e] = dpe
        if equation:
            g[e] = (pe * neg_sa + s[e] * r) - rhs[e]
            dg[e] = dpe * neg_sa + s[e]


# _ReluDual._invert: v = sqrt(max(h_hi - r, 0)) inv_dv, clipped to top; k = int(v); v -= k;
# rho = ((c3[k] v + c2[k]) v + c1[k]) v + c0[k]; low = rho < -0.75; scaled: (rho si) sj unless low.
# Every operation rounded once.  A NaN stays NaN.


def _table_inverse(r, coef, h_hi, inv_dv, top, scale, si, sj, out, low):
    c0, c1, c2, c3 = coef[0], coef[1], coef[2], coef[3]
    n, m = r.shape
    for i in range(n):
        ri, oi, li = r[i], out[i], low[i]
        s_i = si[i] if scale else 1.0
        for j in range(m):
            v = h_hi - ri[j]
            if v < 0.0:
                v = 0.0
            v = np.sqrt(v) * inv_dv
            if v > top:
                v = top
            if v != v:
                oi[j], li[j] = v, False
                continue
            k = int(v)
            v = v - k
            x = c3[k] * v
            x = x + c2[k]
            x = x * v
            x = x + c1[k]
            x = x * v
            x = x + c0[k]
            li[j] = x < -0.75
            if scale and not li[j]:
                x = x * s_i
                x = x * sj[j]
            oi[j] = x
