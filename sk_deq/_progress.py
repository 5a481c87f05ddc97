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

__all__ = ["BAR", "STEPS", "ProgressBar", "EpochPrinter"]

#: Label, bar, count and elapsed time: ``epoch 3 |#####-----| 5/10 [0.4s]``.
BAR = "{desc} |{bar}| {n}/{total} [{elapsed:.1f}s]"

#: Bar, count, label, elapsed time and time left: ``[##--] 2/4 fitting (3s, ~3s left)``.
STEPS = "[{bar}] {n}/{total} {desc} ({elapsed:.0f}s{eta})"


class ProgressBar:
    """A minimal text progress bar (no dependency), redrawn at most every ``min_interval`` seconds.

    The bar is drawn on one line, rewritten in place with ``\\r``; a
    shorter line is padded with blanks over the longer one it replaces.  It
    is also a context manager, which calls :meth:`close` on exit.

    Parameters
    ----------
    total : int
        Number of steps (at least 1 is used).
    desc : str, default=''
        Label printed before the bar (the template's ``desc`` field).
    enabled : bool, default=True
        Print nothing when False (the counts are still kept).
    stream : file-like, optional
        Where the line is written; None means ``sys.stdout``, looked up at
        every redraw.
    width : int, default=30
        Bar width in characters.
    template : str, default=BAR
        The line drawn, a :meth:`str.format` template with the fields
        ``desc``, ``bar`` (``#`` done, ``-`` to do), ``n``, ``total``,
        ``elapsed`` (seconds) and ``eta`` (``", ~Ns left"`` while some but
        not all steps are done, else empty).  The default ``BAR`` is
        ``"{desc} |{bar}| {n}/{total} [{elapsed:.1f}s]"``.
    min_interval : float, default=0.1
        Least time in seconds between two redraws by :meth:`update` (the
        last step, :meth:`set_description` and :meth:`close` always redraw).

    Examples
    --------
    >>> import io
    >>> from sk_deq._progress import ProgressBar
    >>> out = io.StringIO()
    >>> with ProgressBar(4, "epoch 1", stream=out, width=8, template="{desc} |{bar}| {n}/{total}") as bar:
    ...     for _ in range(4):
    ...         bar.update()
    >>> out.getvalue().split("\\r")[-1]
    'epoch 1 |########| 4/4\\n'
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
        """Advance by ``n`` steps and redraw.

        Parameters
        ----------
        n : int, default=1
            Number of steps done (the count stops at ``total``).
        refresh : bool, default=True
            Redraw the line; it is skipped anyway if the last redraw is less
            than ``min_interval`` seconds ago, except at the last step.  With
            False the count advances silently (the next
            :meth:`set_description` or :meth:`close` shows it).
        """
        self.n = min(self.n + int(n), self.total)
        if self.enabled and refresh:
            self._draw(force=self.n == self.total)

    def set_description(self, desc: str):
        """Show a new label, redrawn at once.

        Parameters
        ----------
        desc : str
            The label, e.g. the step about to run.
        """
        self.desc = desc
        if self.enabled:
            self._draw(force=True)

    def close(self, desc: str | None = None):
        """Draw the final line and end it with a newline.

        Parameters
        ----------
        desc : str, optional
            A last label (e.g. ``'done'``); None keeps the current one.
        """
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


class EpochPrinter:
    """The verbose table of a training run: one row per epoch (L-BFGS: per iteration), under a header."""

    def __init__(self, enabled: bool, with_score: bool, stream=None, score_name: str = "valid_acc"):
        self.enabled = enabled
        self.with_score = with_score
        self.score_name = score_name
        self.stream = stream
        self.header_done = False

    def _write(self, s):
        stream = self.stream or sys.stdout
        stream.write(s + "\n")
        stream.flush()

    def row(self, rec: dict):
        if not self.enabled:
            return
        if not self.header_done:
            cols = (
                f"{'epoch':>7}  {'train_loss':>12}"
                + (f"  {'valid_loss':>12}  {self.score_name:>10}" if self.with_score else "")
                + f"  {'dur':>7}"
            )
            self._write(cols)
            self._write("-" * len(cols))
            self.header_done = True
        mark = "*" if rec["best"] else " "
        line = f"{rec['epoch']:>7}  {rec['train_loss']:>12.6f}"
        if self.with_score:
            line += f"  {rec['valid_loss']:>12.6f}  {rec['valid_score']:>10.4f}"
        line += f"  {rec['dur']:>6.2f}s {mark}"
        self._write(line)
