"""How time and memory grow with the number of samples, from 1,000 to 100,000.

For log-spaced ``n`` (default 1,000, 3,162, 10,000, 31,623, 100,000) on
MNIST augmented by shifts and rotations (``_data.py``; 784 features), every
measurement runs in a fresh subprocess so that its peak resident memory
(``ru_maxrss``) is its own.  Measured:

``deq``
    ``DEQClassifier(activation, sigma_a2, n_hidden=1024).fit`` (readout
    trained by L-BFGS on cached features);
``matched``
    ``MatchedExplicitClassifier(...).fit`` (the matching solve included);
``exact``
    ``ImplicitCKTransformer(...).fit_transform``: the exact ``n x n`` kernel,
    up to the memory limit, where the transformer's own ``MemoryError`` is
    recorded instead of a crash;
``nystroem``
    ``ImplicitCKNystroem(n_components=1000)`` fitted on ``min(n, 10,000)``
    rows, ``transform`` of all ``n`` rows and ``RidgeClassifier().fit`` on the
    features.

Memory is the peak resident set during the step (``VmHWM``, reset when the
step starts: see ``_memory.py``) minus the resident set at its start (Python,
torch and the float64 data loaded): what the step itself adds.

Then the slope of ``log(time)`` and ``log(memory added)``
against ``log(n)`` is fitted for each (least squares over the sizes that
ran).  Expected: about 1 for the linear paths and 2 for the exact kernel.

Usage::

    python -m benchmarks.scale sizes                        # all sizes (about 15 minutes on 2 cores)
    python -m benchmarks.scale sizes --sizes 1000 3162 10000 --only deq nystroem
    python -m benchmarks.scale sizes --quick                # 1,000 and 3,162 only
    python -m benchmarks.scale sizes --json scale.json --plot docs/_static/scale.png
    python -m benchmarks.scale sizes --quick --repeats 3   # medians of 3 processes per path and size
"""

from __future__ import annotations

import argparse
import math
import os
import platform

import numpy as np
from .._harness import finish, in_subprocess, parser, rounds, timed

PATHS = ("deq", "matched", "exact", "nystroem")
LABELS = {
    "deq": "DEQClassifier.fit",
    "matched": "MatchedExplicitClassifier.fit",
    "exact": "ImplicitCKTransformer.fit_transform (exact)",
    "nystroem": "ImplicitCKNystroem + RidgeClassifier",
}


def _child(path: str, n: int, activation: str, sigma_a2: float, width: int, components: int, threads: int) -> dict:
    """One measurement, in a subprocess; returns the record printed as JSON."""
    import torch

    torch.set_num_threads(threads)
    from .._data import augmented_mnist
    from .._memory import PeakMemory, gib

    X, y = augmented_mnist(n, random_state=0)
    with PeakMemory() as mem:
        (parts, status), seconds = timed(_run_path, path, X, y, activation, sigma_a2, width, components)
    memory = gib(before=mem.before, peak=mem.peak, extra=mem.above, data=X.nbytes)
    return {"path": path, "n": n, "seconds": seconds, "status": status, **memory, **parts}


def _run_path(path, X, y, activation, sigma_a2, width, components):
    """``(parts, status)`` of one step: the Nystroem path's part times, and 'ok' or the transformer's MemoryError."""
    try:
        return _step(path, X, y, activation, sigma_a2, width, components), "ok"
    except MemoryError as exc:
        return {}, f"MemoryError: {str(exc).split('. ')[0]}"


def _step(path, X, y, activation, sigma_a2, width, components):
    from sklearn.linear_model import RidgeClassifier

    from sk_deq import DEQClassifier, ImplicitCKNystroem, ImplicitCKTransformer, MatchedExplicitClassifier

    if path == "deq":
        DEQClassifier(activation, sigma_a2, n_hidden=width, random_state=0).fit(X, y)
    elif path == "matched":
        MatchedExplicitClassifier(activation, sigma_a2, n_hidden=width, random_state=0).fit(X, y)
    elif path == "exact":
        ImplicitCKTransformer(activation, sigma_a2).fit_transform(X)
    else:
        nys = ImplicitCKNystroem(activation, sigma_a2, n_components=min(components, len(X)), random_state=0)
        _, fit_s = timed(nys.fit, X[: min(len(X), 10 * components)])
        F, transform_s = timed(nys.transform, X)
        _, ridge_s = timed(RidgeClassifier().fit, F, y)
        # the landmarks are fitted on at most 10 * components rows: a cost that stops growing there
        return dict(fit_s=fit_s, linear_s=transform_s + ridge_s, transform_s=transform_s)
    return {}


def measure(path, n, args) -> dict:
    """:func:`_child` in a fresh process; a failure is a record with the last line of its error."""
    try:
        return in_subprocess(
            __name__, "_child", path, n, args.activation, args.sigma_a2, args.width, args.components, args.threads
        )
    except RuntimeError as exc:
        nan = math.nan
        return dict(path=path, n=n, seconds=nan, status=f"failed: {exc}", before_gib=nan, peak_gib=nan, extra_gib=nan)


def run_sizes(sizes, paths, args, repeats=1, show=None) -> dict:
    """``{path: [one record per size]}``, each the median of ``repeats`` fresh processes, the paths interleaved.

    ``show(record)`` sees every measurement; a path out of memory at one
    size is not run at larger ones (its record is repeated with a NaN time).
    """
    rows = {p: [] for p in paths}

    def once(p, n):
        record = measure(p, n, args)
        if show:
            show(record)
        return record

    for n in sizes:
        todo = [p for p in paths if not (rows[p] and rows[p][-1]["status"] != "ok")]
        runs = rounds(todo, repeats, lambda p, _, n=n: once(p, n))
        for p in paths:
            if p not in runs:  # out of memory before: larger n will be too
                rows[p].append({**rows[p][-1], "n": n, "seconds": math.nan})
                continue
            ok = [m for m in runs[p] if m["status"] == "ok"]
            rec = dict(ok[0] if ok else runs[p][-1])
            for key in ("seconds", "extra_gib", "peak_gib", "before_gib", "fit_s", "linear_s", "transform_s"):
                vals = [m[key] for m in ok if key in m]
                if vals:
                    rec[key] = float(np.median(vals))
            rec["repeats_ok"] = len(ok)
            rows[p].append(rec)
    return rows


def slope(rows, key, last=None) -> float:
    """Least-squares slope of log(key) against log(n) over the rows that ran (the ``last`` largest n only)."""
    pts = [(r["n"], r[key]) for r in rows if r["status"] == "ok" and r.get(key, 0) > 0][-(last or 0) :]
    if len(pts) < 2:
        return math.nan
    n, v = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(n, v, 1)[0])


def slopes_of(rows, linear_part=False) -> dict:
    """Per path: the slopes of time and of memory added, over all n and over the two largest
    (and of the Nystroem path's linear part, ``linear_s``, with ``linear_part``)."""
    out = {}
    for p, r in rows.items():
        out[p] = dict(
            time=slope(r, "seconds"),
            time_large_n=slope(r, "seconds", last=2),
            memory=slope(r, "extra_gib"),
            memory_large_n=slope(r, "extra_gib", last=2),
        )
        if linear_part:
            out[p]["linear_part"] = slope(r, "linear_s")
    return out


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for p, rows in results["rows"].items():
        ok = [r for r in rows if r["status"] == "ok"]
        if not ok:
            continue
        n = [r["n"] for r in ok]
        label = f"{LABELS[p]} (slope {results['slopes'][p]['time']:.2f})"
        axes[0].loglog(n, [r["seconds"] for r in ok], "o-", label=label)
        axes[1].loglog(n, [r["extra_gib"] for r in ok], "o-", label=LABELS[p])
        for r in rows:
            if r["status"] != "ok":
                axes[0].annotate("out of memory", (r["n"], ok[-1]["seconds"]), fontsize=8)
    axes[0].set(xlabel="n (samples)", ylabel="wall time (s)", title="time")
    axes[1].set(xlabel="n (samples)", ylabel="peak memory added by the step (GiB)", title="memory")
    axes[0].legend(fontsize=7)
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(
        f"{results['activation']}-DEQ, sigma_a2={results['sigma_a2']}, augmented MNIST, {os.cpu_count()} cores"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def collect(quick=False, repeats=3, sizes=None, paths=PATHS):
    """The benchmark as JSON: one record per path and size (medians of ``repeats`` subprocesses) and the slopes.

    The repeats are interleaved (every repeat measures every path once, in a
    rotated order); full: sizes 1,000 to 100,000; quick: 1,000 and 3,162.
    A path out of memory at one size is not run at larger ones.
    """
    sizes = list(sizes or ([1000, 3162] if quick else [1000, 3162, 10000, 31623, 100000]))
    paths = list(paths)
    args = argparse.Namespace(activation="relu", sigma_a2=0.2, width=1024, components=1000, threads=os.cpu_count() or 1)
    repeats = max(int(repeats), 1)
    rows = run_sizes(sizes, paths, args, repeats)
    slopes = slopes_of(rows)
    records = [
        {"path": p, "n": r["n"], "seconds": r["seconds"], "added_gib": r.get("extra_gib"), "status": r["status"]}
        for p in paths
        for r in rows[p]
    ]
    records += [
        {"path": p, "n": "slope", "seconds": s["time"], "added_gib": s["memory"], "status": ""}
        for p, s in slopes.items()
    ]
    return {
        "config": {**vars(args), "sizes": sizes, "repeats": repeats},
        "records": records,
        "rows": rows,
        "slopes": slopes,
    }


def main(argv=None):
    ap = parser(__doc__, name=__name__, quick="sizes 1000 and 3162", repeats=1)
    ap.add_argument("--sizes", nargs="+", type=int, default=[1000, 3162, 10000, 31623, 100000])
    ap.add_argument("--only", nargs="+", choices=PATHS, default=list(PATHS))
    ap.add_argument("--activation", default="relu")
    ap.add_argument("--sigma-a2", type=float, default=0.2)
    ap.add_argument("--width", type=int, default=1024, help="n_hidden of the classifiers")
    ap.add_argument("--components", type=int, default=1000, help="n_components of the Nystroem path")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    ap.add_argument("--plot", default=None, help="write the figure (needs matplotlib)")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes = [1000, 3162]
    args.threads = args.threads or os.cpu_count() or 1
    print(
        f"# sk_deq scale benchmark: {args.activation}, sigma_a2={args.sigma_a2}, width {args.width}, "
        f"{args.components} Nystroem components; python {platform.python_version()}, {os.cpu_count()} CPU(s), "
        f"{args.threads} torch thread(s)"
    )
    print(
        f"| {'path':>9} | {'n':>7} | {'seconds':>8} | {'RSS before GiB':>14} | {'peak GiB':>8} | {'added GiB':>9} | status"
    )
    print("|----------:|--------:|---------:|---------------:|---------:|----------:|-------")

    def show(r):
        print(
            f"| {r['path']:>9} | {r['n']:>7} | {r['seconds']:>8.2f} | {r['before_gib']:>14.2f} | {r['peak_gib']:>8.2f} "
            f"| {r['extra_gib']:>9.3f} | {r['status']}",
            flush=True,
        )

    rows = run_sizes(args.sizes, args.only, args, args.repeats, show)
    slopes = slopes_of(rows, linear_part=True)
    print("\n| path | slope of time: all n | two largest n | slope of memory added: all n | two largest n |")
    print("|---|---|---|---|---|")
    for p, s in slopes.items():
        print(
            f"| {LABELS[p]} | {s['time']:.2f} | {s['time_large_n']:.2f} | {s['memory']:.2f} "
            f"| {s['memory_large_n']:.2f} |"
        )
    if "nystroem" in slopes:
        print(
            f"\nNystroem without the landmark fit (on at most {10 * args.components} rows): transform + ridge "
            f"slope {slopes['nystroem']['linear_part']:.2f}"
        )
    results = dict(activation=args.activation, sigma_a2=args.sigma_a2, width=args.width, rows=rows, slopes=slopes)
    finish(results, args)
    if args.plot:
        plot(results, args.plot)
    return results
