"""The iterative solves of the exact kernels converge wherever the DEQ contracts (issue 19, section 2).

Every named activation and the parametric families, ``sigma_a2`` across the
kernel's bounds (and the GP's finite-difference probe beyond them), squared
norms from 1e-6 to 1e6: the diagonal is finite and positive and the
off-diagonal entries are finite.  Errors blame ``sigma_a2`` only where the
measured contraction is at least 1.
"""

import math

import numpy as np
import pytest
from scipy.integrate import quad

from sk_deq.activations import HardTanh, LeakyReLU, Quadratic
from sk_deq.kernels import ImplicitKernelEngine
from sk_deq.kernels._numerics import diagonal_newton
from sk_deq.gaussian_process import ImplicitCKKernel

NAMED = ["relu", "tanh", "erf", "sigmoid", "gelu", "silu", "softplus", "elu", "leaky_relu"]
FAMILIES = [LeakyReLU(1.0, 0.5), HardTanh(1.0, 1.0), HardTanh(2.0, 0.5), Quadratic(0.0, 1.0)]
# the kernel's default bounds, and the GP's gradient probe at sigma_a2 * exp(1e-4) beyond the top one
SIGMAS = np.r_[1e-3, 0.05, 0.2, 0.4, 0.6, 0.7, 0.8, 0.83, 0.86, 0.88, 0.89, 0.895, 0.9, 0.9 * math.exp(1e-4)]
N_SQ = np.logspace(-6, 6, 49)


def _ntk_limit(act):
    """The largest sigma_a2 at which the DEQ contracts at small inputs: 1 / phi'(0)^2 (1 / a^2 for hard-tanh)."""
    if act == "erf":
        return math.pi / 4.0  # erf'(0)^2 = 4 / pi
    return 1.0 / act.params["a"] ** 2 if isinstance(act, HardTanh) else 1.0


@pytest.mark.parametrize("act", NAMED + FAMILIES, ids=str)
def test_diagonal_converges_across_the_whole_range(act):
    for sa in SIGMAS:
        a = ImplicitKernelEngine(act, sa, 1.0).dual.diagonal(N_SQ)
        assert np.all(np.isfinite(a)) and np.all(a > 0), (act, sa)


def _variance_by_quadrature(act, c, a):
    """``E[(phi0(sqrt(a) xi) - c)^2]`` by adaptive quadrature on either side of 0."""

    def f(t):
        return (float(act(np.array([math.sqrt(a) * t]))[0]) - c) ** 2 * math.exp(-t * t / 2)

    return sum(quad(f, lo, hi, epsabs=0, epsrel=1e-12)[0] for lo, hi in ((-np.inf, 0.0), (0.0, np.inf))) / math.sqrt(
        2 * math.pi
    )


@pytest.mark.parametrize("act", NAMED + FAMILIES, ids=str)
def test_zero_norm_samples_across_the_whole_range(act):
    """A zero row: the odd activations' exact root a = 0 (reached before only through the subnormals, and
    not at all within the iteration budget at sigma_a2 = 0.25 or 0.5 for tanh), and its kernel row; where 0
    repels (erf at sigma_a2 > pi / 4: the root is small and the recursion barely contracts there, which a
    fixed-point iteration did not resolve in 10,000 steps), the positive root."""
    X = np.vstack([np.zeros(4), np.full(4, 0.5)])
    for sa in np.r_[SIGMAS[:-1], 0.786, 0.79]:
        eng = ImplicitKernelEngine(act, sa, 1.0)
        phi0_at_zero = float(eng.activation(np.zeros(1))[0]) - eng.coefficients.moments.mean
        slope = float(eng.activation.derivative(np.zeros(1))[0])
        S = eng.prepare(X)
        a0 = S.a[0]
        assert np.isfinite(a0) and a0 >= 0, (act, sa)
        if phi0_at_zero == 0 and sa * slope**2 < 1:  # the zero row's features vanish: a = 0, K(0, x) = 0
            assert a0 == 0.0, (act, sa)
            np.testing.assert_array_equal(eng.kernel(S)[0], [0.0, 0.0])
        else:  # the fixed point a = sa E[(phi0(sqrt(a) xi) - c)^2] (> 0), by independent quadrature
            assert a0 > 0, (act, sa)
            V = _variance_by_quadrature(eng.activation, eng.coefficients.moments.mean, a0)
            assert a0 == pytest.approx(sa * V, rel=1e-9), (act, sa)


@pytest.mark.parametrize("act", NAMED + FAMILIES, ids=str)
def test_kernel_entries_finite_across_the_range(act):
    X = np.sqrt(N_SQ[::6])[:, None] * np.array([[1.0, 0.0]])
    Y = np.sqrt(N_SQ[::-6])[:, None] * np.array([[0.6, 0.8]])
    for sa in (1e-3, 0.45, 0.9 * math.exp(1e-4)):
        for kernel in ("ck", "ntk"):
            eng = ImplicitKernelEngine(act, sa, 1.0, kernel=kernel)
            if kernel == "ntk" and sa >= _ntk_limit(act):
                with pytest.raises(ValueError, match=r"not contracting.*>= 1"):
                    eng.prepare(X)
                continue
            SX, SY = eng.prepare(X), eng.prepare(Y)
            d, K = eng.diagonal(SX), eng.kernel(SX, SY)
            assert np.all(np.isfinite(d)) and np.all(d > 0), (act, sa, kernel)
            assert np.all(np.isfinite(K)), (act, sa, kernel)


def test_issue_reproducer():
    """A 2-cycle of the Newton iterates (relative step 1.0068e-15) used to exhaust the budget."""
    X = np.array([[np.sqrt(0.22965204505426315)], [1.0]])
    K = ImplicitCKKernel("tanh", 0.8999724036703807, bias_variance=0.0)(X)
    assert np.all(np.isfinite(K)) and np.all(np.diag(K) > 0)
    eng = ImplicitKernelEngine("tanh", 0.8999724036703807, 1.0)
    a = eng.dual.diagonal(np.array([0.22965204505426315]))
    # the fixed point to rounding
    assert K[0, 0] == pytest.approx(a[0], rel=1e-14)


def test_tanh_random_points_near_the_top_of_the_bounds():
    """Before the fix about 2 % of these points failed (1 in 400 for the issue's sampling)."""
    rng = np.random.default_rng(0)
    for sa in rng.uniform(0.8, 0.9, 40):
        a = ImplicitKernelEngine("tanh", sa, 1.0).dual.diagonal(10 ** rng.uniform(-6, 6, 50))
        assert np.all(np.isfinite(a)) and np.all(a > 0)


def test_diagonal_newton_stops_on_a_rounding_cycle():
    """Newton iterates that alternate about the root by ~30 ulps (above the 1e-15 tolerance) stop, at the root."""
    root = 0.7
    w = 40 * np.spacing(root)

    def evaluate(a):  # a rounding-size error of V whose sign flips across the root: a 2-cycle
        return np.where(a > root, root - w, root + w), np.zeros_like(a)

    a = diagonal_newton(evaluate, 0.5, 0.5, np.array([root]), np.array([2.0]))
    assert a[0] == pytest.approx(root, rel=1e-14)


def test_non_convergence_is_not_blamed_on_sigma_a2_when_contracting():
    def evaluate(a):  # contracting (sa dV = 0.25) but Newton never gets a step below tolerance
        return 0.5 * a + 1e-9 * np.sin(1e9 * a), np.full_like(a, 0.5)

    with pytest.raises(ValueError) as err:
        diagonal_newton(evaluate, 0.5, 0.5, np.array([1.0]), np.array([1.0]), max_iter=3)
    msg = str(err.value)
    assert "contracting there" in msg and "not of sigma_a2" in msg and "Try a smaller" not in msg


def test_non_contracting_diagonal_blames_sigma_a2():
    def evaluate(a):  # V grows faster than a / sa: no finite fixed point
        return 3.0 * a, np.full_like(a, 3.0)

    with pytest.raises(ValueError, match=r"diverges.*sigma_a2 \* dV/da = 1\.5.*smaller sigma_a2"):
        diagonal_newton(evaluate, 0.5, 0.5, np.array([1.0]), np.array([1.0]))


def test_erf_ntk_outside_its_contraction_range_is_a_clear_error():
    eng = ImplicitKernelEngine("erf", 0.85, 1.0, kernel="ntk")
    with pytest.raises(ValueError, match=r"not contracting.*sigma_a2 \* E\[phi'\(u\)\^2\] = 1\.0"):
        eng.prepare(np.array([[1e-3, 0.0]]))
    # the same inputs' CK exists
    ck = ImplicitKernelEngine("erf", 0.85, 1.0)
    assert np.all(ck.diagonal(ck.prepare(np.array([[1e-3, 0.0]]))) > 0)


@pytest.mark.heavy
def test_gp_fit_on_diabetes_with_tanh():
    from sklearn.datasets import load_diabetes
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import WhiteKernel

    X, y = load_diabetes(return_X_y=True)
    X = X[:200] - X[:200].mean(axis=0)
    X /= np.sqrt(np.mean(np.sum(X * X, axis=1)))
    gp = GaussianProcessRegressor(ImplicitCKKernel("tanh", 0.3) + WhiteKernel(), normalize_y=True)
    gp.fit(X, y[:200])
    assert np.isfinite(gp.log_marginal_likelihood_value_)
    assert 1e-3 <= gp.kernel_.k1.sigma_a2 <= 0.9


def test_newton_from_a_start_already_clipped_takes_it_as_it_is():
    """``clipped=True`` skips the start's clipped copy: the same iterates and values as the copy gives, the
    caller's array untouched; a start outside [-1, 1] still gets clipped without it."""
    from sk_deq.kernels._numerics import newton

    seen = []

    def fun(rho):  # roots at 0.3 * (1 + entry index / 10)
        seen.append(rho)
        target = 0.3 * (1.0 + np.arange(rho.size) / 10.0)
        return rho**3 - target**3, 3.0 * rho**2 + 1e-3

    start = np.linspace(-0.9, 0.9, 7)
    kept = start.copy()
    got = newton(fun, start, tol=1e-12, full=True, clipped=True)
    assert seen[0] is start  # the first evaluation at the caller's array itself
    seen.clear()
    want = newton(fun, start, tol=1e-12, full=True)
    assert seen[0] is not start
    for a, b in zip([got[0], *got[1], got[2]], [want[0], *want[1], want[2]]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(start, kept)
    np.testing.assert_allclose(got[0], 0.3 * (1.0 + np.arange(7) / 10.0), rtol=1e-9)
    outside = newton(fun, np.full(7, 5.0), tol=1e-12)
    np.testing.assert_allclose(outside, 0.3 * (1.0 + np.arange(7) / 10.0), rtol=1e-9)
