"""``to_torch()``: a fitted network as a standalone torch module (sk_deq/estimators/_export.py)."""

import io
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification, make_regression
from sklearn.exceptions import NotFittedError

from sk_deq import (
    DEQClassifier,
    DEQRegressor,
    ExplicitClassifier,
    ExplicitRegressor,
    MatchedExplicitClassifier,
    MatchedExplicitRegressor,
)
from sk_deq.estimators._export import MAX_FIXED_ITERATIONS, activation_module
from sk_deq.activations import ACTIVATIONS, Activation, HardTanh, LeakyReLU, Quadratic
from tests._networks import CLASSIFIERS, REGRESSORS

ESTIMATORS = CLASSIFIERS + REGRESSORS
EXPLICIT = (ExplicitClassifier, ExplicitRegressor, MatchedExplicitClassifier, MatchedExplicitRegressor)


@pytest.fixture(scope="module")
def data():
    Xb, yb = make_classification(120, 8, random_state=1)
    Xc, yc = make_classification(120, 8, n_informative=5, n_classes=3, random_state=0)
    Xr, yr = make_regression(120, 8, n_targets=2, noise=1.0, random_state=0)
    return {"binary": (Xb, yb), "multiclass": (Xc, yc), "single": (Xr, 10 * yr[:, 0] + 50), "multi": (Xr, 10 * yr)}


def _fit(cls, data, kind, dtype="float32", **kw):
    X, y = data[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning of a short fit: irrelevant to the parity
        return cls(n_hidden=24, dtype=dtype, random_state=0, **kw).fit(X, y), X


def _reference(est, X):
    return est.decision_function(X) if hasattr(est, "decision_function") else est.predict(X)


def _kinds(cls):
    return ("binary", "multiclass") if cls in CLASSIFIERS else ("single", "multi")


CASES = [(cls, kind) for cls in ESTIMATORS for kind in _kinds(cls)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("cls", "kind"), CASES, ids=[f"{c.__name__}-{k}" for c, k in CASES])
def test_to_torch_equals_decision_function_or_predict(cls, kind, dtype, data, rel_error):
    est, X = _fit(cls, data, kind, dtype)
    ref = _reference(est, X)
    module = est.to_torch()
    with torch.no_grad():
        out = module(torch.as_tensor(X)).numpy()
        out32 = module(torch.as_tensor(X, dtype=torch.float32)).numpy()  # float32 inputs are cast, not refused
    assert out.shape == ref.shape and out.dtype == np.float64
    assert rel_error(out, ref) <= 1e-5
    assert rel_error(out32, ref) <= 1e-5


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cls", EXPLICIT)
def test_torch_export_accepts_the_explicit_and_matched_nets(cls, dtype, data, rel_error):
    est, X = _fit(cls, data, _kinds(cls)[1], dtype)
    x = torch.as_tensor(X)
    program = torch.export.export(est.to_torch(), (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    for rows in (slice(None), slice(0, 7)):
        assert rel_error(program.module()(x[rows]).numpy(), _reference(est, X[rows])) <= 1e-5


def test_an_exported_program_loads_and_runs_without_sk_deq(data, tmp_path, rel_error):
    est, X = _fit(MatchedExplicitRegressor, data, "multi")
    path = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(est.to_torch(), (torch.as_tensor(X),)), str(path))
    np.save(tmp_path / "x.npy", X)
    script = (
        "import sys; sys.modules['sk_deq'] = None\n"  # any import of sk_deq fails
        "import numpy as np, torch\n"
        f"program = torch.export.load({str(path)!r})\n"
        f"print(repr(program.module()(torch.as_tensor(np.load({str(tmp_path / 'x.npy')!r}))).numpy().tolist()))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert rel_error(np.array(eval(run.stdout)), est.predict(X)) <= 1e-5


@pytest.mark.parametrize("cls", [DEQClassifier, MatchedExplicitRegressor])
def test_the_module_is_frozen_in_eval_mode_on_the_cpu_and_pickles(cls, data):
    est, X = _fit(cls, data, _kinds(cls)[1])
    module = est.to_torch()
    assert not module.training and not any(m.training for m in module.modules())
    params = list(module.parameters())
    assert params and not any(p.requires_grad for p in params)
    assert all(t.device.type == "cpu" for t in module.state_dict().values())
    assert est.to_torch(device="cpu").readout.weight.device.type == "cpu"
    # copies: changing the estimator's network leaves the module alone
    assert module.readout.weight.data_ptr() != est.module_.readout.weight.data_ptr()
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x = torch.as_tensor(X)
    assert torch.equal(loaded(x), module(x))


def test_input_scaling_none_and_a_float32_net_are_folded_in(data, rel_error):
    est, X = _fit(ExplicitRegressor, data, "single", input_scaling="none", layers=("tanh", "relu"))
    assert est.input_mean_ is None
    assert rel_error(est.to_torch()(torch.as_tensor(X)).numpy(), est.predict(X)) <= 1e-5


def test_the_deq_module_runs_plain_iteration_to_the_estimators_settings(data, rel_error):
    est, X = _fit(DEQClassifier, data, "multiclass", fixed_point_tol=1e-6, fixed_point_max_iter=80)
    features = est.to_torch().features
    assert (features.tol, features.max_iter) == (1e-6, 80)
    ref = est.features(X)
    assert (
        rel_error(features(torch.as_tensor((X - est.input_mean_) / est.input_scale_, dtype=torch.float32)), ref) <= 1e-5
    )


def test_the_deq_module_refuses_non_finite_iterates(data):
    est, X = _fit(DEQRegressor, data, "single")
    with pytest.raises(ValueError, match="non-finite"):
        est.to_torch()(torch.full((2, X.shape[1]), float("inf"), dtype=torch.float64))


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_an_unfitted_estimator_raises_not_fitted(cls):
    with pytest.raises(NotFittedError):
        cls(n_hidden=8).to_torch()


@pytest.mark.parametrize(
    ("cls", "params"),
    [(DEQClassifier, "activation"), (ExplicitRegressor, "layers")],
)
def test_an_arbitrary_callable_activation_is_refused_by_name(cls, params, data):
    cube = Activation(lambda x: x - x**3 / 10, name="cubic")
    value = cube if params == "activation" else (cube,)
    est, _ = _fit(cls, data, _kinds(cls)[0], **{params: value})
    with pytest.raises(TypeError, match=rf"{cls.__name__}\.to_torch\(\).*'cubic'.*arbitrary python callable"):
        est.to_torch()


def test_bad_inputs_get_clear_errors(data):
    est, X = _fit(ExplicitClassifier, data, "binary")
    module = est.to_torch()
    with pytest.raises(ValueError, match=r"shape \(n, 8\)"):
        module(torch.zeros(3, 5))
    with pytest.raises(TypeError, match="floating-point"):
        module(torch.zeros(3, 8, dtype=torch.int64))
    # numpy inputs, to the module or to to_torch itself: what is expected and how to convert
    with pytest.raises(TypeError, match=r"takes a torch.Tensor of shape \(n, 8\), got ndarray: .*torch.from_numpy"):
        module(X)
    with pytest.raises(TypeError, match=r"to_torch\(device\) takes .* got ndarray.*est.to_torch\(\)\(torch.from_numpy"):
        est.to_torch(X)
    with pytest.raises(ValueError, match="The input tensor is on meta and the module's weights on cpu"):
        module(torch.empty(3, 8, device="meta"))


@pytest.mark.parametrize("kind", ["binary", "multiclass", "single", "multi"])
@pytest.mark.parametrize("solver", ["iteration", "anderson"])
def test_a_deq_exports_with_fixed_iterations_and_matches_predict(kind, solver, data, rel_error):
    cls = DEQClassifier if kind in ("binary", "multiclass") else DEQRegressor
    est, X = _fit(cls, data, kind, dtype="float64", fixed_point_solver=solver)
    x = torch.as_tensor(X)
    # the default module stops on the data: exporting it is a clear error, not torch's guard dump
    with pytest.raises(
        RuntimeError, match=r"torch.export cannot trace\. Export the module of to_torch\(fixed_iterations=N\)"
    ):
        torch.export.export(est.to_torch(), (x,))
    module = est.to_torch(fixed_iterations=est.fixed_point_max_iter)
    program = torch.export.export(module, (x[:10],), dynamic_shapes=({0: torch.export.Dim("batch")},))
    with torch.no_grad():
        exported, eager = program.module()(x).numpy(), est.to_torch()(x).numpy()
    np.testing.assert_array_equal(module(x).numpy(), eager)  # every sample stops within fixed_point_max_iter
    assert rel_error(exported, _reference(est, X)) <= est.fixed_point_tol  # the documented agreement with predict
    assert rel_error(exported, eager) <= 1e-12
    with pytest.raises(RuntimeError, match="non-finite values"):  # a torch assertion in the program
        program.module()(torch.full((2, X.shape[1]), float("inf"), dtype=torch.float64))


def test_fixed_iterations_fewer_than_needed_keep_the_last_iterate_and_bad_values_are_refused(data, rel_error):
    est, X = _fit(DEQRegressor, data, "single", fixed_point_tol=1e-6, fixed_point_max_iter=80)
    x = torch.as_tensor(X)
    few = est.to_torch(fixed_iterations=3)
    assert "fixed_iterations=3" in repr(few.features)
    assert 1e-6 < rel_error(few(x).numpy(), est.predict(X)) < 1.0
    for bad, error in ((0, ValueError), (-2, ValueError), (2.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="fixed_iterations"):
            est.to_torch(fixed_iterations=bad)
    explicit, _ = _fit(ExplicitRegressor, data, "single")
    with pytest.raises(ValueError, match="fixed_iterations=5 sets the fixed-point loop of a DEQ's module"):
        explicit.to_torch(fixed_iterations=5)


ACTIVATION_CASES = [ACTIVATIONS[name] for name in sorted(ACTIVATIONS)] + [
    LeakyReLU(1.3, -0.2),
    HardTanh(0.7, 1.5),
    Quadratic(0.4, -1.1),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("act", ACTIVATION_CASES, ids=repr)
def test_activation_modules_equal_the_library_torch_forms_bitwise(act, dtype):
    x = torch.randn(37, 19, generator=torch.Generator().manual_seed(0), dtype=dtype) * 3
    assert torch.equal(activation_module(act, "Test")(x), act.torch(x))


def test_fixed_iterations_above_the_maximum_are_refused_naming_it(data):
    est, _ = _fit(DEQRegressor, data, "single")
    for bad in (MAX_FIXED_ITERATIONS + 1, 10**20):  # 10**20 evaluations would never return
        with pytest.raises(ValueError, match=rf"fixed_iterations={bad} is more than MAX_FIXED_ITERATIONS=10000"):
            est.to_torch(fixed_iterations=bad)
    for good in (MAX_FIXED_ITERATIONS, np.int64(7)):
        assert est.to_torch(fixed_iterations=good).features.fixed_iterations == good


@pytest.mark.parametrize("cls", [DEQClassifier, DEQRegressor])
def test_exporting_a_deqs_module_is_an_error_naming_to_torch_and_to_torch_exports(cls, data, rel_error):
    est, X = _fit(cls, data, _kinds(cls)[0], dtype="float64")
    x = torch.as_tensor(X[:10])
    with pytest.raises(
        RuntimeError,
        match=r"\(an estimator's module_\) cannot be exported\. Export est\.to_torch\(fixed_iterations=N\)",
    ):
        torch.export.export(est.module_, (x,))
    program = torch.export.export(est.to_torch(fixed_iterations=est.fixed_point_max_iter), (x,))
    with torch.no_grad():
        assert rel_error(program.module()(x).numpy(), _reference(est, X[:10])) <= est.fixed_point_tol


@pytest.mark.parametrize("cls", EXPLICIT, ids=lambda c: c.__name__)
def test_the_module_of_an_explicit_or_matched_network_exports_as_it_is(cls, data):
    est, X = _fit(cls, data, _kinds(cls)[0])
    x = torch.as_tensor(X[:10], dtype=torch.float32)  # module_ takes scaled inputs in the network's dtype
    program = torch.export.export(est.module_, (x,))
    with torch.no_grad():
        assert torch.equal(program.module()(x), est.module_(x))
