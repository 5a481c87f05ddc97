"""Comparing kernels: the relative spectral-norm error (see :ref:`theory-equivalence`)."""

from __future__ import annotations

import numpy as np

__all__ = ["relative_spectral_error"]


def relative_spectral_error(reference, other) -> float:
    """``||reference - other||_2 / ||reference||_2`` (spectral norms, see :ref:`theory-equivalence`).

    Parameters
    ----------
    reference : array-like of shape (n, m)
        The kernel matrix the error is relative to (e.g. the exact kernel).
    other : array-like of shape (n, m)
        The kernel matrix compared with it (e.g. an equivalent or a
        Monte-Carlo estimate).

    Returns
    -------
    float
        The relative error in the spectral norm (largest singular value).

    Raises
    ------
    ValueError
        If the shapes differ.

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq.kernels import relative_spectral_error
    >>> round(relative_spectral_error(np.eye(3), 1.1 * np.eye(3)), 6)
    0.1
    """
    reference = np.asarray(reference, dtype=float)
    other = np.asarray(other, dtype=float)
    if reference.shape != other.shape:
        raise ValueError(f"Kernel shapes differ: {reference.shape} vs {other.shape}.")
    return float(np.linalg.norm(reference - other, 2) / np.linalg.norm(reference, 2))
