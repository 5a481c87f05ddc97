"""partial_fit with its defaults against fit and scikit-learn's SGD estimators, on two streams.

For every seed (a shuffle of the data) and model:

- **digits** (``load_digits``, shuffled): the first 1,500 rows streamed in
  chunks of 250 for 5 passes (``classes`` on the first call), tested on the
  other 297.  Models: ``DEQClassifier()``, ``MatchedExplicitClassifier()``
  and ``ExplicitClassifier()``, all at their defaults (width 1024), against
  ``SGDClassifier()`` streamed the same way (raw pixels, as a user would) and
  the same classifier's ``fit`` on the 1,500 rows.  Target: accuracy >= 0.96.
- **diabetes** (``load_diabetes``, shuffled): the first 350 rows streamed in
  chunks of 50 for 5 passes, tested on the other 92.  The three regressors
  at their defaults, against ``SGDRegressor()`` (on features standardised by
  a ``StandardScaler`` updated with ``partial_fit`` on every chunk) and
  ``fit``.  Target: R² >= 0.45.

Results are printed per seed and as a summary (mean and worst over the
seeds, and the largest shortfall against ``fit`` on the same shuffle), and
written as JSON (``--json``).  ``met``: the mean over the seeds reaches the
target.  Seed 0 is the stream of issue 19 (where the former default
``learning_rate_init=1e-3`` gave 0.923 / 0.916 / 0.933 and R² 0.22-0.26); some
shuffles are harder for every model (seed 4: ``fit`` 0.963-0.973, R²
0.41-0.43).  ``--learning-rates`` sweeps the
step size instead of the default ``'auto'`` (how the default was chosen).

Usage::

    python -m benchmarks.networks partial_fit                        # seeds 0-4, defaults
    python -m benchmarks.networks partial_fit --learning-rates 0.001 0.01 0.1 --seeds 0 1
    python -m benchmarks.networks partial_fit --quick                # width 256, seeds 0-1
    python -m benchmarks.networks partial_fit --repeats 3 --json pf.json   # seeds 0-2, results there
"""

from __future__ import annotations

import argparse
import statistics
import warnings

import numpy as np
import torch
from .._harness import finish, markdown_rule, parser, timed
from sklearn.datasets import load_diabetes, load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDClassifier, SGDRegressor
from sklearn.preprocessing import StandardScaler

from sk_deq import (
    DEQClassifier,
    DEQRegressor,
    ExplicitClassifier,
    ExplicitRegressor,
    MatchedExplicitClassifier,
    MatchedExplicitRegressor,
)
from sk_deq.experiments._common import torch_threads

#: task -> (loader, training rows, chunk rows, target score, {model: class})
STREAMS = {
    "digits": (
        load_digits,
        1500,
        250,
        0.96,
        {"deq": DEQClassifier, "matched": MatchedExplicitClassifier, "explicit": ExplicitClassifier},
    ),
    "diabetes": (
        load_diabetes,
        350,
        50,
        0.45,
        {"deq": DEQRegressor, "matched": MatchedExplicitRegressor, "explicit": ExplicitRegressor},
    ),
}
PASSES = 5


def split(task, seed):
    loader, n_train = STREAMS[task][:2]
    X, y = loader(return_X_y=True)
    order = np.random.RandomState(seed).permutation(len(y))
    X, y = X[order], y[order]
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]


def chunks(n, size):
    return [slice(start, start + size) for start in range(0, n, size)]


def _stream(step, n, chunk) -> float:
    """Seconds of ``step(rows)`` over the chunks of ``n`` rows, :data:`PASSES` times."""
    return timed(lambda: [step(rows) for _ in range(PASSES) for rows in chunks(n, chunk)])[1]


def stream_model(est, data, chunk, **first):
    """The test score of ``est`` after streaming the training rows, and the seconds of the passes."""
    X_tr, y_tr, X_te, y_te = data
    seconds = _stream(lambda rows: est.partial_fit(X_tr[rows], y_tr[rows], **first), len(y_tr), chunk)
    return float(est.score(X_te, y_te)), seconds


def stream_sgd(task, data, chunk, seed):
    """SGDClassifier on the raw pixels; SGDRegressor on features standardised by a streamed StandardScaler."""
    if task == "digits":
        return stream_model(SGDClassifier(random_state=seed), data, chunk, classes=np.arange(10))
    X_tr, y_tr, X_te, y_te = data
    scaler, est = StandardScaler(), SGDRegressor(random_state=seed)
    step = lambda rows: est.partial_fit(scaler.partial_fit(X_tr[rows]).transform(X_tr[rows]), y_tr[rows])
    seconds = _stream(step, len(y_tr), chunk)
    return float(est.score(scaler.transform(X_te), y_te)), seconds


def run_seed(task, seed, args) -> list[dict]:
    """One row per model (and learning rate) of one task and seed."""
    data = split(task, seed)
    chunk, target, models = STREAMS[task][2:]
    first = {"classes": np.arange(10)} if task == "digits" else {}
    sgd, sgd_s = stream_sgd(task, data, chunk, seed)
    rows = []
    for name in args.models:
        cls = models[name]
        fit = float(cls(n_hidden=args.width, random_state=seed).fit(*data[:2]).score(*data[2:]))
        for lr in args.learning_rates:
            est = cls(n_hidden=args.width, learning_rate_init=lr, random_state=seed)
            score, seconds = stream_model(est, data, chunk, **first)
            rows.append(
                {
                    "task": task,
                    "model": name,
                    "seed": seed,
                    "learning_rate_init": lr,
                    "partial_fit": score,
                    "partial_fit_s": seconds,
                    "fit": fit,
                    "sgd": sgd,
                    "sgd_s": sgd_s,
                    "target": target,
                }
            )
            print(
                f"  {task} {name} seed {seed} lr {lr}: partial_fit {score:.3f}, fit {fit:.3f}, SGD {sgd:.3f}",
                flush=True,
            )
    return rows


def summarise(rows) -> list[dict]:
    """Mean and worst over the seeds, per task, model and learning rate."""
    records = []
    keys = sorted({(r["task"], r["model"], str(r["learning_rate_init"])) for r in rows})
    for task, model, lr in keys:
        rs = [r for r in rows if (r["task"], r["model"], str(r["learning_rate_init"])) == (task, model, lr)]
        mean = statistics.fmean(r["partial_fit"] for r in rs)
        records.append(
            {
                "task": task,
                "model": model,
                "learning_rate_init": lr,
                "partial_fit_mean": mean,
                "partial_fit_worst": min(r["partial_fit"] for r in rs),
                "fit_mean": statistics.fmean(r["fit"] for r in rs),
                "fit_worst": min(r["fit"] for r in rs),
                "worst_gap_to_fit": min(r["partial_fit"] - r["fit"] for r in rs),
                "sgd_mean": statistics.fmean(r["sgd"] for r in rs),
                "sgd_worst": min(r["sgd"] for r in rs),
                "partial_fit_s": statistics.median(r["partial_fit_s"] for r in rs),
                "target": rs[0]["target"],
                "met": mean >= rs[0]["target"],
                "seeds": len(rs),
            }
        )
    return records


def print_summary(records, seeds):
    head = (
        f"| {'stream':<8} | {'model':<8} | {'lr':>6} | {'partial_fit mean':>16} | {'worst':>6} | "
        f"{'fit mean':>8} | {'fit worst':>9} | {'worst pf - fit':>14} | {'SGD mean':>8} | {'SGD worst':>9} | "
        f"{'pf s':>6} | {'target':>6} | met |"
    )
    print(f"\nover seeds {seeds} (accuracy for digits, R² for diabetes), median seconds of the 5 passes")
    print(head)
    print(markdown_rule(head))
    for r in records:
        print(
            f"| {r['task']:<8} | {r['model']:<8} | {r['learning_rate_init']:>6} | {r['partial_fit_mean']:>16.3f} | "
            f"{r['partial_fit_worst']:>6.3f} | {r['fit_mean']:>8.3f} | {r['fit_worst']:>9.3f} | "
            f"{r['worst_gap_to_fit']:>+14.3f} | {r['sgd_mean']:>8.3f} | "
            f"{r['sgd_worst']:>9.3f} | {r['partial_fit_s']:>6.1f} | {r['target']:>6.2f} | "
            f"{'yes' if r['met'] else 'NO':>3} |"
        )


def _namespace(quick, seeds, models=("deq", "matched", "explicit"), learning_rates=("auto",), width=None):
    return argparse.Namespace(
        models=list(models),
        width=width or (256 if quick else 1024),
        learning_rates=[lr if lr == "auto" else float(lr) for lr in learning_rates],
        seeds=list(seeds),
    )


def measure(args) -> dict:
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for task in STREAMS:
            for seed in args.seeds:
                rows.extend(run_seed(task, seed, args))
    config = {**vars(args), "passes": PASSES, "torch_threads": torch.get_num_threads()}
    return {"config": config, "records": summarise(rows), "results": rows}


def collect(quick=False, repeats=3, threads=1):
    """The benchmark as JSON records (one per stream and model), over ``repeats`` seeds, at the defaults."""
    with torch_threads(threads):
        return measure(_namespace(quick, range(max(int(repeats), 1))))


def main(argv=None):
    ap = parser(
        __doc__, name=__name__, quick="width 256, seeds 0 and 1", repeats=None, json="sk_deq_out/bench_partial_fit.json"
    )
    ap.add_argument(
        "--models", nargs="+", default=["deq", "matched", "explicit"], choices=["deq", "matched", "explicit"]
    )
    ap.add_argument("--width", type=int, default=None, help="n_hidden (default: the estimators' 1024)")
    ap.add_argument("--learning-rates", nargs="+", default=["auto"], help="'auto' or numbers")
    ap.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 .. repeats - 1 (0-4; quick 0-1)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: leave torch's default)")
    cli = ap.parse_args(argv)
    seeds = cli.seeds or range(cli.repeats or (2 if cli.quick else 5))
    args = _namespace(cli.quick, seeds, cli.models, cli.learning_rates, cli.width)
    if cli.threads:
        torch.set_num_threads(cli.threads)
    print(
        f"# partial_fit at its defaults: {PASSES} passes; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), width {args.width}"
    )
    out = measure(args)
    print_summary(out["records"], args.seeds)
    finish({"benchmark": "partial_fit", **out}, cli)
    return 0 if all(r["met"] for r in out["records"]) else 1
