"""DEQClassifier, ExplicitClassifier and MatchedExplicitClassifier as scikit-learn classifiers (the task of
``sk_deq.estimators._classifier``): scikit-learn's checks, outputs and labels, bad input, sample and class weights."""

import warnings

import numpy as np
import pytest
from scipy import sparse
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sk_deq import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier
from tests._networks import CLASSIFIERS, small
from tests._properties import ANY_FLOATS, SETTINGS, _clear_error_or_finite

ESTIMATORS = CLASSIFIERS


# ---------------------------------------------------------------------------
# scikit-learn's estimator checks


def _check_configs():
    # float32 with the readout trained (the defaults' path) runs the checks in test_checks_at_defaults
    configs = [small(cls, dtype="float64") for cls in ESTIMATORS]
    # trained hidden weights (implicit backward for the DEQ), minibatch Adam
    fast = dict(n_hidden=16, solver="adam", learning_rate_init=0.1, max_iter=20, batch_size=16, dtype="float64")
    configs.append(small(DEQClassifier, trainable="all", **fast))
    configs.append(small(MatchedExplicitClassifier, trainable="hidden", **fast))
    return configs


_MINIBATCH_WEIGHTS = (
    "minibatch Adam: integer sample weights equal repeated rows only in expectation (repeating rows changes "
    "the minibatches and the number of steps per epoch), as for scikit-learn's own stochastic solvers; "
    "test_weighted_minibatches_match_repeated_rows_in_expectation checks the expectation"
)


def _expected_failures(estimator):
    if estimator.solver == "adam":
        return {"check_sample_weight_equivalence_on_dense_data": _MINIBATCH_WEIGHTS}
    return {}


@parametrize_with_checks(_check_configs(), expected_failed_checks=_expected_failures)
def test_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


# ---------------------------------------------------------------------------
# outputs and labels


def test_decision_function_is_readout_of_features(blobs):
    X, y = blobs
    for cls in ESTIMATORS:
        est = small(cls, dtype="float64").fit(X, y)
        Z = est.features(X)
        W = est.module_.readout.weight.detach().numpy()
        b = est.module_.readout.bias.detach().numpy()
        np.testing.assert_allclose(est.decision_function(X), Z @ W.T + b, rtol=1e-10, atol=1e-12)
        assert Z.shape == (len(X), 32)


def test_readout_training_reaches_the_logistic_regression_optimum(blobs):
    # Independent check of the training loop: same features, same penalised
    # objective, scikit-learn's own solver.
    X, y = blobs
    alpha = 1e-2
    est = small(ExplicitClassifier, dtype="float64", alpha=alpha, max_iter=500, tol=1e-9).fit(X, y)
    Z = est.features(X)
    lr = LogisticRegression(C=1.0 / (alpha * len(X)), tol=1e-10, max_iter=10_000).fit(Z, y)
    np.testing.assert_allclose(est.predict_proba(X), lr.predict_proba(Z), atol=2e-4)
    Xb, yb = X[y < 2], y[y < 2]
    estb = small(ExplicitClassifier, dtype="float64", alpha=alpha, max_iter=500, tol=1e-9).fit(Xb, yb)
    Zb = estb.features(Xb)
    lrb = LogisticRegression(C=1.0 / (alpha * len(Xb)), tol=1e-10, max_iter=10_000).fit(Zb, yb)
    np.testing.assert_allclose(estb.decision_function(Xb), lrb.decision_function(Zb), atol=2e-3)


def test_string_labels_binary_and_multiclass(blobs):
    X, y = blobs
    names = np.array(["cat", "dog", "emu"])[y]
    est = small(DEQClassifier).fit(X, names)
    assert list(est.classes_) == ["cat", "dog", "emu"]
    assert set(est.predict(X)) <= set(names)
    proba = est.predict_proba(X)
    assert proba.shape == (len(X), 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(np.exp(est.predict_log_proba(X)), proba, rtol=1e-10)

    mask = y < 2
    binary = small(MatchedExplicitClassifier).fit(X[mask], names[mask])
    dec = binary.decision_function(X[mask])
    assert dec.shape == (mask.sum(),)
    np.testing.assert_array_equal(binary.predict(X[mask]), np.where(dec > 0, "dog", "cat"))
    proba = binary.predict_proba(X[mask])
    np.testing.assert_allclose(proba[:, 1], 1 / (1 + np.exp(-dec)))
    np.testing.assert_allclose(np.exp(binary.predict_log_proba(X[mask])), proba, rtol=1e-10)


# ---------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_bad_input_errors(cls, blobs):
    X, y = blobs
    est = small(cls)
    with pytest.raises(NotFittedError):
        est.predict(X)
    for bad, match in [(np.nan, "NaN"), (np.inf, "infinity")]:
        Xb = X.copy()
        Xb[3, 1] = bad
        with pytest.raises(ValueError, match=match):
            est.fit(Xb, y)
    with pytest.raises(ValueError, match="2D array"):
        est.fit(X[:, 0], y)
    with pytest.raises(ValueError, match="dim 3"):
        est.fit(X[:, :, None], y)
    with pytest.raises(ValueError, match="minimum of 2 is required"):
        est.fit(X[:1], y[:1])
    with pytest.raises(ValueError, match="at least 2 classes"):
        est.fit(X, np.zeros(len(X)))
    with pytest.raises(TypeError, match=r"[Ss]parse"):
        est.fit(sparse.csr_matrix(X), y)
    with pytest.raises(ValueError, match="Unknown label type"):
        est.fit(X, np.linspace(0, 1, len(X)))
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        est.fit(X, y[:-1])

    est.fit(X, y)
    Xb = X.copy()
    Xb[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        est.predict_proba(Xb)
    with pytest.raises(ValueError, match="expecting 5 features"):
        est.predict(X[:, :4])
    with pytest.raises(TypeError, match=r"[Ss]parse"):
        est.predict(sparse.csr_matrix(X))


def test_invalid_parameters(blobs):
    X, y = blobs
    for est in [
        DEQClassifier(sigma_a2=1.5),
        DEQClassifier(sigma_a2=0.0),
        DEQClassifier(activation="nonexistent"),
        DEQClassifier(fixed_point_solver="newton"),
        DEQClassifier(trainable="everything"),
        DEQClassifier(dtype="float16"),
        ExplicitClassifier(n_hidden=0),
        MatchedExplicitClassifier(kernel="rbf"),
    ]:
        with pytest.raises(InvalidParameterError):
            est.fit(X, y)
    with pytest.raises(ValueError, match="at least one"):
        ExplicitClassifier(layers=()).fit(X, y)
    with pytest.raises(ValueError, match="Unknown activation"):
        ExplicitClassifier(layers=("relu", "nope")).fit(X, y)
    with pytest.raises(ValueError, match="validation set is too small"):
        small(DEQClassifier, early_stopping=True, validation_fraction=0.01).fit(X[:30], y[:30])


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_probabilities_are_never_nan(cls, blobs):
    X, y = blobs
    for labels in (y, (y > 0).astype(int)):
        est = small(cls).fit(X, labels)
        for scale in (1.0, 1e3, 1e6):
            try:
                proba = est.predict_proba(X * scale)
            except ValueError as exc:  # allowed: a clear error, never NaN
                assert "non-finite" in str(exc) or "sigma_a2" in str(exc)
                continue
            assert np.all(np.isfinite(proba))
            np.testing.assert_allclose(proba.sum(axis=1), 1.0)


# ---------------------------------------------------------------------------
# sample and class weights


def _weighted_problem():
    rng = np.random.RandomState(3)
    X, y = make_blobs(n_samples=60, centers=3, n_features=6, cluster_std=3.0, random_state=2)
    w = rng.randint(0, 4, size=len(y))
    w[:3] = 1  # every class keeps a positive weight
    return X, y, w


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_integer_sample_weights_act_as_repeated_rows(cls, dtype):
    X, y, w = _weighted_problem()
    kw = dict(n_hidden=64, max_iter=500, random_state=0, dtype=dtype)
    weighted = cls(**kw).fit(X, y, sample_weight=w)
    repeated = cls(**kw).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    # the input scaling is weighted too
    np.testing.assert_allclose(weighted.input_mean_, repeated.input_mean_, rtol=1e-12)
    assert weighted.input_scale_ == pytest.approx(repeated.input_scale_, rel=1e-12)
    np.testing.assert_allclose(weighted.predict_proba(X), repeated.predict_proba(X), rtol=1e-6, atol=1e-9)
    # ignoring the weights gives a different model: the check can fail
    plain = cls(**kw).fit(X, y)
    assert np.abs(plain.predict_proba(X) - repeated.predict_proba(X)).max() > 1e-3


def test_full_batch_minibatch_training_weights_like_repeated_rows():
    """One minibatch per epoch: the weighted and the repeated problems take the same Adam steps."""
    X, y, w = _weighted_problem()
    kw = dict(
        n_hidden=32,
        solver="adam",
        learning_rate_init=0.05,
        max_iter=15,
        batch_size=10_000,
        random_state=0,
        dtype="float64",
        trainable="all",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        weighted = ExplicitClassifier(**kw).fit(X, y, sample_weight=w)
        repeated = ExplicitClassifier(**kw).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    np.testing.assert_allclose(
        [h["train_loss"] for h in weighted.history_], [h["train_loss"] for h in repeated.history_], rtol=1e-9
    )
    np.testing.assert_allclose(weighted.predict_proba(X), repeated.predict_proba(X), rtol=1e-7, atol=1e-10)


def test_weighted_minibatches_match_repeated_rows_in_expectation():
    """Several minibatches per epoch: different steps, the same problem (the loss of each fit on the other's data)."""
    X, y, w = _weighted_problem()
    kw = dict(n_hidden=64, solver="adam", learning_rate_init=0.02, max_iter=300, batch_size=16, random_state=0)
    weighted = MatchedExplicitClassifier(**kw).fit(X, y, sample_weight=w)
    repeated = MatchedExplicitClassifier(**kw).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    plain = MatchedExplicitClassifier(**kw).fit(X, y)
    pw, pr, pp = (m.predict_proba(X) for m in (weighted, repeated, plain))
    gap = np.abs(pw - pr).max()
    assert gap < 0.05
    assert np.abs(pp - pr).max() > 2 * gap  # ignoring the weights is clearly worse


def test_zero_weights_remove_samples_and_all_zero_or_one_class_is_an_error():
    X, y, w = _weighted_problem()
    keep = w > 0
    a = small(DEQClassifier, max_iter=300).fit(X, y, sample_weight=keep.astype(float))
    b = small(DEQClassifier, max_iter=300).fit(X[keep], y[keep])
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="non-zero"):
        small(DEQClassifier).fit(X, y, sample_weight=np.zeros(len(y)))
    with pytest.raises(ValueError, match="at least 2 classes with positive sample_weight"):
        small(DEQClassifier).fit(X, y, sample_weight=(y == 1).astype(float))
    with pytest.raises(ValueError, match="Negative values in data passed to `sample_weight`"):
        small(DEQClassifier).fit(X, y, sample_weight=-np.ones(len(y)))
    with pytest.raises(ValueError, match=r"shape|samples"):
        small(DEQClassifier).fit(X, y, sample_weight=np.ones(len(y) + 1))


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_class_weight_balanced_is_the_sample_weight_of_the_class_frequencies(cls):
    from sklearn.utils.class_weight import compute_class_weight

    X, y = make_blobs(n_samples=[120, 40, 15], n_features=4, cluster_std=6.0, random_state=0)
    balanced = cls(n_hidden=32, max_iter=400, random_state=0, class_weight="balanced").fit(X, y)
    per_class = compute_class_weight("balanced", classes=np.unique(y), y=y)
    as_dict = cls(n_hidden=32, max_iter=400, random_state=0, class_weight=dict(enumerate(per_class))).fit(X, y)
    np.testing.assert_allclose(balanced.predict_proba(X), as_dict.predict_proba(X), rtol=1e-9)
    # class weights act in the loss only: the input scaling stays unweighted
    as_sw = cls(n_hidden=32, max_iter=400, random_state=0).fit(X, y, sample_weight=per_class[y])
    plain = cls(n_hidden=32, max_iter=400, random_state=0).fit(X, y)
    np.testing.assert_allclose(balanced.input_mean_, plain.input_mean_)
    assert not np.allclose(as_sw.input_mean_, plain.input_mean_)
    # balancing raises the recall of the rare class
    rare = y == 2
    assert (balanced.predict(X)[rare] == 2).mean() > (plain.predict(X)[rare] == 2).mean()


def test_class_weight_multiplies_sample_weight_and_rejects_unknown_labels(monkeypatch):
    import sk_deq.estimators._base as base

    X, y, w = _weighted_problem()
    seen = []
    real_train = base.train_readout

    def spy(*args, sample_weight=None, **kwargs):
        seen.append(sample_weight)
        return real_train(*args, sample_weight=sample_weight, **kwargs)

    monkeypatch.setattr(base, "train_readout", spy)
    cw = {0: 3.0, 2: 0.5}  # class 1 keeps weight 1
    small(DEQClassifier, class_weight=cw).fit(X, y, sample_weight=w)
    expected = w * np.array([3.0, 1.0, 0.5])[y]  # up to a common factor (weights are rescaled by a power of two)
    np.testing.assert_allclose(seen[-1] / seen[-1].max(), expected / expected.max())
    small(DEQClassifier).fit(X, y)
    assert seen[-1] is None  # no weights: the unweighted fast path
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"not in class_weight|classes"):
        small(DEQClassifier, class_weight={7: 2.0}).fit(X, y)


# -- properties (hypothesis) ---------------------------------------------------------------------------------------


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
