"""Kernels on the unit sphere in the conventions of the workshop paper (see :ref:`theory-sphere`).

:func:`sphere_implicit_kernel` is the exact Implicit-CK or Implicit-NTK of the
ReLU-DEQ with the *uncentred* normalised ReLU ``sqrt(2) max(x, 0)`` (Lemma 1);
:func:`sphere_explicit_kernel` the CK or NTK of one explicit layer with
``w ~ N(0, I_d)`` and an uncentred activation, exact or by Monte Carlo at a
finite width.  The package's other kernels centre the activations; these do
not.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_bool, check_kernel, check_samples
from ..theory import SphereQuadraticMatch, normalized_relu_dual, sphere_ck_map, sphere_ntk_map
from .._runtime import check_kernel_fits_in_memory

__all__ = ["sphere_implicit_kernel", "sphere_explicit_kernel", "make_sphere"]

_SPHERE_KERNELS = ("ck", "ntk")


def make_sphere(n_samples: int, n_features: int, random_state=None) -> np.ndarray:
    """Samples drawn independently and uniformly on the unit sphere ``S^(d-1)``.

    Parameters
    ----------
    n_samples : int
        Number of samples ``n``.
    n_features : int
        Dimension ``d``.
    random_state : int, numpy Generator or None, default=None
        Seed.

    Returns
    -------
    ndarray of shape (n_samples, n_features)
        Normalised standard Gaussian vectors, one per row.

    Raises
    ------
    ValueError
        For a size below 1.

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq.kernels import make_sphere
    >>> X = make_sphere(5, 3, random_state=0)
    >>> bool(np.allclose(np.linalg.norm(X, axis=1), 1.0))
    True
    """
    n, d = int(n_samples), int(n_features)
    if n < 1 or d < 1:
        raise ValueError(f"n_samples and n_features must be at least 1, got {n_samples!r} and {n_features!r}.")
    Z = np.random.default_rng(random_state).standard_normal((n, d))
    return Z / np.linalg.norm(Z, axis=1, keepdims=True)


def _check_unit_norm(X: np.ndarray) -> None:
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    worst = float(np.max(np.abs(norms - 1.0))) if len(norms) else 0.0
    if worst > 1e-6:
        raise ValueError(
            f"sphere_implicit_kernel needs samples on the unit sphere (Lemma 1 holds for unit norms only); a "
            f"norm differs from 1 by {worst:.3g}.  Divide every row by its norm first."
        )


def sphere_implicit_kernel(X, sigma_a2: float = 0.2, kernel: str = "ck") -> np.ndarray:
    """Exact Implicit-CK ``G*`` or Implicit-NTK ``K*`` of the ReLU-DEQ on the unit sphere (Lemma 1).

    The DEQ of the workshop paper: the uncentred normalised ReLU
    ``phi(x) = sqrt(2) max(x, 0)``, ``sigma_b2 = 1 - sigma_a2``.  Every entry
    is a function of ``x_i^T x_j``: ``G*_ij = g(x_i^T x_j)``, the root of
    ``G = sigma_a2 f(G) + sigma_b2 x_i^T x_j`` (:func:`sk_deq.theory.sphere_ck_map`),
    and ``K*_ij = G*_ij / (1 - Gdot*_ij)``, ``Gdot* = sigma_a2 (pi - arccos G*) / pi``
    (:func:`sk_deq.theory.sphere_ntk_map`).  The diagonal is 1 (CK) and
    ``1 / sigma_b2`` (NTK).  ``G*`` includes the injection
    ``sigma_b2 X^T X``; ``K* = sigma_a2 Theta + sigma_b2 X^T X`` with
    ``Theta`` the NTK of ``f(x) = v^T z*`` with respect to ``A``, ``B`` and
    the readout ``v`` (checked against random DEQs), unlike the package's
    :func:`~sk_deq.kernels.implicit_kernel` (centred activation, ``B``
    frozen, see :ref:`theory-ntk`).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Samples on the unit sphere, one per row (e.g. :func:`make_sphere`).
    sigma_a2 : float, default=0.2
        The DEQ's recurrent weight variance, in (0, 1).
    kernel : {'ck', 'ntk'}, default='ck'
        ``G*`` or ``K*``.

    Returns
    -------
    ndarray of shape (n_samples, n_samples)
        The kernel matrix, exactly symmetric.

    Raises
    ------
    ValueError
        For samples off the unit sphere (norms differing from 1 by more than
        ``1e-6``), ``sigma_a2`` outside (0, 1) or an unknown kernel.

    Examples
    --------
    >>> from sk_deq.kernels import make_sphere, sphere_implicit_kernel
    >>> G = sphere_implicit_kernel(make_sphere(4, 10, random_state=0), 0.2)
    >>> G.diagonal().round(6).tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    check_kernel(kernel, _SPHERE_KERNELS)
    X = check_samples(X)
    _check_unit_norm(X)
    check_kernel_fits_in_memory(len(X), len(X))
    S = np.clip(X @ X.T, -1.0, 1.0)
    np.fill_diagonal(S, 1.0)
    K = sphere_ck_map(S, sigma_a2) if kernel == "ck" else sphere_ntk_map(S, sigma_a2)
    return 0.5 * (K + K.T)


def _quadratic(activation):
    """``(a2, a1, a0)`` of a quadratic activation given as a triple or a match, else None."""
    if isinstance(activation, SphereQuadraticMatch):
        return activation.coefficients
    if isinstance(activation, (tuple, list, np.ndarray)):
        if len(activation) != 3:
            raise ValueError(f"A quadratic activation is given as (a2, a1, a0), got {activation!r}.")
        return tuple(float(v) for v in activation)
    if activation == "relu":
        return None
    raise ValueError(
        f"activation must be 'relu' (the normalised ReLU sqrt(2) max(x, 0)), a quadratic (a2, a1, a0) or a "
        f"SphereQuadraticMatch, got {activation!r}."
    )


def _exact(X, quad, kernel, ntk_input_layer):
    C = X @ X.T
    s = np.einsum("ij,ij->i", X, X)
    if quad is None:
        r = np.sqrt(s)
        with np.errstate(invalid="ignore", divide="ignore"):
            rho = np.where(np.outer(r, r) > 0, C / np.outer(r, r), 0.0)
        rho = np.clip(rho, -1.0, 1.0)
        np.fill_diagonal(rho, np.where(s > 0, 1.0, 0.0))
        K = np.outer(r, r) * normalized_relu_dual(rho)
        dot = normalized_relu_dual(rho, 1)
    else:
        a2, a1, a0 = quad
        # E[s(u) s(v)] for (u, v) Gaussian with variances s_i, s_j and covariance C
        K = a2**2 * (np.outer(s, s) + 2.0 * C * C) + a1**2 * C + a0 * a2 * (s[:, None] + s[None, :]) + a0**2
        dot = 4.0 * a2**2 * C + a1**2
    if kernel == "ntk" and ntk_input_layer:
        K = K + C * dot
    return K


def _monte_carlo(X, quad, kernel, ntk_input_layer, n_hidden, random_state, chunk=1024):
    rng = np.random.default_rng(random_state)
    n, d = X.shape
    K = np.zeros((n, n))
    D = np.zeros((n, n)) if kernel == "ntk" and ntk_input_layer else None
    for start in range(0, n_hidden, chunk):
        p = min(chunk, n_hidden - start)
        H = X @ rng.standard_normal((d, p))
        if quad is None:
            F, Fd = np.sqrt(2.0) * np.maximum(H, 0.0), np.sqrt(2.0) * (H > 0)
        else:
            a2, a1, a0 = quad
            F, Fd = (a2 * H + a1) * H + a0, 2.0 * a2 * H + a1
        K += F @ F.T
        if D is not None:
            D += Fd @ Fd.T
    K /= n_hidden
    if D is not None:
        K += (X @ X.T) * (D / n_hidden)
    return K


def sphere_explicit_kernel(
    X,
    activation="relu",
    kernel: str = "ck",
    *,
    ntk_input_layer: bool = True,
    n_hidden: int | None = None,
    random_state=None,
) -> np.ndarray:
    """CK or NTK of one explicit layer with an uncentred activation (Eq. (5) of the workshop paper).

    ``Sigma = E_w[s(w^T X)^T s(w^T X)]`` with ``w ~ N(0, I_d)`` (the limit of
    ``s(WX)^T s(WX) / p``) and, with ``W`` trained,
    ``Theta = Sigma + (X^T X) * E_w[s'(w^T X)^T s'(w^T X)]``.  Exact:

    * normalised ReLU ``s(x) = sqrt(2) max(x, 0)``: ``Sigma_ij = ||x_i|| ||x_j|| f(rho_ij)``
      and ``E[s' s'] = f'(rho_ij)`` with the arc-cosine ``f``
      (:func:`sk_deq.theory.normalized_relu_dual`);
    * quadratic ``s(t) = a2 t^2 + a1 t + a0``, with ``s_i = ||x_i||^2`` and
      ``c = x_i^T x_j``: ``Sigma_ij = a2^2 (s_i s_j + 2 c^2) + a1^2 c + a0 a2 (s_i + s_j) + a0^2``,
      ``E[s' s'] = 4 a2^2 c + a1^2``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Samples, one per row (any norms).
    activation : 'relu', (a2, a1, a0) or SphereQuadraticMatch, default='relu'
        ``'relu'`` is the normalised ReLU ``sqrt(2) max(x, 0)`` of the
        workshop paper (not centred); a triple or a
        :class:`~sk_deq.theory.SphereQuadraticMatch` the quadratic.
    kernel : {'ck', 'ntk'}, default='ck'
        ``Sigma`` or ``Theta``.
    ntk_input_layer : bool, default=True
        Whether the NTK differentiates ``W`` (the workshop's convention,
        ``Theta = Sigma + (X^T X) * E[s' s']``).  False freezes ``W`` as the
        package's matching does for explicit networks (``W_1`` frozen, see
        :ref:`theory-explicit`); one layer's NTK is then its CK.
    n_hidden : int or None, default=None
        None for the exact kernel; a width ``p`` for the Monte-Carlo estimate
        ``s(WX)^T s(WX) / p`` (plus the derivative term) of one random
        network.
    random_state : int, numpy Generator or None, default=None
        Seed of the Monte-Carlo weights.

    Returns
    -------
    ndarray of shape (n_samples, n_samples)
        The kernel matrix.

    Raises
    ------
    ValueError
        For an unknown activation or kernel, or a width below 1.

    Examples
    --------
    >>> from sk_deq.kernels import make_sphere, sphere_explicit_kernel
    >>> X = make_sphere(4, 10, random_state=0)
    >>> sphere_explicit_kernel(X, "relu", "ntk").diagonal().round(6).tolist()
    [2.0, 2.0, 2.0, 2.0]
    """
    check_bool(ntk_input_layer, "ntk_input_layer", "sphere_explicit_kernel")
    check_kernel(kernel, _SPHERE_KERNELS)
    X = check_samples(X)
    quad = _quadratic(activation)
    check_kernel_fits_in_memory(len(X), len(X))
    if n_hidden is None:
        K = _exact(X, quad, kernel, ntk_input_layer)
    else:
        if int(n_hidden) != n_hidden or n_hidden < 1:
            raise ValueError(f"n_hidden must be a positive integer or None, got {n_hidden!r}.")
        K = _monte_carlo(X, quad, kernel, ntk_input_layer, int(n_hidden), random_state)
    return 0.5 * (K + K.T)
