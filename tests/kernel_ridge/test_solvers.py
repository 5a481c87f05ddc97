"""Conjugate gradients and their preconditioner, against dense solves."""

import numpy as np
import pytest

from sk_deq.kernel_ridge._solvers import NystromPreconditioner, Weighted, extend_factor, low_rank_factor, pcg
from sk_deq.kernel_ridge._tiles import TileStore
from sk_deq.kernels import implicit_kernel
from sk_deq.kernels._rpcholesky import rp_cholesky


@pytest.fixture(scope="module")
def kernel():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 30)) / np.sqrt(30)
    X[:, :3] *= 4  # a few strong directions: a decaying spectrum
    return implicit_kernel(X, activation="relu", sigma_a2=0.2) + 1.0


@pytest.fixture(scope="module")
def store(kernel):
    st = TileStore(len(kernel), 128, np.float64)
    for i, j in st.pairs():
        st.fill(i, j, kernel[st.rows(i), st.rows(j)])
    return st


def test_rp_cholesky_is_exact_at_full_rank_and_improves_with_rank(kernel):
    errors = []
    for k in (10, 50, 200, 400):
        piv, F = rp_cholesky(lambda idx: kernel[:, idx], np.diag(kernel), k, np.random.default_rng(1))
        assert len(set(piv.tolist())) == len(piv) <= k
        errors.append(np.linalg.norm(kernel - F @ F.T, 2))
    assert errors == sorted(errors, reverse=True)
    assert errors[-1] < 1e-8 * np.linalg.norm(kernel, 2)
    # the trace of the residual is within a small factor of the best rank-50 one (the eigenvalues beyond 50)
    ev = np.linalg.eigvalsh(kernel)[::-1]
    _, F = rp_cholesky(lambda idx: kernel[:, idx], np.diag(kernel), 50, np.random.default_rng(2))
    assert np.trace(kernel - F @ F.T) < 5 * ev[50:].sum()


def test_fill_completes_the_pivots_of_an_exact_factor():
    K = np.ones((20, 20))  # rank one
    piv, F = rp_cholesky(lambda idx: K[:, idx], np.diag(K), 5, np.random.default_rng(0), fill=True)
    assert len(piv) == 5 and len(set(piv.tolist())) == 5 and F.shape == (20, 1)
    piv, F = rp_cholesky(lambda idx: K[:, idx], np.diag(K), 5, np.random.default_rng(0))
    assert len(piv) == 1 and F.shape == (20, 1)


def test_the_preconditioner_is_the_inverse_of_its_matrix(kernel, store):
    F, _ = low_rank_factor(store, 60, np.random.default_rng(0))
    R = np.random.default_rng(1).standard_normal((len(kernel), 3))
    for alpha in (1.0, 1e-3):
        P = F @ F.T + alpha * np.eye(len(kernel))
        np.testing.assert_allclose(NystromPreconditioner(F, alpha)(R), np.linalg.solve(P, R), rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(NystromPreconditioner(F, 2.0).with_alpha(alpha)(R), np.linalg.solve(P, R), rtol=1e-7)
    np.testing.assert_allclose(NystromPreconditioner(F[:, :0], 0.5)(R), R / 0.5)


@pytest.mark.parametrize("alpha", [1.0, 1e-2, 1e-4])
def test_pcg_solves_every_column_to_tol(kernel, store, alpha):
    n = len(kernel)
    Y = np.random.default_rng(3).standard_normal((n, 4))
    Y[:, 2] = 0.0  # a zero right-hand side stays zero
    ref = np.linalg.solve(kernel + alpha * np.eye(n), Y)
    M = NystromPreconditioner(low_rank_factor(store, 100, np.random.default_rng(0))[0], alpha)
    C, info = pcg(store.matmat, Y, alpha, M, tol=1e-10, max_iter=2000)
    assert info.converged and info.residuals.max() <= 1e-10
    true = np.linalg.norm(Y - (kernel @ C + alpha * C), axis=0) / np.maximum(np.linalg.norm(Y, axis=0), 1e-300)
    assert true.max() <= 1e-10
    assert np.abs(C - ref).max() <= 1e-6 * np.abs(ref).max()
    np.testing.assert_array_equal(C[:, 2], 0.0)


def test_the_preconditioner_cuts_the_iterations_and_a_warm_start_more(store):
    n = store.n
    Y = np.random.default_rng(4).standard_normal((n, 2))
    alpha = 1e-3
    plain = pcg(store.matmat, Y, alpha, lambda R: R, tol=1e-8, max_iter=5000)[1].n_iter
    M = NystromPreconditioner(low_rank_factor(store, 150, np.random.default_rng(0))[0], alpha)
    C, info = pcg(store.matmat, Y, alpha, M, tol=1e-8)
    assert info.n_iter < plain / 3
    again = pcg(store.matmat, Y, alpha, M, tol=1e-8, x0=C)[1]
    assert again.n_iter == 0 and again.converged


def test_max_iter_stops_and_says_it(store):
    Y = np.ones((store.n, 1))
    _, info = pcg(store.matmat, Y, 1e-6, lambda R: R, tol=1e-12, max_iter=3)
    assert info.n_iter == 3 and not info.converged and info.residuals[0] > 1e-12
    assert len(info.history) == 3


def test_weights_are_the_operator_d_k_d(kernel, store):
    d = np.random.default_rng(5).uniform(0, 2, len(kernel))
    op = Weighted(store, d)
    X = np.random.default_rng(6).standard_normal((len(kernel), 2))
    ref = d[:, None] * kernel * d
    np.testing.assert_allclose(op.matmat(X), ref @ X, rtol=1e-12)
    np.testing.assert_allclose(op.columns([3, 7]), ref[:, [3, 7]], rtol=1e-12)
    np.testing.assert_allclose(op.diagonal(), np.diag(ref), rtol=1e-12)


def test_a_factor_of_the_leading_rows_extends_to_all_on_its_pivots(kernel, store):
    """The Nystrom factor on the pivots: F F^T = K[:, P] K[P, P]^{-1} K[P, :] for every row."""
    F, piv = low_rank_factor(store, 80, np.random.default_rng(0), rows=300)
    assert F.shape[0] == 300 and piv.max() < 300
    full = extend_factor(store, F, piv)
    KP = kernel[:, piv]
    nystrom = KP @ np.linalg.solve(kernel[np.ix_(piv, piv)], KP.T)
    np.testing.assert_allclose(full @ full.T, nystrom, rtol=1e-6, atol=1e-8 * np.abs(kernel).max())
    np.testing.assert_array_equal(full[:300], F)


def test_a_factor_with_room_for_all_rows_is_extended_in_place(store):
    """``n_out``: the same factor in the leading rows, zeros below, filled in place by extend_factor (no copy)."""
    F, piv = low_rank_factor(store, 80, np.random.default_rng(0), rows=300)
    G, piv_g = low_rank_factor(store, 80, np.random.default_rng(0), rows=300, n_out=store.n)
    np.testing.assert_array_equal(piv_g, piv)
    assert G.shape == (store.n, F.shape[1])
    np.testing.assert_array_equal(G[:300], F)
    assert not G[300:].any()
    full = extend_factor(store, G, piv_g, 300)
    assert full is G  # filled in place
    np.testing.assert_allclose(full, extend_factor(store, F, piv), rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="n_out"):
        low_rank_factor(store, 80, np.random.default_rng(0), rows=300, n_out=299)


def test_rp_cholesky_writes_into_out_and_checks_it(kernel):
    """``out``: the factor written there (zeroed first), the same as without; a wrong shape or dtype is an error."""
    _, F = rp_cholesky(lambda idx: kernel[:, idx], np.diag(kernel), 30, np.random.default_rng(3))
    out = np.full((len(kernel), 30), np.nan)
    _, G = rp_cholesky(lambda idx: kernel[:, idx], np.diag(kernel), 30, np.random.default_rng(3), out=out)
    assert np.shares_memory(G, out)
    np.testing.assert_array_equal(G, F)
    for bad in (np.zeros((len(kernel), 29)), np.zeros((len(kernel), 30), dtype=np.float32)):
        with pytest.raises(ValueError, match="out must be"):
            rp_cholesky(lambda idx: kernel[:, idx], np.diag(kernel), 30, np.random.default_rng(3), out=bad)
