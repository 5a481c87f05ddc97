"""fit at large n: the readout's cached features stay in the network's dtype, and a cache too large is an error."""

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

import sk_deq.estimators._base as base
import sk_deq.estimators._network as network
from sk_deq.estimators._classifier import TorchClassifierBase
from sk_deq.nn import train
from sk_deq import DEQClassifier
from tests._networks import CLASSIFIERS

pytestmark = [
    pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
]

ESTIMATORS = CLASSIFIERS


@pytest.fixture(scope="module")
def blobs_300():
    """300 samples of three blobs in 6 features (``make_blobs``, ``random_state=0``)."""
    return make_blobs(n_samples=300, centers=3, n_features=6, random_state=0)


def _spy_on_train(monkeypatch, upcast_first: bool):
    """Record what the readout is trained on; with ``upcast_first`` train on a float64 copy instead."""
    seen = []
    original = base.train_readout

    def spy(linear, Z, y, **kw):
        seen.append(Z.dtype)
        if upcast_first:
            Z = Z.to(torch.float64)
            kw["X_val"] = None if kw["X_val"] is None else kw["X_val"].to(torch.float64)
        return original(linear, Z, y, **kw)

    monkeypatch.setattr(base, "train_readout", spy)
    return seen


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("params", [{}, {"solver": "adam", "max_iter": 5, "early_stopping": True}])
def test_float32_features_are_cached_as_float32_and_fit_as_a_float64_copy_would(cls, params, blobs_300, monkeypatch):
    X, y = blobs_300
    make = lambda: cls(**{"n_hidden": 48, "max_iter": 40, "random_state": 0, **params})
    seen = _spy_on_train(monkeypatch, upcast_first=False)
    cached = make().fit(X, y)
    assert seen == [torch.float32]
    _spy_on_train(monkeypatch, upcast_first=True)
    reference = make().fit(X, y)  # the readout trained on features upcast beforehand
    np.testing.assert_array_equal(cached.decision_function(X), reference.decision_function(X))
    assert cached.history_ == [dict(h, dur=c["dur"]) for h, c in zip(reference.history_, cached.history_)]


def test_features_that_do_not_fit_in_memory_are_a_clear_error(blobs_300, monkeypatch):
    X, y = blobs_300
    monkeypatch.setattr(network, "available_memory_bytes", lambda: 300 * 48 * 4 - 1)
    est = DEQClassifier(n_hidden=48, random_state=0)
    with pytest.raises(MemoryError, match=r"300 x 48 float32 values need: .* Train in chunks with partial_fit"):
        est.fit(X, y)
    assert not hasattr(est, "fixed_point_info_")  # raised before computing features
    monkeypatch.setattr(network, "available_memory_bytes", lambda: 300 * 48 * 4)
    DEQClassifier(n_hidden=48, random_state=0, fixed_point_max_iter=50).fit(X, y)
    # float64 networks cache float64 features; trained hidden weights cache nothing
    with pytest.raises(MemoryError, match="float64"):
        DEQClassifier(n_hidden=48, dtype="float64", random_state=0).fit(X, y)
    monkeypatch.setattr(network, "available_memory_bytes", lambda: 40000)  # the network's 32280 bytes, no cache
    DEQClassifier(n_hidden=48, trainable="all", fixed_point_max_iter=1, random_state=0).fit(X, y)


@pytest.mark.parametrize(
    "params,needs",
    [
        ({}, "partial_fit (it holds"),
        ({"solver": "lbfgs"}, "partial_fit (with solver='auto' or 'adam') (it holds"),
        ({"readout": "ridge"}, "partial_fit (with readout='logistic' and solver='auto' or 'adam') (it holds"),
    ],
)
def test_the_memory_error_advises_partial_fit_with_what_it_needs(blobs_300, monkeypatch, params, needs):
    X, y = blobs_300
    monkeypatch.setattr(network, "available_memory_bytes", lambda: 300 * 48 * 4 - 1)
    est = DEQClassifier(n_hidden=48, random_state=0, **params)
    with pytest.raises(MemoryError, match="Train in chunks with") as info:
        est.fit(X, y)
    assert needs in str(info.value)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_a_frozen_network_sees_the_inputs_one_chunk_at_a_time(cls, blobs_300, monkeypatch):
    X, y = blobs_300
    whole = cls(n_hidden=48, max_iter=40, random_state=0).fit(X, y)
    seen = []
    scaled_on = TorchClassifierBase._scaled_on  # scales one chunk (the range is checked once, on the raw X)

    def spy(self, X, device, *args):
        seen.append(len(X))
        return scaled_on(self, X, device, *args)

    monkeypatch.setattr(TorchClassifierBase, "_chunk_rows", lambda self, device=None, fit=False: 64)
    monkeypatch.setattr(TorchClassifierBase, "_scaled_on", spy)
    chunked = cls(n_hidden=48, max_iter=40, random_state=0).fit(X, y)
    assert seen == [64, 64, 64, 64, 44]  # no scaled copy of all 300 rows
    np.testing.assert_array_equal(chunked.features(X), whole.features(X))
    # L-BFGS sums its loss over chunks of the same rows: only the order of the sums differs
    np.testing.assert_allclose(chunked.decision_function(X), whole.decision_function(X), rtol=1e-9, atol=1e-9)


def test_train_continues_a_given_optimizer():
    torch.manual_seed(0)
    X, y = torch.randn(64, 3, dtype=torch.float64), torch.arange(64) % 2
    model = torch.nn.Linear(3, 2, dtype=torch.float64)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    train(model, X, y, optimizer="adam", max_epochs=1, batch_size=16, torch_optimizer=opt)
    assert opt.state[model.weight]["step"] == 4  # the steps went through the given optimizer
    train(model, X, y, optimizer="adam", max_epochs=1, batch_size=16, torch_optimizer=opt)
    assert opt.state[model.weight]["step"] == 8
    with pytest.raises(ValueError, match="torch_optimizer continues a minibatch optimizer; it cannot be used with"):
        train(model, X, y, optimizer="lbfgs", torch_optimizer=opt)
