"""Property-based tests (hypothesis) on small random inputs.

- every kernel: ``K(X, Y) == K(Y, X).T``; square Gram matrices symmetric PSD;
- the transformer: ``transform(X) == fit_transform(X)``;
- the classifiers: a row's prediction does not depend on the order or size of its batch;
- matching: invariant under the symmetries of the DEQ's activation;
- theory: coefficients continuous in sigma_a2 and tau0;
- rejections: arbitrary arrays and parameters end in a clear error or in finite output, never NaN.
"""

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.exceptions import ConvergenceWarning

from sk_deq import (
    DEQClassifier,
    ExplicitClassifier,
    ImplicitCKKernel,
    ImplicitCKTransformer,
    MatchedExplicitClassifier,
    match_explicit,
)
from sk_deq.activations import Activation, HardTanh, LeakyReLU, Quadratic, get_activation
from sk_deq.kernels import explicit_kernel, implicit_kernel, linearized_implicit_kernel, monte_carlo_implicit_kernel
from sk_deq.theory import deq_ck_coefficients, deq_ntk_coefficients

# derandomized (CI sees the same examples every run); shrinking capped so a failure reports quickly
SETTINGS = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
)

# activations of every dual route: closed forms (relu, leaky, erf, gelu, quadratic) and the Hermite expansion
ACTIVATIONS = ["relu", "tanh", "gelu", "erf", "silu", "sigmoid", LeakyReLU(1.0, 0.3), Quadratic(0.2, 0.9)]
KERNELS = ["ck", "feature", "ntk"]


def samples(min_rows=1, max_rows=6, min_cols=1, max_cols=5, bound=2.0):
    """Small float64 sample matrices with entries in [-bound, bound]."""
    shape = st.tuples(st.integers(min_rows, max_rows), st.integers(min_cols, max_cols))
    return shape.flatmap(lambda s: arrays(np.float64, s, elements=st.floats(-bound, bound, allow_nan=False, width=64)))


def two_samples(bound=2.0):
    """X and Y with the same number of columns."""
    return st.integers(1, 5).flatmap(
        lambda p: st.tuples(
            arrays(np.float64, st.tuples(st.integers(1, 5), st.just(p)), elements=st.floats(-bound, bound, width=64)),
            arrays(np.float64, st.tuples(st.integers(1, 5), st.just(p)), elements=st.floats(-bound, bound, width=64)),
        )
    )


def _scale(X):
    """Rows with mean squared norm ~1 (the data scale the kernels are centred for), zero rows allowed."""
    ms = float(np.mean(np.sum(X * X, axis=1)))
    return X / math.sqrt(ms) if ms > 0 else X


def _close(A, B, rtol=1e-10):
    scale = max(float(np.max(np.abs(A))), float(np.max(np.abs(B))), 1e-300)
    np.testing.assert_allclose(A, B, rtol=rtol, atol=rtol * scale)


def _check_kernel_function(kernel, X, Y, rtol=1e-10, psd=True):
    """``kernel(A, B)`` is symmetric in its arguments and (``psd``) ``kernel(A, None)`` a PSD Gram matrix."""
    X, Y = _scale(X), _scale(Y)
    _close(kernel(X, Y), kernel(Y, X).T, rtol=rtol)
    if psd:
        _psd(kernel(X, None))


def _psd(K):
    np.testing.assert_array_equal(K, K.T)
    w = np.linalg.eigvalsh(K)
    assert w.min() >= -1e-10 * max(abs(w.max()), 1e-300), (w.min(), w.max())


# ---------------------------------------------------------------------------
# kernels


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


@settings(max_examples=30, **SETTINGS)
@given(
    XY=two_samples(), activation=st.sampled_from(["relu", "tanh", "gelu", "erf"]), kernel=st.sampled_from(["ck", "ntk"])
)
def test_linearized_kernel_is_symmetric_and_its_gram_matrix_psd(XY, activation, kernel):
    _check_kernel_function(
        lambda A, B: linearized_implicit_kernel(A, B, activation=activation, kernel=kernel, tau0=1.0), *XY
    )


@settings(max_examples=20, **SETTINGS)
@given(XY=two_samples(), activation=st.sampled_from(["relu", "tanh"]), kernel=st.sampled_from(KERNELS))
def test_monte_carlo_kernel_of_one_network_is_symmetric_and_psd(XY, activation, kernel):
    kw = dict(kernel=kernel, tau0=1.0, n_hidden=64, random_state=0)
    # a Gram matrix of features is PSD; the NTK's elementwise quotient need not be at finite width
    _check_kernel_function(
        lambda A, B: monte_carlo_implicit_kernel(A, activation, 0.2, Y=B, **kw), *XY, rtol=1e-9, psd=kernel != "ntk"
    )


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


@settings(max_examples=25, **SETTINGS)
@given(
    X=samples(min_rows=2, max_rows=7),
    method=st.sampled_from(["exact", "linearized", "monte_carlo"]),
    kernel=st.sampled_from(KERNELS),
    activation=st.sampled_from(["relu", "tanh", "gelu"]),
)
def test_transform_equals_fit_transform(X, method, kernel, activation):
    assume(np.ptp(X, axis=0).max() > 1e-3)  # the global scaling needs samples that differ
    if method == "linearized" and kernel == "feature":
        kernel = "ck"
    width = {"n_hidden": 64} if method == "monte_carlo" else {}  # the other methods warn about an n_hidden
    t = ImplicitCKTransformer(activation, kernel=kernel, method=method, random_state=0, **width)
    K = t.fit_transform(X)
    _close(t.transform(X), K)
    _psd(K) if kernel != "ntk" or method != "monte_carlo" else None


@settings(max_examples=30, **SETTINGS)
@given(XY=two_samples(), tau0=st.floats(1e-3, 1e3), activation=st.sampled_from(["relu", "tanh", "gelu"]))
def test_kernel_object_matches_the_function_and_is_symmetric(XY, tau0, activation):
    X, Y = XY
    k = ImplicitCKKernel(activation=activation, tau0=tau0, bias_variance=0.0)
    K = k(X * tau0, Y * tau0)
    _close(K, k(Y * tau0, X * tau0).T)
    _close(K, implicit_kernel(X * tau0, Y * tau0, activation=activation, tau0=tau0))


# ---------------------------------------------------------------------------
# classifiers: a row's prediction does not depend on its batch


@pytest.fixture(scope="module")
def fitted():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        models = [
            DEQClassifier(n_hidden=128, random_state=0).fit(X[:400], y[:400]),
            MatchedExplicitClassifier("tanh", n_hidden=128, random_state=0).fit(X[:400], y[:400]),
            ExplicitClassifier(("relu", "relu"), n_hidden=128, random_state=0).fit(X[:400], y[:400] % 2),
        ]
    X_test = X[400:460]
    return models, X_test, [m.decision_function(X_test) for m in models]


@settings(max_examples=30, **{**SETTINGS, "suppress_health_check": [HealthCheck.function_scoped_fixture]})
@given(data=st.data())
def test_predictions_do_not_depend_on_row_order_or_batch_size(fitted, data):
    models, X, full = fitted
    i = data.draw(st.integers(0, len(models) - 1))
    idx = data.draw(st.permutations(range(len(X))).flatmap(lambda p: st.integers(1, len(p)).map(lambda k: p[:k])))
    got, want = models[i].decision_function(X[list(idx)]), full[i][list(idx)]
    # Bitwise, by design (tests/test_batch_invariance.py).  On a GPU host this once came 2.3e-7 apart: the
    # module fixture above ran before the function-scoped CPU pin and fitted (and predicted ``full``) on CUDA;
    # the root conftest now pins the CPU for the whole session.
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------
# matching and theory


def _variant(name, how, c):
    """A DEQ activation related to ``name`` by a symmetry of the DEQ: -phi, phi(-x) or phi + c."""
    act = get_activation(name)
    f = act.__call__
    if how == "negated":
        return Activation(lambda x: -f(x), f"-{name}", breakpoints=act.breakpoints)
    if how == "reflected":
        return Activation(lambda x: f(-x), f"{name}(-x)", breakpoints=tuple(-b for b in act.breakpoints))
    return Activation(lambda x: f(x) + c, f"{name}+c", breakpoints=act.breakpoints)


def _params(m):
    return np.concatenate([list(p.values()) for p in m.params])


@settings(max_examples=12, **SETTINGS)
@given(
    name=st.sampled_from(["relu", "tanh", "erf"]),
    how=st.sampled_from(["negated", "reflected", "shifted"]),
    c=st.floats(-2, 2),
    sigma_a2=st.floats(0.05, 0.4),
    log_tau0=st.floats(-2, 2),
    kernel=st.sampled_from(["ck", "ntk"]),
)
def test_matching_is_invariant_under_the_symmetries_of_the_activation(name, how, c, sigma_a2, log_tau0, kernel):
    """-phi, phi(-x) and phi + c (centred away) give the DEQ the same kernel: the same matched network."""
    tau0 = 10.0**log_tau0
    ref = match_explicit(name, sigma_a2, tau0, kernel)
    other = match_explicit(_variant(name, how, c), sigma_a2, tau0, kernel)
    assert other.family == ref.family
    # the same targets, up to the quadrature of a callable (measured in each equation's own scale)
    np.testing.assert_allclose((other.targets.equations() - ref.targets.equations()) / ref.scales, 0.0, atol=1e-6)
    np.testing.assert_allclose(_params(other), _params(ref), atol=1e-5)


COEFFICIENTS = ["tau", "alpha1", "alpha2", "alpha3", "alpha4"]
NTK_COEFFICIENTS = ["beta1", "beta2", "beta3", "kappa"]


@settings(max_examples=40, **SETTINGS)
@given(
    activation=st.sampled_from(["relu", "tanh", "gelu", "erf", "silu", "softplus", "elu", "sigmoid"]),
    sigma_a2=st.floats(0.02, 0.9),
    log_tau0=st.floats(-3, 3),
    direction=st.sampled_from(["sigma_a2", "tau0"]),
)
def test_theory_coefficients_are_continuous_in_sigma_a2_and_tau0(activation, sigma_a2, log_tau0, direction):
    """A relative step of 1e-7 in either argument moves every coefficient by at most 1e-5 (relative)."""
    tau0 = 10.0**log_tau0
    try:
        a = deq_ntk_coefficients(activation, sigma_a2, tau0)
    except ValueError:
        assume(False)  # this DEQ has no stable kernel; covered by the rejection tests
    h = 1e-7
    s2, t2 = (sigma_a2 * (1 + h), tau0) if direction == "sigma_a2" else (sigma_a2, tau0 * (1 + h))
    b = deq_ntk_coefficients(activation, s2, t2)
    for name in COEFFICIENTS:
        x, y = getattr(a.ck, name), getattr(b.ck, name)
        assert abs(y - x) <= 1e-5 * max(abs(x), 1e-12 * a.ck.tau**2), (name, x, y)
    for name in NTK_COEFFICIENTS:
        x, y = getattr(a, name), getattr(b, name)
        assert abs(y - x) <= 1e-5 * max(abs(x), 1e-12 * a.ck.tau**2), (name, x, y)


# ---------------------------------------------------------------------------
# rejections: a clear error or finite output, never NaN

ANY_FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)


def _clear_error_or_finite(call):
    try:
        out = call()
    except (ValueError, TypeError) as exc:
        assert len(str(exc)) > 20  # a sentence, not a bare numpy error
        return None
    assert np.all(np.isfinite(out)), out
    return out


# scikit-learn's check_array sums the array first: [inf, -inf] warns inside numpy before its clear error
@pytest.mark.filterwarnings("ignore:invalid value encountered in reduce:RuntimeWarning:numpy")
@settings(max_examples=60, **SETTINGS)
@given(X=arrays(np.float64, st.tuples(st.integers(0, 4), st.integers(0, 3)), elements=ANY_FLOATS))
def test_kernels_on_arbitrary_arrays(X):
    _clear_error_or_finite(lambda: implicit_kernel(X, activation="tanh"))
    _clear_error_or_finite(lambda: ImplicitCKKernel()(X))
    _clear_error_or_finite(lambda: ImplicitCKKernel().diag(X))
    _clear_error_or_finite(lambda: ImplicitCKTransformer(input_scaling="none").fit_transform(X))


@pytest.mark.filterwarnings("ignore:invalid value encountered in reduce:RuntimeWarning:numpy")
@settings(max_examples=40, **{**SETTINGS, "suppress_health_check": [HealthCheck.function_scoped_fixture]})
@given(X=arrays(np.float64, st.tuples(st.integers(0, 3), st.integers(63, 65)), elements=ANY_FLOATS))
def test_fitted_classifiers_on_arbitrary_arrays(fitted, X):
    models, _, _ = fitted
    for m in models:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            proba = _clear_error_or_finite(lambda m=m: m.predict_proba(X))
        if proba is not None:
            np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)


@settings(max_examples=60, **SETTINGS)
@given(sigma_a2=ANY_FLOATS, tau0=ANY_FLOATS, activation=st.sampled_from(["relu", "tanh", "gelu", "sigmoid"]))
def test_theory_on_arbitrary_parameters(sigma_a2, tau0, activation):
    def coefficients():
        c = deq_ck_coefficients(activation, sigma_a2, tau0)
        return [c.tau, c.alpha1, c.alpha2, c.alpha3, c.alpha4, *c.feature_kernel().equations()]

    _clear_error_or_finite(coefficients)
