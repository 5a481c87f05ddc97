"""What an exact kernel ridge fit will need in memory, said before anything is allocated: :func:`plan_fit`.

The training kernel is held once, its lower triangle in tiles
(:class:`~sk_deq.kernel_ridge._tiles.TileStore`): ``n^2 / 2`` entries, 8
bytes each in float64, 4 in float32.  Beside it a fit holds the samples
(the validated input, its scaled copy and the engine's prepared rows), the
conjugate-gradient vectors, the preconditioner's factor (``n x rank``,
float64) and the kernel engine's blocks being solved.  ``storage='auto'``
stores float64 where all of it fits, else float32; where even float32 does
not fit, the error names the ways out.

With a CUDA ``device`` the stored kernel, the solver's vectors, a copy of
the preconditioner's factor and the engine's blocks live in the device's
memory and are planned against what it has free
(``torch.cuda.mem_get_info``, plus what torch's allocator holds unused);
the samples and the building of the factor stay in the host's.  With
torch's CPU device all of it is the host's, as without a device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._runtime import TORCH_BLOCK_ENTRY_BYTES, _gib, available_memory_bytes
from ._tiles import TileStore, tile_size

__all__ = ["CHOLESKY_MAX_ROWS", "FitPlan", "device_memory", "largest_fit", "plan_fit"]

#: ``solver='auto'`` factors the stored kernel up to this many rows and uses conjugate gradients above
#: (chosen by measurement: benchmarks/, the exact kernel ridge section of the benchmarks page)
CHOLESKY_MAX_ROWS = 8192

#: float64 arrays of n x n_outputs the conjugate gradients keep (solution, residual, direction, product,
#: preconditioned residual, right-hand side, warm start, and their temporaries)
_CG_VECTORS = 10


@dataclass(frozen=True)
class FitPlan:
    """The memory of one fit, in bytes, by part, and the choices it implies.

    ``store``, ``vectors`` and ``blocks`` are where the kernel is stored
    (the device's memory with a CUDA ``device``); ``samples`` and
    ``factor`` (the building of the preconditioner's factor) the host's;
    ``factor_copy`` is the factor's copy on a CUDA device.
    """

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
    device: str | None = None
    device_available: int | None = None
    factor_copy: int = 0

    @property
    def separate(self) -> bool:
        """Whether the store lives in a memory of its own (a GPU's), not the host's."""
        return _is_gpu(self.device)

    @property
    def on_device(self) -> int:
        """Bytes at the fit's peak in the device's memory (0 without a separate one)."""
        return self.store + self.vectors + self.blocks + self.factor_copy if self.separate else 0

    @property
    def total(self) -> int:
        """Bytes at the fit's peak, wherever they are."""
        return self.store + self.samples + self.vectors + self.factor + self.blocks + self.factor_copy

    @property
    def on_host(self) -> int:
        """Bytes at the fit's peak in the host's memory."""
        return self.total - self.on_device

    def fits(self) -> bool:
        """Whether every part fits in the memory available to it (unknown memory: it fits)."""
        host = self.available is None or self.on_host <= self.available
        device = self.device_available is None or self.on_device <= self.device_available
        return host and device

    def describe(self) -> str:
        """One sentence: what the fit needs, by part (and where, with a GPU)."""
        store = f"the training kernel's lower triangle in {self.dtype.name} {_gib(self.store)}"
        work = f"the solver's vectors and the kernel's blocks {_gib(self.vectors + self.blocks)}"
        samples = f"the samples {_gib(self.samples)}"
        precond = [f"the preconditioner (rank {self.rank}) {_gib(self.factor)}"] if self.factor else []
        if not self.separate:
            parts = ", ".join([store, samples, *precond, work])
            return f"A fit on {self.n_samples} samples needs {_gib(self.total)}{_of(self.available)}: {parts}."
        copy = [f"the preconditioner's factor {_gib(self.factor_copy)}"] if self.factor_copy else []
        return (
            f"A fit on {self.n_samples} samples needs {_gib(self.on_device)} on {self.device}"
            f"{_of(self.device_available)}: {', '.join([store, work, *copy])}; "
            f"and {_gib(self.on_host)} on the host{_of(self.available)}: {', '.join([samples, *precond])}."
        )


def _of(available) -> str:
    return "" if available is None else f", of {_gib(available)} available"


def _is_gpu(device) -> bool:
    return device is not None and not str(device).startswith("cpu")


def device_memory(device) -> int | None:
    """Bytes a fit can allocate on ``device``: the host's for None or the CPU, else CUDA's free memory.

    CUDA's free memory counts what torch's caching allocator holds but does
    not use (it hands that out first).
    """
    if not _is_gpu(device):
        return available_memory_bytes()
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def _plan(n, n_features, n_outputs, dtype, solver, rank, workers, block, available, candidates, device, dev_avail):
    b = tile_size(n)
    uses_cg = solver == "cg" or candidates  # several alphas are tried by conjugate gradients
    torch_engine = device is not None
    # the engine's blocks (a tile's at most; None: a tile's, as on a GPU): torch solves one at a time, numpy
    # one per worker
    engine_block = min(block or b, b) ** 2 * (TORCH_BLOCK_ENTRY_BYTES if torch_engine else workers * 8 * 6)
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
        blocks=(8 + np.dtype(dtype).itemsize) * b * b + engine_block,  # a tile in float64 and in the store's dtype
        available=available,
        device=None if device is None else str(device),
        device_available=dev_avail,
        factor_copy=8 * n * rank if uses_cg and _is_gpu(device) else 0,
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
    block: int | None = 512,
    available: int | None = None,
    candidates: bool = False,
    alternatives: str = "",
    device=None,
    device_available: int | None = None,
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
        The kernel engine's threads and their block size (None: a tile's
        rows, as the torch engine's blocks on a GPU, which fill a tile).
    available : int, optional
        Bytes available on the host; :func:`sk_deq._runtime.available_memory_bytes` by default.
    candidates : bool, default=False
        Whether several alphas are tried first (by conjugate gradients, with
        the preconditioner, whatever the solver of the final fit).
    alternatives : str, default=''
        The estimator's ways out, for the error message.
    device : torch.device or str, optional
        Where the kernel is computed and stored (None: numpy on the host).
    device_available : int, optional
        Bytes available on a CUDA ``device``; its free memory by default
        (:func:`device_memory`).

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
    dev_avail = None
    if _is_gpu(device):
        dev_avail = device_memory(device) if device_available is None else int(device_available)
    dtypes = [np.float64, np.float32] if storage == "auto" else [np.dtype(storage).type]
    shape = (n, int(n_features), int(n_outputs))
    rest = (solver, rank, int(workers), block and int(block), avail, bool(candidates), device, dev_avail)
    plans = [_plan(*shape, dt, *rest) for dt in dtypes]
    for plan in plans:
        if plan.fits():
            return plan
    raise MemoryError(plans[-1].describe() + (" Ways out: " + alternatives if alternatives else ""))


def largest_fit(available: int, n_features: int, n_outputs: int, *, device=None, **kw) -> int:
    """The most samples :func:`plan_fit` accepts in ``available`` bytes (of the device's memory, given a GPU).

    For the documentation's figures: what a memory of a given size holds,
    computed from the plan, not measured.  ``kw`` are :func:`plan_fit`'s
    (``storage``, ``solver``, ``rank``...); the host is taken to have room.
    """
    host, dev = (2**62, available) if _is_gpu(device) else (available, None)

    def fits(n: int) -> bool:
        try:
            plan_fit(n, n_features, n_outputs, device=device, available=host, device_available=dev, **kw)
        except MemoryError:
            return False
        return True

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
