"""Activations: named ones, user callables and the parametric families.

Every activation carries a numpy form (used by the theory), a torch form (used
by :mod:`sk_deq.nn`), its derivative, its breakpoints (kinks or jumps, so the
Gaussian engine integrates it exactly) and its Gaussian moments at an input
scale ``t``.  The parametric families used for matching (leaky-ReLU, hard-tanh,
quadratic) compute their moments in closed form (see :ref:`theory-explicit`);
all others go through the quadrature engine of :mod:`sk_deq.activations.gaussian`.

Centring (see :ref:`theory-deq`): the networks use
``phi(x) = phi0(x) - E_t[phi0]`` with ``t`` the scale of the pre-activation (``tau`` for a DEQ, ``tau_{l-1}`` for
layer ``l`` of an explicit net).  :meth:`Activation.moments` returns the
moments of the activation centred at the same ``t``.

This package does not import torch at import time; :meth:`Activation.torch`
imports it when first called.  Its modules: ``_base`` (:class:`Activation`,
:class:`GaussianMoments` and the numpy/torch bridge), ``_duals`` (the
:class:`DualFormula` of each activation with closed forms, which the exact
kernels use) and ``_families`` (the named activations, the parametric
families and :func:`get_activation`).
"""

from __future__ import annotations

from ._base import Activation, GaussianMoments
from ._duals import DualFormula
from ._families import ACTIVATION_NAMES, ACTIVATIONS, HardTanh, LeakyReLU, Quadratic, get_activation

__all__ = [
    "Activation",
    "GaussianMoments",
    "LeakyReLU",
    "HardTanh",
    "Quadratic",
    "ACTIVATIONS",
    "ACTIVATION_NAMES",
    "get_activation",
    "DualFormula",
]
