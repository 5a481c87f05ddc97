"""What the fixed row blocks cost: predict throughput and one-sample latency against the block size.

Every batch goes through a fitted network in blocks of exactly
``sk_deq.estimators._network.block_rows(n_hidden)`` rows (see :mod:`sk_deq.estimators._network`), the
last block padded, so that a sample's outputs do not depend on its batch.
This benchmark fits a ``DEQClassifier('relu', 0.2)`` and a
``MatchedExplicitClassifier('relu', 0.2)`` on 1,000 digits per width, then
times ``decision_function`` on 4,096 rows (throughput) and on one row
(latency) for several block sizes, side by side in one process (the block
size is swapped on the fitted estimator, nothing else changes):

* ``batch``: no fixed blocks, the whole batch in one call padded to a
  multiple of 16 rows (the rule before the blocks: batch-dependent results);
* ``16 ... 1024``: fixed blocks of that many rows;
* the default block of the width is marked.

Reported: median seconds over the repeats (the block sizes interleaved,
after one untimed round), and each time's ratio to the ``batch`` run
(throughput) or to the 16-row block (latency).

``--fit`` measures the blocks of a fit's training features instead
(``sk_deq.estimators._network.FIT_BLOCK_ENTRIES``): a ``DEQClassifier('relu',
0.2)`` on the 4,000 training digits of the MNIST split
(``_data.mnist_split``), for several block sizes side by side: the seconds of
the training features, their ratio to the float32 GEMMs they need (mean
fixed-point iterations + 1 products of 4,000 x m by m x m, timed in the same
rounds) and the seconds of the whole ``fit``.

Usage::

    python -m benchmarks.networks blocks              # widths 32, 256, 1024, 4096
    python -m benchmarks.networks blocks --quick      # widths 32, 256
    python -m benchmarks.networks blocks --threads 1 --json blocks.json
    python -m benchmarks.networks blocks --fit --widths 1024,4096 --threads 2
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from unittest import mock

import numpy as np
import torch
from .._data import load_digits_once, mnist_split
from .._harness import finish, interleaved, parser
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning

import sk_deq.estimators._network as torch_network
from sk_deq import DEQClassifier, MatchedExplicitClassifier
from sk_deq.estimators._network import block_rows, map_row_blocks

BLOCKS = (16, 32, 64, 256, 1024)
#: Entries of a fit's blocks compared by ``--fit``.
FIT_ENTRIES = (1 << 16, 1 << 18, 1 << 20, 1 << 22)


def _fit(model, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X, y)


def _whole_batch(fn, x, block, out, tail=None):
    """The rule before the blocks: the whole batch in one call, padded to a multiple of 16 rows (``block`` and
    ``tail``, :func:`map_row_blocks`'s, ignored)."""
    return map_row_blocks(fn, x, -(-x.shape[0] // 16) * 16, out)


@contextlib.contextmanager
def _blocks(model, block):
    """``model`` with blocks of ``block`` rows (None: :func:`_whole_batch`) while the context lasts."""
    if block is None:
        with mock.patch.object(torch_network, "map_row_blocks", _whole_batch):
            yield
        return
    model._block_rows = lambda device=None, fit=False: block  # an instance attribute: the class's method is untouched
    try:
        yield
    finally:
        del model._block_rows


def _time_blocks(model, X_many, X_one, repeats: int) -> list[dict]:
    """Times of ``decision_function`` with each block size swapped in, the block sizes interleaved."""
    default = model._block_rows()
    blocks = {"batch": None, **{str(b): b for b in BLOCKS}}

    def timings(X, n):
        runs = dict.fromkeys(blocks, lambda: model.decision_function(X))
        return interleaved(runs, n, context=lambda label: _blocks(model, blocks[label])).medians

    many, one = timings(X_many, repeats), timings(X_one, max(repeats, 5) * 3)
    rows = [
        {"block": k, "rows": b, "default": b == default, "many_s": many[k], "one_s": one[k]} for k, b in blocks.items()
    ]
    for r in rows:
        r["many_ratio"] = r["many_s"] / many["batch"]
        r["one_ratio"] = r["one_s"] / one[str(BLOCKS[0])]
    return rows


def collect(quick: bool = False, repeats: int = 3, widths=None, show=None) -> dict:
    """Throughput and latency against the block size; see the module docstring.

    ``show``, if given, is called with each record as it is measured.
    """
    X, y = load_digits(return_X_y=True)
    widths = widths or ((32, 256) if quick else (32, 256, 1024, 4096))
    rng = np.random.default_rng(0)
    X_many = X[rng.integers(0, len(X), 4096)]
    records = []
    for width in widths:
        for name, model in (
            ("deq", DEQClassifier("relu", 0.2, n_hidden=width, random_state=0)),
            ("matched", MatchedExplicitClassifier("relu", 0.2, n_hidden=width, random_state=0)),
        ):
            _fit(model, X[:1000], y[:1000])
            for r in _time_blocks(model, X_many, X[1000:1001], repeats):
                records.append({"model": name, "width": width, "default_block": block_rows(width), **r})
                if show:
                    show(records[-1])
    return {
        "config": {"widths": list(widths), "blocks": list(BLOCKS), "repeats": repeats, "rows": len(X_many)},
        "records": records,
    }


def _fit_features(model, X):
    """The training features of ``X`` as ``fit`` computes them; returns the solves' mean iterations."""
    from sk_deq.nn.solvers import SolverLog

    with SolverLog(model.module_) as log:
        model._compute_features(X, torch.device("cpu"), "fit", log)
    return log.summary()["mean_iter"]


def _gemms(n: int, width: int, count: int):
    """``count`` float32 products of ``n x width`` by ``width x width``, as a callable."""
    a = torch.randn(n, width, generator=torch.Generator().manual_seed(0))
    b = torch.randn(width, width, generator=torch.Generator().manual_seed(1))

    def run():
        for _ in range(count):
            torch.mm(a, b)

    return run


def _fit_blocks(width: int, X, y, repeats: int) -> list[dict]:
    """The records of one width: features, GEMMs and fit, every fit block size interleaved."""
    model = _fit(DEQClassifier("relu", 0.2, n_hidden=width, random_state=0), X, y)
    iters = _fit_features(model, X)
    runs = {"gemm": _gemms(len(X), width, round(iters) + 1)}
    for e in FIT_ENTRIES:
        runs[f"features:{e}"] = functools.partial(_fit_features, model, X)
        runs[f"fit:{e}"] = functools.partial(_fit, model, X, y)

    def patched(label):
        entries = torch_network.FIT_BLOCK_ENTRIES if label == "gemm" else int(label.split(":")[1])
        return mock.patch.object(torch_network, "FIT_BLOCK_ENTRIES", entries)

    med = interleaved(runs, repeats, rotate=True, context=patched).medians
    records = []
    for e in FIT_ENTRIES:
        with mock.patch.object(torch_network, "FIT_BLOCK_ENTRIES", e):
            rows = block_rows(width, fit=True)
        r = {"model": "deq", "width": width, "entries": e, "rows": rows, "mean_iter": iters,
             "default": e == torch_network.FIT_BLOCK_ENTRIES, "gemm_s": med["gemm"],
             "features_s": med[f"features:{e}"], "fit_s": med[f"fit:{e}"], "threads": torch.get_num_threads()}  # fmt: skip
        r["features_gemm_ratio"] = r["features_s"] / r["gemm_s"]
        records.append(r)
    return records


def collect_fit(repeats: int = 3, widths=None, show=None) -> dict:
    """A fit's training features and the whole fit against the fit block size; see the module docstring."""
    X, y = load_digits_once()
    train, _ = mnist_split()
    X, y = X[train], y[train]
    widths = widths or (1024,)
    records = []
    for width in widths:
        for r in _fit_blocks(width, X, y, repeats):
            records.append(r)
            if show:
                show(r)
    config = {"widths": list(widths), "entries": list(FIT_ENTRIES), "repeats": repeats, "rows": len(X)}
    return {"config": {**config, "threads": torch.get_num_threads()}, "records": records}


#: The target of a fit's training features: within this factor of the float32 GEMMs they need (width 1024).
FIT_GEMM_TARGET = 1.15


def fit_goals(records) -> list[dict]:
    """The goal ``fit_features_gemm`` from :func:`collect_fit`'s records: the default block at width 1024."""
    rows = [r for r in records if r["default"] and r["width"] == 1024]
    if not rows:
        return []
    r = rows[0]
    return [
        {
            "id": "fit_features_gemm",
            "goal": f"a fit's training features / their float32 GEMMs (MNIST-4000, width 1024, {r['threads']} threads)",
            "target": f"<= {FIT_GEMM_TARGET:g}x",
            "measured": f"{r['features_gemm_ratio']:.2f}x",
            "met": r["features_gemm_ratio"] <= FIT_GEMM_TARGET,
        }
    ]


def collect_all(quick: bool = False, repeats: int = 3) -> dict:
    """``run_all``'s entry: the predict blocks (:func:`collect`) and a fit's blocks at width 1024 (:func:`collect_fit`)."""
    result = collect(quick, repeats)
    fit = collect_fit(repeats, widths=(1024,))
    result["config"]["fit"] = fit["config"]
    result["fit_records"] = fit["records"]
    result["extra_tables"] = ["fit_records"]
    result["goals"] = fit_goals(fit["records"])
    return result


FIT_HEADER = f"{'width':>5} {'entries':>8} {'rows':>5} {'features s':>11} {'x GEMMs':>8} {'fit s':>7}"


def _fit_row(r: dict) -> str:
    mark = "*" if r["default"] else " "
    return (
        f"{r['width']:>5} {r['entries']:>8} {r['rows']:>4}{mark} {r['features_s']:>11.3f} "
        f"{r['features_gemm_ratio']:>8.2f} {r['fit_s']:>7.3f}"
    )


HEADER = f"{'model':8} {'width':>5} {'block':>6} {'4096 rows s':>12} {'x batch':>8} {'1 row ms':>9} {'x 16':>6}"


def _row(r: dict) -> str:
    mark = "*" if r["default"] else " "
    return (
        f"{r['model']:8} {r['width']:>5} {r['block']:>5}{mark} {r['many_s']:>12.3f} {r['many_ratio']:>8.2f} "
        f"{1e3 * r['one_s']:>9.2f} {r['one_ratio']:>6.2f}"
    )


def main(argv=None) -> dict:
    ap = parser(__doc__, name=__name__, quick="widths 32 and 256 only", repeats=3)
    ap.add_argument("--widths", type=lambda s: tuple(int(w) for w in s.split(",")), default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--fit", action="store_true", help="the blocks of a fit's training features (MNIST, 4,000 rows)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.fit:
        print(FIT_HEADER)
        result = collect_fit(args.repeats, widths=args.widths, show=lambda r: print(_fit_row(r), flush=True))
        print(
            "* the default (FIT_BLOCK_ENTRIES); x GEMMs: the features' seconds over those of the float32 GEMMs they need"
        )
        return finish(result, args)
    print(HEADER)
    result = collect(args.quick, args.repeats, widths=args.widths, show=lambda r: print(_row(r), flush=True))
    print(
        "* the default block of the width (sk_deq.estimators._network.block_rows); ratios: to the batch run (4096 rows), "
        "to the 16-row block (1 row)"
    )
    return finish(result, args)
