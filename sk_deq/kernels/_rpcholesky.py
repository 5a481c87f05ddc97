"""Block randomly pivoted Cholesky: a low-rank factor of a kernel matrix from a few of its columns.

Chen, Epperly, Tropp and Webber (2023), "Randomly pivoted Cholesky:
practical approximation of a kernel matrix with few entry evaluations":
pivots are drawn in blocks, in proportion to the diagonal of the residual
``K - F F^T``, so the factor captures the large eigenvalues of ``K`` after a
number of columns close to the best possible.  It chooses the landmarks of
:class:`~sk_deq.ImplicitCKNystroem` (its columns computed by the kernel
engine) and builds the preconditioner of :class:`~sk_deq.ImplicitCKRidge`
(its columns read from the stored kernel).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import linalg

__all__ = ["rp_cholesky"]


def rp_cholesky(
    columns: Callable[[np.ndarray], np.ndarray],
    diagonal: np.ndarray,
    k: int,
    rng: np.random.Generator | np.random.RandomState,
    *,
    block: int = 64,
    fill: bool = False,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Pivots and factor ``F`` (``n x r``, ``r <= k``) with ``F F^T`` close to ``K``.

    Parameters
    ----------
    columns : callable
        ``columns(idx)``: the columns ``K[:, idx]``, an ``(n, len(idx))`` array.
    diagonal : ndarray of shape (n,)
        The diagonal of ``K``.
    k : int
        The number of pivots wanted.
    rng : numpy.random.Generator or RandomState
        Draws the pivots.
    block : int, default=64
        Pivots drawn at a time.
    fill : bool, default=False
        Once the residual vanishes (``K`` is already reproduced exactly), add
        pivots drawn uniformly from the rest until there are ``k`` (the
        landmarks of a Nyström approximation are then ``k`` samples all the
        same); without it the factor stops there, with fewer columns.
    out : ndarray of shape (n, k), optional
        A float64 array to write the factor in (zeroed here); ``F`` is then
        a view of its leading columns.

    Returns
    -------
    pivots : ndarray of shape (r,)
        The pivots, in the order chosen (``k`` of them with ``fill``).
    F : ndarray of shape (n, r_factor)
        The factor, one column per pivot accepted before the residual
        vanished.
    """
    n = len(diagonal)
    k = int(min(k, n))
    residual = np.array(diagonal, dtype=np.float64)
    if out is None:
        F = np.zeros((n, k))
    else:
        if out.shape != (n, k) or out.dtype != np.float64:
            raise ValueError(f"out must be a float64 array of shape {(n, k)}, got {out.dtype} {out.shape}")
        F = out
        F[:] = 0.0
    chosen: list[int] = []
    while len(chosen) < k:
        total = float(residual.sum())
        if not total > 0:  # the kernel is already exact
            break
        b = min(block, k - len(chosen))
        draw = np.unique(rng.choice(n, size=b, p=residual / total))
        draw = np.setdiff1d(draw, chosen)
        c = len(chosen)
        G = columns(draw) - F[:, :c] @ F[draw, :c].T
        new = _accept_pivots(G, draw, residual, len(chosen), k)
        if len(new) == 0:
            residual[draw] = 0.0  # numerically explained already: never draw them again
            continue
        cols = np.searchsorted(draw, new)
        R = linalg.cholesky(G[new][:, cols], lower=False)
        F[:, c : c + len(new)] = linalg.solve_triangular(R, G[:, cols].T, trans="T", lower=False).T
        residual = np.maximum(residual - np.einsum("ij,ij->i", F[:, c : c + len(new)], F[:, c : c + len(new)]), 0)
        residual[new] = 0.0
        chosen.extend(new.tolist())
    factor = F[:, : len(chosen)]
    if fill and len(chosen) < k:
        rest = np.setdiff1d(np.arange(n), chosen)
        chosen.extend(rng.permutation(rest)[: k - len(chosen)].tolist())
    return np.asarray(chosen, dtype=np.intp), factor


def _accept_pivots(G, draw, residual, n_chosen, k) -> np.ndarray:
    """The drawn pivots whose residual is not negligible (at most ``k - n_chosen``).

    A pivot is kept when its residual diagonal ``G[p, p]`` stays above a
    relative threshold once the pivots kept before it are accounted for:
    nearly dependent draws of one round are dropped, so the block's Cholesky
    factor is well conditioned.  The Schur complements are those of a
    Cholesky factorisation of the block in the draws' order that skips the
    rejected pivots: one rank-one update of the block per kept pivot.
    """
    R = np.array(G[draw], dtype=np.float64)  # the block of the draws: R[i, j] = G[draw[i], j]
    scale = float(max(residual.max(), 0.0)) if residual.size else 0.0
    threshold = 1e-10 * max(scale, np.finfo(np.float64).tiny)
    kept: list[int] = []
    for j in range(len(draw)):
        if len(kept) >= k - n_chosen:
            break
        if R[j, j] > threshold:
            kept.append(j)
            col = R[:, j] / np.sqrt(R[j, j])
            R -= np.outer(col, col)
    return draw[np.asarray(kept, dtype=np.intp)]
