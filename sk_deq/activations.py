"""Activations: named ones, user callables and the parametric families.

Every activation carries a numpy form (used by the theory), a torch form (used
by :mod:`sk_deq.nn`), its derivative, its breakpoints (kinks or jumps, so the
Gaussian engine integrates it exactly) and its Gaussian moments at an input
scale ``t``.  The parametric families used for matching (leaky-ReLU, hard-tanh,
quadratic) compute their moments in closed form (SPEC §4); all others go
through the quadrature engine of :mod:`sk_deq._gaussian`.

Centring (SPEC §1): the networks use ``phi(x) = phi0(x) - E_t[phi0]`` with
``t`` the scale of the pre-activation (``tau`` for a DEQ, ``tau_{l-1}`` for
layer ``l`` of an explicit net).  :meth:`Activation.moments` returns the
moments of the activation centred at the same ``t``.

This module does not import torch at import time; :meth:`Activation.torch`
imports it when first called.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np
from scipy import special

from . import _gaussian

__all__ = [
    "Activation",
    "GaussianMoments",
    "LeakyReLU",
    "HardTanh",
    "Quadratic",
    "ACTIVATIONS",
    "ACTIVATION_NAMES",
    "get_activation",
]

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class GaussianMoments:
    """Gaussian moments of an activation at input scale ``t``.

    All derivative moments refer to the activation centred at ``t``
    (``phi = phi0 - mean``); centring changes only ``sq_d2``.

    Attributes
    ----------
    t : float
        Standard deviation of the Gaussian input.
    mean : float
        ``E_t[phi0]``, the centring constant.
    var : float
        ``Var_t[phi0] = E_t[phi^2]``.
    d1, d2 : float
        ``E_t[phi']`` and ``E_t[phi'']``.
    sq_d2 : float
        ``E_t[(phi^2)'']`` of the centred ``phi``.
    d1_sq : float
        ``E_t[phi'^2]``.
    """

    t: float
    mean: float
    var: float
    d1: float
    d2: float
    sq_d2: float
    d1_sq: float

    @property
    def g1(self) -> float:
        """``(E_t[phi'])^2``."""
        return self.d1 * self.d1

    @property
    def g2(self) -> float:
        """``(E_t[phi''])^2``."""
        return self.d2 * self.d2

    @property
    def g4(self) -> float:
        """``E_t[(phi^2)'']`` (centred ``phi``)."""
        return self.sq_d2

    @property
    def d(self) -> float:
        """``E_t[phi'^2]``."""
        return self.d1_sq


def _is_tensor(x) -> bool:
    """Whether ``x`` is a torch tensor (without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _torch_twin(func):
    """The torch function of the same name as a unary numpy ufunc (``np.sin`` -> ``torch.sin``), or None."""
    if not (isinstance(func, np.ufunc) and func.nin == 1 and func.nout == 1):
        return None
    import torch

    for space in (torch, torch.special):
        twin = getattr(space, func.__name__, None)
        if callable(twin):
            return twin
    return None


class _NumpyBridge:
    """Apply a numpy activation to tensors: values through numpy, gradients from its derivative.

    Used for numpy callables that do not work on tensors (e.g. ``np.where``
    inside): exact values, and gradients exact up to the derivative's accuracy,
    on any device (the data make a round trip through host memory).
    """

    _function = None

    def __init__(self, act: Activation):
        self.act = act

    @classmethod
    def _autograd_function(cls):
        if cls._function is None:
            import torch

            class Fn(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, act):
                    ctx.save_for_backward(x)
                    ctx.act = act
                    y = act(x.detach().to("cpu", torch.float64).numpy())
                    return torch.as_tensor(np.asarray(y, dtype=np.float64)).to(device=x.device, dtype=x.dtype)

                @staticmethod
                def backward(ctx, grad):
                    (x,) = ctx.saved_tensors
                    d = ctx.act.derivative(x.detach().to("cpu", torch.float64).numpy())
                    d = torch.as_tensor(np.asarray(d, dtype=np.float64)).to(device=x.device, dtype=x.dtype)
                    return grad * d, None

            cls._function = Fn
        return cls._function

    def __call__(self, x):
        return self._autograd_function().apply(x, self.act)


def _numeric_derivative(f: Callable) -> Callable:
    def fprime(x):
        x = np.asarray(x, dtype=float)
        h = 1e-5 * np.maximum(1.0, np.abs(x))
        return (f(x + h) - f(x - h)) / (2.0 * h)

    return fprime


class Activation:
    """A scalar activation function with everything the theory and nets need.

    ``func`` may be written for numpy arrays or for torch tensors; the
    theory evaluates it on numpy arrays and the networks on tensors, and the
    activation converts between the two:

    * a numpy function (``np.sin``, ``lambda x: np.maximum(x, 0)``) is used
      as is by the theory; on tensors, a unary numpy ufunc is replaced by the
      torch function of the same name (``torch.sin``), a function built from
      arithmetic operators is applied directly, and anything else goes
      through numpy with its derivative as gradient;
    * a torch function or module (``torch.sin``, ``torch.nn.GELU()``) is
      used as is by the networks; the theory converts arrays to float64
      tensors and back, and takes the derivative from autograd (exact).

    Parameters
    ----------
    func : callable
        Vectorised elementwise ``phi0``, on numpy arrays or torch tensors.
    name : str, optional
        Name used in reprs and reports.
    derivative : callable, optional
        Vectorised numpy ``phi0'``.  If omitted: autograd for a torch
        function, otherwise a central finite difference (accurate to about
        1e-10 away from kinks).
    breakpoints : tuple of float
        Points where ``phi0`` is not smooth (e.g. ``(0.0,)`` for ReLU).  Give
        them for kinked functions: the quadrature is exact only between them.
    torch_func : callable, optional
        Torch form of ``phi0``.  If omitted, chosen as described above.
    odd : bool, optional
        Whether ``phi0 - phi0(0)`` is odd.  Detected numerically when omitted.

    Raises
    ------
    TypeError
        When ``func`` is not callable, or (at first use) accepts neither a
        numpy array nor a torch tensor, or returns something that is neither.

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq.activations import Activation
    >>> cube = Activation(lambda x: x - x**3 / 10, name="cubic")
    >>> round(cube.moments(1.0).d1, 6)
    0.7
    """

    def __init__(
        self,
        func: Callable,
        name: str | None = None,
        *,
        derivative: Callable | None = None,
        breakpoints: tuple[float, ...] = (),
        torch_func: Callable | None = None,
        odd: bool | None = None,
    ):
        if not callable(func):
            raise TypeError(f"activation must be callable, got {type(func).__name__}.")
        self._func = func
        self.name = name or getattr(func, "__name__", None) or type(func).__name__
        self._derivative = derivative
        self.breakpoints = tuple(float(b) for b in breakpoints)
        self._torch_func = torch_func
        self._odd = odd
        self._speaks = None  # 'numpy' or 'torch', found at first use
        self._on_tensors = None  # how to evaluate on tensors, found at first use

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_on_tensors"] = None  # may hold an unpicklable torch function; found again on demand
        return state

    # -- evaluation ---------------------------------------------------------
    def _language(self) -> str:
        """Whether ``func`` takes numpy arrays ('numpy') or only torch tensors ('torch')."""
        if self._speaks is None:
            x = np.linspace(-1.0, 1.0, 5)
            try:
                with np.errstate(all="ignore"):
                    out = self._func(x)
                ok = not _is_tensor(out) and np.shape(out) == x.shape
            except (TypeError, AttributeError, RuntimeError):
                ok = False
            if not ok:
                try:
                    import torch

                    with torch.no_grad():
                        out = self._func(torch.from_numpy(x))
                except Exception as exc:
                    raise TypeError(
                        f"activation {self.name!r} accepts neither a numpy array nor a torch tensor "
                        f"({type(exc).__name__}: {exc}); pass a vectorised elementwise function."
                    ) from None
                if not (_is_tensor(out) and tuple(out.shape) == x.shape):
                    raise TypeError(
                        f"activation {self.name!r} must map an array (or tensor) to one of the same shape, "
                        f"got {type(out).__name__} of shape {tuple(np.shape(out))} for shape {x.shape}."
                    )
            self._speaks = "numpy" if ok else "torch"
        return self._speaks

    def __call__(self, x):
        """Evaluate ``phi0`` on a numpy array."""
        x = np.asarray(x, dtype=float)
        if self._language() == "numpy":
            return self._func(x)
        import torch

        with torch.no_grad():
            out = self._func(torch.from_numpy(np.ascontiguousarray(x)))
        return out.detach().to("cpu", torch.float64).numpy()

    def derivative(self, x):
        """Evaluate ``phi0'`` on a numpy array."""
        x = np.asarray(x, dtype=float)
        if self._derivative is not None:
            return self._derivative(x)
        if self._language() == "torch":
            import torch

            t = torch.from_numpy(np.ascontiguousarray(x)).requires_grad_(True)
            with torch.enable_grad():
                (g,) = torch.autograd.grad(self._func(t).sum(), t, allow_unused=True)
            return np.zeros_like(x) if g is None else g.detach().numpy()
        return _numeric_derivative(self._func)(x)

    def torch(self, x):
        """Evaluate ``phi0`` on a torch tensor (differentiable)."""
        if self._torch_func is not None:
            return self._torch_func(x)
        if self._on_tensors is None:
            self._on_tensors = self._tensor_form()
        return self._on_tensors(x)

    def _tensor_form(self):
        if self._language() == "torch":
            return self._func
        twin = _torch_twin(self._func)
        if twin is not None:
            return twin
        # A numpy function that also works on tensors through their operators
        # (e.g. ``lambda x: x - x**3 / 10``): its output stays in autograd.
        import warnings

        import torch

        probe = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64, requires_grad=True)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                out = self._func(probe)
            if _is_tensor(out) and out.requires_grad and tuple(out.shape) == (5,):
                return self._func
        except Exception:  # any failure means: go through numpy
            pass
        return _NumpyBridge(self)

    @property
    def odd(self) -> bool:
        """Whether ``phi0 - phi0(0)`` is odd (as tanh, erf, sigmoid).

        Then the centred activation is odd: ``E_t[phi0] = phi0(0)``,
        ``E_t[phi''] = 0`` and the DEQ has ``alpha2 = alpha3 = 0``.
        """
        if self._odd is None:
            x = np.linspace(-6.0, 6.0, 241)
            with np.errstate(all="ignore"):
                f0 = float(np.asarray(self(np.zeros(1)))[0])
                fx, fm = self(x) - f0, self(-x) - f0
            scale = max(1.0, float(np.max(np.abs(fx))))
            self._odd = bool(np.all(np.isfinite(fx)) and np.max(np.abs(fx + fm)) <= 1e-12 * scale)
        return self._odd

    def _value_at_zero(self) -> float:
        return float(np.asarray(self(np.zeros(1)))[0])

    @property
    def params(self) -> dict:
        """Parameters of a parametric activation (empty for named ones)."""
        return {}

    # -- Gaussian moments ---------------------------------------------------
    def mean(self, t: float) -> float:
        """``E_t[phi0]``, the constant that centres the activation at scale ``t``."""
        return self._value_at_zero() if self.odd else _gaussian.expect(self, t, self.breakpoints)

    def variance(self, t: float) -> float:
        """``Var_t[phi0]`` (two-pass, so a large mean costs no precision); ``inf`` on overflow."""
        with np.errstate(all="ignore"):
            m = self.mean(t)
            v = _gaussian.expect(lambda x: (self(x) - m) ** 2, t, self.breakpoints)
        return v if np.isfinite(v) else np.inf

    def moments(self, t: float) -> GaussianMoments:
        """Gaussian moments at input scale ``t``, activation centred at ``t``."""
        t = float(t)
        if not (np.isfinite(t) and t > 0):
            raise ValueError(f"input scale t must be positive and finite, got {t!r}.")
        bp = self.breakpoints
        # Overflow inside a user's function shows up as a non-finite moment,
        # reported below with a clear message.
        with np.errstate(all="ignore"):
            m = self._value_at_zero() if self.odd else _gaussian.expect(self, t, bp)

            def centred_sq(x):
                c = self(x) - m
                return c * c

            var = _gaussian.expect(centred_sq, t, bp)
            d1 = _gaussian.stein_d1(self, t, bp)
            d2 = 0.0 if self.odd else _gaussian.stein_d2(self, t, bp)
            sq_d2 = _gaussian.stein_d2(centred_sq, t, bp)
            d1_sq = _gaussian.expect(lambda x: self.derivative(x) ** 2, t, bp)
        out = GaussianMoments(t, m, var, d1, d2, sq_d2, d1_sq)
        _check_finite_moments(self, out)
        return out

    # -- misc ---------------------------------------------------------------
    def __repr__(self) -> str:
        if self.params:
            args = ", ".join(f"{k}={v:.6g}" for k, v in self.params.items())
            return f"{type(self).__name__}({args})"
        return f"Activation({self.name!r})"

    def __eq__(self, other):
        if type(self) is not type(other):
            return NotImplemented
        if self.params or other.params:
            return self.params == other.params
        return self._func is other._func and self.name == other.name

    def __hash__(self):
        return hash((type(self).__name__, self.name, tuple(sorted(self.params.items()))))


def _check_finite_moments(act: Activation, m: GaussianMoments) -> None:
    vals = (m.mean, m.var, m.d1, m.d2, m.sq_d2, m.d1_sq)
    if not all(np.isfinite(v) for v in vals):
        raise ValueError(
            f"Gaussian moments of activation {act.name!r} at scale t={m.t:.4g} are not finite; "
            "the activation overflows or grows too fast for a Gaussian input."
        )


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


class _TorchNamed:
    """Torch form of a named activation, resolved on first call (picklable)."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, x):
        import torch
        import torch.nn.functional as F

        table = {
            "relu": torch.relu,
            "tanh": torch.tanh,
            "erf": torch.erf,
            "sigmoid": torch.sigmoid,
            "gelu": F.gelu,
            "silu": F.silu,
            "softplus": F.softplus,
            "elu": F.elu,
        }
        return table[self.name](x)


_TORCH = {name: _TorchNamed(name) for name in ("relu", "tanh", "erf", "sigmoid", "gelu", "silu", "softplus", "elu")}


# ---------------------------------------------------------------------------
# Parametric families with closed-form moments (SPEC §4).


class LeakyReLU(Activation):
    """Leaky-ReLU ``x -> a x`` for ``x >= 0`` and ``b x`` for ``x < 0``.

    Closed forms for an input ``N(0, t^2)`` (centred at ``t``)::

        mean = (a - b) t / sqrt(2 pi)
        G1 = (a + b)^2 / 4,   G2 = (a - b)^2 / (2 pi t^2)
        G4 = ((a^2 + b^2)(pi - 1) + 2ab) / pi,   Var = t^2 G4 / 2

    Parameters
    ----------
    a : float
        Slope for ``x >= 0``.
    b : float
        Slope for ``x < 0``.
    """

    def __init__(self, a: float = 1.0, b: float = 0.0, name: str | None = None):
        self.a, self.b = float(a), float(b)
        super().__init__(self._f, name=name or "leaky_relu", breakpoints=(0.0,), odd=(self.a == self.b))

    def _f(self, x):
        return np.where(x >= 0, self.a * x, self.b * x)

    def derivative(self, x):
        x = np.asarray(x, dtype=float)
        return np.where(x >= 0, self.a, self.b)

    def torch(self, x):
        import torch

        return torch.where(x >= 0, self.a * x, self.b * x)

    @property
    def params(self):
        return {"a": self.a, "b": self.b}

    def mean(self, t):
        return (self.a - self.b) * float(t) / _SQRT_2PI

    def variance(self, t):
        return self.moments(t).var

    def moments(self, t):
        t = float(t)
        if not (np.isfinite(t) and t > 0):
            raise ValueError(f"input scale t must be positive and finite, got {t!r}.")
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


class HardTanh(Activation):
    """Hard-tanh ``x -> a * clip(x, -c, c)`` (odd, so already centred).

    Closed forms for an input ``N(0, t^2)`` with ``r = c / (sqrt(2) t)``::

        G1 = a^2 erf(r)^2,   G2 = 0
        G4 = 2 a^2 (erf(r) - sqrt(2/pi) (c/t) exp(-r^2))
        Var = a^2 (t^2 erf(r) + c (c erfc(r) - sqrt(2/pi) t exp(-r^2)))

    Parameters
    ----------
    a : float
        Gain.
    c : float
        Clipping threshold (``c > 0``).
    """

    def __init__(self, a: float = 1.0, c: float = 1.0, name: str | None = None):
        self.a, self.c = float(a), float(c)
        if not self.c > 0:
            raise ValueError(f"HardTanh threshold c must be positive, got {c!r}.")
        super().__init__(self._f, name=name or "hard_tanh", breakpoints=(-self.c, self.c), odd=True)

    def _f(self, x):
        return self.a * np.clip(x, -self.c, self.c)

    def derivative(self, x):
        x = np.asarray(x, dtype=float)
        return np.where(np.abs(x) < self.c, self.a, 0.0)

    def torch(self, x):
        import torch

        return self.a * torch.clamp(x, -self.c, self.c)

    @property
    def params(self):
        return {"a": self.a, "c": self.c}

    def mean(self, t):
        return 0.0

    def variance(self, t):
        return self.moments(t).var

    def moments(self, t):
        t = float(t)
        if not (np.isfinite(t) and t > 0):
            raise ValueError(f"input scale t must be positive and finite, got {t!r}.")
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


class Quadratic(Activation):
    """Quadratic ``x -> c2 x^2 + c1 x`` (the constant ``c0`` only centres).

    Closed forms for an input ``N(0, t^2)``::

        mean = c2 t^2,   G1 = c1^2,   G2 = 4 c2^2
        G4 = 8 c2^2 t^2 + 2 c1^2,   Var = 2 c2^2 t^4 + c1^2 t^2

    Parameters
    ----------
    c2, c1 : float
        Quadratic and linear coefficients.
    """

    def __init__(self, c2: float = 0.0, c1: float = 1.0, name: str | None = None):
        self.c2, self.c1 = float(c2), float(c1)
        super().__init__(self._f, name=name or "quadratic", odd=(self.c2 == 0.0))

    def _f(self, x):
        return (self.c2 * x + self.c1) * x

    def derivative(self, x):
        return 2.0 * self.c2 * np.asarray(x, dtype=float) + self.c1

    def torch(self, x):
        return (self.c2 * x + self.c1) * x

    @property
    def params(self):
        return {"c2": self.c2, "c1": self.c1}

    def mean(self, t):
        return self.c2 * float(t) ** 2

    def variance(self, t):
        return self.moments(t).var

    def moments(self, t):
        t = float(t)
        if not (np.isfinite(t) and t > 0):
            raise ValueError(f"input scale t must be positive and finite, got {t!r}.")
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
        "relu": Activation(_relu, "relu", derivative=_relu_d, breakpoints=(0.0,), torch_func=_TORCH["relu"], odd=False),
        "tanh": Activation(np.tanh, "tanh", derivative=_tanh_d, torch_func=_TORCH["tanh"], odd=True),
        "erf": Activation(special.erf, "erf", derivative=_erf_d, torch_func=_TORCH["erf"], odd=True),
        "sigmoid": Activation(_sigmoid, "sigmoid", derivative=_sigmoid_d, torch_func=_TORCH["sigmoid"], odd=True),
        "gelu": Activation(_gelu, "gelu", derivative=_gelu_d, torch_func=_TORCH["gelu"], odd=False),
        "silu": Activation(_silu, "silu", derivative=_silu_d, torch_func=_TORCH["silu"], odd=False),
        "softplus": Activation(_softplus, "softplus", derivative=_sigmoid, torch_func=_TORCH["softplus"], odd=False),
        "elu": Activation(_elu, "elu", derivative=_elu_d, breakpoints=(0.0,), torch_func=_TORCH["elu"], odd=False),
        "leaky_relu": LeakyReLU(1.0, 0.01, name="leaky_relu"),
    }


#: Named activations accepted wherever an ``activation`` parameter is.
ACTIVATIONS: dict[str, Activation] = _named()
_ALIASES = {"swish": "silu"}
#: Every name :func:`get_activation` accepts (case-insensitive), aliases included, sorted.
ACTIVATION_NAMES: tuple = tuple(sorted(set(ACTIVATIONS) | set(_ALIASES)))


def get_activation(activation) -> Activation:
    """Resolve a name, an :class:`Activation` or a callable to an :class:`Activation`.

    Parameters
    ----------
    activation : str, Activation or callable
        One of ``sorted(ACTIVATIONS)`` (plus the alias ``"swish"`` for
        ``"silu"``), an :class:`Activation`, or a vectorised numpy callable
        (wrapped with a finite-difference derivative and no breakpoints; wrap
        it in :class:`Activation` yourself to give them).

    Raises
    ------
    ValueError
        For an unknown name.
    TypeError
        For anything that is neither a string nor callable.
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
        return Activation(activation)
    raise TypeError(f"activation must be a name, an Activation or a callable, got {type(activation).__name__}.")
