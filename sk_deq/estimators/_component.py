"""The component that says what defines one kind of network, how its constants are prepared and how it is built.

Every torch estimator holds one as its class attribute ``_network``
(see :class:`~sk_deq.estimators._network.NetworkMixin`, which runs what it builds).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from .._runtime import on_gpu
from ..nn.layers import WeightDraws

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
        """The shapes of the first weight matrices :meth:`make_features` draws, in order, known before :meth:`prepare`."""
        raise NotImplementedError

    def draw_ahead(self, est, n_features: int, seed: int, device) -> WeightDraws | torch.Generator:
        """The source of the weights of ``seed``: on a GPU, the draw of :meth:`weight_shapes` started.

        On a GPU the host draws while the inputs are copied and their
        statistics computed on the device (:class:`~sk_deq.nn.layers.WeightDraws`).
        On the CPU the generator itself: the draw waits for the build, since
        drawing beside the statistics' threads slowed fits down (the
        benchmarks page, "How the defaults were chosen").  The same weights
        either way.
        """
        generator = torch.Generator().manual_seed(seed)
        if not on_gpu(device):
            return generator
        shapes = self.weight_shapes(est, n_features)
        est._check_network_fits(shapes, n_features, 0, device)  # before the draw; the readout's at the build
        return WeightDraws(shapes, generator)
