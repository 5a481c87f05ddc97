"""Cross-validated comparisons (:func:`sk_deq.model_selection.compare_estimators`) and their figure."""

import json
import math
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.datasets import load_diabetes, load_iris
from sklearn.dummy import DummyClassifier, DummyRegressor
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import make_scorer, mean_absolute_error
from sklearn.naive_bayes import GaussianNB
from sklearn.model_selection import KFold, RepeatedStratifiedKFold, ShuffleSplit, StratifiedKFold
from sklearn.tree import DecisionTreeClassifier

from sk_deq.model_selection import (
    ComparisonResult,
    compare_estimators,
    corrected_resampled_ttest,
)


@pytest.fixture(scope="module")
def iris():
    return load_iris(return_X_y=True)


class _FoldRecorder(ClassifierMixin, BaseEstimator):
    """Predicts the training majority class; its score is a fingerprint of the training indices it saw."""

    def __init__(self, tag=0, random_state=None):
        self.tag = tag
        self.random_state = random_state

    def fit(self, X, y):
        self.classes_, counts = np.unique(y, return_counts=True)
        self.majority_ = self.classes_[np.argmax(counts)]
        # column 0 of X holds the sample's index: the sum identifies the training set
        self.fingerprint_ = float(np.sum(X[:, 0] ** 2))
        return self

    def predict(self, X):
        return np.full(len(X), self.majority_)

    def score(self, X, y):
        return self.fingerprint_ + float(np.sum(X[:, 0])) * 1e-9


# ---------------------------------------------------------------------------
# compare_estimators


def test_every_estimator_sees_the_same_folds(iris):
    X, y = iris
    X = np.column_stack([np.arange(len(y)), X])
    cv = RepeatedStratifiedKFold(n_splits=3, n_repeats=2, random_state=0)
    res = compare_estimators({"a": _FoldRecorder(0), "b": _FoldRecorder(1), "c": _FoldRecorder(2)}, X, y, cv=cv)
    assert res.scores.shape == (3, 6)
    np.testing.assert_array_equal(res.scores[0], res.scores[1])
    np.testing.assert_array_equal(res.scores[0], res.scores[2])
    expected = [np.sum(X[tr, 0] ** 2) + np.sum(X[te, 0]) * 1e-9 for tr, te in cv.split(X, y)]
    np.testing.assert_allclose(res.scores[0], expected, rtol=1e-15)
    assert list(res.n_train) == [100] * 6 and list(res.n_test) == [50] * 6
    # identical scores: every test says so
    assert res.test("a", "b").pvalue == 1.0


def test_table_and_per_fold_arrays(iris):
    X, y = iris
    ests = [("logistic", LogisticRegression(max_iter=500)), ("tree", DecisionTreeClassifier(random_state=0))]
    ests.append(("dummy", DummyClassifier()))
    res = compare_estimators(ests, X, y, cv=StratifiedKFold(5, shuffle=True, random_state=0), scoring="accuracy")
    assert isinstance(res, ComparisonResult)
    assert res.names == ["logistic", "tree", "dummy"] and res.n_folds == 5 and res.scoring == "accuracy"
    for arr in (res.scores, res.fit_times, res.score_times):
        assert arr.shape == (3, 5)
    assert np.all(res.fit_times > 0) and np.all(res.score_times > 0)
    # the scores are those of fitting each estimator by hand on each fold
    for j, (tr, te) in enumerate(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y)):
        tree = DecisionTreeClassifier(random_state=0).fit(X[tr], y[tr])
        assert res.scores[1, j] == pytest.approx(tree.score(X[te], y[te]))
    assert list(res.pairwise) == [("logistic", "tree"), ("logistic", "dummy"), ("tree", "dummy")]
    t = res.test("dummy", "logistic")
    assert t.mean_difference == pytest.approx(np.mean(res.scores[2] - res.scores[0]))
    assert t.pvalue == pytest.approx(corrected_resampled_ttest(res.scores[2], res.scores[0], 120, 30).pvalue)
    assert t.pvalue < 0.05
    table = str(res)
    assert table == res.format_table()
    assert "accuracy over 5 fold(s) of StratifiedKFold" in table and "120 train / 30 test" in table
    for row in res.summary():
        assert f"{row['score_mean']:.4f} ± {row['score_std']:.4f}" in table
    assert "Per-fold scores:" in table and "Nadeau & Bengio" in table and "significant" in table
    assert "logistic - dummy" in table
    assert "Per-fold" not in res.format_table(per_fold=False)
    md = res.to_markdown()
    assert md.startswith("| estimator | accuracy (mean ± std, 5 folds) |") and "| logistic - dummy |" in md
    data = json.loads(json.dumps(res.to_dict()))
    assert data["scores"] == res.scores.tolist() and data["n_train"] == [120] * 5
    assert [(p["a"], p["b"]) for p in data["pairwise"]] == list(res.pairwise)
    assert data["pairwise"][1]["significant"] is True
    assert data["summary"][0]["scores"] == res.scores[0].tolist()
    with pytest.raises(KeyError, match="no estimator named 'svm'"):
        res.test("svm", "tree")
    with pytest.raises(KeyError, match="twice"):
        res.test("tree", "tree")


def test_parallel_equals_sequential(iris):
    X, y = iris
    ests = {"nb": GaussianNB(), "tree": DecisionTreeClassifier(random_state=0)}
    seq = compare_estimators(ests, X, y, cv=4)
    par = compare_estimators(ests, X, y, cv=4, n_jobs=2)
    np.testing.assert_array_equal(seq.scores, par.scores)
    assert seq.test("nb", "tree") == par.test("nb", "tree")


def test_scoring_strings_and_callables_on_regressors():
    X, y = load_diabetes(return_X_y=True)
    ests = [("ridge", Ridge()), ("dummy", DummyRegressor())]
    by_name = compare_estimators(ests, X, y, cv=KFold(4), scoring="neg_mean_absolute_error")
    by_scorer = compare_estimators(
        ests, X, y, cv=KFold(4), scoring=make_scorer(mean_absolute_error, greater_is_better=False)
    )
    np.testing.assert_allclose(by_name.scores, by_scorer.scores)
    assert by_scorer.scoring == "mean_absolute_error"

    def mae(est, X, y):
        return -mean_absolute_error(y, est.predict(X))

    by_callable = compare_estimators(ests, X, y, cv=KFold(4), scoring=mae)
    np.testing.assert_allclose(by_name.scores, by_callable.scores)
    assert by_callable.scoring == "mae"
    # None: the regressors' own score, R^2
    own = compare_estimators(ests, X, y, cv=KFold(4))
    assert own.scoring == "score" and np.all(np.abs(own.scores[1]) < 0.2) and np.all(own.scores[0] > 0.2)
    assert own.test("ridge", "dummy").significant()
    # an int cv is a plain KFold for regressors
    assert "KFold" in own.cv


def test_shuffle_split_sizes_and_a_single_split(iris):
    X, y = iris
    ests = {"nb": GaussianNB(), "dummy": DummyClassifier()}
    res = compare_estimators(ests, X, y, cv=ShuffleSplit(6, test_size=0.2, random_state=0))
    assert list(res.n_test) == [30] * 6 and res.test("nb", "dummy").test_train_ratio == pytest.approx(0.25)
    with pytest.warns(UserWarning, match="single split"):
        one = compare_estimators(ests, X, y, cv=ShuffleSplit(1, random_state=0))
    assert one.pairwise == {} and "No paired tests" in str(one)
    with pytest.raises(KeyError, match="at least two"):
        one.test("nb", "dummy")
    # explicit splits
    splits = list(KFold(3, shuffle=True, random_state=0).split(X))
    given = compare_estimators(ests, X, y, cv=splits)
    assert given.cv == "3 given splits" and given.n_folds == 3


def test_fold_seed_reseeds_every_fold(iris):
    X, y = iris
    X = np.column_stack([np.arange(len(y)), X])

    class Seeds(_FoldRecorder):
        def fit(self, X, y):
            super().fit(X, y)
            self.fingerprint_ = float(self.random_state)
            return self

    res = compare_estimators({"a": Seeds(), "b": Seeds()}, X, y, cv=3, fold_seed=10)
    assert res.scores[0].round().tolist() == [10, 11, 12] == res.scores[1].round().tolist()


def test_warnings_come_back_with_their_category(iris):
    from sklearn.exceptions import ConvergenceWarning

    X, y = iris
    with pytest.warns(ConvergenceWarning, match=r"slow \(fold 0\)"):
        res = compare_estimators({"slow": LogisticRegression(max_iter=2), "dummy": DummyClassifier()}, X, y, cv=3)
    assert res.warnings[0][0] and res.warnings[0][0][0].startswith("ConvergenceWarning: ")
    assert res.warnings[1] == [[], [], []]


def test_error_score(iris):
    X, y = iris

    class Broken(DummyClassifier):
        def fit(self, X, y):
            raise RuntimeError("no fit today")

    ests = {"dummy": DummyClassifier(), "broken": Broken()}
    with pytest.raises(RuntimeError, match="no fit today"):
        compare_estimators(ests, X, y, cv=3)
    from sklearn.exceptions import FitFailedWarning

    with pytest.warns(FitFailedWarning, match="no fit today"):
        res = compare_estimators(ests, X, y, cv=3, error_score=np.nan)
    assert np.all(np.isnan(res.scores[1])) and math.isnan(res.test("dummy", "broken").pvalue)
    table = str(res)
    assert "all 3 folds failed" in table and "undefined" in table and "not significant" not in table
    assert "nan ± nan" not in table and "nan ± nan" not in res.to_markdown()
    assert json.loads(res.to_json())["pairwise"][0]["significant"] is None


class _FailsOn(DummyClassifier):
    """Fails when column 0 (the row index) of its training set starts at ``first`` and row ``at`` holds ``value``."""

    def __init__(self, first=0, at=0, value=0, strategy="prior", random_state=None):
        super().__init__(strategy=strategy, random_state=random_state)
        self.first, self.at, self.value = first, at, value

    def fit(self, X, y, sample_weight=None):
        if X[0, 0] == self.first and X[self.at, 0] == self.value:
            raise RuntimeError(f"the fold from row {self.first} broke")
        return super().fit(X, y, sample_weight=sample_weight)


def test_a_failed_fold_is_left_out_of_the_means_and_the_test():
    from sklearn.exceptions import FitFailedWarning

    rng = np.random.RandomState(0)
    X = np.column_stack([np.arange(200), rng.randn(200, 2)])
    y = (X[:, 1] + 0.5 * rng.randn(200) > 0).astype(int)
    # fold 0 of KFold(4) trains on rows 50-199
    ests = {"lr": LogisticRegression(), "flaky": _FailsOn(50, 0, 50, strategy="stratified", random_state=0)}
    with pytest.warns(FitFailedWarning, match="the fold from row 50 broke"):
        res = compare_estimators(ests, X, y, cv=KFold(4), error_score=np.nan, scoring="accuracy")
    assert res.failed.tolist() == [[False] * 4, [True, False, False, False]]
    expected = corrected_resampled_ttest(res.scores[0, 1:], res.scores[1, 1:], 150, 50)
    assert res.test("lr", "flaky") == expected and expected.df == 2 and math.isfinite(expected.pvalue)
    row = res.summary()[1]
    assert row["n_failed"] == 1 and row["score_mean"] == pytest.approx(np.mean(res.scores[1, 1:]))
    table = str(res)
    assert "nan" not in table and "(1 of 4 failed)" in table and "flaky on 1 of 4" in table
    assert "  flaky     failed " in table
    # a number as error_score is left out too
    with pytest.warns(FitFailedWarning):
        zero = compare_estimators(ests, X, y, cv=KFold(4), error_score=0.0, scoring="accuracy")
    assert zero.test("lr", "flaky") == expected


def test_a_pair_with_one_common_fold_has_no_verdict():
    from sklearn.exceptions import FitFailedWarning

    X = np.column_stack([np.arange(150), np.random.RandomState(1).randn(150)])
    y = np.tile([0, 1], 75)
    # KFold(3): fold 0 trains on rows 50-149, fold 1 on 0-49 and 100-149, fold 2 on 0-99
    ests = {"a": _FailsOn(50, 0, 50), "b": _FailsOn(0, 50, 100)}
    with pytest.warns(FitFailedWarning):
        res = compare_estimators(ests, X, y, cv=KFold(3), error_score=np.nan, scoring="accuracy")
    assert res.failed.tolist() == [[True, False, False], [False, True, False]]
    test = res.test("a", "b")
    assert test.n_folds == 1 and math.isnan(test.pvalue)
    assert "undefined" in str(res) and "not significant" not in str(res)


def test_default_scores_of_a_classifier_and_a_regressor_are_not_compared(iris):
    X, y = iris
    ests = {"lr": LogisticRegression(max_iter=500), "ridge": Ridge()}
    with pytest.raises(ValueError, match=r"'lr' scores accuracy, 'ridge' scores R\^2.*scoring="):
        compare_estimators(ests, X, y, cv=3)
    assert compare_estimators(ests, X, y, cv=3, scoring="r2").scoring == "r2"


def test_default_scores_compare_within_one_kind(iris):
    from sk_deq import DEQClassifier, DEQRegressor

    X, y = iris
    with pytest.raises(ValueError, match="'deq' scores accuracy, 'ridge' scores R"):
        compare_estimators({"deq": DEQClassifier(), "ridge": Ridge()}, X, y, cv=3)
    with pytest.raises(ValueError, match="'deq' scores R"):
        compare_estimators({"deq": DEQRegressor(), "nb": GaussianNB()}, X, y, cv=3)


def test_per_sample_fit_params_are_indexed_by_fold(iris):
    X, y = iris
    w = np.random.RandomState(0).uniform(0.5, 2.0, len(y))
    ests = {"lr": LogisticRegression(max_iter=500), "nb": GaussianNB()}
    res = compare_estimators(ests, X, y, cv=3, fit_params={"sample_weight": w})
    # the same as fitting each fold with its own rows' weights
    for j, (tr, te) in enumerate(StratifiedKFold(3).split(X, y)):
        fitted = GaussianNB().fit(X[tr], y[tr], sample_weight=w[tr])
        assert res.scores[1, j] == fitted.score(X[te], y[te])
    with pytest.raises(TypeError, match="fit_params must be None or a dict"):
        compare_estimators(ests, X, y, cv=3, fit_params=[("sample_weight", w)])


@pytest.mark.parametrize("seed", [-1, 2**32 - 2, "0", 1.0, True])
def test_bad_fold_seed_is_named(iris, seed):
    X, y = iris
    with pytest.raises(ValueError, match=r"^fold_seed must be"):
        compare_estimators({"d": DummyClassifier()}, X, y, cv=3, fold_seed=seed)
    assert compare_estimators({"d": DummyClassifier()}, X, y, cv=3, fold_seed=2**32 - 3).n_folds == 3


@pytest.mark.parametrize(
    "estimators,kwargs,error,message",
    [
        ({}, {}, ValueError, "estimators is empty"),
        ([], {}, ValueError, "estimators is empty"),
        ([("a", DummyClassifier()), ("a", DummyClassifier())], {}, ValueError, "unique, got 'a'"),
        ({"a": "not an estimator"}, {}, TypeError, "'a' is not a scikit-learn estimator"),
        ({"a": DummyClassifier}, {}, TypeError, "'a' is not a scikit-learn estimator"),
        ([DummyClassifier()], {}, TypeError, "list of \\(name, estimator\\) pairs"),
        (DummyClassifier(), {}, TypeError, "dict of name -> estimator"),
        ([(3, DummyClassifier())], {}, TypeError, "names must be non-empty strings"),
        ({"a": DummyClassifier()}, {"scoring": ["accuracy", "f1"]}, ValueError, "one metric"),
        ({"a": DummyClassifier()}, {"alpha": 1.5}, ValueError, "alpha must be a number in"),
        ({"a": DummyClassifier()}, {"fold_seed": 1.5}, ValueError, "fold_seed"),
        ({"a": DummyClassifier()}, {"error_score": "ignore"}, ValueError, "error_score"),
        # a binary metric on 3 classes: its multiclass forms named, before any fit (whatever error_score)
        ({"a": DummyClassifier()}, {"scoring": "roc_auc"}, ValueError, "3 classes: .*'roc_auc_ovr', 'roc_auc_ovo'"),
        ({"a": DummyClassifier()}, {"scoring": "roc_auc", "error_score": 0.0}, ValueError, "scoring='roc_auc_ovr'"),
        ({"a": DummyClassifier()}, {"scoring": "f1"}, ValueError, "'f1_macro', 'f1_micro', 'f1_weighted'"),
    ],
)
def test_bad_inputs(iris, estimators, kwargs, error, message):
    X, y = iris
    with pytest.raises(error, match=message):
        compare_estimators(estimators, X, y, **kwargs)


def test_to_frame_without_pandas_names_it(iris, monkeypatch):
    import sys

    X, y = iris
    res = compare_estimators({"d": DummyClassifier()}, X, y, cv=2)
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="needs pandas"):
        res.to_frame()


def test_deq_estimators_compare_on_the_same_folds(iris):
    """The package's own estimators work in a comparison (tiny widths, so it is quick)."""
    from sk_deq import DEQClassifier, MatchedExplicitClassifier

    X, y = iris
    ests = {
        "DEQ": DEQClassifier(activation="tanh", n_hidden=16, random_state=0),
        "matched": MatchedExplicitClassifier(activation="tanh", n_hidden=16, random_state=0),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = compare_estimators(ests, X, y, cv=3, fold_seed=0)
    assert res.scores.shape == (2, 3) and np.all(res.scores > 0.5)
    assert 0.0 <= res.test("DEQ", "matched").pvalue <= 1.0


# ---------------------------------------------------------------------------
# the figure


@pytest.fixture
def plt():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


def test_plot_paired_scores(plt, iris):
    from sk_deq.plotting import plot_paired_scores

    X, y = iris
    ests = {"nb": GaussianNB(), "tree": DecisionTreeClassifier(random_state=0)}
    ests["dummy"] = DummyClassifier()
    res = compare_estimators(ests, X, y, cv=4)
    fig = plot_paired_scores(res, title="iris")
    ax = fig.axes[0]
    folds = [line for line in ax.lines if line.get_color() == "0.55"]
    assert len(folds) == 4
    for j, line in enumerate(folds):
        assert list(line.get_xdata()) == [0, 1, 2]
        np.testing.assert_allclose(line.get_ydata(), res.scores[:, j])
    means = [line for line in ax.lines if line.get_color() == "black" and line.get_marker() == "D"]
    np.testing.assert_allclose(means[0].get_ydata(), res.scores.mean(axis=1))
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == 2  # adjacent pairs
    p = res.test("tree", "dummy").pvalue
    assert ("p < 0.001" if p < 0.001 else f"p = {p:.3f}") in texts
    assert [t.get_text() for t in ax.get_xticklabels()] == res.names
    assert ax.get_title() == "iris"
    # from the JSON, every pair, into given axes
    _, ax2 = plt.subplots()
    fig2 = plot_paired_scores(json.loads(res.to_json()), ax=ax2, annotate="all")
    assert fig2 is ax2.figure and len(ax2.texts) == 3
    _, ax3 = plt.subplots()
    plot_paired_scores(res, ax=ax3, annotate=[("dummy", "nb")])
    assert len(ax3.texts) == 1
    _, ax4 = plt.subplots()
    plot_paired_scores(res, ax=ax4, annotate=None)
    assert len(ax4.texts) == 0
    with pytest.raises(ValueError, match="not a pair"):
        plot_paired_scores(res, annotate=[("dummy", "svm")])
    with pytest.raises(ValueError, match="annotate must be"):
        plot_paired_scores(res, annotate="some")
    with pytest.raises(TypeError, match="ComparisonResult"):
        plot_paired_scores([1, 2])


def test_plot_paired_scores_names_the_plot_extra_without_matplotlib(monkeypatch, iris):
    import sys

    from sk_deq.plotting import plot_paired_scores

    X, y = iris
    res = compare_estimators({"d": DummyClassifier(), "e": DummyClassifier()}, X, y, cv=2)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"sk_deq\[plot\]"):
        plot_paired_scores(res)


def test_to_frame_holds_every_fold_of_every_estimator(iris):
    pd = pytest.importorskip("pandas")
    X, y = iris
    res = compare_estimators({"d": DummyClassifier(), "e": DummyClassifier(strategy="uniform")}, X, y, cv=3)
    frame = res.to_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 6
    assert list(frame.columns) == ["estimator", "fold", "score", "fit_time", "score_time", "n_train", "n_test"]
    np.testing.assert_array_equal(frame["score"].to_numpy().reshape(2, 3), res.scores)
    assert (frame["n_train"] + frame["n_test"] == len(y)).all()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            {"cv": [(np.arange(10), np.arange(140, 160))] * 2},
            r"cv split 0: the test set holds indices outside \[0, 150\)",
        ),
        ({"cv": [(np.arange(100), np.array([], dtype=int))] * 2}, "cv split 0: the test set must be a non-empty"),
        # a boolean mask would have been counted as n_samples training rows
        ({"cv": [(np.arange(150) < 100, np.arange(100, 150))] * 2}, "training set must be a non-empty 1-D array"),
        ({"verbose": "x"}, "verbose must be a non-negative integer"),
        ({"y": None}, "y is None, but 'a' need targets"),
    ],
)
def test_bad_splits_verbose_and_missing_targets_are_named(iris, kwargs, message):
    X, y = iris
    kwargs = {"y": y, "cv": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        compare_estimators({"a": DummyClassifier()}, X, **kwargs)
