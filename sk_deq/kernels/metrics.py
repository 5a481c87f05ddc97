"""Comparing kernels: the relative spectral-norm error (see :ref:`theory-equivalence`)."""

from __future__ import annotations

import numpy as np

__all__ = ["relative_spectral_error"]


def relative_spectral_error(reference, other) -> float:
    """``||reference - other||_2 / ||reference||_2`` (spectral norms, see :ref:`theory-equivalence`)."""
    reference = np.asarray(reference, dtype=float)
    other = np.asarray(other, dtype=float)
    if reference.shape != other.shape:
        raise ValueError(f"Kernel shapes differ: {reference.shape} vs {other.shape}.")
    return float(np.linalg.norm(reference - other, 2) / np.linalg.norm(reference, 2))
