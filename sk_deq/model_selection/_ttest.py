"""The corrected resampled t-test of Nadeau and Bengio (2003), for scores paired by fold.

Public through :mod:`sk_deq.model_selection`, which documents why the test is
corrected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


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
    try:
        a = np.asarray(scores_a, dtype=float)
        b = np.asarray(scores_b, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"scores_a and scores_b must be numbers, got {scores_a!r} and {scores_b!r}.") from None
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
