"""The machine (``sk_deq._runtime``): one ``device`` rule for every estimator, transformer and kernel
(:func:`sk_deq.resolve_device`), one BLAS thread for a block of code, full float32 precision (no TF32); the
memory guard in ``test_runtime_memory.py``.

The CUDA branches are exercised without a GPU by patching ``torch.cuda.is_available``
and ``torch.cuda.device_count``: every refusal happens in the resolver, before torch
touches a device.
"""

import os
import pickle
import sys
import types
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import InvalidParameterError
from threadpoolctl import threadpool_info, threadpool_limits

import sk_deq
import sk_deq._runtime as threads
from sk_deq import (
    DEQClassifier,
    DEQRegressor,
    ExplicitClassifier,
    ImplicitCKKernel,
    ImplicitCKNystroem,
    ImplicitCKTransformer,
    resolve_device,
)
from sk_deq._validation import DEVICE_CONSTRAINTS
from sk_deq.kernels import ImplicitKernelEngine, implicit_kernel, torch_engine
from tests._networks import NETWORKS

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

TRANSFORMERS = (ImplicitCKTransformer, ImplicitCKNystroem)

#: Refused values and the reason the message gives.
REFUSED = [
    ("mps", r"device='mps' is not supported: MPS devices have no float64"),
    (torch.device("mps"), r"is not supported: MPS devices have no float64"),
    ("meta", r"device='meta' is not supported: a meta device holds no data"),
    ("xpu", r"device='xpu' is not supported: sk_deq computes on CPUs and CUDA GPUs only, not on xpu devices"),
    ("gpu", r"device='gpu' names no device: device must be None, 'auto', 'cpu', 'cuda', 'cuda:N'"),
    ("cuda:-1", r"device='cuda:-1' names no device"),
    ("", r"device='' names no device"),
]


def _cuda(monkeypatch, count):
    """Pretend this machine has ``count`` CUDA devices (0: no CUDA), and let ``'auto'`` see them.

    The suite pins ``'auto'`` to the CPU (``SK_DEQ_DEVICE=cpu``, root conftest); the variable is removed here.
    """
    monkeypatch.delenv("SK_DEQ_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def _network(cls, **kw):
    short = {} if cls.__name__.endswith("Regressor") else {"max_iter": 5}  # a regressor's readout: closed form
    return cls(n_hidden=16, random_state=0, **short, **kw)


def _transformer(cls, **kw):
    return cls(n_components=5, random_state=0, **kw) if cls is ImplicitCKNystroem else cls(**kw)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4))
    return X, (X[:, 0] > 0).astype(int)


def _y(cls, y):
    return y.astype(float) if "Regressor" in cls.__name__ else y


def _classes(cls):
    return {"classes": [0, 1]} if cls.__name__.endswith("Classifier") else {}


# -- the resolver -------------------------------------------------------------------


def test_accepted_values_with_two_gpus(monkeypatch):
    _cuda(monkeypatch, 2)
    assert resolve_device(None) is None
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cpu") == resolve_device(torch.device("cpu", 1)) == torch.device("cpu")
    assert resolve_device("cuda") == torch.device("cuda")
    assert resolve_device("cuda:1") == resolve_device(torch.device("cuda", 1)) == torch.device("cuda", 1)


def test_accepted_values_without_cuda(monkeypatch):
    _cuda(monkeypatch, 0)
    assert resolve_device(None) is None and resolve_device("auto") is None  # the CPU
    assert resolve_device("cpu") == torch.device("cpu")
    for value in ("cuda", "cuda:0", torch.device("cuda")):
        with pytest.raises(ValueError, match=r"was requested but CUDA is not available on this machine; use "):
            resolve_device(value)


def test_the_environment_pins_auto_to_the_cpu(monkeypatch):
    _cuda(monkeypatch, 1)
    for value in ("cpu", "CPU", " cpu "):
        monkeypatch.setenv("SK_DEQ_DEVICE", value)
        assert resolve_device("auto") is None  # the CPU, as 'auto' without CUDA
        assert resolve_device("cuda") == torch.device("cuda")  # an explicit device is not overridden
    for value in ("", "auto"):
        monkeypatch.setenv("SK_DEQ_DEVICE", value)
        assert resolve_device("auto") == torch.device("cuda")
    monkeypatch.setenv("SK_DEQ_DEVICE", "gpu")
    with pytest.raises(ValueError, match=r"environment variable SK_DEQ_DEVICE='gpu' is not supported: set it to 'cpu'"):
        resolve_device("auto")


def test_the_suite_runs_on_the_cpu(monkeypatch):
    """The root conftest pins 'auto' to the CPU for tests not marked gpu, even where CUDA is available."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") is None
    assert DEQClassifier(n_hidden=4)._device() == torch.device("cpu")


@pytest.fixture(scope="module")
def device_env_of_a_module_fixture():
    return os.environ.get("SK_DEQ_DEVICE")


def test_module_fixtures_run_pinned_to_the_cpu_too(device_env_of_a_module_fixture):
    """A module fixture is set up before its first test's function fixtures: the pin holds for the whole session."""
    assert device_env_of_a_module_fixture == "cpu"


def test_the_cpu_pin_survives_a_tests_own_monkeypatch_undo(monkeypatch):
    """A test ending its own patches with ``monkeypatch.undo()`` keeps the root conftest's pin (seen failing on a GPU host)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert os.environ.get("SK_DEQ_DEVICE") == "cpu"
    assert resolve_device("auto") is None


def test_cuda_index_is_checked(monkeypatch):
    _cuda(monkeypatch, 2)
    for value in ("cuda:2", torch.device("cuda", 7)):
        with pytest.raises(ValueError, match=r"this machine has 2 CUDA device\(s\), 'cuda:0' to 'cuda:1'"):
            resolve_device(value)


@pytest.mark.parametrize(("value", "message"), REFUSED)
def test_refused_values_name_the_reason(value, message):
    with pytest.raises(ValueError, match=message):
        resolve_device(value)


@pytest.mark.parametrize("value", [0, 1.5, ["cpu"], b"cpu"])
def test_other_types_are_refused(value):
    with pytest.raises(ValueError, match=r"device must be None, 'auto', 'cpu', 'cuda', 'cuda:N' or a CPU or CUDA"):
        resolve_device(value)
    with pytest.raises(ValueError, match=r"^backend must be None"):
        resolve_device(value, name="backend")


def test_resolving_none_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys; from sk_deq import resolve_device; resolve_device(None); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- one rule everywhere --------------------------------------------------------------


@pytest.mark.parametrize("cls", [*NETWORKS, *TRANSFORMERS])
def test_every_estimator_shares_the_device_constraints(cls):
    assert cls._parameter_constraints["device"] is DEVICE_CONSTRAINTS


@pytest.mark.parametrize("cls", [*NETWORKS, *TRANSFORMERS])
def test_a_value_of_another_type_is_refused_by_parameter_validation(cls, data):
    X, y = data
    est = _network(cls, device=0) if cls in NETWORKS else _transformer(cls, device=0)
    expected = r"The 'device' parameter of \w+ must be None, 'auto', 'cpu', 'cuda', 'cuda:N' or a CPU or CUDA torch"
    with pytest.raises(InvalidParameterError, match=expected + r"\.device\. Got 0 instead"):
        est.fit(X, _y(cls, y))


@pytest.mark.parametrize(("value", "message"), REFUSED[:5])
def test_refused_values_are_refused_alike_by_every_object(value, message, data):
    X, y = data
    for cls in NETWORKS:
        with pytest.raises(ValueError, match=message):
            _network(cls, device=value).fit(X, _y(cls, y))
    for cls in TRANSFORMERS:
        with pytest.raises(ValueError, match=message):
            _transformer(cls, device=value).fit(X)
    with pytest.raises(ValueError, match=message):
        ImplicitCKKernel(device=value)(X)
    with pytest.raises(ValueError, match=message):
        ImplicitKernelEngine("relu", 0.2, 1.0, device=value)
    with pytest.raises(ValueError, match=message):
        implicit_kernel(X, device=value)


MISSING = [(0, "cuda", "CUDA is not available"), (1, "cuda:1", r"has 1 CUDA device\(s\)")]


@pytest.mark.parametrize(("count", "value", "message"), MISSING)
def test_a_missing_gpu_is_refused_alike_by_every_object(count, value, message, data, monkeypatch):
    _cuda(monkeypatch, count)
    X, y = data
    for cls in NETWORKS:
        with pytest.raises(ValueError, match=message):
            _network(cls, device=value).fit(X, _y(cls, y))
        with pytest.raises(ValueError, match=message):
            _network(cls, device=value).partial_fit(X, _y(cls, y), **_classes(cls))
    for cls in TRANSFORMERS:
        with pytest.raises(ValueError, match=message):
            _transformer(cls, device=value).fit(X)
    with pytest.raises(ValueError, match=message):
        ImplicitCKKernel(device=value)(X)
    with pytest.raises(ValueError, match=message):
        implicit_kernel(X, device=value)


@pytest.mark.parametrize("cls", NETWORKS)
def test_networks_accept_none_as_the_cpu(cls, data, monkeypatch):
    X, y = data
    y = _y(cls, y)
    ref = _network(cls, device="cpu").fit(X, y)
    est = _network(cls, device=None).fit(X, y)
    assert est.device_ == "cpu"
    np.testing.assert_array_equal(est.predict(X), ref.predict(X))
    _cuda(monkeypatch, 0)
    auto = _network(cls, device="auto").fit(X, y)
    assert auto.device_ == "cpu"
    np.testing.assert_array_equal(auto.predict(X), ref.predict(X))


@pytest.mark.parametrize("cls", TRANSFORMERS)
def test_kernels_accept_auto(cls, data, monkeypatch):
    X, _ = data
    ref = _transformer(cls).fit(X)
    _cuda(monkeypatch, 0)
    tr = _transformer(cls, device="auto").fit(X)
    assert tr._engine.device is None  # without CUDA: the numpy engine, as device=None
    np.testing.assert_array_equal(tr.transform(X), ref.transform(X))
    _cuda(monkeypatch, 1)
    assert ImplicitKernelEngine("relu", 0.2, 1.0, device="auto").device == torch.device("cuda")
    assert ref._engine.with_device("auto").device == torch.device("cuda")


def test_kernel_functions_accept_every_value(data, monkeypatch):
    X, _ = data
    _cuda(monkeypatch, 0)
    np.testing.assert_array_equal(ImplicitCKKernel(device="auto")(X), ImplicitCKKernel()(X))
    K = implicit_kernel(X, activation="tanh")
    np.testing.assert_array_equal(implicit_kernel(X, activation="tanh", device="auto"), K)
    for device in ("cpu", torch.device("cpu")):  # torch on the CPU
        np.testing.assert_allclose(implicit_kernel(X, activation="tanh", device=device), K, rtol=0, atol=1e-12)


# -- fit, predict and unpickling follow the same rule ---------------------------------------------------------


@pytest.fixture(scope="module")
def fitted(data):
    X, y = data
    nets = {cls: _network(cls).fit(X, _y(cls, y)) for cls in NETWORKS}
    return nets, {cls: _transformer(cls).fit(X) for cls in TRANSFORMERS}


def _set(est, device):
    """A copy of the fitted ``est`` with ``device`` (as ``set_params`` or a pickle from another machine)."""
    other = pickle.loads(pickle.dumps(est))
    return other.set_params(device=device)


REFUSED_AT_PREDICT = [
    ("mps", "no float64"),
    ("gpu", "no device"),
    (0, r"The 'device' parameter of \w+ must be None, 'auto'"),  # the parameter check of fit, at predict too
    ("cuda", "not available"),
]


@pytest.mark.parametrize(("value", "message"), REFUSED_AT_PREDICT)
def test_predict_refuses_what_fit_refuses(value, message, fitted, data, monkeypatch):
    _cuda(monkeypatch, 0)
    X, _ = data
    nets, transformers = fitted
    for est in nets.values():
        other = _set(est, value)
        for method in ("predict", "features"):
            with pytest.raises(ValueError, match=message):
                getattr(other, method)(X)
    for est in transformers.values():
        with pytest.raises(ValueError, match=message):
            _set(est, value).transform(X)


def test_predict_checks_the_cuda_index_as_fit_does(fitted, data, monkeypatch):
    _cuda(monkeypatch, 1)
    X, _ = data
    nets, transformers = fitted
    calls = [(est, "predict") for est in nets.values()] + [(est, "transform") for est in transformers.values()]
    for est, call in calls:
        with pytest.raises(ValueError, match=r"device='cuda:1' was requested but this machine has 1 CUDA device"):
            getattr(_set(est, "cuda:1"), call)(X)


def test_a_model_fitted_on_a_gpu_loads_on_a_cpu_only_machine(fitted, data, monkeypatch):
    # A pickle holds no torch storage (the networks) or a device name (the kernels), so it loads
    # anywhere; device='cuda' then raises at predict as at fit, and set_params moves it to the CPU.
    X, _ = data
    nets, transformers = fitted
    cuda_pickles = {}
    for est in [*nets.values(), *transformers.values()]:
        gpu = pickle.loads(pickle.dumps(est)).set_params(device="cuda")
        if hasattr(gpu, "_engine"):
            gpu._engine.device = torch.device("cuda")  # what a fit on a GPU leaves
        cuda_pickles[est] = pickle.dumps(gpu)
    _cuda(monkeypatch, 0)
    for est, blob in cuda_pickles.items():
        loaded = pickle.loads(blob)
        call = "transform" if hasattr(loaded, "transform") else "predict"
        with pytest.raises(ValueError, match=r"device='cuda' was requested but CUDA is not available.*'auto'"):
            getattr(loaded, call)(X)
        for device in ("auto", "cpu", None):
            got = getattr(loaded.set_params(device=device), call)(X)
            np.testing.assert_allclose(got, getattr(est, call)(X), rtol=1e-10, atol=1e-12)


def test_a_model_fitted_with_auto_on_a_gpu_predicts_on_the_cpu(fitted, data, monkeypatch):
    X, _ = data
    est = fitted[0][DEQClassifier]
    blob = pickle.dumps(_set(est, "auto"))
    _cuda(monkeypatch, 0)
    loaded = pickle.loads(blob)
    np.testing.assert_array_equal(loaded.decision_function(X), est.decision_function(X))
    assert next(loaded.module_.parameters()).device.type == "cpu"


def test_resolve_device_is_public():
    assert "resolve_device" in sk_deq.__all__ and sk_deq.resolve_device is resolve_device


# -- BLAS threads: one_blas_thread holds the limit inside, the caller's setting comes back, one scan is reused ------


def _blas_threads():
    return sorted({lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"})


def test_one_blas_thread_inside_and_the_callers_setting_after():
    assert _blas_threads(), "numpy's BLAS is loaded"
    with threadpool_limits(limits=2, user_api="blas"):  # the session runs at 1; a caller of 2 threads
        assert _blas_threads() == [2]
        with threads.one_blas_thread():
            assert _blas_threads() == [1]
        assert _blas_threads() == [2]


def test_the_libraries_are_scanned_once_until_a_module_is_imported(monkeypatch):
    monkeypatch.setitem(threads._cached, "controller", None)
    first = threads._controller()
    assert threads._controller() is first  # no import since: the same scan
    monkeypatch.setitem(sys.modules, "sk_deq_test_new_module", types.ModuleType("sk_deq_test_new_module"))
    again = threads._controller()
    assert again is not first  # a new module may have brought a new BLAS: scanned again
    assert threads._controller() is again


# -- TF32 -----------------------------------------------------------------------------------------------------------
# Float32 products run in full precision (no TF32) inside fit, predict and the kernels, whatever the caller set.
#
# A program may call ``torch.set_float32_matmul_precision('high')`` for its own
# models; on an Ampere or later GPU every float32 product of sk_deq would then
# run in TF32 (about 1e-3 relative error, five times the solver tolerances).
# sk_deq pins ``'highest'`` (and ``cudnn.allow_tf32 = False``) inside its calls
# and restores the caller's settings afterwards (:func:`sk_deq._runtime.full_float32_precision`);
# ``SK_DEQ_ALLOW_TF32=1`` opts out.  Checked on the CPU by reading the settings
# from inside the torch calls.


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
def tf32_data():
    """40 samples of 3 features, labelled by the sign of the first."""
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
def test_fit_and_predict_run_without_tf32_and_restore_the_callers_settings(make, tf32_data, caller_allows_tf32):
    X, y = tf32_data
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


def test_the_kernels_torch_engine_runs_without_tf32(tf32_data, caller_allows_tf32, monkeypatch):
    X, _ = tf32_data
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


def test_the_callers_settings_are_restored_when_fit_fails(tf32_data, caller_allows_tf32):
    X, y = tf32_data
    with pytest.raises(RuntimeError, match="the network failed"):
        DEQClassifier(FailingTanh(), n_hidden=8, random_state=0, device="cpu").fit(X, y)
    assert _settings() == caller_allows_tf32


def test_sk_deq_allow_tf32_leaves_the_callers_settings(tf32_data, caller_allows_tf32, monkeypatch):
    X, y = tf32_data
    monkeypatch.setenv("SK_DEQ_ALLOW_TF32", "1")
    est = DEQClassifier(SpyTanh(), n_hidden=8, random_state=0, device="cpu").fit(X, y)
    est.predict(X)
    assert SEEN and set(SEEN) == {caller_allows_tf32}
