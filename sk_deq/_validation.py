"""Validation of the samples ``X`` of the estimators and transformers: numpy arrays and torch tensors.

:func:`validate_samples` is scikit-learn's ``validate_data`` for every
input but a torch tensor, which it validates with torch operations where
it lies (CPU or GPU) and returns as it is, without a copy to numpy: two
dimensions, a floating dtype, at least ``ensure_min_samples`` rows and one
column, finite values (one host read of one boolean), and the number of
features of the fit.  A faulty tensor gets scikit-learn's own error: it is
then copied to numpy and validated by scikit-learn.  ``y`` and
``sample_weight`` are validated by scikit-learn as usual (tensors included:
they are small and converted to numpy).  Torch is never imported here.
"""

from __future__ import annotations

import sys

import numpy as np
from sklearn.utils import check_consistent_length
from sklearn.utils.validation import _check_y, validate_data

__all__ = ["is_tensor", "reject_meta", "to_numpy", "validate_samples"]

#: The ``check_params`` of ``validate_data`` that concern ``y`` (passed to scikit-learn's ``_check_y``).
_Y_PARAMS = ("multi_output", "y_numeric")


def is_tensor(X) -> bool:
    """Whether ``X`` is a :class:`torch.Tensor` (False without importing torch when it was never imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(X, torch.Tensor)


def reject_meta(value, name: str, owner: str | None = None) -> None:
    """Raise a ``ValueError`` for a tensor on torch's ``meta`` device: it has a shape but no values to compute with.

    Torch's own errors for one name ``.item()`` or suggest ``Tensor.cpu()``,
    which cannot copy values that do not exist.
    """
    if is_tensor(value) and value.device.type == "meta":
        who = f"{owner}: " if owner else ""
        raise ValueError(
            f"{who}{name} is a tensor on the 'meta' device, which holds a shape but no values; pass one with its "
            "data (a CPU or CUDA tensor, or a numpy array)."
        )


def to_numpy(X) -> np.ndarray:
    """``X`` as a numpy array: a tensor detached and copied to the host (a CPU tensor's memory is shared)."""
    return X.detach().cpu().numpy() if is_tensor(X) else np.asarray(X)


def validate_samples(estimator, X, y="no_validation", *, reset: bool, **check_params):
    """``validate_data(estimator, X, y, reset=reset, **check_params)``, a torch tensor ``X`` kept a tensor.

    Parameters
    ----------
    estimator : BaseEstimator
        The estimator (its ``n_features_in_`` and ``feature_names_in_`` are
        set with ``reset`` and checked without).
    X : array-like or torch.Tensor of shape (n_samples, n_features)
        The samples.  A tensor must have a floating dtype; one that
        requires grad is detached.
    y : array-like, default='no_validation'
        Targets, validated by scikit-learn (``multi_output``, ``y_numeric``
        of ``check_params``).
    reset : bool
        Whether this is a fit.
    **check_params
        ``validate_data``'s; of them a tensor uses ``ensure_min_samples``
        (default 1), and the rest only to raise scikit-learn's error for a
        faulty tensor.

    Returns
    -------
    X or (X, y)
        As ``validate_data`` returns them; ``X`` is the (detached) tensor,
        on its own device, when it was given one.

    Raises
    ------
    TypeError
        For a tensor of an integer, boolean or complex dtype.
    ValueError
        For a tensor that is not 2-D, has too few samples or no feature,
        holds NaN or infinity, or has another number of features than the
        fit: scikit-learn's messages; for ``X`` or ``y`` on torch's
        ``meta`` device (no values).
    """
    owner = type(estimator).__name__
    reject_meta(X, "X", owner)
    reject_meta(y, "y", owner)
    if not is_tensor(X):
        return validate_data(estimator, X, y, reset=reset, **check_params)
    X = X.detach()
    if not X.dtype.is_floating_point:
        raise TypeError(
            f"{owner} takes torch tensors of a floating dtype (float32 or float64), got X of "
            f"dtype {X.dtype}; convert it with X.float() or X.double()."
        )
    faulty = X.ndim != 2 or X.shape[0] < check_params.get("ensure_min_samples", 1) or X.shape[1] < 1
    if faulty or not bool(X.isfinite().all()):  # scikit-learn's error, on a numpy copy
        validate_data(estimator, to_numpy(X), y, reset=reset, **check_params)
        raise ValueError(f"X of shape {tuple(X.shape)} is not a finite 2-D array of samples.")  # not reached
    validate_data(estimator, X, reset=reset, skip_check_array=True)  # feature names and n_features_in_
    if isinstance(y, str) and y == "no_validation":
        return X
    y = _check_y(y, **{k: check_params[k] for k in _Y_PARAMS if k in check_params}, estimator=estimator)
    check_consistent_length(X, y)
    return X, y
