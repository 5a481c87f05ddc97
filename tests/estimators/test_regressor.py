"""DEQRegressor, ExplicitRegressor and MatchedExplicitRegressor as scikit-learn estimators."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from sk_deq import (
    DEQClassifier,
    DEQRegressor,
    ExplicitRegressor,
    MatchedExplicitClassifier,
    MatchedExplicitRegressor,
    make_gaussian_mixture,
)
from sk_deq.nn import ReadoutObjective, ridge_readout, train
from sk_deq.nn._fit import score as _score

REGRESSORS = (DEQRegressor, ExplicitRegressor, MatchedExplicitRegressor)


def _small(cls, **kw):
    params = dict(n_hidden=32, random_state=0)
    params.update(kw)
    return cls(**params)


@pytest.fixture(scope="module")
def friedman():
    X, y = make_friedman1(n_samples=300, n_features=6, noise=0.1, random_state=0)
    return X, y


# ---------------------------------------------------------------------------
# scikit-learn's estimator checks: every configuration passes every check


def _check_configs():
    # float32 with the readout trained (the defaults' path) runs the checks in test_checks_at_defaults
    configs = [_small(cls, dtype="float64") for cls in REGRESSORS]
    # trained hidden weights (implicit backward for the DEQ): full-batch L-BFGS, for which
    # integer sample weights are repeated rows exactly (minibatches would only be in expectation)
    full = dict(n_hidden=16, solver="lbfgs", max_iter=15, dtype="float64")
    configs.append(_small(DEQRegressor, trainable="all", **full))
    configs.append(_small(MatchedExplicitRegressor, trainable="hidden", **full))
    return configs


@parametrize_with_checks(_check_configs())
def test_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


# ---------------------------------------------------------------------------
# the readout is the least-squares solution, as Ridge computes it


@pytest.mark.parametrize("cls", REGRESSORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("weighted", [False, True])
def test_readout_is_ridge_on_the_features(cls, weighted, friedman):
    X, y = friedman
    alpha = 1e-3
    w = np.random.default_rng(1).uniform(0.2, 3.0, len(y)) if weighted else None
    reg = _small(cls, n_hidden=64, alpha=alpha, dtype="float64").fit(X, y, sample_weight=w)
    Z = reg.features(X)
    # ours: (1/2n) sum w'_i r_i^2 + alpha/2 ||W||^2 with w' = w n / sum(w); Ridge: sum w_i r_i^2 + a ||W||^2
    total = len(y) if w is None else w.sum()
    ref = Ridge(alpha=alpha * total).fit(Z, y, sample_weight=w)
    np.testing.assert_allclose(reg.predict(X), ref.predict(Z), rtol=1e-8, atol=1e-8 * np.abs(y).max())
    assert reg.score(X, y) == pytest.approx(r2_score(y, ref.predict(Z)), abs=1e-9)


def test_lbfgs_and_closed_form_reach_the_same_readout(friedman):
    X, y = friedman
    closed = _small(DEQRegressor, n_hidden=64, alpha=1e-3, dtype="float64").fit(X, y)
    lbfgs = _small(DEQRegressor, n_hidden=64, alpha=1e-3, dtype="float64", solver="lbfgs", tol=1e-10).fit(X, y)
    assert closed.n_iter_ == 1 and lbfgs.n_iter_ > 1
    # the same minimum; the iterate stops where the loss stalls (L-BFGS-B's ftol), so the
    # weights agree to the square root of that precision along the flat directions (relative to
    # the predictions' scale: a prediction near zero agrees absolutely, not relatively)
    assert lbfgs.best_loss_ == pytest.approx(closed.best_loss_, rel=1e-7)
    assert lbfgs.best_loss_ >= closed.best_loss_ * (1 - 1e-12)
    ref = closed.predict(X)
    np.testing.assert_allclose(lbfgs.predict(X), ref, rtol=2e-3, atol=2e-3 * np.mean(np.abs(ref)))


def test_multi_output_fits_each_column_as_on_its_own(friedman):
    """The squared loss separates by output: a 2-output fit is two 1-output fits."""
    X, y = friedman
    Y = np.column_stack([y, np.sin(X[:, 0]) * 100.0 + 7.0])
    both = _small(MatchedExplicitRegressor, dtype="float64").fit(X, Y)
    assert both.n_outputs_ == 2 and both.predict(X[:5]).shape == (5, 2)
    for j in range(2):
        one = _small(MatchedExplicitRegressor, dtype="float64").fit(X, Y[:, j])
        assert one.predict(X[:5]).shape == (5,)
        np.testing.assert_allclose(both.predict(X)[:, j], one.predict(X), rtol=1e-9, atol=1e-9)
    column = _small(MatchedExplicitRegressor, dtype="float64").fit(X, y[:, None])
    assert column.predict(X[:5]).shape == (5, 1)  # the shape of y, as Ridge keeps it
    np.testing.assert_allclose(column.predict(X)[:, 0], both.predict(X)[:, 0], rtol=1e-9, atol=1e-9)
    assert both.score(X, Y) == pytest.approx(r2_score(Y, both.predict(X)))


def test_predictions_follow_an_affine_change_of_the_targets(friedman):
    """Fitting ``a y + c`` predicts ``a f(x) + c`` (the targets are standardised internally)."""
    X, y = friedman
    base = _small(ExplicitRegressor, dtype="float64").fit(X, y)
    for a, c in [(1e6, -3e8), (-2.5, 10.0), (1e-6, 1e-3)]:
        moved = _small(ExplicitRegressor, dtype="float64").fit(X, a * y + c)
        np.testing.assert_allclose(moved.predict(X), a * base.predict(X) + c, rtol=1e-9, atol=1e-9 * abs(c))
    assert moved.target_scale_[0] == pytest.approx(1e-6 * y.std())


def test_a_constant_target_is_predicted_exactly(friedman):
    X, _ = friedman
    reg = _small(DEQRegressor).fit(X, np.full(len(X), 4.25))
    assert reg.target_scale_[0] == 1.0
    np.testing.assert_allclose(reg.predict(X), 4.25, atol=1e-12)
    assert reg.score(X, np.full(len(X), 4.25)) == 1.0


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # 40 epochs
def test_trained_hidden_weights_lower_the_training_loss(friedman):
    X, y = friedman
    frozen = _small(DEQRegressor, n_hidden=32, solver="adam", learning_rate_init=0.01, max_iter=40).fit(X, y)
    trained = _small(
        DEQRegressor, n_hidden=32, solver="adam", learning_rate_init=0.01, max_iter=40, trainable="all"
    ).fit(X, y)
    assert trained.fixed_point_info_["adjoint"]["converged"]
    assert trained.history_[-1]["train_loss"] < 0.7 * frozen.history_[-1]["train_loss"]
    assert trained.score(X, y) > frozen.score(X, y)


def test_early_stopping_records_the_validation_r2(friedman):
    X, y = friedman
    reg = _small(DEQRegressor, early_stopping=True, validation_fraction=0.2).fit(X, y)
    scores = [h["valid_score"] for h in reg.history_]
    assert reg.n_iter_ > 1 and all(s is not None for s in scores)
    assert reg.best_validation_score_ == max(scores) or reg.best_validation_score_ in scores
    assert 0.5 < reg.best_validation_score_ <= 1.0


def test_partial_fit_streams_with_running_target_moments(friedman):
    X, y = friedman
    reg = _small(DEQRegressor, learning_rate_init=0.05)
    for _ in range(10):
        for start in range(0, 300, 100):
            reg.partial_fit(X[start : start + 100], y[start : start + 100])
    assert reg.n_iter_ == 30
    # the moments of every target seen (10 passes over the same rows: those of the 300 rows)
    np.testing.assert_allclose(reg.target_mean_, [y[:300].mean()], rtol=1e-12)
    np.testing.assert_allclose(reg.target_scale_, [y[:300].std()], rtol=1e-12)
    assert reg.score(X, y) > 0.5
    with pytest.raises(ValueError, match="2 output"):
        reg.partial_fit(X[:10], np.column_stack([y[:10], y[:10]]))
    with pytest.raises(AttributeError) as info:
        _small(DEQRegressor, solver="lbfgs").partial_fit(X, y)
    assert "full-batch" in str(info.value.__cause__)


def test_partial_fit_target_moments_are_those_of_all_rows_and_keep_predictions(friedman):
    X, y = friedman
    Y = np.column_stack([y, -3 * y + 100])
    w = np.random.RandomState(0).uniform(0, 2, size=len(y))
    reg = _small(ExplicitRegressor, learning_rate_init=0.05)
    for rows in (slice(0, 7), slice(7, 120), slice(120, 121), slice(121, 300)):
        before = reg.predict(X) if hasattr(reg, "module_") else None
        reg.set_params(learning_rate_init=1e-300 if before is not None else 0.05)
        reg.partial_fit(X[rows], Y[rows], sample_weight=w[rows])
        if before is not None:  # moments moved, no training step to speak of: the same predictions
            np.testing.assert_allclose(reg.predict(X), before, rtol=1e-9, atol=1e-9)
    mean = np.average(Y[:300], axis=0, weights=w[:300])
    np.testing.assert_allclose(reg.target_mean_, mean, rtol=1e-12)
    std = np.sqrt(np.average((Y[:300] - mean) ** 2, axis=0, weights=w[:300]))
    np.testing.assert_allclose(reg.target_scale_, std, rtol=1e-12)
    # huge finite targets: the running moments do not overflow
    big = _small(ExplicitRegressor).partial_fit(X[:50], 1e300 * np.sign(y[:50] - 14))
    big.partial_fit(X[50:100], -1e300 * np.ones(50))
    assert np.all(np.isfinite(big.target_mean_)) and np.all(np.isfinite(big.target_scale_))


def test_partial_fit_recovers_from_a_first_chunk_of_constant_targets():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    order = np.random.RandomState(0).permutation(len(y))
    X, y = X[order], y[order]
    X_tr, y_tr, X_te, y_te = X[:350], y[:350], X[350:], y[350:]

    def stream(first):
        reg = ExplicitRegressor(n_hidden=256, random_state=0)
        if first is not None:
            reg.partial_fit(*first)
        for _ in range(5):
            for start in range(0, 350, 50):
                reg.partial_fit(X_tr[start : start + 50], y_tr[start : start + 50])
        return reg

    plain = stream(None)
    constant = stream((X_tr[:50], np.full(50, 150.0)))  # target_scale_ 1 after this chunk
    np.testing.assert_allclose(constant.target_scale_, [np.std(np.r_[np.full(50, 150.0), np.tile(y_tr, 5)])])
    assert constant.score(X_te, y_te) > plain.score(X_te, y_te) - 0.05  # was -0.28 against 0.69


def test_pickle_and_grid_search(friedman):
    X, y = friedman
    reg = _small(MatchedExplicitRegressor).fit(X, y)
    again = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(again.predict(X), reg.predict(X))
    search = GridSearchCV(
        make_pipeline(StandardScaler(), _small(DEQRegressor)),
        {"deqregressor__alpha": [1e-4, 1e-1]},
        cv=3,
    ).fit(X, y)
    assert search.best_score_ > 0.5


def test_bad_targets_are_named(friedman):
    X, y = friedman
    reg = _small(DEQRegressor)
    with pytest.raises(ValueError, match="NaN"):
        reg.fit(X, np.where(np.arange(len(y)) == 3, np.nan, y))
    with pytest.raises(ValueError, match="infinity"):
        reg.fit(X, np.where(np.arange(len(y)) == 3, np.inf, y))
    with pytest.raises(ValueError):
        reg.fit(X, np.array(["a"] * len(y)))
    with pytest.raises(ValueError, match="non-zero"):
        reg.fit(X, y, sample_weight=np.zeros(len(y)))
    with pytest.raises(TypeError, match="class_weight"):
        DEQRegressor(class_weight="balanced")
    assert not hasattr(reg, "predict_proba") and not hasattr(reg, "decision_function")
    warm = _small(DEQRegressor, warm_start=True).fit(X, y)
    with pytest.raises(ValueError, match="2 output") as info:
        warm.fit(X, np.column_stack([y, y]))
    assert "set warm_start=False" in str(info.value)
    # partial_fit ignores warm_start: its advice is to call fit
    with pytest.raises(ValueError, match="2 output") as info:
        _small(DEQRegressor).partial_fit(X, y).partial_fit(X, np.column_stack([y, y]))
    assert "call fit to start afresh" in str(info.value) and "warm_start" not in str(info.value)


# ---------------------------------------------------------------------------
# the torch side: squared loss, its score and the least-squares readout


def test_squared_objective_and_its_gradient_agree_with_autograd():
    g = torch.Generator().manual_seed(0)
    Z = torch.randn(60, 5, dtype=torch.float64, generator=g)
    Y = torch.randn(60, 3, dtype=torch.float64, generator=g)
    w = torch.rand(60, dtype=torch.float64, generator=g) * 2
    w = w * (60 / w.sum())
    obj = ReadoutObjective(Z, Y, 3, alpha=0.3, weight=w, chunk_size=17, loss="squared")
    W = torch.randn(5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, generator=g, requires_grad=True)
    loss, gW, gb = obj(W.detach(), b.detach())
    ref = 0.5 * (w[:, None] * (Z @ W + b - Y) ** 2).sum() / 60 + 0.15 * (W * W).sum()
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-12)
    torch.testing.assert_close(gW, W.grad)
    torch.testing.assert_close(gb, b.grad)
    # the closed form zeroes that gradient and agrees with a least-squares solve of the normal equations
    W_hat, b_hat, loss_hat = ridge_readout(obj)
    _, gW0, gb0 = obj(W_hat, b_hat)
    assert float(gW0.abs().max()) < 1e-10 and float(gb0.abs().max()) < 1e-10
    Z1 = torch.cat([Z, torch.ones(60, 1, dtype=torch.float64)], dim=1)
    P = torch.diag(torch.cat([torch.full((5,), 0.3 * 60), torch.zeros(1)])).to(torch.float64)
    sol = torch.linalg.solve(Z1.T @ (w[:, None] * Z1) + P, Z1.T @ (w[:, None] * Y))
    torch.testing.assert_close(torch.cat([W_hat, b_hat[None]]), sol)
    assert loss_hat == pytest.approx(obj(W_hat, b_hat)[0], rel=1e-12)


def test_validation_score_is_sklearns_r2():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(40, 3))
    P = Y + rng.normal(scale=0.5, size=(40, 3))
    w = rng.uniform(0.1, 2.0, 40)
    got = _score(torch.from_numpy(P), torch.from_numpy(Y), torch.from_numpy(w * 40 / w.sum()), "squared")
    assert got == pytest.approx(r2_score(Y, P, sample_weight=w), rel=1e-12)
    const = np.zeros((40, 1))
    assert _score(torch.from_numpy(const), torch.from_numpy(const), None, "squared") == 1.0
    assert _score(torch.from_numpy(const + 1), torch.from_numpy(const), None, "squared") == 0.0


def test_train_with_squared_loss_fits_a_linear_model():
    torch.manual_seed(0)
    X = torch.randn(200, 4, dtype=torch.float64)
    y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]], dtype=torch.float64) + 0.25
    for optimizer in ("lbfgs", "adam"):
        model = torch.nn.Linear(4, 1, dtype=torch.float64)
        result = train(model, X, y, optimizer=optimizer, loss="squared", max_epochs=300, learning_rate=0.05)
        assert result.best_loss < 1e-4, optimizer
    with pytest.raises(ValueError, match="loss must be one of"):
        train(model, X, y, loss="hinge")


# ---------------------------------------------------------------------------
# the equivalence: on a Gaussian mixture the matched regressor is as close to the DEQ as the classifier


def test_matched_regressor_is_as_close_to_the_deq_as_the_matched_classifier():
    X, labels = make_gaussian_mixture(n_samples=1200, n_features=200, n_classes=2, random_state=0)
    rng = np.random.default_rng(0)
    y = np.where(labels == 1, 1.0, -1.0) + 0.5 * rng.standard_normal(len(labels))
    tr, te = slice(0, 900), slice(900, None)
    kw = dict(n_hidden=512, random_state=0, alpha=1e-3)
    deq = DEQRegressor("tanh", **kw).fit(X[tr], y[tr])
    matched = MatchedExplicitRegressor("tanh", **kw).fit(X[tr], y[tr])
    r2_deq, r2_matched = deq.score(X[te], y[te]), matched.score(X[te], y[te])
    clf_deq = DEQClassifier("tanh", **kw).fit(X[tr], labels[tr]).score(X[te], labels[te])
    clf_matched = MatchedExplicitClassifier("tanh", **kw).fit(X[tr], labels[tr]).score(X[te], labels[te])
    assert r2_deq > 0.5
    assert abs(r2_deq - r2_matched) <= max(0.03, 2 * abs(clf_deq - clf_matched))
    # the predictions themselves agree far better than those of two unrelated models would
    assert np.corrcoef(deq.predict(X[te]), matched.predict(X[te]))[0, 1] > 0.95


def test_lbfgs_backs_off_from_trial_points_where_the_fixed_point_diverges():
    """A line-search trial outside the contraction region is an infinite loss, not an abort."""
    from sk_deq.nn import DEQDivergenceError

    class Fenced(torch.nn.Module):  # diverges where the weight exceeds 1, as a DEQ leaving its contraction region
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))

        def forward(self, x):
            if float(self.w.detach()) > 1.0:
                raise DEQDivergenceError("diverged")
            return x * self.w

    X = torch.linspace(-1, 1, 50, dtype=torch.float64)[:, None]
    y = 3.0 * X  # the unconstrained optimum w = 3 lies outside the region
    model = Fenced()
    result = train(model, X, y, optimizer="lbfgs", loss="squared", max_epochs=50)
    assert 0.5 < float(model.w.detach()) <= 1.0 and np.isfinite(result.best_loss)
    with torch.no_grad():
        model.w.fill_(2.0)  # a divergent starting point is the user's error
    with pytest.raises(DEQDivergenceError):
        train(model, X, y, optimizer="lbfgs", loss="squared", max_epochs=5)


# ---------------------------------------------------------------------------
# targets and weights at the ends of float64


@pytest.mark.parametrize("cls", REGRESSORS)
@pytest.mark.parametrize("factor", [1e-300, 1e200, 1e300])
def test_targets_anywhere_in_float64_give_the_model_in_units(cls, factor, friedman):
    X, y = friedman
    units = _small(cls, n_hidden=16).fit(X, y)
    scaled = _small(cls, n_hidden=16).fit(X, y * factor)  # (y - mean)^2 overflowed (NaN) or underflowed (R² 1)
    np.testing.assert_allclose(scaled.target_scale_ / factor, units.target_scale_, rtol=1e-12)
    np.testing.assert_allclose(scaled.predict(X) / factor, units.predict(X), rtol=1e-6)
    assert scaled.score(X, y * factor) == pytest.approx(units.score(X, y), rel=1e-9)
    assert 0.5 < units.score(X, y) < 1


def test_target_moments_of_constant_and_extreme_columns():
    from sk_deq.estimators._regressor import Moments

    y = np.linspace(-1, 1, 200)
    Y = np.column_stack([np.full(200, 1e308), y * 1.7e308, y * 1e-310, np.full(200, -3.0)])
    m = Moments.of(Y)
    np.testing.assert_allclose(m.mean / [1e308, 1.7e308, 1e-310, 1.0], [1, 0, 0, -3.0], atol=1e-15)
    np.testing.assert_allclose(m.scale(), [1.0, np.std(y) * 1.7e308, np.std(y) * 1e-310, 1.0], rtol=1e-6)
    weighted = Moments.of(Y[:, 1:2], np.r_[np.ones(100), np.zeros(100)])
    alone = Moments.of(Y[:100, 1:2])
    np.testing.assert_allclose(
        [weighted.mean, weighted.scale()], [alone.mean, alone.scale()], rtol=1e-12
    )  # weight 0: absent


def test_target_moments_merge_chunks_weighted_on_different_scales():
    """Chunks whose weights differ by 1e300 merge in proportion to their weights, without overflow."""
    from sk_deq.estimators._regressor import Moments

    rng = np.random.default_rng(0)
    Y, w = rng.normal(size=(300, 2)) * [1.0, 1e200], rng.uniform(0.5, 2, 300) * np.repeat([1.0, 1e300, 1e-300], 100)
    merged = Moments.of(Y[:100], w[:100]).merge(Moments.of(Y[100:200], w[100:200])).merge(Moments.of(Y[200:], w[200:]))
    whole = Moments.of(Y, w)
    np.testing.assert_allclose(merged.mean / [1, 1e200], whole.mean / [1, 1e200], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(merged.scale(), whole.scale(), rtol=1e-12)
    np.testing.assert_allclose(whole.mean / [1, 1e200], np.average(Y[100:200] / [1, 1e200], axis=0, weights=w[100:200]))


@pytest.mark.filterwarnings("ignore:invalid value encountered in reduce:RuntimeWarning")  # sklearn's finite check
def test_predictions_beyond_float64_are_an_error_not_inf(friedman):
    X, y = friedman
    y = np.where(y > np.median(y), 1.7e308, -1.7e308)
    reg = _small(DEQRegressor, n_hidden=16, alpha=0.0).fit(X, y)
    try:
        pred = reg.predict(X)
    except ValueError as exc:
        assert "predictions overflow float64" in str(exc)
    else:
        assert np.all(np.isfinite(pred))


def test_score_takes_weights_up_to_the_largest_float64(friedman):
    X, y = friedman
    reg = _small(DEQRegressor, n_hidden=16).fit(X, y)
    expected = reg.score(X, y)
    assert reg.score(X, y, sample_weight=np.full(len(y), 1e308)) == pytest.approx(expected, rel=1e-12)
    clf = _small(DEQClassifier, n_hidden=16).fit(X, y > np.median(y))
    accuracy = clf.score(X, y > np.median(y))
    assert clf.score(X, y > np.median(y), sample_weight=np.full(len(y), 1e308)) == pytest.approx(accuracy)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sample_weights_up_to_the_largest_float64_are_the_unweighted_fit(friedman, dtype):
    X, y = friedman
    plain = _small(DEQRegressor, n_hidden=16, dtype=dtype).fit(X, y, sample_weight=np.ones(len(y)))
    for w in (1e308, 1e-310):  # their sums overflowed (NaN mean, "samples are identical") or were subnormal
        big = _small(DEQRegressor, n_hidden=16, dtype=dtype).fit(X, y, sample_weight=np.full(len(y), w))
        np.testing.assert_allclose(big.input_scale_, plain.input_scale_, rtol=1e-12)
        np.testing.assert_allclose(big.predict(X), plain.predict(X), rtol=1e-7, atol=1e-7)
