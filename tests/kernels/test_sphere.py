"""The unit-sphere kernels of the workshop paper (sk_deq.kernels.sphere) against random finite-width networks."""

import math

import numpy as np
import pytest

from sk_deq.kernels import make_sphere, relative_spectral_error, sphere_explicit_kernel, sphere_implicit_kernel
from sk_deq.theory import normalized_relu_dual

SA = 0.2


def _finite_width_deq(X, m, seed):
    """``sigma_a2 Z*^T Z* + sigma_b2 X^T X`` of one random DEQ with the uncentred normalised ReLU."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, m))
    B = rng.standard_normal((m, X.shape[1]))
    inj = math.sqrt(1 - SA) * X @ B.T
    Z = np.zeros((len(X), m))
    for _ in range(300):
        Z_new = math.sqrt(2) * np.maximum(math.sqrt(SA) * Z @ A.T + inj, 0) / math.sqrt(m)
        if np.max(np.abs(Z_new - Z)) < 1e-10:
            break
        Z = Z_new
    return SA * Z @ Z.T + (1 - SA) * X @ X.T


def test_implicit_ck_against_random_deqs():
    X = make_sphere(16, 24, random_state=1)
    G = sphere_implicit_kernel(X, SA)
    mc = np.mean([_finite_width_deq(X, 3000, s) for s in range(4)], axis=0)
    assert relative_spectral_error(G, mc) < 0.03  # measured 0.010; noise about 1/sqrt(width * draws)
    # the plain ReLU max(x, 0) instead of the normalised one is far off
    rho, wrong = np.clip(X @ X.T, -1, 1), np.zeros((16, 16))
    for _ in range(200):
        wrong = SA * normalized_relu_dual(wrong) / 2 + (1 - SA) * rho
    assert relative_spectral_error(mc, wrong) > 0.2


@pytest.mark.parametrize("activation", ["relu", (0.3, 0.8, -0.2)])
@pytest.mark.parametrize("kernel, input_layer", [("ck", True), ("ntk", True), ("ntk", False)])
def test_explicit_kernels_against_monte_carlo(activation, kernel, input_layer):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((12, 10)) * rng.uniform(0.5, 1.5, (12, 1)) / math.sqrt(10)  # any norms
    exact = sphere_explicit_kernel(X, activation, kernel, ntk_input_layer=input_layer)
    p = 400_000
    H = X @ rng.standard_normal((10, p))
    if activation == "relu":
        F, D = math.sqrt(2) * np.maximum(H, 0), math.sqrt(2) * (H > 0)
    else:
        a2, a1, a0 = activation
        F, D = a2 * H * H + a1 * H + a0, 2 * a2 * H + a1
    mc = F @ F.T / p
    if kernel == "ntk" and input_layer:
        mc += (X @ X.T) * (D @ D.T / p)
    assert relative_spectral_error(mc, exact) < 0.01
    own = sphere_explicit_kernel(X, activation, kernel, ntk_input_layer=input_layer, n_hidden=50_000, random_state=0)
    assert relative_spectral_error(exact, own) < 0.03


def test_frozen_input_layer_ntk_is_the_ck():
    X = make_sphere(10, 8, random_state=0)
    ck = sphere_explicit_kernel(X, (0.2, 0.9, 0.1), "ck")
    np.testing.assert_allclose(sphere_explicit_kernel(X, (0.2, 0.9, 0.1), "ntk", ntk_input_layer=False), ck)
    assert relative_spectral_error(ck, sphere_explicit_kernel(X, (0.2, 0.9, 0.1), "ntk")) > 0.3


def _finite_width_ntk(X, m, seed):
    """Empirical NTK of one random DEQ with respect to ``A``, ``B`` and the readout ``v``.

    ``f(x) = v^T z*``; with ``h = sqrt(sa) A z* + sqrt(sb) B x`` and ``D = diag(phi'(h)) / sqrt(m)`` the
    adjoint ``u = (I - sqrt(sa) D A^T)^-1 D v`` gives ``df/dA = sqrt(sa) u z*^T``, ``df/dB = sqrt(sb) u x^T``,
    so ``Theta_ij = z_i^T z_j + (sa z_i^T z_j + sb x_i^T x_j) u_i^T u_j`` (implicit differentiation).
    """
    rng = np.random.default_rng(seed)
    A, B, v = rng.standard_normal((m, m)), rng.standard_normal((m, X.shape[1])), rng.standard_normal(m)
    inj, Z = math.sqrt(1 - SA) * X @ B.T, np.zeros((len(X), m))
    for _ in range(300):
        Z_new = math.sqrt(2) * np.maximum(math.sqrt(SA) * Z @ A.T + inj, 0) / math.sqrt(m)
        done = np.max(np.abs(Z_new - Z)) < 1e-11
        Z = Z_new
        if done:
            break
    D = math.sqrt(2) * (math.sqrt(SA) * Z @ A.T + inj > 0) / math.sqrt(m)
    U = np.stack([np.linalg.solve(np.eye(m) - math.sqrt(SA) * D[i][:, None] * A.T, D[i] * v) for i in range(len(X))])
    return Z @ Z.T + (SA * Z @ Z.T + (1 - SA) * X @ X.T) * (U @ U.T)


def test_implicit_ntk_against_random_deqs():
    """Lemma 1's ``K* = G* / (1 - Gdot*)`` is ``sigma_a2 Theta + sigma_b2 X^T X`` for the NTK ``Theta`` of ``(A, B, v)``.

    (Measured also with autograd through unrolled iterations, width 1500, two draws: 0.022.)  The sum of
    Eq. (4) as printed, ``G* Gdot* / (1 - Gdot*) = K* - G*``, is far off.
    """
    X = make_sphere(8, 10, random_state=0)
    K = sphere_implicit_kernel(X, SA, "ntk")
    mc = SA * np.mean([_finite_width_ntk(X, 1000, s) for s in range(2)], axis=0) + (1 - SA) * X @ X.T
    assert relative_spectral_error(K, mc) < 0.05
    assert relative_spectral_error(K - sphere_implicit_kernel(X, SA, "ck"), mc) > 1.0
