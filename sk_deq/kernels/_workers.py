"""The threads the exact kernels solve their blocks on: how many, and how the blocks reach them.

:func:`kernel_workers` turns an ``n_jobs`` into a number of threads (joblib's
conventions, and 1 inside a joblib worker).  :func:`map_unordered` runs the
blocks: on joblib's default for ``prefer="threads"``, the threading backend,
it submits them to a :class:`~concurrent.futures.ThreadPoolExecutor` of its
own and waits on their completion; under any other backend a
``joblib.parallel_config`` makes active (``loky``, ``dask``) it hands them
to joblib.  Both are threads running the same function on the same blocks,
so the results are the same bits; the pool's caller wakes when a block
completes, where joblib's result loop polls in sleeps (what that costs: the
benchmarks page, "Speed on the CPU").
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed

from joblib import Parallel, delayed
from joblib.parallel import ThreadingBackend, get_active_backend

__all__ = ["kernel_workers", "map_unordered", "shares_memory"]


def kernel_workers(n_jobs=None) -> int:
    """The number of threads an exact kernel's numpy engine solves its blocks with.

    ``None``, the default of every exact kernel, means all cores (as
    scikit-learn's OpenMP code and BLAS use them without being asked), with
    two exceptions: inside a ``joblib.parallel_config`` context that sets
    ``n_jobs``, that value; inside a joblib worker (an outer ``Parallel``,
    e.g. ``GridSearchCV(n_jobs=...)``, already uses the cores), a Dask
    worker (its threads run the tasks, e.g. the row blocks of a Dask array)
    or another daemon process, 1.  An integer is joblib's: ``1`` serial,
    ``-1`` all cores, ``-2`` all but one.

    The count is that of threads, the blocks' workers: it is asked of the
    backend joblib picks for ``prefer="threads"`` (the one
    :func:`map_unordered` runs them on), never of a process backend, which
    in a daemon process (a Dask worker) warns ``setting n_jobs=1`` at every
    call.

    Parameters
    ----------
    n_jobs : int or None, default=None
        The ``n_jobs`` asked for.

    Returns
    -------
    int
        Worker threads, at least 1.

    Raises
    ------
    ValueError
        For ``n_jobs=0``.

    Examples
    --------
    >>> import joblib
    >>> from sk_deq.kernels.engine import kernel_workers
    >>> kernel_workers(1), kernel_workers(None) == joblib.cpu_count()
    (1, True)
    >>> with joblib.parallel_config(n_jobs=1):
    ...     kernel_workers(None)
    1
    """
    if n_jobs is None:
        backend, n_context = get_active_backend()
        if n_context is not None:
            n_jobs = n_context
        elif getattr(backend, "nesting_level", 0) or _in_worker_process():
            return 1
        else:
            n_jobs = -1
    threads = get_active_backend(prefer="threads")[0]  # threading, unless a context set another backend
    return max(1, int(threads.effective_n_jobs(n_jobs)))


def _in_worker_process() -> bool:
    """Whether this runs in a Dask worker or another daemon process (a pool's worker)."""
    if multiprocessing.current_process().daemon:
        return True
    distributed = sys.modules.get("distributed")  # never imported here: a worker has imported it
    if distributed is None:
        return False
    try:
        distributed.get_worker()
    except ValueError:
        return False
    return True


def shares_memory() -> bool:
    """Whether the active backend's workers share this process's memory (threads: they may write into arrays)."""
    return bool(getattr(get_active_backend(prefer="threads")[0], "supports_sharedmem", False))


def map_unordered(fn: Callable, tasks: Iterable[tuple], workers: int) -> Iterator:
    """``fn(*task)`` for every task on ``workers`` threads, the results as they complete.

    On joblib's threading backend (the default for ``prefer="threads"``)
    the tasks go to a thread pool of this call, and the caller blocks on
    their completion; under another active backend, to
    ``joblib.Parallel(n_jobs=workers, prefer="threads",
    return_as="generator_unordered")``.  A task's exception is raised here
    when its task is collected; the tasks not yet started are then
    cancelled, and the running ones finish first.

    Parameters
    ----------
    fn : callable
        The task's function.
    tasks : iterable of tuple
        The positional arguments of each call.
    workers : int
        Threads (or joblib's workers).

    Yields
    ------
    object
        ``fn``'s results, in the order the tasks complete.

    Examples
    --------
    >>> from sk_deq.kernels._workers import map_unordered
    >>> sorted(map_unordered(pow, [(2, 3), (3, 2), (5, 1)], 2))
    [5, 8, 9]
    """
    if not isinstance(get_active_backend(prefer="threads")[0], ThreadingBackend):
        yield from Parallel(n_jobs=workers, prefer="threads", return_as="generator_unordered")(
            delayed(fn)(*task) for task in tasks
        )
        return
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sk_deq-blocks")
    try:
        futures = [pool.submit(fn, *task) for task in tasks]
        for fut in as_completed(futures):
            yield fut.result()  # a task's exception: raised here, the tasks not started cancelled below
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
