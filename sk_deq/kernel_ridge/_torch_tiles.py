"""The stored kernel on a torch device: :class:`TorchTileStore`, and :class:`TorchOps`, the solvers' arrays there.

:class:`TorchTileStore` is the :class:`~sk_deq.kernel_ridge._tiles.TileLayout`
of :class:`~sk_deq.kernel_ridge._tiles.TileStore` in one tensor on a
device (``'cuda'``, or ``'cpu'`` for torch on the host), each tile
row-major.  Its products take and return float64 tensors on that device:

* ``matmat``: one tile row at a time, ``K[I, :I+1] @ X`` as one batched
  product of the row's tiles and ``K[:I, I] @ X[I]`` (the mirrors) as
  another, the partial products summed in float64;
* ``columns``: the columns of one tile column at a time, gathered from
  the tiles below the diagonal and the transposed rows of those above;
* the blocked Cholesky of the layout with ``torch.linalg.cholesky_ex`` on
  a diagonal tile, ``torch.linalg.solve_triangular`` on the panel and
  ``addmm_`` in place on the trailing tiles.

Every float32 product runs in full precision (no TF32 on Ampere and later
GPUs, :func:`sk_deq._runtime.full_float32_precision`).  The host waits for
the device only where it must: once per diagonal tile of the
factorisation (whether it was positive definite), never in a product.

This module imports torch; :mod:`sk_deq.kernel_ridge._fit` imports it only
when a ``device`` is given.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from .._runtime import full_float32_precision
from ._arrays import ArrayOps
from ._tiles import TileLayout

__all__ = ["TorchOps", "TorchTileStore"]

_TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}


class TorchOps(ArrayOps):
    """Float64 tensors on a torch ``device``: the operations the solvers spell per library."""

    def __init__(self, device):
        self.device = torch.device(device)

    def asarray(self, x):
        if isinstance(x, torch.Tensor):
            return x.to(device=self.device, dtype=torch.float64)
        return torch.as_tensor(np.asarray(x, dtype=np.float64), device=self.device)

    def to_host(self, x) -> np.ndarray:
        if isinstance(x, torch.Tensor):
            return x.detach().to(device="cpu", dtype=torch.float64).numpy()
        return np.asarray(x, dtype=np.float64)

    def zeros(self, shape, dtype=torch.float64):
        return torch.zeros(shape, dtype=dtype, device=self.device)

    def copy(self, x):
        return x.clone()

    def where(self, cond, a, b):
        return torch.where(cond, a, b)

    def column_norms(self, X):
        return torch.linalg.vector_norm(X, dim=0)

    def column_dots(self, A, B):
        return torch.einsum("ij,ij->j", A, B)

    def scalar(self, x) -> float:
        return float(x)

    def shifted(self, A, alpha: float):
        out = A.clone()
        out.diagonal().add_(alpha)
        return out

    def cho_factor(self, A):
        return torch.linalg.cholesky(A)

    def cho_solve(self, factor, B):
        return torch.cholesky_solve(B, factor)


def _full_precision(method):
    """``method`` with float32 products in full precision (TF32 off) for its duration."""

    @functools.wraps(method)
    def pinned(*args, **kwargs):
        with full_float32_precision():
            return method(*args, **kwargs)

    return pinned


class TorchTileStore(TileLayout):
    """The lower triangle of a symmetric matrix in tiles, in one tensor on a torch device (see the module docstring).

    Parameters
    ----------
    n : int
        Rows (and columns) of the matrix.
    tile : int
        Rows of a tile (``b``).
    dtype : {numpy.float32, numpy.float64}
        Dtype of the stored entries.
    device : str or torch.device
        Where the tiles live.
    """

    def __init__(self, n: int, tile: int, dtype=np.float64, device="cpu"):
        self.ops = TorchOps(device)
        super().__init__(n, tile, dtype)

    @property
    def device(self) -> torch.device:
        """Where the tiles live."""
        return self.ops.device

    def _allocate(self, shape):
        return torch.zeros(shape, dtype=_TORCH_DTYPES[self.dtype], device=self.device)

    def _cast(self, X):
        return X.to(_TORCH_DTYPES[self.dtype])

    def _diagonal_of(self, t):
        return t.diagonal()

    # -- products -----------------------------------------------------------------
    @_full_precision
    def matmat(self, X) -> torch.Tensor:
        """``K @ X`` for ``X`` of shape ``(n, k)``: float64 on the device, one pass over the tiles."""
        self._check_matrix()
        N, b = self.N, self.b
        xp = self._cast(self._padded(X))
        k = xp.shape[1]
        xv = xp.view(N, b, k)
        y = torch.zeros((N, b, k), dtype=torch.float64, device=self.device)
        for i in range(N):
            row = self._buf[self._index(i, 0) : self._index(i, i) + 1]  # K[I, J] for J <= I
            y[i] += torch.matmul(row, xv[: i + 1]).sum(dim=0, dtype=torch.float64)
            if i:  # their mirrors K[J, I] = K[I, J]^T, J < I
                y[:i] += torch.matmul(row[:i].transpose(1, 2), xv[i])
        return y.view(N * b, k)[: self.n]

    def columns(self, idx) -> torch.Tensor:
        """``K[:, idx]`` (float64 on the device, shape ``(n, len(idx))``), read from the tiles."""
        self._check_matrix()
        idx = np.asarray(idx, dtype=np.intp)
        N, b, dev = self.N, self.b, self.device
        out = torch.empty((N * b, len(idx)), dtype=torch.float64, device=dev)
        tile_col, within = np.divmod(idx, b)
        inside = torch.arange(b, device=dev)
        for j in np.unique(tile_col):
            j = int(j)
            pos = np.flatnonzero(tile_col == j)
            where, r = torch.as_tensor(pos, device=dev), torch.as_tensor(within[pos], device=dev)
            below = torch.as_tensor([self._index(i, j) for i in range(j, N)], device=dev)  # tiles (i, j), i >= j
            part = self._buf[below[:, None, None], inside[None, :, None], r[None, None, :]]
            out[j * b :, where] = part.reshape((N - j) * b, len(pos)).to(torch.float64)
            if j:  # above the diagonal: row r of the tiles (j, i), i < j
                above = self._buf[self._index(j, 0) : self._index(j, j)][:, r, :]
                out[: j * b, where] = above.transpose(1, 2).reshape(j * b, len(pos)).to(torch.float64)
        return out[: self.n]

    # -- the tile kernels of the factorisation ---------------------------------------------
    cholesky = _full_precision(TileLayout.cholesky)
    cho_solve = _full_precision(TileLayout.cho_solve)

    def _potrf(self, t) -> int:
        L, info = torch.linalg.cholesky_ex(t)
        bad = int(info)  # the one wait of a diagonal tile
        if bad == 0:
            t.copy_(L)
        return bad

    def _trsm(self, lkk, t) -> None:
        t.copy_(torch.linalg.solve_triangular(lkk.T, t, upper=True, left=False))

    def _syrk(self, c, a) -> None:
        c.addmm_(a, a.T, alpha=-1.0)

    def _gemm(self, c, a, b) -> None:
        c.addmm_(a, b.T, alpha=-1.0)

    def _tri_solve(self, lower, z, *, transpose: bool):
        if transpose:
            return torch.linalg.solve_triangular(lower.T, z, upper=True)
        return torch.linalg.solve_triangular(lower, z, upper=False)
