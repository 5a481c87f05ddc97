"""Memory policy of the kernel functions: what fits, and how large a block is.

Every kernel function checks that its output matrix fits in the memory
available before it allocates it (:func:`check_kernel_fits_in_memory`), and
works in blocks sized from scikit-learn's ``working_memory``
(:func:`auto_block_size`) or in row chunks of about :data:`CHUNK_ENTRIES`
entries, so that temporaries stay bounded.
"""

from __future__ import annotations

import math
import os

__all__ = ["CHUNK_ENTRIES", "auto_block_size", "check_kernel_fits_in_memory"]

CHUNK_ENTRIES = 32768  # elementwise work is done on row chunks of about this many entries


def _available_memory_bytes() -> int | None:
    """Physical memory currently available (Linux ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


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
        Bytes per entry (float64).
    available : int, optional
        Bytes available; measured from the operating system (Linux
        ``MemAvailable``) by default.  Where it cannot be measured nothing is
        raised.
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
    nbytes = int(n_rows) * int(n_cols) * int(itemsize)
    avail = _available_memory_bytes() if available is None else int(available)
    if avail is not None and nbytes > avail:
        what = what or f"The kernel matrix of shape ({n_rows}, {n_cols})"
        advice = advice or (
            "Transform fewer samples at a time (the rows of a kernel are independent), or fit on fewer samples."
        )
        raise MemoryError(
            f"{what} needs {nbytes / 2**30:.3g} GiB ({nbytes} bytes of float64), more than the "
            f"{avail / 2**30:.3g} GiB of memory available. {advice}"
        )
    return nbytes


def auto_block_size(n_workers: int, entry_bytes: int = 160) -> int:
    """Rows (= columns) per block so that all workers' temporaries fit in
    scikit-learn's ``working_memory`` (MiB, ``sklearn.set_config``)."""
    from sklearn import get_config

    budget = float(get_config().get("working_memory", 1024)) * 2**20
    b = int(math.sqrt(budget / (max(1, n_workers) * entry_bytes)))
    return int(min(512, max(64, b)))
