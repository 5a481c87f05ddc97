"""Exact kernels of explicit networks (sk_deq.kernels.explicit) against scalar references, quadrature and random networks."""

import math

import numpy as np
import pytest
from scipy import integrate

from hypothesis import given, settings
from hypothesis import strategies as st

from sk_deq.activations import HardTanh, LeakyReLU, Quadratic
from sk_deq.datasets import make_gaussian_mixture
from sk_deq.kernels import explicit_kernel
from sk_deq.theory import explicit_kernel_entry
from tests._properties import SETTINGS, _check_kernel_function, two_samples


@pytest.mark.parametrize(
    "layers",
    [[LeakyReLU(1.21, 0.005), LeakyReLU(0.94, 0.56)], ["relu", "relu", "relu"], ["erf", "gelu"], [Quadratic(0.3, 1.0)]],
    ids=["matched-leaky", "relu3", "erf-gelu", "quadratic"],
)
@pytest.mark.parametrize("kernel", ["ck", "ntk"])
def test_explicit_kernel_matches_scalar_reference(layers, kernel, correlated_rows):
    X = correlated_rows(8, 5, seed=0)
    K = explicit_kernel(X, layers=layers, kernel=kernel, tau0=1.0)
    for i, j in [(0, 2), (3, 4), (6, 6), (1, 7)]:
        ref = explicit_kernel_entry(layers, 1.0, X[i] @ X[i], X[j] @ X[j], X[i] @ X[j], kernel=kernel)
        assert K[i, j] == pytest.approx(ref, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(explicit_kernel(X[:3], X, layers=layers, kernel=kernel, tau0=1.0), K[:3], atol=1e-14)
    with pytest.raises(NotImplementedError, match="closed forms"):
        explicit_kernel(X, layers=["tanh"])


def test_explicit_kernel_hard_tanh_layer_matches_scalar_references():
    """Hard-tanh layers (the matched family of odd DEQs) against 2-D quadrature."""
    import math

    from sk_deq.activations.gaussian import expect_pair
    from sk_deq.activations import HardTanh

    act = HardTanh(0.76, 1.2)
    for a, b, rho in [(1.0, 1.0, 0.3), (0.5, 2.0, -0.7), (1.3, 0.9, 0.99), (1.0, 1.0, 1.0), (0.05, 3.0, 0.2)]:
        G = rho * math.sqrt(a * b)
        F, D = act.dual.expectations(G, a, b)
        assert F == pytest.approx(expect_pair(act, act, a, b, G, act.breakpoints, act.breakpoints), abs=1e-11)
        assert D == pytest.approx(
            expect_pair(act.derivative, act.derivative, a, b, G, act.breakpoints, act.breakpoints), abs=1e-11
        )


@pytest.mark.heavy  # random networks of width 4000
def test_explicit_kernel_hard_tanh_layers_match_monte_carlo():
    """Two hard-tanh layers' exact CK and NTK against random networks."""
    from sk_deq.activations import HardTanh
    from sk_deq.kernels import explicit_kernel, monte_carlo_explicit_kernel, relative_spectral_error

    X, _ = make_gaussian_mixture(120, 100, random_state=0)
    layers = [HardTanh(0.76, 1.2), HardTanh(1.1, 0.8)]
    K = explicit_kernel(X, layers=layers)
    assert (
        relative_spectral_error(K, monte_carlo_explicit_kernel(X, layers, n_hidden=4000, n_draws=3, random_state=0))
        < 0.05
    )
    Kn = explicit_kernel(X, layers=layers, kernel="ntk")
    assert (
        relative_spectral_error(
            Kn, monte_carlo_explicit_kernel(X, layers, kernel="ntk", n_hidden=4000, n_draws=3, random_state=0)
        )
        < 0.05
    )


@pytest.mark.parametrize("a,beta", [(1.0, 0.5), (0.3, -2.0), (2.0, 1.0), (1e-4, 30.0)])
def test_hard_tanh_pair_of_collinear_samples_is_exact(a, beta):
    """|rho| = 1: v = beta u, the kinks of clip(beta u) are closed-form breakpoints (adaptive quadrature check)."""

    gain, c = 0.8, 1.2
    pts = sorted({-c, c, -c / abs(beta), c / abs(beta)})
    s = math.sqrt(a)

    def density(u):
        return np.exp(-u * u / (2 * a)) / math.sqrt(2 * math.pi * a)

    F_ref = integrate.quad(
        lambda u: np.clip(u, -c, c) * np.clip(beta * u, -c, c) * density(u),
        -50 * s,
        50 * s,
        points=pts,
        limit=200,
        epsabs=1e-15,
        epsrel=1e-13,
    )[0]
    D_ref = integrate.quad(
        lambda u: float(abs(u) < c and abs(beta * u) < c) * density(u), -50 * s, 50 * s, points=pts, limit=200
    )[0]
    F, D = HardTanh(gain, c).dual.expectations(beta * a, a, beta * beta * a)
    assert float(F) == pytest.approx(gain**2 * F_ref, rel=1e-12, abs=1e-16)
    assert float(D) == pytest.approx(gain**2 * D_ref, rel=1e-12, abs=1e-16)


def test_explicit_hard_tanh_kernel_with_zero_and_collinear_samples():
    """A zero sample crashed inside numpy ('Maximum allowed size exceeded'); 1-D data was asymmetric by 3e-4."""
    X = np.array([[0.0], [1.0], [1e-3], [30.0], [-2.0]])
    layers = (HardTanh(0.8, 1.2), "relu")
    for kernel in ("ck", "ntk"):
        K = explicit_kernel(X, layers=layers, kernel=kernel, tau0=1.0)
        np.testing.assert_array_equal(K, K.T)
        G = X @ X.T
        n = np.diag(G)
        ref = np.array(
            [
                [explicit_kernel_entry(layers, 1.0, n[i], n[j], G[i, j], kernel=kernel) for j in range(5)]
                for i in range(5)
            ]
        )
        np.testing.assert_allclose(K, ref, rtol=1e-9, atol=1e-12)


# -- properties (hypothesis) ---------------------------------------------------------------------------------------


@settings(max_examples=30, **SETTINGS)
@given(
    XY=two_samples(),
    layers=st.sampled_from(
        [
            ("relu",),
            ("relu", "relu"),
            ("erf", "relu"),
            (LeakyReLU(1.2, 0.4), "gelu"),
            (HardTanh(0.8, 1.2),),
            (Quadratic(0.2, 0.9), LeakyReLU(1.0, 0.5)),
        ]
    ),
    kernel=st.sampled_from(["ck", "ntk"]),
)
def test_explicit_kernel_is_symmetric_and_its_gram_matrix_psd(XY, layers, kernel):
    _check_kernel_function(lambda A, B: explicit_kernel(A, B, layers=layers, kernel=kernel, tau0=1.0), *XY)
