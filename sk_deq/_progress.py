"""One text progress display for the whole package (no dependency).

:class:`ProgressBar` draws one line, redrawn in place with ``\\r``, from a
template with the fields ``desc`` (a label), ``bar`` (``#`` done, ``-`` to
do), ``n``, ``total``, ``elapsed`` (seconds) and ``eta`` (``", ~Ns left"``
while some but not all steps are done, else empty).  Two templates are used:

:data:`BAR`
    ``epoch 3 |#####-----| 5/10 [0.4s]``: the training loop's minibatches and
    the estimators' feature computations (on standard output).
:data:`STEPS`
    ``[####----] 4/8 digits relu width 32 repeat 1: deq (3s, ~3s left)``: the
    experiments, whose label names the step running (on standard error).
"""

from __future__ import annotations

import sys
import time

__all__ = ["BAR", "STEPS", "ProgressBar"]

#: Label, bar, count and elapsed time: ``epoch 3 |#####-----| 5/10 [0.4s]``.
BAR = "{desc} |{bar}| {n}/{total} [{elapsed:.1f}s]"

#: Bar, count, label, elapsed time and time left: ``[##--] 2/4 fitting (3s, ~3s left)``.
STEPS = "[{bar}] {n}/{total} {desc} ({elapsed:.0f}s{eta})"


class ProgressBar:
    """A minimal text progress bar (no dependency), redrawn at most every ``min_interval`` seconds.

    Parameters
    ----------
    total : int
        Number of steps.
    desc : str
        Label printed before the bar.
    enabled : bool
        Print nothing when False.
    stream : file-like, optional
        Defaults to ``sys.stdout``.
    width : int, default=30
        Bar width in characters.
    template : str, default=BAR
        The line drawn (see the module docstring for its fields).
    min_interval : float, default=0.1
        Least time between two redraws by :meth:`update` (the last step,
        :meth:`set_description` and :meth:`close` always redraw).
    """

    def __init__(
        self,
        total: int,
        desc: str = "",
        enabled: bool = True,
        stream=None,
        width: int = 30,
        *,
        template: str = BAR,
        min_interval: float = 0.1,
    ):
        self.total = max(int(total), 1)
        self.desc = desc
        self.enabled = bool(enabled)
        self.stream = stream
        self.width = int(width)
        self.template = template
        self.min_interval = float(min_interval)
        self.n = 0
        self.t0 = time.perf_counter()
        self._last = -1.0
        self._shown = 0  # length of the line on screen, blanked out when a shorter one replaces it

    def _draw(self, force: bool = False):
        now = time.perf_counter()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        elapsed = now - self.t0
        filled = int(self.width * self.n / self.total)
        eta = f", ~{elapsed / self.n * (self.total - self.n):.0f}s left" if 0 < self.n < self.total else ""
        text = self.template.format(
            desc=self.desc,
            bar="#" * filled + "-" * (self.width - filled),
            n=self.n,
            total=self.total,
            elapsed=elapsed,
            eta=eta,
        )
        pad = max(self._shown - len(text), 0)
        self._shown = len(text)
        stream = self.stream or sys.stdout
        stream.write("\r" + text + " " * pad)
        stream.flush()

    def update(self, n: int = 1, *, refresh: bool = True):
        """Advance by ``n`` steps; redraw unless ``refresh`` is False (or the last redraw is too recent)."""
        self.n = min(self.n + int(n), self.total)
        if self.enabled and refresh:
            self._draw(force=self.n == self.total)

    def set_description(self, desc: str):
        """Show ``desc`` as the label (the step about to run), redrawn at once."""
        self.desc = desc
        if self.enabled:
            self._draw(force=True)

    def close(self, desc: str | None = None):
        """Draw the final line (with the label ``desc`` if given) and end it."""
        if self.enabled:
            if desc is not None:
                self.desc = desc
            self._draw(force=True)
            (self.stream or sys.stdout).write("\n")
            (self.stream or sys.stdout).flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
