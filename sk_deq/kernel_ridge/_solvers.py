"""Solvers of ``(K + alpha I) C = Y`` on a stored kernel: preconditioned conjugate gradients and their preconditioner.

Both work on any *operator* that offers ``n``, ``matmat(X)`` (``K @ X``),
``columns(idx)`` (``K[:, idx]``) and ``diagonal()``: the in-memory
:class:`~sk_deq.kernel_ridge._tiles.TileStore`, the same with sample
weights (:class:`Weighted`), or a store whose row blocks live elsewhere.

* :func:`low_rank_factor`: a factor ``F F^T`` of ``K`` by block randomly
  pivoted Cholesky (:func:`sk_deq.kernels._rpcholesky.rp_cholesky`), its
  columns read from the store, not recomputed.
* :class:`NystromPreconditioner`: ``P = F F^T + alpha I``, applied by the
  Woodbury identity (the preconditioner of Díaz, Epperly, Frangella, Tropp
  and Webber, 2023, "Robust, randomized preconditioning for kernel ridge
  regression").  With the factor's rank above the number of the kernel's
  eigenvalues larger than ``alpha``, the preconditioned system is well
  conditioned and conjugate gradients converge in tens of iterations.
* :func:`pcg`: conjugate gradients for all columns of ``Y`` at once (one
  product with ``K`` per iteration serves every column), each column with
  its own step sizes, stopped when every relative residual
  ``||Y - (K + alpha I) C|| / ||Y||`` is at most ``tol``; the residual is
  recomputed from its definition at the end (and the iteration restarted
  from there if the recursively updated one has drifted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sl

from ..kernels._rpcholesky import rp_cholesky

__all__ = ["NystromPreconditioner", "SolveInfo", "Weighted", "extend_factor", "low_rank_factor", "pcg"]


class Weighted:
    """The operator ``D K D`` of a store ``K`` and weights ``d`` (``D = diag(d)``), without changing the store."""

    def __init__(self, store, d):
        self.store, self.d = store, np.asarray(d, dtype=np.float64)
        self.n = store.n

    def matmat(self, X):
        return self.d[:, None] * self.store.matmat(self.d[:, None] * X)

    def columns(self, idx):
        return self.d[:, None] * self.store.columns(idx) * self.d[idx]

    def diagonal(self):
        return self.d**2 * self.store.diagonal()


def low_rank_factor(op, rank: int, rng, *, rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A factor ``F`` (``rows x r``, ``r <= rank``) with ``F F^T`` close to the leading ``rows x rows`` block of ``K``.

    ``op`` offers ``columns(idx)`` and ``diagonal()``; ``rows`` defaults to
    all.  Returns ``F`` and its pivots (``F[pivots]`` is lower triangular).
    """
    n = op.n if rows is None else int(rows)
    pivots, F = rp_cholesky(lambda idx: op.columns(idx)[:n], op.diagonal()[:n], int(rank), rng, block=_BLOCK)
    return F, pivots


def extend_factor(op, F: np.ndarray, pivots: np.ndarray) -> np.ndarray:
    """The factor of the leading rows extended to all ``op.n`` rows, on the same pivots.

    ``F = K[:, P] L^{-T}`` with ``L = F[P]`` (the Cholesky factor of
    ``K[P, P]``): the remaining rows are ``K[rest, P] L^{-T}``, one read of
    the pivots' columns and a triangular solve; no new pivots are drawn.
    """
    n_lead = len(F)
    if n_lead == op.n or not F.shape[1]:
        return np.vstack([F, np.zeros((op.n - n_lead, F.shape[1]))])
    rest = op.columns(pivots)[n_lead:]
    tail = sl.solve_triangular(F[pivots], rest.T, lower=True, check_finite=False).T
    return np.vstack([F, tail])


#: pivots drawn at a time by the preconditioner's factor: a few hundred columns per pass over the store
_BLOCK = 256


@dataclass
class NystromPreconditioner:
    """``P = F F^T + alpha I``, applied as ``P^{-1} R`` through the Woodbury identity.

    Parameters
    ----------
    F : ndarray of shape (n, r)
        Low-rank factor of the kernel (:func:`rp_cholesky`).
    alpha : float
        The ridge.
    """

    F: np.ndarray
    alpha: float
    _gram: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        if self._gram is None:
            self._gram = self.F.T @ self.F
        self._factor = sl.cho_factor(self._gram + self.alpha * np.eye(len(self._gram)), lower=True, check_finite=False)

    def with_alpha(self, alpha: float) -> NystromPreconditioner:
        """The same factor for another ridge (one small factorisation)."""
        return NystromPreconditioner(self.F, float(alpha), self._gram)

    def __call__(self, R: np.ndarray) -> np.ndarray:
        """``P^{-1} R``."""
        if not self.F.shape[1]:
            return R / self.alpha
        W = sl.cho_solve(self._factor, self.F.T @ R, check_finite=False)
        return (R - self.F @ W) / self.alpha


@dataclass
class SolveInfo:
    """How a solve went: ``n_iter`` iterations, the final relative residual of each column, whether ``tol`` was met."""

    n_iter: int
    residuals: np.ndarray
    converged: bool
    history: list = field(default_factory=list)  # the largest relative residual after each iteration


def _rel_residual(R, ynorm):
    return np.linalg.norm(R, axis=0) / ynorm


def pcg(matmat, Y, alpha, precond, *, tol=1e-6, max_iter=1000, x0=None, callback=None, restarts=3) -> tuple:
    """Solve ``(K + alpha I) C = Y`` for every column of ``Y`` by preconditioned conjugate gradients.

    Parameters
    ----------
    matmat : callable
        ``K @ X`` for ``X`` of shape ``(n, k)``.
    Y : ndarray of shape (n, k)
        Right-hand sides.
    alpha : float
        The ridge (positive).
    precond : callable
        ``P^{-1} R`` (e.g. a :class:`NystromPreconditioner`).
    tol : float, default=1e-6
        Largest relative residual ``||Y - (K + alpha I) C|| / ||Y||`` of a column.
    max_iter : int, default=1000
        Most iterations (products with ``K``) in all.
    x0 : ndarray of shape (n, k), optional
        Starting point (a warm start); zeros by default.
    callback : callable, optional
        ``callback(iteration, largest relative residual)`` after every iteration.
    restarts : int, default=3
        Times the iteration restarts from the recomputed residual when the
        updated one reached ``tol`` but the true one did not.

    Returns
    -------
    C : ndarray of shape (n, k)
    info : SolveInfo
    """
    Y = np.asarray(Y, dtype=np.float64)
    ynorm = np.linalg.norm(Y, axis=0)
    ynorm[ynorm == 0] = 1.0
    C = np.zeros_like(Y) if x0 is None else np.array(x0, dtype=np.float64)
    history: list = []
    it = 0
    for _ in range(restarts + 1):
        R = Y - (matmat(C) + alpha * C) if (x0 is not None or it) else Y.copy()
        res = _rel_residual(R, ynorm)
        active = res > tol
        if not active.any() or it >= max_iter:
            break
        Z = precond(R)
        P = Z.copy()
        rz = np.einsum("ij,ij->j", R, Z)
        while it < max_iter:
            cols = np.flatnonzero(active)
            AP = matmat(P[:, cols]) + alpha * P[:, cols]
            pap = np.einsum("ij,ij->j", P[:, cols], AP)
            step = rz[cols] / pap
            C[:, cols] += step * P[:, cols]
            R[:, cols] -= step * AP
            it += 1
            res[cols] = _rel_residual(R[:, cols], ynorm[cols])
            history.append(float(res.max()))
            if callback is not None:
                callback(it, history[-1])
            active = res > tol
            if not active.any():
                break
            cols = np.flatnonzero(active)
            Z = precond(R[:, cols])
            rz_new = np.einsum("ij,ij->j", R[:, cols], Z)
            P[:, cols] = Z + (rz_new / rz[cols]) * P[:, cols]
            rz[cols] = rz_new
        x0 = C  # the next round (if any) starts from the recomputed residual
    final = _rel_residual(Y - (matmat(C) + alpha * C), ynorm)
    return C, SolveInfo(it, final, bool((final <= tol).all()), history)
