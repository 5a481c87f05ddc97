"""Named activations, the parametric families (leaky-ReLU, hard-tanh, quadratic) and :func:`get_activation`."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import special

from ._base import Activation, GaussianMoments
from ._duals import ErfDual, GeluDual, HardTanhDual, LeakyReLUDual, QuadraticDual

__all__ = [
    "ACTIVATIONS",
    "ACTIVATION_NAMES",
    "HardTanh",
    "LeakyReLU",
    "Quadratic",
    "get_activation",
]

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


# ---------------------------------------------------------------------------
# The torch forms of the named activations (torch imported on first use).
#
# Every form computes an element the same way wherever it lies in its tensor:
# the predict path cuts a batch into row blocks of one shape
# (:mod:`sk_deq.estimators._network`), and these forms make a sample's position in its
# block irrelevant too, so its outputs do not depend on its batch.  torch's own
# ``sigmoid``, ``silu``, ``softplus``, ``elu`` and (float32) ``gelu`` finish a
# tensor's last elements, and each thread's, with a scalar loop whose result
# differs from the vector loop's in the last bit; the forms here are written
# with ``tanh``, ``erf``, ``exp``, ``log1p`` and ``expm1``, whose kernels do
# not (``tests/estimators/test_batch_invariance.py`` checks every name).


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


def _t_elu_inplace(t):
    """``max(t, 0) + expm1(min(t, 0))`` over ``t`` (no autograd): one term is zero, so the values of ``_t_elu``."""
    import torch

    negative = torch.expm1_(torch.clamp_max(t, 0.0))
    return torch.clamp_min_(t, 0.0).add_(negative)


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
        "elu": (_t_elu, _t_elu_inplace),
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


# ---------------------------------------------------------------------------
# Named activations (module-level functions so that they pickle).


def _relu(x):
    return np.maximum(x, 0.0)


def _relu_d(x):
    return (x > 0).astype(float)


def _tanh_d(x):
    return 1.0 - np.tanh(x) ** 2


def _erf_d(x):
    return 2.0 / math.sqrt(math.pi) * np.exp(-x * x)


def _sigmoid(x):
    return special.expit(x)


def _sigmoid_d(x):
    s = special.expit(x)
    return s * (1.0 - s)


def _gelu(x):
    return x * special.ndtr(x)


def _gelu_d(x):
    return special.ndtr(x) + x * np.exp(-0.5 * x * x) / _SQRT_2PI


def _silu(x):
    return x * special.expit(x)


def _silu_d(x):
    s = special.expit(x)
    return s * (1.0 + x * (1.0 - s))


def _softplus(x):
    return np.logaddexp(0.0, x)


def _elu(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))


def _elu_d(x):
    return np.where(x > 0, 1.0, np.exp(np.minimum(x, 0.0)))


# ---------------------------------------------------------------------------
# Parametric families with closed-form moments (theory page, 'Explicit networks').


class _ClosedFormFamily(Activation):
    """A parametric family whose Gaussian moments have closed forms (``_moments_at``, ``_mean_at``).

    Subclasses define the numpy form ``_f``, its derivative ``_fprime`` and
    the torch form ``_ftorch``, and may write ``_ftorch``'s values over its
    input in ``_torch_inplace`` (no autograd).
    """

    _f: Callable
    _fprime: Callable
    _ftorch: Callable

    def _init_forms(self, name: str, breakpoints: tuple = (), odd: bool | None = None) -> None:
        super().__init__(
            self._f, name=name, derivative=self._fprime, breakpoints=breakpoints, torch_func=self._ftorch, odd=odd
        )

    def _variance_at(self, t):
        return self.moments(t).var


class LeakyReLU(_ClosedFormFamily):
    """Leaky-ReLU ``x -> a x`` for ``x >= 0`` and ``b x`` for ``x < 0``.

    Closed forms for an input ``N(0, t^2)`` (centred at ``t``)::

        mean = (a - b) t / sqrt(2 pi)
        G1 = (a + b)^2 / 4,   G2 = (a - b)^2 / (2 pi t^2)
        G4 = ((a^2 + b^2)(pi - 1) + 2ab) / pi,   Var = t^2 G4 / 2

    Parameters
    ----------
    a : float, default=1.0
        Slope for ``x >= 0``.
    b : float, default=0.0
        Slope for ``x < 0`` (``(1, 0)`` is ReLU).
    name : str, optional
        Name used in reprs and reports; ``'leaky_relu'`` by default.

    Examples
    --------
    >>> from sk_deq.activations import LeakyReLU
    >>> act = LeakyReLU(1.0, 0.5)
    >>> act.params
    {'a': 1.0, 'b': 0.5}
    >>> m = act.moments(1.0)
    >>> round(m.mean, 6), m.g1
    (0.199471, 0.5625)
    """

    def __init__(self, a: float = 1.0, b: float = 0.0, name: str | None = None):
        self.a, self.b = float(a), float(b)
        self._init_forms(name or "leaky_relu", (0.0,), odd=(self.a == self.b))

    def _f(self, x):
        return np.where(x >= 0, self.a * x, self.b * x)

    def _fprime(self, x):
        x = np.asarray(x, dtype=float)
        return np.where(x >= 0, self.a, self.b)

    def _ftorch(self, x):
        import torch

        return torch.where(x >= 0, self.a * x, self.b * x)

    def _torch_inplace(self, x):
        # a max(x, 0) + b min(x, 0): one of the two terms is zero, so each element is a x or b x as in _ftorch,
        # without torch.where (on the CPU many times slower than a clamp)
        import torch

        negative = torch.clamp_max(x, 0.0)
        return torch.clamp_min_(x, 0.0).mul_(self.a).add_(negative, alpha=self.b)

    @property
    def params(self):
        """The slopes, ``{'a': a, 'b': b}``."""
        return {"a": self.a, "b": self.b}

    @property
    def dual(self):
        """The arc-cosine closed forms for these slopes."""
        return LeakyReLUDual(self.a, self.b)

    def _mean_at(self, t):
        return (self.a - self.b) * float(t) / _SQRT_2PI

    def _moments_at(self, t: float) -> GaussianMoments:
        a, b = self.a, self.b
        sq_d2 = ((a * a + b * b) * (math.pi - 1.0) + 2.0 * a * b) / math.pi
        return GaussianMoments(
            t=t,
            mean=(a - b) * t / _SQRT_2PI,
            var=t * t * sq_d2 / 2.0,
            d1=(a + b) / 2.0,
            d2=(a - b) / (_SQRT_2PI * t),
            sq_d2=sq_d2,
            d1_sq=(a * a + b * b) / 2.0,
        )


class HardTanh(_ClosedFormFamily):
    """Hard-tanh ``x -> a * clip(x, -c, c)`` (odd, so already centred).

    Closed forms for an input ``N(0, t^2)`` with ``r = c / (sqrt(2) t)``::

        G1 = a^2 erf(r)^2,   G2 = 0
        G4 = 2 a^2 (erf(r) - sqrt(2/pi) (c/t) exp(-r^2))
        Var = a^2 (t^2 erf(r) + c (c erfc(r) - sqrt(2/pi) t exp(-r^2)))

    Parameters
    ----------
    a : float, default=1.0
        Gain.
    c : float, default=1.0
        Clipping threshold (``c > 0``).
    name : str, optional
        Name used in reprs and reports; ``'hard_tanh'`` by default.

    Raises
    ------
    ValueError
        If ``c`` is not positive.
    """

    def __init__(self, a: float = 1.0, c: float = 1.0, name: str | None = None):
        self.a, self.c = float(a), float(c)
        if not self.c > 0:
            raise ValueError(f"HardTanh threshold c must be positive, got {c!r}.")
        self._init_forms(name or "hard_tanh", (-self.c, self.c), odd=True)

    def _f(self, x):
        return self.a * np.clip(x, -self.c, self.c)

    def _fprime(self, x):
        x = np.asarray(x, dtype=float)
        return np.where(np.abs(x) < self.c, self.a, 0.0)

    def _ftorch(self, x):
        import torch

        return self.a * torch.clamp(x, -self.c, self.c)

    def _torch_inplace(self, x):
        import torch

        return torch.clamp_(x, -self.c, self.c).mul_(self.a)

    @property
    def params(self):
        """The gain and threshold, ``{'a': a, 'c': c}``."""
        return {"a": self.a, "c": self.c}

    @property
    def dual(self):
        """The Gauss-Legendre quadrature of closed-form conditionals (explicit layers only)."""
        return HardTanhDual(self.a, self.c)

    def _mean_at(self, t):
        return 0.0

    def _moments_at(self, t: float) -> GaussianMoments:
        a, c = self.a, self.c
        r = c / (math.sqrt(2.0) * t)
        erf_r, erfc_r, e = math.erf(r), math.erfc(r), math.exp(-r * r)
        a2 = a * a
        return GaussianMoments(
            t=t,
            mean=0.0,
            var=a2 * (t * t * erf_r + c * (c * erfc_r - _SQRT_2_OVER_PI * t * e)),
            d1=a * erf_r,
            d2=0.0,
            sq_d2=2.0 * a2 * (erf_r - _SQRT_2_OVER_PI * (c / t) * e),
            d1_sq=a2 * erf_r,
        )


class Quadratic(_ClosedFormFamily):
    """Quadratic ``x -> c2 x^2 + c1 x`` (the constant ``c0`` only centres).

    Closed forms for an input ``N(0, t^2)``::

        mean = c2 t^2,   G1 = c1^2,   G2 = 4 c2^2
        G4 = 8 c2^2 t^2 + 2 c1^2,   Var = 2 c2^2 t^4 + c1^2 t^2

    Parameters
    ----------
    c2 : float, default=0.0
        Quadratic coefficient.
    c1 : float, default=1.0
        Linear coefficient (``(0, 1)`` is the identity).
    name : str, optional
        Name used in reprs and reports; ``'quadratic'`` by default.
    """

    def __init__(self, c2: float = 0.0, c1: float = 1.0, name: str | None = None):
        self.c2, self.c1 = float(c2), float(c1)
        self._init_forms(name or "quadratic", odd=(self.c2 == 0.0))

    def _f(self, x):
        return (self.c2 * x + self.c1) * x

    def _fprime(self, x):
        return 2.0 * self.c2 * np.asarray(x, dtype=float) + self.c1

    def _ftorch(self, x):
        return (self.c2 * x + self.c1) * x

    def _torch_inplace(self, x):
        return x.mul_(x * self.c2 + self.c1)  # x (c2 x + c1): the product commutes exactly

    @property
    def params(self):
        """The coefficients, ``{'c2': c2, 'c1': c1}``."""
        return {"c2": self.c2, "c1": self.c1}

    @property
    def dual(self):
        """The polynomial closed forms for these coefficients."""
        return QuadraticDual(self.c2, self.c1)

    def _mean_at(self, t):
        return self.c2 * float(t) ** 2

    def _moments_at(self, t: float) -> GaussianMoments:
        c2, c1, t2 = self.c2, self.c1, t * t
        return GaussianMoments(
            t=t,
            mean=c2 * t2,
            var=2.0 * c2 * c2 * t2 * t2 + c1 * c1 * t2,
            d1=c1,
            d2=2.0 * c2,
            sq_d2=8.0 * c2 * c2 * t2 + 2.0 * c1 * c1,
            d1_sq=4.0 * c2 * c2 * t2 + c1 * c1,
        )


def _named():
    return {
        "relu": Activation(
            _relu,
            "relu",
            derivative=_relu_d,
            breakpoints=(0.0,),
            torch_func=_TORCH["relu"],
            odd=False,
            dual=LeakyReLUDual(1.0, 0.0),
        ),
        "tanh": Activation(np.tanh, "tanh", derivative=_tanh_d, torch_func=_TORCH["tanh"], odd=True),
        "erf": Activation(special.erf, "erf", derivative=_erf_d, torch_func=_TORCH["erf"], odd=True, dual=ErfDual()),
        "sigmoid": Activation(_sigmoid, "sigmoid", derivative=_sigmoid_d, torch_func=_TORCH["sigmoid"], odd=True),
        "gelu": Activation(_gelu, "gelu", derivative=_gelu_d, torch_func=_TORCH["gelu"], odd=False, dual=GeluDual()),
        "silu": Activation(_silu, "silu", derivative=_silu_d, torch_func=_TORCH["silu"], odd=False),
        "softplus": Activation(_softplus, "softplus", derivative=_sigmoid, torch_func=_TORCH["softplus"], odd=False),
        "elu": Activation(_elu, "elu", derivative=_elu_d, breakpoints=(0.0,), torch_func=_TORCH["elu"], odd=False),
        "leaky_relu": LeakyReLU(1.0, 0.01, name="leaky_relu"),
    }


#: Named activations accepted wherever an ``activation`` parameter is.
ACTIVATIONS: dict[str, Activation] = _named()
_ALIASES = {"swish": "silu"}


def _function_key(func):
    try:
        hash(func)
    except TypeError:
        return None
    return func


_BY_FUNCTION = {act._func: act for act in ACTIVATIONS.values() if type(act) is Activation}
#: Every name :func:`get_activation` accepts (case-insensitive), aliases included, sorted.
ACTIVATION_NAMES: tuple = tuple(sorted(set(ACTIVATIONS) | set(_ALIASES)))


def get_activation(activation: str | Activation | Callable[..., Any]) -> Activation:
    """Resolve a name, an :class:`Activation` or a callable to an :class:`Activation`.

    Parameters
    ----------
    activation : str, Activation or callable
        One of ``sorted(ACTIVATIONS)`` (plus the alias ``"swish"`` for
        ``"silu"``), an :class:`Activation`, or a vectorised numpy callable
        (wrapped with a finite-difference derivative and no breakpoints; wrap
        it in :class:`Activation` yourself to give them).  The function of a
        named activation (``scipy.special.erf``, ``np.tanh``) resolves to that
        activation, with its exact derivative and dual formula.

    Returns
    -------
    Activation
        The named activation (shared, not a copy), ``activation`` itself if
        it already is one, or a new :class:`Activation` wrapping the callable.

    Raises
    ------
    ValueError
        For an unknown name.
    TypeError
        For anything that is neither a string nor callable.

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq.activations import get_activation
    >>> relu = get_activation("ReLU")
    >>> relu.name, relu.breakpoints
    ('relu', (0.0,))
    >>> get_activation("swish").name
    'silu'
    >>> get_activation(np.tanh) is get_activation("tanh")
    True
    >>> round(relu.moments(1.0).g1, 6)
    0.25
    """
    if isinstance(activation, Activation):
        return activation
    if isinstance(activation, str):
        key = _ALIASES.get(activation.lower(), activation.lower())
        if key not in ACTIVATIONS:
            known = ", ".join(ACTIVATION_NAMES)
            raise ValueError(f"Unknown activation {activation!r}; known names: {known}, or pass a callable.")
        return ACTIVATIONS[key]
    if callable(activation):
        named = _BY_FUNCTION.get(_function_key(activation))
        return named if named is not None else Activation(activation)
    raise TypeError(f"activation must be a name, an Activation or a callable, got {type(activation).__name__}.")
