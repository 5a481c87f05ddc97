"""ImplicitCKNystroem: Nystroem features of the exact implicit kernels."""

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import RidgeClassifier
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

from sk_deq import ImplicitCKNystroem, ImplicitCKTransformer
from sk_deq.activations import Activation
from sk_deq.datasets import make_gaussian_mixture
from sk_deq.kernel_approximation import LANDMARKS


def _rel(A, B):
    return np.linalg.norm(A - B) / np.linalg.norm(B)


@parametrize_with_checks(
    [
        ImplicitCKNystroem(),  # the defaults: n_components=100 above the checks' sample counts (capped)
        ImplicitCKNystroem(n_components=5, random_state=0),
        ImplicitCKNystroem("tanh", kernel="ntk", n_components=4, landmarks="rpcholesky", random_state=0),
        ImplicitCKNystroem(kernel="feature", n_components=3, landmarks="kmeans++", input_scaling="none"),
    ]
)
@pytest.mark.filterwarnings("ignore:n_components > n_samples:UserWarning")
def test_sklearn_compatible(estimator, check):
    check(estimator)


def _data(n=80, p=9, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, p)) * 2.0 + 0.5


# -- what the features are ---------------------------------------------------------


@pytest.mark.parametrize("landmarks", LANDMARKS)
@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
@pytest.mark.parametrize("act", ["relu", "tanh", "erf", "gelu"])
def test_all_samples_as_landmarks_reproduce_the_exact_kernel(act, kernel, landmarks):
    X, Z = _data(), _data(20, seed=1)
    nys = ImplicitCKNystroem(act, 0.3, kernel=kernel, n_components=len(X), landmarks=landmarks, random_state=0)
    P = nys.fit(X).transform(X)
    exact = ImplicitCKTransformer(act, 0.3, kernel=kernel).fit(X)
    K = exact.transform(X)
    assert sorted(nys.component_indices_) == list(range(len(X)))
    assert _rel(P @ P.T, K) < 1e-9
    # new samples: Phi(Z) Phi(X)^T = K(Z, X) when every training sample is a landmark
    assert _rel(nys.transform(Z) @ P.T, exact.transform(Z)) < 1e-9
    assert nys.tau0_ == exact.tau0_ and nys.coefficients_.tau == exact.coefficients_.tau


@pytest.mark.parametrize("landmarks", LANDMARKS)
def test_exact_on_the_landmarks_and_approximate_elsewhere(landmarks):
    X, _ = make_gaussian_mixture(300, 60, random_state=0)
    nys = ImplicitCKNystroem("tanh", 0.2, n_components=60, landmarks=landmarks, random_state=0).fit(X)
    K = ImplicitCKTransformer("tanh", 0.2).fit(X).transform(X)
    L = nys.component_indices_
    assert len(np.unique(L)) == 60
    P = nys.transform(X)
    np.testing.assert_allclose(P[L] @ P[L].T, K[np.ix_(L, L)], rtol=1e-9, atol=1e-11)
    # off the landmarks the approximation is close but not exact
    err = _rel(P @ P.T, K)
    assert 1e-6 < err < 0.15
    # the residual K - Phi Phi^T is positive semi-definite (a Schur complement)
    assert np.linalg.eigvalsh(K - P @ P.T).min() > -1e-9 * np.abs(K).max()


def test_error_decreases_with_more_components():
    X, _ = make_gaussian_mixture(400, 80, random_state=1)
    K = ImplicitCKTransformer("relu", 0.4, kernel="ntk").fit(X).transform(X)
    errs = []
    for k in (10, 40, 160, 400):
        P = ImplicitCKNystroem("relu", 0.4, kernel="ntk", n_components=k, random_state=0).fit_transform(X)
        errs.append(_rel(P @ P.T, K))
    assert all(b < a for a, b in zip(errs, errs[1:]))
    assert errs[-1] < 1e-9


def test_features_of_a_row_do_not_depend_on_its_block():
    X = _data(200)
    nys = ImplicitCKNystroem("tanh", 0.2, n_components=30, random_state=0).fit(X)
    ref = nys.transform(X)
    for block_size in (1, 7, 64):
        np.testing.assert_allclose(nys.set_params(block_size=block_size).transform(X), ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(nys.set_params(block_size=16, n_jobs=2).transform(X), ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(nys.transform(X[5:9]), ref[5:9], rtol=0, atol=1e-10)


def test_custom_activation_uses_the_hermite_route():
    X = _data()
    act = Activation(lambda t: np.tanh(t) + 0.2 * t, name="tanh+linear")
    nys = ImplicitCKNystroem(act, 0.25, n_components=len(X)).fit(X)
    P = nys.transform(X)
    K = ImplicitCKTransformer(act, 0.25).fit_transform(X)
    assert "Hermite" in nys.dual_method_
    assert _rel(P @ P.T, K) < 1e-9


# -- landmark selection ---------------------------------------------------------------


def _cluster_and_outliers():
    """300 near-copies of one point and 20 spread-out points."""
    rng = np.random.default_rng(3)
    centre = rng.standard_normal(12)
    dense = centre + 1e-3 * rng.standard_normal((300, 12))
    spread = 3.0 * rng.standard_normal((20, 12))
    return np.vstack([dense, spread])


@pytest.mark.parametrize("landmarks", ["kmeans++", "rpcholesky"])
def test_adaptive_landmarks_beat_uniform_where_data_are_uneven(landmarks):
    X = _cluster_and_outliers()
    K = ImplicitCKTransformer("relu", 0.2).fit(X).transform(X)
    errs = {}
    for rule in ("uniform", landmarks):
        e = []
        for seed in range(3):
            P = ImplicitCKNystroem("relu", 0.2, n_components=25, landmarks=rule, random_state=seed).fit_transform(X)
            e.append(_rel(P @ P.T, K))
        errs[rule] = np.mean(e)
    # uniform spends most landmarks on the cluster and misses outliers
    assert errs[landmarks] < 0.2 * errs["uniform"]


@pytest.mark.parametrize("landmarks", ["kmeans++", "rpcholesky"])
def test_fewer_distinct_samples_than_components(landmarks):
    base = _data(6, 5)
    X = np.repeat(base, 4, axis=0)  # 24 rows, 6 distinct
    nys = ImplicitCKNystroem("tanh", 0.2, n_components=10, landmarks=landmarks, random_state=0).fit(X)
    assert len(np.unique(nys.component_indices_)) == 10
    # the duplicates add no features beyond the 6 distinct ones, and no noise
    assert np.sum(nys.landmark_eigenvalues_ > nys.eigenvalue_floor_) == 6
    P = nys.transform(X)
    assert np.all(np.isfinite(P))
    K = ImplicitCKTransformer("tanh", 0.2).fit(X).transform(X)
    assert _rel(P @ P.T, K) < 1e-9


def test_duplicate_landmarks_are_handled_by_the_eigenvalue_floor():
    X = np.vstack([_data(30, 4)] * 2)
    nys = ImplicitCKNystroem("relu", 0.2, n_components=60).fit(X)
    assert sorted(nys.component_indices_) == list(range(60))
    assert np.sum(nys.landmark_eigenvalues_ > nys.eigenvalue_floor_) == 30
    assert np.all(np.isfinite(nys.normalization_))
    P = nys.transform(X)
    K = ImplicitCKTransformer("relu", 0.2).fit(X).transform(X)
    assert _rel(P @ P.T, K) < 1e-9


def test_random_state_reproduces_the_landmarks():
    X = _data(100)
    for rule in LANDMARKS:
        a = ImplicitCKNystroem(n_components=20, landmarks=rule, random_state=7).fit(X)
        b = ImplicitCKNystroem(n_components=20, landmarks=rule, random_state=7).fit(X)
        np.testing.assert_array_equal(a.component_indices_, b.component_indices_)
        c = ImplicitCKNystroem(n_components=20, landmarks=rule, random_state=8).fit(X)
        assert not np.array_equal(a.component_indices_, c.component_indices_)


# -- scikit-learn plumbing ------------------------------------------------------------


def test_feature_names_pickling_and_clone():
    X = _data()
    nys = ImplicitCKNystroem("gelu", 0.3, n_components=12, random_state=0).fit(X)
    names = nys.get_feature_names_out()
    assert list(names) == [f"implicitcknystroem{i}" for i in range(12)]
    again = pickle.loads(pickle.dumps(nys))
    np.testing.assert_array_equal(again.transform(X), nys.transform(X))
    assert clone(nys).get_params() == nys.get_params()


def test_grid_search_over_components_sigma_and_penalty():
    X, y = make_gaussian_mixture(240, 60, n_classes=3, random_state=0)
    pipe = Pipeline([("nys", ImplicitCKNystroem("tanh", random_state=0)), ("ridge", RidgeClassifier())])
    grid = {"nys__n_components": [20, 60], "nys__sigma_a2": [0.1, 0.5], "ridge__alpha": [1e-3, 1.0]}
    search = GridSearchCV(pipe, grid, cv=3).fit(X, y)
    assert set(search.best_params_) == set(grid)
    assert len(search.cv_results_["mean_test_score"]) == 8
    assert search.best_score_ > 0.6


# -- bad input -----------------------------------------------------------------------------


def test_more_components_than_samples_are_capped_with_a_warning():
    # as scikit-learn's Nystroem: a warning, and every training sample a landmark (the full kernel)
    X, Z = _data(30), _data(7, seed=1)
    with pytest.warns(UserWarning, match=r"n_components > n_samples \(50 > 30\).*set to n_samples"):
        nys = ImplicitCKNystroem(n_components=50, random_state=0).fit(X)
    assert nys.n_components_ == 30 and nys.get_params()["n_components"] == 50
    np.testing.assert_array_equal(nys.component_indices_, np.arange(30))
    assert nys.transform(Z).shape == (7, 30)
    assert list(nys.get_feature_names_out()) == [f"implicitcknystroem{i}" for i in range(30)]
    K, KZ = ImplicitCKTransformer().fit(X).transform(X), ImplicitCKTransformer().fit(X).transform(Z)
    Phi, PhiZ = nys.transform(X), nys.transform(Z)
    assert _rel(Phi @ Phi.T, K) < 1e-8 and _rel(PhiZ @ Phi.T, KZ) < 1e-8


def test_grid_search_at_the_defaults_on_small_folds():
    # 60 samples, 3 folds: 40 training rows per fold, below the default n_components=100
    X, y = make_gaussian_mixture(60, 10, n_classes=2, random_state=0)
    pipe = Pipeline([("nys", ImplicitCKNystroem(random_state=0)), ("ridge", RidgeClassifier())])
    with pytest.warns(UserWarning, match="n_components > n_samples"):
        search = GridSearchCV(pipe, {"ridge__alpha": [1e-2, 1.0]}, cv=3, error_score="raise").fit(X, y)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert search.best_estimator_["nys"].n_components_ == 60


@pytest.mark.parametrize("bad", [0, -3, 2.5, "10"])
def test_non_positive_components_rejected(bad):
    with pytest.raises(InvalidParameterError, match="n_components"):
        ImplicitCKNystroem(n_components=bad).fit(_data(30))


def test_unknown_landmark_rule_rejected():
    with pytest.raises(InvalidParameterError, match="landmarks"):
        ImplicitCKNystroem(landmarks="random").fit(_data(30))


def test_bad_samples_rejected():
    X = _data(30)
    nys = ImplicitCKNystroem(n_components=5).fit(X)
    bad = X.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        nys.transform(bad)
    with pytest.raises(ValueError, match="NaN"):
        ImplicitCKNystroem(n_components=5).fit(bad)
    with pytest.raises(ValueError, match="features"):
        nys.transform(X[:, :4])
    with pytest.raises(TypeError, match=r"[Ss]parse"):
        from scipy import sparse

        nys.transform(sparse.csr_matrix(X))
