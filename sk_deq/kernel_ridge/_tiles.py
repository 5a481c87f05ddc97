"""A symmetric kernel matrix held once: its lower triangle in square tiles, factored in place.

:class:`TileStore` keeps the tiles ``K[I, J]`` (``J <= I``) of an ``n x n``
symmetric matrix, each ``b x b`` and contiguous in column-major order, in
one buffer of ``N (N + 1) / 2`` tiles (``N = ceil(n / b)``; the last rows
and columns are padded: zeros, and ones on the padded diagonal).  Half the
memory of the full matrix, and every operation runs on whole tiles with the
BLAS and LAPACK of scipy, in place:

* :meth:`TileStore.matmat`: ``K @ X``, one pass over the triangle (each
  off-diagonal tile serves its block and its mirror);
* :meth:`TileStore.cholesky`: the right-looking blocked Cholesky
  factorisation, ``potrf`` on one ``b x b`` tile at a time, ``trsm`` and
  ``gemm``/``syrk`` on the others.  LAPACK's own ``potrf`` of the whole
  matrix (numpy's, scipy's and torch's) crashed the interpreter from about
  16,000 rows on a machine with OpenBLAS's SKYLAKEX kernels; on tiles of a
  few thousand rows it never reaches that size;
* :meth:`TileStore.cho_solve`: the two triangular solves, tile by tile.

Float32 or float64; the products run in the store's dtype and are summed
in float64.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import blas, lapack

from .._runtime import one_blas_thread

__all__ = ["GROUPS", "TileStore", "tile_size"]

#: fixed runs of tiles a product is split into (each summed on its own): the threads' unit of work
GROUPS = 8


def tile_size(n: int, target: int = 2048, multiple: int = 64) -> int:
    """Rows of a tile for ``n`` rows: about ``target``, so that the last tile is nearly full.

    ``N = ceil(n / target)`` tiles of ``ceil(n / N)`` rows, rounded up to a
    multiple of ``multiple`` (and never more rows than ``n`` needs).
    """
    n = max(int(n), 1)
    count = math.ceil(n / target)
    b = math.ceil(n / count)
    return min(int(math.ceil(b / multiple) * multiple), max(n, 1))


class TileStore:
    """The lower triangle of a symmetric ``n x n`` matrix in ``b x b`` tiles (see the module docstring).

    Parameters
    ----------
    n : int
        Rows (and columns) of the matrix.
    tile : int
        Rows of a tile (``b``).
    dtype : {numpy.float32, numpy.float64}
        Dtype of the stored entries.
    workers : int, default=1
        Threads of :meth:`matmat` (the same bits on any number).
    """

    def __init__(self, n: int, tile: int, dtype=np.float64, workers: int = 1):
        self.n, self.b, self.workers = int(n), int(tile), int(workers)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"a tile store holds float32 or float64, not {self.dtype}")
        self.N = max(1, math.ceil(self.n / self.b))
        self._buf = np.zeros((self.N * (self.N + 1) // 2, self.b, self.b), dtype=self.dtype)
        self.factored = False
        pad = self.N * self.b - self.n
        if pad:  # ones on the padded diagonal: the padded matrix stays positive definite, its solution zero there
            last = self.tile(self.N - 1, self.N - 1)
            idx = np.arange(self.b - pad, self.b)
            last[idx, idx] = 1.0

    @staticmethod
    def nbytes_for(n: int, tile: int, dtype) -> int:
        """Bytes the tiles of an ``n``-row store take."""
        count = max(1, math.ceil(int(n) / int(tile)))
        return count * (count + 1) // 2 * int(tile) ** 2 * np.dtype(dtype).itemsize

    @property
    def nbytes(self) -> int:
        """Bytes the tiles take."""
        return int(self._buf.nbytes)

    def _index(self, i: int, j: int) -> int:
        return i * (i + 1) // 2 + j

    def tile(self, i: int, j: int) -> np.ndarray:
        """``K[I, J]`` for ``j <= i``, a column-major view (writing to it writes the store)."""
        if j > i:
            raise IndexError(f"tile ({i}, {j}) is above the diagonal: the store holds the lower triangle")
        return self._buf[self._index(i, j)].T

    def rows(self, i: int) -> slice:
        """The rows (of the unpadded matrix) of tile row ``i``."""
        return slice(i * self.b, min((i + 1) * self.b, self.n))

    def pairs(self):
        """Every ``(i, j)`` with ``j <= i``, row by row."""
        return [(i, j) for i in range(self.N) for j in range(i + 1)]

    # -- filling ------------------------------------------------------------------
    def fill(self, i: int, j: int, block: np.ndarray) -> None:
        """Write ``block = K[I, J]`` (``j <= i``, unpadded shape) into its tile."""
        ri, rj = self.rows(i), self.rows(j)
        t = self.tile(i, j)
        t[: ri.stop - ri.start, : rj.stop - rj.start] = block

    def diagonal(self) -> np.ndarray:
        """The diagonal of the matrix (float64, ``n`` entries)."""
        out = np.empty(self.N * self.b)
        for i in range(self.N):
            out[i * self.b : (i + 1) * self.b] = np.diagonal(self.tile(i, i))
        return out[: self.n]

    def add_to_diagonal(self, value) -> None:
        """Add ``value`` (a scalar or ``n`` values) to the diagonal, in place (not to the padding)."""
        v = np.broadcast_to(np.asarray(value, dtype=np.float64), (self.n,))
        for i in range(self.N):
            rows = self.rows(i)
            t = self.tile(i, i)
            k = rows.stop - rows.start
            t[np.arange(k), np.arange(k)] += v[rows].astype(self.dtype)

    def scale(self, d: np.ndarray) -> None:
        """``K <- D K D`` with ``D = diag(d)``, in place (``n`` values)."""
        dp = self._pad(np.asarray(d, dtype=np.float64)[:, None], fill=1.0)[:, 0].astype(self.dtype)
        for i, j in self.pairs():
            t = self.tile(i, j)
            t *= dp[i * self.b : (i + 1) * self.b, None]
            t *= dp[None, j * self.b : (j + 1) * self.b]

    # -- products -----------------------------------------------------------------
    def _pad(self, X: np.ndarray, fill: float = 0.0) -> np.ndarray:
        out = np.full((self.N * self.b, X.shape[1]), fill, dtype=X.dtype)
        out[: self.n] = X
        return out

    def matmat(self, X: np.ndarray, workers: int | None = None) -> np.ndarray:
        """``K @ X`` for ``X`` of shape ``(n, k)``: float64, one pass over the tiles.

        The tiles are split into :data:`GROUPS` fixed runs, each summed into
        its own result on one BLAS thread, on ``workers`` threads (the
        store's by default); the runs' results are then added in their order.
        So the result is the same bits whatever ``workers``.
        """
        workers = self.workers if workers is None else int(workers)
        if self.factored:
            raise RuntimeError("the store holds a Cholesky factor, not the matrix")
        X = np.asarray(X)
        xp = self._pad(X).astype(self.dtype, copy=False)
        pairs = self.pairs()
        bounds = np.linspace(0, len(pairs), min(GROUPS, len(pairs)) + 1).round().astype(int)
        runs = [(pairs[a:b], xp) for a, b in zip(bounds[:-1], bounds[1:])]
        with one_blas_thread():
            if workers <= 1 or len(runs) == 1:
                parts = [self._run_product(*run) for run in runs]
            else:
                from ..kernels._workers import map_unordered

                done = dict(map_unordered(lambda k, run: (k, self._run_product(*run)), list(enumerate(runs)), workers))
                parts = [done[k] for k in range(len(runs))]
        y = parts[0]
        for part in parts[1:]:
            y += part
        return y[: self.n]

    def _run_product(self, pairs, xp) -> np.ndarray:
        """The tiles ``pairs``' share of ``K @ x`` (padded rows, float64)."""
        y = np.zeros((self.N * self.b, xp.shape[1]))
        b = self.b
        for i, j in pairs:
            t = self.tile(i, j)
            y[i * b : (i + 1) * b] += t @ xp[j * b : (j + 1) * b]
            if j < i:  # the tile's mirror K[J, I] = K[I, J]^T
                y[j * b : (j + 1) * b] += t.T @ xp[i * b : (i + 1) * b]
        return y

    def columns(self, idx) -> np.ndarray:
        """``K[:, idx]`` (float64, shape ``(n, len(idx))``), read from the tiles."""
        if self.factored:
            raise RuntimeError("the store holds a Cholesky factor, not the matrix")
        idx = np.asarray(idx, dtype=np.intp)
        out = np.empty((self.N * self.b, len(idx)))
        b = self.b
        for c, col in enumerate(idx):
            j, r = divmod(int(col), b)
            for i in range(self.N):  # row block i of column col: below the diagonal K[I, J], above it K[J, I]^T
                out[i * b : (i + 1) * b, c] = self.tile(i, j)[:, r] if i >= j else self.tile(j, i)[r, :]
        return out[: self.n]

    # -- Cholesky ---------------------------------------------------------------------
    def cholesky(self) -> None:
        """Factor ``K = L L^T`` in place (``L`` in the tiles).

        Raises
        ------
        numpy.linalg.LinAlgError
            If the matrix is not numerically positive definite (the store is
            left partly factored and unusable).
        """
        potrf, trsm, gemm, syrk = self._lapack("potrf"), self._blas("trsm"), self._blas("gemm"), self._blas("syrk")
        N = self.N
        self.factored = True
        for k in range(N):
            with one_blas_thread():  # one tile: a small potrf, never LAPACK's threaded one of a large matrix
                _, info = potrf(self.tile(k, k), lower=1, overwrite_a=1, clean=1)
            if info != 0:
                raise np.linalg.LinAlgError(
                    f"the matrix is not positive definite (leading minor {k * self.b + info} of {self.n}); "
                    "a larger alpha regularises it"
                )
            lkk = self.tile(k, k)
            for i in range(k + 1, N):  # L_ik = K_ik L_kk^{-T}
                trsm(1.0, lkk, self.tile(i, k), side=1, lower=1, trans_a=1, overwrite_b=1)
            for j in range(k + 1, N):  # the trailing matrix: K_ij -= L_ik L_jk^T
                ljk = self.tile(j, k)
                syrk(-1.0, ljk, beta=1.0, c=self.tile(j, j), lower=1, overwrite_c=1)
                for i in range(j + 1, N):
                    gemm(-1.0, self.tile(i, k), ljk, beta=1.0, c=self.tile(i, j), trans_b=1, overwrite_c=1)

    def cho_solve(self, Y: np.ndarray) -> np.ndarray:
        """``K^{-1} Y`` from the factor of :meth:`cholesky` (float64, shape of ``Y``)."""
        if not self.factored:
            raise RuntimeError("call cholesky() first")
        Y = np.asarray(Y, dtype=np.float64)
        Z = self._pad(Y.reshape(len(Y), -1)).astype(self.dtype)
        b, N = self.b, self.N
        trsm = self._blas("trsm")
        for i in range(N):  # L z = y
            zi = Z[i * b : (i + 1) * b]
            for j in range(i):
                zi -= self.tile(i, j) @ Z[j * b : (j + 1) * b]
            Z[i * b : (i + 1) * b] = trsm(1.0, self.tile(i, i), zi, lower=1)
        for i in reversed(range(N)):  # L^T c = z
            zi = Z[i * b : (i + 1) * b]
            for j in range(i + 1, N):
                zi -= self.tile(j, i).T @ Z[j * b : (j + 1) * b]
            Z[i * b : (i + 1) * b] = trsm(1.0, self.tile(i, i), zi, lower=1, trans_a=1)
        return Z[: self.n].astype(np.float64).reshape(Y.shape)

    def _blas(self, name: str):
        return blas.get_blas_funcs(name, dtype=self.dtype)

    def _lapack(self, name: str):
        return lapack.get_lapack_funcs(name, dtype=self.dtype)
