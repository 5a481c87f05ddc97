"""Every estimator on bad or unusual input (ImplicitCKKernel called directly: ``tests/test_gaussian_process.py``).

Each case ends in a clear error naming the problem or in a correct result;
never a crash inside torch or numpy, never a silent NaN.
"""

import pickle
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV

from sk_deq import (
    DEQClassifier,
    DEQRegressor,
    ExplicitClassifier,
    ExplicitRegressor,
    ImplicitCKNystroem,
    ImplicitCKTransformer,
    MatchedExplicitClassifier,
    MatchedExplicitRegressor,
)
from sk_deq.matching import MatchingError, match_explicit
from sk_deq.nn import DEQDivergenceError, TrainingDivergenceError

CLASSIFIERS = {
    "DEQ": lambda **kw: DEQClassifier(**{"n_hidden": 32, "random_state": 0, **kw}),
    "matched": lambda **kw: MatchedExplicitClassifier(**{"n_hidden": 32, "random_state": 0, **kw}),
    "explicit": lambda **kw: ExplicitClassifier(**{"n_hidden": 32, "random_state": 0, **kw}),
}
REGRESSORS = {
    "DEQ regressor": lambda **kw: DEQRegressor(**{"n_hidden": 32, "random_state": 0, **kw}),
    "matched regressor": lambda **kw: MatchedExplicitRegressor(**{"n_hidden": 32, "random_state": 0, **kw}),
    "explicit regressor": lambda **kw: ExplicitRegressor(**{"n_hidden": 32, "random_state": 0, **kw}),
}
TRANSFORMERS = (ImplicitCKTransformer, ImplicitCKNystroem)
ALL = {
    **CLASSIFIERS,
    **REGRESSORS,
    "transformer": lambda **kw: ImplicitCKTransformer(**kw),
    "nystroem": lambda **kw: ImplicitCKNystroem(**{"n_components": 20, "random_state": 0, **kw}),
}


@pytest.fixture(scope="module")
def data():
    X, y = load_digits(return_X_y=True)
    return X[:200], y[:200]


def _fit(est, X, y, **fit_params):
    if isinstance(est, TRANSFORMERS):
        return est.fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y, **fit_params)


def _out(est, X):
    if isinstance(est, TRANSFORMERS):
        return est.transform(X)
    return est.predict_proba(X) if hasattr(est, "predict_proba") else est.predict(X)


# ---------------------------------------------------------------------------
# inputs that must be rejected with a message naming the problem

# NaN and infinity (fit, predict, transform), no samples or no features, sparse input,
# 1-D input (fit, predict), predict before fit and a feature-count mismatch are
# scikit-learn's estimator checks (check_estimators_nan_inf,
# check_estimators_empty_data_messages, check_estimator_sparse_matrix/_array,
# check_fit1d, check_fit2d_predict1d, check_estimators_unfitted,
# check_n_features_in_after_fitting), run on every estimator at its defaults in
# test_checks_at_defaults.py.  The cases below are the ones those checks do not make.

STRINGS = ("strings", lambda X: np.full(X.shape, "a"), ValueError, "could not convert string to float")
REJECTED_AFTER_FIT = [
    ("empty", lambda X: X[:0], ValueError, "0 sample"),
    ("sparse", lambda X: sp.csr_matrix(X), TypeError, "Sparse data was passed"),
    STRINGS,
]


@pytest.mark.parametrize("name", list(ALL))
def test_string_training_inputs_are_clear_errors(data, name):
    X, y = data
    _, make, error, message = STRINGS
    with pytest.raises(error, match=message):
        _fit(ALL[name](), make(X), y)


@pytest.mark.parametrize("name", list(ALL))
@pytest.mark.parametrize("case,make,error,message", REJECTED_AFTER_FIT, ids=[c[0] for c in REJECTED_AFTER_FIT])
def test_bad_inputs_after_fit_are_clear_errors(data, name, case, make, error, message):
    X, y = data
    est = _fit(ALL[name](), X, y)
    with pytest.raises(error, match=message):
        _out(est, make(X))


@pytest.mark.parametrize("name", list(CLASSIFIERS))
def test_one_sample_or_one_class_is_an_error(data, name):
    X, y = data
    with pytest.raises(ValueError, match="minimum of 2 is required"):
        _fit(CLASSIFIERS[name](), X[:1], y[:1])
    with pytest.raises(ValueError, match="at least 2 classes"):
        _fit(CLASSIFIERS[name](), X[:20], np.zeros(20))


def test_transformer_one_sample():
    X = np.random.default_rng(0).standard_normal((1, 5))
    with pytest.raises(ValueError, match="minimum of 2 is required"):
        ImplicitCKTransformer().fit(X)  # the global scaling needs two samples
    K = ImplicitCKTransformer(input_scaling="none").fit_transform(X)
    assert K.shape == (1, 1) and np.isfinite(K).all() and K[0, 0] > 0


@pytest.mark.parametrize("name", list(ALL))
def test_bad_parameters_are_clear_errors(data, name):
    X, y = data
    for bad in ({"sigma_a2": 0.0}, {"sigma_a2": 1.0}, {"sigma_a2": -0.1}, {"sigma_a2": 1.5}):
        if name.startswith("explicit"):
            continue
        with pytest.raises(ValueError, match=r"'sigma_a2' parameter .* must be a float in the range \(0.0, 1.0\)"):
            _fit(ALL[name](**bad), X, y)
    if not name.startswith("explicit"):
        with pytest.raises(ValueError, match=r"'activation' parameter .* must be a str among \{'elu', 'erf'"):
            _fit(ALL[name](activation="cosh2"), X, y)
    if name in CLASSIFIERS or name in REGRESSORS:
        for n_hidden in (0, -3):
            with pytest.raises(ValueError, match="'n_hidden' parameter"):
                _fit(ALL[name](n_hidden=n_hidden), X, y)
    elif name == "nystroem":
        with pytest.raises(ValueError, match="'n_components' parameter"):
            _fit(ALL[name](n_components=0), X, y)
    else:
        with pytest.raises(ValueError, match="'n_hidden' parameter"):
            _fit(ALL[name](n_hidden=0), X, y)
    with pytest.raises(ValueError, match="Unknown activation 'cosh2'"):
        _fit(ExplicitClassifier(layers=("relu", "cosh2")), X, y)


# settings that the configuration of a fit does not use: an error where they contradict it, a warning otherwise
UNUSED = [  # (estimators, params, unused settings named in the warning)
    (
        "classifiers",
        {"readout": "ridge", "learning_rate_init": 0.5, "max_iter": 500},
        "learning_rate_init=0.5, max_iter",
    ),
    ("classifiers", {"readout": "ridge", "tol": 1e-3, "n_iter_no_change": 3}, "tol=0.001, n_iter_no_change=3"),
    ("regressors", {"batch_size": 32, "max_iter": 500}, "batch_size=32, max_iter=500: this fit solves for the"),
    ("all", {"solver": "lbfgs", "learning_rate_init": 0.5, "batch_size": 32}, "learning_rate_init=0.5, batch_size=32"),
    ("all", {"solver": "lbfgs", "n_iter_no_change": 3}, "n_iter_no_change=3: L-BFGS without early_stopping"),
    ("all", {"solver": "adam", "validation_fraction": 0.2}, "validation_fraction=0.2: it sizes the validation"),
]


@pytest.mark.parametrize("name", list(CLASSIFIERS) + list(REGRESSORS))
@pytest.mark.parametrize("which,params,named", UNUSED)
def test_a_setting_the_fit_does_not_use_warns_naming_it(data, name, which, params, named):
    if (which == "classifiers" and name not in CLASSIFIERS) or (which == "regressors" and name not in REGRESSORS):
        return
    X, y = data
    with pytest.warns(UserWarning, match="does not use") as rec:
        _fit(ALL[name](**{"max_iter": 5, **params}), X, y)
    assert sum(named in str(w.message) for w in rec) == 1, [str(w.message) for w in rec]
    assert all(w.filename == __file__ for w in rec if "does not use" in str(w.message))  # points at the fit


@pytest.mark.parametrize("name", list(CLASSIFIERS) + list(REGRESSORS))
def test_settings_that_apply_or_are_left_at_their_defaults_are_silent(data, name):
    X, y = data
    applied = [
        {},
        {"learning_rate_init": "auto", "batch_size": "auto", "max_iter": 200, "validation_fraction": 0.1},
        {"solver": "adam", "learning_rate_init": 0.05, "batch_size": 32, "n_iter_no_change": 3, "tol": 1e-3},
        {"solver": "lbfgs", "max_iter": 5, "early_stopping": True, "n_iter_no_change": 3, "validation_fraction": 0.2},
    ]
    for params in applied:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            _fit(ALL[name](**params), X, y)


@pytest.mark.parametrize("name", list(CLASSIFIERS))
def test_ridge_readout_with_an_optimizer_is_an_error(data, name):
    X, y = data
    for solver in ("adam", "sgd", "lbfgs"):
        with pytest.raises(ValueError, match=f"readout='ridge' solves .* solver='{solver}' chooses the optimizer"):
            _fit(ALL[name](readout="ridge", solver=solver), X, y)


@pytest.mark.parametrize("name", list(CLASSIFIERS) + list(REGRESSORS))
@pytest.mark.parametrize("solver", ["adam", "sgd"])
@pytest.mark.parametrize("trainable", ["readout", "all"])
def test_a_diverging_training_is_an_error_naming_learning_rate_init(data, name, solver, trainable):
    X, y = data
    est = ALL[name](solver=solver, learning_rate_init=1e3, trainable=trainable, max_iter=5)
    with pytest.raises(TrainingDivergenceError, match=r"learning_rate_init=1000 is too large a step size") as info:
        _fit(est, X, y)
    assert str(info.value).startswith(type(est).__name__) and "max_iter" not in str(info.value)
    if isinstance(info.value, DEQDivergenceError):  # a trained DEQ whose fixed point the steps destroyed
        assert name.startswith("DEQ") and trainable == "all" and "after optimizer steps" in str(info.value)
    else:
        assert re.search(r"the training loss (grew to|became)", str(info.value))
    with pytest.raises(TrainingDivergenceError, match="lower learning_rate_init"):
        ALL[name](solver=solver, learning_rate_init=1e6, trainable=trainable).partial_fit(X, y, **_classes(name, y))


def _classes(name, y):
    return {"classes": np.unique(y)} if name in CLASSIFIERS else {}


def _plain(f, z0, *, tol, max_iter):
    from sk_deq.nn import fixed_point_iteration

    return fixed_point_iteration(f, z0, tol=tol, max_iter=max_iter)


SOLVERS_BREAKING_THE_CONTRACT = [
    (lambda f, z0, **kw: _plain(f, z0, **kw)[0], TypeError, r"returned a Tensor of shape \(\d+, 32\)"),
    (lambda f, z0, **kw: _plain(f, z0, **kw)[0][:2], TypeError, r"returned a Tensor of shape \(2, 32\)"),
    (lambda f, z0, **kw: (_plain(f, z0, **kw)[0], {"n_iter": 3}), TypeError, r"returned the pair \(Tensor, dict\)"),
    (lambda f, z0, **kw: (_plain(f, z0, **kw)[0][:, :5], _plain(f, z0, **kw)[1]), ValueError, r"z of shape \(\d+, 5\)"),
    (lambda f, z0: _plain(f, z0, tol=1e-4, max_iter=50), TypeError, "cannot be called as one .*'tol'"),
]


@pytest.mark.parametrize("solver,error,message", SOLVERS_BREAKING_THE_CONTRACT)
def test_a_custom_fixed_point_solver_breaking_its_contract_is_an_error_naming_it(data, solver, error, message):
    X, y = data
    with pytest.raises(error, match=message) as info:
        _fit(DEQClassifier(n_hidden=32, fixed_point_solver=solver, random_state=0), X, y)
    assert "returns the pair (z, info): z a tensor of the shape of z0, info a sk_deq.nn.SolverInfo" in str(info.value)


def test_a_custom_fixed_point_solver_keeping_its_contract_fits_as_the_builtin(data):
    X, y = data
    custom = _fit(DEQRegressor(n_hidden=32, fixed_point_solver=_plain, random_state=0), X, y)
    builtin = _fit(DEQRegressor(n_hidden=32, random_state=0), X, y)
    np.testing.assert_array_equal(custom.predict(X), builtin.predict(X))


@pytest.mark.parametrize("name", [n for n in ALL if not n.startswith("explicit")])
def test_extreme_sigma_b2_is_an_error_naming_sigma_b2(data, name):
    X, y = data
    for sigma_b2 in (1e100, 1e13):  # the input term alone puts the pre-activation scale out of bounds
        with pytest.raises(ValueError, match=re.escape(f"sigma_b2={sigma_b2:g}") + ".*Use a smaller sigma_b2") as info:
            _fit(ALL[name](sigma_b2=sigma_b2), X, y)
        assert "smaller sigma_a2" not in str(info.value)
    # near the bound both terms count: a sigma_b2 above its default is named beside sigma_a2
    with pytest.raises(ValueError, match=r"sigma_b2=1e\+12.*smaller sigma_a2 .*or a smaller sigma_b2"):
        _fit(ALL[name](sigma_b2=1e12), X, y)
    if name.startswith("matched"):  # a kernel too small to fit an explicit network to, not scipy's error
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            with pytest.raises(ValueError, match=r"sigma_b2=1e-300.*use one nearer it"):
                with pytest.warns(UserWarning, match=r"sigma_b2=1e-300 is below 0\.0001"):
                    _fit(ALL[name](sigma_b2=1e-300), X, y)


def test_sigma_a2_close_to_one_is_a_convergence_warning_carrying_the_residual(data):
    X, y = data
    with pytest.warns(ConvergenceWarning, match=r"largest relative residual \d"):
        est = DEQClassifier(n_hidden=64, sigma_a2=0.95, fixed_point_max_iter=15, random_state=0).fit(X, y)
    assert est.fixed_point_info_["converged"] is False and est.fixed_point_info_["rel_residual"] > est.fixed_point_tol
    with pytest.warns(ConvergenceWarning, match="during predict"):
        assert np.isfinite(est.predict_proba(X)).all()
    # the kernel recursion still contracts: matched nets and kernels exist
    m = MatchedExplicitClassifier(n_hidden=32, sigma_a2=0.95, random_state=0).fit(X, y)
    assert m.match_.max_residual < 0.05
    K = ImplicitCKTransformer(sigma_a2=0.999).fit_transform(X[:40])
    assert np.isfinite(K).all()


@pytest.mark.parametrize("name", ["matched", "matched regressor"])
def test_a_failed_match_advises_the_estimators_own_parameters(data, name):
    X, y = data
    est = ALL[name](activation="relu", family="quadratic")
    with pytest.raises(MatchingError, match=r"within tol=0\.05") as info:
        _fit(est, X, y)
    msg = str(info.value)
    assert msg.startswith(type(est).__name__) and "match_tol=None" in msg and "family='leaky_relux3'" in msg
    assert " tol=None" not in msg and "n_layers" not in msg  # match_explicit's names: not parameters here
    assert {"family", "kernel", "match_tol"} <= set(est.get_params())
    # match_explicit itself keeps advising its own tol and n_layers, and the error pickles
    with pytest.raises(MatchingError) as info:
        match_explicit("relu", 0.2, 1.0, family="quadratic")
    assert " tol=None" in str(info.value) and "n_layers" in str(info.value)
    assert str(pickle.loads(pickle.dumps(info.value))) == str(info.value)


# ---------------------------------------------------------------------------
# unusual inputs that must work


@pytest.mark.parametrize("name", list(CLASSIFIERS))
def test_string_labels_and_dataframes(data, name):
    pd = pytest.importorskip("pandas")
    X, y = data
    labels = np.array(["zero", "one", "two"])[y % 3]
    df = pd.DataFrame(X, columns=[f"px{i}" for i in range(X.shape[1])])
    est = _fit(CLASSIFIERS[name](), df, labels)
    assert list(est.feature_names_in_[:2]) == ["px0", "px1"]
    assert set(est.predict(df)) <= {"zero", "one", "two"}
    assert est.score(df, labels) > 0.6


def test_transformer_dataframe_names():
    pd = pytest.importorskip("pandas")
    X = np.random.default_rng(0).standard_normal((10, 3))
    t = ImplicitCKTransformer().fit(pd.DataFrame(X, columns=["a", "b", "c"]))
    assert list(t.feature_names_in_) == ["a", "b", "c"]
    assert list(t.get_feature_names_out()[:2]) == ["implicitcktransformer0", "implicitcktransformer1"]


@pytest.mark.parametrize("name", list(ALL))
def test_many_more_features_than_samples(name):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((5, 10_000)), np.array([0, 1, 0, 1, 0])
    est = _fit(ALL[name](**({"n_components": 4} if name == "nystroem" else {})), X, y)
    out = _out(est, rng.standard_normal((3, 10_000)))
    expected = {"transformer": (3, 5), "nystroem": (3, 4)}.get(name, (3,) if name in REGRESSORS else (3, 2))
    assert out.shape == expected and np.isfinite(out).all()


@pytest.mark.parametrize("name", list(ALL))
def test_float32_and_float64_inputs_give_the_same_model(data, name):
    X, y = data
    a = _out(_fit(ALL[name](), X, y), X)
    b = _out(_fit(ALL[name](), X.astype(np.float32), y), X.astype(np.float32))
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(ALL))
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_inputs_times_a_million_with_either_scaling(data, name, activation):
    X, y = data
    kw = {"layers": (activation,)} if name.startswith("explicit") else {"activation": activation}
    # global scaling: the same model, to rounding
    a = _out(_fit(ALL[name](**kw), X, y), X)
    b = _out(_fit(ALL[name](**kw), X * 1e6, y), X * 1e6)
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    # no scaling: the theory follows tau0 ~ 3e7, the outputs stay finite and the fit useful
    est = _fit(ALL[name](input_scaling="none", **kw), X * 1e6, y)
    assert est.tau0_ == pytest.approx(1e6 * _fit(ALL[name](input_scaling="none", **kw), X, y).tau0_, rel=1e-9)
    out = _out(est, X * 1e6)
    assert np.isfinite(out).all()
    if name in CLASSIFIERS:
        assert est.score(X * 1e6, y) > 0.5
    if name in REGRESSORS:  # the digit's label as a number, from 32 random features: R^2 about 0.5
        assert est.score(X * 1e6, y) > 0.3


@pytest.mark.parametrize("name", list(ALL))
def test_constant_inputs(name):
    X, y = np.full((20, 4), 3.0), np.arange(20) % 2
    with pytest.raises(ValueError, match="identical: input_scaling='global' cannot normalise them"):
        _fit(ALL[name](), X, y)
    est = _fit(ALL[name](input_scaling="none"), X, y)
    out = _out(est, X)
    assert np.isfinite(out).all()
    if name in CLASSIFIERS:  # nothing to learn: the classes are equally likely
        np.testing.assert_allclose(out, 0.5, atol=1e-6)
    if name in REGRESSORS:  # nothing to learn: the mean target
        np.testing.assert_allclose(out, y.mean(), atol=1e-6)
    with pytest.raises(ValueError, match="are zero: the data scale tau0 would be 0"):
        _fit(ALL[name](input_scaling="none"), np.zeros((20, 4)), y)


@pytest.mark.parametrize("name", list(ALL))
@pytest.mark.parametrize("tau0", [1e-6, 1e6])
def test_extreme_data_scales_give_finite_results(data, name, tau0):
    X, y = data
    Xs = X / np.sqrt((X**2).sum(1).mean()) * tau0
    est = _fit(ALL[name](input_scaling="none"), Xs, y)
    assert est.tau0_ == pytest.approx(tau0, rel=1e-9)
    assert np.isfinite(_out(est, Xs)).all()


@pytest.mark.parametrize("name", list(ALL))
def test_overflowing_inputs_are_clear_errors_never_nan(data, name):
    X, y = data
    # the global scaling handles any finite scale (the mean square does not overflow)
    a = _out(_fit(ALL[name](), X, y), X)
    b = _out(_fit(ALL[name](), X * 1e300, y), X * 1e300)
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="too large for the theory"):
        _fit(ALL[name](input_scaling="none"), X * 1e200, y)
    with pytest.raises(ValueError, match="too small for the theory"):  # tau0^2 underflows
        _fit(ALL[name](input_scaling="none"), X * 1e-300, y)
    fitted = _fit(ALL[name](), X, y)
    with pytest.raises(ValueError, match=r"overflow float64|too large for dtype") as info:
        _out(fitted, X * 1e300)
    # the advice fits the case: the scaling in use already is input_scaling='global'
    assert "far outside" in str(info.value) and "use input_scaling='global'" not in str(info.value)


@pytest.mark.parametrize("name", list(CLASSIFIERS) + list(REGRESSORS))
def test_one_sample_weight_of_1e300_names_the_weights_not_the_scaling_in_use(data, name):
    X, y = data
    w = np.r_[1e300, np.ones(len(y) - 1)]
    with pytest.raises(ValueError, match="Sample weights spanning many orders of magnitude") as info:
        _fit(ALL[name](), X, y, sample_weight=w)
    assert "use input_scaling='global'" not in str(info.value)


@pytest.mark.parametrize("name", list(CLASSIFIERS))
def test_mixed_string_and_number_labels_get_scikit_learns_message(data, name):
    X, y = data
    mixed = np.array(["a" if v % 2 else 1 for v in y], dtype=object)
    with pytest.raises(ValueError, match=r"Mix of label input types \(string and number\) in y"):
        _fit(CLASSIFIERS[name](), X, mixed)
    with pytest.raises(ValueError, match=r"Mix of label input types \(string and number\) in y"):
        CLASSIFIERS[name]().partial_fit(X, mixed, classes=["1", "a"])
    with pytest.raises(ValueError, match=r"Mix of label input types \(string and number\) in classes"):
        CLASSIFIERS[name]().partial_fit(X, y, classes=np.array([0, "a"], dtype=object))
    # None among labels is a missing label (tests/test_missing_values.py), not a label of another type
    with pytest.raises(ValueError, match=r"y holds \d+ missing values \(None, NaN, pd.NA or NaT\), the first at row"):
        _fit(CLASSIFIERS[name](), X, np.array(["a" if v % 2 else None for v in y], dtype=object))


def test_class_weight_that_leaves_one_class_is_an_error(data):
    X, y = data
    with pytest.raises(ValueError, match=r"at least 2 classes with positive weight \(sample_weight x class_weight\)"):
        _fit(CLASSIFIERS["DEQ"](class_weight={c: 0.0 for c in range(10)}), X, y)
    with pytest.raises(ValueError, match=r"got 1 \(\[3\]\): check class_weight"):
        _fit(CLASSIFIERS["DEQ"](class_weight={c: float(c == 3) for c in range(10)}), X, y)
    weights = {c: 1e308 for c in range(10)}  # their products with sample weights stay finite
    est = _fit(CLASSIFIERS["DEQ"](class_weight=weights), X, y, sample_weight=np.full(len(y), 1e308))
    assert est.score(X, y) > 0.9


@pytest.mark.parametrize("name", list(CLASSIFIERS))
@pytest.mark.parametrize(
    "class_weight,raises",
    [({99: 2.0}, True), ({0: 2.0, "3": 2.0}, True), ({**dict.fromkeys(range(10), 1.0), 99: 2.0}, False)],
)
def test_class_weight_naming_labels_y_lacks_follows_scikit_learn_with_a_message_naming_them(
    data, name, class_weight, raises
):
    X, y = data
    sklearn_raises = False
    try:
        LogisticRegression(class_weight=class_weight, max_iter=5).fit(X, y)
    except ValueError:
        sklearn_raises = True
    assert sklearn_raises == raises  # the same rule as scikit-learn's
    est = ALL[name](class_weight=class_weight)
    if not raises:  # every class weighed: an extra label is allowed (a class missing from a fold)
        _fit(est, X, y)
        return
    unknown = [k for k in class_weight if k not in range(10)]
    with pytest.raises(
        ValueError, match=re.escape(f"class_weight names the label(s) {unknown!r}, which y does not hold")
    ):
        _fit(est, X, y)
    with pytest.raises(ValueError, match="class_weight names the label"):
        ALL[name](class_weight=class_weight).partial_fit(X, y, classes=np.arange(10))


@pytest.mark.parametrize("name", list(CLASSIFIERS) + list(REGRESSORS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_width_whose_weights_cannot_fit_is_a_memory_error_before_allocation(data, name, dtype):
    X, y = data
    m = 2**40
    est = ALL[name](n_hidden=m, dtype=dtype)
    with pytest.raises(MemoryError, match=rf"n_hidden={m}\) on 64 features: its hidden weights .* in {dtype}") as info:
        _fit(est, X, y)
    assert not hasattr(est, "module_")
    if "matched" not in name:  # (the matched net's depth depends on its activation)
        itemsize = 4 if dtype == "float32" else 8
        n_weights = m * 64 + (m * m if name.startswith("DEQ") else 0)  # B (m x p), and A (m x m) of a DEQ
        readout = (m + 1) * (10 if name in CLASSIFIERS else 1) * 8
        draws = 0 if dtype == "float64" else 8 * n_weights  # drawn in float64, then cast
        assert f"({n_weights * itemsize + readout + draws} bytes)" in str(info.value)


@pytest.mark.parametrize("name", list(ALL))
def test_pickle_and_clone(data, name):
    X, y = data
    est = _fit(ALL[name](), X, y)
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(_out(back, X), _out(est, X))
    fresh = clone(est)
    assert fresh.get_params() == est.get_params() and not hasattr(fresh, "n_features_in_")
    np.testing.assert_array_equal(_out(_fit(fresh, X, y), X), _out(est, X))


@pytest.mark.parametrize("name", list(CLASSIFIERS))
def test_grid_search_in_two_processes(data, name):
    X, y = data
    grid = {"alpha": [1e-5, 1e-3]} if name == "explicit" else {"sigma_a2": [0.1, 0.3]}
    search = GridSearchCV(CLASSIFIERS[name](), grid, cv=2, n_jobs=2).fit(X, y)
    serial = GridSearchCV(CLASSIFIERS[name](), grid, cv=2, n_jobs=1).fit(X, y)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], serial.cv_results_["mean_test_score"])
    assert search.best_estimator_.score(X, y) > 0.8
