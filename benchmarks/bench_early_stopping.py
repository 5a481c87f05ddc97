"""What early stopping costs: test accuracy with and without it, for several optimizers.

For every data set, split seed and configuration the same classifier is fitted
twice on the same stratified 80/20 split, with ``early_stopping=False`` and
``True`` (which holds out 10 % of the training split for validation and keeps
the epoch with the lowest validation loss), and the test accuracies are
compared.  The bar: early stopping must not cost more than one accuracy point.

Usage::

    python benchmarks/bench_early_stopping.py            # digits and MNIST-5k, seeds 0 and 1 (about 3 min)
    python benchmarks/bench_early_stopping.py --quick    # digits, seed 0
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split

from sk_deq import DEQClassifier, MatchedExplicitClassifier
from sk_deq.experiments import load_dataset

CONFIGS = [
    ("matched, adam", MatchedExplicitClassifier, {"solver": "adam"}),
    ("DEQ, adam", DEQClassifier, {"solver": "adam"}),
    ("matched, lbfgs", MatchedExplicitClassifier, {"solver": "lbfgs"}),
    ("matched, sgd lr=0.01", MatchedExplicitClassifier, {"solver": "sgd", "learning_rate_init": 0.01}),
]


def run(datasets, seeds, n_hidden):
    """Yield ``(data set, seed, configuration, runs)``, ``runs`` = [(accuracy %, epochs, seconds)] without and with ES."""
    for name in datasets:
        X, y = load_dataset(name)
        for seed in seeds:
            X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, stratify=y, random_state=seed)
            for label, cls, kw in CONFIGS:
                runs = []
                for es in (False, True):
                    est = cls(n_hidden=n_hidden, random_state=seed, early_stopping=es, **kw)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", ConvergenceWarning)
                        t0 = time.perf_counter()
                        est.fit(X_tr, y_tr)
                    runs.append((100 * est.score(X_te, y_te), est.n_iter_, time.perf_counter() - t0))
                yield name, seed, label, runs


def collect(quick=False, repeats=3, threads=1):
    """The benchmark as JSON records (one per data set and configuration), over ``repeats`` seeds.

    Full: digits and MNIST-5k, width 1024; quick: digits, width 256.  Times
    are fit seconds (median over the seeds); ``threads`` torch threads.
    """
    datasets = ["digits"] if quick else ["digits", "mnist"]
    seeds = list(range(max(int(repeats), 1)))
    n_hidden = 256 if quick else 1024
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        rows = list(run(datasets, seeds, n_hidden))
        config = {
            "datasets": datasets,
            "seeds": seeds,
            "n_hidden": n_hidden,
            "split": "80/20 stratified",
            "torch_threads": torch.get_num_threads(),
        }
    finally:
        torch.set_num_threads(before)
    records = []
    for name in datasets:
        for label, _, _ in CONFIGS:
            rs = [runs for d, _, lab, runs in rows if d == name and lab == label]
            diffs = [r[1][0] - r[0][0] for r in rs]
            records.append(
                {
                    "dataset": name,
                    "configuration": label,
                    "no_es_acc_pct": statistics.fmean(r[0][0] for r in rs),
                    "es_acc_pct": statistics.fmean(r[1][0] for r in rs),
                    "es_minus_no_es_pt": statistics.fmean(diffs),
                    "worst_pt": min(diffs),
                    "no_es_epochs": statistics.median(r[0][1] for r in rs),
                    "es_epochs": statistics.median(r[1][1] for r in rs),
                    "no_es_fit_s": statistics.median(r[0][2] for r in rs),
                    "es_fit_s": statistics.median(r[1][2] for r in rs),
                    "seeds": len(rs),
                }
            )
    return {"config": config, "records": records}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["digits", "mnist"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--n-hidden", type=int, default=1024)
    parser.add_argument("--quick", action="store_true", help="digits, seed 0")
    args = parser.parse_args(argv)
    if args.quick:
        args.datasets, args.seeds = ["digits"], [0]
    torch.set_num_threads(1)
    print(f"width {args.n_hidden}, 80/20 stratified splits, 1 torch thread; accuracy in %")
    print(
        f"{'data':<7} {'seed':>4}  {'configuration':<22} {'no ES':>7} {'epochs':>6}  {'ES':>7} {'epochs':>6}  {'ES - no ES':>10}"
    )
    worst = 0.0
    for name, seed, label, runs in run(args.datasets, args.seeds, args.n_hidden):
        diff = runs[1][0] - runs[0][0]
        worst = min(worst, diff)
        print(
            f"{name:<7} {seed:>4}  {label:<22} {runs[0][0]:>7.2f} {runs[0][1]:>6}  {runs[1][0]:>7.2f} "
            f"{runs[1][1]:>6}  {diff:>+10.2f}",
            flush=True,
        )
    print(f"\nlargest cost of early stopping: {-worst:.2f} accuracy points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
