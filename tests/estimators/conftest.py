"""Fixtures of the estimator tests."""

import warnings

import pytest
from sklearn.exceptions import ConvergenceWarning

from sk_deq import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier


@pytest.fixture(scope="session")
def fitted():
    """Three classifiers of width 128 fitted on 400 digits, 60 more digits and their decision functions: the
    models of the property tests of test_batch_invariance and test_classifier, fitted once for both (read only)."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        models = [
            DEQClassifier(n_hidden=128, random_state=0).fit(X[:400], y[:400]),
            MatchedExplicitClassifier("tanh", n_hidden=128, random_state=0).fit(X[:400], y[:400]),
            ExplicitClassifier(("relu", "relu"), n_hidden=128, random_state=0).fit(X[:400], y[:400] % 2),
        ]
    X_test = X[400:460]
    return models, X_test, [m.decision_function(X_test) for m in models]
