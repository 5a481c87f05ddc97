"""Dask arrays in the estimators: lazy row blocks, lazy scores, clear refusals; dask is never imported for other inputs.

``transform`` of a fitted transformer, and ``predict``, ``decision_function``,
``predict_proba`` (and the like) of a fitted estimator, given a Dask array
return a *lazy* Dask array (:func:`map_row_blocks`, :func:`lazy_method`):
nothing is computed when they are called.  Every row block becomes one task
that runs the estimator's ordinary in-memory method on that block, so a block
is validated (finite values, numeric dtype) when it is computed, and a bad
block raises then, with the in-memory error.  What can be checked without
computing anything (2-D, known chunk sizes, number of features, feature
names) is checked when the graph is built.

The fitted estimator enters the graph once, as one key, so that each worker
receives it once rather than with every block (it pickles to its fitted state:
for :class:`~sk_deq.ImplicitCKTransformer`, the scaled training samples and
their per-sample quantities).

``score`` given Dask arrays (:func:`lazy_score`) reduces the predictions
where they are computed: only sums reach this process.  Wherever an
estimator would need the whole array in memory (a fit that keeps its
training samples, a Gaussian-process kernel), :func:`dask_refusal` says so
and what to do instead, rather than load it.
"""

from __future__ import annotations

import copy
import math
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ._validation import is_dask_collection

__all__ = ["dask_refusal", "is_dask_collection", "lazy_method", "lazy_score", "map_row_blocks"]

#: The part of the warning scikit-learn gives when samples without feature names
#: reach an estimator fitted with names; given once for the whole array, then
#: silenced in the blocks (numpy arrays, which never have names).
_NO_NAMES_WARNING = "X does not have valid feature names"


def _check_dask_array(X, caller: str) -> None:
    """A clear error for a Dask collection ``map_row_blocks`` cannot take."""
    da = sys.modules.get("dask.array")
    if da is None or not isinstance(X, da.Array):
        raise TypeError(
            f"{caller} takes a Dask array, not a {type(X).__name__}; convert a Dask DataFrame with "
            "X.to_dask_array(lengths=True)."
        )
    if X.ndim != 2:
        raise ValueError(
            f"{caller} expects a 2-D Dask array of shape (n_samples, n_features), got {X.ndim}-D with "
            f"shape {X.shape}; reshape it (X.reshape(-1, 1) for a single feature)."
        )
    if any(math.isnan(c) for axis in X.chunks for c in axis):
        raise ValueError(
            f"{caller} needs the chunk sizes of the Dask array, which are unknown (shape {X.shape}, NaN "
            "in X.chunks): call X.compute_chunk_sizes() first, or build the array from a Dask DataFrame "
            "with df.to_dask_array(lengths=True)."
        )


def _apply_to_block(block, func, n_columns: int | None, dtype, quiet_names: bool):
    """``func(block)``; a block without rows gives an empty one (the ``transform`` of 0 samples raises)."""
    if block.shape[0] == 0:
        return np.empty((0,) if n_columns is None else (0, n_columns), dtype=dtype)
    if not quiet_names:
        return func(block)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_NAMES_WARNING, category=UserWarning)
        return func(block)


def map_row_blocks(X, method, n_columns: int | None, dtype=np.float64):
    """Apply a fitted estimator's in-memory ``method`` to every row block of a Dask array, lazily.

    The columns are first gathered in one chunk (the row chunks are kept),
    so that every task sees whole samples.  The graph holds a shallow copy of
    the estimator taken now, so that fitting it again before the result is
    computed does not change the result.

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        Samples, with known chunk sizes.
    method : bound method
        A fitted estimator's method (e.g. its ``transform``) that maps an
        ndarray of shape (n_rows, n_features) to one of shape
        (n_rows, n_columns) (or ``(n_rows,)``) of ``dtype``.  ``X`` must have
        the estimator's ``n_features_in_`` features.
    n_columns : int or None
        Number of output columns; None for one value per row (a 1-D output).
    dtype : dtype, default=float64
        The outputs' dtype.

    Returns
    -------
    dask.array.Array of shape (n_samples, n_columns) or (n_samples,)
        Not computed: the row chunks are those of ``X``.

    Raises
    ------
    TypeError
        If ``X`` is a Dask collection other than an array.
    ValueError
        If ``X`` is not 2-D, has unknown chunk sizes, or the wrong number of
        features (scikit-learn's own message).
    """
    import dask
    from sklearn.utils.validation import _check_feature_names, _check_n_features

    estimator = method.__self__
    _check_dask_array(X, f"{type(estimator).__name__}.{method.__name__}")
    _check_n_features(estimator, X, reset=False)
    _check_feature_names(estimator, X, reset=False)  # warns once if fitted with names
    X = X.rechunk({1: -1})
    # One key holds the estimator: sent once per worker, not with every block.
    func = dask.delayed(getattr(copy.copy(estimator), method.__name__), pure=True, traverse=False)
    dtype = np.dtype(dtype)
    shape = {"drop_axis": 1, "chunks": (X.chunks[0],)} if n_columns is None else {"chunks": (X.chunks[0], (n_columns,))}
    return X.map_blocks(
        _apply_to_block,
        func,
        n_columns,
        dtype,
        hasattr(estimator, "feature_names_in_"),
        dtype=dtype,
        meta=np.empty((0,) if n_columns is None else (0, 0), dtype=dtype),  # so that func is not called to guess it
        **shape,
    )


def lazy_method(X, method, output: Callable[[Any], tuple[int | None, Any]]):
    """A fitted estimator's ``method`` of the Dask array ``X``: a lazy Dask array (:func:`map_row_blocks`).

    ``output(estimator)`` says, from the fitted state, what the method
    returns: ``(n_columns, dtype)``, ``n_columns`` None for a 1-D output.
    An estimator that is not fitted raises scikit-learn's ``NotFittedError``.

    Examples
    --------
    >>> import numpy as np
    >>> import dask.array as da
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sk_deq._dask import lazy_method
    >>> scaler = StandardScaler().fit(np.arange(6.0).reshape(3, 2))
    >>> out = lazy_method(da.ones((4, 2), chunks=2), scaler.transform, lambda est: (2, np.float64))
    >>> out.chunks, out.compute(scheduler="sync").shape
    (((2, 2), (2,)), (4, 2))
    """
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(method.__self__)
    n_columns, dtype = output(method.__self__)
    return map_row_blocks(X, method, n_columns, dtype)


def dask_refusal(owner: str, name: str, value, action: str, advice: str) -> TypeError:
    """The error for a Dask collection given where all of it would be loaded into this process.

    Parameters
    ----------
    owner : str
        The estimator's or function's name.
    name : str
        The argument (``'X'``, ``'y'``...).
    value : object
        The Dask collection.
    action : str
        What was asked, e.g. ``'fit'``.
    advice : str
        What to do instead.

    Returns
    -------
    TypeError
        To raise.
    """
    kind = type(value).__name__
    return TypeError(
        f"{owner} does not take a Dask {kind} as {name} to {action}: that would load all of it into this "
        f"process's memory. {advice}"
    )


def _rows_like(value, name: str, chunks: tuple, owner: str):
    """``value`` (a Dask array or anything numpy takes) as a Dask array with the row chunks ``chunks``."""
    import dask.array as da

    n = int(sum(chunks))
    if is_dask_collection(value):
        if not isinstance(value, da.Array):
            raise TypeError(
                f"{owner}.score takes Dask arrays, not a {type(value).__name__} as {name}; convert a Dask "
                "DataFrame or Series with to_dask_array(lengths=True)."
            )
        if any(math.isnan(c) for c in value.chunks[0]):
            raise ValueError(
                f"{owner}.score needs the chunk sizes of {name}, which are unknown: call "
                f"{name}.compute_chunk_sizes() first."
            )
    else:
        value = np.asarray(value)
    if value.ndim == 0 or value.shape[0] != n:
        got = "a scalar" if value.ndim == 0 else str(value.shape[0])
        raise ValueError(f"Found input variables with inconsistent numbers of samples: [{n}, {got}] (X and {name}).")
    if isinstance(value, da.Array):
        return value.rechunk({0: chunks})
    return da.from_array(value, chunks=(chunks, *value.shape[1:]))


def lazy_score(estimator, X, y, sample_weight, metric: str) -> float:
    """``estimator.score(X, y, sample_weight)`` where any of them is a Dask array: the predictions reduced where computed.

    The predictions (:meth:`predict`, lazy for a Dask ``X``) are compared
    with ``y`` block by block; only sums come back.  ``metric``:
    ``'accuracy'`` (the weighted share of right labels) or ``'r2'``
    (scikit-learn's :func:`~sklearn.metrics.r2_score`, averaged uniformly
    over the outputs: 1 for a constant target predicted exactly, 0 for one
    predicted otherwise).  The sums run in another order than in memory:
    the score agrees with the in-memory one to rounding.

    Raises
    ------
    ValueError
        For lengths that differ, weights that are not finite or are negative.
    """
    import dask
    import dask.array as da

    owner = type(estimator).__name__
    pred = estimator.predict(X)
    if isinstance(pred, da.Array):
        chunks = pred.chunks[0]
    else:
        lazy = y if is_dask_collection(y) else sample_weight
        chunks = _rows_like(lazy, "y" if lazy is y else "sample_weight", (len(pred),), owner).chunks[0]
        pred = da.from_array(np.asarray(pred), chunks=(chunks, *np.shape(pred)[1:]))
    Y = _rows_like(y, "y", chunks, owner)
    W = (
        da.ones(pred.shape[0], chunks=(chunks,))
        if sample_weight is None
        else _rows_like(sample_weight, "sample_weight", chunks, owner).astype(np.float64)
    )
    checks = [da.isfinite(W).all(), (W >= 0).all(), W.max() > 0] if sample_weight is not None else []
    if sample_weight is not None:
        W = W / da.maximum(W.max(), np.finfo(np.float64).tiny)  # weights up to the largest float64: finite sums
    if metric == "accuracy":
        hit = pred == (Y[:, 0] if Y.ndim == 2 and Y.shape[1] == 1 else Y)
        num, den, *ok = dask.compute((W * hit).sum(), W.sum(), *checks)
        _check_weights(ok, owner)
        return float(num / den)
    P, T = pred.reshape(len(pred), -1), Y.astype(np.float64).reshape(len(pred), -1)
    if P.shape != T.shape:
        raise ValueError(f"{owner}.score: y has {T.shape[1]} output(s), the predictions {P.shape[1]}.")
    Wc = W[:, None]
    mean = (Wc * T).sum(axis=0) / Wc.sum()
    num, den, *ok = dask.compute((Wc * (T - P) ** 2).sum(axis=0), (Wc * (T - mean) ** 2).sum(axis=0), *checks)
    _check_weights(ok, owner)
    if len(pred) < 2:
        from sklearn.exceptions import UndefinedMetricWarning

        warnings.warn("R^2 score is not well-defined with less than two samples.", UndefinedMetricWarning, stacklevel=3)
        return float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = np.where(den != 0, 1.0 - num / den, np.where(num != 0, 0.0, 1.0))
    return float(np.mean(scores))


def _check_weights(ok, owner: str) -> None:
    if ok and not all(ok):
        raise ValueError(
            f"{owner}.score: sample_weight must be finite and non-negative, with at least one positive weight."
        )
