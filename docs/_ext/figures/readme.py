"""The README's measured figures, rendered into its marked regions.

A table::

    <!-- results-table speed_mnist.json
    :rows: summary
    :columns:
       DEQ: {activation}
    -->
    (the rendered markdown table and its source line)
    <!-- end results-table -->

and a value quoted in prose::

    <!-- result speed_mnist.json:summary[...].time_ratio_median|{v:.1f}× -->2.3×<!-- end result -->

``python docs/_ext/figures`` rewrites the regions from the results files;
``--check`` only compares, and fails (exit 1, with a diff) where the README
differs from what its files render.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from ._load import ROOT, Provenance
from ._spec import parse_table, parse_value

__all__ = ["render_readme", "main"]

README = ROOT / "README.md"

_TABLE = re.compile(r"(<!-- results-table (?P<spec>.*?)-->\n)(?P<body>.*?)(<!-- end results-table -->)", re.S)
_VALUE = re.compile(r"(<!-- result (?P<spec>.*?) -->)(?P<body>.*?)(<!-- end result -->)", re.S)


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _source_md(prov: Provenance) -> str:
    by = f", written by `{prov.benchmark}`" if prov.benchmark else ""
    return (
        f"Source: [`{prov.file}`]({prov.file}), commit `{prov.commit}`, {prov.date}, {prov.machine}{by}; "
        f"`{prov.command}`"
    )


def _table_md(spec_text: str) -> str:
    first, _, rest = spec_text.partition("\n")
    table = parse_table(first, rest.splitlines()).render()
    lines = ["| " + " | ".join(_md_escape(h) for h in table.header) + " |"]
    lines.append("|" + "|".join("---" for _ in table.header) + "|")
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in table.rows]
    seen = []
    for p in table.sources:
        if p not in seen:
            seen.append(p)
    lines.append("")
    lines += [_source_md(p) + ("  " if i < len(seen) - 1 else "") for i, p in enumerate(seen)]
    return "\n".join(lines) + "\n"


def _value_md(spec_text: str) -> str:
    value = parse_value(spec_text)
    p = value.source
    return f'[{value.text}]({p.file} "commit {p.commit}, {p.date}, {p.machine}")'


def render_readme(text: str) -> str:
    """``text`` with every marked region rendered from its results files."""
    text = _TABLE.sub(lambda m: m.group(1) + _table_md(m.group("spec")) + m.group(4), text)
    return _VALUE.sub(lambda m: m.group(1) + _value_md(m.group("spec")) + m.group(4), text)


def main(argv=None) -> int:
    """Rewrite the README's figures (``--check``: compare only; exit 1 where they differ)."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare only: exit 1 (with a diff) if the README is stale")
    ap.add_argument("--readme", type=Path, default=README, help="the file (default: the repository's README.md)")
    args = ap.parse_args(argv)
    old = args.readme.read_text(encoding="utf-8")
    new = render_readme(old)
    if old == new:
        print(f"{args.readme.name}: its figures are those of their results files")
        return 0
    if args.check:
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), "README.md", "rendered", lineterm="")
        print("\n".join(diff))
        print(f"{args.readme.name} differs from its results files: run `python docs/_ext/figures` to render it")
        return 1
    args.readme.write_text(new, encoding="utf-8")
    print(f"{args.readme.name}: figures rendered from their results files")
    return 0
