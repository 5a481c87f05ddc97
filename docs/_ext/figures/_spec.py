"""Tables and values of measured figures, declared as text and filled from results files.

One declaration serves the docs (the ``results-table`` directive and the
``result`` role of :mod:`figures.sphinx`) and the README (its marked
regions, :mod:`figures.readme`)::

    speed_mnist.json                      <- one or more results files
    :rows: summary                        <- where each file's rows are (a dotted path, see lookup;
                                             without it each file is one row: a table across runs)
    :where: width=1024                    <- optional: keep the rows whose fields print so
    :columns:
       DEQ: {activation}                  <- header: template, one column a line
       width: {width:,}
       DEQ s: {get('models.deq.seconds_median'):.2f} s

A template is a Python f-string evaluated per row with the row's fields by
name, ``row``, ``get(path)`` (a path inside the row), ``top(path)`` (a path
inside the whole file; both take a second argument, returned where the path
is absent, e.g. a field that older files lack), ``file`` (its name), ``commit`` and ``date`` (of
its provenance: a table over several runs can show each row's age) and a few functions (``median``,
``mean``, ``stdev``, ``min``, ``max``, ``len``, ``abs``, ``round``, ``sum``).
A value is ``file.json:path|template`` with the value as ``v``
(``{v}`` when no template is given).

A table used in more than one place (the README's among them) is declared
once, by name, in ``tables.toml`` beside this module, and referred to by
that name instead of its files.
"""

from __future__ import annotations

import functools
import re
import statistics
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ._load import FigureError, Provenance, load, lookup

__all__ = ["Table", "TableSpec", "Value", "named_tables", "parse_table", "parse_value", "render_template"]

_FUNCTIONS = {
    "median": statistics.median,
    "mean": statistics.fmean,
    "stdev": statistics.stdev,
    "min": min,
    "max": max,
    "len": len,
    "abs": abs,
    "round": round,
    "sum": sum,
    "str": str,
    "float": float,
    "int": int,
}


def render_template(template: str, names: dict) -> str:
    """``template`` as an f-string over ``names`` (and the functions above), nothing else in scope."""
    try:
        return eval("f" + repr(template), {"__builtins__": {}, **_FUNCTIONS}, names)
    except FigureError:
        raise
    except Exception as exc:
        raise FigureError(f"template {template!r}: {type(exc).__name__}: {exc}") from None


@dataclass
class Table:
    """A rendered table: its header, rows of text and the provenance of each file it read."""

    header: list
    rows: list
    sources: list = field(default_factory=list)


@dataclass(frozen=True)
class TableSpec:
    """A declared table (see the module's docstring)."""

    files: tuple
    rows: str
    columns: tuple  # (header, template) pairs
    where: tuple = ()  # (path, text) pairs

    def render(self) -> Table:
        """The table, filled from its files."""
        out = Table([h for h, _ in self.columns], [])
        for name in self.files:
            res = load(name)
            out.sources.append(res.provenance)
            items = lookup(res.data, self.rows)
            if isinstance(items, dict):
                items = [items]
            for row in items:
                if not all(str(_try(row, k)) == v for k, v in self.where):
                    continue
                names = {k: v for k, v in row.items() if isinstance(k, str) and k.isidentifier()}
                names.update(
                    row=row,
                    file=name,
                    commit=res.provenance.commit,
                    date=res.provenance.date,
                    get=lambda p, *default, r=row: _lookup_or(r, p, default),
                    top=lambda p, *default, d=res.data: _lookup_or(d, p, default),
                )
                out.rows.append([render_template(t, names) for _, t in self.columns])
        if not out.rows:
            raise FigureError(
                f"table over {', '.join(self.files)} has no rows (rows={self.rows!r}, where={self.where!r})"
            )
        return out


def _lookup_or(obj, path, default: tuple):
    """``lookup(obj, path)``, or ``default[0]`` where the path is absent and a default is given."""
    try:
        return lookup(obj, path)
    except FigureError:
        if default:
            return default[0]
        raise


def _try(row, path):
    try:
        return lookup(row, path)
    except FigureError:
        return None


def _options(lines: list) -> dict:
    """``:name: value`` options, an option's value continued on the indented lines below it."""
    opts, key = {}, None
    for line in lines:
        m = re.match(r"\s*:([\w-]+):\s*(.*)$", line)
        if m:
            key = m.group(1)
            opts[key] = [m.group(2)] if m.group(2).strip() else []
        elif line.strip():
            if key is None:
                raise FigureError(f"text before any option: {line.strip()!r}")
            opts[key].append(line.strip())
    return opts


@functools.lru_cache(maxsize=1)
def named_tables() -> dict:
    """The tables declared by name in ``tables.toml``: ``{name: (files, option lines)}``."""
    raw = tomllib.loads((Path(__file__).with_name("tables.toml")).read_text(encoding="utf-8"))
    out = {}
    for name, t in raw.items():
        lines = []
        for key in ("rows", "where", "columns"):
            if key in t:
                lines.append(f":{key}:")
                lines.extend("   " + ln for ln in str(t[key]).strip().splitlines())
        out[name] = (" ".join(t["files"]), lines)
    return out


def parse_table(argument: str, option_lines: list) -> TableSpec:
    """A :class:`TableSpec` from the directive's argument (the files, or a table's name) and its option lines."""
    name = argument.strip()
    if name and not name.endswith(".json") and " " not in name:
        if option_lines:
            raise FigureError(f"table {name!r} is declared in tables.toml: give no options with its name")
        if name not in named_tables():
            raise FigureError(f"no table {name!r} in tables.toml (and not a .json file)")
        argument, option_lines = named_tables()[name]
    files = tuple(argument.split())
    opts = _options(option_lines)
    unknown = set(opts) - {"rows", "where", "columns"}
    if not files or unknown or "columns" not in opts:
        raise FigureError(f"a results table needs files and :columns: (got files {files}, options {sorted(opts)})")
    columns = []
    for line in opts["columns"]:
        head, sep, template = line.partition(": ")
        if not sep:
            raise FigureError(f"column {line!r} is not 'header: template'")
        columns.append((head.strip(), template.strip()))
    where = tuple(
        tuple(part.strip().split("=", 1)) for part in " ".join(opts.get("where", [])).split(",") if part.strip()
    )
    return TableSpec(files, " ".join(opts.get("rows", [])), tuple(columns), where)


@dataclass(frozen=True)
class Value:
    """A value quoted in prose: its text and the provenance of its file."""

    text: str
    source: Provenance


def parse_value(spec: str) -> Value:
    """``file.json:path|template`` rendered (the template sees the value as ``v``)."""
    ref, _, template = spec.partition("|")
    name, sep, path = ref.strip().partition(":")
    if not sep:
        raise FigureError(f"value {spec!r} is not 'file.json:path|template'")
    res = load(name.strip())
    v = lookup(res.data, path.strip())
    text = render_template(template or "{v}", {"v": v, "top": lambda p: lookup(res.data, p)})
    return Value(text, res.provenance)
