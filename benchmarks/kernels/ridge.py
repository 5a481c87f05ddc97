"""Exact kernel ridge at full size (ImplicitCKRidgeClassifier): near the hardware, and on the paper's data.

Two parts (``--only`` picks one):

``hardware``
    In one process, side by side (interleaved repeats, medians), on the
    first ``--n`` Fashion-MNIST training images scaled as the estimator
    scales them:

    * the stored training kernel (``fill_store``: every tile of the lower
      triangle computed by the kernel engine, on all cores) against a
      float64 ``X @ X.T`` of the same rows (by row blocks, :func:`_gram`),
      for each activation (target: at most 2x);
    * one conjugate-gradient iteration (a product with the stored kernel,
      the preconditioner, the vector updates; ten targets) against one
      plain product with the same ten vectors of a dense matrix of the
      stored triangle's bytes, and of the full n x n matrix, in the same
      dtype (target: at most 1.5x).
``defaults``
    What the conjugate gradients' defaults (``preconditioner_rank``,
    ``tol``) cost and buy, on the first ``--n`` Fashion-MNIST training
    images and the 10,000 test images, one stored kernel per activation:
    for every rank of ``--ranks`` and ridge of ``--alphas``, the
    iterations to reach each ``--tols`` (one solve continued from the
    last), the factor's time and the test accuracy at each tolerance.
``fit``
    ``ImplicitCKRidgeClassifier`` on the official Fashion-MNIST split,
    ``--n-train`` rows, the 10,000 test images: one fresh subprocess per
    (activation, storage), so that its peak resident set is its own.
    Records the fit's phases (``fit_time_``), predict time, the plan
    (storage, solver, memory), iterations, residual, the chosen alpha and
    the test accuracy.  Targets at 60,000 rows: fit + predict at most 15
    minutes and peak memory at most 20 GiB on 2 cores, 24 GiB.  With
    ``--device cuda`` the kernel is computed, stored and solved on the GPU
    (``device='cuda'``), and the device's peak memory is recorded too.

Usage::

    python -m benchmarks.kernels ridge --only hardware --n 20000 --repeats 3 --json hw.json
    python -m benchmarks.kernels ridge --only defaults --n 20000 --activations relu --json defaults.json
    python -m benchmarks.kernels ridge --only fit --n-train 60000 --activations relu tanh --json fit.json
    python -m benchmarks.kernels ridge --only fit --n-train 60000 --activations relu --device cuda --json f.json
    python -m benchmarks.kernels ridge --quick      # small sizes, both parts (minutes)
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from .._harness import finish, in_subprocess, parser, timed
from .._memory import peak_rss_bytes

ALPHAS = (0.01, 0.001, 0.0001)  # the CK's best lies at the small end (the defaults part)


def _fashion(n_train=None, test=False):
    from sk_deq.datasets import fetch_fashion_mnist

    X, y = fetch_fashion_mnist(subset="test" if test else "train", return_X_y=True)
    return (X, y) if n_train is None else (X[:n_train], y[:n_train])


# -- hardware ----------------------------------------------------------------------------------


def _scaled(n):
    from sk_deq._scaling import apply_input_scaling, fit_input_scaling

    X, _ = _fashion(n)
    mean, scale, tau0 = fit_input_scaling(np.asarray(X, dtype=np.float64), "global")
    return np.asarray(apply_input_scaling(X, mean, scale), dtype=np.float64), tau0


def _gram(X, rows=2048):
    """``X @ X.T`` in float64, ``rows`` rows at a time: one GEMM of 20,000 x 784 rows by OpenBLAS 0.3.30's SKYLAKEX
    kernels crashed the interpreter on an AMD EPYC (as its Cholesky of 16,000 rows does, see the kernel ridge's
    docs); blocks of the stored kernel's tile size do not."""
    out = np.empty((len(X), len(X)))
    for i in range(0, len(X), rows):
        np.matmul(X[i : i + rows], X.T, out=out[i : i + rows])
    return out


def hardware(n, activations, storage, repeats, rank=None, k=10) -> list[dict]:
    """The kernel against ``X @ X.T``, one solver iteration against one plain product of the same bytes."""
    from sk_deq.kernel_ridge._fit import fill_store
    from sk_deq.kernel_ridge._plan import plan_fit
    from sk_deq.kernel_ridge._solvers import NystromPreconditioner, low_rank_factor, pcg
    from sk_deq.kernels import ImplicitKernelEngine

    Xs, tau0 = _scaled(n)
    rank = _default("preconditioner_rank") if rank is None else rank
    plan = plan_fit(n, Xs.shape[1], k, storage=storage, solver="cg", rank=rank)
    rows = []
    for act in activations:
        eng = ImplicitKernelEngine(act, 0.2, tau0, bias_variance=1.0)
        S = eng.prepare(Xs)
        kernel_s, gemm_s = [], []
        for _ in range(repeats):
            store, t = timed(fill_store, eng, S, plan)
            kernel_s.append(t)
            del store
            gemm_s.append(timed(_gram, Xs)[1])
        rows.append(
            {
                "part": "kernel",
                "activation": act,
                "n": n,
                "kernel_s": statistics.median(kernel_s),
                "gemm_s": statistics.median(gemm_s),
                "ratio": statistics.median(kernel_s) / statistics.median(gemm_s),
            }
        )
    # the solver: the last activation's store
    store = fill_store(eng, S, plan)
    Y = np.sign(np.random.default_rng(0).standard_normal((n, k)))
    M = NystromPreconditioner(low_rank_factor(store, rank, np.random.default_rng(0))[0], 0.01)
    dense = np.ones((n, store.nbytes // (n * store.dtype.itemsize)), dtype=store.dtype)  # the store's bytes
    V = np.ones((dense.shape[1], k), dtype=store.dtype)
    square = np.ones((n, n), dtype=store.dtype)  # the full n x n matrix: twice the triangle's bytes
    W = np.ones((n, k), dtype=store.dtype)
    iters = 10
    it_s, pass_s, square_s = [], [], []
    for _ in range(repeats):
        # iters iterations, plus the product that recomputes the final residual (counted as one more)
        _, t = timed(pcg, store.matmat, Y, 0.01, M, tol=1e-30, max_iter=iters)
        it_s.append(t / (iters + 1))
        pass_s.append(timed(lambda: dense @ V)[1])
        square_s.append(timed(lambda: square @ W)[1])
    square = None  # the n x n matrix freed before the next activation
    rows.append(
        {
            "part": "solver",
            "activation": act,
            "n": n,
            "storage": plan.dtype.name,
            "rank": rank,
            "targets": k,
            "iteration_s": statistics.median(it_s),
            "plain_pass_s": statistics.median(pass_s),
            "ratio": statistics.median(it_s) / statistics.median(pass_s),
            "square_pass_s": statistics.median(square_s),
            "ratio_square": statistics.median(it_s) / statistics.median(square_s),
        }
    )
    return rows


# -- defaults -------------------------------------------------------------------------------

RANKS, CAL_ALPHAS, TOLS = (1000, 2000, 4000), (1.0, 0.1, 0.01, 0.001), (1e-3, 1e-4, 1e-6)


def _default(name):
    from sk_deq import ImplicitCKRidgeClassifier

    return ImplicitCKRidgeClassifier().get_params()[name]


def defaults(n, activations, kernel="ck", ranks=RANKS, alphas=CAL_ALPHAS, tols=TOLS) -> list[dict]:
    """Iterations and test accuracy against the preconditioner's rank, the ridge and the tolerance."""
    from sk_deq import ImplicitCKRidgeClassifier
    from sk_deq._scaling import apply_input_scaling
    from sk_deq.kernel_ridge._fit import fill_store
    from sk_deq.kernel_ridge._plan import plan_fit
    from sk_deq.kernel_ridge._solvers import NystromPreconditioner, low_rank_factor, pcg

    X, y = _fashion(n)
    X_test, y_test = _fashion(test=True)
    rows = []
    for act in activations:
        clf = ImplicitCKRidgeClassifier(act, kernel=kernel)
        Xv, Y, _ = clf._validated(X, y, None)
        engine, Xs = clf._prepared(Xv, None)
        plan = plan_fit(n, Xs.shape[1], Y.shape[1], storage="float64", solver="cg", rank=max(ranks))
        S = engine.prepare(Xs)
        store, kernel_s = timed(fill_store, engine, S, plan)
        X_test_s = apply_input_scaling(np.asarray(X_test, dtype=np.float64), clf.input_mean_, clf.input_scale_)
        K_test = engine.kernel(engine.prepare(np.asarray(X_test_s)), S)  # n_test x n: small enough here
        for rank in ranks:
            (F, _), factor_s = timed(low_rank_factor, store, rank, np.random.RandomState(0))
            for alpha in alphas:
                M, C, done, t0 = NystromPreconditioner(F, alpha), None, 0, time.perf_counter()
                for tol in sorted(tols, reverse=True):
                    C, info = pcg(store.matmat, Y, alpha, M, tol=tol, max_iter=5000, x0=C)
                    done += info.n_iter
                    pred = clf.classes_[np.argmax(K_test @ C, axis=1)]
                    rows.append(
                        {
                            "part": "defaults",
                            "activation": act,
                            "kernel": kernel,
                            "n": n,
                            "rank": rank,
                            "alpha": alpha,
                            "tol": tol,
                            "n_iter": done,
                            "factor_s": factor_s,
                            "kernel_s": kernel_s,
                            "solve_s": time.perf_counter() - t0,
                            "accuracy": float((pred == y_test).mean()),
                        }
                    )
                    print(rows[-1], flush=True)
        del store
    return rows


# -- fit ------------------------------------------------------------------------------------


def fit_worker(n_train, activation, storage, alphas, verbose, device=None):
    """In a fresh process: fit on ``n_train`` Fashion-MNIST images, predict the test set; its own peak memory."""
    from sk_deq import ImplicitCKRidgeClassifier

    X, y = _fashion(n_train)
    X_test, y_test = _fashion(test=True)
    clf = ImplicitCKRidgeClassifier(
        activation, alpha=list(alphas), storage=storage, random_state=0, verbose=verbose, device=device
    )
    t0 = time.perf_counter()
    clf.fit(X, y)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    acc = float((clf.predict(X_test) == y_test).mean())
    predict_s = time.perf_counter() - t0
    plan = clf.fit_plan_
    return {
        "activation": activation,
        "n_train": int(n_train),
        "n_test": len(y_test),
        "storage": plan.dtype.name,
        "solver": plan.solver,
        "plan_gib": plan.total / 2**30,
        "store_gib": plan.store / 2**30,
        "alpha": clf.alpha_,
        "alphas": list(alphas),
        "alpha_scores": clf.alpha_scores_.tolist() if hasattr(clf, "alpha_scores_") else None,
        "n_iter": int(clf.n_iter_),
        "residual": clf.residual_,
        "accuracy": acc,
        "fit_s": fit_s,
        "predict_s": predict_s,
        "fit_predict_s": fit_s + predict_s,
        "phases_s": clf.fit_time_,
        "peak_rss_gib": peak_rss_bytes() / 2**30,
        "device": device,
        "peak_device_gib": _peak_device_gib(device),
    }


def _peak_device_gib(device) -> float | None:
    """The CUDA device's peak of allocated memory in this process, GiB (None without a CUDA device)."""
    if device is None or not str(device).startswith("cuda"):
        return None
    import torch

    return torch.cuda.max_memory_allocated(device) / 2**30


def fit_runs(n_train, activations, storages, alphas, verbose=0, device=None) -> list[dict]:
    rows = []
    for act in activations:
        for st in storages:
            rows.append(in_subprocess(__name__, "fit_worker", n_train, act, st, list(alphas), verbose, device))
            print(rows[-1], flush=True)  # each fit's record as it ends
    return rows


def collect(
    quick=False,
    repeats=3,
    only=("hardware", "fit"),
    n=None,
    n_train=None,
    activations=("relu", "tanh"),
    storages=("auto",),
    alphas=ALPHAS,
    device=None,
    ranks=RANKS,
    tols=TOLS,
    kernel="ck",
) -> dict:
    """The benchmark's records: ``hardware`` and ``fit`` rows (see the module docstring)."""
    n = n or (2000 if quick else 20000)
    n_train = n_train or (3000 if quick else 60000)
    out = {
        "config": {
            "n": n,
            "n_train": n_train,
            "activations": list(activations),
            "storages": list(storages),
            "alphas": list(alphas),
            "repeats": repeats,
            "quick": quick,
            "ranks": list(ranks),
            "tols": list(tols),
            "kernel": kernel,
            "device": device,
        },
        "records": [],
    }
    if "hardware" in only:
        out["hardware"] = hardware(n, activations, "float32" if n > 30000 else "float64", repeats)
        out["records"] += out["hardware"]
    if "defaults" in only:
        out["defaults"] = defaults(n, activations, kernel, ranks, alphas, tols)
        out["records"] += out["defaults"]
    if "fit" in only:
        out["fit"] = fit_runs(n_train, activations, storages, alphas, device=device)
        out["records"] += out["fit"]
    return out


def main(argv=None):
    ap = parser(__doc__, name=__name__, quick="small sizes (minutes)", repeats=3)
    ap.add_argument("--only", nargs="+", choices=["hardware", "defaults", "fit"], default=["hardware", "fit"])
    ap.add_argument("--n", type=int, default=None, help="rows of the hardware part (default 20,000; quick 2,000)")
    ap.add_argument("--n-train", type=int, default=None, help="training rows of the fit part (default 60,000)")
    ap.add_argument("--activations", nargs="+", default=["relu", "tanh"])
    ap.add_argument("--storages", nargs="+", default=["auto"], choices=["auto", "float64", "float32"])
    ap.add_argument("--alphas", nargs="+", type=float, default=list(ALPHAS))
    ap.add_argument("--device", default=None, help="the fit part's device, e.g. cuda (default: numpy on the host)")
    ap.add_argument("--ranks", nargs="+", type=int, default=list(RANKS), help="the defaults part's ranks")
    ap.add_argument("--tols", nargs="+", type=float, default=list(TOLS), help="the defaults part's tolerances")
    ap.add_argument("--kernel", default="ck", choices=["ck", "feature", "ntk"], help="the defaults part's kernel")
    args = ap.parse_args(argv)
    res = collect(
        args.quick,
        args.repeats,
        args.only,
        args.n,
        args.n_train,
        args.activations,
        args.storages,
        args.alphas,
        args.device,
        args.ranks,
        args.tols,
        args.kernel,
    )
    return finish(res, args, lambda r: "\n".join(str(rec) for rec in r["records"]))
