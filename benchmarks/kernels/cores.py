"""The exact implicit kernel on one core and on all cores, side by side in one process.

Real MNIST digits (784 features, global input scaling; ``digits_784`` of
``kernels.exact``), ``n`` = 2,000 and 4,000 (``--quick``: 300), the square
CK of tanh (Hermite series), GELU (closed form with Newton) and ReLU (table
inversion), ``sigma_a2 = 0.2``.  Every timing is the O(n^2) part
(``engine.kernel`` of samples prepared once); per activation and ``n`` the
four runs below are interleaved, repeat after repeat, after one untimed
round, and medians are reported (the machine is shared: a load burst hits
all four alike):

* the kernel on one core: ``n_jobs=1`` under a one-thread BLAS limit;
* a float64 ``X @ X.T`` with one BLAS thread;
* the kernel on all cores: the default ``n_jobs=None``;
* ``X @ X.T`` with all BLAS threads;
* for tanh and GELU, where numba is installed (the compiled loops of
  :mod:`sk_deq.kernels._compiled` and :mod:`sk_deq.kernels._compiled_closed`,
  ``pip install sk_deq[fast]``), the kernel on one core and on all cores
  once more with the numpy loops (``SK_DEQ_COMPILED=0``).

Only the first round's kernels are kept (for the comparison below): each
later result is freed as soon as it is timed, so that every call allocates
its output from the same state of memory.  (Keeping the latest result of
each run, as this script did before, left some runs to allocate their
128 MiB output while the others' were still held; with numpy's transparent
huge pages those calls stalled in the operating system's memory compaction,
in some rounds: tanh on two cores at n = 4,000 measured 1.37x to 1.44x
that way.)

Recorded: the speed-up of all cores over one, of the medians and of the
best times (``best``: the machine's noise only adds time), and the GEMM's own (the
share of the cores the machine gave), the kernel's time in units of the
GEMM at equal thread counts, which loops ran (``compiled`` or ``numpy``)
and, with both, the numpy loops' speed-up and the compiled loops' gain, the
largest difference between the kernels (relative to the kernel's largest
entry: all cores against one, and compiled against numpy, which should be
0), and the load average before and after.

Usage::

    python -m benchmarks.kernels cores                 # n = 2000, 4000; 7 repeats
    python -m benchmarks.kernels cores --quick         # n = 300, 1 repeat (smoke run)
    python -m benchmarks.kernels cores --json out.json
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import joblib
import numpy as np
from .._harness import finish, interleaved, parser
from .._data import digits_784
from threadpoolctl import threadpool_limits

from sk_deq.kernels import ImplicitKernelEngine
from sk_deq.kernels._compiled import COMPILED_ENV, compiled_series
from sk_deq.kernels.engine import kernel_workers

ACTIVATIONS = ("tanh", "gelu", "relu")
SIGMA_A2 = 0.2


@contextlib.contextmanager
def _numpy_loops(on: bool = True):
    """The engine's numpy loops even where the compiled series is installed (``SK_DEQ_COMPILED=0``)."""
    if not on:
        yield
        return
    before = os.environ.get(COMPILED_ENV)
    os.environ[COMPILED_ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ[COMPILED_ENV]
        else:
            os.environ[COMPILED_ENV] = before


def _huge_pages() -> dict:
    """Whether numpy asks for transparent huge pages (``NUMPY_MADVISE_HUGEPAGE``) and the kernel's THP modes.

    With huge pages, a large output (128 MiB at n = 4,000) can stall in the
    kernel's memory compaction at its first touch: tenths of a second of
    system time in some runs and not others on a machine whose memory is
    fragmented.
    """
    try:
        from numpy._core.multiarray import _get_madvise_hugepage

        madvise = bool(_get_madvise_hugepage())
    except ImportError:  # numpy < 2
        madvise = None
    modes = {}
    for name in ("enabled", "defrag"):
        try:
            modes[name] = Path(f"/sys/kernel/mm/transparent_hugepage/{name}").read_text().strip()
        except OSError:
            modes[name] = None
    return {"numpy_madvise_hugepage": madvise, "thp_enabled": modes["enabled"], "thp_defrag": modes["defrag"]}


def _one_case(X, act, repeats):
    """Interleaved timings of the kernel and the GEMM on one core and on all cores.

    For an activation with compiled loops (the Hermite series, GELU's and
    erf's Newton steps) where numba is installed, the kernel with the numpy
    loops runs in the same rounds too (``*_numpy``).
    """
    eng = ImplicitKernelEngine(act, SIGMA_A2, 1.0)
    S = eng.prepare(X)
    runs = {
        "kernel_1": lambda: eng.kernel(S, n_jobs=1),
        "gemm_1": lambda: X @ X.T,
        "kernel_all": lambda: eng.kernel(S),
        "gemm_all": lambda: X @ X.T,
    }
    hermite = eng.method == "Hermite expansion" and compiled_series() is not None
    compiled = hermite or getattr(eng.dual, "compiled", None) is not None
    if compiled:
        runs["kernel_1_numpy"], runs["kernel_all_numpy"] = runs["kernel_1"], runs["kernel_all"]

    @contextlib.contextmanager
    def context(name):
        with threadpool_limits(limits=1 if "_1" in name else None), _numpy_loops(name.endswith("_numpy")):
            yield

    # the warm-up round also compiles (or loads) the compiled loops; the first round's kernels are kept
    # for the comparison, every other result is freed at once, so that each timed call allocates its
    # output (128 MiB at n = 4,000) from the same state of memory
    timings = interleaved(runs, repeats, context=context, keep=lambda name, r: r == 0 and name.startswith("kernel"))
    times, med = timings.seconds, timings.medians
    outs = {name: kept[0] for name, kept in timings.outputs.items()}
    serial = outs["kernel_1"]
    diff = max(float(np.max(np.abs(serial - v))) for v in outs.values()) / float(np.max(np.abs(serial)))
    record = {
        "activation": act,
        "method": eng.method,
        "loops": "compiled" if compiled else "numpy",
        "n": len(X),
        **{f"{k}_s": v for k, v in med.items()},
        "speedup": med["kernel_1"] / med["kernel_all"],
        "speedup_best": min(times["kernel_1"]) / min(times["kernel_all"]),
        "gemm_speedup": med["gemm_1"] / med["gemm_all"],
        "ratio_to_gemm_1": med["kernel_1"] / med["gemm_1"],
        "ratio_to_gemm_all": med["kernel_all"] / med["gemm_all"],
        "max_rel_diff": diff,
        "times": times,
    }
    if compiled:
        record["numpy_speedup"] = med["kernel_1_numpy"] / med["kernel_all_numpy"]
        record["numpy_speedup_best"] = min(times["kernel_1_numpy"]) / min(times["kernel_all_numpy"])
        record["compiled_over_numpy_1"] = med["kernel_1_numpy"] / med["kernel_1"]
        record["compiled_over_numpy_all"] = med["kernel_all_numpy"] / med["kernel_all"]
    return record


def collect(quick=False, repeats=7, sizes=None, acts=ACTIVATIONS):
    """Every (activation, n) of :func:`_one_case`, with the machine's load before and after (quick: n = 300)."""
    result = {
        "cpu_count": joblib.cpu_count(),
        **_huge_pages(),
        "workers": kernel_workers(None),
        "repeats": repeats,
        "load_before": os.getloadavg(),
        "records": [],
    }
    for n in sizes or ((300,) if quick else (2000, 4000)):
        X, _ = digits_784(n)
        X = np.ascontiguousarray(X, dtype=np.float64)
        for act in acts:
            result["records"].append(_one_case(X, act, repeats))
    result["load_after"] = os.getloadavg()
    return result


def table(result) -> str:
    """The records as a text table."""
    w = result["workers"]
    lines = [
        f"cpu_count={result['cpu_count']}, kernel threads={w}, {result['repeats']} interleaved repeats (medians); "
        f"load average before {result['load_before'][0]:.2f}, after {result['load_after'][0]:.2f}; "
        f"numpy huge pages {result.get('numpy_madvise_hugepage')}, THP {result.get('thp_enabled')}, "
        f"defrag {result.get('thp_defrag')}",
        f"{'n':>5} {'activation':<10} {'1 core s':>9} {f'{w} cores s':>10} {'speed-up':>9} {'best':>6} "
        f"{'/GEMM 1':>8} {f'/GEMM {w}':>8} {'GEMM speed-up':>13} {'rel diff':>9} {'loops':>8}",
    ]
    for r in result["records"]:
        lines.append(
            f"{r['n']:>5} {r['activation']:<10} {r['kernel_1_s']:9.3f} {r['kernel_all_s']:10.3f} "
            f"{r['speedup']:8.2f}x {r['speedup_best']:5.2f}x {r['ratio_to_gemm_1']:8.1f} {r['ratio_to_gemm_all']:8.1f} {r['gemm_speedup']:12.2f}x "
            f"{r['max_rel_diff']:9.1e} {r['loops']:>8}"
        )
        if "numpy_speedup" in r:
            lines.append(
                f"{'':>5} {'  (numpy)':<10} {r['kernel_1_numpy_s']:9.3f} {r['kernel_all_numpy_s']:10.3f} "
                f"{r['numpy_speedup']:8.2f}x {r['numpy_speedup_best']:5.2f}x   compiled loops {r['compiled_over_numpy_1']:.2f}x faster on 1 core, "
                f"{r['compiled_over_numpy_all']:.2f}x on {w}"
            )
    return "\n".join(lines)


def main(argv=None):
    """Run :func:`collect`, print its table, write its JSON with ``--json``; returns the result."""
    ap = parser(__doc__, name=__name__, quick="300 digits, one repeat", repeats=7)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 4000])
    args = ap.parse_args(argv)
    result = collect(args.quick, 1 if args.quick else args.repeats, None if args.quick else args.sizes)
    return finish(result, args, table)
