"""The torch forms of the named activations (torch imported on first use).

Every form computes an element the same way wherever it lies in its tensor:
the predict path cuts a batch into row blocks of one shape
(:mod:`sk_deq.nn.blocks`), and these forms make a sample's position in its
block irrelevant too, so its outputs do not depend on its batch.  torch's own
``sigmoid``, ``silu``, ``softplus``, ``elu`` and (float32) ``gelu`` finish a
tensor's last elements, and each thread's, with a scalar loop whose result
differs from the vector loop's in the last bit; the forms here are written
with ``tanh``, ``erf``, ``exp``, ``log1p`` and ``expm1``, whose kernels do
not (``tests/test_batch_invariance.py`` checks every name).
"""

from __future__ import annotations

import functools
import math

__all__: list[str] = []


def _t_sigmoid(t, inplace=False):
    """``sigmoid(t) = (1 + tanh(t / 2)) / 2``, in place over ``t`` when ``inplace`` (no autograd)."""
    import torch

    if inplace:  # no autograd: every step over t's buffer
        return torch.tanh_(t.mul_(0.5)).mul_(0.5).add_(0.5)
    return torch.tanh(t * 0.5) * 0.5 + 0.5


def _t_silu(t):
    return t * _t_sigmoid(t)


def _t_gelu(t):
    import torch

    return t * (torch.erf(t * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5


def _t_softplus(t):
    import torch

    return torch.relu(t) + torch.log1p(torch.exp(-torch.abs(t)))


def _t_elu(t):
    import torch

    return torch.where(t > 0, t, torch.expm1(torch.clamp(t, max=0.0)))


@functools.cache
def _torch_forms() -> dict:
    """``name -> (torch function, in-place form or None)`` of the named activations (torch imported on first use).

    Every form computes an element the same way wherever it lies in its tensor (tested on every name): the
    products of a batch are cut into blocks of one shape, and these forms make the position of a sample in
    its block irrelevant too, so its outputs do not depend on its batch.
    """
    import torch

    return {
        "relu": (torch.relu, torch.relu_),
        "tanh": (torch.tanh, torch.tanh_),
        "erf": (torch.erf, torch.erf_),
        "sigmoid": (_t_sigmoid, functools.partial(_t_sigmoid, inplace=True)),
        "gelu": (_t_gelu, None),
        "silu": (_t_silu, None),
        "softplus": (_t_softplus, None),
        "elu": (_t_elu, None),
    }


class _TorchNamed:
    """Torch form of a named activation, resolved on first call (picklable)."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, x):
        return _torch_forms()[self.name][0](x)

    def inplace(self, x):
        """``phi0`` written over ``x`` (no autograd) where torch has an in-place form; a new tensor otherwise."""
        function, in_place = _torch_forms()[self.name]
        return (in_place or function)(x)


_TORCH = {name: _TorchNamed(name) for name in ("relu", "tanh", "erf", "sigmoid", "gelu", "silu", "softplus", "elu")}
