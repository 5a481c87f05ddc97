"""Results files and where their figures come from.

A results file is a JSON file under ``benchmarks/results/``.  Its provenance
(commit, date, machine, command, and the benchmark that wrote it) is read
from the file's own ``provenance`` record (schema ``sk_deq.provenance/1``,
written by ``benchmarks/_harness.py``) or, for a file whose writer recorded
none, from a ``<stem>.provenance.json`` beside it that holds the same fields.
A file with neither cannot be rendered.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "benchmarks" / "results"

__all__ = ["RESULTS", "ROOT", "FigureError", "Provenance", "Result", "load", "lookup"]


class FigureError(ValueError):
    """A figure that cannot be rendered: a missing file, path or provenance."""


@dataclass(frozen=True)
class Provenance:
    """Where a results file's figures come from."""

    file: str  # path relative to the repository root
    commit: str  # short hash
    date: str  # YYYY-MM-DD (UTC)
    machine: str  # in words
    command: str
    benchmark: str | None = None

    def line(self) -> str:
        """One line for a caption: file, commit, date, machine and command."""
        by = f", written by {self.benchmark}" if self.benchmark else ""
        return f"{self.file}: commit {self.commit}, {self.date}, {self.machine}{by}; command: {self.command}"


@dataclass(frozen=True)
class Result:
    """A results file's data and provenance."""

    data: object
    provenance: Provenance


def _machine_words(m) -> str:
    """A machine record of ``provenance`` in words ("2 cores of an Intel Xeon, 23.5 GiB"; a GPU's name first)."""
    if isinstance(m, str):
        return m
    model = re.sub(r"\((R|TM)\)|\bProcessor\b|\bCPU\b|@.*$", "", str(m.get("cpu_model") or "CPU")).strip()
    model = re.sub(r"\s+", " ", model)
    cores = m.get("cpus_usable") or m.get("cpu_count")
    text = f"{cores} cores of {'an' if model[:1] in 'AEIOU' else 'a'} {model}"
    if m.get("memory_gib"):
        text += f", {m['memory_gib']:.0f} GiB"
    gpu = m.get("gpu")
    if gpu:
        text = f"{gpu.get('name', 'a GPU')} on a host with {text}"
    return text


def _from_record(file: str, p: dict) -> Provenance:
    git = p.get("git") or {}
    commit = str(git.get("commit") or p.get("commit") or "")[:7]
    date = str(p.get("created_utc") or p.get("date") or "")[:10]
    command = str(p.get("command") or "")
    machine = _machine_words(p.get("machine") or "")
    missing = [k for k, v in {"commit": commit, "date": date, "command": command, "machine": machine}.items() if not v]
    if missing:
        raise FigureError(f"{file}: its provenance lacks {', '.join(missing)}")
    if git and git.get("clean") is False:
        commit += " (with uncommitted changes)"
    return Provenance(file, commit, date, machine, command, p.get("benchmark"))


@functools.cache
def load(name: str) -> Result:
    """The results file ``benchmarks/results/<name>`` with its provenance."""
    path = RESULTS / name
    rel = path.relative_to(ROOT).as_posix()
    if not path.is_file():
        raise FigureError(f"no results file {rel}")
    data = json.loads(path.read_text(encoding="utf-8"))
    record = data.get("provenance") if isinstance(data, dict) else None
    side = path.with_name(path.stem + ".provenance.json")
    if record is None and side.is_file():
        record = json.loads(side.read_text(encoding="utf-8"))
    if not isinstance(record, dict):
        raise FigureError(f"{rel} records no provenance (and there is no {side.name} beside it)")
    return Result(data, _from_record(rel, record))


def _segments(path: str) -> list:
    """``path`` split at its dots outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in path:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "." and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


_SEGMENT = re.compile(r"([^\[\]]+)((?:\[[^\]]*\])*)")


def _select(items, selector: str, where: str):
    if re.fullmatch(r"-?\d+", selector):
        return items[int(selector)]
    conds = dict(part.split("=", 1) for part in selector.split(","))
    hits = [it for it in items if all(str(_get(it, k)) == v for k, v in conds.items())]
    if len(hits) != 1:
        raise FigureError(f"{where}: [{selector}] matches {len(hits)} rows, not one")
    return hits[0]


def _get(obj, key: str):
    try:
        return obj[key]
    except (KeyError, TypeError, IndexError):
        raise FigureError(f"no {key!r} in {type(obj).__name__}") from None


def lookup(obj, path: str):
    """The value at a dotted ``path`` inside ``obj``.

    Segments are dict keys separated by dots; ``key[3]`` indexes a list and
    ``key[activation=relu,width=1024]`` selects the one dict of a list whose
    fields print as given (``[...]`` may follow ``key`` more than once).
    """
    if not path:
        return obj
    for seg in _segments(path):
        m = _SEGMENT.fullmatch(seg)
        if not m:
            raise FigureError(f"bad path segment {seg!r} in {path!r}")
        try:
            obj = _get(obj, m.group(1))
            for sel in re.findall(r"\[([^\]]*)\]", m.group(2)):
                obj = _select(obj, sel, path)
        except FigureError as exc:
            raise FigureError(f"{path!r}: {exc}") from None
    return obj
