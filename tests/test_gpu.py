"""CUDA against the CPU: every estimator, the kernels, pickling from CUDA, batch invariance and host syncs on CUDA.

Run on a machine with a CUDA GPU with ``python -m pytest -m gpu tests/test_gpu.py``.
Without CUDA the whole module is skipped (one "skipped" line naming the
reason), so the default runs (``-m "not slow"``) pass on any machine.  Every
other test runs on the CPU whatever the hardware: the root conftest pins
``device='auto'`` to the CPU (``SK_DEQ_DEVICE=cpu``) except in ``gpu``-marked
tests.

Tolerances, relative to the largest magnitude of the CPU's outputs:

* The same fitted model predicting on both devices (:data:`PREDICT_TOL`):
  1e-4 in float32, 1e-10 in float64.  cuBLAS and MKL sum the products in
  different orders (about 1e-7 relative per float32 product of these widths)
  and the fixed point amplifies the difference by ``1 / (1 - contraction)``
  (a few times for ``sigma_a2 = 0.2``); the DEQs here are solved to
  ``fixed_point_tol`` 1e-6 (float32) and 1e-12 (float64), so that a sample
  frozen one iteration apart on the two devices moves its features by less
  than the tolerance.  Predicted labels are equal wherever the CPU's two
  largest scores are further apart than twice the tolerance.
* A model fitted on each device (float64, :data:`FIT_TOL` 1e-6): the hidden
  weights are drawn on the CPU on both and are equal bitwise; the readout's
  L-BFGS (the torch back end on both: CUDA's default) then runs on
  features that agree to about 1e-13, and its iterates (stopped at ``tol``
  1e-4) agree far below 1e-6.  In float32 the
  features differ by about 1e-6 and L-BFGS can take another path: only the
  labels are compared (at least 98 % equal).  By default CUDA fits the
  readout with the torch L-BFGS back end and the CPU with scipy's, whose
  line searches differ (seen on an H200: 4e-3 apart for the classifiers at
  ``tol`` 1e-4); the comparison runs the torch back end on both.
* The exact kernels in float64 (:data:`KERNEL_TOL`): 1e-10 absolute on
  entries of order one, as between the numpy and torch CPU engines (1e-12).
* Batch invariance on CUDA (:data:`BATCH_TOL`): 1e-5 in float32, 1e-12 in
  float64.  Every block of rows has one shape (``sk_deq.estimators._network``), so the
  same kernel runs on every block, but cuBLAS may still choose by the
  alignment of a block's rows: not bitwise, within rounding.

Run on one NVIDIA H200 (torch 2.11, CUDA 13.0): all 46 tests of the time
passed, those of ``stage_inputs`` in fit and of the weight draws included
(three runs).  ``test_numpy_inputs_of_a_cuda_predict_are_moved_there_once``
was added after them, without a GPU, and has not run on one; nor have
the three exact kernel ridge tests at the end (added without a GPU, their
bodies run on torch's CPU device).  The tolerances above are argued from
rounding; the differences seen there were inside them (batch invariance on
CUDA was bitwise, see benchmarks/gpu/fit.py).
"""

import functools
import os
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

from sklearn.datasets import make_classification  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402

from sk_deq import (  # noqa: E402
    DEQClassifier,
    ExplicitClassifier,
    ImplicitCKNystroem,
    ImplicitCKTransformer,
    MatchedExplicitClassifier,
    MatchedExplicitRegressor,
)
from sk_deq.kernels import implicit_kernel  # noqa: E402
from tests._networks import NETWORKS  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]

#: The GPU every test compares with the CPU.
CUDA = "cuda"
PREDICT_TOL = {"float32": 1e-4, "float64": 1e-10}
FIT_TOL = 1e-6
KERNEL_TOL = 1e-10
BATCH_TOL = {"float32": 1e-5, "float64": 1e-12}
FIXED_POINT_TOL = {"float32": 1e-6, "float64": 1e-12}
ESTIMATORS = NETWORKS
BATCH_SIZES = (1, 7, 63, 64, 65, 300)


def _make(cls, dtype, device, **kw):
    common = dict(n_hidden=128, max_iter=50, dtype=dtype, device=device, random_state=0) | kw
    if cls.__name__.startswith("DEQ"):
        return cls("tanh", 0.2, fixed_point_tol=FIXED_POINT_TOL[dtype], fixed_point_max_iter=200, **common)
    if cls.__name__.startswith("Explicit"):
        return cls(("gelu", "silu"), **common)
    return cls("tanh", 0.3, **common)


def _is_regressor(est) -> bool:
    return type(est).__name__.endswith("Regressor")


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=300, n_features=10, n_informative=6, n_classes=3, random_state=0)
    return X, y, np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2]


def _fit(cls, dtype, device, data, **kw):
    X, labels, values = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return _make(cls, dtype, device, **kw).fit(X, values if cls.__name__.endswith("Regressor") else labels)


def _close(got, ref, tol, what):
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max(), err_msg=what)


def _same_labels_away_from_ties(est_ref, est, X, atol):
    scores = est_ref.decision_function(X)
    top2 = np.sort(scores, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * atol
    np.testing.assert_array_equal(est.predict(X)[clear], est_ref.predict(X)[clear])
    assert clear.mean() > 0.9  # the comparison covers most samples


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_the_same_model_predicts_alike_on_cuda_and_cpu(cls, dtype, data, outputs):
    X = data[0]
    cpu = _fit(cls, dtype, "cpu", data)
    gpu = pickle.loads(pickle.dumps(cpu)).set_params(device=CUDA)
    ref, got = outputs(cpu, X), outputs(gpu, X)
    assert next(gpu.module_.parameters()).device.type == "cuda"
    tol = PREDICT_TOL[dtype]
    _close(got, ref, tol, f"{cls.__name__} {dtype}")
    if not _is_regressor(cpu):
        _same_labels_away_from_ties(cpu, gpu, X, tol * np.abs(ref).max())


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_a_fit_on_cuda_matches_a_fit_on_the_cpu(cls, data, monkeypatch, outputs):
    import sk_deq.estimators._base as base

    X = data[0]
    # CUDA fits the readout with the torch L-BFGS; the CPU, by default, with scipy's, whose line search takes
    # another path (tests/nn/test_fit.py compares the two): here the CPU runs the CUDA fit's back end
    monkeypatch.setattr(base, "train_readout", functools.partial(base.train_readout, lbfgs_backend="torch"))
    cpu, gpu = _fit(cls, "float64", "cpu", data), _fit(cls, "float64", CUDA, data)
    assert gpu.device_.startswith("cuda") and cpu.device_ == "cpu"
    for name, value in cpu.module_.features.state_dict().items():  # drawn on the CPU for both
        assert torch.equal(gpu.module_.features.state_dict()[name].cpu(), value), name
    _close(outputs(gpu, X), outputs(cpu, X), FIT_TOL, cls.__name__)
    cpu32, gpu32 = _fit(cls, "float32", "cpu", data), _fit(cls, "float32", CUDA, data)
    if _is_regressor(cpu32):
        assert abs(gpu32.score(X, data[2]) - cpu32.score(X, data[2])) < 0.01
    else:
        assert (gpu32.predict(X) == cpu32.predict(X)).mean() >= 0.98


@pytest.mark.parametrize("kernel", ["ck", "ntk"])
@pytest.mark.parametrize("activation", ["relu", "leaky_relu", "tanh", "gelu", "silu"])
def test_the_kernels_on_cuda_match_the_cpu(activation, kernel, data):
    X, Z = data[0][:120], data[0][120:160]
    numpy_engine = ImplicitCKTransformer(activation, kernel=kernel).fit(X)
    ref = numpy_engine.transform(Z)
    for device in (CUDA, torch.device(CUDA)):
        got = ImplicitCKTransformer(activation, kernel=kernel, device=device).fit(X).transform(Z)
        np.testing.assert_allclose(got, ref, rtol=0, atol=KERNEL_TOL)
    K = implicit_kernel(X, activation=activation, kernel=kernel)
    np.testing.assert_allclose(
        implicit_kernel(X, activation=activation, kernel=kernel, device=CUDA), K, atol=KERNEL_TOL
    )


def test_the_nystroem_features_on_cuda_match_the_cpu(data):
    X = data[0]
    ref = ImplicitCKNystroem("tanh", n_components=40, random_state=0).fit(X).transform(X)
    got = ImplicitCKNystroem("tanh", n_components=40, random_state=0, device=CUDA).fit(X).transform(X)
    # the features are determined up to a rotation of the landmark space: compare the kernel they approximate
    np.testing.assert_allclose(got @ got.T, ref @ ref.T, rtol=0, atol=1e-8)


@pytest.fixture(scope="module")
def fitted_on_cuda(data):
    return {cls: _fit(cls, "float64", CUDA, data) for cls in ESTIMATORS}


def test_a_model_pickled_on_cuda_predicts_on_the_cpu(fitted_on_cuda, data, outputs):
    X = data[0]
    for cls, est in fitted_on_cuda.items():
        loaded = pickle.loads(pickle.dumps(est)).set_params(device="cpu")
        got = outputs(loaded, X)
        assert next(loaded.module_.parameters()).device.type == "cpu"
        _close(got, outputs(est, X), PREDICT_TOL["float64"], cls.__name__)


def test_a_model_pickled_on_cuda_loads_in_a_process_without_cuda(fitted_on_cuda, data, tmp_path, outputs):
    X = data[0]
    for i, est in enumerate(fitted_on_cuda.values()):
        (tmp_path / f"{i}.pkl").write_bytes(pickle.dumps(est))
        np.save(tmp_path / f"{i}.npy", outputs(est, X))
    np.save(tmp_path / "X.npy", X)
    code = f"""
import pickle, numpy as np, torch
assert not torch.cuda.is_available()
X = np.load({str(tmp_path / "X.npy")!r})
for i in range({len(fitted_on_cuda)}):
    est = pickle.loads(open({str(tmp_path)!r} + f"/{{i}}.pkl", "rb").read())
    try:
        est.predict(X)
    except ValueError as e:
        assert "CUDA is not available" in str(e), e
    else:
        raise AssertionError("device='cuda' predicted without CUDA")
    est.set_params(device="auto")
    out = est.predict(X).reshape(len(X), -1) if type(est).__name__.endswith("Regressor") else np.hstack(
        [est.decision_function(X), est.predict_proba(X)])
    ref = np.load({str(tmp_path)!r} + f"/{{i}}.npy")
    np.testing.assert_allclose(out, ref, rtol={PREDICT_TOL["float64"]}, atol={PREDICT_TOL["float64"]} * np.abs(ref).max())
"""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "cls", [DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier], ids=lambda c: c.__name__
)
def test_predict_on_cuda_does_not_depend_on_the_batch(cls, dtype, data, outputs):
    X = data[0]
    est = _fit(cls, dtype, CUDA, data)
    full = outputs(est, X)
    order = np.random.default_rng(0).permutation(len(X))
    for size in BATCH_SIZES:
        rows = order[: 16 if size == 1 else None]
        parts = np.concatenate([outputs(est, X[rows[i : i + size]]) for i in range(0, len(rows), size)])
        _close(parts, full[rows], BATCH_TOL[dtype], f"batches of {size} rows")


def test_a_deq_predict_on_cuda_syncs_once_per_iteration(data, count_host_syncs):
    X, y = data[0][:64], data[1][:64]  # one block of rows: one solve
    counts = {}
    for n_iter in (10, 20):
        est = DEQClassifier(
            n_hidden=64, fixed_point_solver="iteration", fixed_point_max_iter=n_iter, fixed_point_tol=1e-14,
            random_state=0, device=CUDA,
        ).fit(X, y)  # fmt: skip
        with count_host_syncs() as syncs:
            est.decision_function(X)
        assert est.fixed_point_info_["n_iter"] == n_iter
        counts[n_iter] = syncs.total
    assert counts[20] - counts[10] == 10


def test_tf32_stays_off_on_cuda_when_the_caller_allows_it(data, monkeypatch):
    X = data[0]
    est = _fit(DEQClassifier, "float32", CUDA, data)
    ref = est.decision_function(X)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        np.testing.assert_array_equal(est.decision_function(X), ref)  # the same kernels: pinned to 'highest'
        assert torch.get_float32_matmul_precision() == "high"
        monkeypatch.setenv("SK_DEQ_ALLOW_TF32", "1")
        tf32 = est.decision_function(X)
    finally:
        torch.set_float32_matmul_precision(before)
    if torch.cuda.get_device_capability()[0] >= 8:  # Ampere and later compute float32 products in TF32 when allowed
        assert not np.array_equal(tf32, ref)


def test_the_readout_lbfgs_on_cuda_runs_on_the_device_and_reaches_scipys_loss(count_host_syncs):
    from sk_deq.nn.readout import ReadoutObjective, fit_readout

    g = torch.Generator().manual_seed(0)
    Z, y = torch.randn(2000, 64, generator=g), torch.randint(0, 5, (2000,), generator=g)
    losses = {}
    for device, backend in ((CUDA, "auto"), ("cpu", "scipy")):
        lin = torch.nn.Linear(64, 5, dtype=torch.float64, device=device)
        with torch.no_grad():
            lin.weight.zero_()
            lin.bias.zero_()
        objective = ReadoutObjective(Z.to(device), y.to(device), 5, alpha=1e-3)
        with count_host_syncs() as syncs:
            info = fit_readout(lin, objective, tol=1e-9, ftol=0.0, max_iter=1000, backend=backend)
        assert info.converged
        losses[device] = info.loss
        if device == CUDA:  # the torch back end: one packed read per evaluation, nothing else
            assert isinstance(info.x, torch.Tensor) and info.x.device.type == "cuda"
            assert syncs.total <= info.n_eval + 2 and syncs.total <= 2 * info.n_iter
    assert losses[CUDA] == pytest.approx(losses["cpu"], rel=1e-7)


@pytest.mark.parametrize("cls", [DEQClassifier, MatchedExplicitRegressor], ids=lambda c: c.__name__)
def test_a_cuda_tensor_fits_and_predicts_as_numpy_on_cuda(cls, data, outputs):
    X, labels, values = data
    y = values if cls.__name__.endswith("Regressor") else labels
    T = torch.tensor(X, device=CUDA)
    ref, est = _make(cls, "float64", CUDA).fit(X, y), _make(cls, "float64", CUDA).fit(T, y)
    np.testing.assert_allclose(est.input_mean_, ref.input_mean_, rtol=0, atol=1e-15)
    out = outputs(est, T)
    assert isinstance(out, np.ndarray)
    _close(out, outputs(ref, X), PREDICT_TOL["float64"], cls.__name__)
    cpu = pickle.loads(pickle.dumps(est)).set_params(device="cpu")  # a CUDA tensor on a CPU estimator: moved
    _close(outputs(cpu, T), outputs(ref, X), PREDICT_TOL["float64"], cls.__name__)


@pytest.mark.parametrize("cls", [DEQClassifier, MatchedExplicitRegressor], ids=lambda c: c.__name__)
def test_numpy_inputs_of_a_cuda_fit_are_moved_there_once(monkeypatch, cls, data, outputs):
    """``stage_inputs``: one copy of ``X`` to the GPU, then the CUDA-tensor path, whose results it gives."""
    import sk_deq.estimators._base as tb

    X, labels, values = data
    y = values if cls.__name__.endswith("Regressor") else labels
    staged = []
    stage = tb.stage_inputs
    monkeypatch.setattr(tb, "stage_inputs", lambda X, device: staged.append(stage(X, device)) or staged[-1])
    est = _make(cls, "float64", CUDA).fit(X, y)
    assert len(staged) == 1 and isinstance(staged[0], torch.Tensor) and staged[0].device.type == "cuda"
    ref = _make(cls, "float64", CUDA).fit(torch.tensor(X, device=CUDA), y)
    np.testing.assert_array_equal(est.input_mean_, ref.input_mean_)
    _close(outputs(est, X), outputs(ref, X), PREDICT_TOL["float64"], cls.__name__)


@pytest.mark.parametrize("cls", [DEQClassifier, MatchedExplicitRegressor], ids=lambda c: c.__name__)
def test_numpy_inputs_of_a_cuda_predict_are_moved_there_once(monkeypatch, cls, data, outputs):
    """``stage_inputs`` in predict: one copy of ``X`` per call, then the CUDA-tensor path, whose outputs it gives."""
    import sk_deq.estimators._base as tb

    X, labels, values = data
    est = _make(cls, "float64", CUDA).fit(X, values if cls.__name__.endswith("Regressor") else labels)
    want = outputs(est, torch.tensor(X, device=CUDA))
    staged = []
    stage = tb.stage_inputs
    monkeypatch.setattr(tb, "stage_inputs", lambda X, device: staged.append(stage(X, device)) or staged[-1])
    got = outputs(est, X)
    assert staged and all(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in staged)
    _close(got, want, PREDICT_TOL["float64"], cls.__name__)


def test_the_input_scaling_statistics_on_cuda_match_the_cpu(data):
    from sk_deq._scaling import fit_input_scaling

    X, weight = data[0], np.linspace(0.0, 1.0, len(data[0]))
    want = fit_input_scaling(X, "global", weight)
    mean, scale, _ = fit_input_scaling(torch.tensor(X, device=CUDA), "global", weight, device=torch.device(CUDA))
    assert abs(scale - want[1]) <= 1e-12 * want[1]
    assert np.linalg.norm(mean - want[0]) <= 1e-12 * np.linalg.norm(want[0])


def test_weights_drawn_for_cuda_are_the_cpu_draws_bitwise():
    """The draw stays on the host (numpy streams in float64), then moves: the same bits on both devices."""
    from sk_deq.nn.layers import gaussian_weights

    for dtype in (torch.float32, torch.float64):
        on_cuda = gaussian_weights(300, 70, torch.Generator().manual_seed(3), dtype=dtype, device=CUDA)
        on_cpu = gaussian_weights(300, 70, torch.Generator().manual_seed(3), dtype=dtype)
        assert on_cuda.device.type == "cuda" and torch.equal(on_cuda.cpu(), on_cpu)


# -- exact kernel ridge on the device -------------------------------------------------------------


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_kernel_ridge_on_cuda_matches_the_cpu(data, solver):
    """The kernel (1e-12 apart, KERNEL_TOL), stored and solved on CUDA: float64 predictions within 1e-8 of the host's."""
    from sk_deq import ImplicitCKRidge, ImplicitCKRidgeClassifier

    X, labels, values = data
    kw = {"alpha": 0.01, "solver": solver, "tol": 1e-12, "storage": "float64", "random_state": 0}
    ref = ImplicitCKRidge(**kw).fit(X[:250], values[:250])
    model = ImplicitCKRidge(device=CUDA, **kw).fit(X[:250], values[:250])
    assert model.fit_plan_.separate and model.fit_plan_.device.startswith("cuda")
    got, expected = model.predict(X[250:]), ref.predict(X[250:])
    assert np.abs(got - expected).max() <= 1e-8 * np.abs(expected).max()
    # pickled from CUDA, predicting on the host
    host = pickle.loads(pickle.dumps(model)).set_params(device=None).predict(X[250:])
    assert np.abs(host - expected).max() <= 1e-8 * np.abs(expected).max()
    clf = ImplicitCKRidgeClassifier(device=CUDA, **kw).fit(X[:250], labels[:250])
    clf_ref = ImplicitCKRidgeClassifier(**kw).fit(X[:250], labels[:250])
    scores, ref_scores = clf.decision_function(X[250:]), clf_ref.decision_function(X[250:])
    assert np.abs(scores - ref_scores).max() <= 1e-8 * np.abs(ref_scores).max()


def test_kernel_ridge_float32_storage_on_cuda_keeps_its_bound_and_no_tf32(data):
    """Float32 storage on CUDA within the documented u ||K||_2 / alpha of float64's, TF32 off whatever the caller set."""
    from sk_deq import ImplicitCKRidge, ImplicitCKTransformer

    X, _, values = data
    alpha = 0.01
    ref = ImplicitCKRidge(alpha=alpha, storage="float64").fit(X[:250], values[:250]).predict(X[250:])
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        model = ImplicitCKRidge(alpha=alpha, storage="float32", device=CUDA).fit(X[:250], values[:250])
        got = model.predict(X[250:])
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)
    norm = np.linalg.eigvalsh(ImplicitCKTransformer().fit_transform(X[:250]))[-1]
    assert model.fit_plan_.dtype == np.float32
    assert np.abs(got - ref).max() / np.abs(ref).max() <= 2.0**-24 * norm / alpha


def test_a_conjugate_gradient_iteration_on_cuda_waits_for_the_device_once(count_host_syncs):
    """On CUDA the count is complete (copies to the host included): one read per iteration, its largest residual."""
    from sk_deq.kernel_ridge._solvers import NystromPreconditioner, low_rank_factor, pcg
    from sk_deq.kernel_ridge._torch_tiles import TorchTileStore

    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 20))
    K = X @ X.T / 20 + 1.0
    st = TorchTileStore(600, 256, np.float64, CUDA)
    for i, j in st.pairs():
        st.fill(i, j, K[st.rows(i), st.rows(j)])
    M = NystromPreconditioner(low_rank_factor(st, 50, rng)[0], 1e-6, st.ops)
    Y = rng.standard_normal((600, 10))
    counts = {}
    for max_iter in (10, 20):
        with count_host_syncs() as syncs:
            pcg(st.matmat, Y, 1e-6, M, tol=1e-300, max_iter=max_iter, ops=st.ops)
        counts[max_iter] = syncs.total
    assert counts[20] - counts[10] == 10
