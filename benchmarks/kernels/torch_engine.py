"""The exact implicit kernel in torch (``device=...``) against the numpy engine.

Real MNIST digits (784 features, global input scaling; ``digits_784`` of
``kernels.exact``), ``n`` = 4,000 (``--quick``: 1,000), the square CK of
ReLU (table inversion), tanh (Hermite expansion in both engines) and GELU
(closed form in numpy, Hermite expansion in torch).  Timed, for every
activation, in interleaved repeats after one untimed round (medians
reported):

* the numpy engine with one thread (``n_jobs=1`` under a one-thread BLAS
  limit) and with all threads (``n_jobs=-1``: parallel blocks, one BLAS
  thread each);
* the torch engine on the CPU with one torch thread and with all of them;
* the torch engine on CUDA when ``torch.cuda.is_available()``
  (``torch.cuda.synchronize()`` around every timing), else ``"cuda": null``
  with the reason.

Every kernel time is the O(n^2) part (``engine.kernel`` of prepared samples;
the O(n) preparation, in numpy for every engine, is timed apart) and sits
next to a float64 ``X @ X.T`` on the same device with the same threads,
measured right before it.  The largest difference to the numpy engine's
kernel (absolute, and relative to the kernel's largest entry) is recorded
for every torch run.  No figure is invented: a device that is not there has
no record.

Usage::

    python -m benchmarks.kernels torch_engine            # n = 4000
    python -m benchmarks.kernels torch_engine --quick    # n = 1000
    python -m benchmarks.kernels torch_engine --json out.json
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics

import numpy as np
from .._harness import finish, interleaved, parser, text_table, timed
from .._data import digits_784
from threadpoolctl import threadpool_limits

from sk_deq._scaling import data_tau0
from sk_deq.experiments._common import torch_threads
from sk_deq.kernels import ImplicitKernelEngine

ACTIVATIONS = ("relu", "tanh", "gelu")
SIGMA_A2 = 0.2
KERNEL = "ck"


def _gemm(X, device):
    """A float64 ``X @ X.T`` on ``device`` (None: numpy), inputs already there."""
    if device is None:
        return lambda: X @ X.T
    import torch

    T = torch.as_tensor(X, dtype=torch.float64, device=device)
    return lambda: T @ T.T


def _limits(device, threads):
    """The thread limit of a run: numpy's BLAS threads (None: no limit), or torch's intra-op threads."""
    if device is not None:
        return torch_threads(threads)
    return threadpool_limits(limits=threads, user_api="blas") if threads else contextlib.nullcontext()


def _configs(all_threads):
    """(name, device, numpy limit / torch threads, n_jobs) of every timed engine."""
    import torch

    cfgs = [
        ("numpy, 1 thread", None, 1, 1),
        (f"numpy, {all_threads} threads", None, None, -1),
        ("torch cpu, 1 thread", "cpu", 1, None),
        (f"torch cpu, {all_threads} threads", "cpu", all_threads, None),
    ]
    if torch.cuda.is_available():
        cfgs.append(("torch cuda", "cuda", all_threads, None))
    return cfgs


def collect(quick: bool = False, repeats: int = 3, n: int | None = None) -> dict:
    """Time the engines on digits; JSON-serialisable records (see the module docstring).

    Parameters
    ----------
    quick : bool, default=False
        1,000 digits instead of 4,000.
    repeats : int, default=3
        Interleaved repeats per timing (at least 3 recommended; medians
        are reported with all values).
    n : int, optional
        Number of digits, overriding ``quick`` (for smoke tests).

    Returns
    -------
    dict
        ``records`` (one per activation and engine), the thread counts,
        torch's version, and ``cuda`` (the GPU's name, or None with
        ``cuda_reason``).
    """
    import torch

    n = int(n) if n is not None else (1000 if quick else 4000)
    X, _ = digits_784(n)
    tau0 = data_tau0(X)
    all_threads = os.cpu_count() or 1
    cuda = torch.cuda.is_available()
    result = {
        "benchmark": "torch_engine",
        "quick": bool(quick),
        "n_samples": n,
        "n_features": int(X.shape[1]),
        "kernel": KERNEL,
        "sigma_a2": SIGMA_A2,
        "repeats": int(repeats),
        "cpu_count": all_threads,
        "torch": torch.__version__,
        "torch_threads_default": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if cuda else None,
        "cuda_reason": None if cuda else "torch.cuda.is_available() is False on this machine: no GPU timings",
        "records": [],
    }
    cfgs = {name: cfg for name, *cfg in _configs(all_threads)}  # name: (device, threads, n_jobs)
    for act in ACTIVATIONS:
        engines = {
            name: ImplicitKernelEngine(act, SIGMA_A2, tau0, kernel=KERNEL, device=dev)
            for name, (dev, *_) in cfgs.items()
        }
        prepared, prep_times = {}, {}
        for name, eng in engines.items():
            prepared[name], prep_times[name] = timed(eng.prepare, X)
        runs = {}
        for name, (dev, _, n_jobs) in cfgs.items():  # the GEMM right before the kernel, with the same threads
            runs[(name, "gemm")] = _gemm(X, dev)
            runs[(name, "kernel")] = functools.partial(engines[name].kernel, prepared[name], n_jobs=n_jobs)
        t = interleaved(
            runs,
            repeats,
            context=lambda key: _limits(*cfgs[key[0]][:2]),
            sync=torch.cuda.synchronize if cuda else None,
            keep=lambda key, r: r == 0 and key[1] == "kernel",
        )
        ref = t.outputs[(next(iter(cfgs)), "kernel")][0]
        scale = float(np.max(np.abs(ref)))
        for name, (dev, threads, n_jobs) in cfgs.items():
            times, gemms = t.seconds[(name, "kernel")], t.seconds[(name, "gemm")]
            med, gmed = statistics.median(times), statistics.median(gemms)
            diff = float(np.max(np.abs(t.outputs[(name, "kernel")][0] - ref)))
            result["records"].append(
                {
                    "activation": act,
                    "engine": name,
                    "device": "numpy" if dev is None else dev,
                    "method": engines[name].method if dev is None else engines[name]._torch_solver().route,
                    "threads": threads if threads else all_threads,
                    "n_jobs": n_jobs,
                    "kernel_seconds": med,
                    "kernel_seconds_all": times,
                    "gemm_seconds": gmed,
                    "gemm_seconds_all": gemms,
                    "ratio_to_gemm": med / gmed,
                    "prepare_seconds": prep_times[name],
                    "max_abs_diff_to_numpy": diff,
                    "max_rel_diff_to_numpy": diff / scale,
                }
            )
    return result


def _table(result) -> str:
    head = [
        f"n={result['n_samples']} digits x {result['n_features']}, kernel={result['kernel']}, "
        f"{result['repeats']} repeats (medians); cpu_count={result['cpu_count']}, torch {result['torch']}",
        f"cuda: {result['cuda'] or 'none (' + result['cuda_reason'] + ')'}",
        f"{'activation':<10} {'engine':<22} {'kernel s':>9} {'X@X.T s':>9} {'ratio':>7} {'prep s':>7} {'rel diff':>9}",
    ]
    line = "{activation:<10} {engine:<22} {kernel_seconds:9.3f} {gemm_seconds:9.4f} {ratio_to_gemm:7.1f} "
    return text_table(head, result["records"], line + "{prepare_seconds:7.3f} {max_rel_diff_to_numpy:9.1e}")


def main(argv=None):
    """Run :func:`collect` and print its table (and write its JSON with ``--json``)."""
    args = parser(__doc__, name=__name__, quick="1,000 digits instead of 4,000", repeats=3).parse_args(argv)
    finish(collect(quick=args.quick, repeats=args.repeats), args, _table)
