"""What the fixed row blocks cost: predict throughput and one-sample latency against the block size.

Every batch goes through a fitted network in blocks of exactly
``sk_deq.nn.block_rows(n_hidden)`` rows (see :mod:`sk_deq.nn.blocks`), the
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

Reported: median seconds over the repeats, and each time's ratio to the
``batch`` run (throughput) or to the 16-row block (latency).

Usage::

    python benchmarks/bench_blocks.py              # widths 32, 256, 1024, 4096
    python benchmarks/bench_blocks.py --quick      # widths 32, 256
    python benchmarks/bench_blocks.py --threads 1
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import warnings
from unittest import mock

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning

import sk_deq._torch_network as torch_network
from sk_deq import DEQClassifier, MatchedExplicitClassifier
from sk_deq.nn import block_rows, map_row_blocks

BLOCKS = (16, 32, 64, 256, 1024)


def _fit(model, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X, y)


def _seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _whole_batch(fn, x, block, out):
    """The rule before the blocks: the whole batch in one call, padded to a multiple of 16 rows."""
    return map_row_blocks(fn, x, -(-x.shape[0] // 16) * 16, out)


@contextlib.contextmanager
def _blocks(model, block):
    """``model`` with blocks of ``block`` rows (None: :func:`_whole_batch`) while the context lasts."""
    if block is None:
        with mock.patch.object(torch_network, "map_row_blocks", _whole_batch):
            yield
        return
    model._block_rows = lambda: block  # an instance attribute: the class's method is untouched
    try:
        yield
    finally:
        del model._block_rows


def _time_blocks(model, X_many, X_one, repeats: int) -> list[dict]:
    """Times of ``decision_function`` with each block size swapped in."""
    default = model._block_rows()
    rows = []
    for label, block in [("batch", None), *((str(b), b) for b in BLOCKS)]:
        with _blocks(model, block):
            model.decision_function(X_one)  # warm-up
            many = _seconds(lambda: model.decision_function(X_many), repeats)
            one = _seconds(lambda: model.decision_function(X_one), max(repeats, 5) * 3)
        rows.append({"block": label, "rows": block, "default": block == default, "many_s": many, "one_s": one})
    base_many = rows[0]["many_s"]
    base_one = next(r["one_s"] for r in rows if r["rows"] == BLOCKS[0])
    for r in rows:
        r["many_ratio"] = r["many_s"] / base_many
        r["one_ratio"] = r["one_s"] / base_one
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


HEADER = f"{'model':8} {'width':>5} {'block':>6} {'4096 rows s':>12} {'x batch':>8} {'1 row ms':>9} {'x 16':>6}"


def _row(r: dict) -> str:
    mark = "*" if r["default"] else " "
    return (
        f"{r['model']:8} {r['width']:>5} {r['block']:>5}{mark} {r['many_s']:>12.3f} {r['many_ratio']:>8.2f} "
        f"{1e3 * r['one_s']:>9.2f} {r['one_ratio']:>6.2f}"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="widths 32 and 256 only")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--widths", type=lambda s: tuple(int(w) for w in s.split(",")), default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(HEADER)
    collect(quick=args.quick, repeats=args.repeats, widths=args.widths, show=lambda r: print(_row(r), flush=True))
    print(
        "* the default block of the width (sk_deq.nn.block_rows); ratios: to the batch run (4096 rows), "
        "to the 16-row block (1 row)"
    )


if __name__ == "__main__":
    main()
