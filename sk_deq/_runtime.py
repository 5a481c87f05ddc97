"""Where and with what the work runs: the device, the BLAS threads and the memory.

**The device.**  The ``device`` rule of every estimator, transformer and kernel of sk_deq.

One function, :func:`resolve_device`, turns a ``device`` parameter into
where the work runs.  The networks (:class:`~sk_deq.DEQClassifier` and the
other five estimators), the kernel transformers
(:class:`~sk_deq.ImplicitCKTransformer`, :class:`~sk_deq.ImplicitCKNystroem`),
the Gaussian-process kernel :class:`~sk_deq.ImplicitCKKernel`, the kernel
engine :class:`~sk_deq.kernels.ImplicitKernelEngine` and the kernel
function :func:`~sk_deq.kernels.implicit_kernel` all accept the same
values, with the same meaning, in ``fit`` as in ``predict``/``transform``,
and after unpickling:

* ``None``: the CPU.  The kernels then use their numpy engine, without
  importing torch; the networks run on the CPU.
* ``'auto'``: the current CUDA device when CUDA is available, else the same
  as ``None``.
* ``'cpu'`` or a CPU :class:`torch.device`: torch on the CPU (for the
  networks the same as ``None``).
* ``'cuda'``, ``'cuda:N'`` or a CUDA :class:`torch.device`: that GPU.  A
  machine without CUDA, or without GPU ``N``, is a ``ValueError``.

Anything else is a ``ValueError`` that names the reason: an MPS device has
no float64, which the readout and the exact kernels compute in; a meta
device holds no data; other torch backends are not supported.  The
parameter is resolved anew at every call: a model fitted with
``device='cuda'`` and loaded on a machine without a GPU raises this error at
``predict`` as it would at ``fit``; ``set_params(device='cpu')`` (or
``'auto'``) moves it to the CPU.

Float32 precision: every float32 matrix product of ``fit``, ``predict``
(``decision_function``, ``predict_proba``, ``features``) and of the kernels'
torch engine runs with TF32 off (:func:`full_float32_precision`): the
precision is pinned to ``'highest'`` inside those calls and the caller's
settings (``torch.set_float32_matmul_precision``, ``allow_tf32``) are restored
afterwards, so a program that set ``'high'`` for its own models still gets
the features the solver tolerances were calibrated for.  To let sk_deq use
TF32 anyway (faster on recent NVIDIA GPUs, about 1e-3 relative error in the
products), set the environment variable ``SK_DEQ_ALLOW_TF32=1``: the
caller's settings then apply unchanged.

**BLAS threads.**  One BLAS thread for a block of code, without rescanning the process's libraries each time.

``threadpoolctl.threadpool_limits`` finds the BLAS and OpenMP libraries by
walking every shared library loaded in the process, on every call: with
CUDA's libraries loaded that scan is a visible share of a short fit on a GPU
(the figures are on the benchmarks page, "How the defaults were chosen").
:func:`one_blas_thread` keeps one ``ThreadpoolController`` and scans again
only when a module was imported since (a new extension module is how a new
BLAS arrives), so a limit costs next to nothing.  The L-BFGS driver, the exact kernels' blocks
and the Nyström row blocks all take their limit here.

**Memory.**  Memory policy of the kernel functions and estimators: what fits, and how large a block is.

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

import contextlib
import os
import sys
import threading
from contextlib import contextmanager
from threadpoolctl import ThreadpoolController
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "ALLOW_TF32_ENV",
    "CHUNK_ENTRIES",
    "DEVICE_ENV",
    "DEVICE_VALUES",
    "SOLVE_CHUNK_ENTRIES",
    "TORCH_BLOCK_ENTRY_BYTES",
    "auto_block_size",
    "available_memory_bytes",
    "check_fits_in_memory",
    "check_kernel_fits_in_memory",
    "full_float32_precision",
    "on_gpu",
    "one_blas_thread",
    "resolve_device",
]


#: The values every ``device`` parameter accepts, as error messages spell them.
DEVICE_VALUES = "None, 'auto', 'cpu', 'cuda', 'cuda:N' or a CPU or CUDA torch.device"


#: The environment variable that, set to ``'cpu'``, makes ``device='auto'`` choose the CPU.
DEVICE_ENV = "SK_DEQ_DEVICE"


#: The environment variable that, set to ``'1'``, lets sk_deq's float32 products use TF32.
ALLOW_TF32_ENV = "SK_DEQ_ALLOW_TF32"


#: Why a device type torch knows is refused.
_REFUSED = {
    "mps": "MPS devices have no float64, which the readout and the exact kernels compute in",
    "meta": "a meta device holds no data (shapes only), so nothing can be computed on it",
}


def on_gpu(device) -> bool:
    """Whether ``device`` (a ``torch.device``, its name, or None for the CPU) is not the CPU.

    The one question the size rules ask of a device: row blocks and chunks
    (:func:`sk_deq.estimators._network.block_rows`), the readout's preconditioning
    (:func:`sk_deq.nn.readout.use_preconditioner`), the L-BFGS back end and
    where the input-scaling statistics are computed.  Torch is not imported.

    Examples
    --------
    >>> from sk_deq._runtime import on_gpu
    >>> on_gpu(None), on_gpu("cpu"), on_gpu("cuda:1")
    (False, False, True)
    """
    if device is None:
        return False
    return (getattr(device, "type", None) or str(device).split(":")[0]) != "cpu"


def resolve_device(device: str | torch.device | None, *, name: str = "device") -> torch.device | None:
    """The device a ``device`` parameter names, or None for the CPU engine of the caller.

    Torch is imported only for a value other than None.

    Parameters
    ----------
    device : None, str or torch.device
        ``None``, ``'auto'``, ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or a CPU
        or CUDA :class:`torch.device` (see the module's description).
    name : str, default='device'
        The parameter named in error messages.

    Returns
    -------
    torch.device or None
        ``torch.device('cpu')``, a CUDA device, or None for ``None`` and for
        ``'auto'`` without CUDA: the CPU, through the caller's own CPU path
        (the numpy engine for the kernels, torch on the CPU for the
        networks).

    Raises
    ------
    ValueError
        For a value of another type, a string that names no device, a device
        type other than CPU and CUDA, a machine without CUDA or a CUDA index
        it does not have; the message says which.

    Examples
    --------
    >>> from sk_deq import resolve_device
    >>> resolve_device(None) is None
    True
    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("mps")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: device='mps' is not supported: MPS devices have no float64, ...
    """
    if device is None:
        return None
    import torch

    use = f"use {name}='auto' (CUDA when available, else the CPU) or {name}='cpu'"
    if isinstance(device, str):
        if device == "auto":
            return None if _auto_is_cpu() else (torch.device("cuda") if torch.cuda.is_available() else None)
        try:
            dev = torch.device(device)
        except RuntimeError as exc:
            raise ValueError(f"{name}={device!r} names no device: {name} must be {DEVICE_VALUES}.") from exc
    elif isinstance(device, torch.device):
        dev = device
    else:
        raise ValueError(f"{name} must be {DEVICE_VALUES}, got {device!r} of type {type(device).__name__}.")
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        reason = _REFUSED.get(dev.type, f"sk_deq computes on CPUs and CUDA GPUs only, not on {dev.type} devices")
        raise ValueError(f"{name}={device!r} is not supported: {reason}; {use}.")
    if not torch.cuda.is_available():
        raise ValueError(f"{name}={device!r} was requested but CUDA is not available on this machine; {use}.")
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise ValueError(
            f"{name}={device!r} was requested but this machine has {count} CUDA device(s), "
            f"'cuda:0' to 'cuda:{count - 1}'; {use}."
        )
    return dev


def _auto_is_cpu() -> bool:
    """Whether :data:`DEVICE_ENV` pins ``'auto'`` to the CPU (unset, empty or ``'auto'``: it does not)."""
    pinned = os.environ.get(DEVICE_ENV, "").strip().lower()
    if pinned not in ("", "auto", "cpu"):
        raise ValueError(
            f"The environment variable {DEVICE_ENV}={pinned!r} is not supported: set it to 'cpu' (device='auto' "
            "then means the CPU) or leave it unset."
        )
    return pinned == "cpu"


@contextlib.contextmanager
def full_float32_precision():
    """Run the body with float32 matrix products in full precision (no TF32), then restore the caller's settings.

    Pins ``torch.set_float32_matmul_precision('highest')`` (which also turns
    ``torch.backends.cuda.matmul.allow_tf32`` off) and
    ``torch.backends.cudnn.allow_tf32 = False``; both are restored on exit,
    exceptions included.  With the environment variable
    :data:`ALLOW_TF32_ENV` set to ``'1'`` nothing is changed.  Usable as a
    decorator.

    Examples
    --------
    >>> import torch
    >>> from sk_deq._runtime import full_float32_precision
    >>> torch.set_float32_matmul_precision("high")
    >>> with full_float32_precision():
    ...     torch.get_float32_matmul_precision()
    'highest'
    >>> torch.get_float32_matmul_precision()
    'high'
    >>> torch.set_float32_matmul_precision("highest")
    """
    if os.environ.get(ALLOW_TF32_ENV, "").strip() == "1":
        yield
        return
    import torch

    precision, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.allow_tf32 = cudnn


_lock = threading.Lock()


_cached: dict = {"controller": None, "n_modules": -1}


def _controller() -> ThreadpoolController:
    """The process's libraries, scanned again after any new import."""
    with _lock:
        n_modules = len(sys.modules)
        if _cached["controller"] is None or n_modules != _cached["n_modules"]:
            _cached["controller"], _cached["n_modules"] = ThreadpoolController(), n_modules
        return _cached["controller"]


@contextmanager
def one_blas_thread():
    """Limit every BLAS library of the process to one thread inside the block (restored after it).

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq._runtime import one_blas_thread
    >>> with one_blas_thread():
    ...     float(np.ones((2, 2)) @ np.ones(2) @ np.ones(2))
    4.0
    """
    with _controller().limit(limits=1, user_api="blas"):
        yield


CHUNK_ENTRIES = 32768  # elementwise work is done on row chunks of about this many entries


#: Entries of a block of the exact kernel solved at once (rows of 256 of the
#: default 512 columns).  Large enough that every numpy operation runs long
#: with the GIL released: with 32768 the engine's threads waited on each
#: other (python -m benchmarks.kernels cores; the benchmarks page, "How the
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
    >>> from sk_deq._runtime import available_memory_bytes
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


def check_fits_in_memory(nbytes: int, what: str, remedy, *, available: int | None = None) -> int:
    """Raise ``MemoryError`` when ``nbytes`` exceed the memory available, before anything is allocated.

    Parameters
    ----------
    nbytes : int
        Bytes the allocation needs.
    what : str
        What needs them, with its shape and dtype (the message's start).
    remedy : str or callable
        What the user can do instead (the message's last sentence), or a
        function of no argument that says it, called only for the error.
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
    >>> from sk_deq._runtime import check_fits_in_memory
    >>> check_fits_in_memory(4000, "A (10, 100) float32 array needs", "Use fewer rows.", available=2**20)
    4000
    """
    nbytes = int(nbytes)
    avail = available_memory_bytes() if available is None else int(available)
    if avail is not None and nbytes > avail:
        raise MemoryError(
            f"{what}: {_gib(nbytes)} ({nbytes} bytes), more than the {_gib(avail)} of memory available. "
            f"{remedy() if callable(remedy) else remedy}"
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


#: Bytes per entry of a kernel block the torch engine solves at once (the Hermite route's temporaries).
TORCH_BLOCK_ENTRY_BYTES = 200


def auto_block_size(n_workers: int, entry_bytes: int = 160) -> int:
    """Rows (= columns) per block so that all workers' temporaries fit in
    scikit-learn's ``working_memory`` (MiB, ``sklearn.set_config``)."""
    from sklearn import get_config

    budget = float(get_config().get("working_memory", 1024)) * 2**20
    b = int(math.sqrt(budget / (max(1, n_workers) * entry_bytes)))
    return int(min(512, max(64, b)))
