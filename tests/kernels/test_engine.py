"""Exact implicit kernels against independent computations.

References: the scalar per-entry fixed points of :mod:`sk_deq.theory`
(2-D quadrature, accurate to ~1e-14 for |rho| <= 0.99 and less beyond), the
closed-form equations solved by bisection, one-dimensional integrals from
scipy, and Monte-Carlo simulation of random DEQs.
"""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from hypothesis import given, settings
from hypothesis import strategies as st

from sk_deq.activations import gaussian
from sk_deq.activations import HardTanh, LeakyReLU, Quadratic, get_activation
from sk_deq.datasets import make_gaussian_mixture
from sk_deq.kernels import (
    ImplicitKernelEngine,
    check_kernel_fits_in_memory,
    implicit_kernel,
    implicit_kernel_diagonal,
    monte_carlo_implicit_kernel,
    relative_spectral_error,
)
from sk_deq.kernels._numerics import polar_expectation
from sk_deq._runtime import available_memory_bytes
from sk_deq.theory import deq_ck_coefficients, implicit_kernel_entry
from tests._properties import ACTIVATIONS, KERNELS, SETTINGS, _close, _psd, _scale, samples, two_samples

SA = 0.2


PAIRS = [(0, 1), (0, 2), (3, 4), (6, 7), (2, 9), (5, 8)]


def _reference_check(act, kernel, X, pairs, tau0=1.0, rtol=1e-9):
    K = implicit_kernel(X, activation=act, sigma_a2=SA, kernel=kernel, tau0=tau0)
    for i, j in pairs:
        ref = implicit_kernel_entry(act, SA, tau0, X[i] @ X[i], X[j] @ X[j], X[i] @ X[j], kernel=kernel)
        assert K[i, j] == pytest.approx(ref, rel=rtol, abs=rtol), (i, j)
    return K


# -- every dual against the scalar reference ---------------------------------


@pytest.mark.parametrize(
    "act, kernel",
    [
        ("relu", "ck"),
        ("relu", "feature"),
        ("relu", "ntk"),
        (LeakyReLU(1.2, 0.3), "ntk"),
        ("erf", "ck"),
        ("erf", "ntk"),
        ("gelu", "feature"),
        ("gelu", "ntk"),
        (Quadratic(0.3, 1.0), "ntk"),
        ("tanh", "ck"),
        ("tanh", "feature"),
        ("tanh", "ntk"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_exact_matches_scalar_reference(act, kernel, correlated_rows):
    # entries with |rho| <= 0.97, where the 2-D quadrature reference is exact
    _reference_check(act, kernel, correlated_rows(), [(3, 4), (6, 7)])


@pytest.mark.slow
@pytest.mark.parametrize("act", ["sigmoid", "softplus", "elu", "silu", HardTanh(1.0, 1.0)])
@pytest.mark.parametrize("kernel", ["ck", "ntk"])
def test_exact_generic_activations_match_reference(act, kernel, correlated_rows):
    _reference_check(act, kernel, correlated_rows(), PAIRS, rtol=1e-8)


def test_relu_table_is_exact_near_both_ends():
    # closed-form equation solved by bisection (independent of the table)
    sa, sb = 0.3, 0.7
    eng = ImplicitKernelEngine("relu", sa, 1.0, sigma_b2=sb)
    c = eng.coefficients.moments.mean
    rng = np.random.default_rng(0)
    base = rng.standard_normal(20)
    base /= np.linalg.norm(base)
    other = rng.standard_normal(20)
    other -= (other @ base) * base
    other /= np.linalg.norm(other)
    angles = np.array([0.0, 1e-6, 1e-3, 0.05, 0.5, 1.5, 2.5, math.pi - 0.05, math.pi - 1e-3, math.pi])
    Y = np.array([np.cos(t) * base + np.sin(t) * other for t in angles]) * 1.1
    x = base[None, :] * 0.9
    G = implicit_kernel(x, Y, activation="relu", sigma_a2=sa, sigma_b2=sb, tau0=1.0)[0]
    a = implicit_kernel_diagonal(x, activation="relu", sigma_a2=sa, sigma_b2=sb, tau0=1.0)[0]
    b = implicit_kernel_diagonal(Y[:1], activation="relu", sigma_a2=sa, sigma_b2=sb, tau0=1.0)[0]
    s = math.sqrt(a * b)
    for g, xy in zip(G, Y @ x[0]):

        def resid(r, xy=xy):
            t = math.acos(r)
            dual = s * (math.sin(t) + (math.pi - t) * r) / (2 * math.pi)
            return s * r - sa * (dual - c * (math.sqrt(a) + math.sqrt(b)) / math.sqrt(2 * math.pi) + c * c) - sb * xy

        lo, hi = -1.0, 1.0
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if resid(mid) < 0 else (lo, mid)
        assert g == pytest.approx(s * 0.5 * (lo + hi), abs=1e-12)


def test_gelu_closed_form_matches_quadrature():
    gelu = get_activation("gelu")
    eng = ImplicitKernelEngine("gelu", SA, 1.0)
    for a, b, r in [(0.7, 1.3, 0.3), (2.0, 0.5, -0.6), (1.0, 1.0, 0.95), (0.2, 3.0, -0.99)]:
        G = r * math.sqrt(a * b)
        F, D = eng.dual.pair(np.array([G]), eng.dual.pre(np.array([a]), np.array([b])))
        assert F[0] == pytest.approx(gaussian.expect_pair(gelu, gelu, a, b, G), abs=1e-13)
        assert D[0] == pytest.approx(gaussian.expect_pair(gelu.derivative, gelu.derivative, a, b, G), abs=1e-13)


@pytest.mark.parametrize("activation", ["tanh", HardTanh()])
def test_hermite_coefficients_of_one_sample_are_those_of_many(activation):
    """One sample's Hermite coefficients, whose nodes (hard-tanh's kinks at +-1 off 0) are its own or the
    shared ones (tanh), are those it has among others, and their squares sum to its variance (Parseval)."""
    dual = ImplicitKernelEngine(activation, SA, 1.0).dual
    a = np.array([0.37, 1.9, 0.05])
    H, V, _ = dual._coefficients(a)
    for i in range(len(a)):
        H1, V1, _ = dual._coefficients(a[i : i + 1])
        np.testing.assert_allclose(H1[0], H[i], rtol=0, atol=1e-14)
        assert V1[0] == pytest.approx(V[i], rel=1e-14)
    assert np.sum(H**2, axis=1) == pytest.approx(V, rel=1e-4)  # less than the tail beyond the degree (kinks: 4e-5)


def test_prepared_samples_keep_their_row_ranges_and_column_maxima():
    """A row range is taken once (views, the same object again), an index array each time; the column maxima of
    a table are numpy's (zeros for no rows); a pickle keeps the arrays and none of what was kept."""
    import pickle

    X = np.random.default_rng(0).standard_normal((7, 3))
    S = ImplicitKernelEngine("tanh", SA, 1.0).prepare(X)
    part = S.take(slice(2, 5))
    assert S.take(slice(2, 5, 1)) is part and np.shares_memory(part.tail, S.tail)
    np.testing.assert_array_equal(part.largest("tail"), np.max(S.tail[2:5], axis=0))
    assert part.largest("dtail") is part.largest("dtail")
    picked = S.take(np.array([4, 0]))
    assert picked is not S.take(np.array([4, 0]))
    np.testing.assert_array_equal(picked.H, S.H[[4, 0]])
    np.testing.assert_array_equal(S.take(slice(3, 3)).largest("tail"), np.zeros(S.tail.shape[1]))
    copy = pickle.loads(pickle.dumps(S))
    assert not copy._parts and not copy._largest
    np.testing.assert_array_equal(copy.tail, S.tail)
    np.testing.assert_array_equal(copy.take(slice(2, 5)).largest("tail"), part.largest("tail"))


def test_polar_quadrature_near_correlation_one_with_kinks():
    # hard-tanh has kinks at +-1: compare with scipy's 1-D integral of the
    # conditional expectation (closed form in the normal CDF)
    h = HardTanh(1.0, 1.0)
    norm = stats.norm
    for a, b, rho in [(0.9, 1.0, 0.9987), (1.1, 0.8, -0.9977), (3.0, 0.5, 0.9)]:
        su, sv = math.sqrt(a), math.sqrt(b)

        def inner(x, rho=rho, su=su, sv=sv):
            m = rho * sv / su * x
            s = sv * math.sqrt(1 - rho * rho)
            lo, hi = (-1 - m) / s, (1 - m) / s
            ev = -norm.cdf(lo) + m * (norm.cdf(hi) - norm.cdf(lo)) + s * (norm.pdf(lo) - norm.pdf(hi)) + norm.sf(hi)
            return norm.pdf(x, scale=su) * np.clip(x, -1, 1) * ev

        ref = sum(
            integrate.quad(inner, lo, hi, epsabs=1e-14, epsrel=1e-13, limit=200)[0]
            for lo, hi in [(-12 * su, -1), (-1, 1), (1, 12 * su)]
        )
        got = polar_expectation(h, h, su, sv, rho, h.breakpoints)[0]
        assert got == pytest.approx(ref, abs=1e-11)


def test_mehler_entries_near_one_against_reference():
    # tanh entries at correlations 0.9-0.99 exercise the high-degree groups
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal(12)
    X = np.array([x0 + eps * rng.standard_normal(12) for eps in (0.0, 0.1, 0.3, 0.5)])
    X /= np.sqrt((X * X).sum(1).mean())
    _reference_check("tanh", "ntk", X, [(0, 1), (0, 2), (1, 3)], rtol=1e-10)


# -- structure -----------------------------------------------------------------


@pytest.mark.parametrize("act", ["relu", "tanh", "gelu"])
def test_symmetric_psd_and_cross_consistent(act):
    X, _ = make_gaussian_mixture(60, 40, random_state=0)
    K = implicit_kernel(X, activation=act, sigma_a2=0.3)
    assert np.array_equal(K, K.T)
    w = np.linalg.eigvalsh(K)
    assert w.min() > -1e-10 * w.max()
    t0 = math.sqrt(np.mean((X * X).sum(1)))
    C = implicit_kernel(X[:20], X, activation=act, sigma_a2=0.3, tau0=t0)
    np.testing.assert_allclose(C, K[:20], atol=1e-11)
    # diagonal of the cross kernel between identical samples is the diagonal
    np.testing.assert_allclose(np.diag(C[:, :20]), np.diag(K)[:20], rtol=1e-12)
    np.testing.assert_allclose(implicit_kernel_diagonal(X, activation=act, sigma_a2=0.3), np.diag(K), rtol=1e-14)


@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_blocks_and_threads_do_not_change_numbers(act):
    X, _ = make_gaussian_mixture(90, 30, random_state=1)
    ref = implicit_kernel(X, activation=act, kernel="ntk")
    for kwargs in ({"block_size": 7}, {"block_size": 32, "n_jobs": 2}):
        np.testing.assert_allclose(
            implicit_kernel(X, activation=act, kernel="ntk", **kwargs), ref, rtol=1e-12, atol=1e-13
        )


def test_feature_and_ntk_relations(correlated_rows):
    X = correlated_rows(20, 6, seed=4)
    t0 = math.sqrt(np.mean((X * X).sum(1)))
    G = implicit_kernel(X, activation="tanh", sigma_a2=SA, kernel="ck")
    S = implicit_kernel(X, activation="tanh", sigma_a2=SA, kernel="feature")
    co = deq_ck_coefficients("tanh", SA, t0)
    np.testing.assert_allclose(S, (G - co.sigma_b2 * X @ X.T) / SA, atol=1e-11)
    # diagonal at ||x|| = tau0 is tau^2 (E0)
    x = X[:1] / np.linalg.norm(X[0]) * t0
    assert implicit_kernel_diagonal(x, activation="tanh", sigma_a2=SA, tau0=t0)[0] == pytest.approx(
        co.tau**2, rel=1e-12
    )


# -- exact vs Monte Carlo ----------------------------------------------------------------


@pytest.mark.heavy  # random DEQs of width 3000
@pytest.mark.parametrize("act", ["relu", pytest.param("tanh", marks=pytest.mark.slow)])
def test_exact_matches_monte_carlo_at_large_width(act):
    X, _ = make_gaussian_mixture(200, 160, random_state=0)
    t0 = math.sqrt(np.mean((X * X).sum(1)))
    E = implicit_kernel(X, activation=act, sigma_a2=SA, tau0=t0)
    M = monte_carlo_implicit_kernel(X, act, SA, n_hidden=3000, tau0=t0, random_state=0)
    err = relative_spectral_error(E, M)
    assert err < 0.02  # measured 0.004 (relu), 0.004 (tanh) at m = 3000
    # the comparison has teeth: a wrong sigma_a2 or a wrong centring constant
    # (training scale tau0 off by 1.5) is an order of magnitude further away
    wrong_sa = implicit_kernel(X, activation=act, sigma_a2=0.3, tau0=t0)
    assert relative_spectral_error(wrong_sa, M) > 0.05
    if act == "relu":
        wrong_c = implicit_kernel(X, activation=act, sigma_a2=SA, tau0=1.5 * t0)
        assert relative_spectral_error(wrong_c, M) > 0.04


# -- errors ------------------------------------------------------------------------


def test_kernel_too_large_names_its_size():
    with pytest.raises(MemoryError, match=r"\(1000000, 2000000\).*GiB"):
        check_kernel_fits_in_memory(10**6, 2 * 10**6)
    # n x n float64 entries beyond what this machine has (100,000 needs 75 GiB: a large machine has that)
    available = available_memory_bytes()
    if available is None:
        pytest.skip("this machine's available memory cannot be read: nothing is checked")
    n = max(100_000, int(math.sqrt(2 * available / 8)))
    with pytest.raises(MemoryError, match=f"{n}, {n}"):
        implicit_kernel(np.ones((n, 1)), tau0=1.0)
    assert check_kernel_fits_in_memory(10, 10, available=10**6) == 800


def test_bad_inputs(correlated_rows):
    X = correlated_rows()
    with pytest.raises(ValueError, match="NaN"):
        Xn = X.copy()
        Xn[2, 3] = np.nan
        implicit_kernel(Xn)
    with pytest.raises(ValueError, match="features"):
        implicit_kernel(X, X[:, :3])
    with pytest.raises(ValueError, match="kernel"):
        implicit_kernel(X, kernel="nngp")
    with pytest.raises(ValueError, match="sigma_a2"):
        implicit_kernel(X, sigma_a2=1.5)


def _unit_digits(n):
    from sklearn.datasets import load_digits

    X = load_digits().data[:n]
    return X / np.sqrt((X**2).sum(1).mean())


@pytest.mark.parametrize("activation", ["tanh", "gelu", "softplus"])
@pytest.mark.parametrize("scale", [1e-4, 1e3])
def test_exact_kernel_keeps_relative_precision_at_small_and_large_scales(activation, scale):
    """Diagonal fixed points stop on relative steps: at ||x|| ~ 1e-4 an absolute rule left 1e-7 errors,
    and at 1e3 GELU's rounding floor made the iteration fail ("did not converge")."""
    X = _unit_digits(6) * scale
    tau0 = float(np.sqrt((X**2).sum(1).mean()))
    K = implicit_kernel(X, activation=activation, sigma_a2=0.2, tau0=tau0)
    G = X @ X.T
    n = np.diag(G)
    ref = np.array(
        [[implicit_kernel_entry(activation, 0.2, tau0, n[i], n[j], G[i, j]) for j in range(4)] for i in range(4)]
    )
    np.testing.assert_allclose(K[:4, :4], ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


def test_gelu_kernel_tends_to_the_relu_kernel_at_large_scale():
    """gelu(x) = x Phi(x) -> relu(x) as |x| grows: an independent check of the large-scale path."""
    X = _unit_digits(12) * 1e6
    tau0 = float(np.sqrt((X**2).sum(1).mean()))
    K = implicit_kernel(X, activation="gelu", sigma_a2=0.2, tau0=tau0)
    R = implicit_kernel(X, activation="relu", sigma_a2=0.2, tau0=tau0)
    assert np.abs(K - R).max() / np.abs(R).max() < 1e-9


# -- properties (hypothesis) ---------------------------------------------------------------------------------------


@settings(max_examples=40, **SETTINGS)
@given(XY=two_samples(), activation=st.sampled_from(ACTIVATIONS), kernel=st.sampled_from(KERNELS))
def test_exact_kernel_is_symmetric_in_its_arguments(XY, activation, kernel):
    X, Y = XY
    K = implicit_kernel(X, Y, activation=activation, kernel=kernel, tau0=1.0)
    Kt = implicit_kernel(Y, X, activation=activation, kernel=kernel, tau0=1.0)
    assert np.isfinite(K).all()
    _close(K, Kt.T)


@settings(max_examples=40, **SETTINGS)
@given(X=samples(max_rows=7), activation=st.sampled_from(ACTIVATIONS), kernel=st.sampled_from(KERNELS))
def test_exact_gram_matrix_is_symmetric_psd(X, activation, kernel):
    K = implicit_kernel(_scale(X), activation=activation, kernel=kernel, tau0=1.0)
    _psd(K)
