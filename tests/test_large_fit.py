"""fit at large n: the readout's cached features stay in the network's dtype, and a cache too large is an error."""

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

import sk_deq._torch_base as base
from sk_deq import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
]

ESTIMATORS = (DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier)


@pytest.fixture(scope="module")
def blobs():
    return make_blobs(n_samples=300, centers=3, n_features=6, random_state=0)


def _spy_on_train(monkeypatch, upcast_first: bool):
    """Record what the readout is trained on; with ``upcast_first`` train on a float64 copy instead."""
    seen = []
    original = base.train

    def spy(model, X, y, **kw):
        seen.append(X.dtype)
        if upcast_first:
            model, X = model.readout, X.to(torch.float64)
            kw["X_val"] = None if kw["X_val"] is None else kw["X_val"].to(torch.float64)
        return original(model, X, y, **kw)

    monkeypatch.setattr(base, "train", spy)
    return seen


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("params", [{}, {"optimizer": "adam", "max_epochs": 5, "early_stopping": True}])
def test_float32_features_are_cached_as_float32_and_fit_as_a_float64_copy_would(cls, params, blobs, monkeypatch):
    X, y = blobs
    make = lambda: cls(**{"n_hidden": 48, "max_epochs": 40, "random_state": 0, **params})
    seen = _spy_on_train(monkeypatch, upcast_first=False)
    cached = make().fit(X, y)
    assert seen == [torch.float32]
    _spy_on_train(monkeypatch, upcast_first=True)
    reference = make().fit(X, y)  # the readout trained on features upcast beforehand
    np.testing.assert_array_equal(cached.decision_function(X), reference.decision_function(X))
    assert cached.history_ == [dict(h, dur=c["dur"]) for h, c in zip(reference.history_, cached.history_)]


def test_features_that_do_not_fit_in_memory_are_a_clear_error(blobs, monkeypatch):
    X, y = blobs
    monkeypatch.setattr(base, "_available_memory_bytes", lambda: 300 * 48 * 4 - 1)
    est = DEQClassifier(n_hidden=48, random_state=0)
    with pytest.raises(MemoryError, match=r"300 x 48 float32 values need .* Train in chunks with partial_fit"):
        est.fit(X, y)
    assert not hasattr(est, "solver_info_")  # raised before computing features
    monkeypatch.setattr(base, "_available_memory_bytes", lambda: 300 * 48 * 4)
    DEQClassifier(n_hidden=48, random_state=0, max_epochs=50).fit(X, y)
    # float64 networks cache float64 features; trained hidden weights cache nothing
    with pytest.raises(MemoryError, match="float64"):
        DEQClassifier(n_hidden=48, dtype="float64", random_state=0).fit(X, y)
    monkeypatch.setattr(base, "_available_memory_bytes", lambda: 0)
    DEQClassifier(n_hidden=48, trainable="all", max_epochs=1, random_state=0).fit(X, y)
