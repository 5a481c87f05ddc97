"""Torch's threads when another process keeps a core busy: the networks on all threads and on one, side by side.

``MatchedExplicitClassifier`` and ``DEQClassifier`` (ReLU, ``sigma_a2 =
0.2``, width 1,024) fit and predict MNIST-4000 / 1000 (``_data.mnist_4000``;
``--quick``: width 256 on 1,000 / 300 digits), timed in rounds (the runs
rotate from one round to the next, one untimed round first), on torch's
default number of threads and on one:

* ``quiet``: nothing else runs;
* ``busy``: a child process spins on one core (a Python busy loop) for the
  whole condition, as another program would.

Every operation on torch's threads waits for all of them, so where a core
is busy each waits for that core's time slice.  Reported: the medians and,
per condition and model, the speed-up of the default threads over one.

Usage::

    python -m benchmarks.networks busy_core               # 3 repeats
    python -m benchmarks.networks busy_core --quick --json busy.json
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import warnings

import torch
from .._data import mnist_4000
from .._harness import finish, fit_predict, parser, rounds, text_table

from sk_deq import DEQClassifier, MatchedExplicitClassifier
from sk_deq.experiments._common import torch_threads

MODELS = {"matched": MatchedExplicitClassifier, "deq": DEQClassifier}


@contextlib.contextmanager
def busy_core(busy: bool):
    """A child process spinning on one core inside the block (when ``busy``); stopped after it."""
    if not busy:
        yield None
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield spinner
    finally:
        spinner.kill()
        spinner.wait()


def _run(model: str, threads: int, width: int, seed: int, data) -> float:
    est = MODELS[model]("relu", 0.2, n_hidden=width, random_state=seed)
    with torch_threads(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_predict(est, *data)["fit_predict_s"]


def collect(quick: bool = False, repeats: int = 3, width: int | None = None) -> dict:
    """Fit + predict seconds per condition, model and thread count (medians), and the speed-ups of all threads."""
    data = mnist_4000(quick)
    width = width or (256 if quick else 1024)
    threads = torch.get_num_threads()
    MatchedExplicitClassifier("relu", 0.2, n_hidden=16).fit(data[0][:50], data[1][:50])  # warm the match cache
    runs = [(model, k) for model in MODELS for k in dict.fromkeys((threads, 1))]
    records = []
    for condition in ("quiet", "busy"):
        with busy_core(condition == "busy"):
            times = rounds(runs, repeats + 1, lambda run, r: _run(*run, width, r, data))
        med = {run: statistics.median(t[1:]) for run, t in times.items()}  # the first round untimed
        for model in MODELS:
            records.append(
                {
                    "condition": condition,
                    "model": model,
                    "width": width,
                    "threads": threads,
                    "all threads s": med[model, threads],
                    "1 thread s": med[model, 1],
                    "speed-up of all threads": med[model, 1] / med[model, threads],
                }
            )
    return {"config": {"threads": threads, "width": width, "repeats": repeats}, "records": records}


def main(argv=None) -> dict:
    args = parser(__doc__, name=__name__, quick="width 256 on 1,000 / 300 digits", repeats=3).parse_args(argv)
    out = collect(args.quick, args.repeats)
    head = ["condition  model    threads  all threads s  1 thread s  speed-up of all threads"]
    line = "{condition:9}  {model:7}  {threads:7d}  {all threads s:13.3f}  {1 thread s:10.3f}  {speed-up of all threads:.2f}x"
    print(text_table(head, out["records"], line))
    return finish(out, args)
