"""Cross-validated comparisons of estimators, with a paired test that allows for overlapping folds.

:func:`compare_estimators` fits every estimator on the same folds and returns
a :class:`ComparisonResult`: mean and standard deviation of the score, fit
and scoring times, the per-fold scores and, for every pair of estimators, the
corrected resampled t-test of :func:`corrected_resampled_ttest`.

Why a corrected test: the training sets of cross-validation folds (or of
repeated random splits) overlap, so the per-fold scores are correlated and
the ordinary paired t-test, which treats them as independent, is
anti-conservative: it finds differences that are not there far more often
than its nominal level.  Nadeau and Bengio's correction inflates the variance
of the mean difference by the ratio of test to training set sizes.

The test is that of C. Nadeau and Y. Bengio, "Inference for the
Generalization Error", *Machine Learning* 52(3):239-281, 2003; R. R. Bouckaert
and E. Frank, "Evaluating the Replicability of Significance Tests for
Comparing Learning Algorithms", *PAKDD 2004*, LNCS 3056, pp. 3-12, apply it to
repeated k-fold cross-validation.
"""

from __future__ import annotations

import math
import numbers
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ._json import JSONResult

__all__ = [
    "ComparisonResult",
    "CorrectedTTestResult",
    "compare_estimators",
    "corrected_resampled_ttest",
]

_ALTERNATIVES = ("two-sided", "greater", "less")


# ---------------------------------------------------------------------------
# the test


@dataclass(frozen=True)
class CorrectedTTestResult:
    """Outcome of :func:`corrected_resampled_ttest`: the corrected paired t-test of two score series.

    Every parameter is stored as an attribute of the same name.

    Parameters
    ----------
    mean_difference : float
        Mean over the folds of ``scores_a - scores_b``.
    std_difference : float
        Sample standard deviation (``ddof=1``) of the per-fold differences.
    standard_error : float
        Corrected standard error of the mean difference,
        ``sqrt((1 / J + n_test / n_train) * std_difference**2)``.
    statistic : float
        The t statistic ``mean_difference / standard_error`` (``+-inf`` when
        the differences are all equal and not zero, 0 when they are all zero).
    df : int
        Degrees of freedom, ``J - 1``.
    pvalue : float
        p-value of the test for ``alternative`` (Student's t with ``df``
        degrees of freedom).
    n_folds : int
        Number of folds ``J``.
    test_train_ratio : float
        The ``n_test / n_train`` of the correction.
    alternative : {'two-sided', 'greater', 'less'}
        The alternative hypothesis: the mean difference is not zero, is
        positive (``a`` scores higher) or is negative.
    """

    mean_difference: float
    std_difference: float
    standard_error: float
    statistic: float
    df: int
    pvalue: float
    n_folds: int
    test_train_ratio: float
    alternative: str

    def significant(self, alpha: float = 0.05) -> bool:
        """Whether the p-value is below ``alpha``.

        Parameters
        ----------
        alpha : float, default=0.05
            The significance level.

        Returns
        -------
        bool
            ``pvalue < alpha`` (False for a NaN p-value).
        """
        return bool(self.pvalue < alpha)

    def reversed(self) -> CorrectedTTestResult:
        """The same test with ``a`` and ``b`` swapped.

        Returns
        -------
        CorrectedTTestResult
            Differences and statistic negated; for a one-sided alternative
            the alternative is swapped too, so the p-value stays the same.
        """
        alt = {"greater": "less", "less": "greater"}.get(self.alternative, self.alternative)
        return CorrectedTTestResult(
            mean_difference=-self.mean_difference,
            std_difference=self.std_difference,
            standard_error=self.standard_error,
            statistic=-self.statistic,
            df=self.df,
            pvalue=self.pvalue,
            n_folds=self.n_folds,
            test_train_ratio=self.test_train_ratio,
            alternative=alt,
        )

    def to_dict(self) -> dict:
        """The fields as a JSON-serialisable dict.

        Returns
        -------
        dict
            Every field by name; infinite or NaN values stay floats
            (``json.dumps`` writes them as ``Infinity`` and ``NaN``).
        """
        return {
            "mean_difference": float(self.mean_difference),
            "std_difference": float(self.std_difference),
            "standard_error": float(self.standard_error),
            "statistic": float(self.statistic),
            "df": int(self.df),
            "pvalue": float(self.pvalue),
            "n_folds": int(self.n_folds),
            "test_train_ratio": float(self.test_train_ratio),
            "alternative": self.alternative,
        }


def _sizes(value, n_folds: int, what: str) -> float:
    """The mean of a set size given as one number or one per fold, checked to be positive."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    elif arr.ndim != 1 or len(arr) != n_folds:
        raise ValueError(f"{what} must be one number or one per fold ({n_folds}), got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{what} must be positive, got {value!r}.")
    return float(arr.mean())


def corrected_resampled_ttest(
    scores_a, scores_b, n_train, n_test, *, alternative: str = "two-sided"
) -> CorrectedTTestResult:
    """Nadeau and Bengio's corrected resampled t-test of two estimators scored on the same folds.

    With ``d_j = scores_a[j] - scores_b[j]`` the differences on ``J``
    folds, ``mean(d)`` their mean and ``s**2`` their sample variance
    (``ddof=1``), the statistic is

    ``t = mean(d) / sqrt((1 / J + n_test / n_train) * s**2)``

    with ``J - 1`` degrees of freedom (Nadeau and Bengio, 2003, the
    "corrected resampled t-test"; Bouckaert and Frank, 2004, apply it to
    repeated k-fold cross-validation with ``n_test / n_train = 1 / (k - 1)``).
    The ordinary paired t-test uses ``1 / J`` alone; because the training sets
    of the folds overlap, the fold scores are correlated and that test rejects
    far too often.  The term ``n_test / n_train`` allows for the correlation,
    so the corrected statistic is the paired t statistic divided by
    ``sqrt(1 + J * n_test / n_train)``.

    Parameters
    ----------
    scores_a : array-like of shape (n_folds,)
        Scores of the first estimator, one per fold.
    scores_b : array-like of shape (n_folds,)
        Scores of the second estimator on the same folds, in the same order.
    n_train : int or array-like of shape (n_folds,)
        Training set size, or one per fold (their mean is used).
    n_test : int or array-like of shape (n_folds,)
        Test set size, or one per fold (their mean is used).
    alternative : {'two-sided', 'greater', 'less'}, default='two-sided'
        ``'greater'``: the alternative is that ``a`` scores higher on
        average; ``'less'``: lower.

    Returns
    -------
    CorrectedTTestResult
        Mean and standard deviation of the differences, the corrected
        standard error, ``statistic``, ``df`` and ``pvalue``.  When the
        differences are all equal the variance is zero: the result has
        ``statistic=0`` and ``pvalue=1`` if they are all zero, and
        ``statistic=+-inf`` and ``pvalue=0`` (or 1 for the alternative the
        sign contradicts) otherwise.  A NaN score makes every statistic NaN.

    Raises
    ------
    ValueError
        If the score series are not 1-D, differ in length or have fewer than
        two folds (no variance can be estimated from one), if a size is not
        positive, or for an unknown ``alternative``.

    See Also
    --------
    compare_estimators : Runs the estimators on common folds and applies this test to every pair.
    scipy.stats.ttest_rel : The uncorrected paired t-test.

    References
    ----------
    C. Nadeau and Y. Bengio, "Inference for the Generalization Error",
    *Machine Learning* 52(3):239-281, 2003.

    R. R. Bouckaert and E. Frank, "Evaluating the Replicability of
    Significance Tests for Comparing Learning Algorithms", *PAKDD 2004*,
    LNCS 3056, pp. 3-12.

    Examples
    --------
    >>> from sk_deq.model_selection import corrected_resampled_ttest
    >>> a = [0.91, 0.93, 0.90, 0.94, 0.92]
    >>> b = [0.89, 0.92, 0.90, 0.91, 0.90]
    >>> res = corrected_resampled_ttest(a, b, n_train=800, n_test=200)
    >>> round(res.mean_difference, 3), res.df
    (0.016, 4)
    >>> round(res.pvalue, 3)
    0.105

    The uncorrected paired t-test would call the same difference significant:

    >>> from scipy.stats import ttest_rel
    >>> round(float(ttest_rel(a, b).pvalue), 3)
    0.035
    """
    from scipy import stats

    if alternative not in _ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(map(repr, _ALTERNATIVES))}, got {alternative!r}.")
    a = np.asarray(scores_a, dtype=float)
    b = np.asarray(scores_b, dtype=float)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"scores_a and scores_b must be 1-D (one score per fold), got shapes {a.shape} and {b.shape}.")
    if a.shape != b.shape:
        raise ValueError(f"scores_a and scores_b must have one score per fold each, got {len(a)} and {len(b)}.")
    n_folds = len(a)
    if n_folds < 2:
        raise ValueError(
            f"the corrected resampled t-test needs at least two folds to estimate a variance, got {n_folds}."
        )
    ratio = _sizes(n_test, n_folds, "n_test") / _sizes(n_train, n_folds, "n_train")
    d = a - b
    mean = float(d.mean())
    var = float(d.var(ddof=1))
    # Equal differences may leave a variance of rounding errors: treat it as zero.
    if np.all(np.isfinite(d)) and np.ptp(d) <= 8 * np.finfo(float).eps * np.max(np.abs(d)):
        var = 0.0
    se = math.sqrt((1.0 / n_folds + ratio) * var) if math.isfinite(var) else math.nan
    df = n_folds - 1
    if not (math.isfinite(mean) and math.isfinite(se)):
        t, p = math.nan, math.nan
    elif se == 0.0:
        t = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
        if mean == 0.0:
            p = 1.0
        elif alternative == "two-sided":
            p = 0.0
        else:
            p = 0.0 if (mean > 0) == (alternative == "greater") else 1.0
    else:
        t = mean / se
        if alternative == "two-sided":
            p = float(2.0 * stats.t.sf(abs(t), df))
        elif alternative == "greater":
            p = float(stats.t.sf(t, df))
        else:
            p = float(stats.t.cdf(t, df))
    return CorrectedTTestResult(
        mean_difference=mean,
        std_difference=math.sqrt(var) if math.isfinite(var) else math.nan,
        standard_error=se,
        statistic=float(t),
        df=df,
        pvalue=float(min(p, 1.0)) if math.isfinite(p) else math.nan,
        n_folds=n_folds,
        test_train_ratio=ratio,
        alternative=alternative,
    )


# ---------------------------------------------------------------------------
# the comparison


def _decimals(values) -> int:
    """Decimals that show about four significant digits of the largest finite value."""
    finite = np.abs(np.asarray(values, dtype=float))
    finite = finite[np.isfinite(finite)]
    top = float(finite.max()) if finite.size else 1.0
    if top == 0.0:
        return 4
    return int(min(6, max(0, 3 - math.floor(math.log10(top)))))


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
            (sample standard deviation over the folds, 0 for one fold),
            ``scores`` (one per fold), ``fit_time_mean``, ``score_time_mean``
            (seconds, mean over the folds).
        """
        rows = []
        for i, name in enumerate(self.names):
            s = self.scores[i]
            rows.append(
                {
                    "name": name,
                    "score_mean": float(np.mean(s)),
                    "score_std": float(np.std(s, ddof=1)) if len(s) > 1 else 0.0,
                    "scores": [float(v) for v in s],
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
            (:meth:`summary`), ``scores``, ``fit_times`` and ``score_times``
            (nested lists, estimator by fold), ``pairwise`` (a list of the
            tests' :meth:`~CorrectedTTestResult.to_dict`, each with ``a``,
            ``b`` and ``significant``) and ``warnings``.
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
            "pairwise": [
                {"a": a, "b": b, **t.to_dict(), "significant": t.significant(self.alpha)}
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
            verdict = "significant" if t.significant(self.alpha) else "not significant"
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
        dec = _decimals(self.scores)
        n_train = f"{int(np.min(self.n_train))}" + (f"-{int(np.max(self.n_train))}" if np.ptp(self.n_train) else "")
        n_test = f"{int(np.min(self.n_test))}" + (f"-{int(np.max(self.n_test))}" if np.ptp(self.n_test) else "")
        lines = [
            f"{self.scoring} over {self.n_folds} fold(s) of {self.cv}; {n_train} train / {n_test} test samples per fold"
        ]
        width = max(9, *(len(n) for n in self.names))
        summary = self.summary()
        ms = [f"{r['score_mean']:.{dec}f} ± {r['score_std']:.{dec}f}" for r in summary]
        msw = max(len("mean ± std"), *(len(m) for m in ms))
        head = f"{'estimator':<{width}} | {'mean ± std':>{msw}} | {'fit s':>8} {'score s':>8}"
        lines += ["", head, "-" * len(head)]
        for r, m in zip(summary, ms):
            lines.append(f"{r['name']:<{width}} | {m:>{msw}} | {r['fit_time_mean']:>8.3f} {r['score_time_mean']:>8.3f}")
        if per_fold:
            lines += ["", "Per-fold scores:"]
            for name, s in zip(self.names, self.scores):
                lines.append(f"  {name:<{width}} " + " ".join(f"{v:.{dec}f}" for v in s))
        if self.pairwise:
            ratio = next(iter(self.pairwise.values())).test_train_ratio
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
        elif len(self.names) > 1:
            lines += ["", "No paired tests: a test needs at least two folds."]
        return "\n".join(lines)

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
                f"| {r['name']} | {r['score_mean']:.{dec}f} ± {r['score_std']:.{dec}f} | "
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


def _named_estimators(estimators) -> tuple:
    """``(names, estimators)`` from a dict or a sequence of ``(name, estimator)`` pairs, checked."""
    if isinstance(estimators, dict):
        pairs = list(estimators.items())
    elif isinstance(estimators, (list, tuple)):
        pairs = list(estimators)
        for item in pairs:
            if not (isinstance(item, (list, tuple)) and len(item) == 2):
                raise TypeError(
                    f"estimators must be a dict of name -> estimator or a list of (name, estimator) pairs, "
                    f"got the item {item!r}."
                )
    else:
        raise TypeError(
            "estimators must be a dict of name -> estimator or a list of (name, estimator) pairs, "
            f"got {type(estimators).__name__}."
        )
    if not pairs:
        raise ValueError("estimators is empty: give at least one (name, estimator).")
    names = [p[0] for p in pairs]
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"estimator names must be non-empty strings, got {name!r}.")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"estimator names must be unique, got {', '.join(map(repr, dupes))} more than once.")
    for name, est in pairs:
        if not (hasattr(est, "fit") and hasattr(est, "get_params")) or isinstance(est, type):
            raise TypeError(
                f"estimator {name!r} is not a scikit-learn estimator instance (it needs fit and get_params), got {est!r}."
            )
    return names, [p[1] for p in pairs]


def _scoring_name(scoring) -> str:
    if scoring is None:
        return "score"
    if isinstance(scoring, str):
        return scoring
    func = getattr(scoring, "_score_func", scoring)
    return getattr(func, "__name__", type(scoring).__name__)


def _reseeded(estimator, seed):
    """``estimator`` with every ``random_state`` parameter (nested ones too) set to ``seed``."""
    if seed is None:
        return estimator
    keys = [k for k in estimator.get_params(deep=True) if k == "random_state" or k.endswith("__random_state")]
    if keys:
        estimator.set_params(**dict.fromkeys(keys, int(seed)))
    return estimator


def _fit_and_score(estimator, X, y, train, test, scorer, error_score, fit_params):
    """Fit on ``train``, score on ``test``: ``(score, fit seconds, score seconds, warnings)``."""
    from sklearn.utils import _safe_indexing

    X_tr, X_te = _safe_indexing(X, train), _safe_indexing(X, test)
    y_tr = None if y is None else _safe_indexing(y, train)
    y_te = None if y is None else _safe_indexing(y, test)
    fit_time = score_time = 0.0
    failure = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        try:
            estimator.fit(X_tr, y_tr, **fit_params)
            fit_time = time.perf_counter() - t0
            t1 = time.perf_counter()
            score = float(scorer(estimator, X_te, y_te))
            score_time = time.perf_counter() - t1
        except Exception as exc:
            if isinstance(error_score, str):  # "raise"
                raise
            fit_time = time.perf_counter() - t0
            score = float(error_score)
            failure = f"the fit or scoring failed and was scored {error_score}: {type(exc).__name__}: {exc}"
    messages = list(dict.fromkeys((w.category, str(w.message)) for w in caught))
    if failure is not None:
        from sklearn.exceptions import FitFailedWarning

        messages.append((FitFailedWarning, failure))
    return score, fit_time, score_time, messages


def compare_estimators(
    estimators,
    X,
    y=None,
    *,
    cv=5,
    scoring=None,
    groups=None,
    n_jobs=None,
    alpha: float = 0.05,
    fold_seed: int | None = None,
    error_score="raise",
    fit_params: dict | None = None,
    verbose: int = 0,
) -> ComparisonResult:
    """Cross-validate several estimators on the same folds and test every pair for a difference.

    The folds are drawn once (``check_cv`` with the first estimator deciding
    whether a classifier's stratified splitter applies) and every estimator is
    fitted, as a fresh clone, on every one of them, so the scores are paired
    by fold.  In each fold the estimators are fitted in an order rotated by
    one from the previous fold, so that a burst of load on a shared machine
    does not always hit the same estimator's times.  Every pair of estimators
    gets the corrected resampled t-test of :func:`corrected_resampled_ttest`
    (Nadeau and Bengio, 2003): the folds' training sets overlap, so the
    ordinary paired t-test would be anti-conservative.

    Parameters
    ----------
    estimators : dict or list of (str, estimator)
        The estimators by name (a dict, or ``(name, estimator)`` pairs);
        names must be unique.  They are cloned, never fitted themselves.
    X : array-like of shape (n_samples, n_features)
        The data.
    y : array-like of shape (n_samples,), default=None
        The targets.
    cv : int, cross-validation generator or iterable, default=5
        As in :func:`sklearn.model_selection.cross_validate`: an int is a
        (stratified, for a classifier with binary or multiclass ``y``)
        k-fold; a splitter such as
        :class:`~sklearn.model_selection.RepeatedStratifiedKFold` or
        :class:`~sklearn.model_selection.ShuffleSplit`; or an iterable of
        ``(train, test)`` index arrays.  Resolved once: all estimators see
        the same splits.
    scoring : str, callable or None, default=None
        One score, as in :func:`sklearn.metrics.check_scoring`: a scorer
        name (``'accuracy'``, ``'neg_mean_squared_error'``), a callable
        ``scorer(estimator, X, y)``, or None for each estimator's own
        ``score`` method.  Higher is better.
    groups : array-like of shape (n_samples,), default=None
        Group labels for group splitters
        (:class:`~sklearn.model_selection.GroupKFold`).
    n_jobs : int or None, default=None
        Number of (estimator, fold) fits run in parallel with joblib; None
        means one unless in a :func:`joblib.parallel_backend` context, -1
        all processors.  Timings are measured inside each job, so parallel
        jobs compete for the processors and slow each other down.
    alpha : float, default=0.05
        Significance level of the verdicts the tables print (the p-values
        do not depend on it).
    fold_seed : int or None, default=None
        When an int, the clones fitted on fold ``j`` have every
        ``random_state`` parameter (nested ones included) set to
        ``fold_seed + j``, the same for all estimators: every fold draws
        new random weights, so the scores (and the test) include that
        variability.  None keeps the estimators' own ``random_state``.
    error_score : 'raise' or float, default='raise'
        ``'raise'``: an error in a fit or in scoring propagates.  A number
        (e.g. ``np.nan``) is recorded as the score instead, with a
        :class:`~sklearn.exceptions.FitFailedWarning`; a NaN score makes that
        estimator's tests NaN.
    fit_params : dict or None, default=None
        Keyword arguments passed to every ``fit`` (not indexed by fold: pass
        only arguments that do not depend on the samples).
    verbose : int, default=0
        joblib's verbosity.

    Returns
    -------
    ComparisonResult
        Scores, fit and scoring times per estimator and fold, the fold sizes
        and ``pairwise`` tests; print it for a table, ``to_dict`` for all
        numbers, :func:`sk_deq.plotting.plot_paired_scores` to draw the
        per-fold scores.

    Raises
    ------
    ValueError
        If ``estimators`` is empty or repeats a name, if ``scoring`` names
        more than one metric, or if ``alpha`` is not in (0, 1).
    TypeError
        If ``estimators`` is not a dict or a list of pairs, or holds
        something that is not an estimator instance.

    See Also
    --------
    corrected_resampled_ttest : The test applied to every pair.
    sklearn.model_selection.cross_validate : One estimator, several metrics.

    Notes
    -----
    With a single split (e.g. ``ShuffleSplit(n_splits=1)``) there are no
    tests: ``pairwise`` is empty and a warning says so.  With many estimators
    there are many pairs: the p-values are not adjusted for multiple
    comparisons, so divide ``alpha`` by the number of pairs you look at
    (Bonferroni) if you scan them all.

    References
    ----------
    C. Nadeau and Y. Bengio, "Inference for the Generalization Error",
    *Machine Learning* 52(3):239-281, 2003.

    R. R. Bouckaert and E. Frank, "Evaluating the Replicability of
    Significance Tests for Comparing Learning Algorithms", *PAKDD 2004*,
    LNCS 3056, pp. 3-12.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.dummy import DummyClassifier
    >>> from sklearn.linear_model import LogisticRegression
    >>> from sk_deq.model_selection import compare_estimators
    >>> X, y = load_iris(return_X_y=True)
    >>> res = compare_estimators(
    ...     {"logistic": LogisticRegression(max_iter=500), "dummy": DummyClassifier()}, X, y, cv=5
    ... )
    >>> res.scores.shape
    (2, 5)
    >>> t = res.test("logistic", "dummy")
    >>> round(t.mean_difference, 2), t.pvalue < 0.05
    (0.64, True)
    """
    from sklearn.base import clone, is_classifier
    from sklearn.metrics import check_scoring
    from sklearn.model_selection import check_cv
    from sklearn.utils import indexable
    from sklearn.utils.parallel import Parallel, delayed

    names, ests = _named_estimators(estimators)
    if isinstance(scoring, (list, tuple, set, dict)):
        raise ValueError(
            "scoring must name one metric (a string, a callable or None); call compare_estimators once per metric."
        )
    if not (isinstance(alpha, numbers.Real) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}.")
    if fold_seed is not None and (isinstance(fold_seed, bool) or not isinstance(fold_seed, numbers.Integral)):
        raise ValueError(f"fold_seed must be None or an integer, got {fold_seed!r}.")
    if not (error_score == "raise" or (isinstance(error_score, numbers.Real) and not isinstance(error_score, bool))):
        raise ValueError(f"error_score must be 'raise' or a number, got {error_score!r}.")
    fit_params = dict(fit_params or {})

    X, y, groups = indexable(X, y, groups)
    splitter = check_cv(cv, y, classifier=is_classifier(ests[0]))
    splits = [(np.asarray(tr), np.asarray(te)) for tr, te in splitter.split(X, y, groups)]
    if not splits:
        raise ValueError(f"cv produced no splits: {cv!r}.")
    scorers = [check_scoring(est, scoring=scoring) for est in ests]

    n_est, n_folds = len(ests), len(splits)
    jobs = []
    for j in range(n_folds):
        for k in range(n_est):
            i = (j + k) % n_est  # the order rotates from fold to fold
            jobs.append((i, j))
    out = Parallel(n_jobs=n_jobs, verbose=verbose)(
        delayed(_fit_and_score)(
            _reseeded(clone(ests[i]), None if fold_seed is None else fold_seed + j),
            X,
            y,
            splits[j][0],
            splits[j][1],
            scorers[i],
            error_score,
            fit_params,
        )
        for i, j in jobs
    )
    scores = np.empty((n_est, n_folds))
    fit_times = np.empty((n_est, n_folds))
    score_times = np.empty((n_est, n_folds))
    caught = [[[] for _ in range(n_folds)] for _ in range(n_est)]
    for (i, j), (score, fit_s, score_s, messages) in zip(jobs, out):
        scores[i, j], fit_times[i, j], score_times[i, j] = score, fit_s, score_s
        caught[i][j] = messages
    n_train = np.array([len(tr) for tr, _ in splits])
    n_test = np.array([len(te) for _, te in splits])

    pairwise = {}
    if n_folds >= 2:
        for ia in range(n_est):
            for ib in range(ia + 1, n_est):
                pairwise[(names[ia], names[ib])] = corrected_resampled_ttest(scores[ia], scores[ib], n_train, n_test)
    elif n_est > 1:
        warnings.warn(
            "compare_estimators: cv gave a single split, so no paired test can be made; use at least two folds.",
            UserWarning,
            stacklevel=2,
        )
    # The warnings of the fits, once each per estimator, with their category
    # (those of parallel jobs would otherwise be lost).
    seen = set()
    for i, name in enumerate(names):
        for j in range(n_folds):
            for category, text in caught[i][j]:
                if (name, category, text) not in seen:
                    seen.add((name, category, text))
                    warnings.warn(f"{name} (fold {j}): {text}", category, stacklevel=2)
    return ComparisonResult(
        names=names,
        scores=scores,
        fit_times=fit_times,
        score_times=score_times,
        n_train=n_train,
        n_test=n_test,
        scoring=_scoring_name(scoring),
        cv=f"{n_folds} given splits" if type(splitter).__name__ == "_CVIterableWrapper" else repr(splitter),
        alpha=float(alpha),
        pairwise=pairwise,
        warnings=[[[f"{cat.__name__}: {msg}" for cat, msg in fold] for fold in est] for est in caught],
    )
