"""Run every benchmark in one process and write one JSON file and one markdown file of tables.

Usage::

    python benchmarks/run_all.py                       # everything, full sizes, 3 repeats (hours on 2 cores)
    python benchmarks/run_all.py --quick               # small sizes (minutes)
    python benchmarks/run_all.py --only peers forward --repeats 5
    python benchmarks/run_all.py --out /tmp/bench      # where the files go
    python benchmarks/run_all.py --quick --json /tmp/q.json   # this JSON file, the markdown beside it
    python benchmarks/run_all.py --from-json benchmarks/results/run_all.json   # rewrite the markdown only

(``python -m benchmarks.run_all`` from the repository root is the same.)
Every benchmark module of the registry (:data:`REGISTRY`; the modules of the
groups ``benchmarks/kernels``, ``networks``, ``gpu``, ``scale`` and ``peers``)
offers ``collect(quick=False, repeats=3) -> dict``; this script imports each, calls
it and stores what it returns.  A benchmark that cannot be imported or has no
``collect`` is recorded as ``not available``; one that raises is recorded
with its error and traceback, and the others still run.  The JSON is
rewritten after every benchmark, so an interrupted run keeps what finished.

Output: ``<out>/run_all.json`` (``run_all_quick.json`` with ``--quick``),
default ``benchmarks/results/``, with

``provenance``
    Where the figures come from (``_harness.provenance``, taken when the
    run starts): the writer (``"run_all"``), the command line, the git commit and whether the tree was clean, the time
    (UTC), the machine (CPU model, cores, memory, GPU and driver), the
    library versions, torch's thread count and the BLAS and OpenMP pools.
``schema``
    ``"sk_deq.run_all/2"`` (``/1`` had a flat ``machine`` instead of the
    provenance; :func:`markdown` reads both).
``quick``, ``repeats``, ``started``, ``finished``, ``wall_s``
    How the run was made, and its wall time.
``benchmarks``
    ``{name: {"module", "status" ('ok', 'error' or 'not available'),
    "seconds", "torch_threads", "error", "traceback", "result"}}``; the
    ``result`` is the benchmark's own dict: by convention ``config`` (its
    settings), ``records`` (a list of flat dicts, one table row each: medians
    over the repeats where times are involved), optionally ``goals`` and
    ``extra_tables`` (names of further lists of flat dicts to print), and
    whatever raw data it keeps.
``goals``
    The targets of the project (:data:`GOALS`), each with the measured
    figure, whether it is met, and the benchmark it comes from.

and ``run_all.md`` (``run_all_quick.md``) built from the JSON by
:func:`markdown`: the provenance, the goals table, then one table per
benchmark.  ``markdown(json.load(...))`` regenerates it from a saved JSON
(``--from-json``), e.g. for the README's tables.

Torch's thread count is restored after every benchmark (some set their own,
as on their command line); each benchmark records the count it ran with.
"""

from __future__ import annotations

import datetime
import importlib
import math
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run as a script: the package benchmarks lies in the repository root
    sys.path.insert(0, str(HERE.parent))

from benchmarks._harness import jsonable, parser, provenance, provenance_line, read_json, write_json  # noqa: E402

SCHEMA = "sk_deq.run_all/2"
clean = jsonable  # the name this module's callers know


class NotAvailable(Exception):
    """The benchmark cannot run here (module or entry point missing, or it returns no records)."""


@dataclass(frozen=True)
class Benchmark:
    """A registry entry: the module, its entry point, and an optional adapter.

    Without an adapter the entry point is called as ``entry(quick=...,
    repeats=...)``; with one, as ``adapter(entry, quick, repeats)``.
    """

    module: str
    entry: str = "collect"
    adapter: object = None
    description: str = ""


def kernel_goals(records) -> list[dict]:
    """The kernel-speed goals from ``kernels.exact.bench_speed`` records: relu <= 1.5x GEMM, the smooth ones <= 3x.

    Records of the largest ``n``: those on all cores (``n_jobs`` -1) when
    there are any, the goals' figure, with the serial ones (``n_jobs`` 1)
    reported beside; else the serial ones.  Several records of one
    activation (e.g. one per repeat) count by their median ratio.
    """
    rows = [r for r in records if r.get("n_jobs", 1) in (1, -1, None) and r.get("ratio") is not None]
    if not rows:
        return []
    n = max(r.get("n", 0) for r in rows)

    def ratios(jobs) -> dict[str, float]:
        by_act: dict[str, list[float]] = {}
        for r in rows:
            if r.get("n", 0) == n and r.get("n_jobs", 1) in jobs:
                values = r["ratio"] if isinstance(r["ratio"], (list, tuple)) else [r["ratio"]]
                by_act.setdefault(r["activation"], []).extend(float(v) for v in values)
        return {a: statistics.median(v) for a, v in by_act.items()}

    both, serial = ratios((-1,)), ratios((1, None))
    ratio, where = (both, "all cores") if both else (serial, "serial")
    aside = serial if both else {}

    def also(a) -> str:
        return f" (serial {aside[a]:.2f}x)" if a in aside else ""

    goals = []
    if "relu" in ratio:
        goals.append(
            {
                "id": "kernel_relu",
                "goal": f"exact ReLU kernel time / GEMM time (n={n}, {where})",
                "target": "<= 1.5x",
                "measured": f"{ratio['relu']:.2f}x" + also("relu"),
                "met": ratio["relu"] <= 1.5,
            }
        )
    smooth = {a: r for a, r in ratio.items() if a != "relu"}
    if smooth:
        worst = max(smooth, key=smooth.get)
        goals.append(
            {
                "id": "kernel_smooth",
                "goal": f"exact smooth kernels time / GEMM time (n={n}, {where}; worst of {', '.join(sorted(smooth))})",
                "target": "<= 3x",
                "measured": f"{smooth[worst]:.2f}x ({worst}); "
                + ", ".join(f"{a} {smooth[a]:.2f}x{also(a)}" for a in sorted(smooth, key=smooth.get)),
                "met": smooth[worst] <= 3.0,
            }
        )
    return goals


#: The benchmarks, in the order they run: every module of the groups that has a ``collect``, each by it.
REGISTRY: dict[str, Benchmark] = {
    "peers": Benchmark(
        "benchmarks.peers.classifiers", description="DEQ vs matched, TorchDEQ solvers, per-sample loop, MLP"
    ),
    "forward": Benchmark("benchmarks.networks.forward", description="DEQ forward GFLOP/s vs float32 GEMM"),
    "kernels": Benchmark("benchmarks.kernels.exact", description="exact implicit kernels vs GEMM"),
    "kernel_cores": Benchmark("benchmarks.kernels.cores", description="the exact kernel on one core and on all"),
    "kernel_user_call": Benchmark(
        "benchmarks.kernels.user_call", description="fit(X).transform(X) on one core and on all"
    ),
    "readout": Benchmark("benchmarks.networks.readout", description="readout solver speed"),
    "kernel_bias": Benchmark(
        "benchmarks.kernels.bias", description="kernel machines with and without the readout bias"
    ),
    "torch_engine": Benchmark("benchmarks.kernels.torch_engine", description="torch kernel engine"),
    "equivalence": Benchmark("benchmarks.networks.equivalence", description="DEQ vs matched vs unmatched over widths"),
    "partial_fit": Benchmark("benchmarks.networks.partial_fit", description="partial_fit vs fit"),
    "early_stopping": Benchmark("benchmarks.networks.early_stopping", description="cost of early stopping"),
    "blocks": Benchmark(
        "benchmarks.networks.blocks",
        "collect_all",
        description="predict throughput and latency, a fit's features, against the row block",
    ),
    "weight_draws": Benchmark(
        "benchmarks.networks.weight_draws", description="weight draws: one torch stream vs numpy streams"
    ),
    "busy_core": Benchmark(
        "benchmarks.networks.busy_core", description="torch's threads with another process on one core"
    ),
    "nystroem": Benchmark("benchmarks.kernels.nystroem", description="Nystroem features of the implicit kernel"),
    "large_fit": Benchmark("benchmarks.scale.large_fit", description="fit at large n: time and memory"),
    "scale": Benchmark("benchmarks.scale.sizes", description="time and memory against n"),
    "regression": Benchmark(
        "benchmarks.peers.regressors", description="regressors vs kernel ridge and MLP, nested 5-fold CV"
    ),
    "gpu": Benchmark(
        "benchmarks.gpu.fit", description="a fit on CUDA: host and device time per phase, syncs, speed-up"
    ),
    "gpu_load": Benchmark(
        "benchmarks.gpu.load", description="GPU busy share at scale, in a grid search; weights drawn ahead"
    ),
    "gpu_krr": Benchmark("benchmarks.gpu.krr", description="exact kernel ridge on all of Fashion-MNIST on a GPU"),
    "krr_dask": Benchmark(
        "benchmarks.kernels.ridge_dask", description="exact kernel ridge on a local Dask cluster of two workers"
    ),
}

#: The project's targets: ``id`` is matched with the ``goals`` the benchmarks return (first provider wins).
GOALS = [
    {"id": key, "goal": goal, "target": target, "from": list(sources)}
    for key, goal, target, sources in (
        ("readout_ratio_1024", "fit+predict time DEQ / matched, width 1024", ">= 3x", ("peers", "readout")),
        ("readout_ratio_4096", "fit+predict time DEQ / matched, width 4096", ">= 5x", ("peers", "readout")),
        ("readout_accuracy_1024", "accuracy matched vs DEQ, width 1024", "within 1 pt", ("peers", "readout")),
        ("readout_accuracy_4096", "accuracy matched vs DEQ, width 4096", "within 1 pt", ("peers", "readout")),
        ("kernel_smooth", "exact smooth kernels / GEMM (n=3000, all cores)", "<= 3x", ("kernels",)),
        ("kernel_relu", "exact ReLU kernel / GEMM (n=3000, all cores)", "<= 1.5x", ("kernels",)),
        (
            "kernel_cores_user_call",
            "fit(X).transform(X): all cores / one (n=2000, 4000)",
            ">= 1.6x",
            ("kernel_user_call",),
        ),
        ("fit_features_gemm", "a fit's training features / their float32 GEMMs (width 1024)", "<= 1.15x", ("blocks",)),
        ("forward_gemm", "DEQ forward / float32 GEMM throughput (n=4000, m=1024)", ">= 90 %", ("forward",)),
        ("torch_engine_agreement", "torch kernel engine agrees with the NumPy engine", "<= 1e-10", ("torch_engine",)),
        ("gpu_busy_share", "GPU busy share of a fit with at least 1 s of GPU work", ">= 80 %", ("gpu_load", "gpu")),
    )
]


# -------------------------------------------------------------------------------- running


def resolve(name: str, registry=None):
    """The callable ``f(quick, repeats) -> dict`` of a benchmark; raises :class:`NotAvailable`."""
    spec = (registry or REGISTRY)[name]
    try:
        entry = getattr(importlib.import_module(spec.module), spec.entry)
    except (ImportError, AttributeError) as exc:
        raise NotAvailable(f"{type(exc).__name__}: {exc}") from exc
    if spec.adapter is not None:
        return lambda quick, repeats: spec.adapter(entry, quick, repeats)
    return lambda quick, repeats: entry(quick=quick, repeats=repeats)


def run_benchmark(name: str, quick: bool, repeats: int, registry=None) -> dict:
    """Run one benchmark; returns its entry of the JSON (status, seconds, error, result)."""
    import torch

    spec = (registry or REGISTRY)[name]
    entry = {"module": spec.module, "status": "ok", "seconds": None, "error": None, "traceback": None, "result": None}
    threads = torch.get_num_threads()
    t0 = time.perf_counter()
    try:
        fn = resolve(name, registry)
        entry["result"] = clean(fn(quick, repeats))
    except NotAvailable as exc:
        entry["status"], entry["error"] = "not available", str(exc)
    except Exception as exc:  # recorded; the other benchmarks still run
        entry["status"], entry["error"] = "error", f"{type(exc).__name__}: {exc}"
        entry["traceback"] = traceback.format_exc()
    finally:
        entry["torch_threads"] = threads  # at the start; a benchmark may set its own (see its config)
        torch.set_num_threads(threads)
    entry["seconds"] = time.perf_counter() - t0
    return entry


def _derived_goals(name: str, result) -> list[dict]:
    """Goals a benchmark did not state itself: the kernels' speed, the torch engine's agreement (largest difference)."""
    if name == "kernels" and isinstance(result, dict):
        return kernel_goals(result.get("records") or [])
    if name != "torch_engine" or not isinstance(result, (dict, list)):
        return []
    found = []

    def walk(obj, key=""):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, str(k))
        elif isinstance(obj, list):
            for v in obj:
                walk(v, key)
        elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
            low = key.lower()
            if any(w in low for w in ("diff", "err", "agree", "deviation")):
                found.append((abs(float(obj)), key))

    walk(result.get("records", result) if isinstance(result, dict) else result)
    if not found:
        return []
    worst, key = max(found)
    return [
        {
            "id": "torch_engine_agreement",
            "goal": "torch kernel engine agrees with the NumPy engine",
            "target": "<= 1e-10",
            "measured": f"{worst:.2e} (largest '{key}')",
            "met": worst <= 1e-10,
        }
    ]


def goals_table(benchmarks: dict) -> list[dict]:
    """The project's goals (:data:`GOALS`) filled in from the benchmarks' results, then any other goals they state."""
    provided: dict[str, tuple[str, dict]] = {}
    for name, entry in benchmarks.items():
        result = entry.get("result")
        if entry.get("status") != "ok" or not isinstance(result, dict):
            continue
        goals = list(result.get("goals") or [])
        ids = {g.get("id") for g in goals}
        goals += [g for g in _derived_goals(name, result) if g["id"] not in ids]
        for g in goals:
            provided.setdefault(g.get("id") or g.get("goal"), (name, g))
    rows, used = [], set()
    for goal in GOALS:
        row = {
            "id": goal["id"],
            "goal": goal["goal"],
            "target": goal["target"],
            "benchmark": None,
            "measured": None,
            "met": None,
            "note": None,
        }
        for source in goal["from"]:
            if goal["id"] in provided and provided[goal["id"]][0] == source:
                name, g = provided[goal["id"]]
                row.update(
                    benchmark=name,
                    measured=g.get("measured"),
                    met=g.get("met"),
                    goal=g.get("goal", goal["goal"]),
                    note=g.get("note"),
                )
                used.add(goal["id"])
                break
        else:
            states = [f"{s}: {benchmarks[s]['status']}" for s in goal["from"] if s in benchmarks]
            row["note"] = "not measured in this run (" + ("; ".join(states) if states else "not run") + ")"
        rows.append(row)
    for key, (name, g) in provided.items():
        if key not in used:
            rows.append(
                {
                    "id": key,
                    "goal": g.get("goal", key),
                    "target": g.get("target"),
                    "benchmark": name,
                    "measured": g.get("measured"),
                    "met": g.get("met"),
                    "note": g.get("note"),
                }
            )
    return rows


def run_all(names=None, quick=False, repeats=3, out=None, registry=None, progress=print, json_path=None) -> dict:
    """Run the benchmarks ``names`` (all by default) and return the results; with ``out``, write JSON and markdown.

    The files are ``<out>/run_all[_quick].json`` and ``.md``, or ``json_path``
    and the markdown beside it.  The JSON is rewritten after every benchmark.
    """
    registry = registry or REGISTRY
    names = list(names or registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; choose from {list(registry)}")
    t0 = time.perf_counter()
    results = {
        "schema": SCHEMA,
        "provenance": provenance(benchmark="run_all"),
        "quick": bool(quick),
        "repeats": int(repeats),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "finished": None,
        "wall_s": None,
        "benchmarks": {},
        "goals": [],
    }
    if json_path is None and out is not None:
        json_path = Path(out) / ("run_all_quick.json" if quick else "run_all.json")
    for i, name in enumerate(names, 1):
        progress(f"[{i}/{len(names)}] {name} ({registry[name].module}) ...", flush=True)
        entry = run_benchmark(name, quick, repeats, registry)
        results["benchmarks"][name] = entry
        results["goals"] = goals_table(results["benchmarks"])
        results["wall_s"] = time.perf_counter() - t0
        msg = f"[{i}/{len(names)}] {name}: {entry['status']} in {entry['seconds']:.1f} s"
        progress(msg + (f" ({entry['error']})" if entry["error"] else ""), flush=True)
        if json_path:
            write_json(json_path, results, benchmark="run_all")
    results["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    results["wall_s"] = time.perf_counter() - t0
    if json_path:
        write_json(json_path, results, benchmark="run_all")
        Path(json_path).with_suffix(".md").write_text(markdown(results))
        progress(f"wrote {json_path} and {Path(json_path).with_suffix('.md')}", flush=True)
    return results


# -------------------------------------------------------------------------------- markdown


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return ""
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
            return f"{v:.3g}"
        return f"{v:.4g}" if abs(v) < 100 else f"{v:.1f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _scalar(v) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def table(rows) -> str:
    """A markdown table of a list of flat dicts (columns: the scalar keys, in order of appearance)."""
    rows = [r for r in rows if isinstance(r, dict)]
    cols: list[str] = []
    for r in rows:
        cols += [k for k, v in r.items() if k not in cols and _scalar(v)]
    if not rows or not cols:
        return "(no rows)\n"
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _config_line(config) -> str:
    if not isinstance(config, dict):
        return ""
    parts = []
    for k, v in config.items():
        if _scalar(v):
            parts.append(f"{k}={_fmt(v)}")
        elif isinstance(v, list) and all(_scalar(x) for x in v):
            parts.append(f"{k}=[{', '.join(_fmt(x) for x in v)}]")
        elif isinstance(v, dict) and all(_scalar(x) for x in v.values()):
            parts.append(f"{k}=({', '.join(f'{a}={_fmt(b)}' for a, b in v.items())})")
    return "; ".join(parts)


def _result_tables(result) -> list[tuple[str, list]]:
    """The tables of one benchmark's result: ``records`` and its ``extra_tables``, else what looks like rows."""
    if isinstance(result, list):
        return [("", result)]
    if not isinstance(result, dict):
        return []
    if "records" in result:
        out = [("", result["records"])]
        out += [(k, result[k]) for k in result.get("extra_tables", []) if isinstance(result.get(k), list)]
        return out
    out = [(k, v) for k, v in result.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)]
    scalars = {k: v for k, v in result.items() if _scalar(v)}
    if scalars:
        out.append(("values", [{"key": k, "value": v} for k, v in scalars.items()]))
    return out


def _provenance(results: dict) -> dict:
    """The results' provenance; that of a file of schema 1 (a flat ``machine``) in today's shape."""
    if "provenance" in results:
        return results["provenance"]
    m = results.get("machine") or {}
    return {
        "created_utc": results.get("started"),
        "git": {"commit": m.get("git_commit"), "clean": None},
        "machine": {k: m.get(k) for k in ("platform", "cpu_model", "cpu_count", "cpus_usable")},
        "versions": {"python": m.get("python"), **(m.get("versions") or {})},
        "threads": {"torch": m.get("torch_threads"), "threadpools": m.get("threadpools")},
    }


def markdown(results: dict) -> str:
    """The markdown report of a ``run_all`` JSON: provenance, goals table, one table per benchmark."""
    p = _provenance(results)
    threads = p.get("threads") or {}
    blas = "; ".join(
        f"{t.get('internal_api')} {t.get('version') or ''} ({t.get('num_threads')} threads)".replace("  ", " ")
        for t in (threads.get("threadpools") or [])
    )
    mode = "quick" if results.get("quick") else "full"
    lines = [
        f"# sk_deq benchmarks ({mode}, {results.get('repeats')} repeats)",
        "",
        f"Run {results.get('started')} ({_fmt(results.get('wall_s'))} s wall).",
        "",
        f"Provenance: {provenance_line(p)}.",
        "",
        f"Torch threads {threads.get('torch')}; thread pools: {blas or 'unknown'}.",
        "",
        "## Goals",
        "",
    ]
    goal_rows = [
        {
            "goal": g.get("goal"),
            "target": g.get("target"),
            "measured": g.get("measured") if g.get("measured") is not None else g.get("note"),
            "met": {True: "met", False: "not met"}.get(g.get("met"), "—"),
            "benchmark": g.get("benchmark"),
        }
        for g in results.get("goals", [])
    ]
    lines.append(table(goal_rows))
    for name, entry in results.get("benchmarks", {}).items():
        lines += [f"## {name}", ""]
        status = entry.get("status")
        lines.append(
            f"`{entry.get('module')}`: {status}, {_fmt(entry.get('seconds'))} s (torch threads at the start: "
            f"{entry.get('torch_threads')})."
        )
        lines.append("")
        if status != "ok":
            lines += [f"Error: {entry.get('error')}", ""]
            continue
        result = entry.get("result")
        config = _config_line(result.get("config")) if isinstance(result, dict) else ""
        if config:
            lines += [f"Settings: {config}.", ""]
        for title, rows in _result_tables(result):
            if title:
                lines += [f"{title}:", ""]
            lines.append(table(rows))
    return "\n".join(lines).rstrip() + "\n"


# -------------------------------------------------------------------------------- command line


def main(argv=None) -> int:
    ap = parser(__doc__, name="run_all", quick="small sizes", repeats=3)
    ap.add_argument(
        "--only",
        nargs="+",
        choices=list(REGISTRY),
        metavar="NAME",
        help=f"benchmarks to run, of: {', '.join(REGISTRY)}",
    )
    ap.add_argument("--out", default=str(HERE / "results"), help="folder of the JSON and markdown files")
    ap.add_argument("--from-json", default=None, help="only write the markdown of this JSON (next to it)")
    args = ap.parse_args(argv)
    if args.from_json:
        dst = Path(args.from_json).with_suffix(".md")
        dst.write_text(markdown(read_json(args.from_json)))
        print(f"wrote {dst}")
        return 0
    results = run_all(args.only, quick=args.quick, repeats=args.repeats, out=args.out, json_path=args.json)
    bad = [n for n, e in results["benchmarks"].items() if e["status"] != "ok"]
    print(f"done in {results['wall_s']:.0f} s; " + (f"not ok: {', '.join(bad)}" if bad else "all ok"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
