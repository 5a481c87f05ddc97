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
  no data, are refused by name (:func:`reject_meta`), and so are missing values
  of pandas inputs and object arrays (:func:`reject_missing`: ``None``,
  ``pd.NA``, ``NaT``, which scikit-learn's conversions turn into errors about
  dtypes or label types, or into NaN after its check).  Torch is never
  imported here.
- **Dask collections** (:func:`reject_dask`): where an estimator has no
  lazy path for one, a ``TypeError`` naming what to do instead, never a
  silent load of the whole array.
- **Sample and class weights** (:func:`checked_weights`,
  :func:`check_class_weight`): finite, non-negative numbers, one per sample
  and not all zero, or one per class named in a ``class_weight`` dict.
  **Labels** (:func:`check_label_vector`): one per sample, so that no
  comparison with predictions can broadcast.  **Flags** (:func:`check_bool`):
  a real bool, never the string ``'False'``.
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

from ._data import _missing_mask  # noqa: F401  (for the modules that share it)
from ._data import (
    KERNEL_MATRIX_DASK_ADVICE,
    is_dask_collection,
    reject_dask,
    check_bool,
    check_label_vector,
    check_targets,
    check_samples,
    check_class_weight,
    checked_weights,
    is_tensor,
    reject_meta,
    reject_missing,
    to_numpy,
    validate_samples,
)
from ._params import _outside_stacklevel  # noqa: F401  (for the modules that share it)
from ._params import (
    restored_on_failure,
    ActivationName,
    DEVICE_CONSTRAINTS,
    DeviceValue,
    EXPLICIT_KERNELS,
    INPUT_SCALING,
    KERNELS,
    KERNEL_TRANSFORMER_CONSTRAINTS,
    SIGMA_B2_MIN,
    SortedStrOptions,
    check_bias_variance,
    check_kernel,
    check_sigma_a2,
    check_sigma_a2_bounds,
    check_sigma_b2,
    check_tau0,
    warn_unused_settings,
    warn_unused_training_settings,
    available_if,
    fit_context,
)

__all__ = [
    "restored_on_failure",
    "KERNEL_MATRIX_DASK_ADVICE",
    "is_dask_collection",
    "reject_dask",
    "ActivationName",
    "available_if",
    "check_bias_variance",
    "check_bool",
    "check_class_weight",
    "check_kernel",
    "check_label_vector",
    "check_samples",
    "check_sigma_a2",
    "check_sigma_a2_bounds",
    "check_sigma_b2",
    "check_targets",
    "check_tau0",
    "checked_weights",
    "DEVICE_CONSTRAINTS",
    "DeviceValue",
    "EXPLICIT_KERNELS",
    "fit_context",
    "INPUT_SCALING",
    "is_tensor",
    "KERNEL_TRANSFORMER_CONSTRAINTS",
    "KERNELS",
    "reject_meta",
    "reject_missing",
    "SIGMA_B2_MIN",
    "SortedStrOptions",
    "to_numpy",
    "validate_samples",
    "warn_unused_settings",
    "warn_unused_training_settings",
]
