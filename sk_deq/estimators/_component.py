"""The component that says what defines one kind of network, how its constants are prepared and how it is built.

Every torch estimator holds one as its class attribute ``_network``
(see :class:`~sk_deq.estimators._network.NetworkMixin`, which runs what it builds).
"""

from __future__ import annotations

from typing import ClassVar

import torch


__all__ = ["Network"]


class Network:
    """One kind of network, the component an estimator holds (its class attribute ``_network``).

    A component is stateless: it reads the estimator's parameters and writes
    the theory's constants onto the estimator.  It says what defines the
    network (:attr:`params`, with their scikit-learn :attr:`constraints`,
    which the estimator class takes into its ``_parameter_constraints``),
    computes those constants at the data scale (:meth:`prepare`) and builds
    the feature module (:meth:`make_features`).  The DEQ's component is
    :class:`~sk_deq.estimators._deq.DEQNetwork`, the explicit networks'
    :class:`~sk_deq.estimators._explicit.NamedLayers` and
    :class:`~sk_deq.estimators._matched.MatchedLayers`.
    """

    #: The parameters that define this kind of network besides ``NetworkMixin._NETWORK_PARAMS``.
    params: ClassVar[tuple] = ()
    #: Their scikit-learn constraints.
    constraints: ClassVar[dict] = {}
    #: Whether the features compute a block of rows in one pass (explicit nets) rather than iterate on it (a DEQ).
    one_pass: ClassVar[bool] = False
    #: Settings of the feature module that may change after fit, copied from the estimator before every use:
    #: ``{module attribute: (estimator parameter, conversion or None)}``.
    runtime_settings: ClassVar[dict] = {}

    def prepare(self, est, tau0: float) -> None:
        """Compute the theory's constants (centring, matching) at the data scale ``tau0`` onto ``est``."""
        raise NotImplementedError

    def make_features(self, est, n_features: int, n_outputs: int, generator, dtype, device) -> torch.nn.Module:
        """The feature module of ``est`` (weights drawn from ``generator``), after checking that it fits."""
        raise NotImplementedError

    def weight_shapes(self, est, n_features: int) -> list[tuple[int, int]]:
        """The shapes of the first weight matrices :meth:`make_features` draws, in order, known before :meth:`prepare`.

        A fit draws them while it stages the inputs and computes their
        statistics (``NetworkMixin._weight_source``).
        """
        raise NotImplementedError
