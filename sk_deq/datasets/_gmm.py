"""Ling et al.'s (2024) high-dimensional Gaussian mixture: :func:`make_gaussian_mixture`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils import check_random_state

from .._validation import check_bool

__all__ = ["GaussianMixtureStats", "make_gaussian_mixture"]


@dataclass(frozen=True)
class GaussianMixtureStats:
    """What the high-dimensional kernel equivalents need to know of a mixture.

    Returned by :func:`make_gaussian_mixture` with ``return_stats=True``;
    every parameter is stored as an attribute of the same name.  The
    equivalents are stated in :ref:`theory-gmm` (on the theory page).

    Parameters
    ----------
    means : ndarray of shape (n_classes, n_features)
        Unscaled class means ``mu_a`` (samples are ``(mu_a + z) / sqrt(p)``).
    covariances : ndarray of shape (n_classes, n_features)
        Diagonals of the class covariances ``C_a`` (unscaled, like the means).
    weights : ndarray of shape (n_classes,)
        Class proportions used to draw the samples (summing to one).
    """

    means: np.ndarray
    covariances: np.ndarray
    weights: np.ndarray

    def equivalent_kernel(self, coefficients, X, y, *, centred_T: bool = False):
        """The high-dimensional equivalent of a kernel on samples of this mixture.

        :func:`sk_deq.theory.gmm_equivalent_kernel` with this mixture's
        ``means`` and ``covariances`` (see :ref:`theory-gmm` on the theory
        page).

        Parameters
        ----------
        coefficients : KernelCoefficients
            Coefficients of the kernel, e.g.
            ``deq_ck_coefficients(...).implicit_kernel()`` for the
            Implicit-CK or ``deq_ntk_coefficients(...).kernel()`` for the
            Implicit-NTK (:mod:`sk_deq.theory`), at the data scale of ``X``.
        X : array-like of shape (n_samples, n_features)
            Samples drawn from this mixture.
        y : array-like of shape (n_samples,)
            Class of every sample, ``0..n_classes-1``.
        centred_T : bool, default=False
            Use the centred ``T_ab = tr(C°_a C°_b) / p`` instead of the
            default ``tr(C_a C_b) / p`` (see :ref:`theory-gmm`).

        Returns
        -------
        ndarray of shape (n_samples, n_samples)
            The equivalent kernel matrix ``K-bar``.

        Examples
        --------
        >>> from sk_deq.datasets import make_gaussian_mixture
        >>> import numpy as np
        >>> from sk_deq.theory import deq_ck_coefficients
        >>> X, y, stats = make_gaussian_mixture(40, 32, random_state=0, return_stats=True)
        >>> coef = deq_ck_coefficients("relu", 0.2, np.sqrt(np.mean(np.sum(X**2, axis=1)))).implicit_kernel()
        >>> stats.equivalent_kernel(coef, X, y).shape
        (40, 40)
        """
        check_bool(centred_T, "centred_T", "equivalent_kernel")
        from ..theory import gmm_equivalent_kernel

        return gmm_equivalent_kernel(coefficients, X, y, self.means, self.covariances, centred_T=centred_T)


@overload
def make_gaussian_mixture(
    n_samples: int = 500,
    n_features: int = 400,
    n_classes: int = 2,
    *,
    mean_norm: float = 8.0,
    cov_spread: float = 8.0,
    weights: ArrayLike | None = None,
    means: ArrayLike | None = None,
    covariances: ArrayLike | None = None,
    shuffle: bool = True,
    random_state: int | np.random.RandomState | None = None,
    return_stats: Literal[False] = False,
) -> tuple[np.ndarray, np.ndarray]: ...


@overload
def make_gaussian_mixture(
    n_samples: int = 500,
    n_features: int = 400,
    n_classes: int = 2,
    *,
    mean_norm: float = 8.0,
    cov_spread: float = 8.0,
    weights: ArrayLike | None = None,
    means: ArrayLike | None = None,
    covariances: ArrayLike | None = None,
    shuffle: bool = True,
    random_state: int | np.random.RandomState | None = None,
    return_stats: Literal[True],
) -> tuple[np.ndarray, np.ndarray, GaussianMixtureStats]: ...


def make_gaussian_mixture(
    n_samples: int = 500,
    n_features: int = 400,
    n_classes: int = 2,
    *,
    mean_norm: float = 8.0,
    cov_spread: float = 8.0,
    weights: ArrayLike | None = None,
    means: ArrayLike | None = None,
    covariances: ArrayLike | None = None,
    shuffle: bool = True,
    random_state: int | np.random.RandomState | None = None,
    return_stats: bool = False,
) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, GaussianMixtureStats]:
    """Draw Ling et al.'s (2024) high-dimensional Gaussian mixture.

    Class ``a`` (``a = 1..K``) has mean ``mu_a = mean_norm * e_{8(a-1)+1}``
    and covariance ``C_a = (1 + cov_spread (a-1) / sqrt(p)) I_p``; sample
    ``i`` of class ``a`` is ``x_i = (mu_a + z_i) / sqrt(p)`` with
    ``z_i ~ N(0, C_a)``, so that ``||x_i||^2`` is of order one.  Ling et al.'s (2024)
    test case is two classes, ``p / n = 0.8`` and a DEQ with
    ``sigma_a2 = 0.2``.

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
    random_state : int, RandomState instance or None, default=None
        Seed of the draws and of the shuffle.
    return_stats : bool, default=False
        Also return a :class:`GaussianMixtureStats`.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        The samples ``x_i = (mu_a + z_i) / sqrt(p)``.
    y : ndarray of shape (n_samples,)
        Class labels ``0..K-1``.
    stats : GaussianMixtureStats
        The class means, covariance diagonals and proportions; only returned
        if ``return_stats``.

    Raises
    ------
    ValueError
        For fewer samples than classes, too few features for the default
        means, or means, covariances or weights of the wrong shape or sign.

    Examples
    --------
    >>> from sk_deq.datasets import make_gaussian_mixture
    >>> X, y = make_gaussian_mixture(200, 160, random_state=0)
    >>> X.shape, sorted(set(y.tolist()))
    ((200, 160), [0, 1])

    The squared sample norms are of order one, the scale the theory expects
    (here ``||mu_a||^2 / p = 0.4`` plus the mean ``tr(C_a) / p``, about 1.32):

    >>> round(float((X**2).sum(axis=1).mean()), 1)
    1.7

    With ``return_stats=True`` the mixture's statistics come too:

    >>> X, y, stats = make_gaussian_mixture(200, 160, random_state=0, return_stats=True)
    >>> stats.means.shape, stats.covariances.shape, stats.weights.tolist()
    ((2, 160), (2, 160), [0.5, 0.5])
    """
    check_bool(shuffle, "shuffle", "make_gaussian_mixture")
    check_bool(return_stats, "return_stats", "make_gaussian_mixture")
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
