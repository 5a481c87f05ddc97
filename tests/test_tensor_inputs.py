"""Torch tensors as inputs of fit, predict and transform, and the input scaling computed in torch.

A tensor fit gives the bits of a numpy fit on the CPU; faulty tensors get
scikit-learn's errors for the same faults; the torch statistics of the input
scaling (used on a GPU, run here on the CPU) agree with numpy's to 1e-12.
"""

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification

from sk_deq import (
    DEQClassifier,
    ExplicitClassifier,
    ExplicitRegressor,
    ImplicitCKKernel,
    ImplicitCKNystroem,
    ImplicitCKTransformer,
    MatchedExplicitClassifier,
)
from sk_deq._scaling import apply_input_scaling, fit_input_scaling
from tests._networks import NETWORKS

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

ESTIMATORS = NETWORKS


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=120, n_features=8, random_state=0)
    X = 3.0 * X + 1.0  # off-centre, not unit scale: the scaling matters
    weight = np.random.default_rng(0).random(120)
    weight[:10] = 0.0
    return X, y, np.sin(X[:, 0]) + X[:, 1], weight


def _targets(cls, data):
    return data[2] if cls.__name__.endswith("Regressor") else data[1]


def _short(cls, max_iter):
    """A short training for a classifier; a regressor's readout is fitted in closed form, without iterations."""
    return {} if cls.__name__.endswith("Regressor") else {"max_iter": max_iter}


def _outputs(est, X):
    if type(est).__name__.endswith("Regressor"):
        return [est.predict(X), est.features(X)]
    return [est.decision_function(X), est.predict_proba(X), est.predict(X), est.features(X)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_a_tensor_fit_and_predict_give_the_bits_of_numpy(cls, dtype, data):
    X, _, _, weight = data
    X = X.astype(dtype)
    y = _targets(cls, data)
    ref = cls(n_hidden=32, random_state=0, **_short(cls, 20)).fit(X, y, sample_weight=weight)
    T = torch.tensor(X, requires_grad=True)  # detached by the estimators
    est = cls(n_hidden=32, random_state=0, **_short(cls, 20)).fit(T, y, sample_weight=weight)
    assert est.n_features_in_ == X.shape[1]
    np.testing.assert_array_equal(est.input_mean_, ref.input_mean_)
    for got, want in zip(_outputs(est, T), _outputs(ref, X)):
        assert isinstance(got, np.ndarray)  # outputs are numpy, as scikit-learn's
        np.testing.assert_array_equal(got, want)
    assert est.score(T, y) == ref.score(X, y)


def test_a_tensor_trains_end_to_end_with_early_stopping_and_in_chunks(data):
    X, y, _, weight = data
    T = torch.tensor(X)
    kw = dict(n_hidden=16, trainable="all", max_iter=3, early_stopping=True, random_state=0)
    ref, est = ExplicitClassifier(**kw).fit(X, y, sample_weight=weight), ExplicitClassifier(**kw).fit(T, y, weight)
    np.testing.assert_array_equal(est.decision_function(T), ref.decision_function(X))
    ref, est = DEQClassifier(n_hidden=16, random_state=0), DEQClassifier(n_hidden=16, random_state=0)
    for rows in (slice(0, 60), slice(60, 120)):
        ref.partial_fit(X[rows], y[rows], classes=[0, 1], sample_weight=weight[rows])
        est.partial_fit(T[rows], y[rows], classes=[0, 1], sample_weight=weight[rows])
    np.testing.assert_array_equal(est.predict_proba(T), ref.predict_proba(X))
    assert torch.equal(T, torch.tensor(X))  # the caller's tensor is left alone


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("scaling", ["global", "none"])
@pytest.mark.parametrize(
    "make",
    [
        lambda s: ImplicitCKTransformer("tanh", input_scaling=s),
        lambda s: ImplicitCKTransformer(input_scaling=s, device="cpu"),
        lambda s: ImplicitCKNystroem(input_scaling=s, n_components=20, random_state=0),
    ],
    ids=["transformer", "transformer-torch", "nystroem"],
)
def test_the_transformers_give_the_bits_of_numpy_on_tensors(make, scaling, dtype, data):
    X = data[0][:60].astype(dtype)
    ref, est = make(scaling).fit(X), make(scaling).fit(torch.tensor(X))
    out = est.transform(torch.tensor(X[:25]))
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, ref.transform(X[:25]))
    if isinstance(est, ImplicitCKTransformer):
        np.testing.assert_array_equal(make(scaling).fit_transform(torch.tensor(X)), ref.fit_transform(X))


def _faults(X):
    """``name -> (numpy input, tensor input)`` of every fault, the same values either way."""
    nan, inf = X.copy(), X.copy()
    nan[3, 2], inf[5, 1] = np.nan, -np.inf
    cases = {"nan": nan, "inf": inf, "1d": X[:, 0], "3d": X[None], "empty": X[:0], "features": X[:, :3]}
    return {name: (value, torch.tensor(value)) for name, value in cases.items()}


@pytest.mark.parametrize("fault", ["nan", "inf", "1d", "3d", "empty", "features"])
@pytest.mark.parametrize("make", [ExplicitClassifier, ImplicitCKTransformer], ids=lambda c: c.__name__)
def test_a_faulty_tensor_gets_the_error_of_numpy(make, fault, data):
    X, y = data[0], data[1]
    small = {"n_hidden": 8} if make is ExplicitClassifier else {}  # the transformer's exact kernel has no width
    fitted = make(random_state=0, **small).fit(X, y)
    array, tensor = _faults(X)[fault]
    calls = [lambda Z: fitted.transform(Z) if hasattr(fitted, "transform") else fitted.predict(Z)]
    if fault != "features":
        calls.append(lambda Z: make(**small).fit(Z, y[: len(Z)] if Z.ndim == 2 else y))
    for call in calls:
        with pytest.raises(ValueError) as want:
            call(array)
        with pytest.raises(ValueError) as got:
            call(tensor)
        assert str(got.value) == str(want.value)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex128])
def test_a_tensor_of_a_non_floating_dtype_is_a_type_error(dtype, data):
    X, y = data[0], data[1]
    fitted = MatchedExplicitClassifier(n_hidden=8, random_state=0).fit(X, y)
    T = torch.tensor(X).to(dtype)
    for call in (lambda: fitted.predict(T), lambda: MatchedExplicitClassifier().fit(T, y)):
        with pytest.raises(TypeError, match="floating dtype"):
            call()


@pytest.mark.parametrize("gpu_blocks", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("mode", ["global", "none"])
def test_the_torch_statistics_of_the_input_scaling_match_numpy(mode, weighted, gpu_blocks, monkeypatch):
    import sk_deq._scaling as inputs_module

    rng = np.random.default_rng(1)
    X = 5.0 * rng.standard_normal((3000, 700)) + rng.standard_normal(700)  # two 16 MiB blocks, one GPU block
    if gpu_blocks:  # the CPU standing in for a GPU: blocks of 2^24 entries
        monkeypatch.setattr(inputs_module, "on_gpu", lambda device: True)
    assert len(inputs_module._TorchRows(X, None, torch.device("cpu")).blocks) == (1 if gpu_blocks else 2)
    weight = rng.random(3000) if weighted else None
    if weighted:
        weight[::7] = 0.0
    for inputs in (X, torch.tensor(X), torch.tensor(X, dtype=torch.float32)):
        want = fit_input_scaling(np.asarray(inputs, dtype=np.float64), mode, weight)
        mean, scale, tau0 = fit_input_scaling(inputs, mode, weight, device=torch.device("cpu"))
        assert abs(scale - want[1]) <= 1e-12 * want[1] and abs(tau0 - want[2]) <= 1e-12 * want[2]
        if mode == "none":
            assert mean is None
        else:
            assert isinstance(mean, np.ndarray)
            assert np.linalg.norm(mean - want[0]) <= 1e-12 * np.linalg.norm(want[0])


def test_the_torch_statistics_keep_numpys_errors():
    X = np.ones((5, 3))
    for mode, match in (("global", "identical"), ("none", "zero")):
        with pytest.raises(ValueError, match=match):
            fit_input_scaling(torch.tensor(X if mode == "global" else 0 * X), mode, device=torch.device("cpu"))


def test_a_tensor_chunk_is_scaled_in_torch_to_the_bits_of_numpy(data):
    X = data[0]
    mean, scale, _ = fit_input_scaling(X)
    T = torch.tensor(X, dtype=torch.float32)
    got = apply_input_scaling(T, mean, scale)
    assert got.dtype == torch.float64 and torch.equal(T, torch.tensor(X, dtype=torch.float32))
    np.testing.assert_array_equal(got.numpy(), apply_input_scaling(T.numpy(), mean, scale))
    est = DEQClassifier(n_hidden=8, random_state=0).fit(X, data[1])
    np.testing.assert_array_equal(est._to_tensor(T, "cpu").numpy(), est._to_tensor(T.numpy(), "cpu").numpy())
    with pytest.raises(ValueError, match="too large for dtype='float32'"):
        est._to_tensor(T * 1e30, "cpu")


def test_a_validated_tensor_is_the_callers_memory_not_a_numpy_copy(data):
    from sk_deq._validation import validate_samples

    T = torch.tensor(data[0], dtype=torch.float32, requires_grad=True)
    est = ExplicitRegressor()
    X = validate_samples(est, T, reset=True, dtype=[np.float64, np.float32])
    assert isinstance(X, torch.Tensor) and X.data_ptr() == T.data_ptr() and not X.requires_grad
    assert est.n_features_in_ == 8


# ---------------------------------------------------------------------------
# host inputs moved to a GPU once per fit (stage_inputs), exercised here on the CPU


def _as_if_on_a_gpu(monkeypatch, free_bytes):
    """Make ``stage_inputs`` treat the CPU as a GPU with ``free_bytes`` free (None: not measurable)."""
    import sk_deq.estimators._network as tn

    monkeypatch.setattr(tn, "on_gpu", lambda device: True)
    monkeypatch.setattr(tn, "_device_memory", lambda device: free_bytes)
    return tn.stage_inputs


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_stage_inputs_moves_host_inputs_that_fit_once(monkeypatch, dtype):
    X = np.arange(24, dtype=dtype).reshape(6, 4)
    stage = _as_if_on_a_gpu(monkeypatch, free_bytes=8 * X.nbytes)
    T = stage(X, torch.device("cpu"))
    assert isinstance(T, torch.Tensor) and T.dtype == torch.from_numpy(X).dtype  # its own dtype: the same values
    np.testing.assert_array_equal(T.numpy(), X)
    Xr = X.copy()
    Xr.flags.writeable = False  # read-only inputs are staged without a warning from torch
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(stage(Xr, torch.device("cpu")).numpy(), X)


def test_stage_inputs_leaves_what_does_not_fit_or_need_moving(monkeypatch):
    from sk_deq.estimators._network import STAGE_SHARE, stage_inputs

    X = np.ones((6, 4))
    cpu = torch.device("cpu")
    assert stage_inputs(X, cpu) is X  # the CPU: nothing to move
    stage = _as_if_on_a_gpu(monkeypatch, free_bytes=int(X.nbytes / STAGE_SHARE) - 1)
    assert stage(X, cpu) is X  # just over the share of the free memory: copied chunk by chunk instead
    assert isinstance(_as_if_on_a_gpu(monkeypatch, int(X.nbytes / STAGE_SHARE))(X, cpu), torch.Tensor)
    assert _as_if_on_a_gpu(monkeypatch, None)(X, cpu) is X  # free memory unknown
    T = torch.ones(6, 4)
    assert _as_if_on_a_gpu(monkeypatch, 10**12)(T, cpu) is T  # a tensor is where its caller put it


@pytest.mark.parametrize("cls", [DEQClassifier, ExplicitRegressor], ids=lambda c: c.__name__)
def test_a_staged_fit_gives_the_bits_of_the_host_fit(monkeypatch, cls, data):
    """What a GPU fit does with numpy inputs (stage them, then the tensor path), wired through fit, on the CPU."""
    import sk_deq.estimators._base as tb

    X, _, _, weight = data
    y = _targets(cls, data)
    kw = dict(n_hidden=32, max_iter=5, random_state=0, early_stopping=True, validation_fraction=0.2)
    ref = cls(**kw).fit(X, y, sample_weight=weight)
    staged = []
    monkeypatch.setattr(tb, "stage_inputs", lambda X, device: staged.append(torch.as_tensor(X)) or staged[-1])
    est = cls(**kw).fit(X, y, sample_weight=weight)
    assert len(staged) == 1 and staged[0].shape == X.shape
    np.testing.assert_array_equal(est.input_mean_, ref.input_mean_)
    for got, want in zip(_outputs(est, X), _outputs(ref, X)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cls", [DEQClassifier, ExplicitRegressor], ids=lambda c: c.__name__)
def test_a_staged_predict_gives_the_bits_of_the_host_predict(monkeypatch, cls, data):
    """What a predict on a GPU does with numpy inputs (stage them once, then the tensor path), on the CPU."""
    import sk_deq.estimators._base as tb

    X, _, _, _ = data
    est = cls(n_hidden=32, random_state=0, **_short(cls, 5)).fit(X, _targets(cls, data))
    want = _outputs(est, X)
    staged = []
    monkeypatch.setattr(tb, "stage_inputs", lambda X, device: staged.append(torch.as_tensor(X)) or staged[-1])
    got = _outputs(est, X)
    assert len(staged) == len(got) and all(t.shape == X.shape for t in staged)  # once per call
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_meta_tensors_are_refused_by_name(cls, data):
    X = data[0]
    y = _targets(cls, data)
    meta = torch.empty(X.shape, device="meta")
    message = r"{} is a tensor on the 'meta' device, which holds a shape but no values"
    with pytest.raises(ValueError, match=message.format("X")):
        cls(n_hidden=16).fit(meta, y)
    with pytest.raises(ValueError, match=message.format("y")):
        cls(n_hidden=16).fit(X, torch.empty(len(y), device="meta"))
    with pytest.raises(ValueError, match=message.format("sample_weight")):
        cls(n_hidden=16).fit(X, y, sample_weight=torch.empty(len(y), device="meta"))
    est = cls(n_hidden=16, random_state=0).fit(X, y)
    for method in (est.predict, est.features, lambda M: est.score(M, y)):
        with pytest.raises(ValueError, match=message.format("X")):
            method(meta)
    with pytest.raises(ValueError, match=message.format("y")):
        est.score(X, torch.empty(len(y), device="meta"))


@pytest.mark.parametrize("cls", [ImplicitCKTransformer, ImplicitCKNystroem, ImplicitCKKernel])
def test_meta_tensors_are_refused_by_the_kernels(cls, data):
    X = data[0][:40]
    meta = torch.empty(X.shape, device="meta")
    with pytest.raises(ValueError, match=r"X is a tensor on the 'meta' device"):
        cls()(meta) if cls is ImplicitCKKernel else cls().fit(meta)
    if cls is ImplicitCKKernel:
        with pytest.raises(ValueError, match=r"Y is a tensor on the 'meta' device"):
            cls()(X, meta)
    else:
        with pytest.raises(ValueError, match=r"X is a tensor on the 'meta' device"):
            cls(n_components=10).fit(X).transform(meta) if cls is ImplicitCKNystroem else cls().fit(X).transform(meta)
