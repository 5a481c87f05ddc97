"""The coefficients: ``tau``, the DEQ's CK and NTK coefficients, and the recursion of explicit networks."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from collections.abc import Callable
from typing import Any

import numpy as np

from .._validation import check_sigma_a2, check_sigma_b2, check_tau0
from ..activations import Activation, GaussianMoments, get_activation


def _fmt(x: float) -> str:
    return f"{x:.6g}"


@dataclass(frozen=True)
class KernelCoefficients:
    """Coefficients of the high-dimensional kernel form shared by all kernels.

    ``K ~= linear X^T X + V C V^T + (diagonal - tau0^2 linear) I`` with
    ``C = [[norm t t^T + inner T, norm t], [norm t^T, norm]]`` (see
    :ref:`theory-gmm`).  Returned by the ``kernel()``, ``implicit_kernel()``
    and ``feature_kernel()`` methods of the coefficient objects below; every
    parameter is stored as an attribute of the same name.

    Parameters
    ----------
    linear : float
        Coefficient of ``X^T X`` (``alpha1``, ``a1``, ``beta1``).
    norm : float
        Coefficient of the squared-norm fluctuations (``alpha2``).
    inner : float
        Coefficient of the squared inner products (``alpha3``).
    diagonal : float
        Diagonal value at ``||x||^2 = tau0^2`` (``tau^2``, ``kappa^2``).
    tau0 : float
        Data scale the coefficients were computed for.
    exact_identity : float or None, default=None
        The identity coefficient ``diagonal - tau0^2 linear`` computed without
        cancellation, where the caller knows such a form; :attr:`identity`
        returns it instead of the difference.  Not shown in the repr and not
        compared.
    """

    linear: float
    norm: float
    inner: float
    diagonal: float
    tau0: float
    exact_identity: float | None = field(default=None, repr=False, compare=False)

    @property
    def identity(self) -> float:
        """Coefficient of the identity, ``diagonal - tau0^2 * linear``.

        Computed in a form without cancellation where one is known
        (``exact_identity``): at large ``tau0`` the two terms of the
        difference can agree to every digit (a tanh-DEQ at ``tau0 = 1e8``).
        """
        if self.exact_identity is not None:
            return self.exact_identity
        return self.diagonal - self.tau0**2 * self.linear

    def equations(self) -> np.ndarray:
        """The four quantities matched by M1-M4: ``(linear, norm, inner, identity)``.

        Returns
        -------
        ndarray of shape (4,)
            ``[linear, norm, inner, identity]``, the left- or right-hand
            sides of the matching equations (see :ref:`theory-matching`).
        """
        return np.array([self.linear, self.norm, self.inner, self.identity])

    def __repr__(self) -> str:
        return (
            f"KernelCoefficients(linear={_fmt(self.linear)}, norm={_fmt(self.norm)}, "
            f"inner={_fmt(self.inner)}, diagonal={_fmt(self.diagonal)}, tau0={_fmt(self.tau0)})"
        )


@dataclass(frozen=True)
class DEQCoefficients:
    """The DEQ's CK coefficients: the solution of the four equations.

    See :ref:`theory-equations`.  Returned by :func:`deq_ck_coefficients`;
    every parameter is stored as an attribute of the same name.

    Parameters
    ----------
    activation : str
        Name of the DEQ activation.
    sigma_a2, sigma_b2, tau0 : float
        Weight variances and data scale.
    tau : float
        Fixed point of (E0): the pre-activation scale of the DEQ.
    alpha1, alpha2, alpha3, alpha4 : float
        Solutions of (E1)-(E4).
    moments : GaussianMoments
        Moments of the activation centred at ``tau`` (``g1, g2, g4, d``;
        ``moments.mean`` is the centring constant ``E_tau[phi0]``).
    """

    activation: str
    sigma_a2: float
    sigma_b2: float
    tau0: float
    tau: float
    alpha1: float
    alpha2: float
    alpha3: float
    alpha4: float
    moments: GaussianMoments = field(repr=False)

    def _feature_linear_and_identity(self) -> tuple:
        """``(alpha1 - sigma_b2) / sigma_a2`` and the feature kernel's identity, without cancellation.

        ``alpha1 - sigma_b2 = sigma_b2 sigma_a2 g1 / (1 - sigma_a2 g1)`` and, by
        (E0), ``(tau^2 - sigma_b2 tau0^2) / sigma_a2 = Var_tau[phi0]``: the
        differences are not formed, so they keep their precision when ``g1``
        is tiny or ``tau0`` large.
        """
        m, sa, sb = self.moments, self.sigma_a2, self.sigma_b2
        linear = sb * m.g1 / (1.0 - sa * m.g1)
        return linear, m.var - self.tau0**2 * linear

    def implicit_kernel(self) -> KernelCoefficients:
        """Coefficients of the Implicit-CK ``G*`` (with the ``sigma_b2 X^T X`` injection).

        Returns
        -------
        KernelCoefficients
            ``(alpha1, alpha2, alpha3, tau^2)`` at ``tau0``, the coefficients
            of the equivalent ``G-bar`` (see :ref:`theory-gmm`).
        """
        _, identity = self._feature_linear_and_identity()
        return KernelCoefficients(
            self.alpha1, self.alpha2, self.alpha3, self.tau**2, self.tau0, exact_identity=self.sigma_a2 * identity
        )

    def feature_kernel(self) -> KernelCoefficients:
        """Coefficients of the feature kernel ``Sigma* = (G* - sigma_b2 X^T X) / sigma_a2``.

        These are the targets of the CK matching equations M1-M4.

        Returns
        -------
        KernelCoefficients
            ``((alpha1 - sigma_b2) / sigma_a2, alpha2 / sigma_a2,
            alpha3 / sigma_a2, (tau^2 - sigma_b2 tau0^2) / sigma_a2)`` at
            ``tau0``, the differences computed without cancellation.
        """
        sa = self.sigma_a2
        linear, identity = self._feature_linear_and_identity()
        return KernelCoefficients(
            linear, self.alpha2 / sa, self.alpha3 / sa, self.moments.var, self.tau0, exact_identity=identity
        )

    def to_dict(self) -> dict:
        """A JSON-serialisable dictionary of the fields.

        Returns
        -------
        dict
            Every field by name, ``moments`` as a dictionary of its own.
        """
        d = asdict(self)
        d["moments"] = asdict(self.moments)
        return d

    def __repr__(self) -> str:
        return (
            f"DEQCoefficients(activation={self.activation!r}, sigma_a2={_fmt(self.sigma_a2)}, "
            f"tau0={_fmt(self.tau0)}, tau={_fmt(self.tau)}, alpha1={_fmt(self.alpha1)}, "
            f"alpha2={_fmt(self.alpha2)}, alpha3={_fmt(self.alpha3)}, alpha4={_fmt(self.alpha4)})"
        )


@dataclass(frozen=True)
class DEQNTKCoefficients:
    """The DEQ's Implicit-NTK coefficients (see :ref:`theory-ntk`).

    ``K* = lim (Z*^T Z*) / (1 - sigma_a2 Zdot^T Zdot)`` is the NTK with respect
    to the readout and the recurrent weights ``A``; its high-dimensional
    equivalent has ``(linear, norm, inner, diagonal) = (beta1, beta2, beta3,
    kappa^2)``.  Returned by :func:`deq_ntk_coefficients`; every parameter is
    stored as an attribute of the same name.

    Parameters
    ----------
    beta1, beta2, beta3 : float
        NTK coefficients of ``X^T X``, of the squared-norm fluctuations and
        of the squared inner products.
    kappa : float
        Square root of the NTK's diagonal value at ``||x|| = tau0``,
        ``kappa^2 = z / (1 - sigma_a2 d)``.
    a1, a2, a3, a4 : float
        Intermediate coefficients ``a_1 .. a_4`` of :ref:`theory-ntk`.
    delta0, delta1 : float
        ``delta0 = sigma_a2 g1`` and ``delta1 = sigma_a2 g2 (sigma_a2 a1 +
        sigma_b2)``.
    z : float
        ``Var_tau[phi0]``, the diagonal of the feature kernel.
    ck : DEQCoefficients
        The CK solution the NTK is built on.
    """

    beta1: float
    beta2: float
    beta3: float
    kappa: float
    a1: float
    a2: float
    a3: float
    a4: float
    delta0: float
    delta1: float
    z: float
    ck: DEQCoefficients = field(repr=False)

    @property
    def tau(self) -> float:
        """The DEQ's pre-activation scale ``tau`` (that of :attr:`ck`)."""
        return self.ck.tau

    @property
    def tau0(self) -> float:
        """Data scale the coefficients were computed for."""
        return self.ck.tau0

    def kernel(self) -> KernelCoefficients:
        """Coefficients of the Implicit-NTK equivalent ``K-bar``.

        Returns
        -------
        KernelCoefficients
            ``(beta1, beta2, beta3, kappa^2)`` at ``tau0``.
        """
        return KernelCoefficients(self.beta1, self.beta2, self.beta3, self.kappa**2, self.ck.tau0)

    def to_dict(self) -> dict:
        """A JSON-serialisable dictionary of the fields.

        Returns
        -------
        dict
            Every field by name, ``ck`` as the dictionary of
            :meth:`DEQCoefficients.to_dict`.
        """
        d = {k: v for k, v in asdict(self).items() if k != "ck"}
        d["ck"] = self.ck.to_dict()
        return d

    def __repr__(self) -> str:
        return (
            f"DEQNTKCoefficients(activation={self.ck.activation!r}, sigma_a2={_fmt(self.ck.sigma_a2)}, "
            f"tau0={_fmt(self.ck.tau0)}, beta1={_fmt(self.beta1)}, beta2={_fmt(self.beta2)}, "
            f"beta3={_fmt(self.beta3)}, kappa={_fmt(self.kappa)})"
        )


def tau_fixed_point(
    activation,
    sigma_a2: float,
    tau0: float,
    *,
    sigma_b2: float | None = None,
    tol: float = 1e-12,
    max_iter: int = 10_000,
) -> float:
    """Solve (E0): ``tau^2 = sigma_a2 Var_tau[phi0] + sigma_b2 tau0^2``.

    Fixed-point iteration from ``tau = tau0``, stopped at
    ``|delta tau| <= tol * tau`` (relative, so that the solution has the same
    precision at every data scale).

    Parameters
    ----------
    activation : str, Activation or callable
        The DEQ activation ``phi0``.
    sigma_a2 : float
        Recurrent weight variance, in ``(0, 1)``.
    tau0 : float
        Data scale: ``tau0^2 = (1/n) sum ||x_i||^2``.
    sigma_b2 : float, optional
        Input weight variance; ``1 - sigma_a2`` by default (Ling et al.'s (2024) choice).
    tol : float, default=1e-12
        Relative stopping tolerance on ``|delta tau| / tau``.
    max_iter : int, default=10000
        Iteration budget.

    Returns
    -------
    float
        The pre-activation scale ``tau`` of the DEQ.

    Raises
    ------
    ValueError
        If the iteration diverges or does not converge within ``max_iter``
        (the activation grows too fast for this ``sigma_a2``).
    """
    act = get_activation(activation)
    sa = check_sigma_a2(sigma_a2)
    sb = check_sigma_b2(sigma_b2, sa)
    t0 = check_tau0(tau0)
    tau = t0
    for _ in range(int(max_iter)):
        try:
            var = act.variance(tau)
        except (ValueError, FloatingPointError, OverflowError):
            var = np.inf
        new = math.sqrt(sa * var + sb * t0 * t0) if np.isfinite(var) else np.inf
        if not np.isfinite(new) or new > 1e6 * max(t0, 1.0):
            raise _divergence(act, sa, sb, t0)
        if abs(new - tau) <= tol * new:
            return new
        tau = new
    raise ValueError(
        f"The tau-iteration of (E0) did not converge in {max_iter} steps for activation "
        f"{act.name!r} at sigma_a2={sa:g}, tau0={t0:g} (last step {abs(new - tau):.2e}). "
        "Try a smaller sigma_a2."
    )


def _divergence(act, sa: float, sb: float, t0: float) -> ValueError:
    """The error of a diverging tau-iteration, blaming the input term when it alone leaves the bound."""
    head = f"The tau-iteration of (E0) diverges for activation {act.name!r} at sigma_a2={sa:g}, sigma_b2={sb:g}, tau0={t0:g}"
    injected = math.sqrt(sb) * t0  # tau from the input term sigma_b2 tau0^2 alone: a lower bound
    if not injected <= 1e6 * max(t0, 1.0):
        return ValueError(
            f"{head}: the input term alone puts the pre-activation scale at sqrt(sigma_b2) tau0 = {injected:.3g}, more "
            f"than 1e6 times the data scale. Use a smaller sigma_b2 (None is 1 - sigma_a2 = {1.0 - sa:g})."
        )
    larger = f", or a smaller sigma_b2 (the input term alone gives {injected:.3g})" if sb > 1.0 - sa else ""
    return ValueError(f"{head}: the DEQ has no stable pre-activation scale. Try a smaller sigma_a2 or tau0{larger}.")


def _denominator(value: float, what: str, act: str, sigma_a2: float) -> float:
    if not value > 1e-12:
        raise ValueError(
            f"The DEQ kernel recursion is not contracting for activation {act!r} at "
            f"sigma_a2={sigma_a2:g}: {what} = {1 - value:.4g} >= 1. Try a smaller sigma_a2."
        )
    return value


def deq_ck_coefficients(
    activation: str | Activation | Callable[..., Any], sigma_a2: float, tau0: float, *, sigma_b2: float | None = None
) -> DEQCoefficients:
    """Solve the four equations for a DEQ (see :ref:`theory-equations`).

    Parameters
    ----------
    activation : str, Activation or callable
        DEQ activation (centred at ``tau`` automatically).
    sigma_a2 : float
        Recurrent weight variance in ``(0, 1)``.
    tau0 : float
        Data scale, ``tau0^2 = (1/n) sum ||x_i||^2``.
    sigma_b2 : float, optional
        Input weight variance, ``1 - sigma_a2`` by default.

    Returns
    -------
    DEQCoefficients
        ``tau, alpha1, alpha2, alpha3, alpha4`` and the moments at ``tau``.

    Examples
    --------
    >>> from sk_deq.theory import deq_ck_coefficients
    >>> c = deq_ck_coefficients("relu", 0.2, 1.0)
    >>> round(c.alpha1, 6)
    0.842105
    """
    act = get_activation(activation)
    sa = check_sigma_a2(sigma_a2)
    sb = check_sigma_b2(sigma_b2, sa)
    t0 = check_tau0(tau0)
    tau = tau_fixed_point(act, sa, t0, sigma_b2=sb)
    m = act.moments(tau)
    den1 = _denominator(1.0 - sa * m.g1, "sigma_a2 * g1", act.name, sa)
    den4 = _denominator(1.0 - sa * m.g4 / 2.0, "sigma_a2 * g4 / 2", act.name, sa)
    alpha1 = sb / den1
    alpha4 = sb / den4
    alpha2 = sa * m.g2 * alpha4**2 / (4.0 * den1)
    alpha3 = sa * m.g2 * alpha1**2 / (2.0 * den1)
    return DEQCoefficients(act.name, sa, sb, t0, tau, alpha1, alpha2, alpha3, alpha4, m)


def deq_ntk_coefficients(
    activation: str | Activation | Callable[..., Any], sigma_a2: float, tau0: float, *, sigma_b2: float | None = None
) -> DEQNTKCoefficients:
    """Coefficients ``beta1, beta2, beta3, kappa`` of the Implicit-NTK (see :ref:`theory-ntk`).

    The NTK is taken with respect to the readout and the recurrent weights
    ``A``, with the input weights ``B`` frozen.

    Parameters
    ----------
    activation : str, Activation or callable
        DEQ activation (centred at ``tau`` automatically).
    sigma_a2 : float
        Recurrent weight variance in ``(0, 1)``.
    tau0 : float
        Data scale, ``tau0^2 = (1/n) sum ||x_i||^2``.
    sigma_b2 : float, optional
        Input weight variance, ``1 - sigma_a2`` by default.

    Returns
    -------
    DEQNTKCoefficients
        ``beta1, beta2, beta3, kappa``, the intermediate quantities and the
        CK solution they are built on.

    Raises
    ------
    ValueError
        If the recursion does not contract (``sigma_a2 E[phi'^2] >= 1``), or
        as :func:`deq_ck_coefficients`.

    Examples
    --------
    >>> from sk_deq.theory import deq_ntk_coefficients
    >>> k = deq_ntk_coefficients("relu", 0.2, 1.0)
    >>> round(k.beta1, 6)
    0.221607
    """
    ck = deq_ck_coefficients(activation, sigma_a2, tau0, sigma_b2=sigma_b2)
    sa, sb, m = ck.sigma_a2, ck.sigma_b2, ck.moments
    den1 = 1.0 - sa * m.g1  # checked positive by deq_ck_coefficients
    den_d = _denominator(1.0 - sa * m.d, "sigma_a2 * d", ck.activation, sa)
    a1 = sb * m.g1 / den1
    a4 = sb / (1.0 - sa * m.g4 / 2.0)
    a2 = m.g2 * a4**2 / (4.0 * den1)
    a3 = m.g2 * (sa * a1 + sb) ** 2 / (2.0 * den1)
    delta0 = sa * m.g1
    delta1 = sa * m.g2 * (sa * a1 + sb)
    z = m.var
    kappa = math.sqrt(z / den_d)
    beta1 = a1 / (1.0 - delta0)
    beta2 = a2 / (1.0 - delta0)
    beta3 = (a3 + beta1 * delta1) / (1.0 - delta0)
    return DEQNTKCoefficients(beta1, beta2, beta3, kappa, a1, a2, a3, a4, delta0, delta1, z, ck)
