"""The Gaussian-expectation engine against scipy quadrature and closed forms."""

import math

import numpy as np
import pytest
from scipy import integrate, special

from sk_deq.activations import gaussian as G

# scipy's adaptive reference occasionally reports round-off at 1e-13 requested accuracy
pytestmark = pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")

SQRT_2PI = math.sqrt(2 * math.pi)


def quad_expect(f, t, breakpoints=(), weight=lambda s: 1.0):
    """E[weight(xi) f(t xi)] by adaptive quadrature, split at the breakpoints."""
    pts = sorted({-40.0, 40.0, *[b / t for b in breakpoints if -40 < b / t < 40]})

    def integrand(s):
        return weight(s) * f(np.array([t * s]))[0] * math.exp(-0.5 * s * s) / SQRT_2PI

    return sum(integrate.quad(integrand, a, b, epsabs=1e-15, epsrel=1e-13, limit=400)[0] for a, b in zip(pts, pts[1:]))


FUNCS = {
    "relu": (lambda x: np.maximum(x, 0.0), (0.0,)),
    "tanh": (np.tanh, ()),
    "gelu": (lambda x: x * special.ndtr(x), ()),
    "hardtanh": (lambda x: np.clip(x, -1.0, 2.0), (-1.0, 2.0)),
    "step": (lambda x: (x > 0.3).astype(float), (0.3,)),
    "softplus": (lambda x: np.logaddexp(0.0, x), ()),
}


@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize("t", [0.05, 0.7, 1.0, 3.0, 25.0])
def test_expect_matches_adaptive_quadrature(name, t):
    f, bp = FUNCS[name]
    exact = quad_expect(f, t, bp)
    assert G.expect(f, t, bp) == pytest.approx(exact, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize("t", [0.3, 1.0, 4.0])
def test_stein_moments_match_weighted_quadrature(name, t):
    f, bp = FUNCS[name]
    d1 = quad_expect(f, t, bp, weight=lambda s: s) / t
    d2 = quad_expect(f, t, bp, weight=lambda s: s * s - 1) / t**2
    assert G.stein_d1(f, t, bp) == pytest.approx(d1, rel=1e-9, abs=1e-12)
    assert G.stein_d2(f, t, bp) == pytest.approx(d2, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("t", [1e-3, 0.5, 1.0, 10.0, 100.0])
def test_stein_identities_recover_dirac_masses(t):
    """Kinked functions: the derivative moments contain Dirac masses."""
    relu = lambda x: np.maximum(x, 0.0)
    assert G.stein_d1(relu, t, (0.0,)) == pytest.approx(0.5, abs=1e-13)
    assert G.stein_d2(relu, t, (0.0,)) == pytest.approx(1 / (t * SQRT_2PI), rel=1e-10)
    # E[clip''] = density at the lower kink minus density at the upper one
    clip = lambda x: np.clip(x, -1.0, 2.0)
    pdf = lambda x: math.exp(-0.5 * (x / t) ** 2) / (t * SQRT_2PI)
    assert G.stein_d2(clip, t, (-1.0, 2.0)) == pytest.approx(pdf(-1.0) - pdf(2.0), rel=1e-9, abs=1e-13)
    # E[step'] = density at the jump
    step = lambda x: (x > 0.3).astype(float)
    assert G.stein_d1(step, t, (0.3,)) == pytest.approx(pdf(0.3), rel=1e-9, abs=1e-13)


def test_smooth_derivative_moments_match_direct_derivatives():
    t = 1.3
    d1 = quad_expect(lambda x: 1 - np.tanh(x) ** 2, t)
    d2 = quad_expect(lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2), t)
    assert G.stein_d1(np.tanh, t) == pytest.approx(d1, rel=1e-12)
    assert G.stein_d2(np.tanh, t) == pytest.approx(d2, abs=1e-14)
    gelu_d2 = quad_expect(lambda x: (2 - x * x) * np.exp(-0.5 * x * x) / SQRT_2PI, t)
    assert G.stein_d2(FUNCS["gelu"][0], t) == pytest.approx(gelu_d2, rel=1e-11)


def test_expect_at_zero_scale_is_the_value_at_zero():
    assert G.expect(np.cos, 0.0) == pytest.approx(1.0)


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
def test_bad_scale_raises(bad):
    with pytest.raises(ValueError, match="scale"):
        G.expect(np.tanh, bad)
    with pytest.raises(ValueError, match="scale"):
        G.stein_d2(np.tanh, bad)


def test_stein_needs_positive_scale():
    with pytest.raises(ValueError, match="positive"):
        G.stein_d1(np.tanh, 0.0)


def arccos_kernel(a, b, c):
    rho = np.clip(c / np.sqrt(a * b), -1, 1)
    th = np.arccos(rho)
    return np.sqrt(a * b) / (2 * np.pi) * (np.sin(th) + (np.pi - th) * np.cos(th))


@pytest.mark.parametrize(
    "a,b,c", [(1, 1, 0.3), (2.0, 0.5, -0.9), (0.3, 3.0, 0.0), (1, 1, 1.0), (1, 1, -1.0), (1.0, 4.0, 1.999)]
)
def test_pair_relu_matches_arccos_kernel(a, b, c):
    relu = FUNCS["relu"][0]
    got = G.expect_pair(relu, relu, a, b, c, (0.0,), (0.0,))
    assert got == pytest.approx(arccos_kernel(a, b, c), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("a,b,c", [(1, 1, 0.3), (2.0, 0.5, -0.9), (0.2, 0.7, 0.1)])
def test_pair_erf_matches_arcsine_kernel(a, b, c):
    exact = 2 / np.pi * np.arcsin(2 * c / np.sqrt((1 + 2 * a) * (1 + 2 * b)))
    assert G.expect_pair(special.erf, special.erf, a, b, c) == pytest.approx(exact, rel=1e-11, abs=1e-14)


def test_pair_mixed_functions_match_monte_carlo():
    rng = np.random.default_rng(0)
    a, b, c = 1.5, 0.8, 0.6
    L = np.linalg.cholesky([[a, c], [c, b]])
    uv = rng.standard_normal((2_000_000, 2)) @ L.T
    f, bpf = FUNCS["hardtanh"]
    g = np.tanh
    mc = np.mean(f(uv[:, 0]) * g(uv[:, 1]))
    se = np.std(f(uv[:, 0]) * g(uv[:, 1])) / math.sqrt(len(uv))
    got = G.expect_pair(f, g, a, b, c, bpf, ())
    assert abs(got - mc) < 5 * se


def test_pair_with_zero_variance_factorises():
    got = G.expect_pair(np.cos, np.tanh, 0.0, 1.0, 0.0)
    assert got == pytest.approx(G.expect(np.tanh, 1.0), abs=1e-15)


def test_pair_rejects_invalid_covariance():
    with pytest.raises(ValueError, match="positive semi-definite"):
        G.expect_pair(np.tanh, np.tanh, 1.0, 1.0, 1.5)
    with pytest.raises(ValueError, match="non-negative"):
        G.expect_pair(np.tanh, np.tanh, -1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="finite"):
        G.expect_pair(np.tanh, np.tanh, np.nan, 1.0, 0.0)


@pytest.mark.parametrize("rho", [0.999, 0.9999, 0.99999, 0.999999, -0.9999])
def test_pair_stays_exact_as_correlation_approaches_one(rho):
    """Near |rho| = 1 the inner integral is a sharply smoothed kink; the outer panels must resolve it."""
    c = 0.3
    f = lambda x: np.maximum(x, 0.0) - c
    a, b = 0.9, 1.1
    exact = arccos_kernel(a, b, rho * math.sqrt(a * b)) - c * (math.sqrt(a) + math.sqrt(b)) / SQRT_2PI + c * c
    assert G.expect_pair(f, f, a, b, rho * math.sqrt(a * b), (0.0,), (0.0,)) == pytest.approx(exact, abs=1e-13)
