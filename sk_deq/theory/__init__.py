"""The four equations and the kernel coefficients.

Everything here is plain numpy/scipy: the fixed point ``tau``, the DEQ's CK
coefficients ``alpha1..alpha4`` and NTK coefficients ``beta1..beta3, kappa``,
the coefficient recursion of explicit networks (CK and NTK), exact
infinite-width kernel *entries* (scalar references), and the high-dimensional
equivalents on Gaussian-mixture data; and the ReLU-DEQ on the unit sphere in
the conventions of the workshop paper (:ref:`theory-sphere`).  The formulas are stated on the theory
page: :ref:`theory-equations`, :ref:`theory-exact`, :ref:`theory-gmm`,
:ref:`theory-ntk` and :ref:`theory-explicit`.

All kernels share one form (see :ref:`theory-gmm`)::

    K ~= linear * X^T X + V C V^T + (diagonal - tau0^2 * linear) * I
    C  = [[norm * t t^T + inner * T, norm * t], [norm * t^T, norm]]

described by :class:`KernelCoefficients` ``(linear, norm, inner, diagonal)``.
"""

from ._coefficients import (
    DEQCoefficients,
    DEQNTKCoefficients,
    KernelCoefficients,
    deq_ck_coefficients,
    deq_ntk_coefficients,
    tau_fixed_point,
)
from ._explicit import ExplicitCoefficients, explicit_coefficients
from ._entries import explicit_kernel_entry, implicit_kernel_entry
from ._gmm import gmm_equivalent_kernel, gmm_statistics
from ._sphere import (
    SphereCoefficients,
    SphereQuadraticMatch,
    normalized_relu_dual,
    sphere_ck_map,
    sphere_deq_coefficients,
    sphere_explicit_coefficients,
    sphere_ntk_map,
    sphere_quadratic_match,
)

__all__ = [
    "KernelCoefficients",
    "DEQCoefficients",
    "DEQNTKCoefficients",
    "ExplicitCoefficients",
    "tau_fixed_point",
    "deq_ck_coefficients",
    "deq_ntk_coefficients",
    "explicit_coefficients",
    "implicit_kernel_entry",
    "explicit_kernel_entry",
    "gmm_statistics",
    "gmm_equivalent_kernel",
    "SphereCoefficients",
    "SphereQuadraticMatch",
    "normalized_relu_dual",
    "sphere_ck_map",
    "sphere_ntk_map",
    "sphere_deq_coefficients",
    "sphere_explicit_coefficients",
    "sphere_quadratic_match",
]
