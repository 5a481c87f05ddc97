"""Dask (``sk_deq._dask``): Dask arrays in ``transform`` and in the classifiers' predictions, and the kernels' blocks
and grid searches on a Dask cluster through joblib's dask backend.

The quick tests use dask's synchronous scheduler (no cluster); the ``heavy``
ones the two-process loopback cluster of the ``dask_client`` fixture
(``conftest.py``).
"""

import pickle
import warnings

import joblib
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

from sk_deq import DEQClassifier, ImplicitCKNystroem, ImplicitCKTransformer, MatchedExplicitClassifier  # noqa: E402
from sk_deq.kernels._workers import kernel_workers  # noqa: E402


def _data(n=150, p=6, seed=0):
    return np.random.default_rng(seed).standard_normal((n, p))


def _fitted(cls, activation, kernel, X):
    if cls is ImplicitCKNystroem:
        return ImplicitCKNystroem(activation, kernel=kernel, n_components=40, random_state=0).fit(X)
    return ImplicitCKTransformer(activation, kernel=kernel).fit(X)


def _sync(K):
    return K.compute(scheduler="sync")


class _CountingTransformer(ImplicitCKTransformer):
    """Counts the in-memory transforms, i.e. the blocks computed."""

    calls = 0

    def transform(self, X):
        if isinstance(X, np.ndarray):
            type(self).calls += 1
        return super().transform(X)


# ---------------------------------------------------------------- quick tests
@pytest.mark.parametrize("cls", [ImplicitCKTransformer, ImplicitCKNystroem])
@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_transform_of_dask_array_equals_in_memory(cls, kernel, activation):
    X = _data()
    tr = _fitted(cls, activation, kernel, X[:60])
    K = tr.transform(da.from_array(X, chunks=(40, 4)))  # columns split too: gathered per row block
    n_out = tr.transform(X[:1]).shape[1]
    assert isinstance(K, da.Array) and K.dtype == np.float64
    assert K.shape == (150, n_out) and K.chunks == ((40, 40, 40, 30), (n_out,))
    np.testing.assert_allclose(_sync(K), tr.transform(X), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("method", ["linearized", "monte_carlo"])
def test_other_methods_on_dask_arrays(method):
    X = _data()
    width = {"n_hidden": 64} if method == "monte_carlo" else {}  # the other methods warn about an n_hidden
    tr = ImplicitCKTransformer("tanh", method=method, random_state=0, **width).fit(X[:60])
    K = tr.transform(da.from_array(X, chunks=(50, 6)))
    # every block equals the in-memory transform of its rows (the Monte-Carlo
    # features of a batch depend on the batch at the DEQ solver's tolerance)
    blocks = np.vstack([tr.transform(X[i : i + 50]) for i in range(0, 150, 50)])
    np.testing.assert_allclose(_sync(K), blocks, rtol=1e-10, atol=1e-10)


def test_transform_is_lazy():
    X = _data()
    read = []

    def source(block):
        read.append(len(block))
        return block

    Xd = da.from_array(X, chunks=(50, 6)).map_blocks(source, dtype=np.float64, meta=np.empty((0, 0)))
    _CountingTransformer.calls = 0
    tr = _CountingTransformer().fit(X[:40])
    K = tr.transform(Xd)
    assert read == [] and _CountingTransformer.calls == 0  # nothing computed, not even a meta guess
    out = _sync(K)
    assert sorted(read) == [50, 50, 50] and _CountingTransformer.calls == 3
    np.testing.assert_allclose(out, tr.transform(X), rtol=1e-10, atol=1e-10)


def test_graph_holds_the_estimator_once():
    X = _data(400)
    tr = ImplicitCKTransformer("tanh").fit(X[:200])
    K = tr.transform(da.from_array(X, chunks=(20, 6)))
    graph = dict(K.__dask_graph__())
    # distributed pickles every task on its own: a block's task must not carry the state
    block_tasks = [len(pickle.dumps(v)) for k, v in graph.items() if isinstance(k, tuple) and k[0] == K.name]
    assert len(block_tasks) == 20
    state = len(pickle.dumps(tr))
    assert state > 100_000 and max(block_tasks) < state / 100
    holders = [k for k, v in graph.items() if len(pickle.dumps(v)) > state / 2]
    assert len(holders) == 1


def test_refit_after_transform_does_not_change_the_lazy_result():
    X = _data()
    tr = ImplicitCKTransformer().fit(X[:60])
    ref = tr.transform(X)
    K = tr.transform(da.from_array(X, chunks=(50, 6)))
    tr.set_params(activation="tanh", sigma_a2=0.5).fit(X[60:120])
    np.testing.assert_allclose(_sync(K), ref, rtol=1e-10, atol=1e-10)


def test_blocks_without_rows():
    X = _data()
    tr = ImplicitCKTransformer().fit(X[:60])
    Xd = da.from_array(X, chunks=((70, 0, 80), (6,)))
    np.testing.assert_allclose(_sync(tr.transform(Xd)), tr.transform(X), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("cls", [ImplicitCKTransformer, ImplicitCKNystroem])
def test_unknown_chunk_sizes_raise(cls):
    X = _data()
    tr = _fitted(cls, "relu", "ck", X[:60])
    Xd = da.from_array(X, chunks=(50, 6))
    masked = Xd[Xd[:, 0] > 0]
    with pytest.raises(ValueError, match=r"unknown.*compute_chunk_sizes\(\).*to_dask_array\(lengths=True\)"):
        tr.transform(masked)
    np.testing.assert_allclose(
        _sync(tr.transform(masked.compute_chunk_sizes())), tr.transform(X[X[:, 0] > 0]), rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize("cls", [ImplicitCKTransformer, ImplicitCKNystroem])
def test_wrong_number_of_features_raises_as_in_memory(cls):
    X = _data()
    tr = _fitted(cls, "relu", "ck", X[:60])
    with pytest.raises(ValueError) as in_memory:
        tr.transform(X[:, :4])
    with pytest.raises(ValueError) as lazy:
        tr.transform(da.from_array(X[:, :4], chunks=(50, 4)))
    assert str(lazy.value) == str(in_memory.value)
    assert f"X has 4 features, but {cls.__name__} is expecting 6 features" in str(lazy.value)


def test_not_2d_or_not_an_array_raises():
    X = _data()
    tr = ImplicitCKTransformer().fit(X[:60])
    with pytest.raises(ValueError, match=r"2-D Dask array.*1-D with shape \(150,\)"):
        tr.transform(da.from_array(X[:, 0], chunks=50))
    with pytest.raises(TypeError, match=r"takes a Dask array.*to_dask_array\(lengths=True\)"):
        tr.transform(dask.delayed(X))


def test_bad_values_raise_when_computed():
    X = _data()
    tr = ImplicitCKTransformer().fit(X[:60])
    X[120, 2] = np.nan
    K = tr.transform(da.from_array(X, chunks=(50, 6)))  # built: the values are not read
    with pytest.raises(ValueError, match="Input X contains NaN"):
        _sync(K)


def test_feature_names_warn_once_when_built():
    pd = pytest.importorskip("pandas")
    X = _data()
    columns = [f"f{i}" for i in range(6)]
    tr = ImplicitCKTransformer().fit(pd.DataFrame(X[:60], columns=columns))
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        K = tr.transform(da.from_array(X, chunks=(50, 6)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the blocks, plain arrays, stay quiet
        out = _sync(K)
    np.testing.assert_allclose(out, tr.transform(pd.DataFrame(X, columns=columns)), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- on a cluster
@pytest.mark.heavy
@pytest.mark.parametrize("cls", [ImplicitCKTransformer, ImplicitCKNystroem])
@pytest.mark.parametrize(
    ("activation", "kernel"), [("relu", "ck"), ("relu", "ntk"), ("tanh", "feature"), ("tanh", "ntk"), ("gelu", "ck")]
)
def test_transform_on_cluster_equals_in_memory(dask_client, cls, activation, kernel):
    distributed = pytest.importorskip("distributed")
    X = _data(300)
    tr = _fitted(cls, activation, kernel, X[:100])
    Xd = da.from_array(X, chunks=(60, 6))
    with distributed.get_task_stream(dask_client) as ts:
        K = tr.transform(Xd)
    assert isinstance(K, da.Array) and not ts.data  # lazy: nothing ran on the cluster
    with distributed.get_task_stream(dask_client) as ts:
        out = K.compute()
    workers = {t["worker"] for t in ts.data}
    assert workers and workers <= set(dask_client.scheduler_info()["workers"])
    np.testing.assert_allclose(out, tr.transform(X), rtol=1e-10, atol=1e-10)


def _classifiers():
    X = _data(400, 5, seed=1)
    y = np.where(X[:, 0] + X[:, 1] ** 2 > 1, "yes", "no")
    kw = {"n_hidden": 64, "random_state": 0}
    return X, [DEQClassifier(**kw).fit(X[:200], y[:200]), MatchedExplicitClassifier(**kw).fit(X[:200], y[:200])]


def _lazy_predictions(clf, X):
    """The user guide's recipe: predictions of a Dask array block by block."""
    X = X.rechunk({1: -1})  # whole samples in every block
    proba = X.map_blocks(
        clf.predict_proba, chunks=(X.chunks[0], (len(clf.classes_),)), dtype=np.float64, meta=np.empty((0, 0))
    )
    labels = X.map_blocks(clf.predict, drop_axis=1, dtype=clf.classes_.dtype, meta=np.empty(0, clf.classes_.dtype))
    return labels, proba


@pytest.mark.heavy
def test_classifier_predictions_on_cluster_equal_in_memory(dask_client):
    X, classifiers = _classifiers()
    Xd = da.from_array(X, chunks=(70, 3))
    for clf in classifiers:
        labels, proba = _lazy_predictions(clf, Xd)
        # the user guide's variant that sends the classifier once per worker
        once = Xd.rechunk({1: -1}).map_blocks(
            lambda b, c: c.predict(b),
            dask.delayed(clf),
            drop_axis=1,
            dtype=labels.dtype,
            meta=np.empty(0, labels.dtype),
        )
        labels, proba, once = dask.compute(labels, proba, once)
        np.testing.assert_array_equal(labels, clf.predict(X))
        np.testing.assert_array_equal(once, labels)
        np.testing.assert_allclose(proba, clf.predict_proba(X), rtol=1e-10, atol=1e-10)


@pytest.mark.heavy
def test_parallel_post_fit_on_cluster_equals_in_memory(dask_client):
    wrappers = pytest.importorskip("dask_ml.wrappers")
    X, classifiers = _classifiers()
    Xd = da.from_array(X, chunks=(70, 5))
    for clf in classifiers:
        model = wrappers.ParallelPostFit(clf)
        labels, proba = dask.compute(model.predict(Xd), model.predict_proba(Xd))
        np.testing.assert_array_equal(labels, clf.predict(X))
        np.testing.assert_allclose(proba, clf.predict_proba(X), rtol=1e-10, atol=1e-10)


# ------------------------------------------- kernel blocks and grid searches through joblib's dask backend
# The cluster's two worker processes listen on the loopback interface only.


def _ran_on_cluster(ts):
    # joblib batches several calls into one task, so only check that work ran
    # on the cluster's worker processes (listening on the loopback interface)
    workers = {t["worker"] for t in ts.data}
    assert workers and all(w.startswith("tcp://127.0.0.1:") for w in workers)


def _regression_data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 6))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(120)


@pytest.mark.heavy
def test_transform_on_dask_matches_serial(dask_client):
    import distributed

    X, _ = _regression_data()
    serial = ImplicitCKTransformer("tanh", kernel="ntk", block_size=16).fit(X[:80])
    ref_t, ref_sq = serial.transform(X[80:]), serial.fit_transform(X[:80])
    with distributed.get_task_stream(dask_client) as ts, joblib.parallel_config(backend="dask"):
        tr = ImplicitCKTransformer("tanh", kernel="ntk", block_size=16, n_jobs=2).fit(X[:80])
        K_t, K_sq = tr.transform(X[80:]), tr.fit_transform(X[:80])
    _ran_on_cluster(ts)
    np.testing.assert_allclose(K_t, ref_t, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(K_sq, ref_sq, rtol=1e-13, atol=1e-14)


@pytest.mark.heavy
def test_grid_search_on_dask_matches_serial(dask_client):
    import distributed

    X, y = _regression_data()
    pipe = make_pipeline(ImplicitCKTransformer(block_size=32), KernelRidge(kernel="precomputed"))
    grid = {"implicitcktransformer__sigma_a2": [0.1, 0.3], "kernelridge__alpha": [0.1, 1.0]}
    ref = GridSearchCV(pipe, grid, cv=3).fit(X, y)
    with distributed.get_task_stream(dask_client) as ts, joblib.parallel_config(backend="dask"):
        gs = GridSearchCV(pipe, grid, cv=3, n_jobs=2).fit(X, y)
    _ran_on_cluster(ts)
    np.testing.assert_allclose(gs.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-12)
    assert gs.best_params_ == ref.best_params_


# ------------------------------------------------------------------ the kernels' threads on the workers
def _threads_and_warnings(X):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counts = (kernel_workers(None), kernel_workers(2))
        ImplicitCKTransformer("tanh", block_size=8).fit(X[:40]).transform(X)
    return counts, [str(w.message) for w in caught]


def _record_warnings(dask_worker, start):
    """On a worker: record every warning (``start``), or stop and return those recorded."""
    if start:
        dask_worker._sk_deq_warnings = (warnings.showwarning, list(warnings.filters), [])
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *args, **kwargs: dask_worker._sk_deq_warnings[2].append(str(message))
        return None
    show, filters, caught = dask_worker._sk_deq_warnings
    warnings.showwarning, warnings.filters[:] = show, filters
    return caught


@pytest.mark.heavy
def test_transform_of_dask_array_on_cluster_warns_nothing_on_the_workers(dask_client):
    X = _data(400)
    tr = ImplicitCKTransformer("tanh").fit(X[:100])
    dask_client.run(_record_warnings, start=True)
    try:
        K = tr.transform(da.from_array(X, chunks=(20, 6))).compute()  # 20 blocks
    finally:
        caught = dask_client.run(_record_warnings, start=False)
    assert caught and all(messages == [] for messages in caught.values())
    np.testing.assert_allclose(K, tr.transform(X), rtol=1e-10, atol=1e-10)


@pytest.mark.heavy
def test_kernels_on_workers_use_their_threads_without_joblib_warnings(dask_client):
    X = _data(80)
    # a task of the cluster (e.g. a row block of a Dask array): one thread unless asked, never a warning
    addresses = list(dask_client.scheduler_info()["workers"])
    for fut in [dask_client.submit(_threads_and_warnings, X, pure=False, workers=[w]) for w in addresses]:
        assert fut.result() == ((1, 2), [])
    # a joblib batch on the cluster through joblib's dask backend
    with joblib.parallel_config(backend="dask"):
        results = joblib.Parallel(n_jobs=2)(joblib.delayed(_threads_and_warnings)(X) for _ in range(2))
    assert results == [((1, 2), [])] * 2


# ------------------------------------------------------- the documentation page
def _page_module():
    """The code of docs/larger_than_memory.rst, imported from its file."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "larger_than_memory.py"
    spec = importlib.util.spec_from_file_location("larger_than_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page_data():
    from sklearn.datasets import make_classification

    X, y = make_classification(1600, 10, n_informative=6, n_classes=3, random_state=0)
    return X, y, da.from_array(X, chunks=(200, 5)), da.from_array(y, chunks=200)


@pytest.mark.heavy
def test_larger_than_memory_page(dask_client):
    import inspect

    page = _page_module()
    X, y, Xd, yd = _page_data()
    search, clf, features = page.fit_larger_than_memory(Xd, yd, n_sample=300, n_components=60)

    # the grid search on the cluster agrees with a serial one on the same sample
    X_sample, y_sample = page.sample_rows(Xd, yd, 300)
    ref = clone(search).set_params(n_jobs=None).fit(X_sample, y_sample)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-12)
    assert search.best_params_ == ref.best_params_

    # the features are the in-memory ones, and SGD saw the blocks in order
    nystroem = search.best_estimator_.named_steps["implicitcknystroem"]
    F = features.compute()
    np.testing.assert_allclose(F, nystroem.transform(X), rtol=1e-10, atol=1e-10)
    ref_clf = clone(clf)
    for _ in range(inspect.signature(page.train_sgd).parameters["n_epochs"].default):
        for i in range(0, len(X), 200):
            ref_clf.partial_fit(nystroem.transform(X[i : i + 200]), y[i : i + 200], classes=np.arange(3))
    np.testing.assert_allclose(clf.coef_, ref_clf.coef_, rtol=1e-8, atol=1e-10)

    labels = page.predict(clf, features).compute()
    np.testing.assert_array_equal(labels, clf.predict(F))
    assert np.mean(labels == y) > 0.6  # three classes: chance is 1/3


@pytest.mark.heavy
def test_incremental_of_dask_ml_equals_the_page_loop(dask_client):
    wrappers = pytest.importorskip("dask_ml.wrappers")
    page = _page_module()
    X, _, Xd, yd = _page_data()
    features = ImplicitCKNystroem(n_components=50, random_state=0).fit(X[:300]).transform(Xd).persist()
    clf = page.train_sgd(features, yd, np.arange(3), n_epochs=1)
    inc = wrappers.Incremental(clone(clf), shuffle_blocks=False).fit(features, yd, classes=np.arange(3))
    np.testing.assert_allclose(inc.estimator_.coef_, clf.coef_, rtol=1e-10, atol=1e-12)
