"""The command line every timing benchmark shares (not package API): ``--quick``, ``--repeats``, ``--json``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["parser", "report"]


def parser(doc: str, quick: str, repeats: int) -> argparse.ArgumentParser:
    """An argument parser described by ``doc``'s first line, with ``--quick`` (help ``quick``), ``--repeats``, ``--json``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--json", type=Path, help="write the records there")
    return ap


def report(result: dict, table, json_path: Path | None) -> dict:
    """Print ``table(result)``, write ``result`` as JSON to ``json_path`` when given; returns ``result``."""
    print(table(result))
    if json_path:
        json_path.write_text(json.dumps(result, indent=1))
    return result
