"""Each gallery example's CPU and wall time, measured around its run, and the build's limit on them.

sphinx-gallery runs the examples one after the other in the Sphinx process
and calls its ``reset_modules`` hooks before and after each; :func:`record`
is one of them (``docs/conf.py``).  It reads the process's CPU time (every
thread of it, and the children it has waited for) and the wall clock, and
keeps the difference per example in :data:`COSTS`.

The build fails on an example whose CPU time exceeds the limit
(:func:`limit_s`: ``SK_DEQ_EXAMPLE_LIMIT_S`` seconds, 30 by default), not on
its wall time: the wall time of an example grows with whatever else runs on
the machine, its CPU time barely, so a limit on CPU time holds on a shared
CI machine without failing at random, and an example under it runs in less
wall time than that on a quiet one (it keeps at least one core busy).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

try:
    import resource
except ImportError:  # Windows: the children's CPU time is not counted
    resource = None

#: The environment variable holding the largest CPU time, in seconds, an example may take.
LIMIT_ENV = "SK_DEQ_EXAMPLE_LIMIT_S"
#: The limit where the environment variable is not set.
DEFAULT_LIMIT_S = 30.0
#: ``{example: {"cpu_s": ..., "wall_s": ...}}`` of the examples run in this process.
COSTS: dict[str, dict[str, float]] = {}
_STARTED: dict[str, tuple[float, float]] = {}


def _cpu_seconds() -> float:
    """CPU time (user + system) of this process's threads and of the children it waited for."""
    children = 0.0
    if resource is not None:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        children = usage.ru_utime + usage.ru_stime
    return time.process_time() + children


def record(gallery_conf, fname, when):
    """sphinx-gallery's ``reset_modules`` hook: start the clocks before an example, keep its cost after it.

    Parameters
    ----------
    gallery_conf : dict
        sphinx-gallery's configuration (unused).
    fname : str or None
        The example's file name; None when sphinx-gallery enters a folder.
    when : {'before', 'after'}
        Whether the example is about to run or has run.
    """
    if fname is None:
        return
    name = Path(fname).stem
    if when == "before":
        _STARTED[name] = (_cpu_seconds(), time.perf_counter())
    elif name in _STARTED:
        cpu, wall = _STARTED.pop(name)
        COSTS[name] = {"cpu_s": round(_cpu_seconds() - cpu, 2), "wall_s": round(time.perf_counter() - wall, 2)}


def limit_s(environ=os.environ) -> float:
    """The largest CPU time an example may take: ``SK_DEQ_EXAMPLE_LIMIT_S``, or :data:`DEFAULT_LIMIT_S`.

    Parameters
    ----------
    environ : mapping, default=os.environ
        Where to read the variable.

    Returns
    -------
    float
        The limit in seconds.
    """
    text = environ.get(LIMIT_ENV, "").strip()
    if not text:
        return DEFAULT_LIMIT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{LIMIT_ENV} must be a positive number of seconds, got {text!r}")
    return value


def over_limit(costs, limit) -> list[str]:
    """One message per example of ``costs`` whose CPU time exceeds ``limit`` seconds.

    Parameters
    ----------
    costs : dict
        ``{example: {"cpu_s": ..., "wall_s": ...}}``, as :data:`COSTS`.
    limit : float
        The limit in seconds.

    Returns
    -------
    list of str
        The examples over the limit, largest first; empty if none.
    """
    over = sorted((c["cpu_s"], name, c["wall_s"]) for name, c in costs.items() if c["cpu_s"] > limit)
    return [
        f"{name} took {cpu:.1f} s of CPU time ({wall:.1f} s wall), over the {limit:g} s limit ({LIMIT_ENV})"
        for cpu, name, wall in reversed(over)
    ]


def save(costs, path) -> Path:
    """Merge ``costs`` into the JSON file ``path`` (the examples not run in this build keep their last cost).

    Parameters
    ----------
    costs : dict
        ``{example: {"cpu_s": ..., "wall_s": ...}}``, as :data:`COSTS`.
    path : str or Path
        The JSON file.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    saved = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    saved.update(costs)
    path.write_text(json.dumps(dict(sorted(saved.items())), indent=1) + "\n", encoding="utf-8")
    return path


def summary(costs) -> str:
    """The examples of ``costs``, costliest first, one line each.

    Parameters
    ----------
    costs : dict
        ``{example: {"cpu_s": ..., "wall_s": ...}}``, as :data:`COSTS`.

    Returns
    -------
    str
        The lines, with the total CPU time last.
    """
    rows = sorted(costs.items(), key=lambda item: -item[1]["cpu_s"])
    lines = [f"  {name:<34} CPU {c['cpu_s']:6.1f} s   wall {c['wall_s']:6.1f} s" for name, c in rows]
    lines.append(f"  {'all examples':<34} CPU {sum(c['cpu_s'] for _, c in rows):6.1f} s")
    return "\n".join(lines)
