"""ImplicitCKRidge with a ``device`` (torch's CPU here): the same model as without, its kernel never on the host."""

import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

import sk_deq.kernel_ridge._base as base_module
import sk_deq.kernel_ridge._plan as plan_module
from sk_deq import ImplicitCKRidge, ImplicitCKRidgeClassifier
from sk_deq.kernels import ImplicitKernelEngine

torch = pytest.importorskip("torch")

PAGE = Path(__file__).resolve().parents[2] / "docs" / "kernel_ridge.rst"


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X[:300], y[:300], X[300:]


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize(
    "params",
    [
        {"solver": "cholesky"},
        {"solver": "cg", "tol": 1e-13},
        {"alpha": [1.0, 0.1, 0.01], "tol": 1e-13},  # the candidates by conjugate gradients, then Cholesky
    ],
    ids=["cholesky", "cg", "candidates"],
)
def test_a_fit_on_a_device_is_the_fit_without_one_to_1e_8(diabetes, params, monkeypatch):
    X, y, X_test = diabetes
    w = np.random.default_rng(0).uniform(0.2, 2, len(X))
    kw = {"alpha": 0.1, "storage": "float64", "random_state": 0, **params}
    ref = ImplicitCKRidge(**kw).fit(X, y, sample_weight=w)
    expected = ref.predict(X_test)
    # on the device the kernel's tiles and the test kernel never reach the host
    monkeypatch.setattr(ImplicitKernelEngine, "kernel", lambda *a, **k: pytest.fail("a kernel block on the host"))
    model = ImplicitCKRidge(device="cpu", **kw).fit(X, y, sample_weight=w)
    assert model.fit_plan_.device == "cpu" and not model.fit_plan_.separate
    assert _rel(model.predict(X_test), expected) <= 1e-8
    assert isinstance(model.dual_coef_, np.ndarray) and model.solver_ == ref.solver_
    if "alpha" in params:
        assert model.alpha_ == ref.alpha_
        np.testing.assert_allclose(model.alpha_scores_, ref.alpha_scores_, rtol=1e-8)


def test_the_store_and_the_solver_live_on_the_device(diabetes, monkeypatch):
    import sk_deq.kernel_ridge._fit as fit_module

    X, y, _ = diabetes
    made, new_store = [], fit_module.new_store
    monkeypatch.setattr(fit_module, "new_store", lambda *a: made.append(new_store(*a)) or made[-1])
    ImplicitCKRidge(solver="cg", device="cpu").fit(X, y)
    ImplicitCKRidge(solver="cg").fit(X, y)
    assert [type(s).__name__ for s in made] == ["TorchTileStore", "TileStore"]
    assert made[0]._buf.dtype == torch.float64 and made[0].ops.device == torch.device("cpu")


def test_the_classifier_on_a_device(diabetes):
    X, y = load_digits(return_X_y=True)
    ref = ImplicitCKRidgeClassifier(alpha=0.01).fit(X[:400], y[:400])
    clf = ImplicitCKRidgeClassifier(alpha=0.01, device="cpu").fit(X[:400], y[:400])
    assert _rel(clf.decision_function(X[400:600]), ref.decision_function(X[400:600])) <= 1e-8
    np.testing.assert_array_equal(clf.predict(X[400:600]), ref.predict(X[400:600]))


def test_a_model_fitted_on_a_device_pickles_and_predicts_without_one(diabetes):
    X, y, X_test = diabetes
    model = ImplicitCKRidge("tanh", solver="cg", device="cpu", tol=1e-12).fit(X, y)
    again = pickle.loads(pickle.dumps(model))
    assert not any(isinstance(v, torch.Tensor) for v in vars(again).values())
    on_device = again.predict(X_test)
    np.testing.assert_array_equal(on_device, model.predict(X_test))
    host = again.set_params(device=None).predict(X_test)  # the numpy engine, no torch needed
    assert _rel(host, on_device) <= 1e-10


def test_the_plan_of_a_gpu_counts_its_memory_and_refuses_with_the_ways_out():
    ways = base_module._WAYS_OUT_GPU + base_module._WAYS_OUT
    kw = {"storage": "float32", "solver": "cg", "rank": 100, "available": 2**40, "alternatives": ways}
    plan = plan_module.plan_fit(20000, 784, 10, device="cuda:0", device_available=2**40, **kw)
    host = plan_module.plan_fit(20000, 784, 10, **kw)
    assert plan.separate and plan.on_device == plan.store + plan.vectors + plan.blocks + plan.factor_copy
    assert plan.factor_copy == 8 * 20000 * 100 and plan.on_host == plan.samples + plan.factor
    assert plan.store == host.store and host.on_device == 0 and host.on_host == host.total
    assert re.search(r"needs .* GiB on cuda:0, of 1.02e\+03 GiB available.*on the host", plan.describe())
    # the device is short, the host is not: refused, naming the device's memory and the ways out
    with pytest.raises(MemoryError, match=r"on cuda:0, of .* available.*Ways out: device=None.*float32.*Dask"):
        plan_module.plan_fit(20000, 784, 10, device="cuda:0", device_available=plan.on_device - 1, **kw)
    # 'auto' storage: float64 where the device holds it, else float32
    f64 = plan_module.plan_fit(20000, 784, 10, device="cuda", device_available=2**40, available=2**40)
    auto = plan_module.plan_fit(
        20000, 784, 10, device="cuda", device_available=(f64.on_device + plan.on_device) // 2, available=2**40
    )
    assert f64.dtype == np.float64 and auto.dtype == np.float32
    # torch's CPU device: the host's memory for all of it
    cpu = plan_module.plan_fit(20000, 784, 10, device="cpu", **kw)
    assert not cpu.separate and cpu.on_device == 0 and cpu.factor_copy == 0


def test_what_a_card_holds_on_the_page_is_the_plan_s():
    """The page's figures for an 80 GB card are computed from the plan (not measured): they stay its."""
    text = " ".join(PAGE.read_text().split())
    m = re.search(r"80 GB card.*?holds the lower triangle of ([\d,]+) rows in float32 and ([\d,]+) in float64", text)
    assert m, "the page states what an 80 GB card holds"
    kw = {"solver": "cg", "rank": ImplicitCKRidge().preconditioner_rank, "device": "cuda"}  # the default rank
    for figure, storage in zip(m.groups(), ("float32", "float64")):
        assert int(figure.replace(",", "")) == plan_module.largest_fit(80 * 10**9, 784, 10, storage=storage, **kw)
    # the full square in float32 would hold fewer: sqrt(80e9 / 4)
    assert int(m.group(1).replace(",", "")) > int(np.sqrt(80e9 / 4)) > 140_000


def test_largest_fit_is_the_boundary_of_the_plan():
    kw = {"storage": "float32", "solver": "cg", "rank": 10}
    n = plan_module.largest_fit(10**8, 20, 2, **kw)
    plan_module.plan_fit(n, 20, 2, available=10**8, **kw)
    with pytest.raises(MemoryError):
        plan_module.plan_fit(n + 1, 20, 2, available=10**8, **kw)


@parametrize_with_checks([ImplicitCKRidge(solver="cg", alpha=[1.0, 0.1], device="cpu")])
def test_scikit_learn_estimator_checks_with_a_device(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)
