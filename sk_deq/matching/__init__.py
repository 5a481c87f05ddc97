"""Match a DEQ's kernel with a shallow explicit network (see :ref:`theory-matching`).

:func:`match_explicit` solves the matching equations M1-M4::

    (M1) linear_explicit   = linear_target      (X^T X)
    (M2) norm_explicit     = norm_target        (squared-norm fluctuations)
    (M3) inner_explicit    = inner_target       (squared inner products)
    (M4) identity_explicit = identity_target    (I)

where the targets are the DEQ's feature-kernel coefficients (CK) or its
Implicit-NTK coefficients (NTK), by nonlinear least squares from several
starts, and returns a :class:`MatchResult` with the explicit activation's
parameters and every equation's residual.

Residuals are scale-free: equation ``i`` is measured relative to
``max(|target_i|, 1e-3 * natural_i)``, where the natural scale of the
coefficient of ``X^T X`` is ``D / tau0^2``, that of the two squared
coefficients ``D / tau0^4`` and that of the identity ``D`` (``D`` the kernel's
diagonal value at ``||x|| = tau0``).  Each term of the kernel then carries the
same weight whatever the data scale, and a positively homogeneous DEQ (ReLU,
leaky ReLU) gets the same matched network at every ``tau0``.

Families are stacks of layer *kinds*: ``'leaky_relu'`` (slopes ``a, b``),
``'hard_tanh'`` (gain ``a``, threshold ``c``) and ``'quadratic'``
(``c2, c1``).  Solutions are not unique: the CK and NTK are unchanged by a
sign flip of any layer, by the swap ``a <-> b`` of a leaky-ReLU layer, and by
moving a positive factor from a layer's output into the next layer's input
(``k f(x)`` followed by ``g(x / k)``).  Every root is first mapped to the point of its
symmetry orbit closest to the plain activations (slopes ``(1, 0)``, hard-tanh
``(1, 1)``, quadratic ``(0, 1)``) -- over the discrete symmetries by
enumeration, over the positive factors by exact minimisation -- so the
returned parameters are a function of the root, not of the solver's path.
Among the good fits the root whose canonical point is closest to plain is
returned, with non-negative slopes: large-gain roots amplify finite-sample
fluctuations of the sample norms (see :ref:`theory-matching`).
"""

from .families import FAMILIES, LAYER_KINDS
from ._match import match_explicit
from ._problem import EQUATIONS
from ._result import MatchingError, MatchResult

__all__ = [
    "MatchResult",
    "MatchingError",
    "match_explicit",
    "FAMILIES",
    "LAYER_KINDS",
    "EQUATIONS",
]
