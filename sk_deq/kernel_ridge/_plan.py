"""What an exact kernel ridge fit will need in memory, said before anything is allocated: :func:`plan_fit`.

The training kernel is held once, its lower triangle in tiles
(:class:`~sk_deq.kernel_ridge._tiles.TileStore`): ``n^2 / 2`` entries, 8
bytes each in float64, 4 in float32.  Beside it a fit holds the samples
(the validated input, its scaled copy and the engine's prepared rows), the
conjugate-gradient vectors, the preconditioner's factor (``n x rank``,
float64) and the kernel engine's blocks being solved.  ``storage='auto'``
stores float64 where all of it fits, else float32; where even float32 does
not fit, the error names the ways out.

On a distributed cluster (:func:`plan_cluster`) the kernel's lower
triangle is held by the workers in row slabs of about equal size, as many
per worker, and the client holds what is linear in the samples: the
samples, the preconditioner's factor and the solver's vectors.

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
from ._solvers import FACTOR_BLOCK

__all__ = [
    "CHOLESKY_MAX_ROWS",
    "ClusterPlan",
    "FitPlan",
    "WorkerMemory",
    "device_memory",
    "factor_bytes",
    "largest_fit",
    "plan_cluster",
    "plan_fit",
    "slab_bounds",
]

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


def factor_bytes(n: int, rank: int) -> int:
    """Bytes of the preconditioner on the host: its factor, ``n x rank`` float64 (built in place, then extended in
    place to the rows held out while choosing alpha), the blocks of columns read to build and extend it, and the
    ``rank x rank`` Gram matrix of the factor with its Cholesky factor (the Woodbury identity's)."""
    return 8 * n * (rank + 3 * FACTOR_BLOCK) + 2 * 8 * rank**2 if rank else 0


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
        factor=factor_bytes(n, rank) if uses_cg else 0,
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
    rank: int = 4000,
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
    rank : int, default=4000
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


# -- on a distributed cluster ---------------------------------------------------------------------------------------

#: Most bytes of one row slab of the kernel on a worker: more slabs than that many bytes need are made (a slab is
#: computed, and multiplied, by one task)
SLAB_MAX_BYTES = 2**30

#: Most bytes of the float64 rows a slab's task computes at a time before storing them in the slab's dtype
SLAB_CHUNK_BYTES = 2**27


@dataclass(frozen=True)
class WorkerMemory:
    """One worker of a cluster as the plan sees it: its address, threads, memory limit and memory in use (bytes)."""

    address: str
    nthreads: int
    limit: int
    in_use: int


@dataclass(frozen=True)
class ClusterPlan:
    """The memory of a fit on a distributed cluster: the kernel's row slabs per worker, and what the client holds.

    Slab ``s`` holds ``K[bounds[s]:bounds[s+1], :bounds[s+1]]`` (the lower
    triangle's rows, its diagonal block whole) on worker ``placement[s]``.
    """

    n_samples: int
    dtype: np.dtype
    solver: str
    rank: int
    bounds: tuple
    placement: tuple
    worker_store: int
    worker_rest: int
    worker_available: int | None
    client: int
    client_available: int | None

    @property
    def n_workers(self) -> int:
        """Workers holding slabs."""
        return len(set(self.placement))

    @property
    def slabs_per_worker(self) -> int:
        """Most slabs a worker holds."""
        return max(self.placement.count(w) for w in set(self.placement))

    @property
    def total(self) -> int:
        """Bytes at the fit's peak on the busiest worker."""
        return self.worker_store + self.worker_rest

    def bytes_per_product(self, n_columns: int) -> int:
        """Bytes one product ``K @ X`` moves: ``X`` to every worker, and every slab's part back."""
        back = sum(self.bounds[1:])
        return 8 * int(n_columns) * (self.n_samples * self.n_workers + back)

    def describe(self) -> str:
        """One sentence: what the fit needs on each worker and on the client."""
        avail = "" if self.worker_available is None else f", of {_gib(self.worker_available)} available there"
        cavail = "" if self.client_available is None else f", of {_gib(self.client_available)} available"
        return (
            f"A fit on {self.n_samples} samples on {self.n_workers} Dask worker(s): {len(self.placement)} row slabs "
            f"of the training kernel's lower triangle in {self.dtype.name}, up to {self.slabs_per_worker} per "
            f"worker, {_gib(self.worker_store)} per worker, and the samples, a slab's rows being computed and the "
            f"vectors {_gib(self.worker_rest)} (at most {_gib(self.total)} per worker{avail}); on the client the "
            f"samples, the preconditioner (rank {self.rank}) and the solver's vectors {_gib(self.client)}{cavail}."
        )


def slab_bounds(n: int, count: int) -> tuple:
    """Row bounds of ``count`` row slabs of the lower triangle of an ``n x n`` matrix, of about equal sizes.

    Slab ``s`` covers rows ``bounds[s]:bounds[s+1]`` and the columns up to
    ``bounds[s+1]`` (its diagonal block whole): ``(b - a) b`` entries for
    bounds ``a < b``.  The bounds make those sizes equal (the size found
    by bisection), rounded to rows, every slab at least one row.
    """
    n, count = int(n), max(1, min(int(count), int(n)))

    def ends(area):
        cuts, a = [0.0], 0.0
        for _ in range(count):
            a = (a + np.sqrt(a * a + 4.0 * area)) / 2.0  # the b with (b - a) b = area
            cuts.append(a)
        return cuts

    lo, hi = n * n / (2.0 * count), n * n / float(count)  # the triangle's share, and the first slab's whole square
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if ends(mid)[-1] < n else (lo, mid)
    cuts = np.round(ends(hi)).astype(int)
    cuts[-1] = n
    return _strict(cuts, n)


def _strict(cuts, n: int) -> tuple:
    """Rounded bounds made strictly increasing from 0 to ``n`` (a slab of at least one row each)."""
    out = [0]
    for s, c in enumerate(cuts[1:-1], start=1):
        out.append(int(min(max(c, out[-1] + 1), n - (len(cuts) - 1 - s))))
    return (*out, n)


def _cluster_plan(n, n_features, n_outputs, dtype, rank, workers, block, count, client_available) -> ClusterPlan:
    itemsize = np.dtype(dtype).itemsize
    bounds = slab_bounds(n, count)
    placement = tuple(workers[s % len(workers)].address for s in range(len(bounds) - 1))
    per_worker: dict = {}
    for s, w in enumerate(placement):
        per_worker[w] = per_worker.get(w, 0) + (bounds[s + 1] - bounds[s]) * bounds[s + 1] * itemsize
    threads = max(w.nthreads for w in workers)
    rest = (
        16 * n * (n_features + 4)  # the prepared samples, and their copy while they arrive
        + threads * (min(SLAB_CHUNK_BYTES, 8 * n * n) + 8 * block * block * 6)  # the rows being computed
        + 4 * 8 * n * max(n_outputs, 1)  # a product's X and its result
    )
    limits = [w.limit - w.in_use for w in workers if w.limit > 0]
    return ClusterPlan(
        n_samples=n,
        dtype=np.dtype(dtype),
        solver="cg",
        rank=rank,
        bounds=bounds,
        placement=placement,
        worker_store=max(per_worker.values()),
        worker_rest=rest,
        worker_available=min(limits) if len(limits) == len(workers) else None,
        client=3 * 8 * n * (n_features + 4) + _CG_VECTORS * 8 * n * max(n_outputs, 1) + factor_bytes(n, rank),
        client_available=client_available,
    )


def plan_cluster(
    n_samples: int,
    n_features: int,
    n_outputs: int,
    workers: list,
    *,
    storage: str = "auto",
    rank: int = 4000,
    block: int = 512,
    client_available: int | None = None,
    alternatives: str = "",
) -> ClusterPlan:
    """The memory of a fit whose kernel is held in row slabs by the workers of a cluster; ``MemoryError`` where it cannot fit.

    Every worker holds as many slabs (about equal in size) and computes
    them on its threads: ``max(threads per worker, slabs of at most
    SLAB_MAX_BYTES)`` slabs per worker.  The client holds the samples, the
    preconditioner's factor and the conjugate gradients' vectors, all
    linear in the samples.

    Parameters
    ----------
    n_samples, n_features, n_outputs : int
        The training data's shape and the number of right-hand sides.
    workers : list of WorkerMemory
        The cluster's workers; ``limit`` is the memory a worker may hold
        before it spills to disk (0: none known).
    storage : {'auto', 'float64', 'float32'}, default='auto'
        ``'auto'``: float64 where every worker's part fits, else float32.
    rank : int, default=4000
        Rank of the preconditioner.
    block : int, default=512
        The kernel engine's block size.
    client_available : int, optional
        Bytes available on the client; :func:`available_memory_bytes` by default.
    alternatives : str, default=''
        The estimator's ways out, for the error message.

    Returns
    -------
    ClusterPlan

    Raises
    ------
    MemoryError
        If a worker's part does not fit even in float32, or the client's part
        does not fit.
    """
    n = int(n_samples)
    rank = int(min(rank, n))
    avail = available_memory_bytes() if client_available is None else int(client_available)
    dtypes = [np.float64, np.float32] if storage == "auto" else [np.dtype(storage).type]
    plans = []
    for dt in dtypes:
        store = (n * (n + 1) // 2) * np.dtype(dt).itemsize
        count = len(workers) * max(max(w.nthreads for w in workers), -(-store // (len(workers) * SLAB_MAX_BYTES)))
        plans.append(_cluster_plan(n, n_features, n_outputs, dt, rank, workers, block, count, avail))
    ways = " Ways out: " + alternatives if alternatives else ""
    for plan in plans:
        if plan.worker_available is None or plan.total <= plan.worker_available:
            break
    else:
        raise MemoryError(
            plans[-1].describe() + " The workers' part does not fit: more workers, or workers with more memory." + ways
        )
    if avail is not None and plan.client > avail:
        raise MemoryError(
            plan.describe()
            + " The client's part does not fit: a smaller preconditioner_rank, or a client with more memory."
            + ways
        )
    return plan
