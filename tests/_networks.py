"""The package's six network estimators, listed once for the tests that sweep them, and the quick network the
estimator tests fit (``small``)."""

from sk_deq import (
    DEQClassifier,
    DEQRegressor,
    ExplicitClassifier,
    ExplicitRegressor,
    MatchedExplicitClassifier,
    MatchedExplicitRegressor,
)

#: The three classifiers and the three regressors, in the same order of kinds.
CLASSIFIERS = (DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier)
REGRESSORS = (DEQRegressor, ExplicitRegressor, MatchedExplicitRegressor)
#: All six, each classifier before its regressor twin.
NETWORKS = tuple(cls for pair in zip(CLASSIFIERS, REGRESSORS) for cls in pair)


def small(cls, **kw):
    """``cls`` at width 32 with 30 iterations and ``random_state=0``, ``kw`` on top: the quick network of the tests."""
    params = dict(n_hidden=32, max_iter=30, random_state=0)
    params.update(kw)
    return cls(**params)
