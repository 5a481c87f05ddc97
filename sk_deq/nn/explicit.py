"""The explicit network (see :ref:`theory-explicit`).

    y_0 = x,   y_l = (sigma_l(W_l y_{l-1}) - c_l) / sqrt(m),   l = 1..L

with ``W_1`` (m x p) and ``W_l`` (m x m) i.i.d. ``N(0, 1)`` at initialisation
(no ``1/sqrt(p)`` on the input layer: the inputs are expected with
``||x||^2`` of order one) and ``c_l`` the centring constant of layer ``l`` at
its input scale, ``E_{tau_{l-1}}[sigma_l]`` (from
:func:`sk_deq.theory.explicit_coefficients` or a
:class:`sk_deq.matching.MatchResult`; this module takes them as numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from ..activations import get_activation
from ._random import gaussian_weights

__all__ = ["ExplicitNet"]


class ExplicitNet(nn.Module):
    """Random-feature explicit network ``x -> y_L`` with any number of layers.

    Parameters
    ----------
    n_features : int
        Input dimension ``p``.
    n_hidden : int
        Width ``m`` of every layer.
    layers : sequence of str, Activation or callable
        Activations, first layer first.
    centers : sequence of float
        Centring constant of every layer.
    trainable : sequence of bool, optional
        Which weight matrices receive gradients (none by default).
    generator : torch.Generator, optional
        Source of the ``N(0, 1)`` weights, drawn as those of
        :class:`~sk_deq.nn.DEQLayer` (:func:`~sk_deq.nn._random.gaussian_weights`).
    dtype : torch.dtype, optional
        Precision of the parameters; torch's default dtype by default.
    device : str or torch.device, optional
        Device of the parameters; the CPU by default.

    Attributes
    ----------
    weights : torch.nn.ParameterList
        ``W_1`` of shape (m, p) and ``W_2, ..., W_L`` of shape (m, m).

    Examples
    --------
    >>> import torch
    >>> from sk_deq.nn import ExplicitNet
    >>> from sk_deq.theory import explicit_coefficients
    >>> centers = explicit_coefficients(["relu", "relu"], 1.0).centers
    >>> net = ExplicitNet(5, 32, ["relu", "relu"], centers, generator=torch.Generator().manual_seed(0))
    >>> tuple(net(torch.zeros(4, 5)).shape)
    (4, 32)
    """

    def __init__(
        self,
        n_features: int,
        n_hidden: int,
        layers: Sequence,
        centers: Sequence[float],
        *,
        trainable: Sequence[bool] | None = None,
        generator: torch.Generator | None = None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        self.n_features = int(n_features)
        self.n_hidden = int(n_hidden)
        self.layers = tuple(get_activation(a) for a in layers)
        self.centers = tuple(float(c) for c in centers)
        if not self.layers:
            raise ValueError("An explicit network needs at least one layer.")
        if len(self.centers) != len(self.layers):
            raise ValueError(f"Got {len(self.centers)} centring constants for {len(self.layers)} layers.")
        trainable = [False] * len(self.layers) if trainable is None else [bool(t) for t in trainable]
        if len(trainable) != len(self.layers):
            raise ValueError(f"trainable has {len(trainable)} entries for {len(self.layers)} layers.")
        dtype = dtype or torch.get_default_dtype()
        weights = []
        fan_in = self.n_features
        for flag in trainable:
            W = gaussian_weights(self.n_hidden, fan_in, generator, dtype=dtype, device=device)
            weights.append(nn.Parameter(W, requires_grad=flag))
            fan_in = self.n_hidden
        self.weights = nn.ParameterList(weights)

    def extra_repr(self) -> str:
        """The sizes and layers shown in the module's ``repr``.

        Returns
        -------
        str
            ``n_features``, ``n_hidden`` and the activations.
        """
        acts = ", ".join(repr(a) for a in self.layers)
        return f"n_features={self.n_features}, n_hidden={self.n_hidden}, layers=({acts})"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``y_L`` for a batch.

        Parameters
        ----------
        x : torch.Tensor of shape (n, p)
            Inputs (rows are samples), already scaled.

        Returns
        -------
        torch.Tensor of shape (n, m)
            The features of the last layer.
        """
        y = x
        inv = 1.0 / math.sqrt(self.n_hidden)
        for W, act, c in zip(self.weights, self.layers, self.centers):
            y = (act.torch(y @ W.T) - c) * inv
        return y
