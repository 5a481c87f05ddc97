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
- **Dask collections** (:func:`reject_dask`): where an estimator has no
  lazy path for one, a ``TypeError`` naming what to do instead, never a
  silent load of the whole array.
- **Sample weights** (:func:`checked_weights`): finite, non-negative, one
  per sample, not all zero.
- **The theory's parameters** (:func:`check_sigma_a2`, :func:`check_sigma_b2`,
  :func:`check_tau0`, :func:`check_kernel`, :func:`check_sigma_a2_bounds`,
  :func:`check_bias_variance`): what the four equations and the kernels
  accept, each a clear error naming the parameter.
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
  away from their defaults that the configuration of a fit does not use;
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
from typing import TYPE_CHECKING, Any, TypeVar
from collections.abc import Callable

import numpy as np
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
    "SortedStrOptions",
    "check_bias_variance",
    "check_kernel",
    "check_samples",
    "check_sigma_a2",
    "check_sigma_a2_bounds",
    "check_sigma_b2",
    "check_tau0",
    "checked_weights",
    "is_dask_collection",
    "is_tensor",
    "reject_dask",
    "reject_meta",
    "to_numpy",
    "validate_samples",
    "warn_unused_settings",
]


#: The ``check_params`` of ``validate_data`` that concern ``y`` (passed to scikit-learn's ``_check_y``).
_Y_PARAMS = ("multi_output", "y_numeric")


def is_tensor(X) -> bool:
    """Whether ``X`` is a :class:`torch.Tensor` (False without importing torch when it was never imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(X, torch.Tensor)


def is_dask_collection(X) -> bool:
    """Whether ``X`` is a Dask collection (array, dataframe, bag, delayed), without importing dask.

    Parameters
    ----------
    X : object
        Anything.

    Returns
    -------
    bool
        True for an object of one of dask's own types.
    """
    return type(X).__module__.partition(".")[0] in {"dask", "dask_expr"}


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
        For a tensor of an integer, boolean or complex dtype; for a Dask
        collection (:func:`reject_dask`).
    ValueError
        For a tensor that is not 2-D, has too few samples or no feature,
        holds NaN or infinity, or has another number of features than the
        fit: scikit-learn's messages; for ``X`` or ``y`` on torch's
        ``meta`` device (no values).
    """
    owner = type(estimator).__name__
    reject_dask(estimator, X=X, y=y, reset=reset)
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


#: What to do with a Dask array that an estimator cannot take lazily, unless its class says better (``_DASK_ADVICE``).
_DASK_ADVICE = (
    "Compute the rows it needs first (X.compute() where it fits in memory, or a sample of its rows); see the user "
    "guide's 'Larger than memory'."
)

#: The same for the kernel functions and the Gaussian-process kernel, which return a whole kernel matrix.
KERNEL_MATRIX_DASK_ADVICE = (
    "A kernel matrix of its rows is held whole in memory: compute it on X.compute() where that fits; for more rows, "
    "ImplicitCKTransformer.transform maps a Dask array lazily, ImplicitCKNystroem gives features of any number of "
    "rows, and ImplicitCKRidge fits a Dask array on a distributed cluster."
)


def reject_dask(estimator, *, reset: bool, **values) -> None:
    """A ``TypeError`` naming the way out for a Dask collection among ``values``: never loaded here in silence.

    The estimators' lazy paths (``transform``, ``predict``... of a Dask
    array) handle Dask arrays before validating; anything else that would
    need all of it in this process's memory (a fit that keeps its data, a
    method without a lazy path) is refused.  The advice is the class's
    ``_DASK_ADVICE`` where it has one.
    """
    for name, value in values.items():
        if is_dask_collection(value):
            from ._dask import dask_refusal

            advice = getattr(estimator, "_DASK_ADVICE", _DASK_ADVICE)
            raise dask_refusal(type(estimator).__name__, name, value, "fit" if reset else "use here", advice)


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

    if is_dask_collection(X):
        from ._dask import dask_refusal

        raise dask_refusal(caller or "The kernel", name, X, "compute a kernel matrix", KERNEL_MATRIX_DASK_ADVICE)
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
    if is_dask_collection(sample_weight):
        from ._dask import dask_refusal

        raise dask_refusal(name, "sample_weight", sample_weight, "fit", "Compute it first (sample_weight.compute()).")
    reject_meta(sample_weight, "sample_weight", name)
    sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
    if not np.any(sample_weight > 0):
        raise ValueError(f"{name}: all sample weights are zero; at least one must be positive.")
    return sample_weight


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


def check_sigma_b2(sigma_b2, sigma_a2: float) -> float:
    """``sigma_b2`` as a positive float, ``1 - sigma_a2`` when ``None``."""
    if sigma_b2 is None:
        return 1.0 - sigma_a2
    s = float(sigma_b2)
    if not (np.isfinite(s) and s > 0.0):
        raise ValueError(f"sigma_b2 must be positive and finite, got {sigma_b2!r}.")
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
    "sigma_b2": [Interval(Real, 0, None, closed="neither"), None],
    "bias_variance": [Interval(Real, 0, math.inf, closed="left")],
    "input_scaling": [SortedStrOptions(set(INPUT_SCALING))],
    "block_size": [Interval(Integral, 1, None, closed="left"), None],
    "n_jobs": [Integral, None],
    "device": DEVICE_CONSTRAINTS,
    "tol": [Interval(Real, 0, None, closed="neither")],
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
