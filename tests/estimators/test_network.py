"""The network component of the estimators (``sk_deq.estimators._network``), on the classifiers: pickling and
copies without drawing weights, float32 and float64, numpy and torch callables as activations."""

import copy
import pickle
import warnings

import joblib
import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from sk_deq import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier
from sk_deq.nn.solvers import SolverLog
from tests._networks import CLASSIFIERS, small

ESTIMATORS = CLASSIFIERS


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
    est = small(cls, dtype=dtype).fit(X, y)
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
    est = small(cls, trainable=trainable, max_iter=5, solver="adam").fit(X, y)
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
    a = small(DEQClassifier, dtype="float32").fit(X, y)
    b = small(DEQClassifier, dtype="float64").fit(X, y)
    torch.testing.assert_close(a.module_.features.A, b.module_.features.A.float())
    assert (a.predict(X) == b.predict(X)).mean() > 0.98


def test_torch_and_numpy_callables_give_identical_classifiers(blobs):
    from sk_deq.activations import Activation

    X, y = blobs
    forms = [torch.sin, np.sin, Activation(np.sin, derivative=np.cos, torch_func=torch.sin, odd=True)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        probas = [small(DEQClassifier, activation=f).fit(X, y).predict_proba(X) for f in forms]
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
        deq = small(DEQClassifier, activation=f, **kw).fit(X, y)
        net = small(ExplicitClassifier, layers=(f, f), **kw).fit(X, y)
    for est in (deq, net):
        assert est.history_[-1]["train_loss"] < est.history_[0]["train_loss"]
        assert est.score(X, y) > 0.8


def test_matched_and_transformer_accept_torch_callables(blobs):
    from sk_deq import ImplicitCKKernel, ImplicitCKTransformer

    X, y = blobs
    m = small(MatchedExplicitClassifier, activation=torch.tanh).fit(X, y)
    assert m.match_.family == "hard_tanh" and m.match_.max_residual < 1e-8
    ref = small(MatchedExplicitClassifier, activation="tanh").fit(X, y)
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
    est = small(DEQClassifier, activation=torch.sin).fit(X, y)
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("where", ["fit", "predict"])
def test_a_non_finite_feature_anywhere_is_an_error_naming_it(blobs, bad, where):
    # the features' finiteness is read from their smallest and largest entries: NaN and +-inf show in either
    X, y = blobs
    est = small(DEQClassifier).fit(X, y)
    feats = est.module_.features
    real = feats.forward

    def spoiled(x):
        z = real(x).clone()
        z[0, 1] = bad  # one entry (a block's last rows may be padding, dropped)
        return z

    feats.forward = spoiled
    with pytest.raises(ValueError, match="produced non-finite features"):
        with SolverLog(est.module_) as log:
            est._compute_features(X, torch.device("cpu"), where, log)


# the weights drawn ahead (NetworkMixin._weight_source): the host draws a network's first matrices on a worker
# thread while the fit goes on.  Against a network drawn at the build (the generator itself): the same network,
# to the bit, for every kind of network, a fit and a first partial_fit.
@pytest.mark.parametrize(
    "make, n_ahead",
    [
        (lambda: DEQClassifier("tanh", 0.3, n_hidden=40, random_state=1), 2),
        (lambda: MatchedExplicitClassifier("relu", 0.2, n_hidden=40, random_state=2), 2),  # auto: 2 or 3 layers
        (lambda: MatchedExplicitClassifier("tanh", 0.2, n_hidden=40, random_state=3), 1),  # auto: 1 or 2 layers
        (lambda: MatchedExplicitClassifier("relu", 0.2, family="leaky_relux3", n_hidden=40, random_state=4), 3),
        (lambda: ExplicitClassifier(layers=["relu", "tanh"], n_hidden=40, random_state=5), 2),
    ],
)
@pytest.mark.parametrize("how", ["fit", "partial_fit"])
def test_weights_drawn_ahead_give_the_same_network(make, n_ahead, how, blobs, monkeypatch):
    from sk_deq.estimators._network import NetworkMixin
    from sk_deq.nn.layers import WeightDraws

    X, y = blobs
    train = (lambda est: est.fit(X, y)) if how == "fit" else (lambda est: est.partial_fit(X, y, classes=np.unique(y)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        drawn = []
        real = WeightDraws.__init__

        def record(self, shapes, generator):
            drawn.append(list(shapes))
            real(self, shapes, generator)

        monkeypatch.setattr(WeightDraws, "__init__", record)
        ahead = train(make())
        monkeypatch.setattr(
            NetworkMixin, "_weight_source", lambda self, n, targets, seed, device: torch.Generator().manual_seed(seed)
        )
        at_build = train(make())
    assert len(drawn) == 1 and len(drawn[0]) == n_ahead
    assert len(drawn) == 1  # the network drawn at the build drew nothing ahead
    for a, b in zip(at_build.module_.parameters(), ahead.module_.parameters(), strict=True):
        assert torch.equal(a, b)


def test_an_unknown_family_is_still_the_matchs_error_with_weights_drawn_ahead(blobs):
    with pytest.raises(ValueError, match="Unknown family 'nope'"):
        MatchedExplicitClassifier("relu", 0.2, family="nope", n_hidden=8).fit(*blobs)
