"""The benchmark harness (not package API): timing, the command line, and JSON that says where it came from.

A benchmark is a ``bench_*.py`` module with ``collect(quick=False,
repeats=N, **options) -> dict`` and an entry in ``run_all.REGISTRY``.  Its
``main`` builds its command line with :func:`parser` (``--quick``,
``--repeats``, ``--json PATH`` and its own options), times with
:func:`interleaved` (or :func:`rounds` where one repeat is a whole
measurement, e.g. a fit), and writes with :func:`write_json`, which puts
:func:`provenance` (git commit and whether the tree was clean, UTC time,
machine, GPU, library versions, threads) at the top of every result file.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

__all__ = [
    "Timings",
    "finish",
    "fit_predict",
    "fmt_range",
    "git_state",
    "in_subprocess",
    "interleaved",
    "jsonable",
    "library_version",
    "markdown_rule",
    "parser",
    "provenance",
    "provenance_line",
    "read_json",
    "rounds",
    "text_table",
    "timed",
    "write_json",
]

HERE = Path(__file__).resolve().parent
SCHEMA = "sk_deq.provenance/1"
#: Libraries whose versions every result records (None where not installed).
LIBRARIES = ("numpy", "scipy", "scikit-learn", "torch", "numba", "torchdeq", "mlxtend", "threadpoolctl")


# -------------------------------------------------------------------------------- timing


def timed(fn, *args, sync=None, clock=time.perf_counter, **kwargs):
    """``(fn(*args, **kwargs), seconds)``; ``sync()`` (e.g. a CUDA synchronize) runs before the clock starts and stops."""
    if sync:
        sync()
    t0 = clock()
    out = fn(*args, **kwargs)
    if sync:
        sync()
    return out, clock() - t0


def rounds(names, repeats: int, measure, *, rotate: bool = True, after=None) -> dict:
    """``{name: [measure(name, r) for r in range(repeats)]}``, interleaved: every round measures every name once.

    With ``rotate`` the order turns by one name from one round to the next,
    so that a burst of load on a shared machine does not always hit the same
    contestant.  ``after(r, {name: this round's result})``, if given, runs
    at the end of every round.
    """
    names = list(names)
    out = {name: [] for name in names}
    for r in range(max(int(repeats), 1)):
        k = r % len(names) if rotate and names else 0
        for name in names[k:] + names[:k]:
            out[name].append(measure(name, r))
        if after:
            after(r, {name: out[name][-1] for name in names})
    return out


def fit_predict(est, X_train, y_train, X_test, y_test) -> dict:
    """``est`` fitted and predicting, timed: ``acc``, ``fit_s``, ``predict_s``, ``fit_predict_s`` and ``warnings``.

    ``warnings``: the distinct messages raised (ConvergenceWarning always
    shown), sorted, each cut at 160 characters.
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        _, fit_s = timed(est.fit, X_train, y_train)
        pred, predict_s = timed(est.predict, X_test)
    return {
        "acc": float((pred == y_test).mean()),
        "fit_predict_s": fit_s + predict_s,
        "fit_s": fit_s,
        "predict_s": predict_s,
        "warnings": sorted({str(w.message)[:160] for w in caught}),
    }


@dataclass
class Timings:
    """Seconds of every run, one per repeat, and the outputs :func:`interleaved` was asked to keep."""

    seconds: dict
    outputs: dict = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.seconds[name])

    def best(self, name: str) -> float:
        return min(self.seconds[name])

    @property
    def medians(self) -> dict:
        return {name: self.median(name) for name in self.seconds}


def interleaved(
    runs: dict, repeats: int = 3, *, warmup: int = 1, rotate=False, context=None, sync=None, keep=None, clock=None
) -> Timings:
    """Time the callables of ``runs`` side by side: ``warmup`` untimed rounds, then ``repeats`` timed ones.

    Every round calls every run once (in the order of ``runs``, turned by
    one per round with ``rotate``), so a load burst hits all alike; report
    :attr:`Timings.medians`.  ``context(name)``, if given, is entered around
    each call (thread limits, a patched setting); ``sync`` is passed to
    :func:`timed`; ``keep(name, round)`` says which outputs to keep (the
    others are freed at once, so every call allocates from the same state of
    memory).
    """
    clock = clock or time.perf_counter
    kept = {name: [] for name in runs}

    def once(name, r):
        with context(name) if context else contextlib.nullcontext():
            out, seconds = timed(runs[name], sync=sync, clock=clock)
        if r >= 0 and keep is not None and keep(name, r):
            kept[name].append(out)
        del out
        return seconds

    for _ in range(warmup):
        for name in runs:
            once(name, -1)
    return Timings(rounds(runs, repeats, once, rotate=rotate), {k: v for k, v in kept.items() if v})


def fmt_range(values, spec: str = ".2f") -> str:
    """``median [min-max]`` of ``values`` in format ``spec`` (the value alone when there is one)."""
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:{spec}}"
    return f"{med:{spec}} [{min(values):{spec}}-{max(values):{spec}}]"


def text_table(head, rows, line: str) -> str:
    """The lines ``head``, then ``line.format(**row)`` for every row: a benchmark's printed table."""
    return "\n".join([*head, *(line.format(**row) for row in rows)])


def markdown_rule(head: str) -> str:
    """The rule under a markdown table's header line ``head``, one run of dashes as wide as each cell."""
    return "|" + "|".join("-" * len(c) for c in head.split("|")[1:-1]) + "|"


# -------------------------------------------------------------------------------- command line


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parser(doc: str, *, quick: str, repeats: int | None = 3, json: str | None = None) -> argparse.ArgumentParser:
    """The command line every benchmark shares: ``--quick`` (help ``quick``), ``--repeats N``, ``--json PATH``.

    ``doc`` (the module docstring) is the help text; ``repeats`` and
    ``json`` are the defaults (None: the script decides, e.g. from
    ``--quick``; no JSON file).  The script adds its own options.
    """
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument(
        "--repeats", type=_positive, default=repeats, help=f"interleaved repeats (default {repeats or 'by --quick'})"
    )
    ap.add_argument("--json", default=json, metavar="PATH", help="write the results (with their provenance) there")
    return ap


def in_subprocess(module: str, function: str, *args) -> dict:
    """``module.function(*args)`` (a module of this folder) in a fresh Python; its dict comes back as JSON.

    ``args`` are plain values (strings, numbers, None): their ``repr`` is the
    child's code.
    The process's memory is its own (a peak measured there is the step's),
    and it imports the same sk_deq as this one.  Raises :class:`RuntimeError`
    with the last line of its stderr (the whole of it as ``.stderr``) when
    it fails.
    """
    import sk_deq

    code = f"import json, sys; sys.path.insert(0, {str(HERE)!r}); import {module} as m; "
    code += f"print(json.dumps(m.{function}(*{args!r})))"
    paths = [str(Path(sk_deq.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        error = RuntimeError(lines[-1] if lines else f"exit {done.returncode}")
        error.stderr = done.stderr
        raise error
    return json.loads(done.stdout.strip().splitlines()[-1])


def finish(result, args, table=None):
    """Print ``table(result)`` when given, write ``result`` to ``args.json`` when set; returns ``result``."""
    if table is not None:
        print(table(result))
    if getattr(args, "json", None):
        print(f"results written to {write_json(args.json, result)}")
    return result


# -------------------------------------------------------------------------------- provenance


def _run(cmd, cwd=None) -> str | None:
    """The output of ``cmd``, or None where it cannot run or fails."""
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(repo=None) -> dict:
    """The commit checked out at ``repo`` and whether the tree is clean (``git status --porcelain`` empty).

    Untracked files count: a tree with any change, staged, unstaged or new,
    is dirty.  ``changes`` lists the first 20 lines of the status.  Outside a
    checkout (or without git) every field is None.
    """
    repo = str(repo or HERE)
    commit = (_run(["git", "rev-parse", "HEAD"], repo) or "").strip() or None
    status = _run(["git", "status", "--porcelain"], repo) if commit else None
    lines = status.splitlines() if status is not None else None
    return {
        "commit": commit,
        "clean": None if lines is None else not lines,
        "changes": None if lines is None else lines[:20],
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def _memory_bytes() -> int | None:
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    with contextlib.suppress(AttributeError, ValueError, OSError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return None


def _gpu() -> dict | None:
    """The first CUDA device's name, memory and capability, the device count and the NVIDIA driver; None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    driver = None
    if shutil.which("nvidia-smi"):
        out = (_run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) or "").strip()
        driver = out.splitlines()[0].strip() if out else None
    return {
        "name": torch.cuda.get_device_name(0),
        "memory_bytes": int(props.total_memory),
        "memory_gib": round(props.total_memory / 2**30, 2),
        "capability": f"{props.major}.{props.minor}",
        "count": torch.cuda.device_count(),
        "driver": driver,
    }


def library_version(name: str) -> str | None:
    """The installed version of the distribution ``name``; None where it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _threadpools():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    keep = ("user_api", "internal_api", "num_threads", "version", "threading_layer", "architecture", "prefix")
    return [{k: p.get(k) for k in keep} for p in threadpool_info()]


def provenance(repo=None) -> dict:
    """Where the figures of a result come from: code, time, machine, libraries and threads.

    ``git``: :func:`git_state` of ``repo`` (default: this checkout);
    ``created_utc``: now, ISO 8601 in UTC (a script writes the record with
    its results, ``run_all`` when its run starts); ``command``: ``sys.argv``;
    ``machine``: platform, CPU model (``/proc/cpuinfo``'s 'model name', else
    :func:`platform.processor`), cores and the cores this process may use,
    total memory, and ``gpu`` (None without CUDA; else the device's name,
    memory, capability, count and the NVIDIA driver from ``nvidia-smi``
    where that command exists); ``versions``: Python, :data:`LIBRARIES`,
    torch's CUDA and sk_deq; ``threads``: torch's intra-op threads and the
    BLAS / OpenMP pools (threadpoolctl); ``sk_deq_path``: the package that
    ran (``python benchmarks/x.py`` imports the installed one, which need
    not be this checkout's: ``PYTHONPATH=.`` runs this one) and, where it is
    not this checkout's, ``sk_deq_git``, the :func:`git_state` of its own.
    """
    import torch

    import sk_deq

    memory = _memory_bytes()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    package = Path(sk_deq.__file__).resolve().parent
    record = {
        "schema": SCHEMA,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "git": git_state(repo),
        "machine": {
            "platform": platform.platform(),
            "architecture": platform.machine(),
            "cpu_model": _cpu_model(),
            "cpu_count": os.cpu_count(),
            "cpus_usable": usable,
            "memory_bytes": memory,
            "memory_gib": None if memory is None else round(memory / 2**30, 2),
            "gpu": _gpu(),
        },
        "versions": {
            "python": platform.python_version(),
            **{name: library_version(name) for name in LIBRARIES},
            "torch_cuda": torch.version.cuda,
            "sk_deq": getattr(sk_deq, "__version__", None),
        },
        "threads": {"torch": torch.get_num_threads(), "threadpools": _threadpools()},
        "sk_deq_path": str(package),
    }
    if package.parent != HERE.parent:  # the package of another checkout (or an installed one): its state too
        record["sk_deq_git"] = git_state(package)
    return record


def provenance_line(p: dict) -> str:
    """One line of text of a :func:`provenance` record (for markdown and printed reports)."""
    git, m, v = p.get("git") or {}, p.get("machine") or {}, p.get("versions") or {}
    state = {True: "clean", False: "dirty"}.get(git.get("clean"), "clean or not: unknown")
    gpu = m.get("gpu")
    parts = [
        f"{p.get('created_utc')}; commit {git.get('commit')} ({state})",
        f"{m.get('cpu_model')}, {m.get('cpu_count')} cores ({m.get('cpus_usable')} usable)"
        + (f", {m['memory_gib']} GiB" if m.get("memory_gib") else ""),
        f"GPU {gpu['name']} ({gpu['memory_gib']} GiB, driver {gpu['driver']})" if gpu else "no GPU",
        f"{m.get('platform')}; Python {v.get('python')}",
        ", ".join(f"{k} {val}" for k, val in v.items() if val and k != "python"),
    ]
    if p.get("sk_deq_git"):
        other = p["sk_deq_git"]
        parts.append(f"sk_deq from {p.get('sk_deq_path')} (commit {other.get('commit')}, clean {other.get('clean')})")
    return "; ".join(parts)


# -------------------------------------------------------------------------------- JSON


def jsonable(obj):
    """A JSON-safe copy: NumPy scalars and arrays to Python, NaN and infinities to None, unknown objects to str."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "tolist"):  # numpy scalars and arrays, torch tensors
        return jsonable(obj.tolist())
    return str(obj)


def write_json(path, result: dict, *, indent: int | None = 1) -> Path:
    """Write ``result`` as JSON to ``path`` (folders made), its :func:`provenance` first; returns the path.

    A ``provenance`` the result already holds (a run that rewrites its file
    as it goes) is kept.  Values are made JSON-safe by :func:`jsonable`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"provenance": result.get("provenance") or provenance(), **result}
    path.write_text(json.dumps(jsonable(body), indent=indent) + "\n", encoding="utf-8")
    return path


def read_json(path) -> dict:
    """A result file written by :func:`write_json` (or any JSON file)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))
