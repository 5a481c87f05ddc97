"""scikit-learn's estimator checks on every estimator at its defaults (width 1024, the default solver and readout).

The other test modules run the checks on small networks and several
configurations; these show that what the user guide says ("they pass its
estimator checks") holds for the estimators as a user constructs them.
"""

import warnings

import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

from sk_deq import (
    DEQClassifier,
    DEQRegressor,
    ExplicitClassifier,
    ExplicitRegressor,
    ImplicitCKNystroem,
    ImplicitCKTransformer,
    MatchedExplicitClassifier,
    MatchedExplicitRegressor,
)

pytestmark = pytest.mark.heavy

DEFAULTS = [
    DEQClassifier(),
    MatchedExplicitClassifier(),
    ExplicitClassifier(),
    DEQRegressor(),
    MatchedExplicitRegressor(),
    ExplicitRegressor(),
    ImplicitCKTransformer(),
    ImplicitCKNystroem(),
]


@parametrize_with_checks(DEFAULTS)
def test_estimator_checks_at_the_defaults(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)
