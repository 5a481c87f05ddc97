"""The high-dimensional equivalents on Gaussian-mixture data (see :ref:`theory-gmm`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._validation import check_bool
from ._coefficients import KernelCoefficients


@dataclass(frozen=True)
class GMMStatistics:
    """Statistics of a Gaussian mixture that the kernel equivalents need.

    Attributes
    ----------
    J : ndarray of shape (n, K)
        One-hot class matrix.
    t : ndarray of shape (K,)
        ``t_a = tr(C°_a) / sqrt(p)``.
    T : ndarray of shape (K, K)
        ``T_ab = tr(C_a C_b) / p`` (or ``tr(C°_a C°_b) / p``, see ``centred_T``).
    psi : ndarray of shape (n,)
        ``psi_i = ||z_i||^2 / p - tr(C_a) / p``.
    n_features : int
        Dimension ``p``.
    """

    J: np.ndarray
    t: np.ndarray
    T: np.ndarray
    psi: np.ndarray
    n_features: int

    @property
    def V(self) -> np.ndarray:
        """``V = [J / sqrt(p), psi]`` of shape (n, K + 1)."""
        return np.column_stack([self.J / math.sqrt(self.n_features), self.psi])


def _cov_array(covariances, K: int, p: int) -> np.ndarray:
    c = np.asarray(covariances, dtype=float)
    if c.shape == (K,):
        return c[:, None] * np.ones((K, p))
    if c.shape == (K, p) or c.shape == (K, p, p):
        return c
    raise ValueError(f"covariances must have shape (K,), (K, p) or (K, p, p) with K={K}, p={p}; got {c.shape}.")


def gmm_statistics(X, y, means, covariances, *, centred_T: bool = False) -> GMMStatistics:
    """Compute ``J, t, T, psi`` for mixture data (see :ref:`theory-gmm`).

    Parameters
    ----------
    X : array of shape (n, p)
        Samples ``x_i = (mu_a + z_i) / sqrt(p)``.
    y : array of shape (n,)
        Class of each sample; classes are matched to ``means`` in sorted order.
    means : array of shape (K, p)
        Unscaled class means ``mu_a``.
    covariances : array of shape (K,), (K, p) or (K, p, p)
        Class covariances ``C_a``: isotropic scales, diagonals or full matrices.
    centred_T : bool, default=False
        ``True`` uses the centred ``T_ab = tr(C°_a C°_b) / p``, the form
        before the measured correction of :ref:`theory-gmm`.
        ``False`` uses ``T_ab = tr(C_a C_b) / p``: the ``inner`` term then
        carries the mean of ``(x_i^T x_j)^2``, which includes the constant
        ``tr(C°^2) / p^2`` whose all-ones matrix has operator norm of order
        ``n / p`` and does not vanish.  Against the exact ReLU-DEQ feature
        kernel on Ling et al.'s (2024) mixture, the relative spectral error falls from
        0.0456 to 0.0400 (p = 400) and from 0.0205 to 0.0142 (p = 1600).

    Returns
    -------
    GMMStatistics
        ``J`` (n, K), ``t`` (K,), ``T`` (K, K), ``psi`` (n,) and the
        dimension ``p``; its property ``V`` is ``[J / sqrt(p), psi]``.
    """
    check_bool(centred_T, "centred_T", "gmm_statistics")
    X = np.asarray(X, dtype=float)
    n, p = X.shape
    classes, yi = np.unique(np.asarray(y), return_inverse=True)
    means = np.asarray(means, dtype=float)
    K = len(classes)
    if means.shape != (K, p):
        raise ValueError(f"means must have shape (K, p) = ({K}, {p}), got {means.shape}.")
    C = _cov_array(covariances, K, p)
    props = np.bincount(yi, minlength=K) / n
    C0 = np.tensordot(props, C, axes=1)
    Cc = C - C0[None]
    CT = Cc if centred_T else C
    if C.ndim == 2:  # diagonals
        t = Cc.sum(axis=1) / math.sqrt(p)
        T = CT @ CT.T / p
        trC = C.sum(axis=1)
    else:
        t = np.trace(Cc, axis1=1, axis2=2) / math.sqrt(p)
        T = np.einsum("aij,bji->ab", CT, CT) / p
        trC = np.trace(C, axis1=1, axis2=2)
    Z = math.sqrt(p) * X - means[yi]
    psi = np.einsum("ij,ij->i", Z, Z) / p - trC[yi] / p
    J = np.zeros((n, K))
    J[np.arange(n), yi] = 1.0
    return GMMStatistics(J, t, T, psi, p)


def gmm_equivalent_kernel(
    coefficients: KernelCoefficients, X, y, means, covariances, *, centred_T: bool = False
) -> np.ndarray:
    """High-dimensional equivalent of a kernel on Gaussian-mixture data.

    ``K-bar = linear X X^T + V C V^T + identity I`` (see
    :ref:`theory-gmm`), with ``V = [J / sqrt(p), psi]`` and
    ``C = [[norm t t^T + inner T, norm t], [norm t^T, norm]]``.

    Parameters
    ----------
    coefficients : KernelCoefficients
        E.g. ``deq_ck_coefficients(...).implicit_kernel()`` for ``G-bar``,
        ``deq_ntk_coefficients(...).kernel()`` for ``K-bar`` or
        ``explicit_coefficients(...).kernel()`` for an explicit net.
    X : array of shape (n, p)
        Samples ``x_i = (mu_a + z_i) / sqrt(p)``.
    y : array of shape (n,)
        Class of each sample; classes are matched to ``means`` in sorted order.
    means : array of shape (K, p)
        Unscaled class means ``mu_a``.
    covariances : array of shape (K,), (K, p) or (K, p, p)
        Class covariances ``C_a``: isotropic scales, diagonals or full matrices.
    centred_T : bool, default=False
        Use the centred ``T_ab = tr(C°_a C°_b) / p`` (see
        :func:`gmm_statistics` for why the default is uncentred).

    Returns
    -------
    ndarray of shape (n, n)
        The equivalent kernel matrix.
    """
    check_bool(centred_T, "centred_T", "gmm_equivalent_kernel")
    X = np.asarray(X, dtype=float)
    s = gmm_statistics(X, y, means, covariances, centred_T=centred_T)
    c = coefficients
    K = len(s.t)
    Cm = np.empty((K + 1, K + 1))
    Cm[:K, :K] = c.norm * np.outer(s.t, s.t) + c.inner * s.T
    Cm[:K, K] = Cm[K, :K] = c.norm * s.t
    Cm[K, K] = c.norm
    V = s.V
    G = c.linear * (X @ X.T) + V @ Cm @ V.T
    G[np.diag_indices_from(G)] += c.identity
    return G
