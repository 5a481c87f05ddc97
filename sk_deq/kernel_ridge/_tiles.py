"""A symmetric kernel matrix held once: its lower triangle in square tiles, factored in place.

:class:`TileLayout` lays out the tiles ``K[I, J]`` (``J <= I``) of an
``n x n`` symmetric matrix, each ``b x b``, in one buffer of
``N (N + 1) / 2`` tiles (``N = ceil(n / b)``; the last rows and columns are
padded: zeros, and ones on the padded diagonal), row of tiles after row of
tiles.  Half the memory of the full matrix.  It holds what does not depend
on where the buffer lives: the indexing, the padding, filling, the
diagonal, scaling, and the two algorithms written on whole tiles:

* :meth:`TileLayout.cholesky`: the right-looking blocked Cholesky
  factorisation in place, ``potrf`` on one ``b x b`` tile at a time,
  ``trsm`` and ``gemm``/``syrk`` on the others.  LAPACK's own ``potrf`` of
  the whole matrix (numpy's, scipy's and torch's) crashed the interpreter
  from about 16,000 rows on a machine with OpenBLAS's SKYLAKEX kernels; on
  tiles of a few thousand rows it never reaches that size;
* :meth:`TileLayout.cho_solve`: the two triangular solves, tile by tile.

:class:`TileStore` keeps the buffer in numpy on the host (each tile
column-major, for the BLAS and LAPACK of scipy);
:class:`~sk_deq.kernel_ridge._torch_tiles.TorchTileStore` in one tensor on a
torch device.  Both offer the operator of the solvers: ``n``,
``matmat(X)`` (``K @ X``, one pass over the triangle, each off-diagonal tile
serving its block and its mirror), ``columns(idx)`` and ``diagonal()``, on
the float64 arrays of their ``ops`` (:mod:`sk_deq.kernel_ridge._arrays`).

Float32 or float64; the products run in the store's dtype and are summed
in float64.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import blas, lapack

from .._runtime import one_blas_thread
from ._arrays import NUMPY

__all__ = ["GROUPS", "TileLayout", "TileStore", "tile_size"]

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


class TileLayout:
    """The lower triangle of a symmetric ``n x n`` matrix in ``b x b`` tiles (see the module docstring).

    A subclass says where the buffer lives: it allocates it
    (``_allocate``), orients a tile (``_column_major``), converts arrays
    (``_cast``, ``ops``), gives a writable view of a tile's diagonal
    (``_diagonal_of``) and runs the tile kernels of the factorisation
    (``_potrf``, ``_trsm``, ``_syrk``, ``_gemm``, ``_tri_solve``).

    Parameters
    ----------
    n : int
        Rows (and columns) of the matrix.
    tile : int
        Rows of a tile (``b``).
    dtype : {numpy.float32, numpy.float64}
        Dtype of the stored entries.
    """

    ops = NUMPY
    _column_major = False

    def __init__(self, n: int, tile: int, dtype=np.float64):
        self.n, self.b = int(n), int(tile)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"a tile store holds float32 or float64, not {self.dtype}")
        self.N = max(1, math.ceil(self.n / self.b))
        self._buf = self._allocate((self.N * (self.N + 1) // 2, self.b, self.b))
        self.factored = False
        pad = self.N * self.b - self.n
        if pad:  # ones on the padded diagonal: the padded matrix stays positive definite, its solution zero there
            self._diagonal_of(self.tile(self.N - 1, self.N - 1))[self.b - pad :] = 1.0

    # -- what a subclass provides -----------------------------------------------------
    def _allocate(self, shape):  # pragma: no cover - the stores define it
        raise NotImplementedError

    def _cast(self, X):  # pragma: no cover
        """``X`` (an array of ``ops``) in the store's dtype."""
        raise NotImplementedError

    def _diagonal_of(self, t):  # pragma: no cover
        raise NotImplementedError

    # -- the layout -----------------------------------------------------------------------
    @staticmethod
    def nbytes_for(n: int, tile: int, dtype) -> int:
        """Bytes the tiles of an ``n``-row store take."""
        count = max(1, math.ceil(int(n) / int(tile)))
        return count * (count + 1) // 2 * int(tile) ** 2 * np.dtype(dtype).itemsize

    @property
    def nbytes(self) -> int:
        """Bytes the tiles take."""
        return self.nbytes_for(self.n, self.b, self.dtype)

    def _index(self, i: int, j: int) -> int:
        return i * (i + 1) // 2 + j

    def tile(self, i: int, j: int):
        """``K[I, J]`` for ``j <= i``, a view (writing to it writes the store)."""
        if j > i:
            raise IndexError(f"tile ({i}, {j}) is above the diagonal: the store holds the lower triangle")
        t = self._buf[self._index(i, j)]
        return t.T if self._column_major else t

    def rows(self, i: int) -> slice:
        """The rows (of the unpadded matrix) of tile row ``i``."""
        return slice(i * self.b, min((i + 1) * self.b, self.n))

    def pairs(self):
        """Every ``(i, j)`` with ``j <= i``, row by row."""
        return [(i, j) for i in range(self.N) for j in range(i + 1)]

    def _padded(self, X, fill: float = 0.0):
        """``X`` (``n`` rows) padded to ``N b`` rows with ``fill``, float64 in ``ops``'s arrays."""
        X = self.ops.asarray(X)
        out = self.ops.zeros((self.N * self.b, *X.shape[1:]))
        if fill:
            out[self.n :] = fill
        out[: self.n] = X
        return out

    def _check_matrix(self) -> None:
        if self.factored:
            raise RuntimeError("the store holds a Cholesky factor, not the matrix")

    # -- filling ------------------------------------------------------------------
    def fill(self, i: int, j: int, block) -> None:
        """Write ``block = K[I, J]`` (``j <= i``, unpadded shape) into its tile."""
        ri, rj = self.rows(i), self.rows(j)
        self.tile(i, j)[: ri.stop - ri.start, : rj.stop - rj.start] = self._cast(self.ops.asarray(block))

    def diagonal(self):
        """The diagonal of the matrix (float64, ``n`` entries)."""
        out = self.ops.zeros(self.N * self.b)
        for i in range(self.N):
            out[i * self.b : (i + 1) * self.b] = self._diagonal_of(self.tile(i, i))
        return out[: self.n]

    def add_to_diagonal(self, value) -> None:
        """Add ``value`` (a scalar or ``n`` values) to the diagonal, in place (not to the padding)."""
        v = np.array(np.broadcast_to(self.ops.to_host(value), (self.n,)))  # on the host: a scalar or n values
        v = self._cast(self.ops.asarray(v))
        for i in range(self.N):
            rows = self.rows(i)
            self._diagonal_of(self.tile(i, i))[: rows.stop - rows.start] += v[rows]

    def scale(self, d) -> None:
        """``K <- D K D`` with ``D = diag(d)``, in place (``n`` values)."""
        dp = self._cast(self._padded(d, fill=1.0))
        b = self.b
        for i, j in self.pairs():
            t = self.tile(i, j)
            t *= dp[i * b : (i + 1) * b, None]
            t *= dp[None, j * b : (j + 1) * b]

    # -- Cholesky ---------------------------------------------------------------------
    def cholesky(self) -> None:
        """Factor ``K = L L^T`` in place (``L`` in the tiles).

        Raises
        ------
        numpy.linalg.LinAlgError
            If the matrix is not numerically positive definite (the store is
            left partly factored and unusable).
        """
        N = self.N
        self.factored = True
        for k in range(N):
            info = self._potrf(self.tile(k, k))
            if info != 0:
                raise np.linalg.LinAlgError(
                    f"the matrix is not positive definite (leading minor {k * self.b + info} of {self.n}); "
                    "a larger alpha regularises it"
                )
            lkk = self.tile(k, k)
            for i in range(k + 1, N):  # L_ik = K_ik L_kk^{-T}
                self._trsm(lkk, self.tile(i, k))
            for j in range(k + 1, N):  # the trailing matrix: K_ij -= L_ik L_jk^T
                ljk = self.tile(j, k)
                self._syrk(self.tile(j, j), ljk)
                for i in range(j + 1, N):
                    self._gemm(self.tile(i, j), self.tile(i, k), ljk)

    def cho_solve(self, Y):
        """``K^{-1} Y`` from the factor of :meth:`cholesky` (float64, shape of ``Y``)."""
        if not self.factored:
            raise RuntimeError("call cholesky() first")
        Y = self.ops.asarray(Y)
        Z = self._cast(self._padded(Y.reshape(len(Y), -1)))
        b, N = self.b, self.N
        for i in range(N):  # L z = y
            zi = Z[i * b : (i + 1) * b]
            for j in range(i):
                zi -= self.tile(i, j) @ Z[j * b : (j + 1) * b]
            Z[i * b : (i + 1) * b] = self._tri_solve(self.tile(i, i), zi, transpose=False)
        for i in reversed(range(N)):  # L^T c = z
            zi = Z[i * b : (i + 1) * b]
            for j in range(i + 1, N):
                zi -= self.tile(j, i).T @ Z[j * b : (j + 1) * b]
            Z[i * b : (i + 1) * b] = self._tri_solve(self.tile(i, i), zi, transpose=True)
        return self.ops.asarray(Z[: self.n]).reshape(Y.shape)

    def _potrf(self, t) -> int:  # pragma: no cover - the stores define the tile kernels
        """Factor the tile ``t`` in place (lower); LAPACK's ``info`` (0: done)."""
        raise NotImplementedError

    def _trsm(self, lkk, t) -> None:  # pragma: no cover
        """``t <- t lkk^{-T}`` in place."""
        raise NotImplementedError

    def _syrk(self, c, a) -> None:  # pragma: no cover
        """``c <- c - a a^T`` in place (its lower triangle at least)."""
        raise NotImplementedError

    def _gemm(self, c, a, b) -> None:  # pragma: no cover
        """``c <- c - a b^T`` in place."""
        raise NotImplementedError

    def _tri_solve(self, lower, z, *, transpose: bool):  # pragma: no cover
        """``lower^{-1} z`` (``lower^{-T} z`` with ``transpose``)."""
        raise NotImplementedError


class TileStore(TileLayout):
    """The lower triangle of a symmetric matrix in tiles, in numpy on the host (see the module docstring).

    Each tile is contiguous in column-major order, as scipy's BLAS and
    LAPACK write in place.

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

    _column_major = True

    def __init__(self, n: int, tile: int, dtype=np.float64, workers: int = 1):
        self.workers = int(workers)
        super().__init__(n, tile, dtype)

    def _allocate(self, shape):
        return np.zeros(shape, dtype=self.dtype)

    def _cast(self, X):
        return X.astype(self.dtype, copy=False)

    def _diagonal_of(self, t):
        return np.einsum("ii->i", t)  # a writable view

    # -- products -----------------------------------------------------------------
    def matmat(self, X: np.ndarray, workers: int | None = None) -> np.ndarray:
        """``K @ X`` for ``X`` of shape ``(n, k)``: float64, one pass over the tiles.

        The tiles are split into :data:`GROUPS` fixed runs, each summed into
        its own result on one BLAS thread, on ``workers`` threads (the
        store's by default); the runs' results are then added in their order.
        So the result is the same bits whatever ``workers``.
        """
        workers = self.workers if workers is None else int(workers)
        self._check_matrix()
        xp = self._cast(self._padded(X))
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
        self._check_matrix()
        idx = np.asarray(idx, dtype=np.intp)
        out = np.empty((self.N * self.b, len(idx)))
        b = self.b
        for c, col in enumerate(idx):
            j, r = divmod(int(col), b)
            for i in range(self.N):  # row block i of column col: below the diagonal K[I, J], above it K[J, I]^T
                out[i * b : (i + 1) * b, c] = self.tile(i, j)[:, r] if i >= j else self.tile(j, i)[r, :]
        return out[: self.n]

    # -- the tile kernels of the factorisation: scipy's BLAS and LAPACK, in place -------------
    def _potrf(self, t) -> int:
        with one_blas_thread():  # one tile: a small potrf, never LAPACK's threaded one of a large matrix
            _, info = self._lapack("potrf")(t, lower=1, overwrite_a=1, clean=1)
        return int(info)

    def _trsm(self, lkk, t) -> None:
        self._blas("trsm")(1.0, lkk, t, side=1, lower=1, trans_a=1, overwrite_b=1)

    def _syrk(self, c, a) -> None:
        self._blas("syrk")(-1.0, a, beta=1.0, c=c, lower=1, overwrite_c=1)

    def _gemm(self, c, a, b) -> None:
        self._blas("gemm")(-1.0, a, b, beta=1.0, c=c, trans_b=1, overwrite_c=1)

    def _tri_solve(self, lower, z, *, transpose: bool):
        return self._blas("trsm")(1.0, lower, z, lower=1, trans_a=int(transpose))

    def _blas(self, name: str):
        return blas.get_blas_funcs(name, dtype=self.dtype)

    def _lapack(self, name: str):
        return lapack.get_lapack_funcs(name, dtype=self.dtype)
