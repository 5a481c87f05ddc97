"""The Hermite (Mehler) dual of the exact implicit engine: any activation.

``F_c(G) = sum_k h_k(i) h_k(j) rho^k`` with ``h_k(i)`` the normalised
Hermite coefficients of ``phi0(sqrt(a_i) xi) - c``: per-sample vectors,
computed here once by quadrature (through a checked interpolant in the
squared norm when there are many distinct norms).  The blocks are solved by
:class:`~sk_deq.kernels._series.HermiteSeries`, the same code the torch
engine runs; the entries no degree resolves come back here for polar
quadrature.
"""

from __future__ import annotations

import math

import numpy as np

from .._scaling import squared_norms
from ._duals import Samples, _Dual
from ._numerics import (
    common_weighted_hermite,
    chebyshev_interpolation_matrix,
    chebyshev_points,
    diagonal_newton,
    hermite_table,
    polar_expectation,
    safeguarded_newton,
    sample_nodes,
    shared_nodes,
)
from ._compiled import compiled_series
from ._series import HermiteSeries, numpy_ops

__all__ = ["MEHLER_MAX_DEGREE", "MehlerDual"]

#: Largest Hermite degree of the generic (Mehler) dual activation.
MEHLER_MAX_DEGREE = 256


class MehlerDual(_Dual):
    """Any activation: Hermite (Mehler) expansion of the dual activation.

    The truncation error after degree K is at most ``|rho|^(K+1)
    sqrt(tail_i(K) tail_j(K))`` with the exact tails from Parseval, so the
    degree follows each entry's correlation (:class:`HermiteSeries`).
    Entries close to ``|rho| = 1`` whose bound is not met at degree
    ``MEHLER_MAX_DEGREE`` (kinked or saturating activations) are computed by
    two-dimensional quadrature in polar coordinates, split at the kinks
    (:meth:`polar_solve`).
    """

    name = "Hermite expansion"

    def __init__(self, act, sa, sb, c, tol, max_degree=MEHLER_MAX_DEGREE):
        super().__init__(act, sa, sb, c, tol)
        self.K = int(max_degree)
        self.bps = tuple(act.breakpoints)
        self.odd = bool(act.odd) and abs(c - act._value_at_zero()) <= 1e-15 * max(1.0, abs(c))

    def solver(self, ops, group):
        """The :class:`HermiteSeries` of this dual for arrays of ``ops`` (solving ``group`` near entries at a time)."""
        return HermiteSeries(self.sa, self.sb, self.tol, self.K, self.odd, self.polar_solve, ops, group)

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
            shared = shared_nodes(self.bps)  # else one sample's own nodes
            Hw = common_weighted_hermite(K) if shared else hermite_table(xi[0], K) * w[0][:, None]
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
        compiled = compiled_series()
        if compiled is not None:
            tail, dtail = compiled.tails(a, H, V, d2)
            return {"H": H, "tail": tail, "dtail": dtail, "d2": d2}
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

    def chunk(self, P, R, C, kernel):
        return self.solver(numpy_ops(), group=4096).block(P, R, C, R, C, kernel)

    def chunk_into(self, P, R, C, kernel, out) -> None:
        self.solver(numpy_ops(), group=4096).block(P, R, C, R, C, kernel, out=out)

    def polar_solve(self, rho0, s, rhs, si, sj):
        """Correlations and series value and slope of entries by polar quadrature (numpy)."""
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
