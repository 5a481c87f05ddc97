"""Where a fit's time goes on a GPU: host and device time per phase, host syncs, and the speed-up over the CPU.

For each model (the matched net by default, and a DEQ) on Gaussian-mixture
data of MNIST's shape (60,000 x 784, ten classes; nothing is downloaded):

- **wall time per phase** of ``fit`` (``_initialize``: input scaling and
  the network; ``_cache_features``: the features; ``readout``: the rest of
  ``_fit_network``, the L-BFGS fit of the readout) and of ``predict``, each
  bracketed by ``torch.cuda.synchronize()``;
- **device time per phase**: the time the GPU runs kernels or copies
  (``torch.profiler``, a second fit: the union of their intervals on the
  device timeline, within each phase's window), kernels and copies apart,
  and the **busy share**, busy time over the wall time of the fit;
- **host syncs per phase**, counted by CUDA itself:
  ``torch.cuda.set_sync_debug_mode("warn")`` warns at each operation that
  makes the host wait for the device;
- how far a row's outputs move with its **batch** on CUDA (float32 and
  float64, relative to the largest output);
- the same fit on the CPU (all its cores), for the **speed-up**;
- for the profiled models, the fit again from a float32 CUDA tensor (the
  inputs already on the GPU: no copies, the scaling there).

Without CUDA the benchmark returns ``{"cuda": null, "reason": ...}`` (that
is what ``run_all`` records on a machine without a GPU).

Usage::

    python -m benchmarks.gpu fit                      # 60,000 x 784, width 4096, matched and DEQ
    python -m benchmarks.gpu fit --quick              # 8,000 x 784, width 1024
    python -m benchmarks.gpu fit --block-sweep deq    # the DEQ against the rows of a block
    python -m benchmarks.gpu fit --block-sweep matched   # the matched net against the rows of a block
    python -m benchmarks.gpu fit --models matched --cpu --out gpu.json   # no CPU fit
    python -m benchmarks.gpu fit --quick --json gpu.json   # --json is --out; the file starts with the provenance

``--repeats`` is accepted and unused: every figure is one fit (the profiled
one a second).
"""

from __future__ import annotations

import contextlib
import json
import time
import warnings

import numpy as np
from .._harness import parser, timed, write_json

PHASES = ("_initialize", "_cache_features", "_fit_network")
BUSY_GOAL = {
    "id": "gpu_busy_share",
    "goal": "GPU busy share of a matched fit (CUDA kernels / wall time)",
    "target": ">= 80 %",
}
MODELS = ("matched", "deq")


def mixture(n: int, p: int = 784, k: int = 10, seed: int = 0):
    """``n`` samples of a ``k``-class Gaussian mixture in ``p`` dimensions (noise of norm about 1, means of norm 3)."""
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((k, p))
    means *= 3.0 / np.linalg.norm(means, axis=1, keepdims=True)
    y = rng.integers(0, k, n)
    X = means[y] + rng.standard_normal((n, p)) / np.sqrt(p)
    return X.astype(np.float64), y


def make(model: str, width: int, device: str):
    from sk_deq import DEQClassifier, MatchedExplicitClassifier

    if model == "deq":
        return DEQClassifier("tanh", 0.2, n_hidden=width, device=device, random_state=0)
    return MatchedExplicitClassifier("tanh", 0.2, n_hidden=width, device=device, random_state=0)


class PhaseClock:
    """Wall time, host syncs and a profiler range per phase, by wrapping the estimator's phase methods."""

    def __init__(self, est, cuda: bool):
        self.cuda, self.seconds, self.syncs, self._warnings = cuda, {}, {}, None
        for name in PHASES:
            setattr(est, name, self._wrap(name, getattr(est, name)))

    def _sync(self):
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def _n_sync_warnings(self) -> int:
        if self._warnings is None:
            return 0
        return sum("synchroniz" in str(w.message) for w in self._warnings)

    def _wrap(self, name, method):
        import torch

        def timed(*args, **kwargs):
            self._sync()
            t0, s0 = time.perf_counter(), self._n_sync_warnings()
            with torch.profiler.record_function(f"phase{name}"):
                out = method(*args, **kwargs)
            self._sync()
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
            self.syncs[name] = self.syncs.get(name, 0) + self._n_sync_warnings() - s0
            return out

        return timed

    @contextlib.contextmanager
    def counting_syncs(self):
        """Count CUDA's own sync warnings (``set_sync_debug_mode``) inside the block."""
        if not self.cuda:
            yield
            return
        import torch

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self._warnings = caught
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield
            finally:
                torch.cuda.set_sync_debug_mode(0)
                self._warnings = list(caught)


def phase_table(clock: PhaseClock, fit_s: float) -> dict:
    """Seconds per phase, with the readout as ``_fit_network`` less the features it computes."""
    s = dict(clock.seconds)
    out = {
        "initialize_s": s.get("_initialize", 0.0),
        "features_s": s.get("_cache_features", 0.0),
        "readout_s": s.get("_fit_network", 0.0) - s.get("_cache_features", 0.0),
        "fit_s": fit_s,
    }
    out["other_s"] = fit_s - out["initialize_s"] - s.get("_fit_network", 0.0)
    return out


def timed_fit(model, width, device, X, y):
    """One fit (and predict) with wall time and host syncs per phase."""
    import torch

    cuda = device.startswith("cuda")
    est = make(model, width, device)
    clock = PhaseClock(est, cuda)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with clock.counting_syncs():
            if cuda:
                torch.cuda.synchronize()
            _, fit_s = timed(est.fit, X, y)
            fit_syncs = clock._n_sync_warnings()
            _, predict_s = timed(est.predict, X)
        n_syncs = clock._n_sync_warnings()
    out = phase_table(clock, fit_s)
    out.update(predict_s=predict_s, n_iter=int(est.n_iter_), accuracy=float(est.score(X[:5000], y[:5000])))
    out["fixed_point_iters"] = (est.fixed_point_info_ or {}).get("n_iter")
    if cuda:
        out["syncs_total"] = n_syncs  # fit and predict
        out["syncs_fit"] = fit_syncs
        out.update({f"syncs{k}": v for k, v in clock.syncs.items()})
    return out


def profiled_fit(model, width, device, X, y):
    """One fit under ``torch.profiler`` (host and CUDA), its phases annotated; returns ``(profiler, wall seconds)``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    est = make(model, width, device)
    PhaseClock(est, True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            _, wall = timed(est.fit, X, y, sync=torch.cuda.synchronize)
    return prof, wall


def device_time(model, width, device, X, y) -> dict:
    """The CUDA kernels' time in a second fit (torch.profiler): total, per phase, and its share of the fit."""
    prof, wall = profiled_fit(model, width, device, X, y)
    return device_busy(prof.events(), wall)


def union_us(intervals) -> float:
    """Total length of the union of ``(start, end)`` intervals (overlaps counted once)."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def union_within_us(intervals, lo, hi) -> float:
    """Length of the union of ``intervals`` clipped to ``[lo, hi]``."""
    return union_us([(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi])


def device_busy(events, wall: float) -> dict:
    """Busy time of the GPU from the profiler's device-side events: kernels and copies, per phase.

    The phases' annotations (``record_function``) also appear on the device
    timeline, spanning their kernels: they give each phase's window and are
    not work themselves.  Work is the union of the kernels' and copies'
    intervals (concurrent ones counted once).
    """
    from torch.autograd import DeviceType

    on_device = [e for e in events if e.device_type == DeviceType.CUDA]
    windows = {e.name: (e.time_range.start, e.time_range.end) for e in on_device if e.name.startswith("phase_")}
    work = [e for e in on_device if not e.name.startswith("phase_") and not getattr(e, "is_user_annotation", False)]
    copies = [(e.time_range.start, e.time_range.end) for e in work if e.name.startswith(("Memcpy", "Memset"))]
    kernels = [(e.time_range.start, e.time_range.end) for e in work if not e.name.startswith(("Memcpy", "Memset"))]
    busy = union_us(kernels + copies) / 1e6
    out = {
        "profiled_fit_s": wall,
        "kernels_s": union_us(kernels) / 1e6,
        "copies_s": union_us(copies) / 1e6,
        "busy_s": busy,
        "busy_share": busy / wall,
    }
    for name, (lo, hi) in windows.items():
        out[f"busy{name[5:]}_s"] = union_within_us(kernels + copies, lo, hi) / 1e6
    return out


def batch_deviation(model, width, X, y) -> dict:
    """How far a row's outputs on CUDA move with its batch: largest difference over batch sizes, relative.

    The same fitted model predicts 512 rows at once and in batches of 1 (the
    first 16 rows), 7, 63, 64, 65 and 300; the largest absolute difference
    of the decision function over the largest magnitude, per dtype.
    """
    out = {}
    for dtype in ("float32", "float64"):
        est = make(model, width, "cuda").set_params(dtype=dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X[:2000], y[:2000])
        pool = X[2000:2512]
        full = est.decision_function(pool)
        worst = 0.0
        for size in (1, 7, 63, 64, 65, 300):
            rows = pool[:16] if size == 1 else pool
            parts = np.concatenate([est.decision_function(rows[i : i + size]) for i in range(0, len(rows), size)])
            worst = max(worst, float(np.abs(parts - full[: len(rows)]).max()))
        out[f"batch_deviation_{dtype}"] = worst / float(np.abs(full).max())
    return out


#: Block sizes of the sweeps: ``(entries, most rows)`` as in :mod:`sk_deq.estimators._network`, for the DEQ
#: (``GPU_BLOCK_ENTRIES``) and the matched net (``GPU_ONE_PASS_BLOCK_ENTRIES``).
BLOCK_SWEEP = {
    "deq": ((1 << 16, 1024), (1 << 18, 4096), (1 << 20, 8192), (1 << 22, 16384)),
    "matched": ((1 << 20, 1024), (1 << 21, 1024), (1 << 22, 1024), (1 << 23, 2048), (1 << 24, 4096)),
}
SWEPT = {"deq": "GPU_BLOCK_ENTRIES", "matched": "GPU_ONE_PASS_BLOCK_ENTRIES"}


def block_sweep(model="deq", n=None, width=4096, progress=print) -> list[dict]:
    """Fit and predict on CUDA against the rows of a block (the block constants of ``sk_deq.estimators._network`` patched in turn).

    The measurement behind :data:`sk_deq.estimators._network.GPU_BLOCK_ENTRIES` (the
    DEQ, ``n`` = 20,000 by default) and
    :data:`sk_deq.estimators._network.GPU_ONE_PASS_BLOCK_ENTRIES` (the matched net,
    ``n`` = 60,000): fit (and its features phase), predict of all ``n``
    rows, and one-row latency (best of three), each the best of two runs.
    """
    import torch

    import sk_deq.estimators._network as blocks

    n = n or (20000 if model == "deq" else 60000)
    X, y = mixture(n)
    make(model, 64, "cuda").fit(X[:300], y[:300])
    name = SWEPT[model]
    saved, records = (getattr(blocks, name), blocks.MAX_BLOCK_ROWS), []
    try:
        for entries, most in BLOCK_SWEEP[model]:
            setattr(blocks, name, entries)
            blocks.MAX_BLOCK_ROWS = most
            rec = {"model": model, "block_rows": blocks.block_rows(width, "cuda", one_pass=model != "deq")}
            for _ in range(2):
                est = make(model, width, "cuda")
                clock = PhaseClock(est, True)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.cuda.synchronize()
                    _, fit_s = timed(est.fit, X, y)
                one = [timed(est.decision_function, X[:1])[1] for _ in range(3)]
                run = {
                    "fit_s": fit_s,
                    "features_s": clock.seconds["_cache_features"],
                    "predict_all_s": timed(est.decision_function, X)[1],
                    "predict_one_ms": 1e3 * min(one),
                }
                rec.update({k: min(v, rec.get(k, v)) for k, v in run.items()})
            progress(json.dumps(rec))
            records.append(rec)
    finally:
        setattr(blocks, name, saved[0])
        blocks.MAX_BLOCK_ROWS = saved[1]
    return records


def bench(models=MODELS, n=60000, width=4096, cpu=MODELS, profile=("matched",), tensor=True, progress=print) -> dict:
    """The records (one per model and device) and the configuration; see the module docstring.

    ``cpu`` names the models also fitted on the CPU; ``profile`` those whose
    kernels are timed with torch.profiler (a second fit; a DEQ at full size
    makes hundreds of thousands of events), and, with ``tensor``, fitted
    again from a CUDA tensor.
    """
    import torch

    if not torch.cuda.is_available():
        reason = "torch.cuda.is_available() is False: no CUDA GPU on this machine"
        return {"cuda": None, "reason": reason, "goals": [{**BUSY_GOAL, "measured": None, "met": None, "note": reason}]}
    X, y = mixture(n)
    make("matched", 64, "cuda").fit(X[:500], y[:500])  # CUDA context, cuBLAS handles, kernels loaded
    records = []
    on_device = torch.as_tensor(X, dtype=torch.float32, device="cuda")
    for model in models:
        rec = {"model": model, "input": "numpy float64", "device": torch.cuda.get_device_name()}
        rec.update(timed_fit(model, width, "cuda", X, y))
        if model in profile:
            rec.update(device_time(model, width, "cuda", X, y))
        rec.update(batch_deviation(model, min(width, 1024), X, y))
        progress(json.dumps(rec))
        records.append(rec)
        if tensor and model in profile:  # the inputs already on the GPU: no copies, scaling there
            tensor_rec = {"model": model, "input": "CUDA tensor float32", "device": rec["device"]}
            tensor_rec.update(timed_fit(model, width, "cuda", on_device, y))
            tensor_rec.update(device_time(model, width, "cuda", on_device, y))
            progress(json.dumps(tensor_rec))
            records.append(tensor_rec)
        if model in cpu:
            cpu_rec = {"model": model, "input": "numpy float64", "device": f"cpu ({torch.get_num_threads()} threads)"}
            cpu_rec.update(timed_fit(model, width, "cpu", X, y))
            cpu_rec["gpu_speedup"] = cpu_rec["fit_s"] / rec["fit_s"]
            progress(json.dumps(cpu_rec))
            records.append(cpu_rec)
    config = {"n_samples": n, "n_features": X.shape[1], "n_hidden": width, "torch": torch.__version__}
    return {"cuda": torch.version.cuda, "config": config, "records": records, "goals": busy_goal(records)}


def busy_goal(records) -> list[dict]:
    """The busy-share goal from the matched net's profiled CUDA record (none without one)."""
    busy = [
        r["busy_share"]
        for r in records
        if r["model"] == "matched" and r["input"].startswith("numpy") and "busy_share" in r
    ]
    if not busy:
        return []
    return [{**BUSY_GOAL, "measured": f"{100 * busy[0]:.0f} %", "met": busy[0] >= 0.8}]


def collect(quick: bool = False, repeats: int = 1) -> dict:
    """``run_all``'s entry point: the quick configuration is 8,000 x 784 at width 1024."""
    return bench(n=8000, width=1024) if quick else bench()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def main(argv=None) -> int:
    ap = parser(__doc__, name=__name__, quick="8,000 samples, width 1024", repeats=1)
    ap.add_argument("--out", dest="json", help="the same as --json")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--n-samples", type=int, default=60000)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--cpu", nargs="*", choices=MODELS, default=list(MODELS), help="models also fitted on the CPU")
    ap.add_argument("--no-tensor", action="store_true", help="skip the fit from a CUDA tensor")
    ap.add_argument("--profile", nargs="*", choices=MODELS, default=["matched"], help="models timed by torch.profiler")
    ap.add_argument(
        "--block-sweep", choices=MODELS, help="only the block sizes of this model on the GPU (deq: n = 20,000)"
    )
    args = ap.parse_args(argv)
    if args.block_sweep:
        result = {"block_sweep": block_sweep(args.block_sweep, width=args.width)} if _cuda() else {"cuda": None}
    else:
        n, width = (8000, 1024) if args.quick else (args.n_samples, args.width)
        result = bench(args.models, n, width, cpu=args.cpu, profile=args.profile, tensor=not args.no_tensor)
    if args.json:
        write_json(args.json, result, benchmark=__name__, indent=2)
    print(json.dumps(result, indent=2))
    return 0
