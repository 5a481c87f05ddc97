"""Dual formulas: every activation's closed forms against quadrature and Monte Carlo,
and a user's formula used by both exact kernels."""

import math
import pickle

import numpy as np
import pytest
from scipy import special

from sk_deq.activations import gaussian
from sk_deq.activations import ACTIVATIONS, Activation, DualFormula, HardTanh, LeakyReLU, Quadratic, get_activation
from sk_deq.kernels import ImplicitKernelEngine, explicit_kernel, implicit_kernel
from sk_deq.theory import deq_ck_coefficients, explicit_kernel_entry, implicit_kernel_entry

WITH_FORMULA = [
    ("relu", get_activation("relu")),
    ("erf", get_activation("erf")),
    ("gelu", get_activation("gelu")),
    ("leaky_relu", get_activation("leaky_relu")),
    ("LeakyReLU(1.2, 0.3)", LeakyReLU(1.2, 0.3)),
    ("LeakyReLU(0.5, -1.1)", LeakyReLU(0.5, -1.1)),
    ("HardTanh(0.76, 1.2)", HardTanh(0.76, 1.2)),
    ("HardTanh(1.3, 0.4)", HardTanh(1.3, 0.4)),
    ("Quadratic(0.3, 1)", Quadratic(0.3, 1.0)),
    ("Quadratic(-0.5, 0.2)", Quadratic(-0.5, 0.2)),
]
IDS = [name for name, _ in WITH_FORMULA]
ACTS = [act for _, act in WITH_FORMULA]

# (a_i, a_j, rho): equal and unequal variances, both signs, a correlation close to 1
COVARIANCES = [(1.0, 1.0, 0.3), (0.5, 2.0, -0.7), (1.3, 0.9, 0.95), (2.5, 0.4, 0.0), (0.2, 0.2, 1.0)]


def test_named_activations_with_closed_forms_carry_a_formula():
    with_formula = {name for name, act in ACTIVATIONS.items() if act.dual is not None}
    assert with_formula == {"relu", "erf", "gelu", "leaky_relu"}
    for act in (HardTanh(), LeakyReLU(1.0, 0.2), Quadratic(0.1, 1.0)):
        assert isinstance(act.dual, DualFormula)
    assert Activation(np.tanh).dual is None
    assert get_activation(lambda x: np.maximum(x, 0.0)).dual is None


def test_the_formula_follows_the_parameters():
    assert get_activation("relu").dual.slopes == (1.0, 0.0)
    assert LeakyReLU(1.2, 0.3).dual.slopes == (1.2, 0.3)
    assert (Quadratic(0.3, 1.5).dual.c2, Quadratic(0.3, 1.5).dual.c1) == (0.3, 1.5)
    ht = HardTanh(0.7, 1.4).dual
    assert (ht.gain, ht.c, ht.implicit) == (0.7, 1.4, False)


@pytest.mark.parametrize("act", ACTS, ids=IDS)
@pytest.mark.parametrize("ai, aj, rho", COVARIANCES)
def test_formula_matches_quadrature(act, ai, aj, rho):
    """E[phi(u) phi(v)], E[phi'(u) phi'(v)] and E[phi(u)] against 2-D / 1-D quadrature (split at the kinks)."""
    G = rho * math.sqrt(ai * aj)
    bp = act.breakpoints
    F, D = act.dual.expectations(G, ai, aj)
    F_ref = gaussian.expect_pair(act, act, ai, aj, G, bp, bp)
    D_ref = gaussian.expect_pair(act.derivative, act.derivative, ai, aj, G, bp, bp)
    # hard-tanh's formula is a quadrature itself, accurate to about 1e-10; the others are exact
    tol = 1e-9 if isinstance(act, HardTanh) else 1e-10
    assert float(F) == pytest.approx(F_ref, rel=tol, abs=tol)
    if rho < 1.0:  # D jumps at rho = 1 for kinked activations (the diagonal is a one-sided value)
        assert float(D) == pytest.approx(D_ref, rel=tol, abs=tol)
    for a in (ai, aj):
        assert float(act.dual.mean(np.array([a]))[0]) == pytest.approx(
            gaussian.expect(act, math.sqrt(a), bp), rel=1e-11, abs=1e-13
        )


@pytest.mark.parametrize("act", ACTS, ids=IDS)
def test_centred_pair_is_the_pair_of_the_centred_activation(act):
    ai, aj, rho, c = 0.8, 1.7, -0.4, 0.37
    G = rho * math.sqrt(ai * aj)
    bp = act.breakpoints
    F, D = act.dual.centred_pair(np.array([G]), np.array([ai]), np.array([aj]), c)
    ref = gaussian.expect_pair(lambda x: act(x) - c, lambda x: act(x) - c, ai, aj, G, bp, bp)
    assert float(F[0]) == pytest.approx(ref, rel=1e-9, abs=1e-10)
    assert float(D[0]) == pytest.approx(act.dual.expectations(G, ai, aj)[1], rel=1e-15)


@pytest.mark.parametrize("act", ACTS, ids=IDS)
def test_formula_matches_monte_carlo(act):
    """An independent check: sample means of 400,000 Gaussian pairs, within 5 standard errors."""
    ai, aj, rho = 1.4, 0.6, 0.55
    G = rho * math.sqrt(ai * aj)
    rng = np.random.default_rng(7)
    uv = rng.standard_normal((400_000, 2)) @ np.linalg.cholesky([[ai, G], [G, aj]]).T
    u, v = uv[:, 0], uv[:, 1]
    F, D = act.dual.expectations(G, ai, aj)
    for got, samples in [
        (F, act(u) * act(v)),
        (D, act.derivative(u) * act.derivative(v)),
        (act.dual.mean(np.array([ai]))[0], act(u)),
    ]:
        se = samples.std() / math.sqrt(len(samples))
        assert abs(float(got) - samples.mean()) < 5 * se + 1e-12


def test_methods_reported_by_the_engine():
    expected = {
        "relu": "leaky-relu (closed form)",
        "leaky_relu": "leaky-relu (closed form)",
        "erf": "erf (closed form)",
        "gelu": "gelu (closed form)",
        "tanh": "Hermite expansion",
        "sigmoid": "Hermite expansion",
    }
    for name, method in expected.items():
        assert ImplicitKernelEngine(name, 0.2, 1.0).method == method, name
    assert ImplicitKernelEngine(Quadratic(0.3, 1.0), 0.2, 1.0).method == "quadratic (closed form)"
    # hard-tanh's quadrature is for explicit layers; the implicit engine keeps its Hermite route
    assert ImplicitKernelEngine(HardTanh(), 0.2, 1.0).method == "Hermite expansion"


# -- a user's activation with its own formula -----------------------------------------

K_SCALE, OFFSET = 1.5, 0.3


def _scaled_erf(x):
    return K_SCALE * special.erf(x) + OFFSET


def _scaled_erf_d(x):
    return K_SCALE * 2.0 / math.sqrt(math.pi) * np.exp(-x * x)


class ScaledErfDual(DualFormula):
    """``k erf(x) + b``: the arcsine kernel scaled by ``k^2``, plus ``b^2``; mean ``b``."""

    name = "scaled erf (closed form)"

    def pre(self, ai, aj):
        return {"q": np.sqrt((1.0 + 2.0 * ai) * (1.0 + 2.0 * aj))}

    def pair(self, G, pre):
        q = pre["q"]
        F = K_SCALE**2 * 2.0 / math.pi * np.arcsin(np.clip(2.0 * G / q, -1.0, 1.0)) + OFFSET**2
        D = K_SCALE**2 * 4.0 / (math.pi * np.sqrt(np.maximum(q * q - 4.0 * G * G, 1e-300)))
        return F, D

    def mean(self, a):
        return np.full_like(np.asarray(a, dtype=float), OFFSET)


def _custom(with_formula=True):
    return Activation(
        _scaled_erf,
        "scaled_erf",
        derivative=_scaled_erf_d,
        odd=True,
        dual=ScaledErfDual() if with_formula else None,
    )


def _near_one(X, rng):
    """A correlation near 1 and a larger norm, added to the rows of ``unit_rows``."""
    X[1] = 0.97 * X[0] + 0.03 * X[2]  # correlation near 1
    X[3] *= 1.6


def test_custom_formula_matches_quadrature():
    act = _custom()
    test_formula_matches_quadrature(act, 0.7, 1.9, -0.6)
    test_centred_pair_is_the_pair_of_the_centred_activation(act)


@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
def test_implicit_engine_uses_a_custom_formula(kernel, unit_rows):
    act, plain = _custom(), _custom(with_formula=False)
    assert ImplicitKernelEngine(act, 0.3, 1.0).method == "scaled erf (closed form)"
    assert ImplicitKernelEngine(plain, 0.3, 1.0).method == "Hermite expansion"
    X = unit_rows(9, 6, 2, then=_near_one)
    K = implicit_kernel(X, activation=act, sigma_a2=0.3, kernel=kernel, tau0=1.0)
    H = implicit_kernel(X, activation=plain, sigma_a2=0.3, kernel=kernel, tau0=1.0)
    np.testing.assert_allclose(K, H, rtol=1e-9, atol=1e-10)
    for i, j in [(0, 1), (0, 2), (3, 4), (5, 5)]:
        ref = implicit_kernel_entry(act, 0.3, 1.0, X[i] @ X[i], X[j] @ X[j], X[i] @ X[j], kernel=kernel)
        assert K[i, j] == pytest.approx(ref, rel=1e-9, abs=1e-10), (i, j)


@pytest.mark.parametrize("kernel", ["ck", "ntk"])
def test_explicit_kernel_uses_a_custom_formula(kernel, unit_rows):
    act = _custom()
    layers = [act, "relu"]
    X = unit_rows(9, 6, 2, then=_near_one)
    K = explicit_kernel(X, layers=layers, kernel=kernel, tau0=1.0)
    for i, j in [(0, 1), (0, 2), (3, 4), (5, 5)]:
        ref = explicit_kernel_entry(layers, 1.0, X[i] @ X[i], X[j] @ X[j], X[i] @ X[j], kernel=kernel)
        assert K[i, j] == pytest.approx(ref, rel=1e-10, abs=1e-12), (i, j)
    # the same function without a formula has no exact explicit kernel
    with pytest.raises(NotImplementedError, match="not for 'scaled_erf'"):
        explicit_kernel(X, layers=[_custom(with_formula=False)], kernel=kernel)


def test_activation_with_a_formula_pickles_and_compares():
    act = _custom()
    back = pickle.loads(pickle.dumps(act))
    assert isinstance(back.dual, ScaledErfDual) and back == act
    relu = pickle.loads(pickle.dumps(get_activation("relu")))
    assert relu == get_activation("relu") and relu.dual.slopes == (1.0, 0.0)
    ht = pickle.loads(pickle.dumps(HardTanh(0.5, 2.0)))
    assert (ht.dual.gain, ht.dual.c) == (0.5, 2.0)
    # the centring constant of the DEQ is what the formula's mean and the activation agree on
    co = deq_ck_coefficients(act, 0.3, 1.0)
    assert co.moments.mean == pytest.approx(OFFSET, rel=1e-12)
