"""The Sphinx side: the ``results-table`` directive and the ``result`` role.

.. code-block:: rst

   .. results-table:: speed_mnist.json
      :rows: summary
      :columns:
         DEQ: {activation}
         DEQ / matched: {time_ratio_median:.1f}×

   The matched network is :result:`speed_mnist.json:summary[activation=relu,width=1024].time_ratio_median|{v:.1f}×`
   faster.

A table is followed by the provenance of the file it read (a list, one
file a line, for a table over several runs).  A value
shows its provenance when pointed at, and every page that quotes values
ends with the list of their files.  A figure that cannot be rendered (no
file, no provenance, a path that selects nothing) is an error of the build.
"""

from __future__ import annotations

import re
from typing import ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

from ._load import FigureError
from ._spec import parse_table, parse_value

__all__ = ["setup"]


def _escape(text: str) -> str:
    return re.sub(r"([\\*`|_])", r"\\\1", text)


def _source_rst(prov, head="Source: ") -> str:
    return (
        f"{head}``{prov.file}``, commit ``{prov.commit}``, {prov.date}, {_escape(prov.machine)}"
        + (f", written by ``{prov.benchmark}``" if prov.benchmark else "")
        + f"; ``{prov.command}``"
    )


def _sources_rst(sources) -> list:
    """The lines of a table's source: one line for one file, a list for several (a table across runs)."""
    if len(sources) == 1:
        return [".. rst-class:: results-source", "", "   " + _source_rst(sources[0])]
    lines = [".. container:: results-source", "", "   Sources:", ""]
    return lines + ["   - " + _source_rst(p, head="") for p in sources]


class ResultsTable(SphinxDirective):
    """A table of measured figures filled from results files (see :mod:`figures._spec`)."""

    required_arguments = 1
    optional_arguments = 20
    final_argument_whitespace = True
    option_spec: ClassVar[dict] = {
        "rows": directives.unchanged,
        "where": directives.unchanged,
        "columns": directives.unchanged,
    }
    has_content = False

    def run(self):
        lines = []
        for key, value in self.options.items():
            lines.append(f":{key}:")
            lines.extend("   " + part for part in (value or "").splitlines())
        try:
            table = parse_table(" ".join(self.arguments), lines).render()
        except FigureError as exc:
            raise self.error(f"results-table: {exc}") from None
        for prov in table.sources:
            self.env.note_dependency(str(self.env.srcdir.parent / prov.file))
        rst = [".. list-table::", "   :header-rows: 1", ""]
        for row in [table.header, *table.rows]:
            rst.append("   * - " + _escape(row[0]))
            rst.extend("     - " + _escape(cell) for cell in row[1:])
        rst += ["", *_sources_rst(_unique(table.sources))]
        node = nodes.container(classes=["results-table"])
        self.state.nested_parse(StringList(rst, source=self.get_source_info()[0]), self.content_offset, node)
        return [node]


def _unique(items):
    seen, out = set(), []
    for it in items:
        if it not in seen:
            seen.add(it)
            out.append(it)
    return out


class figure_source(nodes.General, nodes.Inline, nodes.Element):
    """Marks where a quoted value came from (gathered at the end of its page)."""


def result_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``:result:`file.json:path|template``` -- a measured value quoted in prose."""
    try:
        value = parse_value(nodes.unescape(text))
    except FigureError as exc:
        msg = inliner.reporter.error(f"result: {exc}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    node = nodes.abbreviation(value.text, value.text, explanation=value.source.line())
    env = inliner.document.settings.env
    env.note_dependency(str(env.srcdir.parent / value.source.file))
    marker = figure_source()
    marker["provenance"] = value.source
    return [node, marker], []


def _list_sources(app, doctree):
    """The files of every value quoted on the page, listed at its end."""
    markers = list(doctree.findall(figure_source))
    if not markers:
        return
    sources = _unique([m["provenance"] for m in markers])
    for m in markers:
        m.parent.remove(m)
    rubric = nodes.rubric("", "Where the figures quoted on this page come from")
    items = nodes.bullet_list()
    for prov in sources:
        items += nodes.list_item("", nodes.paragraph("", prov.line()))
    section = doctree.next_node(nodes.section) or doctree
    section += [rubric, items]


def setup(app):
    app.add_directive("results-table", ResultsTable)
    app.add_role("result", result_role)
    app.add_node(figure_source, html=(lambda self, node: None, lambda self, node: None))
    app.connect("doctree-read", _list_sources)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
