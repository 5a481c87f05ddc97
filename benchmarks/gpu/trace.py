"""Where the GPU waits in a matched fit: record a ``torch.profiler`` trace on CUDA, read its idle gaps anywhere.

``gpu.fit`` measures the GPU's busy share of a fit; this script says
where the rest of the wall time goes.  Two steps:

* ``--record TRACE.json.gz`` (needs CUDA): fits the matched net of
  ``gpu.fit`` (60,000 x 784, width 4,096) twice from a float32 CUDA
  tensor (``--numpy``: from the float64 numpy array) and writes the second
  fit's Chrome trace, gzipped, with the phases of ``gpu.fit.PhaseClock``
  annotated;
* ``--read TRACE.json.gz`` (any machine): the phases' windows on the host,
  the GPU's busy time, and every interval over ``--min-ms`` (1 ms) in which
  the GPU runs neither a kernel nor a copy, with the phase it falls in and
  the host's top-level torch operations during it (none: the host runs
  Python or numpy without torch, e.g. drawing the weights).

``benchmarks/results/gpu_h200_trace_tensor.json.gz`` is such a trace (an
H200, torch 2.11, the fit from a CUDA tensor)::

    python -m benchmarks.gpu trace --read benchmarks/results/gpu_h200_trace_tensor.json.gz
    python -m benchmarks.gpu trace --record trace.json.gz      # on a CUDA machine
    python -m benchmarks.gpu trace --read trace.json.gz --json gaps.json   # the gaps as JSON too

``--quick`` records a smaller fit (8,000 x 784, width 1,024); ``--repeats``
is accepted and unused (one profiled fit).
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

from .._harness import benchmark_name, finish, parser, provenance, provenance_line, text_table
from .fit import device_busy, make, mixture, profiled_fit, union_within_us

HOST = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def record(path, numpy_inputs: bool = False, n: int = 60000, width: int = 4096, device: str = "cuda") -> dict:
    """Profile the second of two matched fits on ``device``; write its Chrome trace, and the provenance, to ``path``.

    The trace is gzipped JSON; its ``provenance`` key is the harness's
    record of where it was made.
    """
    import torch

    X, y = mixture(n)
    data = X if numpy_inputs else torch.as_tensor(X, dtype=torch.float32, device=device)
    make("matched", 64, device).fit(X[:500], y[:500])  # CUDA context, cuBLAS handles, kernels loaded
    profiled_fit("matched", width, device, data, y)  # the first full-size fit also fills CUDA's caching allocator
    prof, wall = profiled_fit("matched", width, device, data, y)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        trace = json.loads(raw.read_text())
    with gzip.open(path, "wt") as dst:
        json.dump({"provenance": provenance(benchmark=benchmark_name(__name__)), **trace}, dst)
    return device_busy(prof.events(), wall)


def _top_level(events):
    """The events not nested in an earlier one (sorted by start)."""
    tops, reach = [], float("-inf")
    for e in sorted(events, key=lambda e: e["ts"]):
        if e["ts"] >= reach:
            tops.append(e)
            reach = e["ts"] + e["dur"]
    return tops


def read(path, min_ms: float = 1.0) -> dict:
    """Phases, busy time and the GPU's idle gaps over ``min_ms`` in a trace written by :func:`record`, its provenance."""
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    host = [e for e in events if e.get("cat") in HOST]
    device = sorted((e for e in events if e.get("cat") in DEVICE), key=lambda e: e["ts"])
    t0 = min(e["ts"] for e in host)
    t1 = max(e["ts"] + e["dur"] for e in host + device)
    phases = {
        e["name"][len("phase_") :]: (e["ts"] - t0, e["ts"] + e["dur"] - t0)
        for e in host
        if e["name"].startswith("phase_") and e.get("cat") == "user_annotation"
    }
    ops = _top_level([e for e in host if not e["name"].startswith("phase_")])
    gaps, reach = [], t0
    for e in device + [{"ts": t1, "dur": 0.0, "name": "(end)"}]:
        if e["ts"] - reach > 1e3 * min_ms:
            gaps.append(_gap(reach - t0, e["ts"] - t0, phases, ops, t0, e["name"]))
        reach = max(reach, e["ts"] + e["dur"])
    intervals = [(e["ts"] - t0, e["ts"] + e["dur"] - t0) for e in device]
    windows = {**phases, "before the first phase": (0.0, min((a for a, _ in phases.values()), default=0.0))}
    return {
        "wall_ms": (t1 - t0) / 1e3,
        "busy_ms": union_within_us(intervals, 0.0, t1 - t0) / 1e3,
        "idle_ms_by_phase": {
            k: round((b - a - union_within_us(intervals, a, b)) / 1e3, 2) for k, (a, b) in windows.items()
        },
        "phases_ms": {k: [round(a / 1e3, 2), round(b / 1e3, 2)] for k, (a, b) in phases.items()},
        "idle_gaps": gaps,
        "idle_in_gaps_ms": sum(g["ms"] for g in gaps),
        "trace_provenance": trace.get("provenance"),
    }


def _gap(start, end, phases, ops, t0, next_work) -> dict:
    """One idle interval of the GPU: where it lies and what the host ran meanwhile (torch operations, ms)."""
    inside = [p for p, (a, b) in phases.items() if a <= start < b]
    during = {}
    for e in ops:
        a, b = max(e["ts"] - t0, start), min(e["ts"] + e["dur"] - t0, end)
        if b > a:
            during[e["name"]] = during.get(e["name"], 0.0) + (b - a) / 1e3
    torch_ms = sum(during.values())
    return {
        "at_ms": round(start / 1e3, 2),
        "ms": round((end - start) / 1e3, 2),
        "phase": min(inside, key=lambda p: phases[p][1] - phases[p][0]) if inside else "outside the phases",
        "host_torch_ms": round(torch_ms, 2),
        "host_other_ms": round((end - start) / 1e3 - torch_ms, 2),
        "host_ops": {k: round(v, 2) for k, v in sorted(during.items(), key=lambda kv: -kv[1])[:4]},
        "next_gpu_work": next_work[:60],
    }


def table(result: dict) -> str:
    """The gaps as text."""
    made = result.get("trace_provenance")
    head = [
        f"trace made {provenance_line(made)}" if made else "trace made before traces kept their provenance",
        f"wall {result['wall_ms']:.1f} ms, GPU busy {result['busy_ms']:.1f} ms "
        f"({100 * result['busy_ms'] / result['wall_ms']:.0f} %), idle in gaps over the threshold "
        f"{result['idle_in_gaps_ms']:.1f} ms",
        "phases (ms from the start): "
        + ", ".join(f"{k} {a}-{b}" for k, (a, b) in sorted(result["phases_ms"].items(), key=lambda kv: kv[1][0])),
        "GPU idle per phase (ms): " + ", ".join(f"{k} {v}" for k, v in result["idle_ms_by_phase"].items()),
        f"{'at ms':>8} {'idle ms':>8} {'phase':<20} {'host torch':>10} {'host other':>10}  next GPU work",
    ]
    line = "{at_ms:8.2f} {ms:8.2f} {phase:<20} {host_torch_ms:10.2f} {host_other_ms:10.2f}  {next_gpu_work}"
    return text_table(head, result["idle_gaps"], line)


def main(argv=None) -> int:
    ap = parser(__doc__, name=__name__, quick="with --record: 8,000 x 784 at width 1024", repeats=1)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--record", help="profile a matched fit on CUDA and write its trace here (.json.gz)")
    group.add_argument("--read", help="a trace written by --record")
    ap.add_argument("--numpy", action="store_true", help="with --record: fit from the numpy array")
    ap.add_argument("--min-ms", type=float, default=1.0, help="the shortest idle interval reported")
    args = ap.parse_args(argv)
    if args.record:
        import torch

        if not torch.cuda.is_available():
            print("--record needs CUDA: torch.cuda.is_available() is False", file=sys.stderr)
            return 1
        sizes = {"n": 8000, "width": 1024} if args.quick else {}
        print(json.dumps(finish(record(args.record, args.numpy, **sizes), args)))
        return 0
    finish(read(args.read, args.min_ms), args, table)
    return 0
