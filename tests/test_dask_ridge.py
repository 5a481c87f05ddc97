"""Exact kernel ridge on a Dask ``distributed`` cluster (``sk_deq.kernel_ridge._distributed``) and its memory plan
per worker.

The ``heavy`` tests use the two-process loopback cluster of the ``dask_client``
fixture (``conftest.py``); the plan's tests need no cluster.
"""

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from sk_deq import ImplicitCKRidge, ImplicitCKRidgeClassifier  # noqa: E402
from sk_deq.kernel_ridge._distributed import DaskStore, cluster_workers  # noqa: E402
from sk_deq.kernel_ridge._fit import fill_store  # noqa: E402
from sk_deq.kernel_ridge._plan import (  # noqa: E402
    SLAB_MAX_BYTES,
    WorkerMemory,
    _cluster_plan,
    plan_cluster,
    plan_fit,
    slab_bounds,
)
from sk_deq.kernels import ImplicitKernelEngine  # noqa: E402

GIB = 2**30


def _data(n=360, p=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    Y = np.column_stack([np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n), X[:, 1] * X[:, 2]])
    labels = np.where(X[:, 0] + X[:, 1] ** 2 > 1, "a", np.where(X[:, 2] > 0, "b", "c"))
    return X, Y, labels


# ------------------------------------------------------------------ the plan (no cluster)
def _workers(count, nthreads=1, limit=4 * GIB):
    return [WorkerMemory(f"tcp://w{i}", nthreads, limit, 0) for i in range(count)]


@pytest.mark.parametrize(("n", "count"), [(1000, 1), (1000, 4), (10_000, 7), (5, 9)])
def test_slab_bounds_cover_the_rows_in_slabs_of_about_equal_area(n, count):
    bounds = np.asarray(slab_bounds(n, count))
    assert bounds[0] == 0 and bounds[-1] == n and np.all(np.diff(bounds) >= 1)
    assert len(bounds) - 1 == min(count, n)
    areas = np.diff(bounds) * bounds[1:]  # the entries of every slab: its rows times its columns
    assert areas.sum() >= n * (n + 1) / 2  # the whole lower triangle
    if n >= 1000:  # equal to a row's rounding
        np.testing.assert_allclose(areas, areas.mean(), rtol=0, atol=n)


def test_plan_puts_as_many_slabs_on_every_worker_one_per_thread():
    plan = plan_cluster(2000, 10, 3, _workers(3, nthreads=2), rank=100, client_available=8 * GIB)
    assert len(plan.placement) == 6 and plan.slabs_per_worker == 2 and plan.n_workers == 3
    assert plan.dtype == np.float64 and plan.solver == "cg" and plan.rank == 100
    held = {w: 0 for w in set(plan.placement)}
    for s, w in enumerate(plan.placement):
        held[w] += (plan.bounds[s + 1] - plan.bounds[s]) * plan.bounds[s + 1] * 8
    assert plan.worker_store == max(held.values())
    assert sum(held.values()) >= 2000 * 2001 // 2 * 8  # the whole lower triangle, diagonal blocks whole
    text = plan.describe()
    assert "3 Dask worker(s): 6 row slabs" in text and "up to 2 per worker" in text and "float64" in text


def test_plan_takes_more_slabs_than_threads_when_they_would_be_large():
    n = 40_000  # float64 lower triangle: 6.4e9 bytes, over 2 workers: 3 slabs of at most SLAB_MAX_BYTES each
    plan = plan_cluster(n, 10, 1, _workers(2, limit=64 * GIB), rank=10, client_available=8 * GIB)
    per_worker = n * (n + 1) // 2 * 8 / 2
    assert plan.slabs_per_worker == int(np.ceil(per_worker / SLAB_MAX_BYTES))


def test_plan_stores_float32_where_float64_does_not_fit_on_the_workers():
    n = 20_000  # float64: 1.6e9 bytes of triangle, 0.8e9 per worker
    f64 = plan_cluster(n, 10, 1, _workers(2, limit=2 * GIB), rank=10, client_available=8 * GIB)
    f32 = plan_cluster(n, 10, 1, _workers(2, limit=int(0.8 * GIB)), rank=10, client_available=8 * GIB)
    assert f64.dtype == np.float64 and f32.dtype == np.float32
    assert f32.worker_store < f64.worker_store / 1.9
    with pytest.raises(MemoryError, match=r"workers' part does not fit.*Ways out: use more"):
        plan_cluster(n, 10, 1, _workers(2, limit=GIB // 8), rank=10, client_available=8 * GIB, alternatives="use more")
    with pytest.raises(MemoryError, match="client's part does not fit"):
        plan_cluster(n, 10, 1, _workers(2, limit=8 * GIB), rank=1000, client_available=GIB // 8)
    assert plan_cluster(n, 10, 1, _workers(2, limit=0), rank=10, client_available=8 * GIB).worker_available is None


# ------------------------------------------------------------------ the store's products on the cluster
def _slabs_left(client, wait=30.0):
    """The kernel slabs still held by the workers, once the releases sent have arrived (within ``wait`` seconds).

    Dropped futures are released by the client's event loop a moment later,
    and a slab's memory with them.
    """
    import time

    deadline = time.monotonic() + wait
    while True:
        left = [k for keys in client.has_what().values() for k in keys if "kernel-slab" in str(k)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@pytest.fixture(scope="module")
def engine_and_samples():
    X, _, _ = _data(300)
    engine = ImplicitKernelEngine("tanh", 0.3, float(np.sqrt(np.mean(np.sum(X**2, axis=1)))))
    return engine, engine.prepare(X)


@pytest.mark.heavy
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dask_store_products_equal_the_tile_store(dask_client, engine_and_samples, dtype):
    engine, S = engine_and_samples
    n = len(S)
    workers = cluster_workers(dask_client)
    plan = _cluster_plan(n, 6, 3, dtype, 40, workers, 64, 5, None)  # 5 slabs: 3 on one worker, 2 on the other
    local = fill_store(engine, S, plan_fit(n, 6, 3, storage=np.dtype(dtype).name, solver="cg", available=None))
    dense = engine.kernel(S)  # an independent reference: the whole matrix of the kernel engine
    store = DaskStore.fill(dask_client, engine, S, plan, block_size=64)
    try:
        held = dask_client.who_has(store._slabs)
        assert [next(iter(held[f.key])) for f in store._slabs] == list(plan.placement)  # each slab where planned
        rng = np.random.default_rng(1)
        V = rng.standard_normal((n, 3))
        idx = np.sort(rng.choice(n, 40, replace=False))
        # the same entries; the products sum them in another order (float32: each part in float32)
        ref = local.matmat(V)
        eps = 1e-13 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(store.matmat(V), ref, rtol=0, atol=eps * np.abs(ref).max())
        np.testing.assert_allclose(store.columns(idx), local.columns(idx), rtol=1e-13 if dtype == np.float64 else 2e-7)
        np.testing.assert_array_equal(store.diagonal(), local.diagonal())
        np.testing.assert_allclose(store.matmat(V), dense @ V, rtol=0, atol=eps * np.abs(ref).max())
        np.testing.assert_allclose(store.columns(idx), dense[:, idx], rtol=1e-12 if dtype == np.float64 else 1e-6)
    finally:
        store.release()
    assert _slabs_left(dask_client) == []


# ------------------------------------------------------------------ fits on the cluster equal in-memory fits
_CG = {"solver": "cg", "tol": 1e-12, "preconditioner_rank": 40, "random_state": 0}


def _pair(est, X, y, sample_weight=None, chunks=90):
    """The in-memory fit and the cluster's fit of the same estimator."""
    from sklearn.base import clone

    ref = clone(est).fit(X, y, sample_weight=sample_weight)
    sw = None if sample_weight is None else da.from_array(sample_weight, chunks=chunks)
    dist = clone(est).fit(da.from_array(X, chunks=(chunks, X.shape[1])), da.from_array(y, chunks=chunks), sw)
    return ref, dist


def _agree(a, b, scale):
    """Both solves stop at tol=1e-12 on a system of condition ~1e4: agreement to 1e-9 of the outputs' size."""
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-9 * scale)


@pytest.mark.heavy
@pytest.mark.parametrize("targets", ["one", "two-weighted"])
def test_regressor_fitted_on_the_cluster_equals_in_memory(dask_client, targets):
    X, Y, _ = _data()
    y = Y[:, 0] if targets == "one" else Y
    sw = None if targets == "one" else np.random.default_rng(2).uniform(0.2, 2.0, len(X))
    ref, dist = _pair(ImplicitCKRidge(alpha=0.05, **_CG), X[:300], y[:300], None if sw is None else sw[:300])
    assert dist.solver_ == "cg" and dist.fit_plan_.n_workers == 2 and dist.residual_ <= 1e-12
    _agree(dist.dual_coef_, ref.dual_coef_, np.abs(ref.dual_coef_).max())
    Xt = da.from_array(X[300:], chunks=(25, 6))
    pred = dist.predict(Xt)
    assert isinstance(pred, da.Array)
    _agree(pred.compute(), ref.predict(X[300:]), np.abs(y).max())
    assert dist.score(Xt, y[300:]) == pytest.approx(ref.score(X[300:], y[300:]), abs=1e-9)


@pytest.mark.heavy
def test_classifier_with_alpha_candidates_on_the_cluster_equals_in_memory(dask_client):
    X, _, labels = _data()
    est = ImplicitCKRidgeClassifier(alpha=[1.0, 0.1, 0.01], **_CG)
    ref, dist = _pair(est, X[:300], labels[:300])
    assert dist.alpha_ == ref.alpha_
    np.testing.assert_allclose(dist.alpha_scores_, ref.alpha_scores_, atol=1e-12)
    _agree(dist.dual_coef_, ref.dual_coef_, np.abs(ref.dual_coef_).max())
    Xt = da.from_array(X[300:], chunks=(25, 6))
    _agree(dist.decision_function(Xt).compute(), ref.decision_function(X[300:]), 1.0)
    np.testing.assert_array_equal(dist.predict(Xt).compute(), ref.predict(X[300:]))
    assert dist.score(Xt, labels[300:]) == ref.score(X[300:], labels[300:])


@pytest.mark.heavy
def test_float32_slabs_and_verbose_progress(dask_client, capsys):
    X, Y, _ = _data()
    kw = {"alpha": 0.05, "solver": "auto", "tol": 1e-4, "preconditioner_rank": 40, "random_state": 0}
    ref = ImplicitCKRidge(storage="float64", **{**kw, "solver": "cg"}).fit(X[:300], Y[:300])
    dist = ImplicitCKRidge(storage="float32", verbose=1, **kw).fit(da.from_array(X[:300], chunks=(100, 6)), Y[:300])
    assert dist.fit_plan_.dtype == np.float32 and dist.solver_ == "cg"  # 'auto' is conjugate gradients here
    out, err = capsys.readouterr()
    assert "Dask worker(s)" in out and "float32" in out and "per worker" in out
    assert "kernel slabs" in err and "solve: residual" in err
    # both stop at tol=1e-5: their predictions agree to about the tolerance times the condition number
    np.testing.assert_allclose(dist.predict(X[300:]), ref.predict(X[300:]), rtol=0, atol=1e-2 * np.abs(Y).max())


@pytest.mark.heavy
def test_nothing_of_n_by_n_reaches_the_client(dask_client, monkeypatch):
    X, Y, _ = _data()
    n, rank = 300, 40
    gathered = []
    gather = dask_client.gather

    def recording(futures, *args, **kwargs):
        out = gather(futures, *args, **kwargs)
        gathered.extend(np.asarray(a).size for part in out for a in (part if isinstance(part, tuple) else (part,)))
        return out

    monkeypatch.setattr(dask_client, "gather", recording)
    ImplicitCKRidge(alpha=0.05, **_CG).fit(da.from_array(X[:n], chunks=(100, 6)), Y[:n])
    assert gathered and max(gathered) <= n * rank < n * n / 2  # vectors and a few columns, never a slab
    assert _slabs_left(dask_client) == []
