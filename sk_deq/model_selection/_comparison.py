"""The result of :func:`~sk_deq.model_selection.compare_estimators`: :class:`ComparisonResult` and its tables."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._json import JSONResult
from .._validation import check_bool
from ._ttest import CorrectedTTestResult


def _decimals(values) -> int:
    """Decimals that show about four significant digits of the largest finite value."""
    finite = np.abs(np.asarray(values, dtype=float))
    finite = finite[np.isfinite(finite)]
    top = float(finite.max()) if finite.size else 1.0
    if top == 0.0:
        return 4
    return int(min(6, max(0, 3 - math.floor(math.log10(top)))))


def _significance(test, alpha: float):
    """True or False: whether ``test`` is significant at ``alpha``; None when its p-value is undefined (NaN)."""
    return None if math.isnan(test.pvalue) else test.significant(alpha)


def _pvalue_text(p: float) -> str:
    if not math.isfinite(p):
        return "nan"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


@dataclass
class ComparisonResult(JSONResult):
    """Outcome of :func:`compare_estimators`: scores and times per estimator and fold, and the paired tests.

    Every parameter is stored as an attribute of the same name.
    ``str(result)`` is :meth:`format_table`.

    Parameters
    ----------
    names : list of str
        The estimators' names, in the order given.
    scores : ndarray of shape (n_estimators, n_folds)
        Test score of every estimator on every fold.
    fit_times : ndarray of shape (n_estimators, n_folds)
        Seconds spent in ``fit``.
    score_times : ndarray of shape (n_estimators, n_folds)
        Seconds spent scoring the test fold (prediction included).
    n_train : ndarray of shape (n_folds,)
        Training set size of every fold.
    n_test : ndarray of shape (n_folds,)
        Test set size of every fold.
    scoring : str
        The name of the score (a scorer name, a callable's name, or
        ``'score'`` for the estimators' own ``score`` method).
    cv : str
        The cross-validation splitter used, as text.
    alpha : float
        Significance level of the verdicts in the tables.
    pairwise : dict, default={}
        ``pairwise[(a, b)]``: the :class:`CorrectedTTestResult` of
        ``scores[a] - scores[b]``, for every pair with ``a`` before ``b`` in
        ``names`` (empty with a single fold or a single estimator).
    warnings : list of list of str, default=[]
        Per estimator and fold, the distinct warnings raised by its fit and
        scoring (``"Category: message"``).
    failed : ndarray of bool of shape (n_estimators, n_folds), default=None
        Whether the fit or scoring of an estimator on a fold failed (its
        score is then ``error_score``); None means none failed.  Failed
        folds are left out of the means and of the paired tests.
    """

    names: list
    scores: np.ndarray
    fit_times: np.ndarray
    score_times: np.ndarray
    n_train: np.ndarray
    n_test: np.ndarray
    scoring: str
    cv: str
    alpha: float
    pairwise: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    failed: np.ndarray = None  # type: ignore[assignment]  # None: none failed; an array after __post_init__

    def __post_init__(self):
        if self.failed is None:
            self.failed = np.zeros(np.shape(self.scores), dtype=bool)
        self.failed = np.asarray(self.failed, dtype=bool)

    @property
    def n_folds(self) -> int:
        """Number of folds (train/test splits) every estimator was scored on.

        Returns
        -------
        int
            ``scores.shape[1]``.
        """
        return int(self.scores.shape[1])

    def _index(self, name) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no estimator named {name!r}; the names are {', '.join(map(repr, self.names))}.") from None

    def test(self, a: str, b: str) -> CorrectedTTestResult:
        """The corrected paired t-test of estimator ``a`` against estimator ``b``.

        Parameters
        ----------
        a : str
            Name of the first estimator (the differences are ``a - b``).
        b : str
            Name of the second estimator.

        Returns
        -------
        CorrectedTTestResult
            The test of ``scores[a] - scores[b]``, in either order of the
            names (the stored test, or its :meth:`~CorrectedTTestResult.reversed`).

        Raises
        ------
        KeyError
            If a name is unknown, the two names are equal, or the result has
            no tests (a single fold).
        """
        ia, ib = self._index(a), self._index(b)
        if ia == ib:
            raise KeyError(f"a test compares two different estimators, got {a!r} twice.")
        if not self.pairwise:
            raise KeyError(f"no paired tests: the comparison ran on {self.n_folds} fold(s); a test needs at least two.")
        return self.pairwise[(a, b)] if ia < ib else self.pairwise[(b, a)].reversed()

    def summary(self) -> list:
        """One row per estimator: mean and spread of its scores and its median times.

        Returns
        -------
        list of dict
            Per estimator, in order: ``name``, ``score_mean``, ``score_std``
            (sample standard deviation, 0 for one fold; both over the folds
            that did not fail, NaN if all failed), ``n_failed`` (folds whose
            fit or scoring failed), ``scores`` (one per fold, failed ones
            included), ``fit_time_mean``, ``score_time_mean`` (seconds, mean
            over the folds).
        """
        rows = []
        for i, name in enumerate(self.names):
            s = self.scores[i][~self.failed[i]]
            rows.append(
                {
                    "name": name,
                    "score_mean": float(np.mean(s)) if len(s) else math.nan,
                    "score_std": float(np.std(s, ddof=1)) if len(s) > 1 else (0.0 if len(s) else math.nan),
                    "n_failed": int(self.failed[i].sum()),
                    "scores": [float(v) for v in self.scores[i]],
                    "fit_time_mean": float(np.mean(self.fit_times[i])),
                    "score_time_mean": float(np.mean(self.score_times[i])),
                }
            )
        return rows

    def to_dict(self) -> dict:
        """All numbers as a JSON-serialisable dict.

        Returns
        -------
        dict
            ``names``, ``scoring``, ``cv``, ``alpha``, ``n_folds``,
            ``n_train`` and ``n_test`` (per fold), ``summary``
            (:meth:`summary`), ``scores``, ``fit_times``, ``score_times`` and
            ``failed`` (nested lists, estimator by fold), ``pairwise`` (a
            list of the tests' :meth:`~CorrectedTTestResult.to_dict`, each
            with ``a``, ``b`` and ``significant``, which is None when the
            p-value is undefined) and ``warnings``.
            :func:`sk_deq.plotting.plot_paired_scores` accepts it in place of
            the result.
        """
        return {
            "names": list(self.names),
            "scoring": self.scoring,
            "cv": self.cv,
            "alpha": float(self.alpha),
            "n_folds": self.n_folds,
            "n_train": [int(v) for v in self.n_train],
            "n_test": [int(v) for v in self.n_test],
            "summary": self.summary(),
            "scores": self.scores.tolist(),
            "fit_times": self.fit_times.tolist(),
            "score_times": self.score_times.tolist(),
            "failed": self.failed.tolist(),
            "pairwise": [
                {"a": a, "b": b, **t.to_dict(), "significant": _significance(t, self.alpha)}
                for (a, b), t in self.pairwise.items()
            ],
            "warnings": [[list(fold) for fold in est] for est in self.warnings],
        }

    def to_frame(self):
        """The per-fold measurements as a pandas DataFrame (pandas is not a dependency).

        Returns
        -------
        pandas.DataFrame
            One row per estimator and fold: ``estimator``, ``fold``,
            ``score``, ``fit_time``, ``score_time``, ``n_train``, ``n_test``.

        Raises
        ------
        ImportError
            If pandas is not installed.
        """
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError(
                "ComparisonResult.to_frame needs pandas, which is not installed: pip install pandas."
            ) from exc
        rows = [
            {
                "estimator": name,
                "fold": j,
                "score": float(self.scores[i, j]),
                "fit_time": float(self.fit_times[i, j]),
                "score_time": float(self.score_times[i, j]),
                "n_train": int(self.n_train[j]),
                "n_test": int(self.n_test[j]),
            }
            for i, name in enumerate(self.names)
            for j in range(self.n_folds)
        ]
        return pd.DataFrame(rows)

    # -- display ------------------------------------------------------------
    def _pair_rows(self, dec: int) -> list:
        rows = []
        for (a, b), t in self.pairwise.items():
            verdict = {True: "significant", False: "not significant", None: "undefined"}[_significance(t, self.alpha)]
            rows.append(
                (
                    f"{a} - {b}",
                    f"{t.mean_difference:+.{dec}f}",
                    f"{t.standard_error:.{dec}f}",
                    f"{t.statistic:+.2f}",
                    f"{t.df}",
                    _pvalue_text(t.pvalue),
                    verdict,
                )
            )
        return rows

    def format_table(self, *, per_fold: bool = True) -> str:
        """The results as a plain-text table.

        Parameters
        ----------
        per_fold : bool, default=True
            Also list every estimator's score on every fold.

        Returns
        -------
        str
            A header naming the score, the splitter and the set sizes; per
            estimator the mean ± standard deviation of its score over the
            folds and its mean fit and scoring times; then per pair the mean
            difference, its corrected standard error, t, degrees of freedom,
            p-value and whether it is significant at ``alpha``.
        """
        check_bool(per_fold, "per_fold", "format_table")
        dec = _decimals(self.scores)
        n_train = f"{int(np.min(self.n_train))}" + (f"-{int(np.max(self.n_train))}" if np.ptp(self.n_train) else "")
        n_test = f"{int(np.min(self.n_test))}" + (f"-{int(np.max(self.n_test))}" if np.ptp(self.n_test) else "")
        lines = [
            f"{self.scoring} over {self.n_folds} fold(s) of {self.cv}; {n_train} train / {n_test} test samples per fold"
        ]
        width = max(9, *(len(n) for n in self.names))
        summary = self.summary()
        ms = [self._mean_std_text(r, dec) for r in summary]
        msw = max(len("mean ± std"), *(len(m) for m in ms))
        head = f"{'estimator':<{width}} | {'mean ± std':>{msw}} | {'fit s':>8} {'score s':>8}"
        lines += ["", head, "-" * len(head)]
        for r, m in zip(summary, ms):
            lines.append(f"{r['name']:<{width}} | {m:>{msw}} | {r['fit_time_mean']:>8.3f} {r['score_time_mean']:>8.3f}")
        if per_fold:
            lines += ["", "Per-fold scores:"]
            for name, s, bad in zip(self.names, self.scores, self.failed):
                lines.append(
                    f"  {name:<{width}} " + " ".join("failed" if f else f"{v:.{dec}f}" for v, f in zip(s, bad))
                )
        if self.pairwise:
            ratio = float(np.mean(self.n_test) / np.mean(self.n_train))
            lines += [
                "",
                f"Paired differences, corrected resampled t-test (Nadeau & Bengio 2003; n_test/n_train = {ratio:.3g}), "
                f"alpha = {self.alpha:g}:",
            ]
            rows = self._pair_rows(dec)
            heads = ("pair", "mean diff", "std err", "t", "df", "p", "verdict")
            widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(heads)]
            fmt = lambda cells: "  ".join(
                c.ljust(w) if k in (0, 6) else c.rjust(w) for k, (c, w) in enumerate(zip(cells, widths))
            )
            lines.append(fmt(heads).rstrip())
            lines.extend(fmt(r).rstrip() for r in rows)
            lines.extend(self._failure_notes())
        elif len(self.names) > 1:
            lines += ["", "No paired tests: a test needs at least two folds."]
        return "\n".join(lines)

    def _mean_std_text(self, row: dict, dec: int) -> str:
        """``mean ± std`` of one summary row, with the number of failed folds if any."""
        if row["n_failed"] == self.n_folds:
            return f"all {self.n_folds} folds failed"
        text = f"{row['score_mean']:.{dec}f} ± {row['score_std']:.{dec}f}"
        return text + (f" ({row['n_failed']} of {self.n_folds} failed)" if row["n_failed"] else "")

    def _failure_notes(self) -> list:
        """Lines saying which folds failed and which tests are undefined (empty when all is well)."""
        notes = []
        if self.failed.any():
            counts = ", ".join(
                f"{name} on {int(bad.sum())} of {self.n_folds}"
                for name, bad in zip(self.names, self.failed)
                if bad.any()
            )
            notes.append(
                f"Failed fits or scorings ({counts} folds) are left out: each pair is tested on the folds where "
                "both estimators succeeded (df = those folds - 1)."
            )
        if any(math.isnan(t.pvalue) for t in self.pairwise.values()):
            notes.append(
                "An undefined p-value (NaN score, or fewer than two folds where both succeeded) is no evidence either way."
            )
        return [""] + notes if notes else []

    def to_markdown(self) -> str:
        """The results as two Markdown tables (estimators, then pairs).

        Returns
        -------
        str
            A table with one row per estimator (mean ± std, mean fit and
            scoring seconds) and, if there are tests, one with a row per pair
            (mean difference, corrected standard error, t, df, p, verdict).
        """
        dec = _decimals(self.scores)
        lines = [
            f"| estimator | {self.scoring} (mean ± std, {self.n_folds} folds) | fit s | score s |",
            "|---|---:|---:|---:|",
        ]
        for r in self.summary():
            lines.append(
                f"| {r['name']} | {self._mean_std_text(r, dec)} | "
                f"{r['fit_time_mean']:.3f} | {r['score_time_mean']:.3f} |"
            )
        if self.pairwise:
            lines += [
                "",
                f"| pair | mean diff | std err | t | df | p | verdict (alpha = {self.alpha:g}) |",
                "|---|---:|---:|---:|---:|---:|---|",
            ]
            lines.extend("| " + " | ".join(r) + " |" for r in self._pair_rows(dec))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format_table()
