"""What early stopping costs: test accuracy with and without it, for several optimizers.

For every data set, split seed and configuration the same classifier is fitted
twice on the same stratified 80/20 split, with ``early_stopping=False`` and
``True`` (which holds out 10 % of the training split for validation and keeps
the epoch with the lowest validation loss), and the test accuracies are
compared.  The bar: early stopping must not cost more than one accuracy point.

Usage::

    python -m benchmarks.networks early_stopping            # digits and MNIST-5k, seeds 0 and 1 (about 3 min)
    python -m benchmarks.networks early_stopping --quick    # digits, seed 0
    python -m benchmarks.networks early_stopping --repeats 3 --json es.json   # seeds 0-2, results kept
"""

from __future__ import annotations

import statistics
import warnings

from .._harness import finish, parser, timed
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split

from sk_deq import DEQClassifier, MatchedExplicitClassifier
from sk_deq.experiments import load_dataset
from sk_deq.experiments._common import torch_threads

CONFIGS = [
    ("matched, adam", MatchedExplicitClassifier, {"solver": "adam"}),
    ("DEQ, adam", DEQClassifier, {"solver": "adam"}),
    ("matched, lbfgs", MatchedExplicitClassifier, {"solver": "lbfgs"}),
    ("matched, sgd lr=0.01", MatchedExplicitClassifier, {"solver": "sgd", "learning_rate_init": 0.01}),
]
HEADER = (
    f"{'data':<7} {'seed':>4}  {'configuration':<22} {'no ES':>7} {'epochs':>6}  {'ES':>7} {'epochs':>6}  "
    f"{'ES - no ES':>10}"
)


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
                        _, seconds = timed(est.fit, X_tr, y_tr)
                    runs.append((100 * est.score(X_te, y_te), est.n_iter_, seconds))
                yield name, seed, label, runs


def _row(name, seed, label, runs) -> str:
    return (
        f"{name:<7} {seed:>4}  {label:<22} {runs[0][0]:>7.2f} {runs[0][1]:>6}  {runs[1][0]:>7.2f} "
        f"{runs[1][1]:>6}  {runs[1][0] - runs[0][0]:>+10.2f}"
    )


def collect(quick=False, repeats=3, threads=1, datasets=None, seeds=None, n_hidden=None, show=None):
    """The benchmark as JSON records (one per data set and configuration), over ``repeats`` seeds.

    Full: digits and MNIST-5k, width 1024; quick: digits, width 256 (the
    arguments, where given, win).  Times are fit seconds (median over the
    seeds); ``threads`` torch threads; ``show(line)``, if given, sees every
    fit pair as it is measured.
    """
    datasets = datasets or (["digits"] if quick else ["digits", "mnist"])
    seeds = list(seeds or range(max(int(repeats), 1)))
    n_hidden = n_hidden or (256 if quick else 1024)
    with torch_threads(threads) as used:
        rows = []
        for row in run(datasets, seeds, n_hidden):
            rows.append(row)
            if show:
                show(_row(*row))
    config = {"datasets": datasets, "seeds": seeds, "n_hidden": n_hidden, "split": "80/20 stratified"}
    config["torch_threads"] = used
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
    ap = parser(__doc__, name=__name__, quick="digits, seed 0", repeats=None)
    ap.add_argument("--datasets", nargs="+", default=["digits", "mnist"])
    ap.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 .. repeats - 1 (0 and 1)")
    ap.add_argument("--n-hidden", type=int, default=1024)
    args = ap.parse_args(argv)
    datasets = ["digits"] if args.quick else args.datasets
    seeds = args.seeds or list(range(args.repeats or (1 if args.quick else 2)))
    print(f"width {args.n_hidden}, 80/20 stratified splits, 1 torch thread; accuracy in %")
    print(HEADER)
    result = collect(datasets=datasets, seeds=seeds, n_hidden=args.n_hidden, show=lambda line: print(line, flush=True))
    worst = min(0.0, *(r["worst_pt"] for r in result["records"]))
    print(f"\nlargest cost of early stopping: {-worst:.2f} accuracy points")
    finish(result, args)
    return 0
