"""Data sets of one's own for the comparisons: a ``.npz`` file read without pickles (:func:`load_npz`) and the checks
of every data set given as arrays (:func:`check_dataset`).

Every problem is one ``ValueError`` naming the file (or the data set), the array and what is wrong, in one line,
before any model is fitted: an empty, truncated or damaged file, a file that is not a ``.npz`` archive, arrays of
Python objects (never unpickled), missing arrays, shapes that do not fit, inputs that are not finite numbers, and
targets that are not class labels.
"""

from __future__ import annotations

import zipfile
import zlib

import numpy as np

from .._validation import reject_missing

# A zip archive starts with a local file header, or (empty) with its end-of-directory record.
_ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06")
_NPY_START = b"\x93NUMPY"
# What reading a damaged archive or member can raise.
_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def load_npz(path) -> tuple:
    """A data set of your own from a ``.npz`` file: ``(X, y, n_test)``.

    The file holds the arrays ``X`` (2-D) and ``y``, and optionally a test
    set ``X_test`` and ``y_test`` (both or neither), e.g. written by
    ``numpy.savez("features.npz", X=X, y=y, X_test=X_test, y_test=y_test)``.
    With a test set, ``X`` and ``y`` come back with the test rows appended
    and ``n_test`` is their number; without one ``n_test`` is None.  Any
    problem with the file is a ValueError naming it (see :func:`check_dataset`
    for what the arrays must hold); arrays of Python objects are refused,
    never unpickled.
    """
    path = str(path)
    arrays = _read_npz(path)
    missing = [k for k in ("X", "y") if k not in arrays]
    if missing:
        raise ValueError(f"{path!r} has no array {' or '.join(missing)} (it holds {', '.join(arrays) or 'nothing'}).")
    if ("X_test" in arrays) != ("y_test" in arrays):
        raise ValueError(f"{path!r} must hold both X_test and y_test, or neither.")
    parts = [("X", "y")] + ([("X_test", "y_test")] if "X_test" in arrays else [])
    for xk, yk in parts:
        arrays[xk] = check_dataset(arrays[xk], arrays[yk], repr(path), (xk, yk), test=xk == "X_test")
    if len(parts) == 2 and arrays["X_test"].shape[1] != arrays["X"].shape[1]:
        raise ValueError(f"{path!r}: X_test has {arrays['X_test'].shape[1]} columns, X {arrays['X'].shape[1]}.")
    X = np.concatenate([arrays[xk] for xk, _ in parts])
    y = np.concatenate([arrays[yk] for _, yk in parts])
    return X, y, (len(arrays["y_test"]) if len(parts) == 2 else None)


def _read_npz(path: str) -> dict:
    """Every array of the ``.npz`` file ``path`` by name, or a ValueError naming the file and what is wrong."""
    try:
        with open(path, "rb") as fh:
            start = fh.read(len(_NPY_START))
    except OSError as exc:
        raise ValueError(f"cannot read {path!r}: {exc.strerror or exc}.") from None
    if not start:
        raise ValueError(f"{path!r} is empty (0 bytes), not a .npz file.")
    if start == _NPY_START:
        raise ValueError(f"{path!r} is a .npy file (one array), not a .npz archive: save X and y with numpy.savez.")
    if start[:4] not in _ZIP_STARTS:
        raise ValueError(f"{path!r} is not a .npz file: it does not start as a zip archive of arrays (numpy.savez).")
    try:
        npz = np.load(path, allow_pickle=False)
    except _READ_ERRORS as exc:
        raise ValueError(f"{path!r} is a damaged .npz file ({_one_line(exc)}): write it again.") from None
    arrays = {}
    with npz:
        for key in npz.files:
            try:
                arrays[key] = np.asarray(npz[key])
            except _READ_ERRORS as exc:
                if isinstance(exc, ValueError) and "allow_pickle" in str(exc):
                    raise ValueError(
                        f"{path!r}: {key} is an array of Python objects, which is not read (loading it would "
                        "unpickle code); save numbers, or labels as strings."
                    ) from None
                raise ValueError(f"{path!r}: {key} is damaged ({_one_line(exc)}): write the file again.") from None
    return arrays


def check_dataset(X, y, where: str, names: tuple = ("X", "y"), *, test: bool = False) -> np.ndarray:
    """``X`` as float64 after checking ``X`` and ``y`` for a classification comparison; a ValueError otherwise.

    ``X`` must be a non-empty 2-D array of finite numbers, ``y`` one class
    label (an integer, a string or an integral float) per row, without
    missing values, and, unless ``test``, of at least two classes.  The
    message starts with ``where`` (the file or the data set) and names the
    array by ``names``.
    """
    xk, yk = names
    X, y = np.asarray(X), np.asarray(y)
    if X.ndim != 2 or y.ndim != 1 or len(X) != len(y):
        raise ValueError(
            f"{where}: {xk} must be 2-D and {yk} 1-D with one entry per row of {xk}, got shapes {X.shape} and {y.shape}."
        )
    if X.dtype.kind not in "biuf":
        raise ValueError(f"{where}: {xk} holds values of dtype {X.dtype}, not numbers.")
    if X.size == 0:
        raise ValueError(f"{where}: {xk} is empty (shape {X.shape}): it needs samples and features.")
    X = X.astype(np.float64)
    bad = ~np.isfinite(X)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(
            f"{where}: {xk} holds {int(bad.sum())} NaN or infinite value(s), the first in row {row}: drop or impute them."
        )
    reject_missing(y.astype(object) if y.dtype.kind == "f" else y, yk, where)
    _check_labels(y, where, yk, test)
    return X


def _check_labels(y: np.ndarray, where: str, yk: str, test: bool) -> None:
    """A ValueError unless ``y`` holds class labels (of two classes at least, unless ``test``)."""
    from sklearn.utils.multiclass import type_of_target

    kind = type_of_target(y, input_name=yk) if y.dtype.kind in "biufUSO" else "unknown"
    if kind == "continuous":
        example = y[np.flatnonzero(y != np.round(y))[0]].item()
        raise ValueError(
            f"{where}: {yk} holds continuous values (such as {example!r}), not class labels: the comparison fits "
            "classifiers; give integer or string labels."
        )
    if kind not in ("binary", "multiclass"):
        raise ValueError(
            f"{where}: {yk} (dtype {y.dtype}) is not class labels ({kind}): give integer or string labels."
        )
    if not test and len(np.unique(y)) < 2:
        raise ValueError(f"{where}: {yk} holds a single class ({y[0].item()!r}): a classifier needs at least two.")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
