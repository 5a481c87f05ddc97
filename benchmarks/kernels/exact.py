"""Speed, memory and accuracy of the exact implicit kernels; kernel ridge with them.

Sections (each can be run alone with ``--only``):

``speed``
    Exact implicit CK of real MNIST digits (784 features, global input
    scaling; above 5,000 samples the set is completed by the same digits
    shifted by one pixel) for ReLU, GELU, tanh, SiLU, erf and sigmoid
    (``prepare`` plus ``kernel``), as a ratio to the
    float64 ``X @ X.T`` of the same samples, measured right before each
    kernel in the same process.  Every ratio is repeated and reported as
    median and range (the machine is shared and noisy).
``near_cost``
    The weight of a degree of an entry near correlation one in the split
    of a block (``sk_deq.kernels._series._NEAR_COST``): the serial exact
    kernel of tanh, SiLU and sigmoid (``prepare`` plus ``kernel``, one job,
    one BLAS thread) at the first of ``--sizes`` for the weights
    ``--near-costs``, interleaved, and each kernel's largest difference
    from the default's.
``mc``
    Monte Carlo (random DEQs, as in the paper) against the exact kernel:
    relative spectral error and time per width, the width each accuracy
    needs (error ~ C / sqrt(m), fitted), and the time ratio MC / exact at
    equal accuracy.
``memory``
    Peak memory (tracemalloc) of ``transform`` on a large X beyond its
    output, against the block size.
``accuracy``
    Exact vs the scalar per-entry reference, vs Monte Carlo, and the
    linearized equivalent vs exact (Gaussian mixture and real digits).
``krr``
    Kernel ridge regression / classification on real data (MNIST digits,
    10 classes; scikit-learn's diabetes regression set) with the implicit CK
    and NTK, RBF, the linear kernel and the exact NNGP of explicit networks:
    the shallow network matched to the DEQ (theory page, 'Explicit networks') and a plain
    one-hidden-layer ReLU network.  Hyperparameters by 3-fold CV on the
    training set; the kernel time is reported next to the score.

``run_all`` runs :func:`collect`: the speed section at n = 4,000 (quick
1,000), the six activations, one job, one BLAS / OpenMP thread.

Usage::

    python -m benchmarks.kernels exact                       # everything
    python -m benchmarks.kernels exact --only speed --sizes 4000 10000 --repeats 3 --n-jobs 1 2
    python -m benchmarks.kernels exact --quick               # smoke run
    python -m benchmarks.kernels exact --only speed mc --json kernels.json
    python -m benchmarks.kernels exact --only near_cost --sizes 3000 --near-costs 4 8 12 16 24 --repeats 7
"""

from __future__ import annotations

import functools
import gc
import math
import os
import platform
import statistics
import tracemalloc

import numpy as np
from .._data import digits_784, global_scale
from .._data import load_digits_once as mnist
from .._harness import finish, fmt_range, parser, rounds, timed

from sk_deq.datasets import make_gaussian_mixture
from sk_deq.kernels import (
    ImplicitKernelEngine,
    explicit_kernel,
    implicit_kernel,
    linearized_implicit_kernel,
    monte_carlo_implicit_kernel,
    relative_spectral_error,
)
from sk_deq.theory import implicit_kernel_entry
from sk_deq.transformers import ImplicitCKTransformer


def exact_square_kernel(eng, X, n_jobs):
    return eng.kernel(eng.prepare(X), n_jobs=n_jobs)


# ---------------------------------------------------------------------------


SPEED_ACTIVATIONS = ("relu", "gelu", "tanh", "silu", "erf", "sigmoid")


def bench_speed(sizes, repeats, acts=SPEED_ACTIVATIONS, n_jobs_list=(1,), *, sigma_a2=0.2, kernel="ck"):
    """Time the exact implicit kernel (``prepare`` + ``kernel``) against ``X @ X.T``.

    Returns one record per ``(n, n_jobs, activation)``: ``n``, ``n_jobs``,
    ``activation``, ``method`` (the dual solver), ``gemm_s`` and
    ``kernel_s`` (seconds, one per repeat) and ``ratio`` (their quotients,
    the GEMM timed right before each kernel in the same process).
    """
    acts = list(acts)
    print(f"\n== speed: exact implicit {kernel} vs float64 X @ X.T (784 features) ==")
    print("ratio = kernel time / X @ X.T time measured just before it; median [min-max] over repeats\n")
    print(f"{'n':>6} {'n_jobs':>6} {'activation':>10} {'X@X.T s':>16} {'kernel s':>18} {'ratio':>20}  dual")
    records = []
    for n in sizes:
        X, _ = digits_784(n)
        for n_jobs in n_jobs_list:
            once = functools.partial(_speed_once, X, n_jobs, sigma_a2, kernel)
            for act in acts:  # one untimed round: compiled loops loaded, pools and memory warm
                once(act, -1)
            # every repeat times every activation, in an order rotated so that load bursts spread out
            res = rounds(acts, repeats, once)
            for act in acts:
                txs, tks = (list(v) for v in zip(*res[act]))
                rs = [tk / tx for tx, tk in zip(txs, tks)]
                method = ImplicitKernelEngine(act, sigma_a2, 1.0, kernel=kernel).method
                print(
                    f"{n:>6} {n_jobs:>6} {act:>10} {fmt_range(txs):>16} {fmt_range(tks):>18} {fmt_range(rs):>20}"
                    f"  {method}",
                    flush=True,
                )
                records.append(
                    {
                        "n": int(n),
                        "n_jobs": int(n_jobs),
                        "activation": act,
                        "method": method,
                        "gemm_s": list(txs),
                        "kernel_s": list(tks),
                        "ratio": list(rs),
                    }
                )
    return records


def _speed_once(X, n_jobs, sigma_a2, kernel, act, _round):
    """Seconds of ``X @ X.T`` and, right after it, of the exact kernel of ``X``."""
    gc.collect()
    _, tx = timed(np.matmul, X, X.T)
    gc.collect()
    _, tk = timed(exact_square_kernel, ImplicitKernelEngine(act, sigma_a2, 1.0, kernel=kernel), X, n_jobs)
    return tx, tk


def collect(quick: bool = False, repeats: int = 3) -> dict:
    """``run_all``'s entry: :func:`bench_speed` at n = 3,000 (quick 1,000), the six activations, as the goals are stated.

    Twice: on all cores (``n_jobs=-1`` against the GEMM on all BLAS
    threads: the goals' figure), then serially (one job, the GEMM and the
    kernel on one BLAS / OpenMP thread each).
    """
    from threadpoolctl import threadpool_limits

    sizes = [1000] if quick else [3000]
    records = bench_speed(sizes, repeats, SPEED_ACTIVATIONS, [-1])
    with threadpool_limits(limits=1):
        records += bench_speed(sizes, repeats, SPEED_ACTIVATIONS, [1])
    config = {"sizes": sizes, "repeats": repeats, "activations": list(SPEED_ACTIVATIONS), "n_jobs": [-1, 1]}
    config["threads"] = "n_jobs=-1: all BLAS threads for the GEMM; n_jobs=1: 1 BLAS and OpenMP thread for both"
    return {"config": config, "records": records}


NEAR_COSTS = (2, 4, 8, 12)


def bench_near_cost(n, repeats, weights=NEAR_COSTS, acts=("tanh", "silu", "sigmoid")):
    """Time the serial exact kernel for each weight of ``_series._NEAR_COST``; see the module docstring."""
    from unittest import mock

    from threadpoolctl import threadpool_limits

    from sk_deq.kernels import _series

    X, _ = digits_784(n)
    print(f"\n== near_cost: the split's weight of a near entry's degree, serial kernel, n = {n} ==")
    records = []
    with threadpool_limits(limits=1):
        for act in acts:
            ref = exact_square_kernel(ImplicitKernelEngine(act, 0.2, 1.0), X, 1)

            def once(w, _round, act=act, ref=ref):
                with mock.patch.object(_series, "_NEAR_COST", w):
                    K, t = timed(exact_square_kernel, ImplicitKernelEngine(act, 0.2, 1.0), X, 1)
                return t, float(np.max(np.abs(K - ref)))

            for w in weights:  # one untimed round
                once(w, -1)
            res = rounds(weights, repeats, once)
            for w in weights:
                ts = [t for t, _ in res[w]]
                default = w == _series._NEAR_COST
                print(f"{act:>8} weight {w:>3}{' (default)' if default else '':>10}: {fmt_range(ts, '.3f')} s")
                records.append(
                    {"activation": act, "n": int(n), "near_cost": w, "default": default, "kernel_s": ts,
                     "median_s": statistics.median(ts), "max_abs_diff_to_default": res[w][-1][1]}
                )  # fmt: skip
    return records


def bench_mc(n, widths, act="relu"):
    print(f"\n== Monte Carlo vs exact ({act}, implicit CK, {n} real digits) ==")
    X, _ = digits_784(n, seed=1)
    E, te = timed(implicit_kernel, X, activation=act, tau0=1.0)
    _, tx = timed(np.matmul, X, X.T)
    print(f"exact: {te:.3f} s ({te / tx:.2f} x X @ X.T); accuracy ~1e-13 (see the accuracy section)")
    errs, times = [], []
    print(f"{'width m':>8} {'error':>10} {'time s':>9} {'MC / exact':>11}")
    for m in widths:
        M, tm = timed(monte_carlo_implicit_kernel, X, act, 0.2, n_hidden=m, tau0=1.0, random_state=m)
        err = relative_spectral_error(E, M)
        errs.append(err)
        times.append(tm)
        print(f"{m:>8} {err:>10.4f} {tm:>9.2f} {tm / te:>11.1f}", flush=True)
    # error ~ C m^-1/2 and time ~ m^q: fitted on the measured widths
    lw, le, lt = np.log(widths), np.log(errs), np.log(times)
    ce = np.polyfit(lw, le, 1)
    ct = np.polyfit(lw, lt, 1)
    print(f"fit: error ~ m^{ce[0]:.2f}, time ~ m^{ct[0]:.2f}")
    for target in (0.05, 0.01, 0.001):
        m_need = math.exp((math.log(target) - ce[1]) / ce[0])
        t_need = math.exp(ct[1] + ct[0] * math.log(m_need))
        print(f"  error {target:g}: width ~{m_need:,.0f}, time ~{t_need:,.1f} s = {t_need / te:,.0f} x exact")
    fitted = {"error_exponent": float(ce[0]), "time_exponent": float(ct[0])}
    return {"n": n, "exact_s": te, "gemm_s": tx, "widths": list(widths), "errors": errs, "seconds": times, **fitted}


def bench_memory(n_fit, n_news, block_sizes):
    print(f"\n== memory of transform against {n_fit} fitted samples (tracemalloc peak) ==")
    print("beyond output = peak - output; per-sample state (scaled copy of X, augmented rows, Hermite")
    print("coefficients) is O(n_new x n_features), block temporaries O(block_size x n_fit)")
    X, _ = digits_784(n_fit + max(n_news), seed=2)
    rows = []
    for act in ("relu", "tanh"):
        for b in block_sizes:
            tr = ImplicitCKTransformer(act, block_size=b, input_scaling="none").fit(X[:n_fit])
            for n_new in n_news:
                Xn = np.ascontiguousarray(X[n_fit : n_fit + n_new])
                gc.collect()
                tracemalloc.start()
                K = tr.transform(Xn)
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                out = K.nbytes
                del K
                extra = peak - out
                rows.append({"activation": act, "block_size": b, "n_new": n_new, "output_b": out, "beyond_b": extra})
                print(
                    f"{act:>5} block {b:>5} n_new {n_new:>6}: output {out / 2**20:7.1f} MiB, beyond output "
                    f"{extra / 2**20:6.1f} MiB (input X {Xn.nbytes / 2**20:5.1f} MiB, one block "
                    f"{8 * b * b / 2**20:5.1f} MiB)",
                    flush=True,
                )
    return rows


def bench_accuracy():
    """Prints the checks; returns the printed lines."""
    lines = []

    def say(text):
        lines.append(text)
        print(text, flush=True)

    print("\n== accuracy ==")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 30))
    X /= np.sqrt((X * X).sum(1).mean())
    pairs = [(int(i), int(j)) for i, j in rng.integers(0, 40, size=(6, 2))]
    for act in ("relu", "gelu", "tanh", "erf"):
        for kern in ("ck", "ntk"):
            K = implicit_kernel(X, activation=act, kernel=kern, tau0=1.0)
            err = max(
                abs(K[i, j] - implicit_kernel_entry(act, 0.2, 1.0, X[i] @ X[i], X[j] @ X[j], X[i] @ X[j], kernel=kern))
                for i, j in pairs
            )
            say(f"exact vs scalar reference  {act:>5} {kern:>3}: max abs error {err:.1e} (6 entries)")
    Xg, _ = make_gaussian_mixture(200, 160, random_state=0)
    t0 = math.sqrt(np.mean((Xg * Xg).sum(1)))
    for act in ("relu", "tanh"):
        E = implicit_kernel(Xg, activation=act, tau0=t0)
        for m in (1000, 4000):
            M = monte_carlo_implicit_kernel(Xg, act, 0.2, n_hidden=m, tau0=t0, random_state=0)
            say(f"exact vs Monte Carlo       {act:>5} ck, GMM n=200 p=160, m={m}: {relative_spectral_error(E, M):.4f}")
    for p in (100, 400, 1600):
        Xg, _ = make_gaussian_mixture(int(1.25 * p), p, random_state=0)
        t0 = math.sqrt(np.mean((Xg * Xg).sum(1)))
        row = []
        for act in ("relu", "tanh"):
            for kern in ("ck", "feature"):
                E = implicit_kernel(Xg, activation=act, kernel=kern, tau0=t0)
                L = linearized_implicit_kernel(Xg, activation=act, kernel=kern, tau0=t0)
                row.append(f"{act} {kern} {relative_spectral_error(E, L):.4f}")
        say(f"linearized vs exact, GMM p={p:>4}: " + ", ".join(row))
    Xd, _ = digits_784(1000, seed=3)
    row = []
    for act in ("relu", "tanh"):
        for kern in ("ck", "feature"):
            E = implicit_kernel(Xd, activation=act, kernel=kern, tau0=1.0)
            L = linearized_implicit_kernel(Xd, activation=act, kernel=kern, tau0=1.0)
            row.append(f"{act} {kern} {relative_spectral_error(E, L):.4f}")
    say("linearized vs exact, 1000 digits: " + ", ".join(row))
    return lines


# ---------------------------------------------------------------------------


def _cv_krr(K_train, Y, alphas, classify, folds=3, seed=0):
    """Mean CV score of kernel ridge (precomputed kernel) for every alpha."""
    n = len(Y)
    idx = np.random.default_rng(seed).permutation(n)
    parts = np.array_split(idx, folds)
    scores = np.zeros(len(alphas))
    for f in range(folds):
        te = parts[f]
        tr = np.concatenate([parts[g] for g in range(folds) if g != f])
        Ktt = K_train[np.ix_(tr, tr)]
        w, V = np.linalg.eigh(Ktt)
        Vy = V.T @ Y[tr]
        Kte = K_train[np.ix_(te, tr)]
        for a, alpha in enumerate(alphas):
            pred = Kte @ (V @ (Vy / (w + alpha)[:, None] if Vy.ndim == 2 else Vy / (w + alpha)))
            scores[a] += _score(pred, Y[te], classify) / folds
    return scores


def _score(pred, Y, classify):
    if classify:
        return float(np.mean(pred.argmax(1) == Y.argmax(1)))
    return float(1.0 - np.sum((pred - Y) ** 2) / np.sum((Y - Y.mean()) ** 2))


def _krr_eval(name, kernel_fn, params, Xtr, Ytr, Xte, Yte, alphas, classify):
    """Choose (param, alpha) by CV on the training kernel; refit; test score."""
    best = None
    ktime = []
    for prm in params:
        (Ktr, Kte), t = timed(kernel_fn, prm, Xtr, Xte)
        ktime.append(t)
        cv = _cv_krr(Ktr, Ytr, alphas, classify)
        a = int(np.argmax(cv))
        if best is None or cv[a] > best[0]:
            best = (cv[a], prm, alphas[a], Ktr, Kte)
    cv, prm, alpha, Ktr, Kte = best
    dual = np.linalg.solve(Ktr + alpha * np.eye(len(Ktr)), Ytr)
    test = _score(Kte @ dual, Yte, classify)
    print(
        f"  {name:<38} param={prm!s:<10} alpha={alpha:<8g} CV {cv:.4f}  test {test:.4f}  kernel {statistics.median(ktime):6.2f} s"
    )
    return {"kernel": name, "param": prm, "alpha": alpha, "cv": cv, "test": test, "kernel_s": ktime}


def bench_krr(n_train, n_test):
    from sk_deq.matching import match_explicit

    alphas = [1e-3, 1e-2, 1e-1, 1.0, 10.0]
    sigmas = [0.1, 0.2, 0.4, 0.6]

    def implicit(act, kern):
        def fn(sa, A, B):
            eng = ImplicitKernelEngine(act, sa, 1.0, kernel=kern)
            SA_, SB = eng.prepare(A), eng.prepare(B)
            return eng.kernel(SA_), eng.kernel(SB, SA_)

        return fn

    matches = {sa: match_explicit("relu", sa, 1.0).layers for sa in sigmas}  # solved once, outside the timings

    def linearized(act, kern):
        def fn(sa, A, B):
            return (
                linearized_implicit_kernel(A, activation=act, sigma_a2=sa, kernel=kern, tau0=1.0),
                linearized_implicit_kernel(B, A, activation=act, sigma_a2=sa, kernel=kern, tau0=1.0),
            )

        return fn

    def matched(sa, A, B):
        layers = matches[sa]
        return explicit_kernel(A, layers=layers, tau0=1.0), explicit_kernel(B, A, layers=layers, tau0=1.0)

    def relu1(_, A, B):
        return explicit_kernel(A, layers=["relu"], tau0=1.0), explicit_kernel(B, A, layers=["relu"], tau0=1.0)

    def rbf(gamma, A, B):
        from sklearn.metrics.pairwise import rbf_kernel

        return rbf_kernel(A, gamma=gamma), rbf_kernel(B, A, gamma=gamma)

    def linear(_, A, B):
        return A @ A.T, B @ A.T

    records = []
    for data in ("mnist", "diabetes"):
        if data == "mnist":
            X, y = mnist()
            idx = np.random.default_rng(0).permutation(len(X))[: n_train + n_test]
            X, y = X[idx], y[idx]
            Y = np.eye(10)[y]
            Y = Y - 0.1
            classify = True
            print(f"\n== kernel ridge classification: MNIST digits, {n_train} train / {n_test} test, 784 features ==")
        else:
            from sklearn.datasets import load_diabetes

            X, y = load_diabetes(return_X_y=True)
            idx = np.random.default_rng(0).permutation(len(X))
            X, y = X[idx], y[idx]
            n_tr = 330
            Y = (y - y[:n_tr].mean()) / y[:n_tr].std()
            classify = False
            print(f"\n== kernel ridge regression: diabetes, {n_tr} train / {len(X) - n_tr} test, 10 features (R^2) ==")
        ntr = n_train if data == "mnist" else 330
        Xtr, Xte = global_scale(X[:ntr], X[:ntr]), global_scale(X[ntr:], X[:ntr])
        Ytr, Yte = Y[:ntr], Y[ntr:]
        gammas = [0.25, 0.5, 1.0, 2.0]  # inputs have mean squared norm 1
        rows = [
            ("implicit CK G*, relu (exact)", implicit("relu", "ck"), sigmas),
            ("implicit feature Sigma*, relu (exact)", implicit("relu", "feature"), sigmas),
            ("implicit NTK, relu (exact)", implicit("relu", "ntk"), sigmas),
            ("implicit CK G*, relu (linearized)", linearized("relu", "ck"), sigmas),
            ("implicit CK, tanh (exact)", implicit("tanh", "ck"), sigmas[:3]),
            ("matched 2-layer explicit NNGP", matched, sigmas),
            ("1-layer ReLU NNGP (unmatched)", relu1, [None]),
            ("RBF", rbf, gammas),
            ("linear", linear, [None]),
        ]
        for name, fn, params in rows:
            records.append({"data": data, **_krr_eval(name, fn, params, Xtr, Ytr, Xte, Yte, alphas, classify)})
    return records


def main(argv=None):
    """Run the sections of ``--only`` (all by default), printing as they go; ``--json`` keeps what they return."""
    ap = parser(__doc__, name=__name__, quick="small sizes, one repeat", repeats=3)
    ap.add_argument("--only", nargs="*", default=["accuracy", "speed", "near_cost", "mc", "memory", "krr"])
    ap.add_argument("--sizes", type=int, nargs="*", default=[4000, 6000, 8000, 10000])
    ap.add_argument("--n-jobs", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--activations", nargs="*", default=list(SPEED_ACTIVATIONS))
    ap.add_argument("--near-costs", type=int, nargs="*", default=list(NEAR_COSTS))
    ap.add_argument("--mc-n", type=int, default=2000)
    ap.add_argument("--mc-widths", type=int, nargs="*", default=[250, 500, 1000, 2000, 4000])
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.n_jobs = [1000], 1, [1]
        args.mc_n, args.mc_widths = 300, [250, 500, 1000]
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs, {platform.machine()}")
    sections = {
        "accuracy": bench_accuracy,
        "speed": lambda: bench_speed(args.sizes, args.repeats, args.activations, args.n_jobs),
        "near_cost": lambda: bench_near_cost(args.sizes[0], args.repeats, args.near_costs),
        "mc": lambda: bench_mc(args.mc_n, args.mc_widths),
        "memory": lambda: bench_memory(
            1000 if args.quick else 2000, [1000, 2000] if args.quick else [2000, 8000], [256, 1024]
        ),
        "krr": lambda: bench_krr(600 if args.quick else 4000, 200 if args.quick else 1000),
    }
    result = {"config": {k: v for k, v in vars(args).items() if k != "json"}}
    result.update({name: run() for name, run in sections.items() if name in args.only})
    return finish(result, args)
