"""Parameter constraints shared by the estimators (scikit-learn's ``_parameter_constraints``).

:class:`SortedStrOptions` lists its options in sorted order in error messages
(scikit-learn's :class:`StrOptions` prints them in set order, which changes
from run to run).  :class:`ActivationName` accepts the activation names
:func:`sk_deq.get_activation` resolves, in any case, aliases included.
"""

from __future__ import annotations

from sklearn.utils._param_validation import StrOptions

from .activations import ACTIVATION_NAMES

__all__ = ["ActivationName", "SortedStrOptions"]


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
