"""Where a measured-looking number is typed by hand in the README or the docs.

The pattern is that of a measurement: a number with a unit of time, a
percentage, a speed-up or a size (``2.3×``, ``85 %``, ``12 min``, ``4 GiB``)
or a number with two or more decimals.  Rendered figures (the README's
marked regions, the ``results-table`` directive and the ``result`` role) are
not typed, so they are left out of the scan; so is the reStructuredText
``math`` of formulas.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["FIGURE", "typed_figures"]

#: a measured-looking figure: a number with a unit (thousands separated by commas), or with two or more decimals
FIGURE = re.compile(r"(?<![\w.])[0-9][0-9,]*(\.[0-9]+)? ?(ms|s|%|×|GiB|MiB|GB|min|h)(?!\w)|(?<![\w.])[0-9]+\.[0-9]{2,}")

_README_REGION = re.compile(
    r"<!-- results-table .*?<!-- end results-table -->|<!-- result .*?<!-- end result -->", re.S
)
_ROLE = re.compile(r":result:`[^`]*`|:math:`[^`]*`")


def _rst_lines(text: str):
    """The lines of an rst page outside ``results-table`` and ``math`` directive blocks."""
    skip_indent = None
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if skip_indent is not None:
            if not stripped or indent > skip_indent:
                continue
            skip_indent = None
        if re.match(r"\.\. (results-table|math)::", stripped):
            skip_indent = indent
            continue
        yield no, line


def typed_figures(path: Path) -> list:
    """``(line number, the figure, the line)`` for every measured-looking figure typed in ``path``."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        # blank out the rendered regions, keeping the line numbers
        text = _README_REGION.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        lines = enumerate(text.splitlines(), 1)
    else:
        lines = _rst_lines(text)
    out = []
    for no, line in lines:
        scan = _ROLE.sub("", line)
        out += [(no, m.group(0), line.strip()) for m in FIGURE.finditer(scan)]
    return out
