"""The implicit kernel as users call it: ``fit(X).transform(X)`` on one core and on all, side by side.

``ImplicitCKTransformer(activation="tanh", input_scaling="none")`` on
Gaussian rows of 784 features, ``n`` = 2,000 and 4,000 (``--quick``: 500),
timed whole (validation, the per-sample preparation, the kernel), four runs
interleaved repeat after repeat after one untimed round, medians reported:

* ``1 core``: ``n_jobs=1`` under a one-thread BLAS limit;
* ``all cores``: the default ``n_jobs=None``;
* each also with the rectangular path forced (``transform`` not told that
  ``X`` is the training data, so every pair of blocks is computed twice), the
  path of any other ``X``;
* ``all cores, joblib``: the blocks handed to ``joblib.Parallel`` (the path
  under a configured joblib backend, whose result loop polls in sleeps of
  10 ms) instead of the engine's thread pool
  (:func:`sk_deq.kernels._workers.map_unordered`).

Recorded: the speed-up of all cores over one on both paths, what the
square path saves at each thread count, and what the pool saves over
joblib; and the seconds of the ``fit`` alone (the validation, the input
scaling and the per-sample preparation, serial at any ``n_jobs``), with the
speed-up of the ``transform`` without it.

Usage::

    python -m benchmarks.kernels user_call
    python -m benchmarks.kernels user_call --quick --json user_call.json
"""

from __future__ import annotations

import contextlib
import statistics
import time
from unittest import mock

import numpy as np
from .._harness import finish, interleaved, parser
from threadpoolctl import threadpool_limits

import sk_deq.kernels._workers as workers
from sk_deq import ImplicitCKTransformer

RUNS = ("1 core", "all cores", "1 core, rectangular", "all cores, rectangular", "all cores, joblib")


class _NoBackend:
    """Stands in for joblib's threading backend class: no backend is one, so every call goes to joblib."""


def _context(label):
    stack = contextlib.ExitStack()
    if label.endswith("rectangular"):
        stack.enter_context(mock.patch.object(ImplicitCKTransformer, "_is_training_data", lambda self, Xs: False))
    if label.startswith("1 core"):
        stack.enter_context(threadpool_limits(1))
    if label.endswith("joblib"):
        stack.enter_context(mock.patch.object(workers, "ThreadingBackend", _NoBackend))
    return stack


def _call(X, n_jobs, fits=None):
    """The user's call; with a list ``fits``, the seconds of its ``fit`` are appended to it."""

    def call():
        t0 = time.perf_counter()
        est = ImplicitCKTransformer(activation="tanh", input_scaling="none", n_jobs=n_jobs).fit(X)
        if fits is not None:
            fits.append(time.perf_counter() - t0)
        return est.transform(X)

    return call


def collect(quick: bool = False, repeats: int = 5, show=None) -> dict:
    """Seconds of every run and the ratios, per ``n``; see the module docstring."""
    records = []
    for n in (500,) if quick else (2000, 4000):
        X = np.random.default_rng(0).normal(size=(n, 784))
        fits: dict = {label: [] for label in RUNS}
        runs = {label: _call(X, 1 if label.startswith("1 core") else None, fits[label]) for label in RUNS}
        med = interleaved(runs, repeats, rotate=True, context=_context).medians
        r = {"n": n, **{f"{label} s": med[label] for label in RUNS}}
        fit = {label: statistics.median(fits[label][-repeats:]) for label in ("1 core", "all cores")}
        r.update({f"{label}, fit s": fit[label] for label in fit})
        r["cores speed-up"] = med["1 core"] / med["all cores"]
        # the same without the fit (validation, input scaling, per-sample preparation: serial at any n_jobs)
        r["cores speed-up, transform"] = (med["1 core"] - fit["1 core"]) / (med["all cores"] - fit["all cores"])
        r["cores speed-up, rectangular"] = med["1 core, rectangular"] / med["all cores, rectangular"]
        r["square gain, all cores"] = med["all cores, rectangular"] / med["all cores"]
        r["square gain, 1 core"] = med["1 core, rectangular"] / med["1 core"]
        r["pool gain"] = med["all cores, joblib"] / med["all cores"]
        records.append(r)
        if show:
            show(r)
    return {
        "config": {"activation": "tanh", "features": 784, "repeats": repeats},
        "records": records,
        "goals": cores_goals(records),
    }


#: The target: all cores at least this many times as fast as one, end to end.
CORES_TARGET = 1.6


def cores_goals(records) -> list[dict]:
    """The goal ``kernel_cores_user_call``: the speed-up of all cores at every ``n`` measured (the worst counts)."""
    if not records:
        return []
    worst = min(records, key=lambda r: r["cores speed-up"])
    return [
        {
            "id": "kernel_cores_user_call",
            "goal": "fit(X).transform(X), tanh CK: all cores / one core and one BLAS thread (n = "
            + ", ".join(str(r["n"]) for r in records)
            + ")",
            "target": f">= {CORES_TARGET:g}x",
            "measured": ", ".join(f"{r['cores speed-up']:.2f}x (n={r['n']})" for r in records),
            "met": worst["cores speed-up"] >= CORES_TARGET,
        }
    ]


def main(argv=None) -> dict:
    args = parser(__doc__, name=__name__, quick="n = 500 only", repeats=5).parse_args(argv)

    def show(r):
        print(", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()), flush=True)

    return finish(collect(args.quick, args.repeats, show=show), args)
