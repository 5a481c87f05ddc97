"""Strict positive-definiteness of the DEQ's NNGP kernel (theory page, "strict positive-definiteness").

Inputs: 8 random directions ``x_i`` on a great circle of ``R^6`` and, for each,
a partner rotated to within ``eps`` of ``-x_i``: 16 distinct unit vectors in
8 nearly collinear (antiparallel) pairs, spanning only two dimensions, so the
linear kernel ``X^T X`` has rank 2.  One ReLU layer's NNGP is
``rho / 2 + (an even function of rho)`` (times the norms), so
``K(x, .) - K(-x, .)`` is linear in ``x``: with more antiparallel pairs than
the data's rank the kernel is singular, and nearly so for nearly antiparallel
pairs (its smallest eigenvalue falls like ``eps^2``).  The DEQ's fixed point
has no such split, and its kernel stays strictly positive definite.

Nearly *parallel* inputs (a short arc) do not separate the two: there every
kernel's smallest eigenvalue falls with the arc's length, the DEQ's faster
(8 points on an arc of 0.5 rad: ``lambda_min / lambda_max`` 1.8e-7 for the
DEQ's ``G*``, 1.5e-6 for one ReLU layer), because ``G*`` is dominated by its
linear injection term.  Strict positive-definiteness is a statement about
distinct inputs, not about conditioning.
"""

import numpy as np
import pytest
from sklearn.kernel_ridge import KernelRidge

from sk_deq.kernels import explicit_kernel, implicit_kernel, sphere_explicit_kernel, sphere_implicit_kernel

EPSILONS = (1e-2, 1e-3, 1e-4)


def _pairs(eps, seed=0):
    theta = np.random.default_rng(seed).uniform(0, np.pi, 8)
    angles = np.concatenate([theta, theta + np.pi + eps])
    X = np.zeros((16, 6))
    X[:, 0], X[:, 1] = np.cos(angles), np.sin(angles)
    return X


def _relative_min_eigenvalue(K):
    w = np.linalg.eigvalsh(K)
    return w[0] / w[-1]


def _kernels(X):
    return {
        # the package's DEQ (centred ReLU): G* with the sigma_b2 X^T X injection, and the feature kernel without it
        "deq_ck": implicit_kernel(X, activation="relu", sigma_a2=0.2, kernel="ck", tau0=1.0),
        "deq_feature": implicit_kernel(X, activation="relu", sigma_a2=0.2, kernel="feature", tau0=1.0),
        # the workshop paper's DEQ (uncentred normalised ReLU)
        "deq_sphere": sphere_implicit_kernel(X, 0.2),
        # one ReLU layer: the package's (centred) and the arc-cosine kernel (uncentred)
        "relu_centred": explicit_kernel(X, layers=["relu"], kernel="ck", tau0=1.0),
        "relu_arccos": sphere_explicit_kernel(X, "relu"),
        "linear": X @ X.T,
    }


@pytest.fixture(scope="module")
def ratios():
    return {
        eps: {k: _relative_min_eigenvalue(K) for k, K in _kernels(_pairs(eps)).items()} for eps in (0.0,) + EPSILONS
    }


def test_deq_kernel_stays_positive_definite(ratios):
    for eps in (0.0,) + EPSILONS:
        r = ratios[eps]
        assert abs(r["linear"]) < 1e-14  # the inputs span two dimensions: the injection term alone is singular
        for name in ("deq_ck", "deq_feature", "deq_sphere"):
            assert r[name] > 1e-7, (eps, name, r[name])  # measured 1.7e-6 (deq_ck) and above
    deq = [ratios[eps]["deq_ck"] for eps in (0.0,) + EPSILONS]
    assert min(deq) > 0.5 * max(deq)  # independent of how close the pairs are


def test_relu_layer_kernel_degenerates(ratios):
    for name in ("relu_centred", "relu_arccos"):
        assert abs(ratios[0.0][name]) < 1e-13  # exactly antiparallel pairs: singular to rounding
        r = [ratios[eps][name] for eps in EPSILONS]
        assert r[0] < 1e-6
        # it falls like eps^2: a factor 100 per decade (measured 2.1e-7, 2.3e-9, 2.3e-11)
        assert r[1] < 0.03 * r[0] and r[2] < 0.03 * r[1]
        for eps in EPSILONS[1:]:
            assert ratios[eps]["deq_ck"] > 300 * ratios[eps][name]


def test_kernel_ridge_with_tiny_alpha_interpolates_only_with_the_deq_kernel():
    """With alpha = 1e-10 the DEQ kernel fits random labels; one ReLU layer's cannot (its range misses them)."""
    y = np.random.default_rng(1).standard_normal(16)
    misfit = {}
    for eps in (0.0, 1e-4):
        for name, K in _kernels(_pairs(eps)).items():
            fit = KernelRidge(alpha=1e-10, kernel="precomputed").fit(K, y)
            misfit[eps, name] = np.linalg.norm(fit.predict(K) - y) / np.linalg.norm(y)
    for eps in (0.0, 1e-4):
        assert misfit[eps, "deq_ck"] < 1e-4  # measured 6e-7
        assert misfit[eps, "relu_centred"] > 0.05  # measured 0.29 (eps = 1e-4) and 0.49 (eps = 0)
