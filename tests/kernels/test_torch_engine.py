"""The exact implicit kernels in torch (``device=...``) against the numpy engine."""

import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import WhiteKernel
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

from sk_deq import ImplicitCKNystroem, ImplicitCKTransformer
from sk_deq.kernels import ImplicitKernelEngine
from sk_deq.gaussian_process import ImplicitCKKernel

torch = pytest.importorskip("torch")

KERNELS = ["ck", "feature", "ntk"]
TOL = 1e-10  # max abs difference, relative to the kernel's largest entry


def _bumpy(x):
    """A custom activation (a plain callable, kinked at 0): the Hermite route."""
    return np.tanh(x) + 0.3 * np.maximum(x, 0.0)


ACTIVATIONS = {
    "relu": "relu",
    "leaky_relu": "leaky_relu",
    "tanh": "tanh",
    "gelu": "gelu",
    "erf": "erf",
    "silu": "silu",
    "sigmoid": "sigmoid",
    "custom": _bumpy,
}


@pytest.fixture(scope="module")
def rows(unit_rows):
    """``rows(seed=0, n=45, m=20, p=6)``: rows with a duplicate, a zero row and a near-duplicate; a second set
    sharing one row with the first."""

    def with_a_second_set(m):
        def then(X, rng):
            p = X.shape[1]
            X[7] = X[3]  # duplicate
            X[11] = 0.0  # zero norm
            X[12] = X[4] + 1e-4 * rng.standard_normal(p)  # correlation near 1
            Y = rng.standard_normal((m, p)) / np.sqrt(p) * 1.5
            Y[2] = X[5]
            Y[3] = 0.0
            return X, Y

        return then

    return lambda seed=0, n=45, m=20, p=6: unit_rows(n, p, seed, scale="features", then=with_a_second_set(m))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_torch_engine_agrees_with_the_numpy_engine(name, kernel, rows, rel_error):
    X, Y = rows()
    act = ACTIVATIONS[name]
    ref = ImplicitKernelEngine(act, 0.3, 1.0, kernel=kernel)
    eng = ImplicitKernelEngine(act, 0.3, 1.0, kernel=kernel, device="cpu")
    assert eng.method == ref.method
    SX0, SY0 = ref.prepare(X), ref.prepare(Y)
    SX, SY = eng.prepare(X), eng.prepare(Y)
    K0, C0 = ref.kernel(SX0), ref.kernel(SY0, SX0)
    # small blocks: many of them, diagonal and off-diagonal, ragged edges
    K, C = eng.kernel(SX, block_size=16), eng.kernel(SY, SX, block_size=7)
    for A in (K, C):
        assert isinstance(A, np.ndarray) and A.dtype == np.float64
    assert rel_error(K, K0) <= TOL
    assert rel_error(C, C0) <= TOL
    np.testing.assert_array_equal(K, K.T)  # exactly symmetric
    np.testing.assert_array_equal(np.diag(K), ref.diagonal(SX0))
    # one block gives the same as many (up to the tolerance: the degrees follow the blocks)
    assert rel_error(eng.kernel(SX), K) <= TOL
    # duplicates are the diagonal, as in the numpy engine
    np.testing.assert_allclose(K[3, 7], K[3, 3], rtol=1e-12)
    np.testing.assert_allclose(C[2, 5], K[5, 5], rtol=1e-12)


def test_prepared_samples_serve_both_engines(rows, rel_error):
    # samples prepared without a device (erf: closed form, no Hermite data) work on one, and conversely
    X, Y = rows(1)
    ref = ImplicitKernelEngine("erf", 0.4, 1.0, kernel="ntk")
    eng = ref.with_device("cpu")
    assert eng is not ref and eng.device == torch.device("cpu") and ref.device is None
    assert eng.with_device(torch.device("cpu")) is eng and ref.with_device(None) is ref
    S0 = ref.prepare(X)
    assert "H" not in S0.arrays and "H" in eng.prepare(X).arrays
    assert rel_error(eng.kernel(S0), ref.kernel(S0)) <= TOL
    assert rel_error(ref.kernel(eng.prepare(Y), eng.prepare(X)), ref.kernel(ref.prepare(Y), S0)) <= 1e-13


def test_entries_no_hermite_degree_resolves_go_to_quadrature(monkeypatch, rel_error):
    from sk_deq.kernels._mehler import MehlerDual

    calls = []
    solve = MehlerDual.polar_solve

    def counting(self, rho0, *args):
        calls.append(len(rho0))
        return solve(self, rho0, *args)

    monkeypatch.setattr(MehlerDual, "polar_solve", counting)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((12, 4)) / 2.0
    X[1] = X[0] + 1e-6 * rng.standard_normal(4)  # correlation 1 - O(1e-12): a kinked activation needs quadrature
    for kernel in KERNELS:
        ref = ImplicitKernelEngine(_bumpy, 0.3, 1.0, kernel=kernel)
        eng = ImplicitKernelEngine(_bumpy, 0.3, 1.0, kernel=kernel, device="cpu")
        assert rel_error(eng.kernel(eng.prepare(X)), ref.kernel(ref.prepare(X))) <= TOL
    assert calls and min(calls) >= 1


def test_out_and_n_jobs(rows):
    X, Y = rows(2)
    eng = ImplicitKernelEngine("tanh", 0.2, 1.0, device="cpu")
    SX, SY = eng.prepare(X), eng.prepare(Y)
    out = np.full((len(Y), len(X)), np.nan)
    assert eng.kernel(SY, SX, out=out, n_jobs=2) is out
    np.testing.assert_array_equal(out, eng.kernel(SY, SX))
    assert eng.kernel(SY.take(slice(0, 0)), SX).shape == (0, len(X))


@pytest.mark.parametrize(("act", "kernel"), [("relu", "ck"), ("tanh", "ntk"), (_bumpy, "feature")])
def test_the_device_kernel_is_the_kernel_bitwise_on_the_device(rows, act, kernel):
    """``device_kernel`` assembles the same blocks on the device: equal bitwise to ``kernel``, bias and mirror included."""
    X, Y = rows(3)
    eng = ImplicitKernelEngine(act, 0.3, 1.0, kernel=kernel, bias_variance=0.7, device="cpu")
    SX, SY = eng.prepare(X), eng.prepare(Y)
    for block in (None, 16):  # one block, and many: diagonal, off-diagonal and ragged ones
        K, C = eng.device_kernel(SX, block_size=block), eng.device_kernel(SY, SX, block_size=block)
        assert isinstance(K, torch.Tensor) and K.dtype == torch.float64 and K.device == eng.device
        np.testing.assert_array_equal(K.numpy(), eng.kernel(SX, block_size=block))
        np.testing.assert_array_equal(C.numpy(), eng.kernel(SY, SX, block_size=block))
        np.testing.assert_array_equal(K.numpy(), K.numpy().T)
    with pytest.raises(ValueError, match=r"device_kernel needs an engine with a device.*kernel\(\)"):
        eng.with_device(None).device_kernel(SX)


# -- the estimators -------------------------------------------------------------------------------


@parametrize_with_checks(
    [
        ImplicitCKTransformer(device="cpu"),
        ImplicitCKTransformer("tanh", kernel="ntk", device="cpu"),
        ImplicitCKNystroem("gelu", n_components=4, landmarks="rpcholesky", random_state=0, device="cpu"),
    ]
)
def test_sklearn_compatible_with_a_device(estimator, check):
    check(estimator)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("act", ["relu", "tanh", "gelu"])
def test_transformer_on_a_device_equals_the_default(act, kernel, rel_error):
    rng = np.random.default_rng(0)
    X, Z = rng.standard_normal((50, 5)) * 2 + 1, rng.standard_normal((13, 5)) * 2 + 1
    ref = ImplicitCKTransformer(act, 0.3, kernel=kernel, block_size=16)
    tr = ImplicitCKTransformer(act, 0.3, kernel=kernel, block_size=16, device="cpu")
    assert tr.get_params()["device"] == "cpu" and ref.get_params()["device"] is None
    K0, K = ref.fit_transform(X), tr.fit_transform(X)
    assert rel_error(K, K0) <= TOL
    assert rel_error(tr.transform(Z), ref.transform(Z)) <= TOL
    # the device of now is used: set back to None, the numpy engine
    assert rel_error(tr.set_params(device=None).transform(Z), ref.transform(Z)) <= 1e-13
    assert (
        rel_error(ref.set_params(device=torch.device("cpu")).transform(Z), ref.set_params(device=None).transform(Z))
        <= TOL
    )


@pytest.mark.parametrize("landmarks", ["kmeans++", "rpcholesky"])
@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_nystroem_on_a_device_equals_the_default(act, landmarks, rel_error):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, 6))
    kw = dict(kernel="ntk", n_components=20, landmarks=landmarks, random_state=0, block_size=25)
    ref = ImplicitCKNystroem(act, 0.2, **kw).fit(X)
    nys = ImplicitCKNystroem(act, 0.2, device="cpu", n_jobs=2, **kw).fit(X)
    np.testing.assert_array_equal(nys.component_indices_, ref.component_indices_)
    np.testing.assert_allclose(nys.normalization_, ref.normalization_, rtol=1e-7, atol=1e-9)
    Phi0, Phi = ref.transform(X), nys.transform(X)
    assert rel_error(Phi @ Phi.T, Phi0 @ Phi0.T) <= 1e-9
    assert rel_error(nys.set_params(device=None).transform(X), Phi) <= 1e-8


def test_gp_kernel_on_a_device_equals_the_default(rel_error):
    rng = np.random.default_rng(2)
    X, Z = rng.standard_normal((25, 3)) / 2, rng.standard_normal((6, 3)) / 2
    y = np.sin(X[:, 0])
    k0, k = ImplicitCKKernel("tanh", 0.3), ImplicitCKKernel("tanh", 0.3, device="cpu")
    assert k.get_params()["device"] == "cpu"
    K0, G0 = k0(X, eval_gradient=True)
    K, G = k(X, eval_gradient=True)
    assert rel_error(K, K0) <= TOL and rel_error(G, G0) <= 1e-6  # a finite difference of kernels agreeing to 1e-12
    assert rel_error(k(Z, X), k0(Z, X)) <= TOL
    np.testing.assert_allclose(k.diag(X), np.diag(K), rtol=1e-12)
    gp0 = GaussianProcessRegressor(k0 + WhiteKernel(1e-2), random_state=0).fit(X, y)
    gp = GaussianProcessRegressor(k + WhiteKernel(1e-2), random_state=0).fit(X, y)
    np.testing.assert_allclose(gp.predict(Z), gp0.predict(Z), rtol=1e-6, atol=1e-8)


# -- errors, pickling, imports ----------------------------------------------------------------------


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "meta"])
def test_a_bad_device_is_a_value_error_naming_the_parameter(device):
    X = np.random.default_rng(0).standard_normal((10, 3))
    for est in (ImplicitCKTransformer(device=device), ImplicitCKNystroem(n_components=3, device=device)):
        with pytest.raises(ValueError, match="device"):
            est.fit(X)
    with pytest.raises(ValueError, match="device"):
        ImplicitCKKernel(device=device)(X)
    with pytest.raises(ValueError, match="device"):
        ImplicitKernelEngine("relu", 0.2, 1.0, device=device)


def test_a_device_of_another_type_is_refused_by_parameter_validation():
    X = np.random.default_rng(0).standard_normal((10, 3))
    with pytest.raises(InvalidParameterError, match="'device' parameter"):
        ImplicitCKTransformer(device=0).fit(X)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_is_an_error_at_fit():
    X = np.random.default_rng(0).standard_normal((10, 3))
    for est in (ImplicitCKTransformer(device="cuda"), ImplicitCKNystroem(n_components=3, device="cuda:0")):
        with pytest.raises(ValueError, match=r"device='cuda(:0)?' was requested but CUDA is not available"):
            est.fit(X)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_fitted_on_a_gpu_and_loaded_without_one(rel_error):
    # what a transformer fitted with device='cuda' is on a CPU-only machine: its device says cuda,
    # which transform refuses as fit does (sk_deq.resolve_device), until set_params names the CPU
    rng = np.random.default_rng(4)
    X, Z = rng.standard_normal((30, 4)), rng.standard_normal((5, 4))
    ref = ImplicitCKTransformer("tanh", device="cpu").fit(X)
    tr = pickle.loads(pickle.dumps(ref))
    tr.device = "cuda"
    tr._engine.device = torch.device("cuda")
    with pytest.raises(ValueError, match="device='cuda' was requested but CUDA is not available"):
        tr.transform(Z)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        KZ = tr.set_params(device="cpu").transform(Z)
        np.testing.assert_array_equal(KZ, ref.transform(Z))
        assert rel_error(tr.set_params(device=None).transform(Z), KZ) <= TOL


def test_pickles():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((30, 4))
    for est in (ImplicitCKTransformer("gelu", device="cpu"), ImplicitCKNystroem(n_components=5, device="cpu")):
        est.fit(X)
        est.transform(X)  # the engine's device state exists
        back = pickle.loads(pickle.dumps(est))
        np.testing.assert_array_equal(back.transform(X), est.transform(X))


def test_no_torch_without_a_device():
    code = (
        "import sys, numpy as np\n"
        "from sk_deq import ImplicitCKTransformer, ImplicitCKNystroem\n"
        "X = np.random.default_rng(0).standard_normal((20, 3))\n"
        "ImplicitCKTransformer('gelu').fit(X).transform(X)\n"
        "ImplicitCKNystroem(n_components=4).fit(X).transform(X)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_dask_arrays_on_a_device(rel_error):
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(6)
    X, Z = rng.standard_normal((40, 4)), rng.standard_normal((25, 4))
    tr = ImplicitCKTransformer("tanh", device="cpu").fit(X)
    lazy = tr.transform(da.from_array(Z, chunks=(10, 4)))
    # row blocks of 10 and one of 25: the Hermite degrees follow the blocks, equal to the tolerance
    assert rel_error(lazy.compute(scheduler="synchronous"), tr.transform(Z)) <= TOL


def test_benchmark_collects_json_records():
    pytest.importorskip("mlxtend")
    import json

    from benchmarks.kernels.torch_engine import collect

    res = collect(repeats=1, n=40)
    json.dumps(res)
    assert res["n_samples"] == 40 and len(res["records"]) >= 3 * 4
    assert (res["cuda"] is None) == (not torch.cuda.is_available())
    for r in res["records"]:
        assert r["kernel_seconds"] > 0 and r["gemm_seconds"] > 0
        assert r["max_rel_diff_to_numpy"] <= TOL


def test_one_newton_serves_numpy_and_torch():
    # the engines share numerics.newton: the same iterates on either library, the bracketed fallback included
    from sk_deq.kernels._numerics import newton

    target = np.linspace(-0.9, 0.9, 11)

    def make(xp):
        t = target if xp is np else torch.from_numpy(target)

        def fun(rho):
            return xp.sin(rho) + 2.0 * rho - t, xp.cos(rho) + 2.0

        return fun

    for kw in ({}, {"max_iter": 1}):
        r_np = newton(make(np), np.zeros(11), tol=1e-14, **kw)
        r_t = newton(make(torch), torch.zeros(11, dtype=torch.float64), tol=1e-14, xp=torch, **kw)
        np.testing.assert_array_equal(r_t.numpy(), r_np)
        np.testing.assert_allclose(np.sin(r_np) + 2.0 * r_np, target, atol=1e-14)
