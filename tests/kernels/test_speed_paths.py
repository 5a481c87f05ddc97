"""The fast paths of the exact implicit kernels against the direct routes they replace.

Per-sample quantities of the Hermite route served by a Chebyshev
interpolant in the squared norm (against direct quadrature at every sample,
and with the interpolant forced to fail its check); kernels through those
paths against the scalar per-entry reference.
"""

import math

import numpy as np
import pytest

from sk_deq.kernels import ImplicitKernelEngine, implicit_kernel
from sk_deq.kernels._numerics import chebyshev_interpolation_matrix, chebyshev_points
from sk_deq.kernels._series import HermiteSeries
from sk_deq.theory import implicit_kernel_entry

SA = 0.2


@pytest.fixture(scope="module")
def varied(unit_rows):
    """``varied(n, p=12, seed=0)``: rows at ``tau0 = 1`` whose norms spread over [0.5, 1.6]."""
    return lambda n, p=12, seed=0: unit_rows(n, p, seed, spread=(0.5, 1.6))


def _dual(act, tau0=1.0):
    return ImplicitKernelEngine(act, SA, tau0).dual


def test_chebyshev_interpolation_matrix_reproduces_polynomials_and_nodes():
    m = 9
    nodes = chebyshev_points(m)
    x = np.concatenate([np.linspace(-1, 1, 17), nodes[:3]])
    L = chebyshev_interpolation_matrix(x, m)
    for deg in range(m):
        f = np.polynomial.chebyshev.Chebyshev.basis(deg)
        np.testing.assert_allclose(L @ f(nodes), f(x), atol=1e-14)
    np.testing.assert_array_equal(L[-3:], np.eye(m)[:3])
    # an analytic function: the interpolation error decays geometrically
    x = np.linspace(-1, 1, 101)
    err = [
        np.max(np.abs(chebyshev_interpolation_matrix(x, k) @ np.exp(chebyshev_points(k)) - np.exp(x)))
        for k in (4, 8, 16)
    ]
    assert err[0] > 1e-4 and err[1] < 1e-6 and err[2] < 1e-14


@pytest.mark.parametrize("act", ["tanh", "silu", "sigmoid"])
def test_interpolated_per_sample_quantities_match_direct_quadrature(act, monkeypatch):
    dual = _dual(act)
    n_sq = np.sort(np.random.default_rng(1).uniform(0.3, 3.0, 400))
    sizes = []
    direct = type(dual)._direct

    def counting(self, v):
        sizes.append(len(v))
        return direct(self, v)

    monkeypatch.setattr(type(dual), "_direct", counting)
    fast = dual.per_sample(n_sq)
    assert sum(sizes) < 150  # interpolated: a few nodes and checks, not every sample
    ref = dual.per_sample(n_sq, interpolate=False)
    for key in ("a", "H", "tail", "dtail", "d2"):
        np.testing.assert_allclose(fast[key], ref[key], rtol=0, atol=1e-13, err_msg=key)
    np.testing.assert_allclose(fast["a"], ref["a"], rtol=1e-13)


def test_interpolation_check_failing_falls_back_to_direct_quadrature(monkeypatch):
    dual = _dual("tanh")
    n_sq = np.random.default_rng(2).uniform(0.5, 2.0, 300)
    monkeypatch.setattr(dual, "_INTERP_RTOL", 1e-40)  # no interpolant passes
    calls = []
    direct = type(dual)._direct

    def counting(self, v):
        calls.append(len(v))
        return direct(self, v)

    monkeypatch.setattr(type(dual), "_direct", counting)
    fast = dual.per_sample(n_sq)
    assert calls[-1] == len(np.unique(n_sq))  # every sample computed directly in the end
    ref = dual.per_sample(n_sq, interpolate=False)
    for key in ref:
        np.testing.assert_array_equal(fast[key], ref[key])


def test_per_sample_with_zero_rows_and_a_huge_norm():
    dual = _dual("tanh")
    n_sq = np.random.default_rng(3).uniform(0.5, 2.0, 300)
    n_sq[[0, 7]] = 0.0
    n_sq[11] = 1e6
    n_sq[12] = 1e-9
    fast = dual.per_sample(n_sq)
    ref = dual.per_sample(n_sq, interpolate=False)
    for key in ref:
        np.testing.assert_allclose(fast[key], ref[key], rtol=1e-13, atol=1e-13, err_msg=key)
    # samples far from the bulk are computed directly: equal to rounding
    for i in (0, 7, 11, 12):
        for key in ref:
            np.testing.assert_allclose(fast[key][i], ref[key][i], rtol=1e-15, atol=1e-15, err_msg=key)


@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
def test_kernel_through_interpolated_per_sample_matches_reference(kernel, varied):
    X = varied(160)
    X[5] = 0.0
    X[9] *= 6.0
    X[20] = 0.97 * X[21] + 0.03 * X[22]
    K = implicit_kernel(X, activation="tanh", sigma_a2=SA, kernel=kernel, tau0=1.0)
    for i, j in [(0, 1), (2, 3), (5, 8), (9, 10), (20, 21), (40, 41)]:
        ref = implicit_kernel_entry("tanh", SA, 1.0, X[i] @ X[i], X[j] @ X[j], X[i] @ X[j], kernel=kernel)
        assert K[i, j] == pytest.approx(ref, rel=1e-10, abs=1e-10), (i, j)


def test_tiny_inputs_use_the_direct_route(varied):
    for n in (1, 2, 3):
        X = varied(n)
        K = implicit_kernel(X, activation="silu", sigma_a2=SA, tau0=1.0)
        assert K.shape == (n, n)
        for i in range(n):
            for j in range(i, n):
                ref = implicit_kernel_entry("silu", SA, 1.0, X[i] @ X[i], X[j] @ X[j], X[i] @ X[j])
                assert K[i, j] == pytest.approx(ref, rel=1e-10, abs=1e-10)


def test_bench_speed_returns_one_record_per_case(monkeypatch, varied):
    from benchmarks.kernels import exact as bench_kernels

    assert {"relu", "gelu", "tanh", "silu", "erf", "sigmoid"} <= set(bench_kernels.SPEED_ACTIVATIONS)
    monkeypatch.setattr(bench_kernels, "digits_784", lambda n, seed=0: (varied(n, p=30), None))
    recs = bench_kernels.bench_speed([50], 2, ["relu", "tanh"], [1])
    assert [(r["n"], r["n_jobs"], r["activation"]) for r in recs] == [(50, 1, "relu"), (50, 1, "tanh")]
    for r in recs:
        assert set(r) == {"n", "n_jobs", "activation", "method", "gemm_s", "kernel_s", "ratio"}
        assert len(r["gemm_s"]) == len(r["kernel_s"]) == len(r["ratio"]) == 2
        np.testing.assert_allclose(r["ratio"], np.divide(r["kernel_s"], r["gemm_s"]))
    assert recs[1]["method"] == "Hermite expansion"


def test_bench_near_cost_times_each_weight_and_restores_the_default(monkeypatch, varied):
    from benchmarks.kernels import exact as bench_kernels
    from sk_deq.kernels import _series

    monkeypatch.setattr(bench_kernels, "digits_784", lambda n, seed=0: (varied(n, p=30), None))
    default = _series._NEAR_COST
    seen = []
    block = _series.HermiteSeries.block
    monkeypatch.setattr(
        _series.HermiteSeries, "block", lambda self, *a, **k: (seen.append(_series._NEAR_COST), block(self, *a, **k))[1]
    )
    recs = bench_kernels.bench_near_cost(60, 2, weights=(2, default), acts=("tanh",))
    assert [(r["near_cost"], r["default"]) for r in recs] == [(2, False), (default, True)]
    assert recs[1]["max_abs_diff_to_default"] == 0.0 and recs[0]["max_abs_diff_to_default"] < 1e-12
    assert all(len(r["kernel_s"]) == 2 for r in recs) and {2, default} <= set(seen)
    assert _series._NEAR_COST == default


@pytest.mark.parametrize("act", ["gelu", "erf"])
def test_closed_form_start_is_the_dual_at_zero_covariance(act):
    dual = _dual(act, tau0=0.8)
    a = np.array([0.05, 0.4, 1.0, 2.5])
    F0, D0 = dual.pair(np.zeros((4, 4)), dual.pre(a[:, None], a[None, :]))
    m, dm = dual.mean(a), dual.mean_derivative(a)
    np.testing.assert_allclose(F0, np.multiply.outer(m, m), rtol=1e-12, atol=1e-14)
    # E[phi0'] only starts the iteration: a coarse quadrature, close enough
    np.testing.assert_allclose(D0, np.multiply.outer(dm, dm), rtol=1e-3)


@pytest.mark.parametrize("act", ["gelu", "erf"])
@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
@pytest.mark.parametrize("active_iter", [0, 1, None])
def test_closed_form_newton_paths_match_reference(act, kernel, active_iter, monkeypatch, varied):
    X = varied(60, seed=4)
    X[1] = 0.98 * X[0] + 0.02 * X[2]
    X[3] = -0.96 * X[4] + 0.04 * X[5]
    X[7] = 0.0
    eng = ImplicitKernelEngine(act, SA, 1.0, kernel=kernel)
    S = eng.prepare(X)
    K_default = eng.kernel(S)
    if active_iter is not None:  # 0: every entry by the guarded solver; 1: most of them after one step
        monkeypatch.setattr(eng.dual, "_ACTIVE_ITER", active_iter)
    K = eng.kernel(S)
    np.testing.assert_allclose(K, K_default, rtol=0, atol=1e-12)
    for i, j in [(0, 1), (3, 4), (10, 11), (20, 30)]:
        ref = implicit_kernel_entry(act, SA, 1.0, X[i] @ X[i], X[j] @ X[j], X[i] @ X[j], kernel=kernel)
        assert K[i, j] == pytest.approx(ref, rel=1e-10, abs=1e-10), (i, j)


def test_mirror_upper_copies_the_upper_triangle_exactly():
    from sk_deq.kernels.engine import _mirror_upper

    A = np.random.default_rng(0).standard_normal((301, 301))
    ref = np.triu(A) + np.triu(A, 1).T
    for tile in (7, 128, 400):
        B = A.copy()
        _mirror_upper(B, tile)
        np.testing.assert_array_equal(B, ref)


@pytest.mark.parametrize("act", ["tanh", "silu"])
@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
def test_mehler_final_correction_matches_full_degree_newton(act, kernel, monkeypatch, varied):
    """The correction with the pre-solve's derivative against full-degree
    Newton on every entry (forced with a zero acceptance threshold), and
    against the scalar reference."""
    X = varied(60, seed=3)
    X[1] = 0.999 * X[0] + 0.01 * X[2]  # a large correlation
    eng = ImplicitKernelEngine(act, SA, 1.0, kernel=kernel)
    S = eng.prepare(X)
    K = eng.kernel(S)
    monkeypatch.setattr(HermiteSeries, "_ACCEPT", 0.0)
    K_full = eng.kernel(S)
    np.testing.assert_allclose(K, K_full, rtol=0, atol=1e-12)
    for i, j in [(0, 1), (0, 2), (5, 17), (30, 59)]:
        ref = implicit_kernel_entry(act, SA, 1.0, X[i] @ X[i], X[j] @ X[j], X[i] @ X[j], kernel=kernel)
        assert abs(K[i, j] - ref) <= 1e-10 * max(1.0, abs(ref))


@pytest.mark.parametrize("ntk", [False, True])
def test_degrees_for_several_tolerances_at_once_are_each_tolerances_degrees(ntk):
    """The degree table (one bound, a comparison per tolerance; the tails' square roots taken once per block)
    gives, row by row, the smallest degree whose truncation bound meets each tolerance, found here one degree
    at a time from the bound's formula, at correlations from 0 to 1 (and beyond, clipped), where no degree up
    to the largest meets it too."""
    from sk_deq.kernels import _series

    rng = np.random.default_rng(3)
    K, sa, scale = 40, SA, 0.8
    tails = [np.sort(rng.uniform(0.5, 1.0, K + 1))[::-1] / (1.0 + np.arange(K + 1)) ** 2 * f for f in (1, 1, 2, 3)]
    series = HermiteSeries(sa, 0.1, 1e-12, K, True, None, _series.NUMPY_OPS, 64)
    rho = np.array([0.0, 0.05, 0.3, 0.7, 0.95, 0.999, 1.0, 1.5])
    tols = (1e-12, 1e-8, 1e-4)
    table = series._degree_table(rho, _series._block_bounds(*tails, scale, ntk), tols)

    def degree(r, tol):  # |rho|^(k+1) sa sqrt(tail_r tail_c), and for the NTK |rho|^k sa sqrt(dtail_r dtail_c) scale
        r = min(r, 1.0)
        for k in range(K + 1):
            bound = sa * r ** (k + 1) * math.sqrt(tails[0][k] * tails[1][k])
            if ntk:
                bound = max(bound, sa * r**k * math.sqrt(tails[2][k] * tails[3][k]) * scale)
            if bound <= tol * scale:
                return k
        return K + 1

    for row, tol in zip(table, tols):
        np.testing.assert_array_equal(row, [degree(r, tol) for r in rho])
        np.testing.assert_array_equal(row, series._degrees(rho, _series._block_bounds(*tails, scale, ntk), tol))
    assert table[0, -1] == K + 1 and table[-1, 0] <= 1  # none meets 1e-12 at rho = 1; at most 1 at rho = 0
    assert np.all(np.diff(table, axis=1) >= 0) and np.all(np.diff(table, axis=0) <= 0)
