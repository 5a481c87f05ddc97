"""ImplicitCKRidge and ImplicitCKRidgeClassifier against scikit-learn's KernelRidge on the transformer's kernel."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.kernel_ridge import KernelRidge
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import sk_deq.kernel_ridge._plan as plan_module
from sk_deq import ImplicitCKRidge, ImplicitCKRidgeClassifier, ImplicitCKTransformer
from sk_deq.kernels import ImplicitKernelEngine


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X[:300], y[:300], X[300:]


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:600], y[:600], X[600:900], y[600:900]


def _reference(X, Y, X_test, alpha=1.0, sample_weight=None, **kw):
    model = make_pipeline(ImplicitCKTransformer(**kw), KernelRidge(alpha=alpha, kernel="precomputed"))
    return model.fit(X, Y, kernelridge__sample_weight=sample_weight).predict(X_test)


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_float64_storage_is_kernel_ridge_to_1e_8(diabetes, solver):
    X, y, X_test = diabetes
    ref = _reference(X, y, X_test, alpha=0.1)
    model = ImplicitCKRidge(alpha=0.1, solver=solver, storage="float64", tol=1e-13, random_state=0).fit(X, y)
    assert model.solver_ == solver and model.fit_plan_.dtype == np.float64
    assert _rel(model.predict(X_test), ref) <= 1e-8
    assert model.predict(X_test).shape == (len(X_test),) and model.dual_coef_.shape == (len(X),)
    if solver == "cg":
        assert model.n_iter_ >= 1 and model.residual_ <= 1e-13
    else:
        assert model.n_iter_ == 1 and model.residual_ is None


@pytest.mark.parametrize("alpha", [1.0, 0.01])
@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_float32_storage_is_kernel_ridge_to_its_bound(diabetes, solver, alpha):
    """The documented bound of float32 storage: predictions within u ||K||_2 / alpha of float64's (u = 2**-24)."""
    X, y, X_test = diabetes
    ref = _reference(X, y, X_test, alpha=alpha)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # float32 cannot resolve tol=1e-7: the bound still holds
        model = ImplicitCKRidge(alpha=alpha, solver=solver, storage="float32", tol=1e-7).fit(X, y)
    assert model.fit_plan_.dtype == np.float32
    norm = np.linalg.eigvalsh(ImplicitCKTransformer().fit_transform(X))[-1]
    assert 0 < _rel(model.predict(X_test), ref) <= 2.0**-24 * norm / alpha


def test_several_targets_in_one_solve(diabetes):
    X, y, X_test = diabetes
    Y = np.column_stack([y, -2 * y + 1, np.sin(y)])
    ref = _reference(X, Y, X_test)
    for solver in ("cholesky", "cg"):
        got = ImplicitCKRidge(solver=solver, tol=1e-12).fit(X, Y).predict(X_test)
        assert got.shape == (len(X_test), 3) and _rel(got, ref) <= 1e-8


def test_sample_weights_are_kernel_ridge_s(diabetes):
    """KernelRidge's weighted fit on the kernel at the weighted data scale (repeating a sample is weighting it)."""
    X, y, X_test = diabetes
    w = np.random.default_rng(0).uniform(0, 3, len(X))
    for solver in ("cholesky", "cg"):
        model = ImplicitCKRidge(solver=solver, tol=1e-12, input_scaling="none").fit(X, y, sample_weight=w)
        assert model.tau0_ == pytest.approx(np.sqrt(np.average((X**2).sum(axis=1), weights=w)), rel=1e-12)
        eng = ImplicitKernelEngine("relu", 0.2, model.tau0_, bias_variance=1.0)
        S = eng.prepare(X)
        ref = (
            KernelRidge(kernel="precomputed")
            .fit(eng.kernel(S), y, sample_weight=w)
            .predict(eng.kernel(eng.prepare(X_test), S))
        )
        assert _rel(model.predict(X_test), ref) <= 1e-8


@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
def test_every_kernel_and_activation(diabetes, kernel):
    X, y, X_test = diabetes
    for act in ("relu", "tanh"):
        ref = _reference(X, y, X_test, activation=act, kernel=kernel)
        got = ImplicitCKRidge(act, kernel=kernel).fit(X, y).predict(X_test)
        assert _rel(got, ref) <= 1e-8


def test_the_classifier_is_kernel_ridge_on_plus_minus_one_targets(digits):
    X, y, X_test, y_test = digits
    Y = -np.ones((len(y), 10))
    Y[np.arange(len(y)), y] = 1
    ref = _reference(X, Y, X_test, alpha=0.01)
    clf = ImplicitCKRidgeClassifier(alpha=0.01).fit(X, y)
    assert _rel(clf.decision_function(X_test), ref) <= 1e-8
    np.testing.assert_array_equal(clf.predict(X_test), ref.argmax(axis=1))
    assert clf.score(X_test, y_test) > 0.9


def test_two_classes_have_one_score_column_and_any_labels(digits):
    X, y, X_test, _ = digits
    keep = np.isin(y, [3, 8])
    labels = np.where(y[keep] == 3, "three", "eight")
    clf = ImplicitCKRidgeClassifier(alpha=0.01).fit(X[keep], labels)
    ref = _reference(X[keep], np.where(labels == "three", 1.0, -1.0), X_test, alpha=0.01)  # 'three' sorts second
    assert list(clf.classes_) == ["eight", "three"]
    assert clf.decision_function(X_test).shape == (len(X_test),)
    assert _rel(clf.decision_function(X_test), ref) <= 1e-8
    np.testing.assert_array_equal(clf.predict(X_test), np.where(ref > 0, "three", "eight"))


def test_one_class_is_refused(digits):
    X, _, _, _ = digits
    with pytest.raises(ValueError, match="at least 2 classes"):
        ImplicitCKRidgeClassifier().fit(X[:20], np.zeros(20))


def test_alpha_candidates_are_scored_on_the_held_out_samples(diabetes):
    X, y, _ = diabetes
    alphas = [3.0, 0.3, 0.03, 0.003]
    model = ImplicitCKRidge(alpha=alphas, tol=1e-12, validation_fraction=0.25, random_state=0).fit(X, y)
    val = model.validation_indices_
    train = np.setdiff1d(np.arange(len(X)), val)
    assert len(val) == 75
    # each candidate's score is that of KernelRidge fitted on the other samples, on the same kernel
    transformer = ImplicitCKTransformer().fit(X)
    K = transformer.transform(X)
    expected = [
        r2_score(
            y[val],
            KernelRidge(alpha=a, kernel="precomputed")
            .fit(K[np.ix_(train, train)], y[train])
            .predict(K[np.ix_(val, train)]),
        )
        for a in alphas
    ]
    np.testing.assert_allclose(model.alpha_scores_, expected, rtol=1e-6)
    assert model.alpha_ == alphas[int(np.argmax(expected))]
    # then all samples are fitted with the best
    assert _rel(model.predict(X), _reference(X, y, X, alpha=model.alpha_)) <= 1e-8


def test_alpha_candidates_of_the_classifier_score_accuracy(digits):
    X, y, X_test, y_test = digits
    clf = ImplicitCKRidgeClassifier(alpha=(1.0, 0.01), random_state=0).fit(X, y)
    assert clf.alpha_ in (1.0, 0.01) and np.all((0 <= clf.alpha_scores_) & (clf.alpha_scores_ <= 1))
    assert clf.score(X_test, y_test) > 0.9


@pytest.mark.parametrize("alpha", [-1.0, 0.0, np.nan, [], [1.0, -0.5], [[1.0]]])
def test_bad_alphas_are_refused(diabetes, alpha):
    X, y, _ = diabetes
    with pytest.raises(ValueError, match="alpha"):
        ImplicitCKRidge(alpha=alpha).fit(X[:20], y[:20])


def test_a_held_out_split_needs_samples(diabetes):
    X, y, _ = diabetes
    with pytest.raises(ValueError, match="validation_fraction"):
        ImplicitCKRidge(alpha=[1.0, 0.1], validation_fraction=0.01).fit(X[:10], y[:10])


def test_the_fit_says_what_it_needs_and_refuses_what_does_not_fit(diabetes, monkeypatch, capsys):
    X, y, _ = diabetes
    plan = plan_module.plan_fit(300, 10, 1, available=2**40)
    assert plan.dtype == np.float64 and plan.total > plan.store > 0
    # float64 does not fit, float32 does: 'auto' stores float32
    f32 = plan_module.plan_fit(300, 10, 1, storage="float32", available=2**40)
    auto = plan_module.plan_fit(300, 10, 1, available=(f32.total + plan.total) // 2)
    assert auto.dtype == np.float32
    monkeypatch.setattr(plan_module, "available_memory_bytes", lambda: f32.total // 2)
    with pytest.raises(MemoryError, match=r"needs .* GiB.*float32.*Nystroem.*Dask"):
        ImplicitCKRidge().fit(X, y)
    monkeypatch.undo()
    ImplicitCKRidge(verbose=1, solver="cg").fit(X, y)
    captured = capsys.readouterr()
    assert "A fit on 300 samples needs" in captured.out
    assert "kernel tiles" in captured.err and "residual" in captured.err


def test_too_few_iterations_warn(diabetes):
    X, y, _ = diabetes
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        model = ImplicitCKRidge(alpha=1e-4, solver="cg", max_iter=2, preconditioner_rank=0).fit(X, y)
    assert model.n_iter_ == 2 and model.residual_ > model.tol


def test_pickled_model_predicts_the_same(diabetes):
    X, y, X_test = diabetes
    model = ImplicitCKRidge("tanh").fit(X, y)
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.predict(X_test), model.predict(X_test))


def test_prediction_streams_the_test_kernel_in_blocks(diabetes, monkeypatch):
    X, y, X_test = diabetes
    model = ImplicitCKRidge().fit(X, y)
    whole = model.predict(X_test)
    monkeypatch.setattr(type(model), "_rows_per_block", lambda self: 7)
    np.testing.assert_allclose(model.predict(X_test), whole, rtol=1e-12)


def test_pipeline_and_grid_search(diabetes, digits):
    X, y, X_test = diabetes
    pipe = make_pipeline(StandardScaler(), ImplicitCKRidge())
    search = GridSearchCV(pipe, {"implicitckridge__sigma_a2": [0.1, 0.3], "implicitckridge__alpha": [1.0, 0.1]}, cv=3)
    search.fit(X, y)
    assert search.best_estimator_.predict(X_test).shape == (len(X_test),)
    Xd, yd, _, _ = digits
    grid = GridSearchCV(ImplicitCKRidgeClassifier(), {"kernel": ["ck", "ntk"]}, cv=2).fit(Xd[:200], yd[:200])
    assert 0 < grid.best_score_ <= 1


@parametrize_with_checks(
    [ImplicitCKRidge(), ImplicitCKRidgeClassifier(), ImplicitCKRidge(solver="cg", alpha=[1.0, 0.1])]
)
def test_scikit_learn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def test_candidates_no_held_out_score_can_rank_take_the_largest(diabetes):
    X, y, _ = diabetes
    with pytest.warns(UserWarning, match="could be scored"):
        model = ImplicitCKRidge(alpha=[0.1, 5.0], validation_fraction=0.2).fit(X[:5], y[:5])  # R² of one sample
    assert model.alpha_ == 5.0 and np.isnan(model.alpha_scores_).all()


def test_the_transformer_s_refusal_of_a_square_kernel_names_the_ridge(monkeypatch):
    import sk_deq._runtime as runtime

    monkeypatch.setattr(runtime, "available_memory_bytes", lambda: 10_000)
    X = np.random.default_rng(0).standard_normal((100, 3))
    with pytest.raises(MemoryError, match=r"square.*ImplicitCKRidge.*ImplicitCKNystroem"):
        ImplicitCKTransformer().fit_transform(X)
    with pytest.raises(MemoryError, match="fewer samples at a time"):  # rows of a transform can be split
        ImplicitCKTransformer().fit(X[:2]).transform(np.tile(X, (100, 1)))


def test_a_refit_with_one_alpha_keeps_nothing_of_the_candidates(diabetes):
    X, y, _ = diabetes
    model = ImplicitCKRidge(alpha=[1.0, 0.1], random_state=0).fit(X, y)
    assert hasattr(model, "alpha_scores_") and hasattr(model, "validation_indices_")
    model.set_params(alpha=0.5).fit(X, y)
    assert model.alpha_ == 0.5 and not hasattr(model, "alpha_scores_") and not hasattr(model, "validation_indices_")


def test_a_fit_that_fails_leaves_the_estimator_as_it_was(diabetes, monkeypatch):
    import sk_deq.kernel_ridge._base as base

    X, y, X_test = diabetes
    model = ImplicitCKRidge(alpha=[1.0, 0.1], random_state=0).fit(X, y)
    before = model.predict(X_test)
    state = {k: v for k, v in vars(model).items()}

    def broken(*args, **kwargs):
        raise RuntimeError("solver broke")

    monkeypatch.setattr(base, "solve", broken)
    with pytest.raises(RuntimeError, match="solver broke"):
        model.set_params(alpha=0.5).fit(X[:100], y[:100])
    assert model.alpha_ == state["alpha_"] and model.n_features_in_ == state["n_features_in_"]
    np.testing.assert_array_equal(model.alpha_scores_, state["alpha_scores_"])
    np.testing.assert_array_equal(model.predict(X_test), before)
    fresh = ImplicitCKRidge()
    with pytest.raises(RuntimeError, match="solver broke"):
        fresh.fit(X, y)
    assert not hasattr(fresh, "dual_coef_") and not hasattr(fresh, "fit_plan_")
