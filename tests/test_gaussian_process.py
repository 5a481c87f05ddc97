"""ImplicitCKKernel (``sk_deq.gaussian_process``): values, diagonal and gradient, its bounds, and its input checked
when it is called directly (in a GaussianProcessRegressor and Classifier on digits: ``tests/test_transformers.py``,
beside the other pipelines)."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.base import clone
from sklearn.gaussian_process import GaussianProcessRegressor

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sk_deq.gaussian_process import ImplicitCKKernel
from sk_deq.kernels import implicit_kernel
from sk_deq import ImplicitCKTransformer
from tests._properties import ANY_FLOATS, SETTINGS, _clear_error_or_finite, _close, two_samples


def test_gp_kernel_values_diag_and_gradient():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((25, 4)) / 2.0
    Y = rng.standard_normal((7, 4)) / 2.0
    k = ImplicitCKKernel(activation="tanh", sigma_a2=0.3, kernel="ntk", tau0=1.0)
    # the implicit kernel plus the default readout bias variance, 1
    np.testing.assert_allclose(
        k(X), implicit_kernel(X, activation="tanh", sigma_a2=0.3, kernel="ntk", tau0=1.0) + 1.0, atol=1e-14
    )
    np.testing.assert_allclose(
        k(X, Y), implicit_kernel(X, Y, activation="tanh", sigma_a2=0.3, kernel="ntk", tau0=1.0) + 1.0, atol=1e-14
    )
    np.testing.assert_allclose(k.diag(X), np.diag(k(X)), rtol=1e-13)
    _, grad = k(X, eval_gradient=True)
    assert grad.shape == (25, 25, 1)
    # gradient in log(sigma_a2) against an independent coarser difference
    h = 1e-3
    fd = (k.clone_with_theta(k.theta + h)(X) - k.clone_with_theta(k.theta - h)(X)) / (2 * h)
    np.testing.assert_allclose(grad[:, :, 0], fd, atol=1e-6)
    assert not k.is_stationary()
    fixed = ImplicitCKKernel(sigma_a2_bounds="fixed")
    assert fixed(X, eval_gradient=True)[1].shape == (25, 25, 0)
    with pytest.raises(ValueError):
        k(X, Y, eval_gradient=True)


@pytest.mark.parametrize(
    "bounds,fault",
    [
        ((float("nan"), 0.5), "not finite"),
        ((1e-3, float("inf")), "not finite"),
        ((-0.1, 0.5), "lower bound must be positive"),
        ((0.0, 0.5), "lower bound must be positive"),
        ((0.1, 1.0), "upper bound must be below 1"),
        ((0.5, 0.1), "lower bound must be below the upper one"),
        ((0.3, 0.3), "lower bound must be below the upper one"),
        ("fxed", "got the string 'fxed'"),
        ((0.1, 0.2, 0.3), "not two numbers"),
        (0.5, "not two numbers"),
        (("a", "b"), "got \\('a', 'b'\\)"),
    ],
)
def test_gp_kernel_rejects_bad_sigma_a2_bounds_at_construction_and_after_set_params(bounds, fault):
    with pytest.raises(ValueError, match=f"sigma_a2_bounds must be 'fixed' or a pair .*{fault}"):
        ImplicitCKKernel(sigma_a2_bounds=bounds)
    k = ImplicitCKKernel().set_params(sigma_a2_bounds=bounds)  # set_params does not run __init__
    X = np.random.default_rng(0).standard_normal((12, 3)) / 2.0
    with pytest.raises(ValueError, match=fault):
        GaussianProcessRegressor(k).fit(X, X[:, 0])


def test_gp_kernel_with_valid_bounds_clones_and_reports_its_params():
    for bounds in [(1e-3, 0.9), [0.05, 0.5], np.array([0.05, 0.5]), np.array([[0.05, 0.5]]), "fixed"]:
        k = ImplicitCKKernel(sigma_a2=0.2, sigma_a2_bounds=bounds)
        assert k.get_params()["sigma_a2_bounds"] is bounds  # stored as given: clone() accepts it
        assert np.array_equal(np.asarray(clone(k).get_params()["sigma_a2_bounds"]), np.asarray(bounds))
        assert k.hyperparameter_sigma_a2.fixed == (isinstance(bounds, str))
    assert np.allclose(ImplicitCKKernel(sigma_a2_bounds=(0.05, 0.5)).bounds, np.log([[0.05, 0.5]]))


# ---------------------------------------------------------------------------
# ImplicitCKKernel called directly


@pytest.fixture(scope="module")
def rows(unit_rows):
    """12 Gaussian rows of 5 features at ``tau0 = 1``."""
    return unit_rows(12, 5, 0)


@pytest.mark.parametrize(
    "call,error,message",
    [
        (lambda K, X: K(np.where(X > 0.5, np.nan, X)), ValueError, "Input X contains NaN"),
        (lambda K, X: K(np.where(X > 0.5, np.inf, X)), ValueError, "Input X contains infinity"),
        (lambda K, X: K(X, np.where(X > 0.5, np.nan, X)), ValueError, "Input Y contains NaN"),
        (lambda K, X: K(sp.csr_matrix(X)), TypeError, "Sparse data was passed for X"),
        (lambda K, X: K(X, X[:, :3]), ValueError, "Y has 3 features, but X has 5"),
        (lambda K, X: K(X[0]), ValueError, "Expected 2D array"),
        (lambda K, X: K(X[:0]), ValueError, "0 sample"),
        (lambda K, X: K([["a", "b"]]), ValueError, "could not convert string to float"),
        (lambda K, X: K.diag(np.where(X > 0.5, np.nan, X)), ValueError, "Input X contains NaN"),
        (lambda K, X: K(X * 1e300), ValueError, "overflow float64"),
        (lambda K, X: K(X, X, eval_gradient=True), ValueError, "only be evaluated when Y is None"),
    ],
)
def test_kernel_called_directly_validates_its_input(rows, call, error, message):
    with pytest.raises(error, match=message):
        call(ImplicitCKKernel(), rows)


def test_kernel_overflow_does_not_advise_a_parameter_the_kernel_lacks(rows):
    assert "input_scaling" not in ImplicitCKKernel().get_params()
    with pytest.raises(ValueError, match="overflow float64") as info:
        ImplicitCKKernel()(rows * 1e300)
    assert "input_scaling='global', where an estimator or transformer has it," in str(info.value)


@pytest.mark.parametrize(
    "params,message",
    [
        ({"sigma_a2": 1.5}, "sigma_a2 must lie in the open interval"),
        ({"tau0": -1.0}, "tau0 must be positive"),
        ({"kernel": "nngp"}, "kernel must be "),
        ({"activation": "cosh2"}, "Unknown activation 'cosh2'"),
    ],
)
def test_kernel_rejects_bad_parameters(rows, params, message):
    with pytest.raises(ValueError, match=message):
        ImplicitCKKernel(**params)(rows)


@pytest.mark.parametrize("activation", ["relu", torch.tanh, np.sin])
@pytest.mark.parametrize("tau0", [1e-6, 1.0, 1e6])
def test_kernel_at_every_scale_is_finite_and_symmetric_psd(rows, activation, tau0):
    K = ImplicitCKKernel(activation=activation, tau0=tau0)(rows * tau0)
    assert np.isfinite(K).all()
    np.testing.assert_allclose(K, K.T, rtol=1e-12)
    w = np.linalg.eigvalsh(K)
    assert w.min() >= -1e-10 * w.max()
    np.testing.assert_allclose(ImplicitCKKernel(activation=activation, tau0=tau0).diag(rows * tau0), np.diag(K))


# -- properties (hypothesis) ---------------------------------------------------------------------------------------


@settings(max_examples=30, **SETTINGS)
@given(XY=two_samples(), tau0=st.floats(1e-3, 1e3), activation=st.sampled_from(["relu", "tanh", "gelu"]))
def test_kernel_object_matches_the_function_and_is_symmetric(XY, tau0, activation):
    X, Y = XY
    k = ImplicitCKKernel(activation=activation, tau0=tau0, bias_variance=0.0)
    K = k(X * tau0, Y * tau0)
    _close(K, k(Y * tau0, X * tau0).T)
    _close(K, implicit_kernel(X * tau0, Y * tau0, activation=activation, tau0=tau0))


# scikit-learn's check_array sums the array first: [inf, -inf] warns inside numpy before its clear error
@pytest.mark.filterwarnings("ignore:invalid value encountered in reduce:RuntimeWarning:numpy")
@settings(max_examples=60, **SETTINGS)
@given(X=arrays(np.float64, st.tuples(st.integers(0, 4), st.integers(0, 3)), elements=ANY_FLOATS))
def test_kernels_on_arbitrary_arrays(X):
    _clear_error_or_finite(lambda: implicit_kernel(X, activation="tanh"))
    _clear_error_or_finite(lambda: ImplicitCKKernel()(X))
    _clear_error_or_finite(lambda: ImplicitCKKernel().diag(X))
    _clear_error_or_finite(lambda: ImplicitCKTransformer(input_scaling="none").fit_transform(X))
