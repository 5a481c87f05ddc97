"""A custom solver's result is checked, not trusted (sk_deq/nn/_solver_contract.py).

One evaluation of the map at the returned ``z`` measures every sample's
relative residual ``||f(z) - z|| / ||f(z)||``, as the built-in solvers do;
a solver that reports a convergence it did not reach (its start returned, or
one step) is marked not converged and warns as the built-in ones do.
"""

import warnings
from dataclasses import replace

import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning

from sk_deq import DEQClassifier
from sk_deq.nn import DEQDivergenceError, DEQLayer, fixed_point_iteration


def _claiming_convergence(z, info):
    """``info`` as a solver that lies would fill it: every sample converged, residual zero."""
    zero = torch.zeros_like(info.residuals)
    return z, replace(info, converged=True, n_not_converged=0, rel_residual=0.0, residuals=zero)


def returns_its_start(f, z0, *, tol, max_iter):
    return _claiming_convergence(z0.clone(), fixed_point_iteration(f, z0, tol=tol, max_iter=1)[1])


def takes_one_step(f, z0, *, tol, max_iter):
    return _claiming_convergence(*fixed_point_iteration(f, z0, tol=tol, max_iter=1))


def returns_nan(f, z0, *, tol, max_iter):
    return _claiming_convergence(
        torch.full_like(z0, float("nan")), fixed_point_iteration(f, z0, tol=tol, max_iter=1)[1]
    )


def honest(f, z0, *, tol, max_iter):
    return fixed_point_iteration(f, z0, tol=tol, max_iter=max_iter)


def _layer(solver):
    return DEQLayer(
        6,
        32,
        "tanh",
        0.2,
        0.0,
        solver=solver,
        tol=1e-6,
        generator=torch.Generator().manual_seed(0),
        dtype=torch.float64,
    )


def _residuals(layer, x, z):
    """``||f(z) - z|| / ||f(z)||`` of every row, computed here with the layer's public map ``step``."""
    fz = layer.step(z, x)
    return torch.linalg.vector_norm(fz - z, dim=1) / torch.linalg.vector_norm(fz, dim=1)


@pytest.mark.parametrize("solver", [returns_its_start, takes_one_step])
def test_a_solver_claiming_convergence_it_did_not_reach_is_marked_not_converged_with_its_measured_residuals(solver):
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    layer = _layer(solver)
    z, info = layer.solve(x)
    expected = _residuals(layer, x, z)
    assert not info.converged and info.n_not_converged == 5
    torch.testing.assert_close(info.residuals, expected, rtol=1e-10, atol=0)
    assert info.rel_residual == pytest.approx(float(expected.max()), rel=1e-10)
    if solver is returns_its_start:
        assert info.rel_residual == 1.0  # f(0) - 0 over f(0): the whole step is left
    assert info.n_iter == 1  # the solver's own count is kept


def test_an_honest_custom_solver_is_judged_converged_as_the_builtin_one():
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    z, info = _layer(honest).solve(x)
    z_builtin, info_builtin = _layer("iteration").solve(x)
    assert info.converged and info.n_not_converged == 0 and info_builtin.converged
    assert torch.equal(z, z_builtin)
    assert bool((info.residuals < 1e-6).all())


def test_a_solver_returning_non_finite_values_as_converged_is_a_divergence():
    with pytest.raises(DEQDivergenceError, match="diverged"):
        _layer(returns_nan).solve(torch.ones(3, 6, dtype=torch.float64))


def test_an_estimator_with_a_solver_that_returns_its_start_warns_as_for_the_builtin_ones():
    X, y = load_digits(return_X_y=True)
    X, y = X[:150], y[:150]
    with pytest.warns(
        ConvergenceWarning,
        match=r"solver 'returns_its_start' did not reach fixed_point_tol=0\.0001 .*\(largest relative residual 1\)",
    ):
        est = DEQClassifier(n_hidden=32, fixed_point_solver=returns_its_start, random_state=0).fit(X, y)
    assert est.fixed_point_info_["converged"] is False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the optimizer's own ConvergenceWarning of a short fit
        warnings.filterwarnings("error", message=".*fixed-point solver", category=ConvergenceWarning)
        honest_fit = DEQClassifier(n_hidden=32, fixed_point_solver=honest, random_state=0).fit(X, y)
    assert honest_fit.fixed_point_info_["converged"] is True
