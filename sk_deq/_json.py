"""``to_dict`` and ``to_json`` for the package's result dataclasses."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar

import numpy as np


def _plain(value):
    """``value`` with its numpy arrays as lists, also inside lists and dicts (for JSON)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class JSONResult:
    """Mixin of the result dataclasses: ``to_dict`` (every field) and ``to_json``."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # every subclass is a dataclass

    def to_dict(self) -> dict:
        """Every field of the result by name, numpy arrays as lists: JSON-serialisable.

        Returns
        -------
        dict
            One entry per field, in the order of the class's parameters.
            The figures of :mod:`sk_deq.plotting` accept it in place of the
            result.
        """
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_json(self, path=None, *, indent: int = 2) -> str:
        """Serialise ``to_dict()`` to JSON; also write it to ``path`` if given.

        Parameters
        ----------
        path : str or path-like, optional
            File to write the JSON to (UTF-8, with a final newline); nothing
            is written when None.
        indent : int, default=2
            Indentation of the JSON text.

        Returns
        -------
        str
            The JSON text (without the final newline).
        """
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
        return text
