"""The few array operations the stores and solvers spell differently in numpy and torch: :class:`ArrayOps`.

The conjugate gradients, the preconditioner and the tiled stores are
written once, on arrays of either library: every operation they share
(slicing, ``@``, ``+``, ``*``, in-place updates, ``.T``, ``.max()``) is
spelled alike in both, and the rest is here.  :data:`NUMPY` holds the
numpy arrays of the host; :class:`~sk_deq.kernel_ridge._torch_tiles.TorchOps`
the float64 tensors of a torch device (its module imports torch, this one
does not).

``scalar`` is the only read of a device's value by the host the solvers
make inside an iteration (one per conjugate-gradient iteration); ``to_host``
brings a whole array back, once per solve.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg as sl

__all__ = ["NUMPY", "ArrayOps"]


class ArrayOps:
    """Float64 arrays of numpy, on the host: the operations the solvers spell per library."""

    #: where the arrays live: None for numpy on the host, else a torch device
    device: Any = None

    def asarray(self, x):
        """``x`` as a float64 array of this library (no copy when it is one)."""
        return np.asarray(x, dtype=np.float64)

    def to_host(self, x) -> np.ndarray:
        """``x`` as a float64 numpy array."""
        return np.asarray(x, dtype=np.float64)

    def zeros(self, shape, dtype=np.float64):
        """Zeros of ``shape`` (float64 unless a numpy ``dtype`` says otherwise)."""
        return np.zeros(shape, dtype=dtype)

    def copy(self, x):
        """A copy of ``x``."""
        return x.copy()

    def where(self, cond, a, b):
        """``a`` where ``cond``, else ``b``."""
        return np.where(cond, a, b)

    def column_norms(self, X):
        """The Euclidean norm of every column of ``X``."""
        return np.linalg.norm(X, axis=0)

    def column_dots(self, A, B):
        """``sum(A * B, axis=0)``: the inner products of the columns."""
        return np.einsum("ij,ij->j", A, B)

    def scalar(self, x) -> float:
        """The value of a 0-d array on the host (on a GPU: the host waits for it)."""
        return float(x)

    def shifted(self, A, alpha: float):
        """A copy of the square ``A`` with ``alpha`` added to its diagonal (one copy, no identity matrix)."""
        out = A.copy()
        out.flat[:: out.shape[0] + 1] += alpha
        return out

    def cho_factor(self, A):
        """The lower Cholesky factor of the symmetric positive definite ``A`` (``A`` may be overwritten)."""
        return sl.cho_factor(A, lower=True, overwrite_a=True, check_finite=False)

    def cho_solve(self, factor, B):
        """``A^{-1} B`` from :meth:`cho_factor`'s ``factor``."""
        return sl.cho_solve(factor, B, check_finite=False)


#: The numpy operations (the stores and solvers without a device).
NUMPY = ArrayOps()
