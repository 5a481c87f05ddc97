"""Kernel blocks and grid searches on a Dask cluster through joblib's dask backend.

The cluster (the ``dask_client`` fixture of ``conftest.py``) is a
``distributed.LocalCluster`` with two worker processes that listen on the
loopback interface only.
"""

import numpy as np
import pytest

pytestmark = pytest.mark.heavy  # a two-process cluster

distributed = pytest.importorskip("distributed")
joblib = pytest.importorskip("joblib")

from sklearn.kernel_ridge import KernelRidge  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from sk_deq import ImplicitCKTransformer  # noqa: E402


def _ran_on_cluster(ts):
    # joblib batches several calls into one task, so only check that work ran
    # on the cluster's worker processes (listening on the loopback interface)
    workers = {t["worker"] for t in ts.data}
    assert workers and all(w.startswith("tcp://127.0.0.1:") for w in workers)


def _data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 6))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(120)


def test_transform_on_dask_matches_serial(dask_client):
    X, _ = _data()
    serial = ImplicitCKTransformer("tanh", kernel="ntk", block_size=16).fit(X[:80])
    ref_t, ref_sq = serial.transform(X[80:]), serial.fit_transform(X[:80])
    with distributed.get_task_stream(dask_client) as ts, joblib.parallel_config(backend="dask"):
        tr = ImplicitCKTransformer("tanh", kernel="ntk", block_size=16, n_jobs=2).fit(X[:80])
        K_t, K_sq = tr.transform(X[80:]), tr.fit_transform(X[:80])
    _ran_on_cluster(ts)
    np.testing.assert_allclose(K_t, ref_t, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(K_sq, ref_sq, rtol=1e-13, atol=1e-14)


def test_grid_search_on_dask_matches_serial(dask_client):
    X, y = _data()
    pipe = make_pipeline(ImplicitCKTransformer(block_size=32), KernelRidge(kernel="precomputed"))
    grid = {"implicitcktransformer__sigma_a2": [0.1, 0.3], "kernelridge__alpha": [0.1, 1.0]}
    ref = GridSearchCV(pipe, grid, cv=3).fit(X, y)
    with distributed.get_task_stream(dask_client) as ts, joblib.parallel_config(backend="dask"):
        gs = GridSearchCV(pipe, grid, cv=3, n_jobs=2).fit(X, y)
    _ran_on_cluster(ts)
    np.testing.assert_allclose(gs.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-12)
    assert gs.best_params_ == ref.best_params_
