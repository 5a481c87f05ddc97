"""The stored kernel and the solver on a torch device (torch's CPU here), against the numpy store and solver."""

import numpy as np
import pytest

from sk_deq.kernel_ridge._fit import _pcg
from sk_deq.kernel_ridge._solvers import NystromPreconditioner, Weighted, extend_factor, low_rank_factor, pcg
from sk_deq.kernel_ridge._tiles import TileStore

torch = pytest.importorskip("torch")
from sk_deq.kernel_ridge._torch_tiles import TorchTileStore  # noqa: E402

SHAPES = [(1, 64), (50, 64), (257, 64), (300, 100)]


def _spd(n, seed=0, shift=0.5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 12))
    return X @ X.T / 12 + shift * np.eye(n)


def _stores(K, tile, dtype=np.float64):
    """The numpy store and the torch store of ``K``, filled alike."""
    pair = TileStore(len(K), tile, dtype), TorchTileStore(len(K), tile, dtype, "cpu")
    for st in pair:
        for i, j in st.pairs():
            st.fill(i, j, K[st.rows(i), st.rows(j)])
    return pair


def _rel(a, b):
    return np.abs(np.asarray(a) - b).max() / np.abs(b).max()


@pytest.mark.parametrize(("n", "tile"), SHAPES)
def test_products_columns_and_diagonal_are_the_numpy_store_s(n, tile):
    K = _spd(n)
    ref, st = _stores(K, tile)
    X = np.random.default_rng(1).standard_normal((n, 3))
    got = st.matmat(torch.as_tensor(X))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64 and got.shape == (n, 3)
    assert _rel(got, ref.matmat(X)) <= 1e-14 and _rel(got, K @ X) <= 1e-14  # the same sums in another order
    idx = np.unique([0, n // 2, n - 1, min(n - 1, tile + 3)])
    np.testing.assert_array_equal(st.columns(idx).numpy(), K[:, idx])  # copies: bitwise
    np.testing.assert_array_equal(st.diagonal().numpy(), np.diag(K))
    assert st.nbytes == ref.nbytes == TileStore.nbytes_for(n, tile, np.float64)
    assert st._buf.nbytes == st.nbytes and st._buf.device == torch.device("cpu")


def test_float32_storage_rounds_the_entries_once_as_the_numpy_store():
    K = _spd(200)
    ref, st = _stores(K, 64, np.float32)
    assert st._buf.dtype == torch.float32
    X = np.random.default_rng(1).standard_normal((200, 2))
    got, exact = st.matmat(X).numpy(), K @ X
    # float32 entries and vectors, each tile's product in float32: within float32's rounding of the exact
    # product, as the numpy store, and not float64's (which would be exact to 1e-15)
    assert 0 < np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()
    assert np.abs(got - ref.matmat(X)).max() <= 1e-5 * np.abs(exact).max()


@pytest.mark.parametrize(("dtype", "rtol"), [(np.float64, 1e-12), (np.float32, 1e-5)])
@pytest.mark.parametrize(("n", "tile"), [(64, 64), (200, 64), (333, 128)])
def test_the_blocked_cholesky_solves_the_weighted_shifted_system(n, tile, dtype, rtol):
    K = _spd(n, shift=1.0)
    d = np.random.default_rng(2).uniform(0.5, 2, n)
    Y = np.random.default_rng(4).standard_normal((n, 3))
    exact = np.linalg.solve(d[:, None] * K * d + 0.3 * np.eye(n), Y)
    ref, st = _stores(K, tile, dtype)
    for store in (ref, st):
        store.scale(d)
        store.add_to_diagonal(0.3)
        store.cholesky()
    C = st.cho_solve(Y)
    assert isinstance(C, torch.Tensor) and C.dtype == torch.float64
    assert _rel(C, exact) <= rtol
    assert _rel(C, ref.cho_solve(Y)) <= rtol
    assert st.cho_solve(Y[:, 0]).shape == (n,)
    with pytest.raises(RuntimeError, match="Cholesky factor"):
        st.matmat(Y)


def test_a_matrix_that_is_not_positive_definite_is_refused_as_by_the_numpy_store():
    K = _spd(100)
    K[50, 50] = -1.0
    ref, st = _stores(K, 32)
    messages = []
    for store in (ref, st):
        with pytest.raises(np.linalg.LinAlgError, match=r"not positive definite.*alpha") as err:
            store.cholesky()
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_float32_products_run_in_full_precision_whatever_the_caller_set(monkeypatch):
    """TF32 would change float32 results on Ampere and later GPUs: every product of the store pins 'highest'."""
    from torch.utils._python_dispatch import TorchDispatchMode

    monkeypatch.delenv("SK_DEQ_ALLOW_TF32", raising=False)
    aten = torch.ops.aten
    seen = []

    class Precision(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (aten.mm, aten.bmm, aten.addmm, aten.addmm_, aten.linalg_solve_triangular):
                seen.append(torch.get_float32_matmul_precision())
            return func(*args, **(kwargs or {}))

    K = _spd(150, shift=1.0)
    _, st = _stores(K, 64, np.float32)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        with Precision():
            st.matmat(np.ones((150, 2)))
            st.cholesky()
            st.cho_solve(np.ones((150, 2)))
        assert torch.get_float32_matmul_precision() == "high"  # the caller's setting, restored
    finally:
        torch.set_float32_matmul_precision(before)
    assert len(seen) > 10 and set(seen) == {"highest"}


@pytest.fixture(scope="module")
def kernel():
    from sk_deq.kernels import implicit_kernel

    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 20)) / np.sqrt(20)
    X[:, :3] *= 4  # a decaying spectrum
    return implicit_kernel(X, activation="relu", sigma_a2=0.2) + 1.0


def test_the_preconditioner_and_pcg_on_the_device_are_numpy_s(kernel):
    ref, st = _stores(kernel, 128)
    ops = st.ops
    F, pivots = low_rank_factor(st, 60, np.random.default_rng(0))
    F0, pivots0 = low_rank_factor(ref, 60, np.random.default_rng(0))
    np.testing.assert_array_equal(F, F0)  # its columns are copies: the same bits
    np.testing.assert_array_equal(pivots, pivots0)
    # extended from leading rows to all on the device's columns, as on the host's
    lead, lead_pivots = low_rank_factor(st, 60, np.random.default_rng(0), rows=250)
    np.testing.assert_array_equal(extend_factor(st, lead, lead_pivots), extend_factor(ref, lead, lead_pivots))
    R = np.random.default_rng(1).standard_normal((300, 3))
    M, M0 = NystromPreconditioner(F, 1e-3, ops), NystromPreconditioner(F, 1e-3)
    assert M.F.device == ops.device
    assert _rel(M(ops.asarray(R)), M0(R)) <= 1e-10
    assert _rel(M.with_alpha(0.5)(ops.asarray(R)), M0.with_alpha(0.5)(R)) <= 1e-10
    Y = np.random.default_rng(3).standard_normal((300, 4))
    Y[:, 2] = 0.0  # a zero right-hand side stays zero
    C, info = pcg(st.matmat, Y, 1e-3, M, tol=1e-10, ops=ops)
    C0, info0 = pcg(ref.matmat, Y, 1e-3, M0, tol=1e-10)
    assert isinstance(C, torch.Tensor) and info.converged and info.residuals.max() <= 1e-10
    assert abs(info.n_iter - info0.n_iter) <= 1
    exact = np.linalg.solve(kernel + 1e-3 * np.eye(300), Y)
    assert _rel(C, exact) <= 1e-7 and _rel(C, C0) <= 1e-7
    np.testing.assert_array_equal(C[:, 2].numpy(), 0.0)


def _reads(count_host_syncs, solve, max_iter):
    with count_host_syncs() as syncs:
        _, info = solve(max_iter)
    assert info.n_iter == max_iter and not info.converged
    return syncs.total, dict(syncs.by_op)


def test_an_iteration_on_the_device_reads_the_host_once(kernel, count_host_syncs):
    """Each read is a GPU stall: one per iteration (its largest residual), whatever the operator."""
    _, st = _stores(kernel, 128)
    ops = st.ops
    d = np.random.default_rng(5).uniform(0.5, 2, 300)
    op = Weighted(st, d)
    M = NystromPreconditioner(low_rank_factor(st, 40, np.random.default_rng(0))[0], 1e-6, ops)
    M_lead = NystromPreconditioner(low_rank_factor(op, 40, np.random.default_rng(0), rows=250)[0], 1e-6, ops)
    Y = np.random.default_rng(4).standard_normal((300, 3))
    solves = {
        "store": lambda it: pcg(st.matmat, Y, 1e-6, M, tol=1e-300, max_iter=it, ops=ops),
        # the weighted operator, its leading rows (the choice of alpha), with the progress callback
        "weighted": lambda it: _pcg(op, Y[:250], 1e-6, M_lead, tol=1e-300, max_iter=it, rows=250),
    }
    counts = {}
    for name, solve in solves.items():
        (ten, ops10), (twenty, _) = (_reads(count_host_syncs, solve, it) for it in (10, 20))
        counts[name] = (twenty - ten) / 10
        assert set(ops10) == {"aten._local_scalar_dense"}, ops10
        assert ten - 10 <= 2  # and the solve's own: its first residual, no more
    assert counts == {"store": 1.0, "weighted": 1.0}
