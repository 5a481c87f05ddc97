"""The tiled store of a symmetric kernel: products, columns, diagonal and the blocked Cholesky, against numpy."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from sk_deq.kernel_ridge._tiles import TileStore, tile_size


def _spd(n, seed=0, shift=0.5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 12))
    return X @ X.T / 12 + shift * np.eye(n)


def _store(K, tile, dtype=np.float64):
    st = TileStore(len(K), tile, dtype)
    for i, j in st.pairs():
        st.fill(i, j, K[st.rows(i), st.rows(j)])
    return st


@pytest.mark.parametrize(("n", "tile"), [(1, 64), (50, 64), (128, 64), (257, 64), (300, 100)])
def test_products_columns_and_diagonal_are_the_matrix(n, tile):
    K = _spd(n)
    st = _store(K, tile)
    X = np.random.default_rng(1).standard_normal((n, 3))
    np.testing.assert_allclose(st.matmat(X), K @ X, rtol=1e-12, atol=1e-12)
    idx = np.unique([0, n // 2, n - 1])
    np.testing.assert_array_equal(st.columns(idx), K[:, idx])
    np.testing.assert_array_equal(st.diagonal(), np.diag(K))
    assert st.nbytes == TileStore.nbytes_for(n, tile, np.float64)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_product_is_the_same_bits_on_any_number_of_threads(dtype):
    rng = np.random.default_rng(0)
    st = TileStore(1000, 128, dtype)
    st._buf[:] = rng.standard_normal(st._buf.shape)
    X = rng.standard_normal((1000, 5))
    one = st.matmat(X, workers=1)
    for workers in (2, 3, 8):
        np.testing.assert_array_equal(st.matmat(X, workers=workers), one)


def test_float32_storage_rounds_the_entries_once():
    K = _spd(200)
    st = _store(K, 64, np.float32)
    X = np.random.default_rng(1).standard_normal((200, 2))
    # the entries and the vectors are rounded to float32 and the sums run in it: errors of about 1e-7 of the
    # largest product, far below what float64 storage would be off by if it were silently used instead (0)
    got, ref = st.matmat(X), K @ X
    assert 0 < np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()
    assert st.nbytes == TileStore.nbytes_for(200, 64, np.float32) == 4 * 64 * 64 * 4 * 5 // 2


def test_diagonal_shift_and_scaling_in_place():
    K = _spd(150)
    st = _store(K, 64)
    d = np.random.default_rng(2).uniform(0.1, 2, 150)
    st.scale(d)
    st.add_to_diagonal(0.3)
    ref = d[:, None] * K * d + 0.3 * np.eye(150)
    X = np.random.default_rng(3).standard_normal((150, 2))
    np.testing.assert_allclose(st.matmat(X), ref @ X, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("n", "tile"), [(64, 64), (200, 64), (333, 128)])
def test_the_blocked_cholesky_solves_the_system(n, tile, dtype):
    K = _spd(n, shift=1.0)
    Y = np.random.default_rng(4).standard_normal((n, 3))
    st = _store(K, tile, dtype)
    st.cholesky()
    ref = np.linalg.solve(K, Y)
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    assert np.abs(st.cho_solve(Y) - ref).max() <= rtol * np.abs(ref).max()
    assert st.cho_solve(Y[:, 0]).shape == (n,)
    with pytest.raises(RuntimeError, match="Cholesky factor"):
        st.matmat(Y)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_factor_agrees_on_one_and_two_blas_threads(threads):
    """The BLAS may sum in another order on another thread count: the solution agrees to rounding."""
    K = _spd(400, shift=0.1)
    Y = np.random.default_rng(5).standard_normal((400, 2))
    st = _store(K, 128)
    with threadpool_limits(threads):
        st.cholesky()
        C = st.cho_solve(Y)
    ref = np.linalg.solve(K, Y)
    assert np.abs(C - ref).max() <= 1e-10 * np.abs(ref).max()


def test_a_matrix_that_is_not_positive_definite_is_refused():
    K = _spd(100)
    K[50, 50] = -1.0
    st = _store(K, 32)
    with pytest.raises(np.linalg.LinAlgError, match=r"not positive definite.*alpha"):
        st.cholesky()


def test_only_the_lower_triangle_is_held():
    st = TileStore(100, 32, np.float64)
    assert st.N == 4 and len(st.pairs()) == 10
    with pytest.raises(IndexError, match="above the diagonal"):
        st.tile(0, 1)
    with pytest.raises(ValueError, match="float32 or float64"):
        TileStore(10, 4, np.int64)


@pytest.mark.parametrize("n", [1, 63, 64, 2048, 2049, 6000, 60000])
def test_tile_size_leaves_little_padding(n):
    b = tile_size(n)
    count = -(-n // b)
    assert b % 64 == 0 or b == n
    assert count * b - n < 64 * count  # the last tile nearly full
    assert b <= max(2048 + 63, n)


@pytest.mark.slow
def test_a_cholesky_of_17000_rows_does_not_crash_the_interpreter(tmp_path):
    """LAPACK's threaded potrf of the whole matrix crashed from about 16,000 rows (OpenBLAS SKYLAKEX on AMD EPYC)."""
    code = textwrap.dedent(
        """
        import numpy as np
        from sk_deq.kernel_ridge._tiles import TileStore, tile_size
        n = 17000
        rng = np.random.default_rng(0)
        X = rng.standard_normal((n, 64))
        st = TileStore(n, tile_size(n), np.float64)
        for i, j in st.pairs():
            st.fill(i, j, X[st.rows(i)] @ X[st.rows(j)].T / 64)
        st.add_to_diagonal(1.0)
        y = rng.standard_normal((n, 1))
        st.cholesky()
        c = st.cho_solve(y)
        print("ok", bool(np.isfinite(c).all()))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", "True"]
