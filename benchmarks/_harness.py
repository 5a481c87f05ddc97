"""The benchmark harness (not package API): timing, the command line, and JSON that says where it came from.

A benchmark is a module of one of the groups (``kernels``, ``networks``,
``gpu``, ``scale``, ``peers``; see ``benchmarks/README.md``) with
``collect(quick=False, repeats=N, **options) -> dict`` and an entry in
``run_all.REGISTRY``.  Its ``main`` builds its command line with
:func:`parser` (``--quick``, ``--repeats``, ``--json PATH`` and its own
options), times with :func:`interleaved` (or :func:`rounds` where one repeat
is a whole measurement, e.g. a fit), and writes with :func:`write_json`,
which puts :func:`provenance` (the benchmark that wrote the file, the exact
command line, git commit and whether the tree was clean, UTC time, machine,
GPU, library versions, threads) at the top of every result file.  A group's
``python -m benchmarks.GROUP MEMBER [options]`` runs one of its modules
(:func:`run_member`).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sk_deq.experiments._provenance import LIBRARIES, SCHEMA, git_state, library_version, provenance_line
from sk_deq.experiments._provenance import provenance as package_provenance

__all__ = [
    "LIBRARIES",
    "SCHEMA",
    "Timings",
    "benchmark_name",
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
    "positive_int",
    "provenance",
    "provenance_line",
    "read_json",
    "rounds",
    "run_member",
    "text_table",
    "timed",
    "write_json",
]

HERE = Path(__file__).resolve().parent
#: The repository root: ``benchmarks`` is a package there (``python -m benchmarks.kernels ...`` from it).
ROOT = HERE.parent


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


def positive_int(text: str) -> int:
    """``text`` as an integer of at least 1 (an argument type: else an ``ArgumentTypeError``)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def benchmark_name(module: str) -> str:
    """The name a result file gives its writer: the module's path in ``benchmarks`` (``"kernels.cores"``)."""
    return module.removeprefix("benchmarks.")


def parser(
    doc: str, *, name: str, quick: str, repeats: int | None = 3, json: str | None = None
) -> argparse.ArgumentParser:
    """The command line every benchmark shares: ``--quick`` (help ``quick``), ``--repeats N``, ``--json PATH``.

    ``doc`` (the module docstring) is the help text; ``name`` the module
    (``__name__``): the program name in the help and, as
    :func:`benchmark_name`, the ``benchmark`` that :func:`finish` records in
    the file's provenance.  ``repeats`` and ``json`` are the defaults (None:
    the script decides, e.g. from ``--quick``; no JSON file).  The script
    adds its own options.
    """
    benchmark = benchmark_name(name)
    group, _, member = benchmark.rpartition(".")
    prog = f"python -m benchmarks.{group} {member}" if group else f"python benchmarks/{member}.py"
    ap = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.set_defaults(benchmark=benchmark)
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument(
        "--repeats", type=positive_int, default=repeats, help=f"interleaved repeats (default {repeats or 'by --quick'})"
    )
    ap.add_argument("--json", default=json, metavar="PATH", help="write the results (with their provenance) there")
    return ap


def _summary(module: str) -> str:
    """The first line of ``module``'s docstring: the module's when imported, else read from its source."""
    if module in sys.modules:
        doc = sys.modules[module].__doc__
    else:
        spec = importlib.util.find_spec(module)
        source = Path(spec.origin).read_text(encoding="utf-8") if spec and spec.origin else ""
        doc = ast.get_docstring(ast.parse(source))
    return (doc or "").split("\n", 1)[0]


def run_member(group: str, members: Sequence[str], doc: str, argv=None) -> int:
    """``python -m GROUP MEMBER [options]``: the ``main(options)`` of the module ``GROUP.MEMBER``.

    ``-h`` / ``--help`` prints ``doc`` and the members, each with the first
    line of its docstring; ``MEMBER --help`` is the member's own help; no
    member or an unknown one is an argument error (exit status 2).  Returns
    the exit status: the member's when it returns an int, else 0.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    lines = [f"  {m:<15} {_summary(f'{group}.{m}')}" for m in members]
    ap = argparse.ArgumentParser(
        prog=f"python -m {group}",
        usage=f"python -m {group} {{{','.join(members)}}} [options]",
        description=f"{doc}\nmembers (MEMBER --help lists its options):\n" + "\n".join(lines),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("member", choices=members, metavar="MEMBER", help="the benchmark to run: one of the members")
    args = ap.parse_args(argv[:1])
    out = importlib.import_module(f"{group}.{args.member}").main(argv[1:])
    return out if isinstance(out, int) else 0


def in_subprocess(module: str, function: str, *args) -> dict:
    """``module.function(*args)`` (``module`` of this package, e.g. ``__name__``) in a fresh Python; its dict as JSON.

    ``args`` are plain values (strings, numbers, None): their ``repr`` is the
    child's code.
    The process's memory is its own (a peak measured there is the step's),
    and it imports the same sk_deq as this one.  Raises :class:`RuntimeError`
    with the last line of its stderr (the whole of it as ``.stderr``) when
    it fails.
    """
    import sk_deq

    code = f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); import {module} as m; "
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
    """Print ``table(result)`` when given, write ``result`` to ``args.json`` when set; returns ``result``.

    The file's provenance names ``args.benchmark`` (set by :func:`parser`).
    """
    if table is not None:
        print(table(result))
    if getattr(args, "json", None):
        print(f"results written to {write_json(args.json, result, benchmark=args.benchmark)}")
    return result


# -------------------------------------------------------------------------------- provenance
# The record is the package's (sk_deq.experiments._provenance), which the experiments write too; a
# benchmark's names its writer, the exact command line and the state of the checkout the benchmarks ran from.


def provenance(repo=None, *, benchmark: str | None = None) -> dict:
    """Where the figures of a benchmark's result come from: writer, command, code, time, machine, libraries, threads.

    The record of :func:`sk_deq.experiments._provenance.provenance` (schema
    :data:`SCHEMA`), with ``benchmark``: the benchmark that writes the
    result (its module in ``benchmarks``, e.g. ``"kernels.cores"``, or
    ``"run_all"``); ``command``: the exact command line of the process
    (``sys.orig_argv``, the interpreter and ``-m`` included, quoted for a
    POSIX shell); ``git``: :func:`git_state` of ``repo`` (default: this
    checkout); ``created_utc``: now (a script writes the record with its
    results, ``run_all`` when its run starts); ``sk_deq_path``: the package
    that ran (``python -m benchmarks...`` from the repository root and
    ``python benchmarks/run_all.py`` import this checkout's; another one
    earlier on ``sys.path`` would win) and, where it is not this
    checkout's, ``sk_deq_git``, the :func:`git_state` of its own.
    """
    import torch  # noqa: F401  (loaded first: the record names torch's threads and CUDA where torch is loaded)

    import sk_deq

    record = package_provenance(benchmark=benchmark, command=shlex.join(sys.orig_argv))
    record["git"] = git_state(repo or HERE)
    package = Path(sk_deq.__file__).resolve().parent
    if package.parent != HERE.parent:  # the package of another checkout (or an installed one): its state too
        record["sk_deq_git"] = git_state(package)
    return record


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


def write_json(path, result: dict, *, benchmark: str, indent: int | None = 1) -> Path:
    """Write ``result`` as JSON to ``path`` (folders made), its :func:`provenance` first; returns the path.

    ``benchmark`` names the writer in the provenance (:func:`benchmark_name`
    of its module).  A ``provenance`` the result already holds (a run that
    rewrites its file as it goes) is kept.  Values are made JSON-safe by
    :func:`jsonable`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"provenance": result.get("provenance") or provenance(benchmark=benchmark_name(benchmark)), **result}
    path.write_text(json.dumps(jsonable(body), indent=indent) + "\n", encoding="utf-8")
    return path


def read_json(path) -> dict:
    """A result file written by :func:`write_json` (or any JSON file)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))
