"""Fixed-point solvers of sk_deq.nn.solvers against independent references."""

import math

import numpy as np
import pytest
import torch

from sk_deq.nn.solvers import SOLVERS, anderson, fixed_point_iteration, get_solver

ALL = sorted(SOLVERS)


def _linear_problem(d=60, bsz=5, radius=0.7, seed=0):
    g = torch.Generator().manual_seed(seed)
    M = radius * torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    b = torch.randn(bsz, d, generator=g, dtype=torch.float64)
    # exact solution of z = z M^T + b (rows): (I - M) z^T = b^T
    exact = torch.linalg.solve(torch.eye(d, dtype=torch.float64) - M, b.T).T
    return (lambda z: z @ M.T + b), exact


def _deq_problem(m=80, p=10, n=7, sigma_a2=0.3, seed=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(m, m, generator=g, dtype=dtype)
    B = torch.randn(m, p, generator=g, dtype=dtype)
    X = torch.randn(n, p, generator=g, dtype=dtype) / math.sqrt(p)
    U = math.sqrt(1 - sigma_a2) * X @ B.T
    sa = math.sqrt(sigma_a2)

    def f(z):
        return torch.tanh(sa * z @ A.T + U) / math.sqrt(m)

    return f, A, U


@pytest.mark.parametrize("name", ALL)
def test_solves_linear_fixed_point_exactly(name):
    f, exact = _linear_problem()
    z, info = get_solver(name)(f, torch.zeros_like(exact), tol=1e-12, max_iter=500)
    assert info.converged and not info.diverged
    assert info.rel_residual < 1e-12
    assert info.n_iter <= 500 and info.residuals.shape == (exact.shape[0],)
    torch.testing.assert_close(z, exact, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", ALL)
def test_nonlinear_solution_matches_long_plain_iteration(name):
    f, _, U = _deq_problem()
    z_ref = torch.zeros(U.shape[0], 80, dtype=U.dtype)
    for _ in range(400):  # independent reference: many plain iterations
        z_ref = f(z_ref)
    z, info = get_solver(name)(f, torch.zeros_like(z_ref), tol=1e-11, max_iter=200)
    assert info.converged
    torch.testing.assert_close(z, z_ref, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", ALL)
def test_per_sample_stopping_makes_rows_independent_of_the_batch(name):
    f_batch, A, U = _deq_problem(n=9)
    m = A.shape[0]
    sa = math.sqrt(0.3)
    z_all, _ = get_solver(name)(f_batch, torch.zeros(U.shape[0], m, dtype=U.dtype), tol=1e-5, max_iter=100)
    for i in (0, 4, 8):
        u = U[i : i + 1]

        def f_one(z, u=u):
            return torch.tanh(sa * z @ A.T + u) / math.sqrt(m)

        z_one, _ = get_solver(name)(f_one, torch.zeros(1, m, dtype=U.dtype), tol=1e-5, max_iter=100)
        # loose tol: rows would differ at the 1e-6 level without per-sample freezing
        torch.testing.assert_close(z_all[i : i + 1], z_one, rtol=1e-12, atol=1e-13)


def test_anderson_accelerates_a_map_with_outlying_eigenvalues():
    d = 100
    g = torch.Generator().manual_seed(3)
    U = torch.linalg.qr(torch.randn(d, 3, generator=g, dtype=torch.float64))[0]
    M = 0.98 * U @ U.T + 0.05 * torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    b = torch.randn(4, d, generator=g, dtype=torch.float64)

    def f(z):
        return z @ M.T + b

    _, plain = fixed_point_iteration(f, torch.zeros_like(b), tol=1e-8, max_iter=5000)
    _, acc = anderson(f, torch.zeros_like(b), tol=1e-8, max_iter=5000)
    assert plain.converged and acc.converged
    assert acc.n_iter * 10 < plain.n_iter


@pytest.mark.parametrize("name", ALL)
def test_reports_non_convergence(name):
    f, exact = _linear_problem(radius=0.95)
    z, info = get_solver(name)(f, torch.zeros_like(exact), tol=1e-12, max_iter=3)
    assert not info.converged and not info.diverged
    assert info.n_iter == 3
    assert info.rel_residual > 1e-12
    assert info.n_not_converged == exact.shape[0]
    assert torch.all(torch.isfinite(z))


@pytest.mark.parametrize("name", ALL)
def test_reports_non_finite_values_as_divergence(name):
    def f(z):  # NaN from the first step on
        return torch.log(z - 1.0)

    _, info = get_solver(name)(f, torch.zeros(3, 4), tol=1e-6, max_iter=200)
    assert info.diverged and not info.converged
    assert info.n_iter == 1


def test_plain_iteration_detects_overflow():
    def f(z):  # no real fixed point: z -> z^2 + 1 blows up
        return z * z + 1.0

    _, info = fixed_point_iteration(f, torch.zeros(3, 4), tol=1e-6, max_iter=200)
    assert info.diverged and not info.converged
    assert info.n_iter < 20


def test_anderson_without_fixed_point_never_reports_convergence():
    def f(z):
        return z * z + 1.0

    _, info = anderson(f, torch.zeros(3, 4), tol=1e-6, max_iter=60)
    assert not info.converged
    assert info.diverged or (info.n_not_converged == 3 and info.rel_residual > 1e-3)


@pytest.mark.parametrize("seed", [1, 4])
def test_anderson_safeguard_rescues_samples_that_cycle(seed):
    # A ReLU map whose linear part has two outlying eigenvalues (as a trained
    # DEQ develops): plain iteration converges, unguarded Anderson cycles on a
    # sample, the safeguard hands that sample to plain iteration.
    g = torch.Generator().manual_seed(seed)
    m = 64
    A = 0.5 * torch.randn(m, m, generator=g, dtype=torch.float64) / math.sqrt(m)
    V = torch.randn(m, 2, generator=g, dtype=torch.float64)
    V = V / V.norm(dim=0)
    A = A + 1.4 * V @ V.T
    b = torch.randn(20, m, generator=g, dtype=torch.float64)

    def f(z):
        return torch.relu(z @ A.T + b) - 0.5

    z0 = torch.zeros(20, m, dtype=torch.float64)
    _, plain = fixed_point_iteration(f, z0, tol=1e-8, max_iter=2000)
    _, unguarded = anderson(f, z0, tol=1e-8, max_iter=2000, stall=0)
    z, guarded = anderson(f, z0, tol=1e-8, max_iter=2000)
    assert plain.converged and not unguarded.converged and guarded.converged
    assert guarded.mean_iter < plain.mean_iter
    # (this map can have several fixed points: check the residual, not the point)
    fz = f(z)
    assert float(((fz - z).norm(dim=1) / fz.norm(dim=1)).max()) < 1e-7


@pytest.mark.parametrize("name", ALL)
def test_shape_and_dtype_are_kept(name):
    f, exact = _linear_problem(d=12, bsz=6)

    def f3(z):  # (batch, 3, 4) tensors
        return f(z.reshape(6, 12)).reshape(6, 3, 4)

    z, info = get_solver(name)(f3, torch.zeros(6, 3, 4, dtype=torch.float64), tol=1e-10, max_iter=300)
    assert z.shape == (6, 3, 4) and z.dtype == torch.float64
    torch.testing.assert_close(z.reshape(6, 12), exact, rtol=1e-8, atol=1e-9)
    assert info.to_dict()["n_samples"] == 6


def test_bad_arguments():
    f, exact = _linear_problem()
    with pytest.raises(ValueError, match="Unknown solver"):
        get_solver("newton")
    with pytest.raises(ValueError, match="tol"):
        anderson(f, torch.zeros_like(exact), tol=0)
    with pytest.raises(ValueError, match="max_iter"):
        fixed_point_iteration(f, torch.zeros_like(exact), max_iter=0)
    with pytest.raises(ValueError, match="memory"):
        anderson(f, torch.zeros_like(exact), memory=0)
    with pytest.raises(ValueError, match="beta"):
        anderson(f, torch.zeros_like(exact), beta=1.5)


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_damped_anderson_converges(beta):
    f, exact = _linear_problem()
    z, info = anderson(f, torch.zeros_like(exact), tol=1e-11, max_iter=500, beta=beta)
    assert info.converged
    torch.testing.assert_close(z, exact, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("ours, theirs", [("anderson", "anderson"), ("iteration", "fixed_point_iter")])
def test_agrees_with_torchdeq(ours, theirs):
    solver_mod = pytest.importorskip("torchdeq.solver")
    f, _, U = _deq_problem(m=64, n=6)
    z0 = torch.zeros(U.shape[0], 64, dtype=U.dtype)
    z_ours, info = get_solver(ours)(f, z0, tol=1e-10, max_iter=200)
    z_theirs, _, stats = solver_mod.get_solver(theirs)(f, z0.clone(), max_iter=200, tol=1e-10, stop_mode="rel")
    assert info.converged
    assert float(stats["rel_lowest"].max()) < 1e-8
    np.testing.assert_allclose(z_ours.numpy(), z_theirs.numpy(), rtol=1e-7, atol=1e-9)
