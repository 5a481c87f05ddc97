"""The networks' weight draws: torch's one stream against numpy's parallel streams, side by side in one process.

A network's hidden weights are drawn in float64 on the CPU whatever its
device, then cast to its dtype (:func:`sk_deq.nn.layers.gaussian_weights`).
This times, interleaved repeat after repeat (medians, after one untimed
draw of each), for the matched
net's ``4096 x 784`` and the DEQ's ``4096 x 4096`` (``--quick``: ``512 x
784``), with one torch thread and with all of them:

* ``torch``: ``torch.randn(..., dtype=float64, generator=g).to(float32)``,
  one sequential stream (how the weights were drawn before);
* ``streams``: ``gaussian_weights(..., generator=g, dtype=float32)``, blocks
  of 64 rows from numpy streams on up to ``torch.get_num_threads()``
  threads.

On a GPU the draw is host time in every fit (``gpu.fit``'s
``_initialize`` phase), so its speed-up here is what that phase gains on a
host with as many cores.

Usage::

    python -m benchmarks.networks weight_draws               # 7 repeats
    python -m benchmarks.networks weight_draws --quick       # 512 x 784, 1 repeat
    python -m benchmarks.networks weight_draws --json out.json
"""

from __future__ import annotations

import os

import torch
from .._harness import finish, interleaved, parser, text_table

from sk_deq.experiments._common import torch_threads
from sk_deq.nn.layers import gaussian_weights

SHAPES = ((4096, 784), (4096, 4096))


def _draws(shape):
    return {
        "torch": lambda: torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(
            torch.float32
        ),
        "streams": lambda: gaussian_weights(*shape, torch.Generator().manual_seed(0), dtype=torch.float32),
    }


def collect(quick=False, repeats=7, shapes=None):
    """Medians of interleaved draws per shape and thread count, and the speed-ups of the streams (quick: 512 x 784)."""
    all_threads = torch.get_num_threads()
    records = []
    for shape in shapes or (((512, 784),) if quick else SHAPES):
        for threads in sorted({1, all_threads}):
            with torch_threads(threads):
                med = interleaved(_draws(shape), repeats).medians
            records.append(
                {
                    "shape": list(shape),
                    "threads": threads,
                    **{f"{k}_s": v for k, v in med.items()},
                    "speedup": med["torch"] / med["streams"],
                }
            )
    return {"cpu_count": os.cpu_count(), "repeats": repeats, "load": os.getloadavg(), "records": records}


def table(result) -> str:
    """The records as a text table."""
    head = [
        f"cpu_count={result['cpu_count']}, {result['repeats']} interleaved repeats (medians), "
        f"load average {result['load'][0]:.2f}",
        f"{'shape':>12} {'threads':>7} {'torch s':>8} {'streams s':>9} {'speed-up':>9}",
    ]
    rows = [{**r, "shape": "x".join(map(str, r["shape"]))} for r in result["records"]]
    return text_table(head, rows, "{shape:>12} {threads:>7} {torch_s:8.4f} {streams_s:9.4f} {speedup:8.2f}x")


def main(argv=None):
    """Run :func:`collect`, print its table, write its JSON with ``--json``; returns the result."""
    args = parser(__doc__, name=__name__, quick="512 x 784, one repeat", repeats=7).parse_args(argv)
    return finish(collect(args.quick, 1 if args.quick else args.repeats), args, table)
