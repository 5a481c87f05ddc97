"""A fitted network as a standalone :class:`torch.nn.Module`: what ``to_torch()`` returns.

:func:`deployed_network` copies a fitted estimator's weights into the plain
torch modules of this file and returns a :class:`DeployedNetwork`, which maps
*raw* inputs to what the estimator returns: the input scaling
(``input_mean_``, ``input_scale_``), the hidden layers, the float64 readout
and, for a regressor, the target de-standardisation are folded in.  The
modules' ``forward`` methods use torch operations only (the activations are
written here as small modules, with the position-invariant formulas of
:mod:`sk_deq.activations._families`, checked equal to them by the tests),
so nothing of ``sk_deq`` runs at inference time:

* an explicit or matched network is a fixed graph that
  :func:`torch.export.export` accepts; its :class:`torch.export.ExportedProgram`
  saved with :func:`torch.export.save` loads with torch alone;
* a DEQ runs its fixed-point loop in ``forward`` (plain iteration, stopped
  per sample as :func:`sk_deq.nn.fixed_point_iteration` does), which
  :func:`torch.export.export` does not accept (a data-dependent loop: the
  module says so when exported); with ``fixed_iterations=N`` the loop runs
  exactly ``N`` evaluations, each sample still kept at the first iterate
  within the tolerance, a fixed graph that :func:`torch.export.export`
  accepts.

Pickling the module itself (``torch.save(module)``) stores references to
these classes: loading it needs ``sk_deq`` importable (this module only).
"""

from __future__ import annotations

import math
from numbers import Integral

import torch
from sklearn.base import is_regressor
from sklearn.utils import check_scalar
from torch import nn

from .._runtime import resolve_device
from .._validation import DeviceValue
from ..activations import ACTIVATIONS, HardTanh, LeakyReLU, Quadratic
from ..nn import DEQLayer

__all__ = [
    "MAX_FIXED_ITERATIONS",
    "DeployedNetwork",
    "FixedPointFeatures",
    "ExplicitFeatures",
    "InputScaling",
    "deployed_network",
]

_TINY = 1e-30  # a sample whose image is exactly zero: absolute residual (as sk_deq.nn.solvers)

#: The most evaluations ``to_torch(fixed_iterations=...)`` takes: every one is a matrix product per call, and
#: torch.export unrolls the loop into the program, every iteration a copy of the map's operations.
MAX_FIXED_ITERATIONS = 10_000


# ----------------------------------------------------------------- activations
class ReLU(nn.Module):
    def forward(self, x):
        return torch.relu(x)


class Tanh(nn.Module):
    def forward(self, x):
        return torch.tanh(x)


class Erf(nn.Module):
    def forward(self, x):
        return torch.erf(x)


class Sigmoid(nn.Module):
    """``(1 + tanh(x / 2)) / 2``: the same value wherever ``x`` lies in its tensor."""

    def forward(self, x):
        return torch.tanh(x * 0.5) * 0.5 + 0.5


class GELU(nn.Module):
    def forward(self, x):
        return x * (torch.erf(x * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5


class SiLU(nn.Module):
    def forward(self, x):
        return x * (torch.tanh(x * 0.5) * 0.5 + 0.5)


class Softplus(nn.Module):
    def forward(self, x):
        return torch.relu(x) + torch.log1p(torch.exp(-torch.abs(x)))


class ELU(nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, torch.expm1(torch.clamp(x, max=0.0)))


class _Family(nn.Module):
    """An activation of a parametric family: its parameters (floats) are attributes of the module."""

    def __init__(self, **params):
        super().__init__()
        self.params = {name: float(value) for name, value in params.items()}
        for name, value in self.params.items():
            setattr(self, name, value)

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={value!r}" for name, value in self.params.items())


class LeakyReLUModule(_Family):
    """``a x`` for ``x >= 0``, ``b x`` below."""

    def forward(self, x):
        return torch.where(x >= 0, self.a * x, self.b * x)


class HardTanhModule(_Family):
    """``a clip(x, -c, c)``."""

    def forward(self, x):
        return self.a * torch.clamp(x, -self.c, self.c)


class QuadraticModule(_Family):
    """``c2 x^2 + c1 x``."""

    def forward(self, x):
        return (self.c2 * x + self.c1) * x


_NAMED = {
    "relu": ReLU,
    "tanh": Tanh,
    "erf": Erf,
    "sigmoid": Sigmoid,
    "gelu": GELU,
    "silu": SiLU,
    "softplus": Softplus,
    "elu": ELU,
}
_FAMILIES = {LeakyReLU: LeakyReLUModule, HardTanh: HardTanhModule, Quadratic: QuadraticModule}


def activation_module(activation, owner: str) -> nn.Module:
    """The torch module of a library activation (a named one, or a leaky-ReLU, hard-tanh or quadratic).

    Parameters
    ----------
    activation : Activation
        The activation of a fitted network's layer.
    owner : str
        The estimator's class name, for the error message.

    Returns
    -------
    torch.nn.Module
        A parameter-free module applying the activation with torch operations.

    Raises
    ------
    TypeError
        For an activation built from an arbitrary python callable: its
        torch form cannot be written without running that callable.
    """
    family = _FAMILIES.get(type(activation))
    if family is not None:
        return family(**activation.params)
    name = getattr(activation, "name", None)
    if name in _NAMED and ACTIVATIONS.get(name) is activation:
        return _NAMED[name]()
    supported = ", ".join(sorted(_NAMED) + ["leaky_relu"])
    raise TypeError(
        f"{owner}.to_torch() cannot write the activation {activation!r} as a torch module: it wraps an arbitrary "
        f"python callable. to_torch() supports the named activations ({supported}) and the LeakyReLU, HardTanh "
        "and Quadratic families of sk_deq.activations."
    )


# ---------------------------------------------------------------------- layers
def _frozen(tensor: torch.Tensor, device) -> nn.Parameter:
    """A copy of ``tensor`` on ``device`` as a parameter that takes no gradient."""
    return nn.Parameter(tensor.detach().to(device).clone(), requires_grad=False)


class InputScaling(nn.Module):
    """``(x - mean) / scale`` in float64, then cast to the network's dtype (as the estimators scale inputs)."""

    def __init__(self, mean: torch.Tensor, scale: float, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("mean", mean.to(torch.float64))
        self.register_buffer("scale", torch.tensor(float(scale), dtype=torch.float64))
        self.dtype = dtype

    def forward(self, x):
        return ((x.to(torch.float64) - self.mean) / self.scale).to(self.dtype)


class ExplicitFeatures(nn.Module):
    """``y_l = (sigma_l(W_l y_{l-1}) - c_l) / sqrt(m)`` for ``l = 1..L`` (see :class:`sk_deq.nn.ExplicitNet`)."""

    def __init__(self, weights, activations, centers, device):
        super().__init__()
        self.weights = nn.ParameterList([_frozen(W, device) for W in weights])
        self.activations = nn.ModuleList(activations)
        self.centers = tuple(float(c) for c in centers)
        self.inv_sqrt_m = 1.0 / math.sqrt(int(weights[0].shape[0]))

    def forward(self, x):
        y = x
        for W, act, c in zip(self.weights, self.activations, self.centers):
            y = (act(y @ W.T) - c) * self.inv_sqrt_m
        return y


class FixedPointFeatures(nn.Module):
    """The DEQ's ``z*``: plain iteration of ``w <- phi0(sqrt(sigma_a2 / m) A w + sqrt(sigma_b2) B x) - c``.

    Runs the iteration of :class:`sk_deq.nn.DEQLayer` on ``w = sqrt(m) z``
    from ``w = 0``, for at most ``max_iter`` evaluations; a sample whose
    relative residual ``||f(w) - w|| / ||f(w)||`` falls below ``tol`` keeps
    ``f(w)`` from then on, so its features do not depend on its batch.  The
    loop stops when every sample of the batch has: a stop that depends on
    the data, which :func:`torch.export.export` cannot trace.  With
    ``fixed_iterations`` it runs exactly that many evaluations instead (the
    samples still kept as they reach ``tol``): a fixed graph.  From
    ``fixed_iterations = max_iter`` on, the outputs are those of the loop
    that stops, for every input.

    Raises
    ------
    ValueError
        (in ``forward``) when the iteration produces non-finite values; in
        an exported program, a failed torch assertion (``_assert_async``).
    RuntimeError
        (in ``forward``) under :func:`torch.export.export` without
        ``fixed_iterations``.
    """

    def __init__(
        self, layer: DEQLayer, activation: nn.Module, tol: float, max_iter: int, device, fixed_iterations=None
    ):
        super().__init__()
        self.A = _frozen(layer.A, device)
        self.B = _frozen(layer.B, device)
        self.activation = activation
        self.sqrt_m = math.sqrt(layer.n_hidden)
        self.alpha = math.sqrt(layer.sigma_a2) / self.sqrt_m
        self.beta = math.sqrt(layer.sigma_b2)
        self.center, self.tol, self.max_iter = float(layer.center), float(tol), int(max_iter)
        self.fixed_iterations = None if fixed_iterations is None else int(fixed_iterations)

    def extra_repr(self) -> str:
        loop = (
            f"max_iter={self.max_iter}"
            if self.fixed_iterations is None
            else f"fixed_iterations={self.fixed_iterations}"
        )
        return f"alpha={self.alpha:g}, beta={self.beta:g}, center={self.center:.6g}, tol={self.tol:g}, {loop}"

    def forward(self, x):
        fixed = self.fixed_iterations is not None
        if not fixed and torch.compiler.is_exporting():
            raise RuntimeError(
                "The DEQ module of to_torch() stops its fixed-point loop when every sample has converged, a stop "
                "that depends on the data and that torch.export cannot trace. Export the module of "
                "to_torch(fixed_iterations=N), which runs exactly N iterations (N = fixed_point_max_iter gives the "
                "same outputs for every input)."
            )
        u = self.beta * (x @ self.B.T)
        w = torch.zeros(x.shape[0], self.A.shape[0], dtype=u.dtype, device=u.device)
        out = w
        active = torch.ones(x.shape[0], dtype=torch.bool, device=u.device)
        for _ in range(self.fixed_iterations if fixed else self.max_iter):
            fw = self.activation(torch.addmm(u, w, self.A.T, alpha=self.alpha)) - self.center
            den = torch.linalg.vector_norm(fw, dim=1)
            r = torch.linalg.vector_norm(fw - w, dim=1) / torch.where(den > _TINY, den, torch.ones_like(den))
            out = torch.where(active[:, None], fw, out)
            active = active & ~(r < self.tol)
            if not fixed and not bool(active.any()):
                break
            w = fw
        message = (
            "The DEQ's fixed-point iteration produced non-finite values: the map is not a contraction for "
            "these inputs (pass inputs in the units of the training data)."
        )
        if torch.compiler.is_exporting():  # no host read in a program: a torch assertion in its graph
            torch._assert_async(torch.isfinite(out).all(), message)
        elif not bool(torch.isfinite(out).all()):
            raise ValueError(message)
        return out / self.sqrt_m


class DeployedNetwork(nn.Module):
    """Raw inputs to the decision function of a fitted sk_deq network (see :func:`deployed_network`).

    ``forward(x)`` takes a float tensor of shape ``(n, n_features)`` and
    returns float64 outputs: a classifier's logits as ``decision_function``
    gives them (1-D for two classes), a regressor's predictions in target
    units as ``predict`` gives them (1-D when fitted on a 1-D ``y``).
    """

    def __init__(self, scaling, features, readout: nn.Linear, target, squeeze: bool):
        super().__init__()
        self.scaling, self.features, self.readout = scaling, features, readout
        self.n_features_in = int(scaling.mean.shape[0])
        self.squeeze = bool(squeeze)
        if target is not None:  # a regressor: outputs * scale + mean, in halves as predict
            self.register_buffer("target_half_mean", 0.5 * target[0])
            self.register_buffer("target_half_scale", 0.5 * target[1])
        self.regressor = target is not None

    def forward(self, x):
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"The module from to_torch() takes a torch.Tensor of shape (n, {self.n_features_in}), got "
                f"{type(x).__name__}: convert a numpy array with torch.from_numpy(X) (the estimator's own predict "
                "takes numpy arrays)."
            )
        if x.dim() != 2 or x.shape[1] != self.n_features_in:
            raise ValueError(f"Expected inputs of shape (n, {self.n_features_in}), got {tuple(x.shape)}.")
        if not x.is_floating_point():
            raise TypeError(f"Expected a floating-point tensor, got {x.dtype}.")
        if x.device != self.scaling.mean.device:
            raise ValueError(
                f"The input tensor is on {x.device} and the module's weights on {self.scaling.mean.device}: move "
                "the input with x.to(device), or build the module there with to_torch(device=...)."
            )
        out = self.readout(self.features(self.scaling(x)).to(torch.float64))
        if self.regressor:
            out = (out * self.target_half_scale + self.target_half_mean) * 2.0
        return out[:, 0] if self.squeeze else out


def _features_module(estimator, device, fixed_iterations=None) -> nn.Module:
    """The fitted hidden layers of ``estimator`` as plain torch modules on ``device``."""
    layer, owner = estimator.module_.features, type(estimator).__name__
    if isinstance(layer, DEQLayer):
        act = activation_module(layer.activation, owner)
        tol, max_iter = estimator.fixed_point_tol, estimator.fixed_point_max_iter
        return FixedPointFeatures(layer, act, tol, max_iter, device, fixed_iterations)
    if fixed_iterations is not None:
        raise ValueError(
            f"fixed_iterations={fixed_iterations!r} sets the fixed-point loop of a DEQ's module; {owner} is an "
            "explicit network, a fixed graph without one: call to_torch() without it."
        )
    acts = [activation_module(a, owner) for a in layer.layers]
    return ExplicitFeatures(list(layer.weights), acts, layer.centers, device)


def deployed_network(estimator, device=None, fixed_iterations: int | None = None) -> DeployedNetwork:
    """The standalone torch module of a fitted estimator (what its ``to_torch`` returns), its arguments checked.

    Parameters
    ----------
    estimator : fitted sk_deq network estimator
        A DEQ, explicit or matched classifier or regressor.
    device : None, str or torch.device, default=None
        Where the module's weights go; None: where the estimator predicts.
    fixed_iterations : int or None, default=None
        A DEQ's loop runs exactly this many evaluations (see
        :class:`FixedPointFeatures`); an error for an explicit network.

    Returns
    -------
    DeployedNetwork
        In eval mode, every parameter with ``requires_grad=False``.
    """
    device = _checked_arguments(estimator, device, fixed_iterations)
    n_features = int(estimator.n_features_in_)
    mean = estimator.input_mean_
    mean = torch.zeros(n_features) if mean is None else torch.as_tensor(mean)  # x - 0 is x: the same values
    dtype = next(estimator.module_.features.parameters()).dtype  # the network's, as built
    scaling = InputScaling(mean.to(torch.float64), estimator.input_scale_, dtype)
    readout = estimator.module_.readout
    linear = nn.Linear(readout.in_features, readout.out_features, dtype=torch.float64, device=device)
    linear.weight, linear.bias = _frozen(readout.weight, device), _frozen(readout.bias, device)
    if is_regressor(estimator):
        target = (torch.as_tensor(estimator.target_mean_), torch.as_tensor(estimator.target_scale_))
        squeeze = estimator._y_1d
    else:
        target, squeeze = None, readout.out_features == 1
    net = DeployedNetwork(scaling, _features_module(estimator, device, fixed_iterations), linear, target, squeeze)
    return net.to(device).eval()


def _checked_arguments(estimator, device, fixed_iterations) -> torch.device:
    """``to_torch``'s arguments checked, and the device the module goes to."""
    estimator._validate_params()  # the settings read here (fixed_point_tol, ...) as fit checks them
    if fixed_iterations is not None:
        if isinstance(fixed_iterations, bool):  # an Integral to check_scalar
            raise TypeError(f"fixed_iterations must be an int, not bool; got {fixed_iterations!r}.")
        check_scalar(fixed_iterations, "fixed_iterations", Integral, min_val=1)
        if fixed_iterations > MAX_FIXED_ITERATIONS:
            raise ValueError(
                f"fixed_iterations={fixed_iterations!r} is more than MAX_FIXED_ITERATIONS={MAX_FIXED_ITERATIONS}: "
                "every iteration costs a matrix product per call and is unrolled into an exported program. A DEQ "
                "that converges does so in far fewer (fixed_iterations=fixed_point_max_iter gives the outputs of "
                "predict for every input)."
            )
    if not DeviceValue().is_satisfied_by(device):  # e.g. the inputs, which go to the module instead
        raise TypeError(
            f"to_torch(device) takes where the module goes: None, a str or a torch.device, got "
            f"{type(device).__name__}. The inputs go to the module it returns, as a tensor: "
            "est.to_torch()(torch.from_numpy(X))."
        )
    dev = estimator._device() if device is None else resolve_device(device)
    return torch.device("cpu") if dev is None else dev
