"""Validation in one place: inputs, sample weights, the theory's parameters and the estimators' constraints.

- **Inputs** (:func:`validate_samples`, :func:`check_samples`): scikit-learn's
  ``validate_data`` for every input but a torch tensor, which is validated
  with torch operations where it lies (CPU or GPU) and returned as it is,
  without a copy to numpy: two dimensions, a floating dtype, at least
  ``ensure_min_samples`` rows and one column, finite values (one host read of
  one boolean), and the number of features of the fit.  A faulty tensor gets
  scikit-learn's own error: it is then copied to numpy and validated by
  scikit-learn.  ``y`` is validated by scikit-learn as usual (tensors
  included: they are small and converted to numpy).  Meta tensors, which hold
  no data, are refused by name (:func:`reject_meta`).  Torch is never imported
  here.
- **Sample weights** (:func:`checked_weights`): finite, non-negative, one
  per sample, not all zero.  **Labels** (:func:`check_label_vector`): one
  per sample, so that no comparison with predictions can broadcast.
  **Flags** (:func:`check_bool`): a real bool, never the string ``'False'``.
- **The theory's parameters** (:func:`check_sigma_a2`, :func:`check_sigma_b2`,
  :func:`check_tau0`, :func:`check_kernel`, :func:`check_sigma_a2_bounds`,
  :func:`check_bias_variance`): what the four equations and the kernels
  accept, each a clear error naming the parameter (a ``sigma_b2`` below
  :data:`SIGMA_B2_MIN` warns: see :func:`check_sigma_b2`).
- **The estimators' constraints** (scikit-learn's ``_parameter_constraints``):
  :class:`SortedStrOptions` lists its options in sorted order in error
  messages (scikit-learn's :class:`StrOptions` prints them in set order, which
  changes from run to run); :class:`ActivationName` accepts the activation
  names :func:`sk_deq.get_activation` resolves, in any case, aliases
  included; :class:`DeviceValue` (the whole of :data:`DEVICE_CONSTRAINTS`)
  accepts the types every ``device`` parameter takes, without importing torch
  (the value is checked by :func:`sk_deq.resolve_device`);
  :data:`KERNEL_TRANSFORMER_CONSTRAINTS` are the constraints the two kernel
  transformers share; :func:`warn_unused_settings` warns about parameters set
  away from their defaults that the configuration of a fit does not use
  (:func:`warn_unused_training_settings`: those of a network's optimizer);
  :func:`fit_context` (which validates the parameters against them at
  ``fit``) and :func:`available_if` are scikit-learn's decorators, typed for
  type checkers (scikit-learn has no type hints, so they would erase the
  signatures of the methods they decorate).
"""

from __future__ import annotations

import inspect
import math
import os
import sys
import warnings
from numbers import Integral, Real
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload
from collections.abc import Callable

import numpy as np
from sklearn.exceptions import DataConversionWarning
from sklearn.utils import check_consistent_length
from sklearn.utils._param_validation import Interval, Options, StrOptions
from sklearn.utils.validation import _check_sample_weight, _check_y, validate_data

from ._runtime import DEVICE_VALUES
from .activations import ACTIVATION_NAMES, Activation

if TYPE_CHECKING:
    _Method = TypeVar("_Method", bound=Callable[..., Any])

    def fit_context(*, prefer_skip_nested_validation: bool) -> Callable[[_Method], _Method]: ...

    def available_if(check: Callable[[Any], Any]) -> Callable[[_Method], _Method]: ...

else:
    from sklearn.base import _fit_context as fit_context
    from sklearn.utils.metaestimators import available_if

__all__ = [
    "ActivationName",
    "available_if",
    "fit_context",
    "DEVICE_CONSTRAINTS",
    "DeviceValue",
    "EXPLICIT_KERNELS",
    "INPUT_SCALING",
    "KERNELS",
    "KERNEL_TRANSFORMER_CONSTRAINTS",
    "SIGMA_B2_MIN",
    "SortedStrOptions",
    "check_bias_variance",
    "check_bool",
    "check_kernel",
    "check_label_vector",
    "check_targets",
    "check_samples",
    "check_sigma_a2",
    "check_sigma_a2_bounds",
    "check_sigma_b2",
    "check_tau0",
    "checked_weights",
    "is_tensor",
    "reject_meta",
    "to_numpy",
    "validate_samples",
    "warn_unused_settings",
    "warn_unused_training_settings",
]


#: The ``check_params`` of ``validate_data`` that concern ``y`` (passed to scikit-learn's ``_check_y``).
_Y_PARAMS = ("multi_output", "y_numeric")


def is_tensor(X) -> bool:
    """Whether ``X`` is a :class:`torch.Tensor` (False without importing torch when it was never imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(X, torch.Tensor)


def reject_meta(value, name: str, owner: str | None = None) -> None:
    """Raise a ``ValueError`` for a tensor on torch's ``meta`` device: it has a shape but no values to compute with.

    Torch's own errors for one name ``.item()`` or suggest ``Tensor.cpu()``,
    which cannot copy values that do not exist.
    """
    if is_tensor(value) and value.device.type == "meta":
        who = f"{owner}: " if owner else ""
        raise ValueError(
            f"{who}{name} is a tensor on the 'meta' device, which holds a shape but no values; pass one with its "
            "data (a CPU or CUDA tensor, or a numpy array)."
        )


def to_numpy(X) -> np.ndarray:
    """``X`` as a numpy array: a tensor detached and copied to the host (a CPU tensor's memory is shared)."""
    return X.detach().cpu().numpy() if is_tensor(X) else np.asarray(X)


def validate_samples(estimator, X, y="no_validation", *, reset: bool, **check_params):
    """``validate_data(estimator, X, y, reset=reset, **check_params)``, a torch tensor ``X`` kept a tensor.

    Parameters
    ----------
    estimator : BaseEstimator
        The estimator (its ``n_features_in_`` and ``feature_names_in_`` are
        set with ``reset`` and checked without).
    X : array-like or torch.Tensor of shape (n_samples, n_features)
        The samples.  A tensor must have a floating dtype; one that
        requires grad is detached.
    y : array-like, default='no_validation'
        Targets, validated by scikit-learn (``multi_output``, ``y_numeric``
        of ``check_params``).
    reset : bool
        Whether this is a fit.
    **check_params
        ``validate_data``'s; of them a tensor uses ``ensure_min_samples``
        (default 1), and the rest only to raise scikit-learn's error for a
        faulty tensor.

    Returns
    -------
    X or (X, y)
        As ``validate_data`` returns them; ``X`` is the (detached) tensor,
        on its own device, when it was given one.

    Raises
    ------
    TypeError
        For a tensor of an integer, boolean or complex dtype.
    ValueError
        For a tensor that is not 2-D, has too few samples or no feature,
        holds NaN or infinity, or has another number of features than the
        fit: scikit-learn's messages; for ``X`` or ``y`` on torch's
        ``meta`` device (no values).
    """
    owner = type(estimator).__name__
    reject_meta(X, "X", owner)
    reject_meta(y, "y", owner)
    if not is_tensor(X):
        return validate_data(estimator, X, y, reset=reset, **check_params)
    X = X.detach()
    if not X.dtype.is_floating_point:
        raise TypeError(
            f"{owner} takes torch tensors of a floating dtype (float32 or float64), got X of "
            f"dtype {X.dtype}; convert it with X.float() or X.double()."
        )
    faulty = X.ndim != 2 or X.shape[0] < check_params.get("ensure_min_samples", 1) or X.shape[1] < 1
    if faulty or not bool(X.isfinite().all()):  # scikit-learn's error, on a numpy copy
        validate_data(estimator, to_numpy(X), y, reset=reset, **check_params)
        raise ValueError(f"X of shape {tuple(X.shape)} is not a finite 2-D array of samples.")  # not reached
    validate_data(estimator, X, reset=reset, skip_check_array=True)  # feature names and n_features_in_
    if isinstance(y, str) and y == "no_validation":
        return X
    y = _check_y(y, **{k: check_params[k] for k in _Y_PARAMS if k in check_params}, estimator=estimator)
    check_consistent_length(X, y)
    return X, y


def check_samples(X, name: str = "X", *, n_features: int | None = None, caller: str | None = None) -> np.ndarray:
    """Validate samples for the kernel functions: a dense, finite, non-empty 2-D float64 array.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The samples.
    name : str, default='X'
        How error messages call the array.
    n_features : int, optional
        The number of features it must have (that of the other argument).
    caller : str, optional
        Name of the function or class, for error messages.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)

    Raises
    ------
    ValueError
        For NaN or infinity, sparse, empty or non-2-D input, non-numeric
        values, or the wrong number of features.
    """
    from sklearn.utils.validation import check_array

    reject_meta(X, name, caller)
    X = check_array(
        X,
        accept_sparse=False,
        dtype=np.float64,
        ensure_2d=True,
        ensure_all_finite=True,
        input_name=name,
        estimator=caller,
    )
    if n_features is not None and X.shape[1] != n_features:
        where = f" ({caller})" if caller else ""
        raise ValueError(f"{name} has {X.shape[1]} features, but X has {n_features}{where}: they must match.")
    return X


def checked_weights(sample_weight, X, name: str):
    """Validated ``sample_weight`` as float64 (None stays None); all zero is an error naming ``name``."""
    if sample_weight is None:
        return None
    reject_meta(sample_weight, "sample_weight", name)
    sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
    if not np.any(sample_weight > 0):
        raise ValueError(f"{name}: all sample weights are zero; at least one must be positive.")
    return sample_weight


def check_label_vector(y, name: str = "y", owner: str | None = None):
    """``y`` with one entry per sample: a column vector raveled with scikit-learn's ``DataConversionWarning``.

    For the code that compares labels with predictions itself: a 2-D ``y``
    of one column would otherwise broadcast against 1-D predictions (every
    prediction compared with every label).  Numpy arrays, sequences and
    torch tensors (kept tensors) alike.

    Raises
    ------
    ValueError
        For a ``y`` that is neither 1-D nor a column, naming ``name``.
    """
    shape = tuple(y.shape) if hasattr(y, "shape") else np.shape(y)
    if len(shape) == 2 and shape[1] == 1:
        warnings.warn(
            f"A column-vector {name} was passed when a 1d array was expected. Please change the shape of {name} "
            "to (n_samples, ), for example using ravel().",
            DataConversionWarning,
            stacklevel=_outside_stacklevel(),
        )
        return y.reshape(-1) if hasattr(y, "reshape") else np.ravel(y)
    if len(shape) != 1:
        who = f"{owner}: " if owner else ""
        raise ValueError(f"{who}{name} must hold one label per sample, of shape (n_samples,); got shape {shape}.")
    return y


def check_targets(y, n_samples: int, name: str = "y", *, labels: bool = True):
    """Targets of ``n_samples`` samples, one entry each; with ``labels``, one label each (:func:`check_label_vector`).

    For code that takes targets straight from its caller (:func:`sk_deq.nn.train`):
    torch's losses would refuse a column of labels from deep inside, and a
    comparison with predicted labels would broadcast.
    """
    if labels:
        y = check_label_vector(y, name)
    if len(y) != n_samples:
        raise ValueError(f"{name} has {len(y)} entries for {n_samples} samples: it needs one per sample.")
    return y


@overload
def check_bool(value, name: str, owner: str | None = None, *, allow_none: Literal[False] = False) -> bool: ...


@overload
def check_bool(value, name: str, owner: str | None = None, *, allow_none: bool) -> bool | None: ...


def check_bool(value, name: str, owner: str | None = None, *, allow_none: bool = False) -> bool | None:
    """``value`` if it is a bool (numpy's included), else a ``TypeError`` naming ``name``.

    A string such as ``'False'`` is true to python, so a flag taken by
    truth would turn it on; an integer 0 or 1 is refused the same way.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if value is None and allow_none:
        return None
    who = f"{owner}: " if owner else ""
    kinds = "True, False or None" if allow_none else "True or False"
    raise TypeError(f"{who}{name} must be a bool ({kinds}), got {value!r} of type {type(value).__name__}.")


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

    inside = (os.path.dirname(os.path.abspath(__file__)) + os.sep, os.path.dirname(sklearn.__file__) + os.sep)
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
