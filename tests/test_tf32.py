"""Float32 products run in full precision (no TF32) inside fit, predict and the kernels, whatever the caller set.

A program may call ``torch.set_float32_matmul_precision('high')`` for its own
models; on an Ampere or later GPU every float32 product of sk_deq would then
run in TF32 (about 1e-3 relative error, five times the solver tolerances).
sk_deq pins ``'highest'`` (and ``cudnn.allow_tf32 = False``) inside its calls
and restores the caller's settings afterwards (:func:`sk_deq._runtime.full_float32_precision`);
``SK_DEQ_ALLOW_TF32=1`` opts out.  Checked on the CPU by reading the settings
from inside the torch calls.
"""

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning

from sk_deq import DEQClassifier, DEQRegressor, ExplicitClassifier, ImplicitCKTransformer
from sk_deq.kernels import torch_engine

#: What the float32 calls saw: (matmul precision, cuBLAS TF32 flag, cuDNN TF32 flag).
SEEN = []
PINNED = ("highest", False, False)


def _settings():
    return torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


class SpyTanh(torch.nn.Module):
    """tanh, recording the precision settings of every float32 call (the network's, not the theory's)."""

    def forward(self, x):
        if x.dtype == torch.float32:
            SEEN.append(_settings())
        return torch.tanh(x)


@pytest.fixture
def caller_allows_tf32():
    """The caller's settings: TF32 allowed ('high'); sk_deq's own restored afterwards."""
    before = _settings()
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    SEEN.clear()
    yield ("high", True, True)
    torch.set_float32_matmul_precision(before[0])
    torch.backends.cudnn.allow_tf32 = before[2]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    return X, (X[:, 0] > 0).astype(int)


def _calls(est, X, y):
    """Every public call of an estimator that runs its network."""
    yield "fit", lambda: est.fit(X, y)
    if hasattr(est, "partial_fit"):
        yield "partial_fit", lambda: est.partial_fit(X, y)
    yield "features", lambda: est.features(X)
    yield "predict", lambda: est.predict(X)
    if hasattr(est, "predict_proba"):
        yield "decision_function", lambda: est.decision_function(X)
        yield "predict_proba", lambda: est.predict_proba(X)


@pytest.mark.parametrize("make", [DEQClassifier, DEQRegressor, ExplicitClassifier], ids=lambda c: c.__name__)
def test_fit_and_predict_run_without_tf32_and_restore_the_callers_settings(make, data, caller_allows_tf32):
    X, y = data
    activation = (SpyTanh(),) if make is ExplicitClassifier else SpyTanh()
    est = make(activation, n_hidden=8, max_iter=3, solver="adam", random_state=0, device="cpu")
    y = y.astype(float) if make is DEQRegressor else y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for name, call in _calls(est, X, y):
            SEEN.clear()
            call()
            assert SEEN and set(SEEN) == {PINNED}, name
            assert _settings() == caller_allows_tf32, name


def test_the_kernels_torch_engine_runs_without_tf32(data, caller_allows_tf32, monkeypatch):
    X, _ = data
    block = torch_engine._HermiteBlocks.block

    def spy(self, *args):
        SEEN.append(_settings())
        return block(self, *args)

    monkeypatch.setattr(torch_engine._HermiteBlocks, "block", spy)
    ImplicitCKTransformer("tanh", device="cpu").fit(X).transform(X[:5])
    assert SEEN and set(SEEN) == {PINNED}
    assert _settings() == caller_allows_tf32


class FailingTanh(torch.nn.Module):
    """tanh that fails in the network (float32), not in the theory (float64)."""

    def forward(self, x):
        if x.dtype == torch.float32:
            raise RuntimeError("the network failed")
        return torch.tanh(x)


def test_the_callers_settings_are_restored_when_fit_fails(data, caller_allows_tf32):
    X, y = data
    with pytest.raises(RuntimeError, match="the network failed"):
        DEQClassifier(FailingTanh(), n_hidden=8, random_state=0, device="cpu").fit(X, y)
    assert _settings() == caller_allows_tf32


def test_sk_deq_allow_tf32_leaves_the_callers_settings(data, caller_allows_tf32, monkeypatch):
    X, y = data
    monkeypatch.setenv("SK_DEQ_ALLOW_TF32", "1")
    est = DEQClassifier(SpyTanh(), n_hidden=8, random_state=0, device="cpu").fit(X, y)
    est.predict(X)
    assert SEEN and set(SEEN) == {caller_allows_tf32}
