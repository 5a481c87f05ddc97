"""Exact infinite-width kernel entries, one at a time: the scalar references of the kernel engines."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..activations.gaussian import expect_pair
from .._validation import EXPLICIT_KERNELS, check_bool, check_kernel
from ..activations import Activation, get_activation
from ._coefficients import deq_ck_coefficients
from ._explicit import explicit_coefficients


def _pair(act: Activation, center: float, a: float, b: float, c: float, derivative: bool = False) -> float:
    if derivative:
        f = act.derivative
    else:

        def f(x):
            return act(x) - center

    return expect_pair(f, f, a, b, c, act.breakpoints, act.breakpoints)


def _scalar_fixed_point(
    update, x0: float, tol: float = 1e-13, max_iter: int = 200, bounds=(-np.inf, np.inf), scale: float = 0.0
) -> float:
    """Solve ``x = update(x)`` for a contraction, with Aitken's delta-squared acceleration.

    Extrapolated points are clipped to ``bounds`` (e.g. Cauchy-Schwarz for a
    covariance).  The stopping rule is relative, ``|dx| <= tol * max(|x|,
    scale)``, so the precision is the same at every data scale; ``scale`` is
    the natural size of a solution that may be near zero (e.g. the bound of a
    covariance).
    """
    x = x0
    for _ in range(max_iter):
        x1 = update(x)
        if not np.isfinite(x1):
            raise ValueError("Kernel fixed-point iteration diverged; try a smaller sigma_a2.")
        if abs(x1 - x) <= tol * max(abs(x1), scale):
            return x1
        x2 = update(x1)
        if not np.isfinite(x2):
            raise ValueError("Kernel fixed-point iteration diverged; try a smaller sigma_a2.")
        if abs(x2 - x1) <= tol * max(abs(x2), scale):
            return x2
        denom = x2 - 2.0 * x1 + x
        x = x2 - (x2 - x1) ** 2 / denom if denom != 0.0 else x2
        x = min(max(x, bounds[0]), bounds[1])
    raise ValueError("Kernel fixed-point iteration did not converge; try a smaller sigma_a2.")


def implicit_kernel_entry(
    activation,
    sigma_a2: float,
    tau0: float,
    x_sq: float,
    y_sq: float,
    xy: float,
    *,
    kernel: str = "ck",
    sigma_b2: float | None = None,
) -> float:
    """One entry of the exact infinite-width Implicit-CK, feature kernel or NTK.

    Solves the scalar fixed points of the Implicit-CK recursion (see
    :ref:`theory-exact`; diagonal entries first, then the off-diagonal one)
    for two inputs with ``||x||^2 = x_sq``,
    ``||y||^2 = y_sq`` and ``x^T y = xy``; ``phi`` is centred at the DEQ's
    ``tau`` for data scale ``tau0``.  A slow scalar reference (2-D quadrature
    per step), used to check the coefficient formulas and the vectorised
    kernels.

    Parameters
    ----------
    activation : str, Activation or callable
        DEQ activation ``phi0``.
    sigma_a2 : float
        Recurrent weight variance in ``(0, 1)``.
    tau0 : float
        Data scale fixing the centring constant.
    x_sq, y_sq : float
        Squared norms ``||x||^2`` and ``||y||^2``.
    xy : float
        Inner product ``x^T y`` (``xy^2 <= x_sq y_sq``).
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        ``'ck'``: ``G*`` (with the ``sigma_b2 x^T y`` injection);
        ``'feature'``: ``Sigma* = (G* - sigma_b2 x^T y) / sigma_a2``;
        ``'ntk'``: ``Sigma* / (1 - sigma_a2 Sigmadot*)`` (see :ref:`theory-ntk`).
    sigma_b2 : float, optional
        Input weight variance, ``1 - sigma_a2`` by default.

    Returns
    -------
    float
        The kernel entry ``K(x, y)``.

    Raises
    ------
    ValueError
        If the inputs violate Cauchy-Schwarz or a fixed point diverges.
    """
    check_kernel(kernel)
    ck = deq_ck_coefficients(activation, sigma_a2, tau0, sigma_b2=sigma_b2)
    act = get_activation(activation)
    sa, sb, center = ck.sigma_a2, ck.sigma_b2, ck.moments.mean

    def diag(n_sq):
        return _scalar_fixed_point(lambda g: sa * _pair(act, center, g, g, g) + sb * n_sq, ck.tau**2)

    gxx, gyy = diag(x_sq), diag(y_sq)
    if xy * xy > x_sq * y_sq * (1 + 1e-12):
        raise ValueError("Inputs violate Cauchy-Schwarz: xy^2 > x_sq * y_sq.")
    bound = math.sqrt(gxx * gyy)
    if x_sq == y_sq == xy:
        # x = y: the diagonal's fixed point, exactly (an iterate that stops an
        # ulp short of the bound moves derivative expectations by sqrt(ulp)).
        gxy = gxx
    else:
        gxy = _scalar_fixed_point(
            lambda g: sa * _pair(act, center, gxx, gyy, g) + sb * xy, sb * xy, bounds=(-bound, bound), scale=bound
        )
    if kernel == "ck":
        return gxy
    feature = (gxy - sb * xy) / sa
    if kernel == "feature":
        return feature
    dot = _pair(act, 0.0, gxx, gyy, gxy, derivative=True)
    return feature / (1.0 - sa * dot)


def explicit_kernel_entry(
    layers: Sequence,
    tau0: float,
    x_sq: float,
    y_sq: float,
    xy: float,
    *,
    kernel: str = "ck",
    ntk_input_layer: bool = False,
) -> float:
    """One entry of the exact infinite-width CK or NTK of an explicit network.

    Layer ``l`` is centred at ``tau_{l-1}`` of the data scale ``tau0``, and
    the NTK convention is that of :func:`explicit_coefficients`.  Scalar
    reference, like :func:`implicit_kernel_entry`.

    Parameters
    ----------
    layers : sequence of str, Activation or callable
        Activations, first layer first.
    tau0 : float
        Data scale fixing the centring constants.
    x_sq, y_sq : float
        Squared norms ``||x||^2`` and ``||y||^2``.
    xy : float
        Inner product ``x^T y``.
    kernel : {'ck', 'ntk'}, default='ck'
        The CK ``Sigma_L`` or the NTK ``Theta_L``.
    ntk_input_layer : bool, default=False
        Whether the NTK includes the gradient with respect to ``W_1``.

    Returns
    -------
    float
        The kernel entry ``K(x, y)``.
    """
    check_bool(ntk_input_layer, "ntk_input_layer", "explicit_kernel_entry")
    check_kernel(kernel, EXPLICIT_KERNELS)
    coefs = explicit_coefficients(layers, tau0)
    sxx, syy, sxy = float(x_sq), float(y_sq), float(xy)
    theta = sxy if ntk_input_layer else 0.0
    for act, center in zip(coefs.layers, coefs.centers):
        dot = _pair(act, 0.0, sxx, syy, sxy, derivative=True)
        nxx = _pair(act, center, sxx, sxx, sxx)
        nyy = _pair(act, center, syy, syy, syy)
        nxy = _pair(act, center, sxx, syy, sxy)
        theta = nxy + theta * dot
        sxx, syy, sxy = nxx, nyy, nxy
    return sxy if kernel == "ck" else theta
