"""ReLU-DEQ kernels on the unit sphere and their matched quadratic network (see :ref:`theory-sphere`).

The conventions of the HLD 2023 workshop paper (Ling, Liao and Qiu), which
differ from the rest of the package:

* the DEQ's activation is the *uncentred* normalised ReLU
  ``phi(x) = sqrt(2) max(x, 0)``, ``sigma_b2 = 1 - sigma_a2``, and the data lie
  on the unit sphere, so that every entry of the Implicit-CK is a function of
  ``x_i^T x_j`` alone: ``G*_ij = g(x_i^T x_j)``, ``K*_ij = k(x_i^T x_j)``;
* the Implicit-NTK is ``K* = G* / (1 - Gdot*)`` (Lemma 1), with the injection
  term in the numerator;
* the explicit network has one layer, ``w ~ N(0, I_d)``, an uncentred
  activation and the ``1/p`` normalisation; its NTK trains ``W``:
  ``Theta = Sigma + (X^T X) * E[sigma' sigma']``.

All three kernels are approximated in operator norm by
``alpha 1 1^T + beta X^T X + mu I`` (Theorems 1-4); a quadratic activation
matches the three coefficients in closed form (Corollary 1).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..activations.gaussian import expect
from .._validation import check_kernel, check_sigma_a2
from ..activations import get_activation

_SPHERE_KERNELS = ("ck", "ntk")


def _check_n_features(n_features) -> int:
    try:
        d = int(n_features)
    except (TypeError, ValueError):
        raise TypeError(f"n_features must be an integer, got {n_features!r}.") from None
    if d != n_features or d < 1:
        raise ValueError(f"n_features must be a positive integer (the dimension d of the sphere), got {n_features!r}.")
    return d


def normalized_relu_dual(rho, derivative: int = 0):
    """The dual of the normalised ReLU ``sqrt(2) max(x, 0)`` and its derivatives.

    ``f(rho) = E[phi(u) phi(v)]`` for ``(u, v)`` standard Gaussians with
    correlation ``rho`` and ``phi(x) = sqrt(2) max(x, 0)`` (the arc-cosine
    kernel of degree one, Lemma 1 of the workshop paper):

    ``f(rho) = (sqrt(1 - rho^2) + (pi - arccos rho) rho) / pi``,
    ``f'(rho) = (pi - arccos rho) / pi = E[phi'(u) phi'(v)]``,
    ``f''(rho) = 1 / (pi sqrt(1 - rho^2))``,
    ``f'''(rho) = rho / (pi (1 - rho^2)^(3/2))``.

    Parameters
    ----------
    rho : float or array-like
        Correlations in ``[-1, 1]`` (values outside are clipped).
    derivative : {0, 1, 2, 3}, default=0
        Which derivative of ``f`` to return.

    Returns
    -------
    float or ndarray
        ``f^(derivative)(rho)``, of the shape of ``rho``; the second and third
        derivatives are infinite at ``rho = +-1``.

    Raises
    ------
    ValueError
        For a derivative order other than 0-3.

    Examples
    --------
    >>> from sk_deq.theory import normalized_relu_dual
    >>> float(normalized_relu_dual(1.0)), round(float(normalized_relu_dual(0.0)), 6)
    (1.0, 0.31831)
    """
    r = np.clip(np.asarray(rho, dtype=float), -1.0, 1.0)
    with np.errstate(divide="ignore"):
        if derivative == 0:
            out = (np.sqrt(1.0 - r * r) + (math.pi - np.arccos(r)) * r) / math.pi
        elif derivative == 1:
            out = (math.pi - np.arccos(r)) / math.pi
        elif derivative == 2:
            out = 1.0 / (math.pi * np.sqrt(1.0 - r * r))
        elif derivative == 3:
            out = r / (math.pi * (1.0 - r * r) ** 1.5)
        else:
            raise ValueError(f"derivative must be 0, 1, 2 or 3, got {derivative!r}.")
    return out if np.ndim(rho) else float(out)


def sphere_ck_map(rho, sigma_a2: float):
    """The implicit map ``g`` of the Implicit-CK on the unit sphere (Lemma 1).

    ``g(rho)`` is the root of ``G = sigma_a2 f(G) + (1 - sigma_a2) rho`` with
    ``f`` the dual of the normalised ReLU (:func:`normalized_relu_dual`), so
    that ``G*_ij = g(x_i^T x_j)`` for unit-norm samples.  The map
    ``F(G) = G - sigma_a2 f(G) - sigma_b2 rho`` is increasing and concave, so
    Newton's method converges monotonically after its first step; it runs to
    machine precision (``g(1) = 1`` exactly).

    Parameters
    ----------
    rho : float or array-like
        Inner products ``x_i^T x_j`` in ``[-1, 1]``.
    sigma_a2 : float
        The DEQ's recurrent weight variance, in (0, 1).

    Returns
    -------
    float or ndarray
        ``g(rho)``, of the shape of ``rho``.

    Raises
    ------
    ValueError
        For ``sigma_a2`` outside (0, 1) or ``rho`` outside ``[-1, 1]``.

    Examples
    --------
    >>> from sk_deq.theory import sphere_ck_map
    >>> float(sphere_ck_map(1.0, 0.2))
    1.0
    >>> round(float(sphere_ck_map(0.0, 0.2)), 6)
    0.070913
    """
    sa = check_sigma_a2(sigma_a2)
    r = np.asarray(rho, dtype=float)
    if np.any(np.abs(r) > 1.0 + 1e-12) or not np.all(np.isfinite(r)):
        raise ValueError("rho must hold inner products of unit-norm samples, in [-1, 1].")
    r = np.clip(r, -1.0, 1.0)
    sb = 1.0 - sa
    G = sb * r + sa * normalized_relu_dual(sb * r)  # one fixed-point step from the injection
    for _ in range(100):
        F = G - sa * normalized_relu_dual(G) - sb * r
        step = F / (1.0 - sa * normalized_relu_dual(G, 1))
        G = np.clip(G - step, -1.0, 1.0)
        if np.all(np.abs(step) <= 1e-15 * (1.0 + np.abs(G))):
            break
    G = np.where(r == 1.0, 1.0, G)  # g(1) = sigma_a2 f(1) + sigma_b2 = 1 exactly
    return G if np.ndim(rho) else float(G)


def _h(G, sa: float, derivative: int = 0):
    """``h(G) = G / (1 - sigma_a2 f'(G))`` of Lemma 1 and its first two derivatives."""
    D = 1.0 - sa * normalized_relu_dual(G, 1)
    if derivative == 0:
        return G / D
    D1 = -sa * normalized_relu_dual(G, 2)
    if derivative == 1:
        return 1.0 / D - G * D1 / D**2
    D2 = -sa * normalized_relu_dual(G, 3)
    return -2.0 * D1 / D**2 - G * D2 / D**2 + 2.0 * G * D1**2 / D**3


def sphere_ntk_map(rho, sigma_a2: float):
    """The implicit map ``k = h(g)`` of the Implicit-NTK on the unit sphere (Lemma 1).

    ``K*_ij = k(x_i^T x_j)`` with ``k(rho) = h(g(rho))``,
    ``h(G) = G / (1 - Gdot)`` and ``Gdot = sigma_a2 (pi - arccos G) / pi``
    (:func:`sphere_ck_map` for ``g``).  It is the fixed point of the NTK
    recursion ``K <- G + Gdot K``; ``k(1) = 1 / (1 - sigma_a2)``.

    Parameters
    ----------
    rho : float or array-like
        Inner products ``x_i^T x_j`` in ``[-1, 1]``.
    sigma_a2 : float
        The DEQ's recurrent weight variance, in (0, 1).

    Returns
    -------
    float or ndarray
        ``k(rho)``, of the shape of ``rho``.

    Raises
    ------
    ValueError
        For ``sigma_a2`` outside (0, 1) or ``rho`` outside ``[-1, 1]``.

    Examples
    --------
    >>> from sk_deq.theory import sphere_ntk_map
    >>> float(sphere_ntk_map(1.0, 0.2))
    1.25
    """
    sa = check_sigma_a2(sigma_a2)
    out = _h(sphere_ck_map(rho, sa), sa)
    return out if np.ndim(rho) else float(out)


@dataclass(frozen=True)
class SphereCoefficients:
    """Coefficients of ``alpha 1 1^T + beta X^T X + mu I``, a kernel's equivalent on the unit sphere.

    Returned by :func:`sphere_deq_coefficients` (Theorems 1 and 3 of the
    workshop paper, with the Taylor data of the implicit map) and
    :func:`sphere_explicit_coefficients` (Theorems 2 and 4); every parameter
    is stored as an attribute of the same name.

    Parameters
    ----------
    kernel : {'ck', 'ntk'}
        Which kernel.
    n_features : int
        The dimension ``d`` of the sphere.
    alpha : float
        Coefficient of ``1 1^T``.
    beta : float
        Coefficient of ``X^T X``.
    mu : float
        Coefficient of the identity.
    value0, slope0, curvature0, value1 : float or None, default=None
        For a DEQ: ``g(0), g'(0), g''(0), g(1)`` (CK) or
        ``k(0), k'(0), k''(0), k(1)`` (NTK); None for an explicit network.
    sigma_a2 : float or None, default=None
        The DEQ's recurrent weight variance (None for an explicit network).
    """

    kernel: str
    n_features: int
    alpha: float
    beta: float
    mu: float
    value0: float | None = None
    slope0: float | None = None
    curvature0: float | None = None
    value1: float | None = None
    sigma_a2: float | None = None

    def equations(self) -> np.ndarray:
        """The three matched quantities ``(alpha, beta, mu)``.

        Returns
        -------
        ndarray of shape (3,)
            ``[alpha, beta, mu]``.
        """
        return np.array([self.alpha, self.beta, self.mu])

    def equivalent_kernel(self, X) -> np.ndarray:
        """The equivalent ``alpha 1 1^T + beta X^T X + mu I`` on the samples ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples on the unit sphere, one per row.

        Returns
        -------
        ndarray of shape (n_samples, n_samples)
            The equivalent kernel matrix.
        """
        X = np.asarray(X, dtype=float)
        K = self.beta * (X @ X.T) + self.alpha
        K[np.diag_indices_from(K)] += self.mu
        return K

    def to_dict(self) -> dict:
        """A JSON-serialisable dictionary of the fields.

        Returns
        -------
        dict
            Every field by name.
        """
        return asdict(self)


def sphere_deq_coefficients(sigma_a2: float, n_features: int, kernel: str = "ck") -> SphereCoefficients:
    """The ReLU-DEQ's ``(alpha, beta, mu)`` on the unit sphere (Theorems 1 and 3).

    With ``angle = g(0)`` the root of ``angle = sigma_a2 f(angle)``,
    ``D = 1 - sigma_a2 f'(angle)`` and ``sigma_b2 = 1 - sigma_a2``:

    * CK: ``g'(0) = sigma_b2 / D``, ``g''(0) = sigma_a2 sigma_b2^2 f''(angle) / D^3``,
      ``alpha = g(0) + g''(0) / (2d)``, ``beta = g'(0)``,
      ``mu = g(1) - g(0) - g'(0)`` with ``g(1) = 1``;
    * NTK: ``k(0) = h(angle)``, ``k'(0) = sigma_b2 h'(angle) / D``,
      ``k''(0) = sigma_b2^2 (h''(angle) D + sigma_a2 h'(angle) f''(angle)) / D^3``,
      ``alpha = k(0) + k''(0) / (2d)``, ``beta = k'(0)``,
      ``mu = k(1) - k(0) - k'(0)`` with ``k(1) = 1 / sigma_b2``.

    Parameters
    ----------
    sigma_a2 : float
        The DEQ's recurrent weight variance, in (0, 1).
    n_features : int
        The dimension ``d`` of the sphere.
    kernel : {'ck', 'ntk'}, default='ck'
        The Implicit-CK ``G*`` or the Implicit-NTK ``K*`` of Lemma 1.

    Returns
    -------
    SphereCoefficients
        ``alpha, beta, mu`` and the Taylor data ``value0, slope0,
        curvature0, value1`` of the implicit map.

    Raises
    ------
    ValueError
        For ``sigma_a2`` outside (0, 1), a non-positive ``n_features`` or an
        unknown kernel.

    Notes
    -----
    The workshop paper prints ``k'(0) = (1 - sigma_a2) h'(angle) /
    (sigma_a2 f'(angle) - 1)``, the negative of the chain rule
    ``k'(0) = h'(g(0)) g'(0)``; the sign is a misprint (``k`` is increasing,
    and the printed value gives ``beta < 0``).  Central differences of
    :func:`sphere_ntk_map` at 0 agree with the form used here to ``1e-8``
    (``sigma_a2 = 0.2``: ``k'(0) = 1.00269``, printed ``-1.00269``).

    Examples
    --------
    >>> from sk_deq.theory import sphere_deq_coefficients
    >>> c = sphere_deq_coefficients(0.2, 1200)
    >>> round(c.alpha, 5), round(c.beta, 5), round(c.mu, 5)
    (0.07094, 0.89337, 0.03571)
    """
    sa = check_sigma_a2(sigma_a2)
    d = _check_n_features(n_features)
    check_kernel(kernel, _SPHERE_KERNELS)
    sb = 1.0 - sa
    angle = sphere_ck_map(0.0, sa)
    f1, f2 = normalized_relu_dual(angle, 1), normalized_relu_dual(angle, 2)
    D = 1.0 - sa * f1
    if kernel == "ck":
        v0, s0, c0, v1 = angle, sb / D, sa * sb**2 * f2 / D**3, 1.0
    else:
        h1, h2 = _h(angle, sa, 1), _h(angle, sa, 2)
        v0, s0 = _h(angle, sa), sb * h1 / D
        c0 = sb**2 * (h2 * D + sa * h1 * f2) / D**3
        v1 = 1.0 / sb
    return SphereCoefficients(
        kernel=kernel,
        n_features=d,
        alpha=v0 + c0 / (2.0 * d),
        beta=s0,
        mu=v1 - v0 - s0,
        value0=v0,
        slope0=s0,
        curvature0=c0,
        value1=v1,
        sigma_a2=sa,
    )


def _uncentred_moments(activation):
    """``E[s], E[s'], E[s''], E[s^2], E[s'^2]`` at ``z ~ N(0, 1)`` of an uncentred activation."""
    from ..activations.gaussian import stein_d1, stein_d2

    if isinstance(activation, (tuple, list, np.ndarray)) and len(activation) == 3:
        a2, a1, a0 = (float(v) for v in activation)  # quadratic a2 t^2 + a1 t + a0: closed forms
        return a2 + a0, a1, 2.0 * a2, 3 * a2**2 + a1**2 + a0**2 + 2 * a0 * a2, 4 * a2**2 + a1**2
    act = get_activation(activation)
    bp = act.breakpoints
    return (
        expect(act, 1.0, bp),
        stein_d1(act, 1.0, bp),
        stein_d2(act, 1.0, bp),
        expect(lambda x: act(x) ** 2, 1.0, bp),
        expect(lambda x: act.derivative(x) ** 2, 1.0, bp),
    )


def sphere_explicit_coefficients(activation, n_features: int, kernel: str = "ck") -> SphereCoefficients:
    """A one-layer explicit network's ``(alpha, beta, mu)`` on the unit sphere (Theorems 2 and 4).

    For ``z ~ N(0, 1)`` and the *uncentred* activation ``s``:

    * CK ``Sigma = E_w[s(w^T X)^T s(w^T X)]``:
      ``alpha = E[s]^2 + E[s'']^2 / (2d)``, ``beta = E[s']^2``,
      ``mu = E[s^2] - E[s]^2 - E[s']^2``;
    * NTK ``Theta = Sigma + (X^T X) * E_w[s'(w^T X)^T s'(w^T X)]`` (``W``
      trained): ``alpha = E[s]^2 + 3 E[s'']^2 / (2d)``, ``beta = 2 E[s']^2``,
      ``mu = E[s^2] + E[s'^2] - E[s]^2 - 2 E[s']^2``.

    Parameters
    ----------
    activation : str, Activation, callable or (a2, a1, a0)
        The activation, used as is (not centred); a triple is the quadratic
        ``a2 t^2 + a1 t + a0`` (closed-form moments).  For the normalised
        ReLU of the workshop paper pass
        ``Activation(lambda x: np.sqrt(2) * np.maximum(x, 0), breakpoints=(0.0,))``.
    n_features : int
        The dimension ``d`` of the sphere.
    kernel : {'ck', 'ntk'}, default='ck'
        Which kernel.

    Returns
    -------
    SphereCoefficients
        ``alpha, beta, mu`` (the Taylor fields are None).

    Raises
    ------
    ValueError
        For a non-positive ``n_features`` or an unknown kernel or activation.

    Examples
    --------
    >>> from sk_deq.theory import sphere_explicit_coefficients
    >>> c = sphere_explicit_coefficients((0.5, 1.0, 0.0), 100)
    >>> c.alpha, c.beta, c.mu
    (0.255, 1.0, 0.5)
    """
    d = _check_n_features(n_features)
    check_kernel(kernel, _SPHERE_KERNELS)
    m0, m1, m2, sq, dsq = _uncentred_moments(activation)
    if kernel == "ck":
        alpha, beta, mu = m0**2 + m2**2 / (2.0 * d), m1**2, sq - m0**2 - m1**2
    else:
        alpha, beta, mu = m0**2 + 3.0 * m2**2 / (2.0 * d), 2.0 * m1**2, sq + dsq - m0**2 - 2.0 * m1**2
    return SphereCoefficients(kernel=kernel, n_features=d, alpha=alpha, beta=beta, mu=mu)


@dataclass(frozen=True)
class SphereQuadraticMatch:
    """A quadratic activation ``a2 t^2 + a1 t + a0`` matched to the ReLU-DEQ on the sphere.

    Returned by :func:`sphere_quadratic_match`; every parameter is stored as
    an attribute of the same name.

    Parameters
    ----------
    kernel : {'ck', 'ntk'}
        The matched kernel.
    a2, a1, a0 : float
        The activation's coefficients (Corollary 1).
    targets : SphereCoefficients
        The DEQ's ``(alpha, beta, mu)`` (:func:`sphere_deq_coefficients`).
    achieved : SphereCoefficients
        The quadratic network's (:func:`sphere_explicit_coefficients`).
    """

    kernel: str
    a2: float
    a1: float
    a0: float
    targets: SphereCoefficients
    achieved: SphereCoefficients

    @property
    def coefficients(self) -> tuple:
        """``(a2, a1, a0)``, the form :func:`sphere_explicit_coefficients` takes."""
        return (self.a2, self.a1, self.a0)

    @property
    def residuals(self) -> np.ndarray:
        """Relative residuals ``(achieved - target) / |target|`` of ``alpha, beta, mu``."""
        t, a = self.targets.equations(), self.achieved.equations()
        return (a - t) / np.abs(t)

    def __call__(self, t):
        """The activation ``a2 t^2 + a1 t + a0``.

        Parameters
        ----------
        t : float or ndarray
            Pre-activations.

        Returns
        -------
        float or ndarray
            The activation's values.
        """
        return (self.a2 * t + self.a1) * t + self.a0

    def to_dict(self) -> dict:
        """A JSON-serialisable dictionary.

        Returns
        -------
        dict
            ``kernel, a2, a1, a0``, ``targets`` and ``achieved`` as
            dictionaries, and ``residuals`` as a list.
        """
        return {
            "kernel": self.kernel,
            "a2": self.a2,
            "a1": self.a1,
            "a0": self.a0,
            "targets": self.targets.to_dict(),
            "achieved": self.achieved.to_dict(),
            "residuals": self.residuals.tolist(),
        }


def sphere_quadratic_match(sigma_a2: float, n_features: int, kernel: str = "ck") -> SphereQuadraticMatch:
    """The quadratic activation whose one-layer network matches the ReLU-DEQ on the sphere (Corollary 1).

    Solves ``alpha_1 = alpha``, ``beta_1 = beta``, ``mu_1 = mu`` for
    ``sigma(t) = a2 t^2 + a1 t + a0`` in closed form, with the DEQ's
    coefficients from :func:`sphere_deq_coefficients`:

    * CK: ``a2 = sqrt(mu / 2)``, ``a1 = sqrt(beta)``,
      ``a0 = sqrt(alpha - mu / d) - a2``;
    * NTK (``W`` trained, ``Theta = Sigma + (X^T X) * E[sigma' sigma']``):
      ``a2 = sqrt(mu / 6)``, ``a1 = sqrt(beta / 2)``,
      ``a0 = sqrt(alpha - mu / d) - a2``.

    Every sign choice ``(+-a2, +-a1, +-sqrt(.) - a2)`` gives the same kernels;
    the positive roots are returned.

    Parameters
    ----------
    sigma_a2 : float
        The DEQ's recurrent weight variance, in (0, 1).
    n_features : int
        The dimension ``d`` of the sphere.
    kernel : {'ck', 'ntk'}, default='ck'
        Match the Implicit-CK ``G*`` or the Implicit-NTK ``K*``.

    Returns
    -------
    SphereQuadraticMatch
        ``a2, a1, a0``, the targets, the achieved coefficients and the
        residuals.

    Raises
    ------
    ValueError
        For invalid arguments, or where ``alpha < mu / d`` (no real root;
        it does not happen for ``d >= 1`` with the ReLU-DEQ).

    Examples
    --------
    >>> from sk_deq.theory import sphere_quadratic_match
    >>> m = sphere_quadratic_match(0.2, 1200, "ck")
    >>> [round(v, 4) for v in m.coefficients]
    [0.1336, 0.9452, 0.1327]
    """
    target = sphere_deq_coefficients(sigma_a2, n_features, kernel)
    d = target.n_features
    k2, k1 = (2.0, 1.0) if kernel == "ck" else (6.0, 2.0)
    rest = target.alpha - target.mu / d
    if rest < 0 or target.mu < 0 or target.beta < 0:
        raise ValueError(
            f"No real quadratic activation matches: alpha - mu / d = {rest:.3g}, mu = {target.mu:.3g}, "
            f"beta = {target.beta:.3g} must be non-negative."
        )
    a2 = math.sqrt(target.mu / k2)
    a1 = math.sqrt(target.beta / k1)
    a0 = math.sqrt(rest) - a2
    achieved = sphere_explicit_coefficients((a2, a1, a0), d, kernel)
    return SphereQuadraticMatch(kernel=kernel, a2=a2, a1=a1, a0=a0, targets=target, achieved=achieved)
