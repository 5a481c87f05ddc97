"""The scores of the package's estimators, safe at any scale of targets and weights.

:func:`r2_score_of` and :func:`accuracy_of` are the ``score`` of every
regressor and classifier: scikit-learn's R² and accuracy, computed on
values rescaled by powers of two (exact) so that targets beyond ``1e154``
and weights up to the largest float64 give the same score as in units.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import accuracy_score, r2_score
from sklearn.utils.validation import _check_sample_weight, check_array

from ._scaling import power_of_two_scale, unit_max
from ._validation import is_dask_collection, reject_meta

__all__ = ["accuracy_of", "r2_score_of"]


def r2_score_of(estimator, X, y, sample_weight=None) -> float:
    """R² of ``estimator.predict(X)`` against ``y``, averaged uniformly over the outputs.

    Any Dask collection among the arguments: the predictions are compared
    block by block where they are computed, and only sums come back
    (:func:`sk_deq._dask.lazy_score`).
    """
    if any(is_dask_collection(v) for v in (X, y, sample_weight)):
        from ._dask import lazy_score

        return lazy_score(estimator, X, y, sample_weight, "r2")
    reject_meta(y, "y", type(estimator).__name__)
    reject_meta(sample_weight, "sample_weight", type(estimator).__name__)
    pred = estimator.predict(X)
    true = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
    if sample_weight is not None:  # weights up to the largest float64: their sums stay finite
        sample_weight = unit_max(_check_sample_weight(sample_weight, true, dtype=np.float64))
    unit = max(float(power_of_two_scale(true)), float(power_of_two_scale(pred)))
    return float(r2_score(true / unit, pred / unit, sample_weight=sample_weight))


def accuracy_of(estimator, X, y, sample_weight=None) -> float:
    """The (weighted) fraction of ``estimator.predict(X)`` equal to ``y`` (Dask collections as :func:`r2_score_of`)."""
    if any(is_dask_collection(v) for v in (X, y, sample_weight)):
        from ._dask import lazy_score

        return lazy_score(estimator, X, y, sample_weight, "accuracy")
    reject_meta(y, "y", type(estimator).__name__)
    reject_meta(sample_weight, "sample_weight", type(estimator).__name__)
    if sample_weight is not None:
        sample_weight = unit_max(_check_sample_weight(sample_weight, X, dtype=np.float64))
    return float(accuracy_score(y, estimator.predict(X), sample_weight=sample_weight))
