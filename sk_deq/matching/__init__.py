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

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .._inputs import EXPLICIT_KERNELS, check_kernel
from ..activations import get_activation
from ..theory import (
    DEQNTKCoefficients,
    ExplicitCoefficients,
    KernelCoefficients,
    deq_ck_coefficients,
    deq_ntk_coefficients,
)

from ._cache import CacheInfo, _MatchCache
from ._families import FAMILIES, LAYER_KINDS, _family_name, _Params, _resolve_family, parse_family
from ._problem import _GOOD_ENOUGH, EQUATIONS, _Problem, _solve, equation_scales

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


class MatchingError(ValueError):
    """No explicit network of the requested family matches within tolerance."""


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
        _match, act, sigma_a2, tau0, kernel, family, n_layers, sigma_b2, tol, int(n_starts), random_state
    )


def _check_search_options(tol, n_starts) -> None:
    if tol is not None and not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number or None, got {tol!r}.")
    if int(n_starts) < 1:
        raise ValueError(f"n_starts must be at least 1, got {n_starts!r}.")


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
