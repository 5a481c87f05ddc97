"""sk_deq: deep equilibrium models and their shallow explicit equivalents.

The theory (:mod:`sk_deq.theory`, :mod:`sk_deq.matching`, :mod:`sk_deq.kernels`)
needs only numpy and scipy; the estimators import torch when first used.

"Ling et al. (2024)" in the docstrings is the paper whose results the
package implements:

Zenan Ling, Longbo Li, Zhanbo Feng, Yixuan Zhang, Feng Zhou, Robert C. Qiu
and Zhenyu Liao.  Deep Equilibrium Models are Almost Equivalent to
Not-so-deep Explicit Models for High-dimensional Gaussian Mixtures.
Proceedings of the 41st International Conference on Machine Learning
(ICML 2024), PMLR 235.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from ._persistence import IncompatiblePickleError, InconsistentVersionWarning
from ._persistence import install as _install_persistence
from ._runtime import resolve_device
from .activations import Activation, get_activation
from .datasets import make_gaussian_mixture
from .matching import MatchingError, match_explicit
from .theory import deq_ck_coefficients, deq_ntk_coefficients, explicit_coefficients

__version__ = "0.2.0"

_install_persistence()  # the removed names of earlier versions' pickles: a clear error

if TYPE_CHECKING:  # the names __getattr__ imports on first use, for type checkers ('as': re-exported)
    from .estimators import DEQClassifier as DEQClassifier
    from .estimators import DEQRegressor as DEQRegressor
    from .estimators import ExplicitClassifier as ExplicitClassifier
    from .estimators import ExplicitRegressor as ExplicitRegressor
    from .estimators import MatchedExplicitClassifier as MatchedExplicitClassifier
    from .estimators import MatchedExplicitRegressor as MatchedExplicitRegressor
    from .gaussian_process import ImplicitCKKernel as ImplicitCKKernel
    from .kernel_approximation import ImplicitCKNystroem as ImplicitCKNystroem
    from .kernel_ridge import ImplicitCKRidge as ImplicitCKRidge
    from .kernel_ridge import ImplicitCKRidgeClassifier as ImplicitCKRidgeClassifier
    from .transformers import ImplicitCKTransformer as ImplicitCKTransformer

_LAZY = {
    "DEQClassifier": "sk_deq.estimators",
    "DEQRegressor": "sk_deq.estimators",
    "ExplicitClassifier": "sk_deq.estimators",
    "ExplicitRegressor": "sk_deq.estimators",
    "MatchedExplicitClassifier": "sk_deq.estimators",
    "MatchedExplicitRegressor": "sk_deq.estimators",
    "ImplicitCKTransformer": "sk_deq.transformers",
    "ImplicitCKKernel": "sk_deq.gaussian_process",
    "ImplicitCKNystroem": "sk_deq.kernel_approximation",
    "ImplicitCKRidge": "sk_deq.kernel_ridge",
    "ImplicitCKRidgeClassifier": "sk_deq.kernel_ridge",
}

__all__ = [
    *_LAZY,
    "Activation",
    "get_activation",
    "make_gaussian_mixture",
    "match_explicit",
    "MatchingError",
    "deq_ck_coefficients",
    "deq_ntk_coefficients",
    "explicit_coefficients",
    "resolve_device",
    "IncompatiblePickleError",
    "InconsistentVersionWarning",
    "__version__",
]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sk_deq' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
