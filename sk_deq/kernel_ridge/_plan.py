"""What an exact kernel ridge fit will need in memory, said before anything is allocated: :func:`plan_fit`.

The training kernel is held once, its lower triangle in tiles
(:class:`~sk_deq.kernel_ridge._tiles.TileStore`): ``n^2 / 2`` entries, 8
bytes each in float64, 4 in float32.  Beside it a fit holds the samples
(the validated input, its scaled copy and the engine's prepared rows), the
conjugate-gradient vectors, the preconditioner's factor (``n x rank``,
float64) and the kernel engine's blocks being solved.  ``storage='auto'``
stores float64 where all of it fits, else float32; where even float32 does
not fit, the error names the ways out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._runtime import _gib, available_memory_bytes
from ._tiles import TileStore, tile_size

__all__ = ["FitPlan", "plan_fit", "CHOLESKY_MAX_ROWS"]

#: ``solver='auto'`` factors the stored kernel up to this many rows and uses conjugate gradients above
#: (chosen by measurement: benchmarks/, the exact kernel ridge section of the benchmarks page)
CHOLESKY_MAX_ROWS = 8192

#: float64 arrays of n x n_outputs the conjugate gradients keep (solution, residual, direction, product,
#: preconditioned residual, right-hand side, warm start, and their temporaries)
_CG_VECTORS = 10


@dataclass(frozen=True)
class FitPlan:
    """The memory of one fit, in bytes, by part, and the choices it implies."""

    n_samples: int
    dtype: np.dtype
    tile: int
    solver: str
    rank: int
    store: int
    samples: int
    vectors: int
    factor: int
    blocks: int
    available: int | None

    @property
    def total(self) -> int:
        """Bytes at the fit's peak."""
        return self.store + self.samples + self.vectors + self.factor + self.blocks

    def describe(self) -> str:
        """One sentence: what the fit needs, by part."""
        parts = [
            f"the training kernel's lower triangle in {self.dtype.name} {_gib(self.store)}",
            f"the samples {_gib(self.samples)}",
        ]
        if self.factor:
            parts.append(f"the preconditioner (rank {self.rank}) {_gib(self.factor)}")
        parts.append(f"the solver's vectors and the kernel's blocks {_gib(self.vectors + self.blocks)}")
        avail = "" if self.available is None else f", of {_gib(self.available)} available"
        return f"A fit on {self.n_samples} samples needs {_gib(self.total)}{avail}: " + ", ".join(parts) + "."


def _plan(n, n_features, n_outputs, dtype, solver, rank, workers, block, available, candidates) -> FitPlan:
    b = tile_size(n)
    uses_cg = solver == "cg" or candidates  # several alphas are tried by conjugate gradients
    return FitPlan(
        n_samples=n,
        dtype=np.dtype(dtype),
        tile=b,
        solver=solver,
        rank=rank if uses_cg else 0,
        store=TileStore.nbytes_for(n, b, dtype),
        samples=3 * 8 * n * (n_features + 4),
        vectors=_CG_VECTORS * 8 * n * max(n_outputs, 1) if uses_cg else 2 * 8 * n * max(n_outputs, 1),
        factor=8 * n * rank * 2 if uses_cg else 0,  # the factor and one temporary of its size
        blocks=8 * b * b * 2 + workers * 8 * block * block * 6,  # a tile in float64 and its copy; the engine's blocks
        available=available,
    )


def plan_fit(
    n_samples: int,
    n_features: int,
    n_outputs: int,
    *,
    storage: str = "auto",
    solver: str = "auto",
    rank: int = 1000,
    workers: int = 1,
    block: int = 512,
    available: int | None = None,
    candidates: bool = False,
    alternatives: str = "",
) -> FitPlan:
    """The memory a fit will need, with ``storage`` and ``solver`` resolved; ``MemoryError`` where it cannot fit.

    Parameters
    ----------
    n_samples, n_features, n_outputs : int
        The training data's shape and the number of right-hand sides.
    storage : {'auto', 'float64', 'float32'}, default='auto'
        Dtype of the stored kernel; ``'auto'``: float64 where the whole fit
        fits in the memory available, else float32.
    solver : {'auto', 'cholesky', 'cg'}, default='auto'
        ``'auto'``: Cholesky up to :data:`CHOLESKY_MAX_ROWS` rows, conjugate
        gradients above.
    rank : int, default=1000
        Rank of the preconditioner (conjugate gradients).
    workers, block : int
        The kernel engine's threads and their block size.
    available : int, optional
        Bytes available; :func:`sk_deq._runtime.available_memory_bytes` by default.
    candidates : bool, default=False
        Whether several alphas are tried first (by conjugate gradients, with
        the preconditioner, whatever the solver of the final fit).
    alternatives : str, default=''
        The estimator's ways out, for the error message.

    Returns
    -------
    FitPlan

    Raises
    ------
    MemoryError
        If the fit does not fit in the memory available, even in float32.
    """
    n = int(n_samples)
    solver = ("cholesky" if n <= CHOLESKY_MAX_ROWS else "cg") if solver == "auto" else solver
    rank = int(min(rank, n))
    avail = available_memory_bytes() if available is None else int(available)
    dtypes = [np.float64, np.float32] if storage == "auto" else [np.dtype(storage).type]
    shape = (n, int(n_features), int(n_outputs))
    rest = (solver, rank, int(workers), int(block), avail, bool(candidates))
    plans = [_plan(*shape, dt, *rest) for dt in dtypes]
    for plan in plans:
        if avail is None or plan.total <= avail:
            return plan
    raise MemoryError(plans[-1].describe() + (" Ways out: " + alternatives if alternatives else ""))
