"""Kernel matrices of DEQs and explicit networks (numpy only).

Three ways to obtain the DEQ's Implicit-CK / feature kernel / Implicit-NTK
(see :ref:`theory-exact` and :ref:`theory-ntk`) as a plain function of the
data, in the spirit of neural-tangents:

* :func:`implicit_kernel`: the exact infinite-width fixed point of every
  entry (closed forms for ReLU / leaky ReLU, erf, GELU and quadratic
  activations; a Hermite (Mehler) expansion of the dual activation with a
  quadrature fallback for any other activation), computed block by block so
  that memory stays bounded, optionally in parallel through joblib, or in
  torch on a CPU or CUDA device (:class:`ImplicitKernelEngine` with a
  ``device``);
* :func:`monte_carlo_implicit_kernel`: averages over random finite-width
  DEQs, as in Ling et al.'s (2024) experiments (also between two data sets, with the
  features of both computed by the same random networks);
* :func:`linearized_implicit_kernel`: a label-free form of the
  high-dimensional equivalent (see :ref:`theory-gmm`);
* :func:`sphere_implicit_kernel`: the ReLU-DEQ on the unit sphere in the
  workshop paper's conventions (uncentred activation, see
  :ref:`theory-sphere`), with :func:`sphere_explicit_kernel` for one explicit
  layer in the same conventions.

Also the relative spectral-norm error used to compare kernels (see
:ref:`theory-equivalence`) and Monte-Carlo kernels of explicit networks.
Networks are those of :ref:`theory-deq` and :ref:`theory-explicit`: weights
``N(0, 1)``, features scaled by ``1/sqrt(m)``, no ``1/sqrt(p)`` on the input
weights (inputs are expected with ``||x||^2`` of order one), activations
centred at their input scale.

The package has one module per concern: ``montecarlo`` (random networks),
``engine`` (the exact implicit kernels) with ``duals`` (its closed-form
solvers), ``mehler`` and ``series`` (the Hermite expansion and its Newton,
written once for numpy and torch), ``numerics`` (quadrature and root finding) and
``torch_engine`` (the kernel blocks in torch, imported only for a device),
``linearized``, ``explicit`` (exact kernels of explicit networks),
``sphere`` (the unit-sphere kernels of the workshop paper),
``memory`` (what fits, block sizes) and ``metrics``.  Everything public is
importable from ``sk_deq.kernels``.
"""

from __future__ import annotations

from ._mehler import MEHLER_MAX_DEGREE as MEHLER_MAX_DEGREE
from .engine import ImplicitKernelEngine, implicit_kernel, implicit_kernel_diagonal
from .explicit import explicit_kernel
from .linearized import linearized_block as linearized_block
from .linearized import linearized_implicit_kernel, linearized_kernel_coefficients
from .._runtime import auto_block_size as auto_block_size
from .._runtime import check_kernel_fits_in_memory
from .metrics import relative_spectral_error
from .sphere import make_sphere, sphere_explicit_kernel, sphere_implicit_kernel
from .montecarlo import (
    MonteCarloDEQSampler,
    anderson_fixed_point,
    monte_carlo_explicit_kernel,
    monte_carlo_implicit_kernel,
)

__all__ = [
    "relative_spectral_error",
    "anderson_fixed_point",
    "monte_carlo_implicit_kernel",
    "monte_carlo_explicit_kernel",
    "MonteCarloDEQSampler",
    "implicit_kernel",
    "implicit_kernel_diagonal",
    "linearized_implicit_kernel",
    "linearized_kernel_coefficients",
    "check_kernel_fits_in_memory",
    "ImplicitKernelEngine",
    "explicit_kernel",
    "make_sphere",
    "sphere_implicit_kernel",
    "sphere_explicit_kernel",
]
