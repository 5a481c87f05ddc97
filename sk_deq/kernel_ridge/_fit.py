"""The steps of an exact kernel ridge fit: the stored kernel, the choice of ``alpha``, the solve.

:func:`fill_store` computes the training kernel tile by tile with the
kernel engine (each tile in float64, stored in the plan's dtype);
:func:`choose_alpha` tries the candidate ridges on a held-out split of the
stored kernel; :func:`solve` solves ``(K + alpha I) C = Y`` by the plan's
solver.  Each shows its progress when asked.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from .._progress import STEPS, ProgressBar
from ..kernels._workers import kernel_workers
from ._solvers import NystromPreconditioner, SolveInfo, extend_factor, low_rank_factor, pcg
from ._tiles import TileStore

__all__ = ["choose_alpha", "fill_store", "progress_bar", "solve"]


def progress_bar(total, desc, enabled):
    """A progress bar on standard error (shown when ``enabled``)."""
    return ProgressBar(total, desc, enabled=enabled, stream=sys.stderr, width=20, template=STEPS, min_interval=0.5)


def fill_store(engine, S, plan, *, n_jobs=None, block_size=None, progress=False) -> TileStore:
    """The training kernel of the prepared samples ``S`` in a :class:`TileStore` of the plan's dtype and tile.

    Its products run on the kernel's threads (``n_jobs``, :func:`~sk_deq.kernels.kernel_workers`).
    """
    store = TileStore(len(S), plan.tile, plan.dtype, workers=kernel_workers(n_jobs))
    pairs = store.pairs()
    with progress_bar(len(pairs), "kernel tiles", progress) as bar:
        for i, j in pairs:
            Si = S.take(store.rows(i))
            block = engine.kernel(Si, None if i == j else S.take(store.rows(j)), block_size=block_size, n_jobs=n_jobs)
            store.fill(i, j, block)
            bar.update()
    return store


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
        return pcg(matmat, Y, alpha, precond, tol=tol, max_iter=max_iter, x0=x0, callback=watch)
    finally:
        watch.close()


def _leading(op, rows):
    """``K[:rows, :rows] @ X``: the whole store's product of ``X`` padded with zeros, cut to its leading rows."""

    def matmat(X):
        full = np.zeros((op.n, X.shape[1]))
        full[:rows] = X
        return op.matmat(full)[:rows]

    return matmat


def solve(store, op, Y, alpha, plan, *, tol, max_iter, rng, x0=None, factor=None, progress=False):
    """``C`` with ``(K + alpha I) C = Y`` (``op`` is ``K``, maybe weighted) and its :class:`SolveInfo`.

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
        return store.cho_solve(Y), SolveInfo(0, np.full(Y.shape[1], np.nan), True)
    F = low_rank_factor(op, plan.rank, rng)[0] if factor is None else factor
    return _pcg(op, Y, alpha, NystromPreconditioner(F, alpha), tol=tol, max_iter=max_iter, x0=x0, progress=progress)


def choose_alpha(op, Y, alphas, n_train, heldout, score, plan, *, tol, max_iter, rng, progress=False):
    """The best of ``alphas`` on a held-out split: the leading ``n_train`` rows fitted, the others scored.

    The ridges are tried from the largest to the smallest (the best
    conditioned first), each solve warm-started from the one before, with
    one preconditioner factor for all.  ``heldout(C)`` predicts the held-out
    rows from a solution ``C`` of the leading rows (one product with the
    store), and ``score(pred)`` scores those predictions; of equal scores
    the largest ridge wins.

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
    F, pivots = low_rank_factor(op, plan.rank, rng, rows=n_train)
    M = None
    scores = np.empty(len(alphas))
    solutions = {}
    C = None
    for k in np.argsort(alphas)[::-1]:
        a = float(alphas[k])
        M = NystromPreconditioner(F, a) if M is None else M.with_alpha(a)
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
        solutions[k] = C.copy()
    best = _best(scores, alphas)
    return float(alphas[best]), scores, solutions[best], extend_factor(op, F, pivots)


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
