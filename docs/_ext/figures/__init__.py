"""Measured figures, rendered from the results files under ``benchmarks/results``.

The one way a measured number reaches the README or the documentation:
declared once as a table or a value (:mod:`figures._spec`), filled from a
results file that records its commit, date, machine and command
(:mod:`figures._load`), and rendered by Sphinx (:mod:`figures.sphinx`) or
into the README's marked regions (:mod:`figures.readme`, which a test runs
in check mode).
"""

from ._load import RESULTS, ROOT, FigureError, Provenance, load, lookup
from ._spec import Table, TableSpec, Value, parse_table, parse_value


def setup(app):
    """Sphinx entry point (``extensions = ["figures"]`` with ``docs/_ext`` on the path)."""
    from .sphinx import setup as _setup

    return _setup(app)


__all__ = [
    "RESULTS",
    "ROOT",
    "FigureError",
    "Provenance",
    "Table",
    "TableSpec",
    "Value",
    "load",
    "lookup",
    "parse_table",
    "parse_value",
    "setup",
]
