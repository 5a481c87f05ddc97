"""Exact kernel ridge on a Dask cluster: ImplicitCKRidgeClassifier fitted on a Dask array of Fashion-MNIST rows.

A ``distributed.LocalCluster`` of ``--workers`` worker processes on this
machine (``--threads`` each, ``--memory-limit`` each) holds the training
kernel's row slabs; the client gathers the samples and runs the conjugate
gradients, whose products run on the workers.  Fashion-MNIST's first ``--n``
training images and first ``--n-test`` test images, pixels over 255
(:func:`sk_deq.datasets.fetch_fashion_mnist`, nothing downloaded when the
files are at hand); the DEQ's CK at its defaults (ReLU, ``sigma_a2 = 0.2``),
one alpha, ``solver='cg'``.

Recorded: the fit's time and its parts (the slabs, the products, the
preconditioner's columns), the iterations and the final residual, the bytes
one product moves (``X`` to every worker, every slab's part back, counted
here), the peak memory of the client and of every worker process during the
fit and during the predictions (their peak resident size, and their size
before) and the bytes each worker holds once the slabs are
computed (distributed's count of its data) with its resident size then, the test accuracy and the time of the lazy predictions.
``--compare`` fits the same estimator in memory here too (``n_jobs`` = all
cores) and records how far its predictions are from the cluster's.

Self-contained: it uses no helper of this folder (``run_all`` runs it by its
``collect``).

Usage::

    python -m benchmarks.kernels ridge_dask --n 10000 --json /tmp/krr_dask.json
    python -m benchmarks.kernels ridge_dask --quick          # 1,000 rows: a smoke run
"""

from __future__ import annotations

import functools
import json
import time

import numpy as np

from .._harness import finish, parser, positive_int
from .._memory import peak_rss_bytes, reset_peak, status_bytes


def _parser():
    ap = parser(__doc__, name=__name__, quick="1,000 training and 500 test rows, a smoke run", repeats=1)
    ap.add_argument("--n", type=positive_int, default=10_000, help="training rows (default 10000)")
    ap.add_argument("--n-test", type=positive_int, default=2_000, help="test rows (default 2000)")
    ap.add_argument("--workers", type=positive_int, default=2, help="worker processes (default 2)")
    ap.add_argument("--threads", type=positive_int, default=1, help="threads per worker (default 1)")
    ap.add_argument("--memory-limit", default="6GiB", help="memory limit of a worker (default 6GiB)")
    ap.add_argument("--chunk", type=positive_int, default=2_000, help="rows per chunk of the Dask arrays")
    ap.add_argument("--alpha", type=float, default=1e-2, help="the ridge (default 1e-2)")
    from sk_deq import ImplicitCKRidgeClassifier

    defaults = ImplicitCKRidgeClassifier().get_params()
    rank, tol = defaults["preconditioner_rank"], defaults["tol"]
    ap.add_argument("--rank", type=positive_int, default=rank, help=f"preconditioner_rank (the default, {rank})")
    ap.add_argument("--tol", type=float, default=tol, help=f"conjugate gradients' tolerance (the default, {tol:g})")
    ap.add_argument("--storage", default="auto", choices=("auto", "float64", "float32"))
    ap.add_argument("--compare", action="store_true", help="also fit in memory and compare the predictions")
    return ap


def _rss() -> int:
    """This process's resident size now (0 where there is no ``/proc/self/status``)."""
    return status_bytes("VmRSS") or 0


def _peak_rss() -> int:
    """This process's peak resident size since the last reset (VmHWM), else since it started (ru_maxrss)."""
    return status_bytes("VmHWM") or peak_rss_bytes()


class _Meter:
    """Counts and times the DaskStore's calls (wrapped for the run), and the bytes of its products."""

    def __init__(self, store_cls):
        self.cls, self.saved = store_cls, {}
        self.calls = {"fill": [], "matmat": [], "columns": [], "diagonal": [], "_each": []}
        self.bytes_out = self.bytes_back = 0
        self.reported = None
        self.in_product = False

    def __enter__(self):
        for name in self.calls:
            self.saved[name] = self.cls.__dict__[name]
        meter = self

        def timed(name, func):
            @functools.wraps(func)
            def wrapper(*args, **kwargs):
                t0 = time.perf_counter()
                meter.in_product = meter.in_product or name == "matmat"
                out = func(*args, **kwargs)
                meter.calls[name].append(time.perf_counter() - t0)
                if name == "_each" and meter.in_product:  # the parts the workers sent back, as received
                    meter.bytes_back += sum(np.asarray(part).nbytes for part in out)
                if name == "fill":  # the slabs are held: the bytes each worker holds now, and its resident size
                    meter.reported = {"managed": out.client.run(_managed_bytes), "rss": out.client.run(_rss)}
                if name == "matmat":  # X as sent, float64, to every worker
                    store, X = args[0], args[1]
                    meter.bytes_out += np.ascontiguousarray(X, dtype=np.float64).nbytes * store.plan.n_workers
                    meter.in_product = False
                return out

            return wrapper

        self.cls.fill = classmethod(timed("fill", self.saved["fill"].__func__))
        for name in ("matmat", "columns", "diagonal", "_each"):
            setattr(self.cls, name, timed(name, self.saved[name]))
        return self

    def __exit__(self, *exc):
        for name, func in self.saved.items():
            setattr(self.cls, name, func)


def _managed_bytes(dask_worker) -> int:
    """The bytes of the data a worker holds (its slabs, the samples), as distributed counts them."""
    return int(dask_worker.state.nbytes)


class _Peaks:
    """The peak resident size of the client and of every worker during a block of code, above their size before."""

    def __init__(self, client):
        self.client = client

    def __enter__(self):
        self.reset = reset_peak() and all(self.client.run(reset_peak).values())
        self.before = {"client": _rss(), **self.client.run(_rss)}
        return self

    def __exit__(self, *exc):
        self.peak = {"client": _peak_rss(), **self.client.run(_peak_rss)}

    def record(self) -> dict:
        return {"peak_rss": self.peak, "rss_before": self.before, "peak_since_start_only": not self.reset}


def _fit_once(client, est, Xd, yd, Xt, yt):
    import dask.array as da

    from sk_deq.kernel_ridge._distributed import DaskStore

    with _Meter(DaskStore) as meter, _Peaks(client) as fit_memory:
        t0 = time.perf_counter()
        est.fit(Xd, yd)
        fit_s = time.perf_counter() - t0
    with _Peaks(client) as predict_memory:
        t0 = time.perf_counter()
        pred = est.predict(da.from_array(Xt, chunks=(Xd.chunks[0][0], Xt.shape[1]))).compute()
        predict_s = time.perf_counter() - t0
    products = len(meter.calls["matmat"])
    return {
        "fit_s": fit_s,
        "slabs_s": sum(meter.calls["fill"]),
        "products": products,
        "products_s": sum(meter.calls["matmat"]),
        "product_s_median": float(np.median(meter.calls["matmat"])) if products else None,
        "columns_calls": len(meter.calls["columns"]),
        "columns_s": sum(meter.calls["columns"]),
        "bytes_per_product_out": meter.bytes_out // max(products, 1),
        "bytes_per_product_back": meter.bytes_back // max(products, 1),
        "bytes_per_product_planned": est.fit_plan_.bytes_per_product(len(est.classes_)),
        "n_iter": int(est.n_iter_),
        "residual": est.residual_,
        "accuracy": float(np.mean(pred == yt)),
        "predict_s": predict_s,
        "workers_after_slabs": meter.reported,
        "fit_memory": fit_memory.record(),
        "predict_memory": predict_memory.record(),
        "plan": est.fit_plan_.describe(),
        "plan_worker_bytes": est.fit_plan_.total,
        "plan_client_bytes": est.fit_plan_.client,
        "slabs": len(est.fit_plan_.placement),
        "slabs_per_worker": est.fit_plan_.slabs_per_worker,
        "dtype": est.fit_plan_.dtype.name,
    }, pred


def _compare(est, X, y, Xt, yt, pred):
    from sklearn.base import clone

    ref = clone(est).set_params(n_jobs=-1)
    t0 = time.perf_counter()
    ref.fit(X, y)
    fit_s = time.perf_counter() - t0
    ref_pred = ref.predict(Xt)
    return {
        "in_memory_fit_s": fit_s,
        "in_memory_n_iter": int(ref.n_iter_),
        "in_memory_accuracy": float(np.mean(ref_pred == yt)),
        "labels_equal": float(np.mean(ref_pred == pred)),
    }


def run(client, args) -> dict:
    """Fit, predict and measure on the cluster of ``client``."""
    import dask.array as da

    from sk_deq import ImplicitCKRidgeClassifier
    from sk_deq.datasets import fetch_fashion_mnist

    n, n_test = (1000, 500) if args.quick else (args.n, args.n_test)
    X_tr, y_tr = fetch_fashion_mnist(subset="train", return_X_y=True, download_if_missing=False)
    X_te, y_te = fetch_fashion_mnist(subset="test", return_X_y=True, download_if_missing=False)
    X, y = np.asarray(X_tr[:n], dtype=np.float64) / 255.0, np.asarray(y_tr[:n])
    Xt, yt = np.asarray(X_te[:n_test], dtype=np.float64) / 255.0, np.asarray(y_te[:n_test])
    del X_tr, X_te
    chunk = min(args.chunk, n)
    Xd, yd = da.from_array(X, chunks=(chunk, X.shape[1])), da.from_array(y, chunks=chunk)
    est = ImplicitCKRidgeClassifier(
        alpha=args.alpha, solver="cg", tol=args.tol, preconditioner_rank=args.rank, storage=args.storage, verbose=1
    )
    fits = []
    for _ in range(args.repeats):
        record, pred = _fit_once(client, est, Xd, yd, Xt, yt)
        fits.append(record)
    out = {
        "n_train": n,
        "n_test": n_test,
        "n_workers": len(client.scheduler_info(n_workers=-1)["workers"]),
        "alpha": args.alpha,
        "tol": args.tol,
        "preconditioner_rank": args.rank,
        "fits": fits,
    }
    if args.compare:
        out["compare"] = _compare(est, X, y, Xt, yt, pred)
    return out


def _on_cluster(args) -> dict:
    """``run`` on a local cluster of the settings ``args``, closed after."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=args.workers,
        threads_per_worker=args.threads,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        memory_limit=args.memory_limit,
    )
    try:
        with Client(cluster) as client:
            return run(client, args)
    finally:
        cluster.close()


def collect(quick: bool = False, repeats: int = 1) -> dict:
    """``run_all``'s entry point: the default settings (``quick``: 1,000 rows), ``repeats`` fits."""
    args = _parser().parse_args(["--repeats", str(repeats), *(["--quick"] if quick else [])])
    return {"settings": {k: v for k, v in vars(args).items() if k != "benchmark"}, "records": [_on_cluster(args)]}


def main(argv=None) -> dict:
    args = _parser().parse_args(argv)
    result = {"settings": {k: v for k, v in vars(args).items() if k != "benchmark"}, "records": [_on_cluster(args)]}
    return finish(result, args, lambda r: json.dumps(r, indent=1, default=str))
