"""Exact kernel ridge regression with the implicit CK or NTK of a DEQ, at the size of the paper's data sets.

:class:`ImplicitCKRidge` (regression) and :class:`ImplicitCKRidgeClassifier`
(±1 targets, one column per class) hold the training kernel once, its lower
triangle in tiles (float64, or float32 where float64 does not fit), and
solve ``(K + alpha I) C = Y`` for all targets at once: by a blocked
Cholesky factorisation in place, or by conjugate gradients with a
randomly pivoted Cholesky preconditioner.  Prediction streams the test
kernel in row blocks.
"""

from ._estimators import ImplicitCKRidge, ImplicitCKRidgeClassifier

__all__ = ["ImplicitCKRidge", "ImplicitCKRidgeClassifier"]
