"""The :class:`Activation` base class and the :class:`GaussianMoments` of an activation.

An activation evaluates on numpy arrays (for the theory) and on torch
tensors (for :mod:`sk_deq.nn`), converting between the two as described in
:class:`Activation`; torch is imported only when first needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import numpy as np

from . import gaussian
from ._duals import DualFormula

__all__ = ["Activation", "GaussianMoments"]


@dataclass(frozen=True)
class GaussianMoments:
    """Gaussian moments of an activation at input scale ``t``.

    All derivative moments refer to the activation centred at ``t``
    (``phi = phi0 - mean``); centring changes only ``sq_d2``.  Instances are
    returned by :meth:`Activation.moments`; every parameter is stored as an
    attribute of the same name, and the properties :attr:`g1`, :attr:`g2`,
    :attr:`g4` and :attr:`d` give the moments under the names of the theory
    page (:ref:`theory-equations`).

    Parameters
    ----------
    t : float
        Standard deviation of the Gaussian input ``N(0, t^2)``.
    mean : float
        ``E_t[phi0]``, the centring constant.
    var : float
        ``Var_t[phi0] = E_t[phi^2]``.
    d1, d2 : float
        ``E_t[phi']`` and ``E_t[phi'']`` (derivatives do not see the
        centring).
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
    dual : DualFormula, optional
        Closed forms of the activation's Gaussian expectations (its dual
        activation, see :class:`DualFormula`), used by the exact kernels.
        Without one, :func:`sk_deq.kernels.implicit_kernel` uses a Hermite
        expansion and :func:`sk_deq.kernels.explicit_kernel` does not accept
        the activation.

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
        dual: DualFormula | None = None,
    ):
        if not callable(func):
            raise TypeError(f"activation must be callable, got {type(func).__name__}.")
        if not (odd is None or isinstance(odd, (bool, np.bool_))):  # the rule of _validation.check_bool, below it
            raise TypeError(f"odd must be a bool (True, False or None), got {odd!r} of type {type(odd).__name__}.")
        self._func = func
        self.name = name or getattr(func, "__name__", None) or type(func).__name__
        self._derivative = derivative
        self.breakpoints = tuple(float(b) for b in breakpoints)
        self._torch_func = torch_func
        self._odd = odd
        self._dual = dual
        self._speaks: str | None = None  # 'numpy' or 'torch', found at first use
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
        """Evaluate ``phi0`` on a numpy array.

        Parameters
        ----------
        x : array-like of float
            Points, of any shape (converted to a float64 array).

        Returns
        -------
        ndarray
            ``phi0(x)``, of the shape of ``x``.
        """
        x = np.asarray(x, dtype=float)
        if self._language() == "numpy":
            return self._func(x)
        import torch

        with torch.no_grad():
            out = self._func(torch.from_numpy(np.ascontiguousarray(x)))
        return out.detach().to("cpu", torch.float64).numpy()

    def derivative(self, x):
        """Evaluate ``phi0'`` on a numpy array.

        The ``derivative`` given to the constructor if any; otherwise autograd
        for a torch function, or a central finite difference (accurate to
        about 1e-10 away from kinks).

        Parameters
        ----------
        x : array-like of float
            Where to differentiate: any shape, converted to float64.

        Returns
        -------
        ndarray
            The slopes ``phi0'(x)``, one per entry of ``x``.
        """
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
        """Evaluate ``phi0`` on a torch tensor (differentiable).

        Uses ``torch_func`` if one was given, otherwise the tensor form chosen
        as described in the class documentation.

        Parameters
        ----------
        x : torch.Tensor
            Pre-activations, of any shape, dtype and device.

        Returns
        -------
        torch.Tensor
            ``phi0(x)``, of the shape, dtype and device of ``x``, in the
            autograd graph of ``x``.
        """
        if self._torch_func is not None:
            return self._torch_func(x)
        if self._on_tensors is None:
            self._on_tensors = self._tensor_form()
        return self._on_tensors(x)

    def _torch_inplace(self, x):
        """``phi0(x)`` without autograd, written over ``x`` where the torch form has an in-place version."""
        f = getattr(self._torch_func, "inplace", None)
        return f(x) if f is not None else self.torch(x)

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

    @property
    def dual(self) -> DualFormula | None:
        """Closed forms of the Gaussian expectations (:class:`DualFormula`), or None where there are none."""
        return self._dual

    # -- Gaussian moments ---------------------------------------------------
    def mean(self, t: float) -> float:
        """``E_t[phi0]``, the constant that centres the activation at scale ``t``.

        Parameters
        ----------
        t : float
            Standard deviation of the Gaussian input ``N(0, t^2)``.

        Returns
        -------
        float
            ``E[phi0(t xi)]`` for ``xi ~ N(0, 1)`` (``phi0(0)`` for an odd
            activation).
        """
        return self._mean_at(t)

    def _mean_at(self, t: float) -> float:
        return self._value_at_zero() if self.odd else gaussian.expect(self, t, self.breakpoints)

    def variance(self, t: float) -> float:
        """``Var_t[phi0]`` (two-pass, so a large mean costs no precision).

        Parameters
        ----------
        t : float
            Input scale: the activation's input is ``N(0, t^2)``.

        Returns
        -------
        float
            ``E_t[(phi0 - E_t[phi0])^2]``; ``inf`` where the activation
            overflows.
        """
        return self._variance_at(t)

    def _variance_at(self, t: float) -> float:
        with np.errstate(all="ignore"):
            m = self.mean(t)
            v = gaussian.expect(lambda x: (self(x) - m) ** 2, t, self.breakpoints)
        return v if np.isfinite(v) else np.inf

    def moments(self, t: float) -> GaussianMoments:
        """Gaussian moments at input scale ``t``, activation centred at ``t``.

        Computed by Stein's identities with composite Gauss-Legendre
        quadrature (panel edges at the breakpoints), so no second derivative
        is needed (see :ref:`theory-equations`); in closed form for the
        parametric families (:class:`LeakyReLU`, :class:`HardTanh`,
        :class:`Quadratic`).

        Parameters
        ----------
        t : float
            Standard deviation of the Gaussian input ``N(0, t^2)``; positive
            and finite.

        Returns
        -------
        GaussianMoments
            The mean, variance and derivative moments at ``t``.

        Raises
        ------
        ValueError
            If ``t`` is not positive and finite, or a moment is not finite
            (the activation grows too fast for a Gaussian input).
        """
        t = float(t)
        if not (np.isfinite(t) and t > 0):
            raise ValueError(f"input scale t must be positive and finite, got {t!r}.")
        out = self._moments_at(t)
        _check_finite_moments(self, out)
        return out

    def _moments_at(self, t: float) -> GaussianMoments:
        """The moments at a valid ``t``, by quadrature (the closed-form families override it)."""
        bp = self.breakpoints
        # Overflow inside a user's function shows up as a non-finite moment,
        # reported below with a clear message.
        with np.errstate(all="ignore"):
            m = self._value_at_zero() if self.odd else gaussian.expect(self, t, bp)

            def centred_sq(x):
                c = self(x) - m
                return c * c

            var = gaussian.expect(centred_sq, t, bp)
            d1 = gaussian.stein_d1(self, t, bp)
            d2 = 0.0 if self.odd else gaussian.stein_d2(self, t, bp)
            sq_d2 = gaussian.stein_d2(centred_sq, t, bp)
            d1_sq = gaussian.expect(lambda x: self.derivative(x) ** 2, t, bp)
        return GaussianMoments(t, m, var, d1, d2, sq_d2, d1_sq)

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
