"""The ReLU-DEQ on the unit sphere in the workshop paper's conventions (theory page, "unit sphere").

Every formula is checked against an independent computation: Gauss-Hermite
quadrature, finite differences of the implicit maps, the layer recursions
iterated to their fixed point, and a least-squares solve of Corollary 1's
equations; the kernels against random finite-width networks in
``tests/kernels/test_sphere.py``.
"""

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy.optimize import least_squares

from sk_deq.activations import Activation
from sk_deq.kernels import make_sphere, relative_spectral_error, sphere_explicit_kernel, sphere_implicit_kernel
from sk_deq.theory import (
    normalized_relu_dual,
    sphere_ck_map,
    sphere_deq_coefficients,
    sphere_explicit_coefficients,
    sphere_ntk_map,
    sphere_quadratic_match,
)

SA = 0.2
RELU = Activation(
    lambda x: math.sqrt(2.0) * np.maximum(x, 0.0),
    name="normalised_relu",
    derivative=lambda x: math.sqrt(2.0) * (x > 0),
    breakpoints=(0.0,),
)


def _mc_pair(f, rho, n=4_000_000, seed=0):
    """``E[f(u) f(v)]`` for standard Gaussians of correlation ``rho`` by Monte Carlo (antithetic)."""
    rng = np.random.default_rng(seed)
    z1, z2 = rng.standard_normal((2, n))
    z1, z2 = np.concatenate([z1, -z1]), np.concatenate([z2, -z2])
    u, v = z1, rho * z1 + math.sqrt(1 - rho * rho) * z2
    return float(np.mean(f(u) * f(v)))


def _dense_quadrature(f, rho, nodes=401):
    """``E[f(u) f(v)]`` by a fine trapezoid rule on a polar-free 2-D grid (kinks are only first-order)."""
    x = np.linspace(-9, 9, 2 * nodes + 1)
    w = np.exp(-x * x / 2) / math.sqrt(2 * math.pi) * (x[1] - x[0])
    U, Z = np.meshgrid(x, x, indexing="ij")
    V = rho * U + math.sqrt(1 - rho * rho) * Z
    return float(np.einsum("i,j,ij->", w, w, f(U) * f(V)))


# ---------------------------------------------------------------------------
# the dual activation and the implicit maps


@pytest.mark.parametrize("rho", [-0.9, -0.3, 0.0, 0.4, 0.95])
def test_normalized_relu_dual_is_the_gaussian_expectation(rho):
    phi = lambda t: math.sqrt(2) * np.maximum(t, 0)
    dphi = lambda t: math.sqrt(2) * (t > 0)
    assert normalized_relu_dual(rho) == pytest.approx(_dense_quadrature(phi, rho, 1200), abs=2e-5)
    assert normalized_relu_dual(rho, 1) == pytest.approx(_mc_pair(dphi, rho), abs=2e-3)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_normalized_relu_dual_derivatives_by_finite_differences(order):
    rho = np.array([-0.7, -0.2, 0.0, 0.3, 0.8])
    h = 1e-5
    fd = (normalized_relu_dual(rho + h, order - 1) - normalized_relu_dual(rho - h, order - 1)) / (2 * h)
    np.testing.assert_allclose(normalized_relu_dual(rho, order), fd, rtol=1e-7, atol=1e-9)
    with pytest.raises(ValueError, match="derivative"):
        normalized_relu_dual(0.0, 4)


def test_ck_and_ntk_maps_are_the_fixed_points_of_the_recursions():
    """``g`` and ``k`` against Eq. (3) and the NTK recursion iterated from ``G^(0) = rho``."""
    rho = np.linspace(-1, 1, 41)
    G, K = rho.copy(), np.zeros_like(rho)
    for _ in range(400):  # contraction with rate sigma_a2 f' <= sigma_a2
        G = SA * normalized_relu_dual(G) + (1 - SA) * rho
        K = G + SA * normalized_relu_dual(G, 1) * K
    np.testing.assert_allclose(sphere_ck_map(rho, SA), G, atol=1e-14)
    np.testing.assert_allclose(sphere_ntk_map(rho, SA), K, rtol=1e-12)
    assert sphere_ck_map(1.0, SA) == 1.0 and sphere_ntk_map(1.0, SA) == pytest.approx(1 / (1 - SA))
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        sphere_ck_map(1.5, SA)


@pytest.mark.parametrize("sigma_a2", [0.05, 0.2, 0.6, 0.9])
def test_theorem_1_and_3_coefficients_by_finite_differences(sigma_a2):
    h = 1e-4
    for kernel, fmap in (("ck", sphere_ck_map), ("ntk", sphere_ntk_map)):
        c = sphere_deq_coefficients(sigma_a2, 500, kernel)
        v = [fmap(x, sigma_a2) for x in (-h, 0.0, h)]
        assert c.value0 == pytest.approx(v[1], rel=1e-13)
        assert c.slope0 == pytest.approx((v[2] - v[0]) / (2 * h), rel=1e-7)
        assert c.curvature0 == pytest.approx((v[2] - 2 * v[1] + v[0]) / h**2, rel=1e-5)
        assert c.value1 == pytest.approx(fmap(1.0, sigma_a2), rel=1e-14)
        assert c.alpha == pytest.approx(c.value0 + c.curvature0 / 1000, rel=1e-14)
        assert c.mu == pytest.approx(c.value1 - c.value0 - c.slope0, rel=1e-13)


def test_printed_k_prime_has_the_wrong_sign():
    """The paper's k'(0) = (1 - sigma_a2) h'(angle) / (sigma_a2 f'(angle) - 1) is the negative of the slope."""
    from sk_deq.theory._sphere import _h

    h = 1e-5
    measured = (sphere_ntk_map(h, SA) - sphere_ntk_map(-h, SA)) / (2 * h)
    angle = sphere_ck_map(0.0, SA)
    printed = (1 - SA) * _h(angle, SA, 1) / (SA * normalized_relu_dual(angle, 1) - 1)
    assert measured > 0.9
    assert printed == pytest.approx(-measured, rel=1e-8)
    assert sphere_deq_coefficients(SA, 1200, "ntk").beta == pytest.approx(measured, rel=1e-8)


# ---------------------------------------------------------------------------
# Theorems 2 and 4 and Corollary 1


def _sym_error(reference, other):
    """``relative_spectral_error`` for symmetric matrices, by eigenvalues (faster than the SVD)."""
    norm = lambda A: np.max(np.abs(np.linalg.eigvalsh(A)))
    return norm(reference - other) / norm(reference)


def _hermite_moments(f, df):
    """``E[s], E[s'], E[s''], E[s^2], E[s'^2]`` by Gauss-Hermite with Stein's identities (smooth ``s``)."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    return (
        w @ f(x),
        w @ (x * f(x)),
        w @ ((x * x - 1) * f(x)),
        w @ f(x) ** 2,
        w @ df(x) ** 2,
    )


def test_explicit_coefficients_closed_form_against_quadrature():
    a2, a1, a0 = 0.3, -0.7, 0.25
    quad = Activation(lambda x: a2 * x * x + a1 * x + a0, derivative=lambda x: 2 * a2 * x + a1)
    for kernel in ("ck", "ntk"):
        closed = sphere_explicit_coefficients((a2, a1, a0), 50, kernel)
        engine = sphere_explicit_coefficients(quad, 50, kernel)
        np.testing.assert_allclose(closed.equations(), engine.equations(), rtol=1e-12)
    m0, m1, m2, sq, dsq = _hermite_moments(np.tanh, lambda x: 1 / np.cosh(x) ** 2)
    c = sphere_explicit_coefficients("tanh", 50, "ntk")
    expected = [m0**2 + 1.5 * m2**2 / 50, 2 * m1**2, sq + dsq - m0**2 - 2 * m1**2]
    np.testing.assert_allclose(c.equations(), expected, rtol=1e-7, atol=1e-14)
    # the normalised ReLU: E[s] = 1/sqrt(pi), E[s'] = 1/sqrt(2), E[s''] = 1/sqrt(pi), E[s^2] = 1
    r = sphere_explicit_coefficients(RELU, 50, "ck")
    np.testing.assert_allclose(r.equations(), [1 / math.pi + 1 / (100 * math.pi), 0.5, 0.5 - 1 / math.pi], rtol=1e-10)


@pytest.mark.parametrize("kernel, tol", [("ck", 2e-4), ("ntk", 5e-4)])
def test_explicit_equivalents_in_operator_norm(kernel, tol):
    """Theorems 2 and 4; doubling the E[s'']^2 / d term of alpha misses by 3-10 times the tolerance."""
    d = 960
    X = make_sphere(800, d, random_state=0)
    for act, name in ((RELU, "relu"), ((0.13, 0.94, 0.13), None)):
        c = sphere_explicit_coefficients(act, d, kernel)
        K = sphere_explicit_kernel(X, name or act, kernel)
        assert _sym_error(K, c.equivalent_kernel(X)) < tol
        curvature = (c.alpha - sphere_explicit_coefficients(act, 10**12, kernel).alpha) * d
        wrong = dataclasses.replace(c, alpha=c.alpha + curvature / d)
        assert _sym_error(K, wrong.equivalent_kernel(X)) > 2.5 * tol


@pytest.mark.parametrize("kernel", ["ck", "ntk"])
@pytest.mark.parametrize("sigma_a2, d", [(0.2, 1200), (0.5, 50)])
def test_corollary_1_against_least_squares(kernel, sigma_a2, d):
    """The closed form against scipy's least squares on Theorem 2 / 4's equations (moments by quadrature)."""
    target = sphere_deq_coefficients(sigma_a2, d, kernel).equations()

    def residual(a):
        q = Activation(lambda x: a[0] * x * x + a[1] * x + a[2], derivative=lambda x: 2 * a[0] * x + a[1])
        return sphere_explicit_coefficients(q, d, kernel).equations() - target

    sol = least_squares(residual, x0=[0.5, 0.5, 0.0], xtol=1e-15, ftol=1e-15, gtol=1e-15)
    m = sphere_quadratic_match(sigma_a2, d, kernel)
    assert np.max(np.abs(residual(sol.x))) < 1e-12
    assert np.max(np.abs(m.residuals)) < 1e-12
    a2, a1, a0 = sol.x  # unique up to the signs of a2, a1 and of a0 + a2
    assert abs(a2) == pytest.approx(m.a2, rel=1e-7)
    assert abs(a1) == pytest.approx(m.a1, rel=1e-7)
    assert abs(a0 + a2) == pytest.approx(m.a0 + m.a2, rel=1e-7)


def test_matched_quadratic_converges_and_plain_relu_does_not():
    errs = {}
    for n in (100, 400):
        X = make_sphere(n, round(1.2 * n), random_state=0)
        for kernel in ("ck", "ntk"):
            m = sphere_quadratic_match(SA, X.shape[1], kernel)
            G = sphere_implicit_kernel(X, SA, kernel)
            errs[n, kernel] = (
                relative_spectral_error(G, sphere_explicit_kernel(X, m, kernel)),
                relative_spectral_error(G, sphere_explicit_kernel(X, "relu", kernel)),
                relative_spectral_error(G, m.targets.equivalent_kernel(X)),
            )
    for kernel in ("ck", "ntk"):
        quad, plain, equiv = errs[400, kernel]
        assert quad < 1e-3 and equiv < 1e-3 and plain > 1.0
        assert quad < 0.5 * errs[100, kernel][0] and equiv < 0.5 * errs[100, kernel][2]


def test_match_signs_and_activation():
    m = sphere_quadratic_match(SA, 1200, "ntk")
    t = np.linspace(-2, 2, 5)
    np.testing.assert_allclose(m(t), m.a2 * t * t + m.a1 * t + m.a0)
    X = make_sphere(30, 36, random_state=0)
    K = sphere_explicit_kernel(X, m, "ntk")
    for flipped in ((-m.a2, -m.a1, -math.sqrt(m.targets.alpha - m.targets.mu / 1200) + m.a2),):
        # -a2, -a1 and the other root of (a0 + a2)^2 give the same coefficients
        assert np.allclose(sphere_explicit_coefficients(flipped, 1200, "ntk").equations(), m.achieved.equations())
    assert K.shape == (30, 30)
    json.dumps(m.to_dict())


def test_bad_inputs():
    with pytest.raises(ValueError, match="unit sphere"):
        sphere_implicit_kernel(2 * make_sphere(5, 4, random_state=0), SA)
    with pytest.raises(ValueError, match="activation must be"):
        sphere_explicit_kernel(make_sphere(5, 4, random_state=0), "tanh")
    with pytest.raises(ValueError, match="n_hidden"):
        sphere_explicit_kernel(make_sphere(5, 4, random_state=0), "relu", n_hidden=0)
    with pytest.raises(ValueError, match="n_features"):
        sphere_deq_coefficients(SA, 0)
    with pytest.raises(ValueError, match="sigma_a2"):
        sphere_quadratic_match(1.0, 10)
    with pytest.raises(ValueError):
        sphere_deq_coefficients(SA, 10, "feature")
