"""Where an experiment's figures come from: :func:`provenance`.

One record (schema ``sk_deq.provenance/1``) for every results file the
package's experiments and the repository's benchmarks write: the command,
the time, the git commit of the code that ran (where it runs from a
checkout), the machine, the library versions and the thread pools.  The
documentation renders a figure only from a file that carries it.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

__all__ = ["LIBRARIES", "SCHEMA", "git_state", "library_version", "provenance", "provenance_line"]

SCHEMA = "sk_deq.provenance/1"
#: the libraries whose versions a record names (besides Python, torch's CUDA and sk_deq)
LIBRARIES = ("numpy", "scipy", "scikit-learn", "torch", "numba", "torchdeq", "mlxtend", "threadpoolctl")


def _run(cmd, cwd=None) -> str | None:
    """The output of ``cmd``, or None where it cannot run or fails."""
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(repo) -> dict:
    """The commit checked out at ``repo`` and whether the tree is clean (``git status --porcelain`` empty).

    Untracked files count: a tree with any change, staged, unstaged or new,
    is dirty.  ``changes`` lists the first 20 lines of the status.  Outside a
    checkout (or without git) every field is None.
    """
    commit = (_run(["git", "rev-parse", "HEAD"], str(repo)) or "").strip() or None
    status = _run(["git", "status", "--porcelain"], str(repo)) if commit else None
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
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():  # an experiment without torch ran on no GPU
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
    from threadpoolctl import threadpool_info

    keep = ("user_api", "internal_api", "num_threads", "version", "threading_layer", "architecture", "prefix")
    return [{k: p.get(k) for k in keep} for p in threadpool_info()]


def _command() -> str:
    """The command line of this process, a console script by its name (``sk-deq compare ...``)."""
    argv = list(sys.argv) or [""]
    name = Path(argv[0]).name
    head = name if name and not name.endswith(".py") and name not in ("-c", "-m") else argv[0]
    return " ".join([head, *argv[1:]]).strip()


def provenance(*, benchmark: str | None = None, command: str | None = None) -> dict:
    """The provenance record of a results file written now.

    Parameters
    ----------
    benchmark : str, optional
        The benchmark or experiment that writes the file (``'sk-deq compare'``, ``'kernels.cores'``).
    command : str, optional
        The command line; this process's by default.

    Returns
    -------
    dict
        ``schema``, ``benchmark``, ``created_utc`` (ISO 8601, UTC), ``command``,
        ``git`` (:func:`git_state` of the checkout the package runs from; every
        field None for an installed package), ``machine`` (platform, CPU
        model, cores and the cores this process may use, memory, ``gpu``),
        ``versions`` (Python, :data:`LIBRARIES`, torch's CUDA, sk_deq) and
        ``threads`` (torch's intra-op threads where torch is loaded, the BLAS
        and OpenMP pools).
    """
    from .. import __version__

    memory = _memory_bytes()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    package = Path(__file__).resolve().parents[1]  # the sk_deq package that runs
    torch = sys.modules.get("torch")
    return {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command if command is not None else _command(),
        "git": git_state(package.parent),
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
            "torch_cuda": getattr(getattr(torch, "version", None), "cuda", None),
            "sk_deq": __version__,
        },
        "threads": {"torch": torch.get_num_threads() if torch else None, "threadpools": _threadpools()},
        "sk_deq_path": str(package),
    }


def provenance_line(p: dict) -> str:
    """One line of text of a :func:`provenance` record (for markdown and printed reports).

    Parameters
    ----------
    p : dict
        A record of :func:`provenance`.

    Returns
    -------
    str
        Time, commit, machine, platform and versions, separated by semicolons.
    """
    git, m, v = p.get("git") or {}, p.get("machine") or {}, p.get("versions") or {}
    clean = git.get("clean")
    state = "clean" if clean is True else "dirty" if clean is False else "clean or not: unknown"
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
