"""The documentation build, end to end: its wall and CPU time and each gallery example's.

Runs the README's docs command, ``python -m sphinx -W -b html docs
docs/_build/html``, from the repository root in a child process, after
removing what a previous build left (the HTML, the generated API pages and
the executed gallery, which sphinx-gallery would otherwise skip), and
records:

* the build's wall time and the CPU time (user + system) of the child and
  of everything it waited for;
* each example's wall time, from the ``sg_execution_times.rst`` that
  sphinx-gallery writes, and its CPU time and wall time from the
  ``example_costs.json`` that ``docs/conf.py`` writes beside the executed
  gallery (:mod:`docs._gallery_cost`).

numba caches its compiled kernels on disk; a fresh checkout (a CI run) has
none, so by default the build gets an empty ``NUMBA_CACHE_DIR`` and
compiles them, as there (``--keep-numba-cache`` uses the usual cache).
``--no-gallery`` builds without running the examples (``-D
plot_gallery=0``): the cost of Sphinx itself (autodoc, autosummary,
numpydoc, viewcode, the theme).

Usage::

    python benchmarks/docs_build.py --json /tmp/docs_build.json
    python benchmarks/docs_build.py --no-gallery --json /tmp/docs_sphinx_only.json

The JSON starts with the provenance of the run (``_harness.provenance``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run as a script: the package benchmarks lies in the repository root
    sys.path.insert(0, str(ROOT))

from benchmarks._harness import provenance, write_json  # noqa: E402

#: The README's docs command, run from the repository root.
COMMAND = [sys.executable, "-m", "sphinx", "-W", "-b", "html", "docs", "docs/_build/html"]
#: What a previous build left in docs/ (removed first, so that every example runs).
BUILD_OUTPUTS = ("_build", "auto_examples", "generated", "gen_modules", "sg_execution_times.rst")

_ROW = re.compile(r"``\.\./examples/(?P<name>[^`]+?)\.py``\)\s*\n\s*- (?P<min>\d+):(?P<sec>\d+(?:\.\d+)?)")


def example_wall_times(text: str) -> dict:
    """``{example: wall seconds}`` of an ``sg_execution_times.rst``."""
    return {m["name"]: 60 * int(m["min"]) + float(m["sec"]) for m in _ROW.finditer(text)}


def clean(docs: Path) -> None:
    """Remove the outputs of a previous build from ``docs``."""
    for name in BUILD_OUTPUTS:
        path = docs / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def run_build(command, env) -> dict:
    """Run ``command`` from the repository root: its return code, wall and CPU seconds, and its output's tail."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {
        "returncode": done.returncode,
        "wall_s": round(wall, 2),
        "cpu_s": round(user + system, 2),
        "user_s": round(user, 2),
        "system_s": round(system, 2),
        "output_tail": (done.stdout + done.stderr)[-4000:],
    }


def examples(docs: Path) -> list[dict]:
    """One record per executed example: wall time from sphinx-gallery, CPU and wall time from ``docs/conf.py``."""
    times = docs / "sg_execution_times.rst"
    walls = example_wall_times(times.read_text(encoding="utf-8")) if times.exists() else {}
    costs_file = docs / "auto_examples" / "example_costs.json"
    costs = json.loads(costs_file.read_text(encoding="utf-8")) if costs_file.exists() else {}
    rows = []
    for name in sorted(set(walls) | set(costs), key=lambda n: -costs.get(n, {}).get("cpu_s", walls.get(n, 0))):
        cost = costs.get(name, {})
        rows.append(
            {"example": name, "sg_wall_s": walls.get(name), "wall_s": cost.get("wall_s"), "cpu_s": cost.get("cpu_s")}
        )
    return rows


def measure(gallery: bool = True, fresh_numba_cache: bool = True) -> dict:
    """Clean, build, and collect the build's and the examples' times."""
    docs = ROOT / "docs"
    clean(docs)
    command = COMMAND + ([] if gallery else ["-D", "plot_gallery=0"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    with tempfile.TemporaryDirectory(prefix="sk_deq_numba_") as cache:
        if fresh_numba_cache:
            env["NUMBA_CACHE_DIR"] = cache
        build = run_build(command, env)
    rows = examples(docs) if gallery else []
    return {
        "config": {
            "command": " ".join(["python", *command[1:]]),
            "gallery": gallery,
            "fresh_numba_cache": fresh_numba_cache,
            "load_average_after": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "build": build,
        "examples": rows,
        "examples_cpu_s": round(sum(r["cpu_s"] or 0 for r in rows), 2),
    }


def report(result: dict) -> str:
    """The build's and the examples' times as text."""
    b = result["build"]
    lines = [
        f"{result['config']['command']}: exit {b['returncode']}, wall {b['wall_s']:.1f} s, "
        f"CPU {b['cpu_s']:.1f} s (user {b['user_s']:.1f}, system {b['system_s']:.1f})"
    ]
    if result["examples"]:
        lines.append(f"{'example':<32} {'CPU s':>7} {'wall s':>7} {'sg wall s':>9}")
        for r in result["examples"]:
            cells = [
                f"{v:>{w}.1f}" if v is not None else f"{'-':>{w}}"
                for v, w in ((r["cpu_s"], 7), (r["wall_s"], 7), (r["sg_wall_s"], 9))
            ]
            lines.append(f"{r['example']:<32} {' '.join(cells)}")
        lines.append(f"{'all examples':<32} {result['examples_cpu_s']:>7.1f}")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write the result (with its provenance) there")
    ap.add_argument("--no-gallery", action="store_true", help="build without running the examples (-D plot_gallery=0)")
    ap.add_argument("--keep-numba-cache", action="store_true", help="use numba's usual on-disk cache, not an empty one")
    args = ap.parse_args(argv)
    result = {
        "provenance": provenance(ROOT, benchmark="docs_build"),
        **measure(not args.no_gallery, not args.keep_numba_cache),
    }
    print(report(result))
    if args.json:
        print(f"wrote {write_json(args.json, result, benchmark='docs_build')}")
    if result["build"]["returncode"] != 0:
        print(result["build"]["output_tail"], file=sys.stderr)
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["build"]["returncode"] == 0 else 1)
