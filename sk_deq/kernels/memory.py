"""Memory policy of the kernel functions and estimators: what fits, and how large a block is.

Every kernel function checks that its output matrix fits in the memory
available before it allocates it (:func:`check_kernel_fits_in_memory`), and
works in blocks sized from scikit-learn's ``working_memory``
(:func:`auto_block_size`) or in row chunks of about :data:`CHUNK_ENTRIES`
entries (:data:`SOLVE_CHUNK_ENTRIES` in the exact kernel's block solve), so
that temporaries stay bounded.  What is available is measured by
:func:`available_memory_bytes`, the one guard every size check of the package
uses (the kernels, the transformers and the networks' weights and feature
caches).
"""

from __future__ import annotations

import math
import os

__all__ = [
    "CHUNK_ENTRIES",
    "SOLVE_CHUNK_ENTRIES",
    "auto_block_size",
    "available_memory_bytes",
    "check_fits_in_memory",
    "check_kernel_fits_in_memory",
]

CHUNK_ENTRIES = 32768  # elementwise work is done on row chunks of about this many entries
#: Entries of a block of the exact kernel solved at once (rows of 256 of the
#: default 512 columns).  Large enough that every numpy operation runs long
#: with the GIL released: with 32768 the engine's threads waited on each
#: other (benchmarks/bench_kernel_cores.py; the benchmarks page, "How the
#: defaults were chosen").
SOLVE_CHUNK_ENTRIES = 131072

# Where the guard reads from (module constants, so that tests can point them at files of their own).
_PROC_MEMINFO = "/proc/meminfo"
_PROC_CGROUP = "/proc/self/cgroup"
_PROC_STATUS = "/proc/self/status"
_CGROUP_ROOT = "/sys/fs/cgroup"
#: cgroup v1 writes "no limit" as a number near 2**63; anything above this is no limit.
_UNLIMITED = 2**60


def available_memory_bytes() -> int | None:
    """Bytes this process can still allocate, or None where nothing can be measured.

    The least of what every limit on the process leaves:

    - the machine's available memory (Linux ``MemAvailable`` in
      ``/proc/meminfo``; elsewhere the free physical pages);
    - the memory cgroups of the process and of their ancestors: the limit
      less the usage, page cache that can be dropped (``inactive_file``) not
      counted as used (cgroup v2 ``memory.max`` and ``memory.current``, v1
      ``memory.limit_in_bytes`` and ``memory.usage_in_bytes``);
    - ``RLIMIT_AS`` (``ulimit -v``) less the process's virtual size, and
      ``RLIMIT_DATA`` less its data segment.

    Returns
    -------
    int or None
        Bytes available (at least 0); None when no source can be read.

    Examples
    --------
    >>> from sk_deq.kernels.memory import available_memory_bytes
    >>> available = available_memory_bytes()
    >>> available is None or available >= 0
    True
    """
    known = [b for b in (_system_available(), _cgroup_available(), _rlimit_available()) if b is not None]
    return max(0, min(known)) if known else None


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def _int(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def _field(text: str | None, key: str, unit: int = 1) -> int | None:
    """The integer after ``key`` on its line of ``text`` (``key value [kB]`` or ``key: value``), times ``unit``."""
    for line in (text or "").splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2 and parts[0] == key:
            try:
                return int(parts[1]) * unit
            except ValueError:
                return None
    return None


def _system_available() -> int | None:
    """Linux ``MemAvailable``, else the free physical pages."""
    available = _field(_read(_PROC_MEMINFO), "MemAvailable", 1024)
    if available is not None:
        return available
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_dirs() -> list[tuple[str, bool]]:
    """``(directory, is_v2)`` of the process's memory cgroups and their ancestors, innermost first."""
    found = []
    for line in (_read(_PROC_CGROUP) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            root, v2 = _CGROUP_ROOT, True
        elif "memory" in controllers.split(","):
            root, v2 = os.path.join(_CGROUP_ROOT, "memory"), False
        else:
            continue
        rel = path.strip().strip("/")
        while True:  # the path as seen here may not exist (a namespaced container): its ancestors are tried too
            found.append((os.path.join(root, rel) if rel else root, v2))
            if not rel:
                break
            rel = os.path.dirname(rel)
    return found or [(_CGROUP_ROOT, True), (os.path.join(_CGROUP_ROOT, "memory"), False)]


def _cgroup_available() -> int | None:
    """The least headroom (limit less non-reclaimable usage) of the memory cgroups holding the process."""
    best = None
    for path, v2 in _cgroup_dirs():
        if v2:
            names = ("memory.max", "memory.current", "inactive_file")
        else:
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        limit = _int(_read(os.path.join(path, names[0])))  # None for "max" (v2's no limit)
        if limit is None or limit >= _UNLIMITED:
            continue
        usage = _int(_read(os.path.join(path, names[1]))) or 0
        reclaimable = _field(_read(os.path.join(path, "memory.stat")), names[2]) or 0
        headroom = limit - max(0, usage - reclaimable)
        best = headroom if best is None else min(best, headroom)
    return best


def _rlimit_available() -> int | None:
    """``RLIMIT_AS`` less the virtual size, and ``RLIMIT_DATA`` less the data segment: the smaller."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    status = _read(_PROC_STATUS)
    best = None
    for limit_name, used_key in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        which = getattr(resource, limit_name, None)
        if which is None:
            continue
        try:
            soft = resource.getrlimit(which)[0]
        except (OSError, ValueError):
            continue
        if soft == resource.RLIM_INFINITY or soft < 0 or soft >= _UNLIMITED:
            continue
        headroom = soft - (_field(status, used_key, 1024) or 0)
        best = headroom if best is None else min(best, headroom)
    return best


def check_fits_in_memory(nbytes: int, what: str, remedy: str, *, available: int | None = None) -> int:
    """Raise ``MemoryError`` when ``nbytes`` exceed the memory available, before anything is allocated.

    Parameters
    ----------
    nbytes : int
        Bytes the allocation needs.
    what : str
        What needs them, with its shape and dtype (the message's start).
    remedy : str
        What the user can do instead (the message's last sentence).
    available : int, optional
        Bytes available; :func:`available_memory_bytes` by default.  Where
        it cannot be measured nothing is raised.

    Returns
    -------
    int
        ``nbytes``.

    Raises
    ------
    MemoryError
        If ``nbytes`` exceed ``available``.

    Examples
    --------
    >>> from sk_deq.kernels.memory import check_fits_in_memory
    >>> check_fits_in_memory(4000, "A (10, 100) float32 array needs", "Use fewer rows.", available=2**20)
    4000
    """
    nbytes = int(nbytes)
    avail = available_memory_bytes() if available is None else int(available)
    if avail is not None and nbytes > avail:
        raise MemoryError(
            f"{what}: {_gib(nbytes)} ({nbytes} bytes), more than the {_gib(avail)} of memory available. {remedy}"
        )
    return nbytes


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def check_kernel_fits_in_memory(
    n_rows: int, n_cols: int, *, itemsize: int = 8, available: int | None = None, what: str | None = None, advice=None
) -> int:
    """Raise ``MemoryError`` naming the size when a kernel matrix cannot be allocated.

    Called before anything of size ``n_rows x n_cols`` is allocated.

    Parameters
    ----------
    n_rows, n_cols : int
        Shape of the kernel matrix.
    itemsize : int, default=8
        Bytes per entry (8: float64, 4: float32).
    available : int, optional
        Bytes available; :func:`available_memory_bytes` by default (the
        least of the machine's, the cgroup's and the rlimits' headroom).
        Where it cannot be measured nothing is raised.
    what : str, optional
        What needs the memory, for the message (default: the kernel matrix
        of that shape).
    advice : str, optional
        What to do instead, for the message (default: transform fewer samples).

    Returns
    -------
    int
        Size of the matrix in bytes.

    Raises
    ------
    MemoryError
        If the matrix needs more than ``available`` bytes.

    Examples
    --------
    >>> from sk_deq.kernels import check_kernel_fits_in_memory
    >>> check_kernel_fits_in_memory(1000, 500, available=2**30)
    4000000
    """
    dtype = {2: "float16", 4: "float32", 8: "float64"}.get(int(itemsize), f"{int(itemsize)}-byte")
    return check_fits_in_memory(
        int(n_rows) * int(n_cols) * int(itemsize),
        f"{what or f'The kernel matrix of shape ({n_rows}, {n_cols})'} in {dtype} needs",
        advice or "Transform fewer samples at a time (the rows of a kernel are independent), or fit on fewer samples.",
        available=available,
    )


def auto_block_size(n_workers: int, entry_bytes: int = 160) -> int:
    """Rows (= columns) per block so that all workers' temporaries fit in
    scikit-learn's ``working_memory`` (MiB, ``sklearn.set_config``)."""
    from sklearn import get_config

    budget = float(get_config().get("working_memory", 1024)) * 2**20
    b = int(math.sqrt(budget / (max(1, n_workers) * entry_bytes)))
    return int(min(512, max(64, b)))
