"""``to_json`` for the package's result objects (each defines ``to_dict``)."""

from __future__ import annotations

import json


class JSONResult:
    """Mixin: ``to_json`` from the class's ``to_dict``."""

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
