"""Validation of the data: samples (arrays, pandas, torch tensors), missing values, sample and class weights, labels, flags."""

from __future__ import annotations

import math
import sys
import warnings
from numbers import Real
from typing import Literal, overload

import numpy as np
from sklearn.exceptions import DataConversionWarning
from sklearn.utils import check_consistent_length
from sklearn.utils.validation import _check_sample_weight, _check_y, validate_data


from ._params import _outside_stacklevel

__all__ = [
    "KERNEL_MATRIX_DASK_ADVICE",
    "is_dask_collection",
    "reject_dask",
    "check_bool",
    "check_label_vector",
    "check_targets",
    "check_samples",
    "check_class_weight",
    "checked_weights",
    "is_tensor",
    "reject_meta",
    "reject_missing",
    "to_numpy",
    "validate_samples",
]


#: The ``check_params`` of ``validate_data`` that concern ``y`` (passed to scikit-learn's ``_check_y``).
_Y_PARAMS = ("multi_output", "y_numeric")


def is_tensor(X) -> bool:
    """Whether ``X`` is a :class:`torch.Tensor` (False without importing torch when it was never imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(X, torch.Tensor)


def is_dask_collection(X) -> bool:
    """Whether ``X`` is a Dask collection (array, dataframe, bag, delayed), without importing dask.

    Parameters
    ----------
    X : object
        Anything.

    Returns
    -------
    bool
        True for an object of one of dask's own types.
    """
    return type(X).__module__.partition(".")[0] in {"dask", "dask_expr"}


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


#: What :func:`reject_missing` calls a missing value.
_MISSING = "None, NaN, pd.NA or NaT"


def reject_missing(values, name: str, owner: str | None = None) -> None:
    """Raise a ``ValueError`` for missing values or dates in a pandas input or a numpy array of objects or dates.

    Missing values there (``None``, ``NaN``, ``pd.NA``, ``NaT``) would reach
    numpy's and scikit-learn's conversions, whose errors speak of dtype
    promotion, of ``float()`` of ``NAType`` or of an unknown label type (or
    which turn ``None`` into a NaN after scikit-learn's own check); the
    message here names the first one's row (and column) and counts them.  A
    column of dates or durations without missing values is refused as not
    numbers.  Lists are read as arrays of objects; numeric numpy arrays and
    tensors pass untouched: scikit-learn checks them for NaN itself.
    """
    pd = sys.modules.get("pandas")
    if isinstance(values, (list, tuple)):
        try:
            values = np.asarray(values, dtype=object)
        except ValueError:  # ragged: scikit-learn's error says so
            return
    if pd is not None and isinstance(values, (pd.DataFrame, pd.Series)):
        frame = values if isinstance(values, pd.DataFrame) else values.to_frame()
        missing, rows, columns = frame.isna().to_numpy(), frame.index, frame.columns
        dates = [c for c, dtype in frame.dtypes.items() if getattr(dtype, "kind", "") in "mM"]
    elif isinstance(values, np.ndarray) and values.dtype.kind in "OmM":
        missing = _missing_mask(values, pd).reshape(len(values), -1)
        rows, columns = range(len(values)), range(missing.shape[1])
        dates = list(columns) if values.dtype.kind in "mM" else []
    else:
        return
    who = f"{owner}: " if owner else ""
    if missing.any():
        row, col = np.argwhere(missing)[0]
        where = f"row {rows[row]!r}" + (f", column {columns[col]!r}" if missing.shape[1] > 1 else "")
        remedy = (
            "every sample needs a target: drop the samples without one"
            if name == "y"
            else "drop those samples or impute the values (sklearn.impute.SimpleImputer) first"
        )
        count = int(missing.sum())
        raise ValueError(
            f"{who}{name} holds {count} missing value{'s' * (count > 1)} ({_MISSING}), the first at {where}: {remedy}."
        )
    if dates:
        raise ValueError(
            f"{who}{name} holds dates or durations (column {dates[0]!r}), not numbers: convert them to numbers first."
        )


def _missing_mask(values: np.ndarray, pd) -> np.ndarray:
    """Where an array of objects, dates or durations holds a missing value (pandas' rule where it is imported)."""
    if pd is not None:
        return np.asarray(pd.isna(values), dtype=bool)
    if values.dtype.kind in "mM":
        return np.isnat(values)
    return np.frompyfunc(_is_missing, 1, 1)(values).astype(bool)


def _is_missing(v) -> bool:
    if isinstance(v, (float, np.floating)):
        return math.isnan(v)
    return v is None or (isinstance(v, (np.datetime64, np.timedelta64)) and bool(np.isnat(v)))


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
        For a tensor of an integer, boolean or complex dtype; for a Dask
        collection (:func:`reject_dask`).
    ValueError
        For a tensor that is not 2-D, has too few samples or no feature,
        holds NaN or infinity, or has another number of features than the
        fit: scikit-learn's messages; for ``X`` or ``y`` on torch's
        ``meta`` device (no values), and for missing values in a pandas
        ``X`` or ``y`` or an array of objects (:func:`reject_missing`).
    """
    owner = type(estimator).__name__
    reject_dask(estimator, X=X, y=y, reset=reset)
    reject_meta(X, "X", owner)
    reject_meta(y, "y", owner)
    reject_missing(X, "X", owner)
    if not (isinstance(y, str) and y == "no_validation"):
        reject_missing(y, "y", owner)
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


#: What to do with a Dask array that an estimator cannot take lazily, unless its class says better (``_DASK_ADVICE``).
_DASK_ADVICE = (
    "Compute the rows it needs first (X.compute() where it fits in memory, or a sample of its rows); see the user "
    "guide's 'Larger than memory'."
)

#: The same for the kernel functions and the Gaussian-process kernel, which return a whole kernel matrix.
KERNEL_MATRIX_DASK_ADVICE = (
    "A kernel matrix of its rows is held whole in memory: compute it on X.compute() where that fits; for more rows, "
    "ImplicitCKTransformer.transform maps a Dask array lazily, ImplicitCKNystroem gives features of any number of "
    "rows, and ImplicitCKRidge fits a Dask array on a distributed cluster."
)


def reject_dask(estimator, *, reset: bool, **values) -> None:
    """A ``TypeError`` naming the way out for a Dask collection among ``values``: never loaded here in silence.

    The estimators' lazy paths (``transform``, ``predict``... of a Dask
    array) handle Dask arrays before validating; anything else that would
    need all of it in this process's memory (a fit that keeps its data, a
    method without a lazy path) is refused.  The advice is the class's
    ``_DASK_ADVICE`` where it has one.
    """
    for name, value in values.items():
        if is_dask_collection(value):
            from .._dask import dask_refusal

            advice = getattr(estimator, "_DASK_ADVICE", _DASK_ADVICE)
            raise dask_refusal(type(estimator).__name__, name, value, "fit" if reset else "use here", advice)


def check_samples(X, name: str = "X", *, n_features: int | None = None, caller: str | None = None) -> np.ndarray:
    """Validate samples for the kernel functions: a dense, finite, non-empty 2-D float64 array.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The samples.
    name : str, default='X'
        How error messages call the array.
    n_features : int, optional
        The number of features it must have (that of the other argument).
    caller : str, optional
        Name of the function or class, for error messages.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)

    Raises
    ------
    ValueError
        For NaN or infinity, sparse, empty or non-2-D input, non-numeric
        values, or the wrong number of features.
    """
    from sklearn.utils.validation import check_array

    if is_dask_collection(X):
        from .._dask import dask_refusal

        raise dask_refusal(caller or "The kernel", name, X, "compute a kernel matrix", KERNEL_MATRIX_DASK_ADVICE)
    reject_meta(X, name, caller)
    reject_missing(X, name, caller)
    X = check_array(
        X,
        accept_sparse=False,
        dtype=np.float64,
        ensure_2d=True,
        ensure_all_finite=True,
        input_name=name,
        estimator=caller,
    )
    if n_features is not None and X.shape[1] != n_features:
        where = f" ({caller})" if caller else ""
        raise ValueError(f"{name} has {X.shape[1]} features, but X has {n_features}{where}: they must match.")
    return X


def checked_weights(sample_weight, X, name: str):
    """Validated ``sample_weight`` as float64 (None stays None); all zero is an error naming ``name``."""
    if sample_weight is None:
        return None
    if is_dask_collection(sample_weight):
        from .._dask import dask_refusal

        raise dask_refusal(name, "sample_weight", sample_weight, "fit", "Compute it first (sample_weight.compute()).")
    reject_meta(sample_weight, "sample_weight", name)
    sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
    if not np.any(sample_weight > 0):
        raise ValueError(f"{name}: all sample weights are zero; at least one must be positive.")
    return sample_weight


def check_class_weight(class_weight, owner: str) -> None:
    """Raise a ``ValueError`` naming the class and its weight for a ``class_weight`` dict weight that is not a finite,
    non-negative real number (None and ``'balanced'`` pass: their weights are computed)."""
    if not isinstance(class_weight, dict):
        return
    for label, weight in class_weight.items():
        if isinstance(weight, (bool, np.bool_)):
            why = "is a boolean, not a number"
        elif not isinstance(weight, Real):
            why = "is not a number"
        elif not math.isfinite(weight):
            why = "is not finite"
        elif weight < 0:
            why = "is negative"
        else:
            continue
        raise ValueError(
            f"{owner}: class_weight gives class {label!r} the weight {weight!r}, which {why}; class weights must be "
            "finite non-negative numbers (0 leaves a class out of the loss)."
        )


def check_label_vector(y, name: str = "y", owner: str | None = None):
    """``y`` with one entry per sample: a column vector raveled with scikit-learn's ``DataConversionWarning``.

    For the code that compares labels with predictions itself: a 2-D ``y``
    of one column would otherwise broadcast against 1-D predictions (every
    prediction compared with every label).  Numpy arrays, sequences and
    torch tensors (kept tensors) alike.

    Raises
    ------
    ValueError
        For a ``y`` that is neither 1-D nor a column, naming ``name``.
    """
    shape = tuple(y.shape) if hasattr(y, "shape") else np.shape(y)
    if len(shape) == 2 and shape[1] == 1:
        warnings.warn(
            f"A column-vector {name} was passed when a 1d array was expected. Please change the shape of {name} "
            "to (n_samples, ), for example using ravel().",
            DataConversionWarning,
            stacklevel=_outside_stacklevel(),
        )
        return y.reshape(-1) if hasattr(y, "reshape") else np.ravel(y)
    if len(shape) != 1:
        who = f"{owner}: " if owner else ""
        raise ValueError(f"{who}{name} must hold one label per sample, of shape (n_samples,); got shape {shape}.")
    return y


def check_targets(y, n_samples: int, name: str = "y", *, labels: bool = True):
    """Targets of ``n_samples`` samples, one entry each; with ``labels``, one label each (:func:`check_label_vector`).

    For code that takes targets straight from its caller (:func:`sk_deq.nn.train`):
    torch's losses would refuse a column of labels from deep inside, and a
    comparison with predicted labels would broadcast.
    """
    if labels:
        y = check_label_vector(y, name)
    if len(y) != n_samples:
        raise ValueError(f"{name} has {len(y)} entries for {n_samples} samples: it needs one per sample.")
    return y


@overload
def check_bool(value, name: str, owner: str | None = None, *, allow_none: Literal[False] = False) -> bool: ...


@overload
def check_bool(value, name: str, owner: str | None = None, *, allow_none: bool) -> bool | None: ...


def check_bool(value, name: str, owner: str | None = None, *, allow_none: bool = False) -> bool | None:
    """``value`` if it is a bool (numpy's included), else a ``TypeError`` naming ``name``.

    A string such as ``'False'`` is true to python, so a flag taken by
    truth would turn it on; an integer 0 or 1 is refused the same way.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if value is None and allow_none:
        return None
    who = f"{owner}: " if owner else ""
    kinds = "True, False or None" if allow_none else "True or False"
    raise TypeError(f"{who}{name} must be a bool ({kinds}), got {value!r} of type {type(value).__name__}.")
