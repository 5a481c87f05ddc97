"""One BLAS thread for a block of code, without rescanning the process's libraries each time.

``threadpoolctl.threadpool_limits`` finds the BLAS and OpenMP libraries by
walking every shared library loaded in the process, on every call: with
CUDA's libraries loaded that scan is a visible share of a short fit on a GPU
(the figures are on the benchmarks page, "How the defaults were chosen").
:func:`one_blas_thread` keeps one ``ThreadpoolController`` and scans again
only when a module was imported since (a new extension module is how a new
BLAS arrives), so a limit costs next to nothing.  The L-BFGS driver, the exact kernels' blocks
and the Nyström row blocks all take their limit here.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

from threadpoolctl import ThreadpoolController

__all__ = ["one_blas_thread"]

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
    >>> from sk_deq._threads import one_blas_thread
    >>> with one_blas_thread():
    ...     float(np.ones((2, 2)) @ np.ones(2) @ np.ones(2))
    4.0
    """
    with _controller().limit(limits=1, user_api="blas"):
        yield
