"""Dask arrays in the transformers: lazy row blocks, without importing dask for other inputs.

``transform`` of a fitted transformer given a Dask array returns a *lazy* Dask
array: nothing is computed when it is called.  Every row block becomes one
task that runs the transformer's ordinary in-memory ``transform`` on that
block, so a block is validated (finite values, numeric dtype) when it is
computed, and a bad block raises then, with the in-memory error.  What can be
checked without computing anything (2-D, known chunk sizes, number of
features, feature names) is checked when the graph is built.

The fitted estimator enters the graph once, as one key, so that each worker
receives it once rather than with every block (it pickles to its fitted state:
for :class:`~sk_deq.ImplicitCKTransformer`, the scaled training samples and
their per-sample quantities).
"""

from __future__ import annotations

import copy
import math
import sys
import warnings

import numpy as np

__all__ = ["is_dask_collection", "map_row_blocks"]

#: The part of the warning scikit-learn gives when samples without feature names
#: reach an estimator fitted with names; given once for the whole array, then
#: silenced in the blocks (numpy arrays, which never have names).
_NO_NAMES_WARNING = "X does not have valid feature names"


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


def _apply_to_block(block, func, n_columns: int, quiet_names: bool):
    """``func(block)``; a block without rows gives an empty one (the ``transform`` of 0 samples raises)."""
    if block.shape[0] == 0:
        return np.empty((0, n_columns))
    if not quiet_names:
        return func(block)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_NAMES_WARNING, category=UserWarning)
        return func(block)


def map_row_blocks(X, method, n_columns: int):
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
        (n_rows, n_columns) in float64.  ``X`` must have the estimator's
        ``n_features_in_`` features.
    n_columns : int
        Number of output columns.

    Returns
    -------
    dask.array.Array of shape (n_samples, n_columns)
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
    return X.map_blocks(
        _apply_to_block,
        func,
        n_columns,
        hasattr(estimator, "feature_names_in_"),
        dtype=np.float64,
        chunks=(X.chunks[0], (n_columns,)),
        meta=np.empty((0, 0), dtype=np.float64),  # so that func is not called to guess it
    )
