"""A ``fit`` or ``partial_fit`` that raises leaves the estimator as it was before the call (estimators/_base.py).

The weights, the fitted attributes, the history and the stream of
``partial_fit`` are put back; an unfitted estimator stays unfitted.  The
failures are a diverging warm start and an exception injected into the fit
chain after the network has trained (its weights changed).
"""

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from sk_deq import DEQClassifier
from sk_deq.estimators._base import TorchEstimatorBase
from sk_deq.nn import TrainingDivergenceError
from tests._networks import NETWORKS, small


@pytest.fixture(scope="module")
def data():
    X, y = load_digits(return_X_y=True)
    return X[:150], y[:150]


def _targets(cls, y):
    return y if cls.__name__.endswith("Classifier") else y.astype(float)


def _quiet(call, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning of the short fits
        return call(*args, **kwargs)


def _state(est, X):
    """What a failed call must not change: attribute names, every tensor of the network and the optimizer,
    the history, and the outputs."""
    tensors = {f"module_.{k}": v.detach().clone() for k, v in est.module_.state_dict().items()}
    stream = getattr(est, "_stream", None)
    if stream is not None and stream.optimizer is not None:
        for i, s in stream.optimizer.state_dict()["state"].items():
            tensors.update({f"optimizer.{i}.{k}": v.clone() for k, v in s.items() if torch.is_tensor(v)})
    rng = None if stream is None else stream.rng.get_state()[1].copy()
    outputs = est.decision_function(X) if hasattr(est, "decision_function") else est.predict(X)
    history = [{k: v for k, v in h.items() if k != "dur"} for h in est.history_]  # wall-clock times differ
    return sorted(est.__dict__), tensors, history, est.n_iter_, rng, outputs


def _assert_same_state(before, after):
    names, tensors, history, n_iter, rng, outputs = before
    assert sorted(after[0]) == names
    assert after[1].keys() == tensors.keys()
    for key, value in tensors.items():
        assert torch.equal(after[1][key], value), key
    assert list(after[2:4]) == [history, n_iter]
    assert (rng is None and after[4] is None) or np.array_equal(after[4], rng)
    np.testing.assert_array_equal(after[5], outputs)


def _train_then_raise(monkeypatch):
    """Make the fit chain raise once the network has trained (its weights changed)."""
    original = TorchEstimatorBase._fit_network

    def trained_then_failed(self, *args, **kwargs):
        original(self, *args, **kwargs)
        raise RuntimeError("injected failure")

    monkeypatch.setattr(TorchEstimatorBase, "_fit_network", trained_then_failed)


def test_a_diverging_warm_start_leaves_the_fitted_network_that_predicts_as_before(data):
    X, y = data
    clf = _quiet(
        DEQClassifier(n_hidden=32, trainable="all", solver="sgd", max_iter=2, warm_start=True, random_state=0).fit, X, y
    )
    before = _state(clf, X)
    clf.set_params(learning_rate_init=1e4, max_iter=5)
    with pytest.raises(TrainingDivergenceError, match="learning_rate_init=10000 is too large"):
        _quiet(clf.fit, X, y)
    _assert_same_state(before, _state(clf, X))
    assert clf.score(X, y) > 0.5  # the network of the first fit, not diverged weights


@pytest.mark.parametrize("cls", NETWORKS, ids=lambda c: c.__name__)
def test_a_warm_start_that_raises_leaves_the_network_as_it_was(cls, data, monkeypatch):
    X, y = data
    est = _quiet(small(cls, max_iter=3, warm_start=True).fit, X, _targets(cls, y))
    before = _state(est, X)
    _train_then_raise(monkeypatch)
    with pytest.raises(RuntimeError, match="injected failure"):  # on other rows: other weights (ridge too)
        _quiet(est.fit, X[50:], _targets(cls, y[50:]))
    _assert_same_state(before, _state(est, X))


@pytest.mark.parametrize("cls", NETWORKS, ids=lambda c: c.__name__)
def test_a_first_fit_or_partial_fit_that_raises_leaves_the_estimator_unfitted(cls, data, monkeypatch):
    X, y = data
    est = small(cls, solver="adam")
    params = sorted(est.__dict__)
    _train_then_raise(monkeypatch)
    kwargs = {"classes": np.unique(y)} if cls.__name__.endswith("Classifier") else {}
    for call in (lambda: est.fit(X, _targets(cls, y)), lambda: est.partial_fit(X, _targets(cls, y), **kwargs)):
        with pytest.raises(RuntimeError, match="injected failure"):
            _quiet(call)
        assert sorted(est.__dict__) == params  # no module_, no n_features_in_, no classes_
        with pytest.raises(NotFittedError):
            check_is_fitted(est)


@pytest.mark.parametrize("cls", NETWORKS, ids=lambda c: c.__name__)
def test_a_partial_fit_that_raises_leaves_the_stream_so_that_the_next_calls_continue_as_without_it(
    cls, data, monkeypatch
):
    X, y = data
    y = _targets(cls, y)
    kwargs = {"classes": np.unique(y)} if cls.__name__.endswith("Classifier") else {}
    failed, clean = small(cls, solver="adam"), small(cls, solver="adam")
    for est in (failed, clean):
        _quiet(est.partial_fit, X[:75], y[:75], **kwargs)
    before = _state(failed, X)
    with monkeypatch.context() as patch:
        _train_then_raise(patch)
        with pytest.raises(RuntimeError, match="injected failure"):
            _quiet(failed.partial_fit, X[75:], y[75:])
    _assert_same_state(before, _state(failed, X))
    for est in (failed, clean):  # Adam's moments and the minibatch order carry on as if the call never happened
        _quiet(est.partial_fit, X[75:], y[75:])
    _assert_same_state(_state(clean, X), _state(failed, X))
