"""Solvers of ``(K + alpha I) C = Y`` on a stored kernel: preconditioned conjugate gradients and their preconditioner.

Both work on any *operator* that offers ``n``, ``matmat(X)`` (``K @ X``),
``columns(idx)`` (``K[:, idx]``) and ``diagonal()``: the in-memory
:class:`~sk_deq.kernel_ridge._tiles.TileStore`, the same on a torch device
(:class:`~sk_deq.kernel_ridge._torch_tiles.TorchTileStore`), either with
sample weights (:class:`Weighted`), or a store whose row blocks live
elsewhere.  They are written once for numpy and torch: an operator's
``ops`` (:mod:`sk_deq.kernel_ridge._arrays`) names the arrays it takes and
returns, and the vectors of the conjugate gradients and the
preconditioner's factor live there (on a GPU, the device: a product with
the stored kernel, the preconditioner and the updates all run there, and
the host reads one number per iteration).

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
from typing import Any

import numpy as np
import scipy.linalg as sl

from ..kernels._rpcholesky import rp_cholesky
from ._arrays import NUMPY, ArrayOps

__all__ = ["NystromPreconditioner", "SolveInfo", "Weighted", "extend_factor", "low_rank_factor", "pcg"]


class Weighted:
    """The operator ``D K D`` of a store ``K`` and weights ``d`` (``D = diag(d)``), without changing the store."""

    def __init__(self, store, d):
        self.store, self.ops, self.n = store, store.ops, store.n
        self.d = self.ops.asarray(d)

    def matmat(self, X):
        return self.d[:, None] * self.store.matmat(self.d[:, None] * X)

    def columns(self, idx):
        return self.d[:, None] * self.store.columns(idx) * self.d[np.asarray(idx, dtype=np.intp)]

    def diagonal(self):
        return self.d**2 * self.store.diagonal()


def low_rank_factor(
    op, rank: int, rng, *, rows: int | None = None, n_out: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A factor ``F`` (``rows x r``, ``r <= rank``) with ``F F^T`` close to the leading ``rows x rows`` block of ``K``.

    ``op`` offers ``columns(idx)`` and ``diagonal()`` (and ``ops``, the
    arrays they return: numpy's by default); ``rows`` defaults to all.
    Returns ``F`` and its pivots (``F[pivots]`` is lower triangular).  The
    factor is built on the host, in numpy: its columns are read from the
    operator a block of pivots at a time.  With ``n_out`` (at least
    ``rows``) the returned array has ``n_out`` rows, the factor in the
    leading ``rows`` and zeros below, which :func:`extend_factor` fills in
    place: the factor of all rows without a second copy of it.
    """
    n = op.n if rows is None else int(rows)
    n_out = n if n_out is None else int(n_out)
    if n_out < n:
        raise ValueError(f"n_out={n_out} is fewer than the factor's rows, {n}")
    to_host = _to_host(op)
    k = int(min(rank, n))
    buffer = np.empty((n_out, k))  # rp_cholesky zeroes the leading rows it fills
    buffer[n:] = 0.0
    pivots, F = rp_cholesky(
        lambda idx: to_host(op.columns(idx)[:n]),
        to_host(op.diagonal())[:n],
        k,
        rng,
        block=FACTOR_BLOCK,
        out=buffer[:n],
    )
    return buffer[:, : F.shape[1]], pivots


def extend_factor(op, F: np.ndarray, pivots: np.ndarray, rows: int | None = None) -> np.ndarray:
    """The factor of the leading ``rows`` rows extended to all ``op.n`` rows, on the same pivots (on the host).

    ``F = K[:, P] L^{-T}`` with ``L = F[P]`` (the Cholesky factor of
    ``K[P, P]``): the remaining rows are ``K[rest, P] L^{-T}``, the pivots'
    columns read a block at a time (only their remaining rows kept) and one
    triangular solve; no new pivots are drawn.  ``F`` holds the factor in
    its leading ``rows`` rows (all of them by default); where it has
    ``op.n`` rows (:func:`low_rank_factor`'s ``n_out``) the rest are filled
    in place and ``F`` is returned, else a new array.
    """
    n_lead = len(F) if rows is None else int(rows)
    if len(F) == op.n:
        out = F
    else:
        out = np.empty((op.n, F.shape[1]))  # every row is written below
        out[:n_lead] = F[:n_lead]
    if n_lead == op.n or not F.shape[1]:
        out[n_lead:] = 0.0
        return out
    to_host = _to_host(op)
    rest = np.empty((op.n - n_lead, len(pivots)))
    for j in range(0, len(pivots), FACTOR_BLOCK):
        rest[:, j : j + FACTOR_BLOCK] = to_host(op.columns(pivots[j : j + FACTOR_BLOCK]))[n_lead:]
    out[n_lead:] = sl.solve_triangular(out[pivots], rest.T, lower=True, check_finite=False).T
    return out


def _to_host(op):
    """``to_host`` of the arrays ``op`` returns (numpy's when it names none)."""
    return getattr(op, "ops", NUMPY).to_host


#: pivots drawn at a time by the preconditioner's factor: a few hundred columns per pass over the store
FACTOR_BLOCK = 256


@dataclass
class NystromPreconditioner:
    """``P = F F^T + alpha I``, applied as ``P^{-1} R`` through the Woodbury identity.

    Parameters
    ----------
    F : ndarray of shape (n, r)
        Low-rank factor of the kernel (:func:`rp_cholesky`).
    alpha : float
        The ridge.
    ops : ArrayOps, default=NUMPY
        Where the preconditioner is applied: ``F`` is moved there once, and
        ``P^{-1} R`` takes and returns the arrays of ``ops`` (float64
        tensors on a torch device, for the conjugate gradients there).
    """

    F: Any
    alpha: float
    ops: ArrayOps = NUMPY
    _gram: Any = field(default=None, repr=False)

    def __post_init__(self):
        self.F = self.ops.asarray(self.F)
        if self._gram is None:
            self._gram = self.F.T @ self.F
        self._factor = self.ops.cho_factor(self.ops.shifted(self._gram, self.alpha))

    def with_alpha(self, alpha: float) -> NystromPreconditioner:
        """The same factor for another ridge (one small factorisation)."""
        return NystromPreconditioner(self.F, float(alpha), self.ops, self._gram)

    def __call__(self, R):
        """``P^{-1} R``."""
        if not self.F.shape[1]:
            return R / self.alpha
        W = self.ops.cho_solve(self._factor, self.F.T @ R)
        return (R - self.F @ W) / self.alpha


@dataclass
class SolveInfo:
    """How a solve went: ``n_iter`` iterations, the final relative residual of each column, whether ``tol`` was met."""

    n_iter: int
    residuals: np.ndarray
    converged: bool
    history: list = field(default_factory=list)  # the largest relative residual after each iteration


def pcg(matmat, Y, alpha, precond, *, tol=1e-6, max_iter=1000, x0=None, callback=None, restarts=3, ops=NUMPY):
    """Solve ``(K + alpha I) C = Y`` for every column of ``Y`` by preconditioned conjugate gradients.

    Every column has its own step sizes; a column whose residual has
    reached ``tol`` takes steps of zero from then on (its products are
    still computed: a product with the store costs about the same for
    fewer columns, and the columns still active are never gathered).
    The host reads one number per iteration, the largest relative
    residual: the only wait for the device in an iteration on a GPU.

    Parameters
    ----------
    matmat : callable
        ``K @ X`` for ``X`` of shape ``(n, k)``.
    Y : array of shape (n, k)
        Right-hand sides.
    alpha : float
        The ridge (positive).
    precond : callable
        ``P^{-1} R`` (e.g. a :class:`NystromPreconditioner`).
    tol : float, default=1e-6
        Largest relative residual ``||Y - (K + alpha I) C|| / ||Y||`` of a column.
    max_iter : int, default=1000
        Most iterations (products with ``K``) in all.
    x0 : array of shape (n, k), optional
        Starting point (a warm start); zeros by default.
    callback : callable, optional
        ``callback(iteration, largest relative residual)`` after every iteration.
    restarts : int, default=3
        Times the iteration restarts from the recomputed residual when the
        updated one reached ``tol`` but the true one did not.
    ops : ArrayOps, default=NUMPY
        The arrays the solve runs on (``matmat`` and ``precond`` take and
        return them): numpy's, or float64 tensors on a torch device.

    Returns
    -------
    C : array of shape (n, k)
        In the arrays of ``ops``.
    info : SolveInfo
    """
    Y = ops.asarray(Y)
    ynorm = ops.column_norms(Y)
    ynorm = ops.where(ynorm == 0, 1.0, ynorm)
    C = ops.zeros(Y.shape) if x0 is None else ops.copy(ops.asarray(x0))
    history: list = []
    it = 0
    for _ in range(restarts + 1):
        R = Y - (matmat(C) + alpha * C) if (x0 is not None or it) else ops.copy(Y)
        res = ops.column_norms(R) / ynorm
        if not ops.scalar(res.max()) > tol or it >= max_iter:
            break
        it = _iterate(matmat, C, R, res, ynorm, alpha, precond, tol, max_iter, it, history, callback, ops)
        x0 = C  # the next round (if any) starts from the recomputed residual
    final = ops.to_host(ops.column_norms(Y - (matmat(C) + alpha * C)) / ynorm)
    return C, SolveInfo(it, final, bool((final <= tol).all()), history)


def _iterate(matmat, C, R, res, ynorm, alpha, precond, tol, max_iter, it, history, callback, ops) -> int:
    """Conjugate-gradient iterations on ``C`` and ``R`` in place, from the residual ``R``; the iteration count after."""
    active = res > tol
    Z = precond(R)
    P = ops.copy(Z)
    rz = ops.column_dots(R, Z)
    while it < max_iter:
        AP = matmat(P) + alpha * P
        pap = ops.column_dots(P, AP)
        step = ops.where(active, rz / ops.where(active, pap, 1.0), 0.0)
        C += step * P
        R -= step * AP
        it += 1
        res = ops.column_norms(R) / ynorm
        history.append(ops.scalar(res.max()))  # the iteration's one read by the host
        if callback is not None:
            callback(it, history[-1])
        if not history[-1] > tol:
            break
        active = res > tol
        Z = precond(R)
        rz_new = ops.column_dots(R, Z)
        P = Z + ops.where(active, rz_new / ops.where(active, rz, 1.0), 0.0) * P
        rz = ops.where(active, rz_new, rz)
    return it
