"""The coefficient recursion of explicit networks (CK and NTK): :func:`explicit_coefficients` (see :ref:`theory-explicit`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._validation import EXPLICIT_KERNELS, check_bool, check_kernel, check_tau0
from ..activations import Activation, get_activation
from ._coefficients import KernelCoefficients

__all__ = ["ExplicitCoefficients", "explicit_coefficients"]


@dataclass(frozen=True)
class ExplicitCoefficients:
    """CK and NTK coefficients of an explicit network (see :ref:`theory-explicit`).

    Returned by :func:`explicit_coefficients`; every parameter is stored as
    an attribute of the same name.

    Parameters
    ----------
    layers : tuple of Activation
        The activations, first layer first.
    taus : tuple of float
        Input scale of every layer, ``(tau0, tau1, ..., tau_{L-1})``; layer
        ``l`` is centred at ``taus[l-1]``.
    tau : float
        Output scale ``tau_L``.
    a1, a2, a3, a4 : float
        CK coefficients after the last layer.
    b1, b2, b3 : float
        NTK coefficients after the last layer.
    kappa2 : float
        NTK diagonal value.
    ntk_input_layer : bool, default=False
        Whether the NTK includes the input layer ``W_1`` (see
        :func:`explicit_coefficients`).
    """

    layers: tuple
    taus: tuple
    tau: float
    a1: float
    a2: float
    a3: float
    a4: float
    b1: float
    b2: float
    b3: float
    kappa2: float
    ntk_input_layer: bool = False

    @property
    def tau0(self) -> float:
        """Data scale, the input scale of the first layer."""
        return self.taus[0]

    @property
    def centers(self) -> tuple:
        """Centring constants ``E_{tau_{l-1}}[sigma_l]`` of every layer."""
        return tuple(act.mean(t) for act, t in zip(self.layers, self.taus))

    def kernel(self, kernel: str = "ck") -> KernelCoefficients:
        """Coefficients of the explicit CK (``kernel='ck'``) or NTK (``'ntk'``).

        Parameters
        ----------
        kernel : {'ck', 'ntk'}, default='ck'
            Which kernel.

        Returns
        -------
        KernelCoefficients
            ``(a1, a2, a3, tau_L^2)`` for the CK, ``(b1, b2, b3, kappa2)``
            for the NTK, at ``tau0``.
        """
        if check_kernel(kernel, EXPLICIT_KERNELS) == "ck":
            return KernelCoefficients(self.a1, self.a2, self.a3, self.tau**2, self.tau0)
        return KernelCoefficients(self.b1, self.b2, self.b3, self.kappa2, self.tau0)


def explicit_coefficients(
    layers: Sequence[str | Activation | Callable[..., Any]], tau0: float, *, ntk_input_layer: bool = False
) -> ExplicitCoefficients:
    """Run the layer recursion of an explicit network (CK) and its NTK counterpart.

    See :ref:`theory-explicit`.

    The net is ``y_0 = x``, ``y_l = sigma_l(W_l y_{l-1}) / sqrt(m)`` with
    ``N(0, 1)`` weights and a linear readout; layer ``l`` is centred at its
    input scale ``tau_{l-1}``.  With ``G1 = (E[s'])^2``, ``G2 = (E[s''])^2``,
    ``G4 = E[(s^2)'']``, ``d = E[s'^2]`` at ``t = tau_{l-1}``::

        a1 <- G1 a1
        a2 <- G1 a2 + (G2/4) a4^2
        a3 <- G1 a3 + (G2/2) a1^2
        a4 <- (G4/2) a4,          tau_l^2 = Var_t[sigma_l]

    starting from ``(1, 0, 0, 1, tau0)``.

    The NTK follows Jacot et al., ``Theta_l = Sigma_l + Theta_{l-1} * Sigmadot_l``,
    where ``Sigmadot_l ~= G1 + G2 Sigma_{l-1}`` off the diagonal and ``d`` on
    it; its coefficients ``(b1, b2, b3, kappa^2)`` follow::

        b1 <- a1' + G1 b1
        b2 <- a2' + G1 b2
        b3 <- a3' + G1 b3 + G2 a1 b1
        kappa^2 <- tau_l^2 + d kappa^2

    (primes: this layer's new CK coefficients; ``a1``: the previous one).
    By default the NTK is taken with respect to the readout and the weights
    ``W_2 ... W_L`` that map features to features, with the input layer
    ``W_1`` frozen (``Theta_0 = 0``): this is the counterpart of the DEQ's
    Implicit-NTK, which differentiates with respect to the readout and ``A``
    but not the input weights ``B`` (see :ref:`theory-ntk`).
    ``ntk_input_layer=True`` includes ``W_1`` (``Theta_0 = X^T X``, the usual
    full NTK).

    Parameters
    ----------
    layers : sequence of str, Activation or callable
        Activations, first layer first.
    tau0 : float
        Data scale.
    ntk_input_layer : bool, default=False
        Whether the NTK includes the gradient with respect to ``W_1``.

    Returns
    -------
    ExplicitCoefficients
        The CK and NTK coefficients after the last layer, with the input
        scale ``taus`` and centring constant ``centers`` of every layer.

    Raises
    ------
    ValueError
        If ``layers`` is empty or a layer maps its inputs to a constant.

    Examples
    --------
    >>> from sk_deq.theory import explicit_coefficients
    >>> c = explicit_coefficients(["relu", "relu"], 1.0)
    >>> round(c.a1, 6), round(c.tau, 6)
    (0.0625, 0.340845)
    """
    check_bool(ntk_input_layer, "ntk_input_layer", "explicit_coefficients")
    t0 = check_tau0(tau0)
    acts = tuple(get_activation(a) for a in layers)
    if not acts:
        raise ValueError("An explicit network needs at least one layer.")
    a1, a2, a3, a4, tau = 1.0, 0.0, 0.0, 1.0, t0
    if ntk_input_layer:
        b1, b2, b3, kappa2 = 1.0, 0.0, 0.0, t0 * t0
    else:
        b1, b2, b3, kappa2 = 0.0, 0.0, 0.0, 0.0
    taus = []
    for act in acts:
        taus.append(tau)
        m = act.moments(tau)
        n1 = m.g1 * a1
        n2 = m.g1 * a2 + m.g2 / 4.0 * a4 * a4
        n3 = m.g1 * a3 + m.g2 / 2.0 * a1 * a1
        n4 = m.g4 / 2.0 * a4
        b1, b2, b3 = n1 + m.g1 * b1, n2 + m.g1 * b2, n3 + m.g1 * b3 + m.g2 * a1 * b1
        kappa2 = m.var + m.d * kappa2
        a1, a2, a3, a4, tau = n1, n2, n3, n4, math.sqrt(max(m.var, 0.0))
        if not tau > 0:
            raise ValueError(f"Layer {act!r} maps inputs of scale {taus[-1]:.4g} to a constant.")
    return ExplicitCoefficients(acts, tuple(taus), tau, a1, a2, a3, a4, b1, b2, b3, kappa2, bool(ntk_input_layer))
