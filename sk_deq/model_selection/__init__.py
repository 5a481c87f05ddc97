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
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from ._comparison import ComparisonResult
from ._ttest import CorrectedTTestResult, corrected_resampled_ttest

if TYPE_CHECKING:
    from sklearn.model_selection import BaseCrossValidator

__all__ = [
    "ComparisonResult",
    "CorrectedTTestResult",
    "compare_estimators",
    "corrected_resampled_ttest",
]


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


def _default_metric(estimator) -> str:
    """The metric of ``estimator.score``: accuracy for a classifier, R^2 for a regressor, else its class's own."""
    from sklearn.utils import get_tags

    kind = get_tags(estimator).estimator_type
    return {"classifier": "accuracy", "regressor": "R^2"}.get(kind, f"{type(estimator).__name__}.score")


def _check_one_default_metric(names, estimators) -> None:
    """Raise when ``scoring=None`` would pair the different metrics of the estimators' own ``score`` methods."""
    metrics = {name: _default_metric(est) for name, est in zip(names, estimators)}
    if len(set(metrics.values())) > 1:
        listed = ", ".join(f"{name!r} scores {metric}" for name, metric in metrics.items())
        raise ValueError(
            f"scoring=None compares each estimator's own score method, and these measure different metrics "
            f"({listed}); pass one scoring= for all of them, e.g. scoring='accuracy' or scoring='r2'."
        )


def _check_fold_seed(fold_seed, n_folds=None) -> None:
    """``fold_seed + j`` must be a valid ``random_state``, an integer in [0, 2**32 - 1], on every fold ``j``."""
    if fold_seed is None:
        return
    if isinstance(fold_seed, bool) or not isinstance(fold_seed, numbers.Integral) or fold_seed < 0:
        raise ValueError(
            f"fold_seed must be None or a non-negative integer (fold j uses random_state=fold_seed + j), "
            f"got {fold_seed!r}."
        )
    if n_folds is not None and fold_seed + n_folds - 1 > 2**32 - 1:
        raise ValueError(
            f"fold_seed must be at most {2**32 - n_folds} with {n_folds} folds (fold j uses random_state="
            f"fold_seed + j, and a random_state is at most 2**32 - 1), got {fold_seed!r}."
        )


#: scikit-learn's scorers of binary targets, with the names of their forms for multiclass ones.
_MULTICLASS_FORMS = {
    "roc_auc": ("roc_auc_ovr", "roc_auc_ovo", "roc_auc_ovr_weighted", "roc_auc_ovo_weighted"),
    **{
        name: tuple(f"{name}_{avg}" for avg in ("macro", "micro", "weighted"))
        for name in ("f1", "precision", "recall", "jaccard")
    },
}


def _check_binary_scoring(scoring, y) -> None:
    """Raise, before any fit, where ``scoring`` names a binary metric and ``y`` has more than two classes."""
    from sklearn.utils.multiclass import type_of_target

    if not (isinstance(scoring, str) and scoring in _MULTICLASS_FORMS) or y is None:
        return
    if type_of_target(y) == "multiclass":
        forms = _MULTICLASS_FORMS[scoring]
        raise ValueError(
            f"scoring={scoring!r} scores binary targets, and y has {len(np.unique(y))} classes: use a multiclass "
            f"form of it, {', '.join(map(repr, forms))} (e.g. scoring={forms[0]!r})."
        )


def _check_arguments(names, ests, y, scoring, alpha: float, fold_seed, error_score, fit_params, verbose) -> None:
    """Check :func:`compare_estimators`' arguments other than the data and the splits."""
    from sklearn.base import is_classifier, is_regressor

    if isinstance(scoring, (list, tuple, set, dict)):
        raise ValueError(
            "scoring must name one metric (a string, a callable or None); call compare_estimators once per metric."
        )
    if scoring is None:
        _check_one_default_metric(names, ests)
    _check_binary_scoring(scoring, y)
    if not (isinstance(alpha, numbers.Real) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}.")
    _check_fold_seed(fold_seed)
    if not (error_score == "raise" or (isinstance(error_score, numbers.Real) and not isinstance(error_score, bool))):
        raise ValueError(f"error_score must be 'raise' or a number, got {error_score!r}.")
    if fit_params is not None and not isinstance(fit_params, dict):
        raise TypeError(f"fit_params must be None or a dict of keyword arguments of fit, got {fit_params!r}.")
    if isinstance(verbose, bool) or not isinstance(verbose, numbers.Integral) or verbose < 0:
        raise ValueError(f"verbose must be a non-negative integer, got {verbose!r}.")
    supervised = [n for n, e in zip(names, ests) if is_classifier(e) or is_regressor(e)]
    if y is None and supervised:
        raise ValueError(f"y is None, but {', '.join(map(repr, supervised))} need targets: pass y.")


def _rewarn(names, caught) -> None:
    """Warn the fits' warnings again, once each per estimator, with their category (parallel jobs' would be lost)."""
    seen = set()
    for name, folds in zip(names, caught):
        for j, messages in enumerate(folds):
            for category, text in messages:
                if (name, category, text) not in seen:
                    seen.add((name, category, text))
                    warnings.warn(f"{name} (fold {j}): {text}", category, stacklevel=3)


def _checked_splits(splitter, X, y, groups, cv) -> list:
    """The ``(train, test)`` index arrays of ``splitter``, each checked to be non-empty and within the samples."""
    from sklearn.utils.validation import _num_samples

    n = _num_samples(X)
    splits = []
    for j, (train, test) in enumerate(splitter.split(X, y, groups)):
        train, test = np.asarray(train), np.asarray(test)
        for what, idx in (("training", train), ("test", test)):
            if idx.ndim != 1 or len(idx) == 0 or not np.issubdtype(idx.dtype, np.integer):
                raise ValueError(
                    f"cv split {j}: the {what} set must be a non-empty 1-D array of sample indices, got {idx!r}."
                )
            if idx.min() < -n or idx.max() >= n:
                raise ValueError(f"cv split {j}: the {what} set holds indices outside [0, {n}), the samples of X.")
        splits.append((train, test))
    if not splits:
        raise ValueError(f"cv produced no splits: {cv!r}.")
    return splits


def _fit_and_score(estimator, X, y, train, test, scorer, error_score, fit_params):
    """Fit on ``train``, score on ``test``: ``(score, fit seconds, score seconds, warnings, failed)``.

    ``fit_params`` are indexed by ``train`` where they hold one value per sample.
    """
    from sklearn.utils import _safe_indexing
    from sklearn.utils.validation import _check_method_params

    X_tr, X_te = _safe_indexing(X, train), _safe_indexing(X, test)
    y_tr = None if y is None else _safe_indexing(y, train)
    y_te = None if y is None else _safe_indexing(y, test)
    fit_params = _check_method_params(X, params=fit_params, indices=train)
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
    return score, fit_time, score_time, messages, failure is not None


def _pair_tests(names, scores, failed, n_train, n_test) -> dict:
    """The corrected test of every pair on the folds where neither estimator failed (NaN with fewer than two)."""
    pairwise = {}
    for ia in range(len(names)):
        for ib in range(ia + 1, len(names)):
            ok = ~(failed[ia] | failed[ib])
            if ok.sum() >= 2:
                test = corrected_resampled_ttest(scores[ia, ok], scores[ib, ok], n_train[ok], n_test[ok])
            else:
                nan = math.nan
                k = int(ok.sum())
                test = CorrectedTTestResult(nan, nan, nan, nan, max(k - 1, 0), nan, k, nan, "two-sided")
            pairwise[(names[ia], names[ib])] = test
    return pairwise


def _run_folds(ests, X, y, splits, scorers, error_score, fit_params, fold_seed, n_jobs, verbose) -> tuple:
    """Fit and score a clone of every estimator on every split: ``(folds, caught)``.

    ``folds`` holds the arrays ``scores``, ``fit_times``, ``score_times`` and
    ``failed`` of shape (n_estimators, n_folds), by name; ``caught`` the
    warnings of every fit, by estimator and fold.

    In each fold the estimators run in an order rotated by one from the previous fold.
    """
    from sklearn.base import clone
    from sklearn.utils.parallel import Parallel, delayed

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
    folds = {name: np.empty((n_est, n_folds)) for name in ("scores", "fit_times", "score_times")}
    folds["failed"] = np.zeros((n_est, n_folds), dtype=bool)
    caught: list[list[list[str]]] = [[[] for _ in range(n_folds)] for _ in range(n_est)]
    for (i, j), (score, fit_s, score_s, messages, fail) in zip(jobs, out):
        for name, value in zip(("scores", "fit_times", "score_times", "failed"), (score, fit_s, score_s, fail)):
            folds[name][i, j] = value
        caught[i][j] = messages
    return folds, caught


def compare_estimators(
    estimators: dict[str, Any] | Sequence[tuple[str, Any]],
    X: ArrayLike,
    y: ArrayLike | None = None,
    *,
    cv: int | BaseCrossValidator | Iterable[tuple[ArrayLike, ArrayLike]] = 5,
    scoring: str | Callable[..., float] | None = None,
    groups: ArrayLike | None = None,
    n_jobs: int | None = None,
    alpha: float = 0.05,
    fold_seed: int | None = None,
    error_score: Literal["raise"] | float = "raise",
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
        ``score`` method, which is allowed only when those all measure the
        same metric (accuracy for classifiers, R^2 for regressors; other
        estimators: only one class).  Higher is better.
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
        ``fold_seed + j`` must stay within [0, 2**32 - 1].
    error_score : 'raise' or float, default='raise'
        ``'raise'``: an error in a fit or in scoring propagates.  A number
        (e.g. ``np.nan``) is recorded as the score instead, with a
        :class:`~sklearn.exceptions.FitFailedWarning`; the failed folds are
        recorded in ``failed``, left out of the means, and every pair is
        tested on the folds where both estimators succeeded (a pair with
        fewer than two has a NaN p-value, which the tables call undefined).
    fit_params : dict or None, default=None
        Keyword arguments passed to every ``fit``.  An array-like with one
        entry per sample (``sample_weight``) is indexed by each fold's
        training rows, as :func:`~sklearn.model_selection.cross_validate`
        does; other values are passed as they are.
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
        more than one metric, or is None while the estimators' own scores
        measure different metrics (a classifier and a regressor), or names
        a metric of binary targets (``'roc_auc'``, ``'f1'``...) for ``y``
        of more classes (the message names its multiclass forms), if
        ``alpha`` is not in (0, 1), or ``fold_seed`` is negative or too large.
    TypeError
        If ``estimators`` is not a dict or a list of pairs, or holds
        something that is not an estimator instance, or ``fit_params`` is
        not a dict.

    See Also
    --------
    corrected_resampled_ttest : The test applied to every pair (with its references).
    sklearn.model_selection.cross_validate : One estimator, several metrics.

    Notes
    -----
    With a single split (e.g. ``ShuffleSplit(n_splits=1)``) there are no
    tests: ``pairwise`` is empty and a warning says so.  With many estimators
    there are many pairs: the p-values are not adjusted for multiple
    comparisons, so divide ``alpha`` by the number of pairs you look at
    (Bonferroni) if you scan them all.

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
    from sklearn.base import is_classifier
    from sklearn.metrics import check_scoring
    from sklearn.model_selection import check_cv
    from sklearn.utils import indexable

    names, ests = _named_estimators(estimators)
    _check_arguments(names, ests, y, scoring, alpha, fold_seed, error_score, fit_params, verbose)
    fit_params = dict(fit_params or {})

    X, y, groups = indexable(X, y, groups)
    splitter = check_cv(cv, y, classifier=is_classifier(ests[0]))
    splits = _checked_splits(splitter, X, y, groups, cv)
    _check_fold_seed(fold_seed, len(splits))
    scorers = [check_scoring(est, scoring=scoring) for est in ests]

    n_est, n_folds = len(ests), len(splits)
    folds, caught = _run_folds(ests, X, y, splits, scorers, error_score, fit_params, fold_seed, n_jobs, verbose)
    n_train = np.array([len(tr) for tr, _ in splits])
    n_test = np.array([len(te) for _, te in splits])

    pairwise = {}
    if n_folds >= 2:
        pairwise = _pair_tests(names, folds["scores"], folds["failed"], n_train, n_test)
    elif n_est > 1:
        warnings.warn(
            "compare_estimators: cv gave a single split, so no paired test can be made; use at least two folds.",
            UserWarning,
            stacklevel=2,
        )
    _rewarn(names, caught)
    return ComparisonResult(
        names=names,
        **folds,
        n_train=n_train,
        n_test=n_test,
        scoring=_scoring_name(scoring),
        cv=f"{n_folds} given splits" if type(splitter).__name__ == "_CVIterableWrapper" else repr(splitter),
        alpha=float(alpha),
        pairwise=pairwise,
        warnings=[[[f"{cat.__name__}: {msg}" for cat, msg in fold] for fold in est] for est in caught],
    )
