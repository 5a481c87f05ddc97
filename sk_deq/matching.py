"""Match a DEQ's kernel with a shallow explicit network (see :ref:`theory-matching`).

:func:`match_explicit` solves the matching equations M1-M4::

    (M1) linear_explicit   = linear_target      (X^T X)
    (M2) norm_explicit     = norm_target        (squared-norm fluctuations)
    (M3) inner_explicit    = inner_target       (squared inner products)
    (M4) identity_explicit = identity_target    (I)

where the targets are the DEQ's feature-kernel coefficients (CK) or its
Implicit-NTK coefficients (NTK), by nonlinear least squares from several
starts, and returns a :class:`MatchResult` with the explicit activation's
parameters and every equation's residual.

Residuals are scale-free: equation ``i`` is measured relative to
``max(|target_i|, 1e-3 * natural_i)``, where the natural scale of the
coefficient of ``X^T X`` is ``D / tau0^2``, that of the two squared
coefficients ``D / tau0^4`` and that of the identity ``D`` (``D`` the kernel's
diagonal value at ``||x|| = tau0``).  Each term of the kernel then carries the
same weight whatever the data scale, and a positively homogeneous DEQ (ReLU,
leaky ReLU) gets the same matched network at every ``tau0``.

Families are stacks of layer *kinds*: ``'leaky_relu'`` (slopes ``a, b``),
``'hard_tanh'`` (gain ``a``, threshold ``c``) and ``'quadratic'``
(``c2, c1``).  Solutions are not unique: the CK and NTK are unchanged by a
sign flip of any layer, by the swap ``a <-> b`` of a leaky-ReLU layer, and by
moving a positive factor from a layer's output into the next layer's input
(``k f(x)`` followed by ``g(x / k)``).  Every root is first mapped to the point of its
symmetry orbit closest to the plain activations (slopes ``(1, 0)``, hard-tanh
``(1, 1)``, quadratic ``(0, 1)``) -- over the discrete symmetries by
enumeration, over the positive factors by exact minimisation -- so the
returned parameters are a function of the root, not of the solver's path.
Among the good fits the root whose canonical point is closest to plain is
returned, with non-negative slopes: large-gain roots amplify finite-sample
fluctuations of the sample norms (see :ref:`theory-matching`).
"""

from __future__ import annotations

import threading
from collections import namedtuple
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from scipy.optimize import least_squares

from ._inputs import EXPLICIT_KERNELS, check_kernel
from .activations import Activation, HardTanh, LeakyReLU, Quadratic, get_activation
from .theory import (
    DEQNTKCoefficients,
    ExplicitCoefficients,
    KernelCoefficients,
    deq_ck_coefficients,
    deq_ntk_coefficients,
    explicit_coefficients,
)

__all__ = [
    "MatchResult",
    "MatchingError",
    "match_explicit",
    "match_cache_info",
    "clear_match_cache",
    "matching_targets",
    "equation_scales",
    "parse_family",
    "FAMILIES",
    "LAYER_KINDS",
]

EQUATIONS = ("M1", "M2", "M3", "M4")

#: Powers of ``tau0`` in the natural scale ``D / tau0^k`` of M1-M4 (``D`` the
#: kernel's diagonal value): the terms ``X^T X``, squared-norm fluctuations,
#: squared inner products and ``I`` of the kernel have sizes ``tau0^2``,
#: ``tau0^4``, ``tau0^4`` and 1.
_NATURAL_POWERS = np.array([2.0, 4.0, 4.0, 0.0])
#: Below this fraction of its natural scale a target counts as negligible: its
#: equation is then measured against ``_NATURAL_FLOOR`` times the natural scale
#: (an error of tol times that moves the kernel by a negligible amount, and the
#: targets of such tiny terms, differences of nearly equal numbers, carry
#: rounding errors far above 1e-6 of their size).
_NATURAL_FLOOR = 1e-3


@dataclass(frozen=True)
class _Kind:
    cls: type
    names: tuple
    plain: tuple
    lower: tuple  # lower bounds of the two parameters
    # Continuous symmetries: the parameters of k * f(x) are (p * k**emit), those
    # of f(x / k) are (p * k**absorb).  A factor k > 0 moved from a layer's output
    # into the next layer's input leaves every kernel unchanged.
    emit: tuple
    absorb: tuple


#: Layer kinds a family can be built from.
LAYER_KINDS = {
    # a * x, b * x:  k f(x) -> (k a, k b);  f(x / k) -> (a / k, b / k)
    "leaky_relu": _Kind(LeakyReLU, ("a", "b"), (1.0, 0.0), (-np.inf, -np.inf), (1, 1), (-1, -1)),
    # a clip(x, -c, c):  k f(x) -> (k a, c);  f(x / k) -> (a / k, k c)
    "hard_tanh": _Kind(HardTanh, ("a", "c"), (1.0, 1.0), (-np.inf, 1e-6), (1, 0), (-1, 1)),
    # c2 x^2 + c1 x:  k f(x) -> (k c2, k c1);  f(x / k) -> (c2 / k^2, c1 / k)
    "quadratic": _Kind(Quadratic, ("c2", "c1"), (0.0, 1.0), (-np.inf, -np.inf), (1, 1), (-2, -1)),
}

#: Named families: stacks of layer kinds, first layer first.
FAMILIES = {
    "leaky_relu": ("leaky_relu", "leaky_relu"),
    "hard_tanh": ("hard_tanh",),
    "quadratic": ("quadratic",),
    "leaky_relu_quadratic": ("leaky_relu", "quadratic"),
    "quadratic_leaky_relu": ("quadratic", "leaky_relu"),
}

# Candidates tried by family="auto", simplest and the paper's choice first.
_AUTO_ODD = (("hard_tanh",), ("hard_tanh", "hard_tanh"))
_AUTO_OTHER = (
    ("leaky_relu", "leaky_relu"),
    ("leaky_relu", "quadratic"),
    ("quadratic", "leaky_relu"),
    ("leaky_relu", "leaky_relu", "leaky_relu"),
)


class MatchingError(ValueError):
    """No explicit network of the requested family matches within tolerance."""


class _Params(dict):
    """A read-only dict of layer parameters (match results are cached and shared)."""

    def _readonly(self, *args, **kwargs):
        raise TypeError("Parameters of a MatchResult are read-only; copy them with dict(...).")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly
    __ior__ = _readonly

    def __reduce__(self):
        return (_Params, (dict(self),))


def _family_name(kinds: tuple) -> str:
    """The name of a stack of layer kinds; :func:`parse_family` reads it back."""
    for name, k in FAMILIES.items():
        if k == kinds:
            return name
    if len(set(kinds)) == 1:
        return f"{kinds[0]}x{len(kinds)}"
    return "_".join(kinds)


def parse_family(name: str) -> tuple | None:
    """The layer kinds of a family name, or None if ``name`` is not one.

    Accepts every name the package prints: the named :data:`FAMILIES`, a
    single kind repeated (``'leaky_relux3'``, ``'hard_tanhx2'``) and kinds
    joined by underscores (``'hard_tanh_leaky_relu'``).

    Parameters
    ----------
    name : str
        A family name.

    Returns
    -------
    tuple of str or None
        The layer kinds, first layer first, or None if ``name`` names no
        family.

    Examples
    --------
    >>> from sk_deq.matching import parse_family
    >>> parse_family("leaky_relux3")
    ('leaky_relu', 'leaky_relu', 'leaky_relu')
    >>> parse_family("hard_tanh_leaky_relu")
    ('hard_tanh', 'leaky_relu')
    >>> parse_family("cubic") is None
    True
    """
    if name in FAMILIES:
        return FAMILIES[name]
    for kind in LAYER_KINDS:
        rest = name[len(kind) :]
        if name.startswith(kind + "x") and rest[1:].isdigit() and int(rest[1:]) >= 1:
            return (kind,) * int(rest[1:])

    def split(text):
        if not text:
            return ()
        for kind in LAYER_KINDS:
            if text == kind:
                return (kind,)
            if text.startswith(kind + "_"):
                tail = split(text[len(kind) + 1 :])
                if tail is not None:
                    return (kind, *tail)
        return None

    kinds = split(name)
    return kinds if kinds and len(kinds) > 1 else None


@dataclass(frozen=True)
class MatchResult:
    """An explicit network whose kernel matches a DEQ's.

    Returned by :func:`match_explicit` (and shared through its cache, so it
    is immutable); every parameter is stored as an attribute of the same
    name.

    Parameters
    ----------
    activation : str
        The DEQ's activation.
    sigma_a2, sigma_b2, tau0 : float
        The DEQ's weight variances and the data scale.
    kernel : {'ck', 'ntk'}
        Which kernel was matched.
    family : str
        Name of the explicit family (see :data:`FAMILIES`).
    kinds : tuple of str
        Layer kinds, first layer first.
    params : tuple of dict
        Parameters of every layer, e.g. ``({'a': 1.21, 'b': 0.005}, ...)``.
    layers : tuple of Activation
        The explicit activations, ready for :func:`sk_deq.theory.explicit_coefficients`
        or :mod:`sk_deq.nn`.
    targets, achieved : KernelCoefficients
        DEQ-side and explicit-side kernel coefficients.
    residuals : ndarray of shape (4,)
        Scale-free residual of M1-M4, ``(achieved - target) / scales``.
    scales : ndarray of shape (4,)
        What each residual is relative to (see :func:`equation_scales`):
        ``|target|``, or a thousandth of the equation's natural scale where
        the target is smaller than that (e.g. zero).
    tol : float
        The tolerance the residuals were checked against.
    explicit : ExplicitCoefficients
        Recursion output: input scale and centring constant of every layer.
    deq : DEQCoefficients or DEQNTKCoefficients
        The DEQ-side solution.
    candidates : tuple of (str, float), default=()
        Families tried and their largest residual (several for ``family='auto'``).
    """

    activation: str
    sigma_a2: float
    sigma_b2: float
    tau0: float
    kernel: str
    family: str
    kinds: tuple
    params: tuple
    layers: tuple
    targets: KernelCoefficients
    achieved: KernelCoefficients
    residuals: np.ndarray
    scales: np.ndarray
    tol: float
    explicit: ExplicitCoefficients = field(repr=False)
    deq: object = field(repr=False)
    candidates: tuple = ()

    @property
    def max_residual(self) -> float:
        """Largest absolute relative residual."""
        return float(np.max(np.abs(self.residuals)))

    @property
    def n_layers(self) -> int:
        """Number of layers of the explicit network."""
        return len(self.layers)

    @property
    def taus(self) -> tuple:
        """Input scale of every layer (``tau0, tau1, ...``)."""
        return self.explicit.taus

    @property
    def centers(self) -> tuple:
        """Centring constant of every layer at its input scale."""
        return self.explicit.centers

    def to_dict(self) -> dict:
        """A JSON-serialisable summary.

        Returns
        -------
        dict
            The DEQ's configuration and coefficients (``deq``), the family,
            every layer's kind, parameters, input scale and centring constant
            (``layers``), target, achieved value, scale and residual of every
            equation M1-M4 (``equations``), ``max_residual``, ``tol`` and the
            candidates tried.
        """
        t, a = self.targets.equations(), self.achieved.equations()
        return {
            "activation": self.activation,
            "sigma_a2": self.sigma_a2,
            "sigma_b2": self.sigma_b2,
            "tau0": self.tau0,
            "kernel": self.kernel,
            "deq": self.deq.to_dict(),
            "family": self.family,
            "layers": [
                {"kind": k, "params": dict(p), "input_scale": float(s), "center": float(c)}
                for k, p, s, c in zip(self.kinds, self.params, self.taus, self.centers)
            ],
            "equations": {
                name: {
                    "target": float(t[i]),
                    "achieved": float(a[i]),
                    "scale": float(self.scales[i]),
                    "relative_residual": float(self.residuals[i]),
                }
                for i, name in enumerate(EQUATIONS)
            },
            "max_residual": self.max_residual,
            "tol": self.tol,
            "candidates": [{"family": f, "max_residual": r} for f, r in self.candidates],
        }

    def __repr__(self) -> str:
        lines = [
            f"MatchResult({self.kernel.upper()} of {self.activation}-DEQ, sigma_a2={self.sigma_a2:g}, tau0={self.tau0:.6g})",
            f"  family: {self.family} ({self.n_layers} layer{'s' if self.n_layers > 1 else ''})",
        ]
        for i, (k, p, s) in enumerate(zip(self.kinds, self.params, self.taus), 1):
            args = ", ".join(f"{n}={v:.6g}" for n, v in p.items())
            lines.append(f"  layer {i}: {k}({args})  input scale {s:.6g}")
        t, a = self.targets.equations(), self.achieved.equations()
        for i, name in enumerate(EQUATIONS):
            lines.append(f"  {name}: target {t[i]: .6e}  achieved {a[i]: .6e}  residual {self.residuals[i]: .2e}")
        return "\n".join(lines)


def matching_targets(activation, sigma_a2: float, tau0: float, kernel: str = "ck", *, sigma_b2=None):
    """The DEQ-side coefficients the explicit network must reproduce.

    For ``kernel='ck'`` the feature-kernel coefficients ``((alpha1 -
    sigma_b2)/sigma_a2, alpha2/sigma_a2, alpha3/sigma_a2, tau^2 ...)`` (M1-M4
    of :ref:`theory-matching`); for ``kernel='ntk'`` the Implicit-NTK
    coefficients ``(beta1, beta2, beta3, kappa^2)`` (see :ref:`theory-ntk`).

    Parameters
    ----------
    activation : str, Activation or callable
        The DEQ's activation.
    sigma_a2 : float
        The DEQ's recurrent weight variance in ``(0, 1)``.
    tau0 : float
        Data scale, ``tau0^2 = (1/n) sum ||x_i||^2``.
    kernel : {'ck', 'ntk'}, default='ck'
        Which kernel's coefficients.
    sigma_b2 : float, optional
        Input weight variance of the DEQ, ``1 - sigma_a2`` by default.

    Returns
    -------
    targets : KernelCoefficients
        The coefficients M1-M4 compare the explicit network's with.
    deq : DEQCoefficients or DEQNTKCoefficients
        The DEQ-side solution they come from.
    """
    if check_kernel(kernel, EXPLICIT_KERNELS) == "ck":
        deq = deq_ck_coefficients(activation, sigma_a2, tau0, sigma_b2=sigma_b2)
        return deq.feature_kernel(), deq
    deq = deq_ntk_coefficients(activation, sigma_a2, tau0, sigma_b2=sigma_b2)
    return deq.kernel(), deq


def _resolve_family(family, n_layers, act: Activation) -> list:
    if isinstance(family, str):
        if family == "auto":
            if n_layers is not None:
                raise ValueError("n_layers cannot be combined with family='auto'.")
            return list(_AUTO_ODD if act.odd else _AUTO_OTHER)
        kinds = parse_family(family)
        if kinds is not None:
            if n_layers is not None:
                if len(set(kinds)) != 1:
                    raise ValueError(f"n_layers applies to single-kind families, not {family!r}.")
                if int(n_layers) < 1:
                    raise ValueError(f"n_layers must be at least 1, got {n_layers!r}.")
                kinds = (kinds[0],) * int(n_layers)
            return [kinds]
        raise ValueError(
            f"Unknown family {family!r}; use 'auto', one of {sorted(FAMILIES)}, a kind repeated such as "
            f"'leaky_relux3', or a sequence of layer kinds from {sorted(LAYER_KINDS)}."
        )
    kinds = tuple(family)
    bad = [k for k in kinds if k not in LAYER_KINDS]
    if not kinds or bad:
        raise ValueError(
            f"A family given as a sequence must list layer kinds from {sorted(LAYER_KINDS)}; got {family!r}."
        )
    if n_layers is not None:
        raise ValueError("n_layers cannot be combined with a family given as a sequence of kinds.")
    return [kinds]


def equation_scales(targets: KernelCoefficients) -> np.ndarray:
    """What the residuals of M1-M4 are relative to: a scale of each equation.

    ``max(|target_i|, 1e-3 * D / tau0^k_i)`` with ``D = targets.diagonal``
    (the kernel's value at ``||x|| = tau0``) and ``k = (2, 4, 4, 0)``: the
    natural size of each coefficient, given the sizes of the kernel terms it
    multiplies (``x^T y``, squared-norm fluctuations and squared inner
    products, the identity).  Both parts scale with ``tau0`` as the targets
    of a positively homogeneous DEQ do, so the residuals are scale-free; the
    floor keeps an equation whose target is zero (odd activations) or
    negligible (below a thousandth of its natural size, e.g. the identity
    term of a nearly linear DEQ at small ``tau0``) from being judged
    relative to rounding noise.

    Parameters
    ----------
    targets : KernelCoefficients
        DEQ-side coefficients, e.g. from :func:`matching_targets`.

    Returns
    -------
    ndarray of shape (4,)
        Positive denominators of the residuals of M1-M4.

    Examples
    --------
    >>> from sk_deq.matching import equation_scales, matching_targets
    >>> t1, _ = matching_targets("relu", 0.2, 1.0)
    >>> t2, _ = matching_targets("relu", 0.2, 1e3)
    >>> (t1.equations() / equation_scales(t1)).round(6).tolist()
    [1.0, 1.0, 1.0, 1.0]
    >>> bool(abs(equation_scales(t2)[2] / equation_scales(t1)[2] - 1e-6) < 1e-18)
    True
    """
    t = targets.equations()
    diag = abs(float(targets.diagonal))
    if not diag > 0:  # a degenerate kernel: fall back on the largest target
        diag = float(np.max(np.abs(t))) or 1.0
    natural = diag / float(targets.tau0) ** _NATURAL_POWERS
    return np.maximum(np.abs(t), _NATURAL_FLOOR * natural)


class _Problem:
    """Residuals of M1-M4 for one family as a function of the stacked parameters."""

    def __init__(self, kinds, targets: KernelCoefficients, kernel: str):
        self.kinds = tuple(kinds)
        self.kernel = kernel
        self.tau0 = targets.tau0
        self.t = targets.equations()
        self.scale = equation_scales(targets)
        self.plain = np.concatenate([LAYER_KINDS[k].plain for k in self.kinds])
        self.lower = np.concatenate([LAYER_KINDS[k].lower for k in self.kinds])
        # One continuous symmetry per pair of adjacent layers (see _Kind).
        self.links = list(range(len(self.kinds) - 1))

    def layers(self, theta) -> list:
        return [LAYER_KINDS[k].cls(theta[2 * i], theta[2 * i + 1]) for i, k in enumerate(self.kinds)]

    def coefficients(self, theta) -> ExplicitCoefficients:
        return explicit_coefficients(self.layers(theta), self.tau0)

    def residuals(self, theta) -> np.ndarray:
        try:
            e = self.coefficients(theta).kernel(self.kernel).equations()
        except (ValueError, OverflowError, ZeroDivisionError):
            return np.full(4, 1e6)
        if not np.all(np.isfinite(e)):
            return np.full(4, 1e6)
        return (e - self.t) / self.scale

    # -- symmetries ---------------------------------------------------------
    def _discrete(self, theta) -> np.ndarray:
        """Apply the discrete symmetries layer by layer.

        ``f -> -f`` and ``f(x) -> f(-x)`` leave every kernel unchanged (the
        weights are symmetric), so each layer has up to four equivalent
        parameter sets.  The choice closest to plain does not depend on a
        positive rescaling of the layer: for leaky-ReLU the four sets
        ``(a, b), (b, a), (-a, -b), (-b, -a)`` have the same norm, so the
        closest to ``(1, 0)`` has the largest first slope (ties: the larger
        second one); hard-tanh keeps ``a >= 0``, quadratic ``c2, c1 >= 0``.
        """
        th = np.array(theta, dtype=float)
        for i, k in enumerate(self.kinds):
            p, q = th[2 * i], th[2 * i + 1]
            if k == "leaky_relu":
                options = [(p, q), (q, p), (-p, -q), (-q, -p)]
                th[2 * i : 2 * i + 2] = max(options)
            elif k == "hard_tanh":
                th[2 * i] = abs(p)
            else:
                th[2 * i : 2 * i + 2] = abs(p), abs(q)
        return th

    def _exponents(self, link):
        """Powers of ``k`` of the four parameters of layers ``link`` and ``link + 1``."""
        lo, hi = LAYER_KINDS[self.kinds[link]], LAYER_KINDS[self.kinds[link + 1]]
        return np.array(lo.emit + hi.absorb, dtype=float)

    def _move_gain(self, th, link, k) -> None:
        """Move the factor ``k > 0`` from layer ``link``'s output into layer ``link + 1``."""
        sl = slice(2 * link, 2 * link + 4)
        th[sl] = th[sl] * k ** self._exponents(link)

    def _best_gain(self, th, link) -> float:
        """The factor ``k > 0`` moved across ``link`` that brings ``th`` closest to plain (exact).

        The distance is ``sum_j (theta_j k^e_j - plain_j)^2`` over the four
        parameters of the two layers, with powers ``e_j`` in ``-2 .. 2``; its
        stationary points are the positive roots of the polynomial
        ``k^5 d/dk`` of it (degree at most 8).
        """
        sl = slice(2 * link, 2 * link + 4)
        t, e, p = th[sl], self._exponents(link), self.plain[sl]
        # d/dk sum (t k^e - p)^2 = sum 2 e (t^2 k^(2e-1) - t p k^(e-1)); times k^5
        poly = np.zeros(9)  # coefficient of k^j at index j
        for tj, ej, pj in zip(t, e, p):
            if ej == 0:
                continue
            poly[int(2 * ej - 1 + 5)] += ej * tj * tj
            poly[int(ej - 1 + 5)] -= ej * tj * pj
        if not np.any(poly):
            return 1.0
        roots = np.roots(poly[::-1])
        ks = [float(r.real) for r in roots if abs(r.imag) <= 1e-9 * max(1.0, abs(r)) and r.real > 0]
        if not ks:
            return 1.0

        def cost(k):
            return float(np.sum((t * k**e - p) ** 2))

        return min(ks, key=lambda k: (cost(k), k))

    def _fix_gauge(self, th) -> np.ndarray:
        """Slide along the continuous symmetries to the point closest to plain.

        Starts from the orbit's normalised point (the gain-carrying
        parameters of every layer but the last scaled to unit norm), so the
        result is a function of the orbit alone; one link is solved exactly,
        several by exact coordinate descent.
        """
        th = np.array(th, dtype=float)
        for link in self.links:
            emit = np.array(LAYER_KINDS[self.kinds[link]].emit, dtype=float)
            norm = float(np.linalg.norm(emit * th[2 * link : 2 * link + 2]))
            if norm > 0 and np.isfinite(norm):
                self._move_gain(th, link, 1.0 / norm)
        for _ in range(500):
            moved = 0.0
            for link in self.links:
                k = self._best_gain(th, link)
                self._move_gain(th, link, k)
                moved = max(moved, abs(np.log(k)))
            if moved < 1e-13 or len(self.links) <= 1:
                break
        return th

    def canonical(self, theta) -> np.ndarray:
        """The point of ``theta``'s symmetry orbit closest to the plain activations.

        The orbit is generated by the discrete symmetries of every layer and
        the positive factors that move between adjacent layers; all leave
        every kernel unchanged.  The result depends on the orbit only, not on
        which of its points the solver returned.
        """
        # the discrete choice does not change under the positive factors (see _discrete)
        return self._fix_gauge(self._discrete(theta))

    def distance(self, theta) -> float:
        return float(np.sum((np.asarray(theta) - self.plain) ** 2))


_MAX_SLIDES = 4  # good roots polished and slid towards plain, per family
#: A candidate family whose largest residual is below this is as good as exact:
#: no later (deeper or less standard) family is tried.  Lower, the choice between
#: families that all fit to ~1e-5 (e.g. a GELU-DEQ at tau0 = 1e-3, nearly linear)
#: depended on which of their roots the random starts happened to find.
_GOOD_ENOUGH = 1e-4


def _choose(problem: _Problem, thetas: list) -> np.ndarray:
    """The root closest to plain.

    Distances within 1e-4 (relative) count as ties, which arise where a fit
    is flat, e.g. a linear layer (``a = b``) that can sit before or after a
    leaky one; they are broken by the larger parameters, first layer first.
    """
    dists = [problem.distance(th) for th in thetas]
    d_min = min(dists)
    tied = [th for th, d in zip(thetas, dists) if d <= d_min * (1 + 1e-4) + 1e-12]
    return max(tied, key=lambda th: tuple(np.round(th, 4)))


def _solve(problem: _Problem, n_starts: int, rng: np.random.Generator, tol: float):
    """Multi-start least squares; returns (theta, residuals) of the chosen root.

    Every local solution is mapped to its canonical point
    (:meth:`_Problem.canonical`).  The fits within a tenth of the tolerance
    of the best one then slide towards plain along any valley of equally good
    fits (a Tikhonov continuation: a pull towards plain whose weight shrinks
    to zero, then an unregularised fit, kept only where it costs no
    accuracy), and the root closest to plain is chosen (:func:`_choose`), so
    the choice does not depend on the order in which the starts found the
    roots.
    """
    dim = len(problem.plain)
    lo, hi = problem.lower, np.full(dim, np.inf)
    starts = [np.maximum(problem.plain, lo + 1e-3)]
    while len(starts) < n_starts:
        x0 = problem.plain + rng.normal(scale=0.6, size=dim)
        starts.append(np.maximum(x0, lo + 1e-3))

    def fit(x0, max_nfev, pull=0.0, xtol=1e-12):
        if pull:
            fun = lambda x: np.concatenate([problem.residuals(x), pull * (x - problem.plain)])
        else:
            fun = problem.residuals
        x = least_squares(fun, x0, bounds=(lo, hi), xtol=xtol, ftol=xtol, gtol=xtol, max_nfev=max_nfev).x
        return problem.canonical(x)

    def worst(th):
        return float(np.max(np.abs(problem.residuals(th))))

    def good_fits(thetas):
        w = [worst(th) for th in thetas]
        best = min(w)
        unique = {}
        for th, wi in zip(thetas, w):
            if wi <= best + 0.1 * tol:
                unique.setdefault(tuple(np.round(th, 6)), th)
        return list(unique.values())

    roots = good_fits([fit(x0, 400 * dim) for x0 in starts])
    # Roots on one valley slide to the same point: the few closest to plain suffice.
    roots = sorted(roots, key=lambda th: (problem.distance(th), tuple(-np.round(th, 6))))[:_MAX_SLIDES]
    roots = [fit(th, 100 * dim, xtol=1e-15) for th in roots]
    slid = []
    for th in roots:
        new = th
        for pull in (1e-2, 1e-3, 1e-4):
            new = fit(new, 100 * dim, pull)
        new = fit(new, 100 * dim, xtol=1e-15)
        slid.append(new if worst(new) <= worst(th) * (1 + 1e-6) + 1e-12 else th)
    chosen = _choose(problem, good_fits(roots + slid))
    return chosen, problem.residuals(chosen)


def match_explicit(
    activation,
    sigma_a2: float,
    tau0: float,
    kernel: str = "ck",
    family="auto",
    *,
    n_layers: int | None = None,
    sigma_b2: float | None = None,
    tol: float | None = 0.05,
    n_starts: int = 16,
    random_state: int | None = 0,
) -> MatchResult:
    """Find a shallow explicit network with the same CK or NTK as a DEQ.

    Parameters
    ----------
    activation : str, Activation or callable
        The DEQ's activation.
    sigma_a2 : float
        The DEQ's recurrent weight variance in ``(0, 1)``.
    tau0 : float
        Data scale, ``tau0^2 = (1/n) sum ||x_i||^2`` of the (transformed)
        inputs the networks see.
    kernel : {'ck', 'ntk'}, default='ck'
        Match the conjugate kernel (features) or the neural tangent kernel.
    family : str or sequence of str, default='auto'
        ``'auto'`` picks the paper's choice where it applies (hard-tanh for
        odd activations such as tanh; two leaky-ReLU layers otherwise) and
        otherwise the best of a few candidate stacks (leaky-ReLU with a
        quadratic layer, three leaky-ReLU layers); candidates that fit
        equally well are resolved in that order, and the first whose largest
        residual is below 1e-4 ends the search.  Or a name from
        :data:`FAMILIES`, or a sequence of layer kinds such as
        ``('leaky_relu', 'quadratic')``.
    n_layers : int, optional
        Depth for a single-kind family (default: 2 for ``'leaky_relu'``,
        1 for ``'hard_tanh'`` and ``'quadratic'``).
    sigma_b2 : float, optional
        Input weight variance of the DEQ, ``1 - sigma_a2`` by default.
    tol : float or None, default=0.05
        Largest relative residual accepted for any of M1-M4.  ``None``
        accepts the best fit whatever its residuals (inspect ``residuals``).
    n_starts : int, default=16
        Least-squares starts per candidate family (the plain activations and
        random perturbations of them).  With 16 every named activation gets
        the same matched kernel for every seed (to 1e-8), and the same
        parameters to 1e-6 where the equations determine them; fewer starts
        can miss the best local fit of an inexact family.
    random_state : int or None, default=0
        Seed of the random starts.  With a seed the result is cached (up to
        256 results, shared read-only; see :func:`match_cache_info`), so fits
        with the same configuration (folds, grid searches) solve once.

    Returns
    -------
    MatchResult
        The chosen family and layer parameters, the layers as activations
        (``layers``), and the target, achieved value and residual of every
        equation.

    Raises
    ------
    MatchingError
        If the best fit's largest residual exceeds ``tol``.
    ValueError
        For invalid arguments or a DEQ whose kernel recursion does not converge.

    Examples
    --------
    >>> from sk_deq.matching import match_explicit
    >>> m = match_explicit("tanh", 0.2, 1.0)
    >>> m.family, m.max_residual < 1e-8
    ('hard_tanh', True)
    >>> r = match_explicit("relu", 0.2, 1.0)
    >>> r.family, r.n_layers, bool(r.max_residual < 1e-8)
    ('leaky_relu', 2, True)
    >>> [round(p["a"], 3) for p in r.params]
    [1.215, 0.945]
    """
    act = get_activation(activation)
    _check_search_options(tol, n_starts)
    return _CACHE.get_or_solve(
        act, sigma_a2, tau0, kernel, family, n_layers, sigma_b2, tol, int(n_starts), random_state
    )


def _check_search_options(tol, n_starts) -> None:
    if tol is not None and not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number or None, got {tol!r}.")
    if int(n_starts) < 1:
        raise ValueError(f"n_starts must be at least 1, got {n_starts!r}.")


# ---------------------------------------------------------------------------
# the cache of match_explicit

CacheInfo = namedtuple("CacheInfo", ["hits", "misses", "maxsize", "currsize"])
CacheInfo.__doc__ = (
    "Statistics of the cache of :func:`match_explicit` (as :func:`functools.lru_cache` reports its own)."
)


class _MatchCache:
    """Results of :func:`_match` by its arguments; the first stored goes first when full.

    Results are immutable, so every caller may share them.  A call without a
    seed is random and is never cached; nor is one whose arguments cannot be
    hashed (an activation class that defines ``__eq__`` without ``__hash__``).
    The bookkeeping is locked (fits may run in threads); the solve is not, so
    two threads asking for the same new result may both solve it.
    """

    def __init__(self, maxsize: int = 256):
        self.maxsize = maxsize
        self._results: dict = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def key(act, sigma_a2, tau0, kernel, family, n_layers, sigma_b2, tol, n_starts, random_state):
        """The key of a call, or None where it is not cached."""
        if random_state is None:
            return None
        family = family if isinstance(family, str) else tuple(family)
        key = (act, float(sigma_a2), float(tau0), kernel, family, n_layers, sigma_b2, tol, n_starts, random_state)
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def get_or_solve(self, *args) -> MatchResult:
        key = self.key(*args)
        if key is None:
            return _match(*args)
        with self._lock:
            hit = self._results.get(key)
            if hit is not None:
                self.hits += 1
                return hit
            self.misses += 1
        result = _match(*args)
        with self._lock:
            if key not in self._results and len(self._results) >= self.maxsize:
                self._results.pop(next(iter(self._results)))
            return self._results.setdefault(key, result)

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self.hits, self.misses, self.maxsize, len(self._results))

    def clear(self) -> None:
        with self._lock:
            self._results.clear()
            self.hits = self.misses = 0


_CACHE = _MatchCache()


def match_cache_info() -> CacheInfo:
    """Hits, misses, maximum and current size of the cache of :func:`match_explicit`.

    A hit is a call answered from the cache, a miss one that had to solve
    (and stored its result, unless no family matched); calls that are not
    cached (no seed, or an activation that cannot be hashed) count as neither.

    Returns
    -------
    CacheInfo
        A named tuple ``(hits, misses, maxsize, currsize)``.

    Examples
    --------
    >>> from sk_deq.matching import clear_match_cache, match_cache_info, match_explicit
    >>> clear_match_cache()
    >>> m = match_explicit("tanh", 0.2, 1.0)
    >>> match_explicit("tanh", 0.2, 1.0) is m
    True
    >>> match_cache_info()
    CacheInfo(hits=1, misses=1, maxsize=256, currsize=1)
    """
    return _CACHE.info()


def clear_match_cache() -> None:
    """Empty the cache of :func:`match_explicit` and reset its statistics.

    The next call with any configuration solves the equations again (to time
    the solve, for instance).
    """
    _CACHE.clear()


# ---------------------------------------------------------------------------
# the phases of a match


class _Fit(NamedTuple):
    """The chosen root of one candidate family."""

    kinds: tuple
    problem: _Problem
    theta: np.ndarray
    residuals: np.ndarray
    worst: float  # largest absolute residual


def _match(act, sigma_a2, tau0, kernel, family, n_layers, sigma_b2, tol, n_starts, random_state) -> MatchResult:
    """Solve for every candidate family, keep the best fit, check it against ``tol``."""
    candidates = _resolve_family(family, n_layers, act)
    targets, deq = matching_targets(act, sigma_a2, tau0, kernel, sigma_b2=sigma_b2)
    fits, best = _fit_candidates(candidates, targets, kernel, n_starts, np.random.default_rng(random_state), tol)
    tried = tuple((_family_name(f.kinds), f.worst) for f in fits)
    if tol is not None and best.worst > tol:
        raise _matching_error(act, deq, targets, kernel, best, tried, tol)
    return _result(act, deq, targets, kernel, best, tried, tol)


def _fit_candidates(candidates, targets, kernel, n_starts, rng, tol) -> tuple[list, _Fit]:
    """Fit the candidate families in order; returns every fit and the best one.

    A later (deeper or less standard) candidate wins only if it fits clearly
    better: its largest residual at least 10 % smaller.  The search ends at
    the first best fit below :data:`_GOOD_ENOUGH`, in the order of the
    candidates.
    """
    eff_tol = 0.05 if tol is None else float(tol)
    fits: list[_Fit] = []
    best = None
    for kinds in candidates:
        problem = _Problem(kinds, targets, kernel)
        theta, res = _solve(problem, n_starts, rng, eff_tol)
        fits.append(_Fit(kinds, problem, theta, res, float(np.max(np.abs(res)))))
        if best is None or fits[-1].worst < 0.9 * best.worst - 1e-9:
            best = fits[-1]
        if best.worst < _GOOD_ENOUGH:
            break
    return fits, best


def _matching_error(act, deq, targets, kernel, best: _Fit, tried, tol) -> MatchingError:
    detail = "; ".join(f"{name}: {w:.3g}" for name, w in tried)
    eqs = ", ".join(f"{n}={v:+.3g}" for n, v in zip(EQUATIONS, best.residuals))
    return MatchingError(
        f"No explicit network matches the {kernel.upper()} of the {act.name}-DEQ "
        f"(sigma_a2={_deq_sigma(deq):g}, tau0={targets.tau0:g}) within tol={tol:g}: best family "
        f"{_family_name(best.kinds)!r} leaves relative residuals {eqs} (largest per family: {detail}). "
        "Try family='auto' or another family, a deeper stack (n_layers), the other kernel, "
        "or tol=None to accept the best fit."
    )


def _result(act, deq, targets, kernel, best: _Fit, tried, tol) -> MatchResult:
    """The :class:`MatchResult` of the chosen fit, read-only (results are cached and shared)."""
    problem, theta = best.problem, best.theta
    layers = tuple(problem.layers(theta))
    explicit = problem.coefficients(theta)
    return MatchResult(
        activation=act.name,
        sigma_a2=_deq_sigma(deq),
        sigma_b2=_deq_sigma(deq, "b"),
        tau0=targets.tau0,
        kernel=kernel,
        family=_family_name(best.kinds),
        kinds=tuple(best.kinds),
        params=tuple(_Params(layer.params) for layer in layers),
        layers=layers,
        targets=targets,
        achieved=explicit.kernel(kernel),
        residuals=_readonly_array(best.residuals),
        scales=_readonly_array(problem.scale),
        tol=tol,
        explicit=explicit,
        deq=deq,
        candidates=tried,
    )


def _readonly_array(values) -> np.ndarray:
    out = np.array(values, dtype=float)
    out.setflags(write=False)
    return out


def _deq_sigma(deq, which: str = "a") -> float:
    ck = deq.ck if isinstance(deq, DEQNTKCoefficients) else deq
    return ck.sigma_a2 if which == "a" else ck.sigma_b2
