"""Validation of the parameters: the theory's (sigma_a2, sigma_b2, tau0, kernel, bias variance), the estimators' constraints, unused settings.

And the two decorators of every ``fit``: :func:`fit_context`, which
validates the parameters first, and :func:`restored_on_failure`, which puts
the fitted state back when the fit raises.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import os
import sys
import warnings
from numbers import Integral, Real
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar
from collections.abc import Callable

import numpy as np
from sklearn.utils._param_validation import Interval, Options, StrOptions

from .._runtime import DEVICE_VALUES
from ..activations import ACTIVATION_NAMES, Activation

if TYPE_CHECKING:
    _Method = TypeVar("_Method", bound=Callable[..., Any])

    def fit_context(*, prefer_skip_nested_validation: bool) -> Callable[[_Method], _Method]: ...

    def available_if(check: Callable[[Any], Any]) -> Callable[[_Method], _Method]: ...

else:
    from sklearn.base import _fit_context as fit_context
    from sklearn.utils.metaestimators import available_if

__all__ = [
    "restored_on_failure",
    "ActivationName",
    "DEVICE_CONSTRAINTS",
    "DeviceValue",
    "EXPLICIT_KERNELS",
    "INPUT_SCALING",
    "KERNELS",
    "KERNEL_TRANSFORMER_CONSTRAINTS",
    "SIGMA_B2_MIN",
    "SortedStrOptions",
    "check_bias_variance",
    "check_kernel",
    "check_sigma_a2",
    "check_sigma_a2_bounds",
    "check_sigma_b2",
    "check_tau0",
    "warn_unused_settings",
    "warn_unused_training_settings",
    "available_if",
    "fit_context",
]


INPUT_SCALING = ("global", "none")


KERNELS = ("ck", "feature", "ntk")
"""The implicit kernels: the DEQ's CK ``G*``, its feature kernel ``Sigma*`` and its NTK."""


EXPLICIT_KERNELS = ("ck", "ntk")
"""The kernels an explicit network is matched on, and whose exact forms it has."""


def check_kernel(kernel, allowed: tuple = KERNELS) -> str:
    """``kernel`` if it is one of ``allowed``, else a ``ValueError`` listing them."""
    if not isinstance(kernel, str) or kernel not in allowed:
        names = ", ".join(repr(k) for k in allowed[:-1]) + f" or {allowed[-1]!r}"
        raise ValueError(f"kernel must be {names}, got {kernel!r}.")
    return kernel


def _real(value, name: str) -> float:
    """``value`` as a float, or a ``TypeError`` naming ``name``."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}.") from None


def check_sigma_a2(sigma_a2) -> float:
    """``sigma_a2`` as a float in (0, 1), or a clear error."""
    s = _real(sigma_a2, "sigma_a2")
    if not (np.isfinite(s) and 0.0 < s < 1.0):
        raise ValueError(
            f"sigma_a2 must lie in the open interval (0, 1), got {sigma_a2!r}; the DEQ's weight "
            "variance sigma_a2 scales the recurrent weights A and sigma_b2 = 1 - sigma_a2 the input "
            "weights B (Ling et al., 2024, use 0.2)."
        )
    return s


def check_sigma_a2_bounds(bounds):
    """``sigma_a2_bounds`` of a Gaussian-process kernel, returned as given: ``'fixed'`` or ``(low, high)``, ``0 < low < high < 1``.

    The GP optimiser searches ``log(sigma_a2)`` between the bounds, and
    ``sigma_a2`` lies in ``(0, 1)``; anything else is a ``ValueError``
    naming the fault (a NaN bound would otherwise be ignored by the
    optimiser).
    """
    rule = "sigma_a2_bounds must be 'fixed' or a pair (low, high) with 0 < low < high < 1"
    if isinstance(bounds, str):
        if bounds == "fixed":
            return bounds
        raise ValueError(f"{rule}, got the string {bounds!r}.")
    try:
        pair = np.asarray(bounds, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{rule}, got {bounds!r}.") from None
    if pair.shape not in ((2,), (1, 2)):
        raise ValueError(f"{rule}, got {bounds!r} (shape {pair.shape}, not two numbers).")
    low, high = pair.reshape(2)
    if not np.isfinite(pair).all():
        fault = "a bound is not finite"
    elif not low > 0:
        fault = "the lower bound must be positive (sigma_a2 is optimised on a log scale)"
    elif not high < 1:
        fault = "the upper bound must be below 1 (sigma_a2 lies in (0, 1))"
    elif not low < high:
        fault = "the lower bound must be below the upper one (use 'fixed' to keep sigma_a2 fixed)"
    else:
        return bounds
    raise ValueError(f"{rule}; got {bounds!r}: {fault}.")


#: The smallest ``sigma_b2`` taken without a warning: the input term's variance ``sigma_b2 tau0^2`` at 1e-4 of
#: the unit scale of the inputs (see :func:`check_sigma_b2`).
SIGMA_B2_MIN = 1e-4


def check_sigma_b2(sigma_b2, sigma_a2: float) -> float:
    """``sigma_b2`` as a positive float, ``1 - sigma_a2`` when ``None``; a ``UserWarning`` below :data:`SIGMA_B2_MIN`.

    ``sigma_b2 tau0^2`` is the variance of the input term, and every
    feature and kernel entry of a DEQ scales with it (exactly for ReLU-like
    activations, to first order for the others): a small ``sigma_b2`` acts
    as shrinking the inputs by ``sqrt(sigma_b2)``.  The inputs are brought
    to unit scale (``tau0 = 1`` under ``input_scaling='global'``) because
    the settings of unit scale assume it: a kernel's ``bias_variance`` (1),
    an estimator's ``tol`` and ``alpha``.  Below the bound the input term's
    scale ``sqrt(sigma_b2) tau0`` is under 1 % of that unit, and with the
    default settings a fit falls to chance accuracy (the readout's first
    gradient is already under ``tol``) and a kernel with ``bias_variance=1``
    is 1.0 to about ``-log10(sigma_b2)`` digits.  The setting is not wrong
    in itself (with ``tol``, ``alpha`` and ``bias_variance`` scaled by it
    the fits recover), hence a warning, not an error.
    """
    if sigma_b2 is None:
        return 1.0 - sigma_a2
    s = _real(sigma_b2, "sigma_b2")
    if not (np.isfinite(s) and s > 0.0):
        raise ValueError(f"sigma_b2 must be positive and finite, got {sigma_b2!r}.")
    if s < SIGMA_B2_MIN:
        warnings.warn(
            f"sigma_b2={s:g} is below {SIGMA_B2_MIN:g}: the input term sigma_b2 * tau0^2 sets the scale of every "
            "feature and kernel entry (tau0 = 1 under input_scaling='global'), and below that bound the settings of "
            "unit scale swamp it: an estimator's readout stops at its first step (tol, alpha) and a kernel's "
            "bias_variance hides the data. Use a larger sigma_b2 (None: 1 - sigma_a2), or scale tol, alpha and "
            "bias_variance with sigma_b2.",
            UserWarning,
            stacklevel=_outside_stacklevel(),
        )
    return s


def check_bias_variance(value) -> float:
    """A kernel's ``bias_variance`` as a finite non-negative float, or a ValueError naming it."""
    v = float(value) if isinstance(value, Real) and not isinstance(value, bool) else math.nan
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"bias_variance must be a finite non-negative number, got {value!r}.")
    return v


def check_tau0(tau0) -> float:
    """The data scale ``tau0`` as a positive finite float, or a clear error."""
    t = _real(tau0, "tau0")
    if not (np.isfinite(t) and t > 0.0):
        raise ValueError(
            f"tau0 must be positive and finite, got {tau0!r}; tau0^2 is the mean squared sample "
            "norm (1/n) sum ||x_i||^2 of the data."
        )
    return t


class SortedStrOptions(StrOptions):
    """:class:`~sklearn.utils._param_validation.StrOptions` whose message lists the options sorted."""

    def __str__(self):
        return f"a str among {{{', '.join(repr(o) for o in sorted(self.options))}}}"


class ActivationName(SortedStrOptions):
    """A named activation, case-insensitive (``'ReLU'`` is ``'relu'``), aliases included."""

    def __init__(self):
        super().__init__(set(ACTIVATION_NAMES))

    def is_satisfied_by(self, val):
        return isinstance(val, str) and val.lower() in self.options


class DeviceValue(Options):
    """A ``device`` parameter's type: None, a str or a :class:`torch.device` (recognised without importing torch).

    Its message lists the values :func:`sk_deq.resolve_device` accepts; that
    function checks the value at ``fit``, ``predict`` and ``transform`` (a
    ``ValueError`` naming the parameter and the reason).
    """

    def __init__(self):
        super().__init__(object, set())

    def is_satisfied_by(self, val):
        if val is None or isinstance(val, str):
            return True
        return type(val).__name__ == "device" and type(val).__module__ == "torch"

    def __str__(self):
        return DEVICE_VALUES


#: The types of every ``device`` parameter, networks and kernels alike; the
#: values are checked by :func:`sk_deq.resolve_device`.
DEVICE_CONSTRAINTS = [DeviceValue()]


#: Parameter constraints shared by the transformers of the implicit kernels
#: (:class:`~sk_deq.ImplicitCKTransformer` and :class:`~sk_deq.ImplicitCKNystroem`).
KERNEL_TRANSFORMER_CONSTRAINTS = {
    "activation": [ActivationName(), Activation, callable],
    "sigma_a2": [Interval(Real, 0, 1, closed="neither")],
    "kernel": [SortedStrOptions(set(KERNELS))],
    "sigma_b2": [Interval(Real, 0, math.inf, closed="neither"), None],
    "bias_variance": [Interval(Real, 0, math.inf, closed="left")],
    "input_scaling": [SortedStrOptions(set(INPUT_SCALING))],
    "block_size": [Interval(Integral, 1, None, closed="left"), None],
    "n_jobs": [Integral, None],
    "device": DEVICE_CONSTRAINTS,
    "tol": [Interval(Real, 0, math.inf, closed="neither")],
    "random_state": ["random_state"],
}


def _is_default(value, default) -> bool:
    if value is default:
        return True
    if isinstance(value, str) != isinstance(default, str) or isinstance(value, bool) != isinstance(default, bool):
        return False
    try:
        return bool(value == default)
    except (TypeError, ValueError):  # an array compared elementwise
        return False


def _outside_stacklevel() -> int:
    """The ``stacklevel`` of a ``warnings.warn`` in the caller that points at the first frame outside sk_deq and scikit-learn."""
    import sklearn

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # sk_deq/, above this service's folder
    inside = (package + os.sep, os.path.dirname(sklearn.__file__) + os.sep)
    level = 1
    frame: FrameType | None = sys._getframe(1)  # the caller's frame is stacklevel 1 of its warnings.warn
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(inside):
        level, frame = level + 1, frame.f_back
    return level


def warn_unused_settings(estimator, names, reason: str) -> list[str]:
    """Warn about the parameters of ``names`` that ``estimator`` holds away from their defaults: they do not apply.

    A setting that cannot apply to the configuration of a fit (the step
    size of an optimizer that does not run, say) would otherwise be ignored
    in silence; left at its default it says nothing and is passed over.

    Parameters
    ----------
    estimator : BaseEstimator
        The estimator (its ``__init__`` gives the defaults).
    names : iterable of str
        Parameters the configuration does not use.
    reason : str
        Why they do not apply, completing "<Estimator> does not use <settings>: ".

    Returns
    -------
    list of str
        The ``name=value`` of the settings warned about (empty: no warning).
    """
    signature = inspect.signature(type(estimator).__init__).parameters
    unused = [
        f"{name}={getattr(estimator, name)!r}"
        for name in names
        if not _is_default(getattr(estimator, name), signature[name].default)
    ]
    if unused:
        warnings.warn(
            f"{type(estimator).__name__} does not use {', '.join(unused)}: {reason}.",
            UserWarning,
            stacklevel=_outside_stacklevel(),
        )
    return unused


def warn_unused_training_settings(estimator, optimizer: str) -> None:
    """Warn about the training settings of a network ``estimator`` that ``optimizer`` (its fit's) does not use."""
    if getattr(estimator, "readout", None) == "ridge":
        cause = "readout='ridge'"
    elif estimator.solver == "auto":
        cause = f"solver='auto' with trainable={estimator.trainable!r}"
    else:
        cause = f"solver={estimator.solver!r}"
    unused = []  # (names, why)
    if optimizer == "ridge":
        names = ["learning_rate_init", "batch_size", "max_iter", "tol", "n_iter_no_change"]
        unused.append((names, f"this fit solves for the readout in closed form ({cause}), with no optimizer"))
    elif optimizer == "lbfgs":
        why = f"this fit runs full-batch L-BFGS ({cause}), which takes no step size and no minibatches"
        unused.append((["learning_rate_init", "batch_size"], why))
        if not estimator.early_stopping:
            unused.append((["n_iter_no_change"], "L-BFGS without early_stopping stops on its own test"))
    if not estimator.early_stopping:
        unused.append((["validation_fraction"], "it sizes the validation split of early_stopping=True"))
    for names, why in unused:
        warn_unused_settings(estimator, names, why)


def restored_on_failure(method):
    """``fit`` or ``partial_fit`` that, on any exception, puts back the fitted state it found (deep-copied first).

    Weights, the ``partial_fit`` stream, the history and every fitted
    attribute: a diverged refit leaves no diverged weights that predict, and
    an unfitted estimator stays unfitted.  The parameters are left as they are.
    """

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        params = set(self._get_param_names())
        kept = {k: v for k, v in self.__dict__.items() if k in params}
        fitted = copy.deepcopy({k: v for k, v in self.__dict__.items() if k not in params})  # one copy: shared refs
        try:
            return method(self, *args, **kwargs)
        except Exception:
            self.__dict__.clear()
            self.__dict__.update({**kept, **fitted})
            raise

    return call
