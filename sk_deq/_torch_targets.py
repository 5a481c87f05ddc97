"""Targets and weights of the torch estimators: labels, sample and class weights, the validation split.

:class:`Data` holds what one fit or ``partial_fit`` call trains on: inputs,
encoded targets and the training weights (sample weights times class
weights).  Weights are rescaled by a power of two (:func:`unit_max`), exact
and all below 2, so that their sums cannot overflow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets, unique_labels
from sklearn.utils.validation import _check_sample_weight

from ._inputs import power_of_two_scale
from ._validation import reject_meta

__all__ = ["Data", "checked_weights", "class_weighted", "sorted_labels", "split_validation", "unit_max"]


@dataclass
class Data:
    """Inputs, encoded targets and training weights (None: all equal) of one split."""

    X: np.ndarray
    y: np.ndarray
    weight: np.ndarray | None

    def __len__(self):
        return len(self.y)

    def subset(self, rows) -> Data:
        """The rows ``rows`` (indices or a mask)."""
        return Data(self.X[rows], self.y[rows], None if self.weight is None else self.weight[rows])

    def positive(self) -> Data:
        """The rows of positive weight (all rows when unweighted)."""
        return self if self.weight is None else self.subset(self.weight > 0)


def unit_max(weights: np.ndarray) -> np.ndarray:
    """Non-negative ``weights`` divided by a power of two near their largest: exact, all below 2, sums finite."""
    return weights / power_of_two_scale(weights)


def checked_weights(sample_weight, X, name: str, *, rescale: bool = True):
    """Validated ``sample_weight`` (None stays None); all zero is an error.

    With ``rescale`` they are divided by :func:`unit_max`'s power of two:
    every use of the weights is a weighted average, which their scale does
    not change, and rescaled below 2 their sums cannot overflow.
    """
    if sample_weight is None:
        return None
    reject_meta(sample_weight, "sample_weight", name)
    sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
    if not np.any(sample_weight > 0):
        raise ValueError(f"{name}: all sample weights are zero; at least one must be positive.")
    return unit_max(sample_weight) if rescale else sample_weight


def sorted_labels(labels: np.ndarray, name: str) -> np.ndarray:
    """Classification targets checked and their sorted distinct labels, with scikit-learn's error for
    strings mixed with numbers (numpy's own sort would raise ``'<' not supported``)."""
    if labels.dtype == object and len({isinstance(v, str) for v in labels.ravel()}) > 1:
        raise ValueError(
            f"Mix of label input types (string and number) in {name}: "
            f"{sorted({type(v).__name__ for v in labels.ravel()})}. Use labels of one type."
        )
    try:
        check_classification_targets(labels)
        return unique_labels(labels)
    except TypeError as exc:
        raise ValueError(f"The labels of {name} cannot be ordered ({exc}); use labels of one type.") from None


def class_weighted(class_weight, classes, y, y_enc, sample_weight):
    """The training weights: ``sample_weight`` times the weight of every sample's class (None: all equal).

    ``class_weight`` as in :func:`sklearn.utils.class_weight.compute_class_weight`
    (``'balanced'`` counts ``sample_weight``); both factors are below 2,
    so their product cannot overflow.
    """
    if class_weight is None:
        return sample_weight
    _check_class_weight_labels(class_weight, classes)
    per_class = unit_max(compute_class_weight(class_weight, classes=classes, y=y, sample_weight=sample_weight))
    return per_class[y_enc] if sample_weight is None else sample_weight * per_class[y_enc]


def _check_class_weight_labels(class_weight, classes) -> None:
    """scikit-learn's rule for a ``class_weight`` dict, with a message naming the labels at fault.

    A dict that names labels ``y`` does not hold while it leaves classes of
    ``y`` out is an error, as in :func:`sklearn.utils.class_weight.compute_class_weight`
    (whose message names the classes left out, not the labels at fault); one
    that weighs every class of ``y`` may name more (a class missing from a
    cross-validation fold, say).
    """
    if not isinstance(class_weight, dict):
        return
    known = set(classes.tolist())
    unknown = [label for label in class_weight if label not in known]
    left_out = [c for c in classes.tolist() if c not in class_weight]
    if unknown and left_out:
        raise ValueError(
            f"class_weight names the label(s) {unknown!r}, which y does not hold (its classes are "
            f"{classes.tolist()!r}), and gives no weight to {left_out!r}: check the labels. A class_weight dict maps "
            "labels of y to weights; labels left out weigh 1, but a dict naming labels that y lacks must weigh "
            "every class of y (as in scikit-learn)."
        )


def split_validation(data: Data, fraction: float, seed: int, *, stratify: bool, owner: str):
    """Hold out ``fraction`` of ``data`` (stratified by its labels with ``stratify``); returns ``(train, valid)``."""
    idx = np.arange(len(data))
    labels = data.y if stratify else None
    try:
        train_idx, val_idx = train_test_split(idx, test_size=fraction, random_state=seed, stratify=labels)
    except ValueError:
        if labels is None:
            raise
        train_idx, val_idx = train_test_split(idx, test_size=fraction, random_state=seed)
    if len(val_idx) < 2:
        raise ValueError(
            "The validation set is too small (fewer than 2 samples). Increase "
            "'validation_fraction' or the size of your dataset, or set early_stopping=False."
        )
    train_set, valid_set = data.subset(train_idx), data.subset(val_idx)
    if stratify and len(np.unique(train_set.positive().y)) < 2:
        raise ValueError(
            f"After the validation split the training set holds only 1 class; {owner} needs "
            "more samples per class, or early_stopping=False."
        )
    if valid_set.weight is not None and not np.any(valid_set.weight > 0):
        raise ValueError(
            "All sample weights of the validation set are zero; use another random_state, a larger "
            "validation_fraction, or early_stopping=False."
        )
    return train_set, valid_set
