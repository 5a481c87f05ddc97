"""How busy a GPU stays in fits that give it at least a second of work, in a grid search, and with the weights drawn ahead.

Three parts (``--only`` picks some), on Gaussian-mixture data of MNIST's
shape (``gpu.fit.mixture``; nothing is downloaded), tanh at
``sigma_a2 = 0.2``:

``large``
    Fits in which the GPU has at least a second of work: the matched net on
    600,000 rows at width 4096 and on 60,000 rows at width 16,384, and the
    DEQ on 60,000 rows at width 4096.  For each: one fit with nothing
    attached (its wall time), one with the phases and the host syncs
    counted (``gpu.fit.timed_fit``; the syncs of the fit alone, then of
    fit and predict together), and one under ``torch.profiler`` (host and
    CUDA activity) for the device's busy time.  The **busy share** is that
    busy time over the wall time of the plain fit; the profiled fit's own
    wall time is recorded beside it.
``grid``
    ``GridSearchCV`` of the matched net (width 4096, 60,000 rows) over four
    ``alpha`` and two folds, eight fits with no refit: its wall time and
    the busy share of the same search under the profiler.
``draw``
    The weights drawn ahead (:class:`~sk_deq.nn.layers.WeightDraws`, the
    default) against drawn when the network is built (the generator
    itself), alternating, ``--repeats``
    fits each: on a GPU the matched net at width 4096 and 16,384 and the DEQ
    at width 4096, 60,000 rows; with ``--device cpu`` the matched net at
    width 1024 and 4096 and the DEQ at width 1024, 8,000 rows, on all the
    CPU's cores.  The networks are the same to the bit.

Target (the hardware issue): the GPU at least 80 % busy in a fit with at
least 1 s of work.  Without CUDA every part returns ``{"cuda": null}``.

Usage::

    python -m benchmarks.gpu load --json gpu_load.json
    python -m benchmarks.gpu load --only grid draw --repeats 5
    python -m benchmarks.gpu load --device cpu --repeats 7   # the draw part on the CPU
    python -m benchmarks.gpu load --quick   # small sizes, a smoke run (on the CPU: nothing to measure)
"""

from __future__ import annotations

import json
import statistics
import time
import warnings

from .._harness import parser, timed, write_json
from .fit import device_busy, device_time, make, mixture, timed_fit

PARTS = ("large", "grid", "draw")
GOAL = {"id": "gpu_busy_share", "goal": "GPU busy share of a fit with >= 1 s of GPU work", "target": ">= 80 %"}


def _sync():
    import torch

    torch.cuda.synchronize()


def _profiled(fn) -> dict:
    """``fn()`` under torch.profiler (host and CUDA): the device's busy time and the profiled wall time.

    ``gpu.fit.device_time`` does the same for one fit; this takes any callable (a grid search).
    """
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            _, wall = timed(fn, sync=_sync)
    return device_busy(prof.events(), wall)


def _plain_fit(model, width, X, y, device="cuda") -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return timed(make(model, width, device).fit, X, y, sync=_sync if device.startswith("cuda") else None)[1]


def large(quick: bool, progress=print) -> list[dict]:
    """The ``large`` part: one record per configuration."""
    configs = [("matched", 8000, 1024)] if quick else [("matched", 600000, 4096), ("matched", 60000, 16384)]
    configs += [("deq", 8000, 1024)] if quick else [("deq", 60000, 4096)]
    records, data = [], {}
    for model, n, width in configs:
        if n not in data:
            data = {n: mixture(n)}  # one data set held at a time
        X, y = data[n]
        rec = {"model": model, "n_samples": n, "n_hidden": width, "plain_fit_s": _plain_fit(model, width, X, y)}
        rec.update(timed_fit(model, width, "cuda", X, y))
        prof = device_time(model, width, "cuda", X, y)  # a fit under the profiler, its phases annotated
        rec.update(prof)
        rec["busy_share_plain"] = prof["busy_s"] / rec["plain_fit_s"]
        progress(json.dumps(rec))
        records.append(rec)
    return records


def grid(quick: bool, progress=print) -> dict:
    """The ``grid`` part: a GridSearchCV of eight fits, plain and profiled."""
    from sklearn.model_selection import GridSearchCV

    n, width = (8000, 1024) if quick else (60000, 4096)
    X, y = mixture(n)

    def search():
        est = make("matched", width, "cuda")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return GridSearchCV(est, {"alpha": [1e-5, 1e-4, 1e-3, 1e-2]}, cv=2, refit=False).fit(X, y)

    search()  # warm: the match is cached, the kernels loaded
    _, wall = timed(search, sync=_sync)
    rec = {"n_samples": n, "n_hidden": width, "fits": 8, "wall_s": wall}
    prof = _profiled(search)
    rec.update(prof, busy_share_plain=prof["busy_s"] / wall)
    progress(json.dumps(rec))
    return rec


def draw(quick: bool, repeats: int, device: str = "cuda", progress=print, configs=None, n=None) -> list[dict]:
    """The ``draw`` part: fit time with the weights drawn ahead and at the build, alternating, on ``device``.

    ``configs`` (``(model, width)`` pairs) and ``n`` replace the sizes of the module docstring.
    """
    import torch

    from sk_deq.estimators._network import NetworkMixin

    default = NetworkMixin._weight_source  # the draw ahead

    def at_build(self, n_features, targets, seed, device):  # the generator itself: the draw waits for the build
        return torch.Generator().manual_seed(seed)

    cuda = device.startswith("cuda")
    n = n or (8000 if quick or not cuda else 60000)
    X, y = mixture(n)
    if configs is None and cuda:
        configs = (
            [("matched", 1024), ("deq", 1024)] if quick else [("matched", 4096), ("matched", 16384), ("deq", 4096)]
        )
    elif configs is None:
        configs = [("matched", 1024), ("matched", 4096), ("deq", 1024)]
    records = []
    for model, width in configs:
        times: dict[str, list[float]] = {"ahead": [], "at_build": []}
        _plain_fit(model, width, X, y, device)  # warm
        for r in range(repeats):
            for name in ("ahead", "at_build") if r % 2 == 0 else ("at_build", "ahead"):
                NetworkMixin._weight_source = default if name == "ahead" else at_build  # type: ignore[method-assign]
                try:
                    times[name].append(_plain_fit(model, width, X, y, device))
                finally:
                    NetworkMixin._weight_source = default  # type: ignore[method-assign]
        rec = {"model": model, "device": device, "n_samples": n, "n_hidden": width, "fit_s": times}
        rec["median_ahead_s"] = statistics.median(times["ahead"])
        rec["median_at_build_s"] = statistics.median(times["at_build"])
        progress(json.dumps(rec))
        records.append(rec)
    return records


def bench(parts=PARTS, quick: bool = False, repeats: int = 3, progress=print, save=None, device="cuda") -> dict:
    """The records of ``parts``; see the module docstring.  ``save(result)`` runs after every part.

    With ``device='cpu'`` only the ``draw`` part runs, on the CPU (8,000 rows; widths 1024 and 4096).
    """
    save = save or (lambda result: None)
    import torch

    if device == "cpu":
        result = {
            "device": "cpu",
            "torch_threads": torch.get_num_threads(),
            "draw": draw(quick, repeats, "cpu", progress),
        }
        save(result)
        return result
    if not torch.cuda.is_available():
        return {"cuda": None, "reason": "torch.cuda.is_available() is False: no CUDA GPU on this machine"}
    X, y = mixture(500)
    make("matched", 64, "cuda").fit(X, y)  # CUDA context, cuBLAS handles, kernels loaded
    out: dict = {"cuda": torch.version.cuda, "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    t0 = time.perf_counter()
    if "large" in parts:
        out["large"] = large(quick, progress)
        shares = [r["busy_share_plain"] for r in out["large"]]
        out["goals"] = [{**GOAL, "measured": ", ".join(f"{100 * s:.0f} %" for s in shares), "met": min(shares) >= 0.8}]
        save(out)
    if "grid" in parts:
        out["grid"] = grid(quick, progress)
        save(out)
    if "draw" in parts:
        out["draw"] = draw(quick, repeats, "cuda", progress)
    out["seconds"] = time.perf_counter() - t0
    return out


def collect(quick: bool = False, repeats: int = 3) -> dict:
    """``run_all``'s entry point: every part, on CUDA (``{"cuda": null}`` without it)."""
    return bench(PARTS, quick, repeats)


def main(argv=None) -> int:
    ap = parser(__doc__, name=__name__, quick="8,000 rows at width 1024", repeats=3)
    ap.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: the draw part alone, on the CPU")
    args = ap.parse_args(argv)
    save = (lambda result: write_json(args.json, result, benchmark=__name__, indent=2)) if args.json else None
    result = bench(args.only, args.quick, args.repeats, save=save, device=args.device)
    if save:
        save(result)
    print(json.dumps(result, indent=2))
    return 0
