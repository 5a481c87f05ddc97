"""Parameter constraints shared by the estimators (scikit-learn's ``_parameter_constraints``).

:class:`SortedStrOptions` lists its options in sorted order in error messages
(scikit-learn's :class:`StrOptions` prints them in set order, which changes
from run to run).  :class:`ActivationName` accepts the activation names
:func:`sk_deq.get_activation` resolves, in any case, aliases included.  :class:`DeviceValue` (the whole of
:data:`DEVICE_CONSTRAINTS`) accepts the types every ``device`` parameter takes, without importing torch (the
value is checked by :func:`sk_deq.resolve_device`).  :data:`KERNEL_TRANSFORMER_CONSTRAINTS` are the
constraints the two kernel transformers share.  :func:`warn_unused_settings` warns about parameters set away from
their defaults that the configuration of a fit does not use.
"""

from __future__ import annotations

import inspect
import math
import os
import sys
import warnings
from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, Options, StrOptions

from ._device import DEVICE_VALUES
from ._inputs import INPUT_SCALING, KERNELS
from .activations import ACTIVATION_NAMES, Activation

__all__ = [
    "DEVICE_CONSTRAINTS",
    "KERNEL_TRANSFORMER_CONSTRAINTS",
    "ActivationName",
    "DeviceValue",
    "SortedStrOptions",
    "warn_unused_settings",
]


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
    level, frame = 1, sys._getframe(1)  # the caller's frame is stacklevel 1 of its warnings.warn
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
