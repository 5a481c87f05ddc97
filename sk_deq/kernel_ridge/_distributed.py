"""The training kernel held by the workers of a Dask ``distributed`` cluster: :class:`DaskStore`.

The kernel's lower triangle is cut into row slabs of about equal size
(:func:`~sk_deq.kernel_ridge._plan.slab_bounds`): slab ``s`` is
``K[a:b, :b]`` for its rows ``a:b``, its diagonal block ``K[a:b, a:b]``
whole.  Each slab is computed on a worker by the kernel engine, from the
prepared training samples sent once to every worker, and stays there as a
future: no slab, nor anything of ``n x n``, ever reaches the client.

:class:`DaskStore` is an *operator* of the solvers
(:mod:`sk_deq.kernel_ridge._solvers`): ``n``, ``matmat(X)``,
``columns(idx)`` and ``diagonal()``, computed where the slabs are.  A
product ``K @ X`` sends ``X`` (``n x k``) to every worker; the task of slab
``s`` returns its rows of ``K[a:b, :b] @ X[:b]`` and the mirror's part,
``K[a:b, :a]^T @ X[a:b]``, one ``b x k`` array, and the client sums them.
Only vectors travel.
"""

from __future__ import annotations

import sys
import uuid

import numpy as np

from .._validation import is_dask_collection
from ._fit import progress_bar
from ._arrays import NUMPY
from ._plan import SLAB_CHUNK_BYTES, WorkerMemory

__all__ = ["DaskStore", "cluster_client", "cluster_workers", "computed", "gather_samples"]

#: Columns summed in the slab's dtype at a time by a float32 product before the float64 sum (as a tile's)
_INNER = 2048


def cluster_client(owner: str):
    """The active ``distributed`` client, or an error saying how to start one."""
    advice = (
        f"{owner}.fit of a Dask array computes the training kernel's row slabs on the workers of a distributed "
        "cluster and solves there"
    )
    try:
        import distributed
    except ImportError:
        raise ImportError(f"{advice}: install distributed (pip install distributed).") from None
    try:
        return distributed.default_client()
    except ValueError:
        raise ValueError(
            f"{advice}, and no distributed Client is active: start one first (from distributed import Client; "
            "client = Client('tcp://scheduler:8786'), or Client() for a cluster on this machine), or fit an "
            "in-memory array (X.compute()) on this machine."
        ) from None


def cluster_workers(client) -> list:
    """The cluster's workers (:class:`WorkerMemory`), each with the memory it may hold before it spills to disk."""
    import dask

    target = dask.config.get("distributed.worker.memory.target", 0.6)
    fraction = float(target) if target else 0.8  # without spilling: the pause threshold's default
    workers = []
    for address, info in sorted(client.scheduler_info(n_workers=-1)["workers"].items()):
        limit = int(info.get("memory_limit") or 0)
        in_use = int(info.get("metrics", {}).get("memory", 0) or 0)
        workers.append(WorkerMemory(address, int(info.get("nthreads", 1)), int(limit * fraction), in_use))
    if not workers:
        raise ValueError("The distributed cluster has no worker: start workers, or wait for them to connect.")
    return workers


def gather_samples(X, owner: str) -> np.ndarray:
    """A Dask array of training samples computed on the client (the fitted estimator keeps them)."""
    da = sys.modules.get("dask.array")
    if da is None or not isinstance(X, da.Array):
        raise TypeError(
            f"{owner}.fit takes a Dask array, not a {type(X).__name__}; convert a Dask DataFrame with "
            "X.to_dask_array(lengths=True)."
        )
    if X.ndim != 2:
        raise ValueError(
            f"{owner}.fit expects a 2-D Dask array of shape (n_samples, n_features), got {X.ndim}-D with shape "
            f"{X.shape}; reshape it (X.reshape(-1, 1) for a single feature)."
        )
    return np.asarray(X.compute())


def computed(value):
    """A Dask collection's values (targets, weights: one or a few per sample), anything else as it is."""
    return np.asarray(value.compute()) if is_dask_collection(value) else value


def _dot(A, B) -> np.ndarray:
    """``A @ B`` in float64; a float32 ``A`` multiplied ``_INNER`` inner indices at a time, the parts summed in float64."""
    if A.dtype == np.float64:
        return A @ B
    B = B.astype(A.dtype)
    out = np.zeros((A.shape[0], B.shape[1]))
    for c in range(0, A.shape[1], _INNER):
        out += A[:, c : c + _INNER] @ B[c : c + _INNER]
    return out


# -- the tasks (run on the workers) ------------------------------------------------------------------------------
def _compute_slab(engine, S, a, b, dtype, n_jobs, block_size):
    """``K[a:b, :b]`` of the prepared samples ``S`` in ``dtype``: float64 rows a few at a time, the diagonal block's
    upper part mirrored from its lower (computed once, as the in-memory store's)."""
    out = np.empty((b - a, b), dtype=dtype)
    step = int(max(1, min(b - a, SLAB_CHUNK_BYTES // (8 * b))))
    kw = {"n_jobs": n_jobs, "block_size": block_size}
    for r0 in range(0, b - a, step):
        r1 = min(r0 + step, b - a)
        rows = S.take(slice(a + r0, a + r1))
        if a + r0:
            left = engine.kernel(rows, S.take(slice(0, a + r0)), **kw)
            out[r0:r1, : a + r0] = left
            out[:r0, a + r0 : a + r1] = left[:, a:].T
        out[r0:r1, a + r0 : a + r1] = engine.kernel(rows, **kw)
    return out


def _slab_product(slab, X, a, b):
    """The slab's part of ``K @ X``: rows ``a:b`` of the product, and the mirror's contribution to rows ``:a``."""
    out = np.empty((b, X.shape[1]))
    out[a:] = _dot(slab, X[:b])
    out[:a] = _dot(slab[:, :a].T, X[a:b])
    return out


def _slab_columns(slab, idx, a, b):
    """The slab's entries of the columns ``idx``: rows ``a:b`` of those before ``b``, rows ``:a`` of its own."""
    before = idx < b
    own = before & (idx >= a)
    return slab[:, idx[before]].astype(np.float64), slab[idx[own] - a, :a].T.astype(np.float64)


def _slab_diagonal(slab, a, b):
    return np.diagonal(slab[:, a:b]).astype(np.float64)


# -- the client's side ----------------------------------------------------------------------------------------------
class DaskStore:
    """The lower triangle of the training kernel in row slabs held by a cluster's workers (see the module docstring).

    Build it with :meth:`fill`; :meth:`release` frees the workers' memory
    (so does dropping the store).
    """

    ops = NUMPY  # the solver's vectors stay numpy arrays on the client

    def __init__(self, client, plan, slabs, keep=()):
        self.client, self.plan, self._slabs, self._keep = client, plan, list(slabs), list(keep)
        self.n = int(plan.n_samples)
        self.bounds = plan.bounds
        self._diagonal = None

    @classmethod
    def fill(cls, client, engine, S, plan, *, n_jobs=None, block_size=None, progress=False) -> DaskStore:
        """Compute every slab on its worker: the engine and the prepared samples ``S`` are sent once to each."""
        import distributed

        engine_f = client.scatter(engine, broadcast=True, hash=False)
        samples_f = client.scatter(S, broadcast=True, hash=False)
        tag = uuid.uuid4().hex[:12]
        slabs = [
            client.submit(
                _compute_slab,
                engine_f,
                samples_f,
                plan.bounds[s],
                plan.bounds[s + 1],
                plan.dtype,
                n_jobs,
                block_size,
                key=f"sk_deq-kernel-slab-{tag}-{s}",
                workers=[plan.placement[s]],
                allow_other_workers=True,
            )
            for s in range(len(plan.placement))
        ]
        store = cls(client, plan, slabs, keep=[engine_f, samples_f])  # kept: a lost slab is computed again
        try:
            with progress_bar(len(slabs), "kernel slabs", progress) as bar:
                for fut in distributed.as_completed(slabs):
                    if fut.status == "error":
                        fut.result()  # raises the task's error (never gathers a slab)
                    bar.update()
        except BaseException:
            store.release()
            raise
        return store

    def _each(self, func, *args):
        """``func(slab, *args, a, b)`` on every slab's worker: the results, in the order of the slabs."""
        futures = [
            self.client.submit(func, slab, *args, a, b, pure=False, workers=[w], allow_other_workers=True)
            for slab, a, b, w in zip(self._slabs, self.bounds[:-1], self.bounds[1:], self.plan.placement)
        ]
        return self.client.gather(futures)

    def matmat(self, X) -> np.ndarray:
        """``K @ X`` (float64, shape ``(n, k)``): ``X`` sent to every worker, each slab's part summed here."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        x_f = self.client.scatter(X, broadcast=True, hash=False)
        y = np.zeros((self.n, X.shape[1]))
        for b, part in zip(self.bounds[1:], self._each(_slab_product, x_f)):
            y[:b] += part
        return y

    def columns(self, idx) -> np.ndarray:
        """``K[:, idx]`` (float64, shape ``(n, len(idx))``), each entry read from the one slab holding it."""
        idx = np.asarray(idx, dtype=np.intp)
        out = np.empty((self.n, len(idx)))
        for a, b, (rows, mirror) in zip(self.bounds[:-1], self.bounds[1:], self._each(_slab_columns, idx)):
            before = idx < b
            out[a:b, before] = rows
            out[:a, before & (idx >= a)] = mirror
        return out

    def diagonal(self) -> np.ndarray:
        """The diagonal (float64, ``n`` entries), as stored."""
        if self._diagonal is None:
            self._diagonal = np.concatenate(self._each(_slab_diagonal))
        return self._diagonal

    def release(self) -> None:
        """Free the slabs and the samples on the workers."""
        self.client.cancel(self._slabs + self._keep)
        self._slabs, self._keep = [], []
