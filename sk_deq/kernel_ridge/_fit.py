"""The steps of an exact kernel ridge fit: the stored kernel, the choice of ``alpha``, the solve.

:func:`fill_store` computes the training kernel tile by tile with the
kernel engine (each tile in float64, stored in the plan's dtype) into a
store where the engine computes: a :class:`TileStore` on the host for the
numpy engine, a :class:`~sk_deq.kernel_ridge._torch_tiles.TorchTileStore`
on the engine's torch device, its tiles computed there and never sent to
the host (:meth:`~sk_deq.kernels.ImplicitKernelEngine.device_kernel`);
:func:`choose_alpha` tries the candidate ridges on a held-out split of the
stored kernel; :func:`solve` solves ``(K + alpha I) C = Y`` by the plan's
solver, where the store is.  Each shows its progress when asked; the
solutions they return are numpy arrays.
"""

from __future__ import annotations

import functools
import math
import sys

import numpy as np

from .._progress import STEPS, ProgressBar
from ..kernels._workers import kernel_workers
from ._arrays import NUMPY
from ._solvers import NystromPreconditioner, SolveInfo, extend_factor, low_rank_factor, pcg
from ._tiles import TileLayout, TileStore

__all__ = ["choose_alpha", "fill_store", "new_store", "predict_in_blocks", "progress_bar", "solve"]


def progress_bar(total, desc, enabled):
    """A progress bar on standard error (shown when ``enabled``)."""
    return ProgressBar(total, desc, enabled=enabled, stream=sys.stderr, width=20, template=STEPS, min_interval=0.5)


def new_store(n: int, plan, device=None, workers: int = 1) -> TileLayout:
    """An empty store of ``n`` rows in the plan's dtype and tile: on the host (its products on ``workers``
    threads), or on a torch ``device``."""
    if device is None:
        return TileStore(n, plan.tile, plan.dtype, workers=workers)
    from ._torch_tiles import TorchTileStore

    return TorchTileStore(n, plan.tile, plan.dtype, device)


def _kernel_of(engine, n_jobs, block_size):
    """``kernel(SX, SY)`` of ``engine`` where it computes: numpy on the host, or a tensor on its device."""
    if engine.device is None:
        return functools.partial(engine.kernel, block_size=block_size, n_jobs=n_jobs)
    return functools.partial(engine.device_kernel, block_size=block_size)


def fill_store(engine, S, plan, *, n_jobs=None, block_size=None, progress=False) -> TileLayout:
    """The training kernel of the prepared samples ``S`` in a store of the plan's dtype and tile.

    The store is where ``engine`` computes: on the host (its products on
    the kernel's threads, ``n_jobs``, :func:`~sk_deq.kernels.kernel_workers`)
    or on the engine's device.
    """
    store = new_store(len(S), plan, engine.device, kernel_workers(n_jobs) if engine.device is None else 1)
    kernel = _kernel_of(engine, n_jobs, block_size)
    pairs = store.pairs()
    with progress_bar(len(pairs), "kernel tiles", progress) as bar:
        for i, j in pairs:
            Si = S.take(store.rows(i))
            store.fill(i, j, kernel(Si, None if i == j else S.take(store.rows(j))))
            bar.update()
    return store


def predict_in_blocks(engine, X, S_fit, coef, rows: int, *, n_jobs=None, block_size=None) -> np.ndarray:
    """``K(X, X_fit) @ coef`` a block of ``rows`` rows of ``X`` at a time, the whole test kernel never held.

    With a device the blocks of the kernel and their product with ``coef``
    stay there: only the product (``rows x n_outputs``) comes back.
    """
    if engine.device is None:
        ops = NUMPY
    else:
        from ._torch_tiles import TorchOps

        ops = TorchOps(engine.device)
    kernel, c = _kernel_of(engine, n_jobs, block_size), ops.asarray(coef)
    out = np.empty((len(X), coef.shape[1]))
    for i in range(0, len(X), rows):
        out[i : i + rows] = ops.to_host(kernel(engine.prepare(X[i : i + rows]), S_fit) @ c)
    return out


class _SolveProgress:
    """The conjugate gradients' progress: iterations done and, from the residual's rate of decrease, to do."""

    def __init__(self, tol, max_iter, desc, enabled):
        self.tol, self.max_iter = float(tol), int(max_iter)
        self.bar = progress_bar(max_iter, desc, enabled)
        self.first = None

    def __call__(self, it, res):
        if self.first is None:
            self.first = res
        if it >= 2 and 0 < res < self.first:
            rate = math.log(self.first / res) / it
            left = math.log(max(res / self.tol, 1.0)) / rate
            self.bar.total = int(min(self.max_iter, it + math.ceil(left)))
        self.bar.desc = f"{self.bar.desc.split(':')[0]}: residual {res:.1e} (tol {self.tol:.0e})"
        self.bar.update()

    def close(self):
        self.bar.total = max(self.bar.n, 1)
        self.bar.close()


def _pcg(op, Y, alpha, precond, *, tol, max_iter, x0=None, rows=None, progress=False, desc="solve"):
    matmat = op.matmat if rows is None else _leading(op, rows)
    watch = _SolveProgress(tol, max_iter, desc, progress)
    try:
        return pcg(matmat, Y, alpha, precond, tol=tol, max_iter=max_iter, x0=x0, callback=watch, ops=op.ops)
    finally:
        watch.close()


def _leading(op, rows):
    """``K[:rows, :rows] @ X``: the whole store's product of ``X`` padded with zeros, cut to its leading rows."""

    def matmat(X):
        full = op.ops.zeros((op.n, X.shape[1]))
        full[:rows] = X
        return op.matmat(full)[:rows]

    return matmat


def solve(store, op, Y, alpha, plan, *, tol, max_iter, rng, x0=None, factor=None, progress=False):
    """``C`` with ``(K + alpha I) C = Y`` (``op`` is ``K``, maybe weighted; ``C`` in numpy) and its :class:`SolveInfo`.

    The Cholesky route factors the store in place (``op``'s weights are
    applied to it first); its info has ``n_iter=0`` and no residual.  The
    conjugate gradients' preconditioner uses ``factor`` (``F``, all rows)
    when given, else a new randomly pivoted Cholesky factor.
    """
    if plan.solver == "cholesky":
        if op is not store:  # the weights: D K D in place
            store.scale(op.d)
        store.add_to_diagonal(alpha)
        store.cholesky()
        return store.ops.to_host(store.cho_solve(Y)), SolveInfo(0, np.full(Y.shape[1], np.nan), True)
    F = low_rank_factor(op, plan.rank, rng)[0] if factor is None else factor
    M = NystromPreconditioner(F, alpha, op.ops)  # F moved to the operator's device
    C, info = _pcg(op, Y, alpha, M, tol=tol, max_iter=max_iter, x0=x0, progress=progress)
    return op.ops.to_host(C), info


def choose_alpha(op, Y, alphas, n_train, heldout, score, plan, *, tol, max_iter, rng, progress=False):
    """The best of ``alphas`` on a held-out split: the leading ``n_train`` rows fitted, the others scored.

    The ridges are tried from the largest to the smallest (the best
    conditioned first), each solve warm-started from the one before, with
    one preconditioner factor for all.  ``heldout(C)`` predicts the held-out
    rows from a solution ``C`` of the leading rows (in the arrays of
    ``op.ops``; one product with the store), and ``score(pred)`` scores
    those predictions; of equal scores the largest ridge wins.

    Returns
    -------
    best : float
    scores : ndarray of shape (len(alphas),)
        In the order of ``alphas``.
    C : ndarray
        The solution of the leading rows at the best ridge (a warm start).
    F : ndarray
        The preconditioner's factor, extended to all rows (for the final solve).
    """
    F, pivots = low_rank_factor(op, plan.rank, rng, rows=n_train, n_out=op.n)  # room for the final solve's rows
    lead = F[:n_train]
    M = None
    scores = np.empty(len(alphas))
    solutions = {}
    C = None
    for k in np.argsort(alphas)[::-1]:
        a = float(alphas[k])
        M = NystromPreconditioner(lead, a, op.ops) if M is None else M.with_alpha(a)
        C, _ = _pcg(
            op,
            Y[:n_train],
            a,
            M,
            tol=tol,
            max_iter=max_iter,
            x0=C,
            rows=n_train,
            progress=progress,
            desc=f"alpha={a:.3g}",
        )
        scores[k] = score(heldout(C))
        solutions[k] = op.ops.to_host(C)
    best = _best(scores, alphas)
    del M, lead  # the candidates' Woodbury matrices, freed before the final solve builds its own
    return float(alphas[best]), scores, solutions[best], extend_factor(op, F, pivots, n_train)


def _best(scores, alphas) -> int:
    """The index of the best score, the largest ridge among equals; the largest ridge where none is a number."""
    alphas = np.asarray(alphas)
    finite = np.isfinite(scores)
    if not finite.any():  # e.g. R² of a single held-out sample
        import warnings

        warnings.warn(
            "No candidate alpha could be scored on the held-out samples (too few of them): the largest was taken. "
            "Give more samples, a larger validation_fraction or one alpha.",
            UserWarning,
            stacklevel=4,
        )
        return int(np.argmax(alphas))
    top = np.flatnonzero(finite & (scores == np.max(scores[finite])))
    return int(top[np.argmax(alphas[top])])
