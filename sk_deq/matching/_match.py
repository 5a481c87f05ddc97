"""The matching search: the DEQ's targets, the candidate families fitted in turn, the cache of results."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from .._validation import EXPLICIT_KERNELS, check_kernel, check_sigma_b2
from ..activations import Activation, get_activation
from ..theory import DEQNTKCoefficients, deq_ck_coefficients, deq_ntk_coefficients
from ._cache import CacheInfo, _MatchCache
from .families import _family_name, _Params, _resolve_family
from ._problem import _GOOD_ENOUGH, EQUATIONS, _Problem, _solve
from ._result import MatchingError, MatchResult


def matching_targets(activation, sigma_a2: float, tau0: float, kernel: str = "ck", *, sigma_b2=None):
    """The DEQ-side coefficients M1-M4 compare the explicit network's with, and the DEQ solution.

    For ``kernel='ck'`` the feature-kernel coefficients ``((alpha1 -
    sigma_b2)/sigma_a2, alpha2/sigma_a2, alpha3/sigma_a2, tau^2)`` (see
    :ref:`theory-matching`); for ``kernel='ntk'`` the Implicit-NTK
    coefficients ``(beta1, beta2, beta3, kappa^2)`` (see :ref:`theory-ntk`).
    The arguments are those of :func:`match_explicit`; returns ``(targets,
    deq)``, a :class:`~sk_deq.theory.KernelCoefficients` and the
    :class:`~sk_deq.theory.DEQCoefficients` or
    :class:`~sk_deq.theory.DEQNTKCoefficients` they come from.
    """
    if check_kernel(kernel, EXPLICIT_KERNELS) == "ck":
        deq = deq_ck_coefficients(activation, sigma_a2, tau0, sigma_b2=sigma_b2)
        return deq.feature_kernel(), deq
    ntk = deq_ntk_coefficients(activation, sigma_a2, tau0, sigma_b2=sigma_b2)
    return ntk.kernel(), ntk


def match_explicit(
    activation: str | Activation | Callable[..., Any],
    sigma_a2: float,
    tau0: float,
    kernel: Literal["ck", "ntk"] = "ck",
    family: str | Sequence[str] = "auto",
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
        ``'auto'`` picks Ling et al.'s (2024) choice where it applies (hard-tanh for
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
        256 results, shared read-only), so fits with the same configuration
        (folds, grid searches) solve once.  As with
        :func:`functools.lru_cache`, ``match_explicit.cache_info()`` returns
        the named tuple ``(hits, misses, maxsize, currsize)`` and
        ``match_explicit.cache_clear()`` empties the cache and resets its
        counts.  A hit is a call answered from the cache, a miss one that
        solved (and stored its result, unless no family matched); calls that
        are not cached (no seed, or an activation that cannot be hashed)
        count as neither.

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
    >>> match_explicit.cache_clear()
    >>> m = match_explicit("tanh", 0.2, 1.0)
    >>> match_explicit("tanh", 0.2, 1.0) is m
    True
    >>> match_explicit.cache_info()
    CacheInfo(hits=1, misses=1, maxsize=256, currsize=1)
    """
    act = get_activation(activation)
    _check_search_options(tol, n_starts)
    if sigma_b2 is not None:  # checked (and warned about) on a cache hit too
        check_sigma_b2(sigma_b2, sigma_a2)
    return _CACHE.get_or_solve(
        _match, act, sigma_a2, tau0, kernel, family, n_layers, sigma_b2, tol, int(n_starts), random_state
    )


def _check_search_options(tol, n_starts) -> None:
    if tol is not None and not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number or None, got {tol!r}.")
    if int(n_starts) < 1:
        raise ValueError(f"n_starts must be at least 1, got {n_starts!r}.")


_CACHE = _MatchCache()


def _cache_info() -> CacheInfo:
    """Hits, misses, maximum and current size of the cache of :func:`match_explicit`."""
    return _CACHE.info()


def _cache_clear() -> None:
    """Empty the cache of :func:`match_explicit` and reset its statistics."""
    _CACHE.clear()


match_explicit.cache_info = _cache_info  # type: ignore[attr-defined]
match_explicit.cache_clear = _cache_clear  # type: ignore[attr-defined]


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
    if not math.isfinite(best.worst):
        raise ValueError(
            f"No explicit network could be fitted to the {kernel.upper()} of the {act.name}-DEQ (sigma_a2="
            f"{_deq_sigma(deq):g}, sigma_b2={_deq_sigma(deq, 'b'):g}, tau0={targets.tau0:g}): the least-squares fit "
            f"of every candidate family ran into non-finite values. A sigma_b2 far from 1 - sigma_a2 = "
            f"{1 - _deq_sigma(deq):g} puts the kernel (M1 target {targets.linear:.3g}) at scales the fit cannot "
            "reach: use one nearer it."
        )
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
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            try:
                theta, res = _solve(problem, n_starts, rng, eff_tol)
            except (ValueError, FloatingPointError):  # the solver met non-finite values: no fit of this family
                theta, res = problem.plain, np.full(len(EQUATIONS), np.nan)
        worst = float(np.max(np.abs(res))) if np.all(np.isfinite(res)) else math.inf
        fits.append(_Fit(kinds, problem, theta, res, worst))
        if best is None or fits[-1].worst < 0.9 * best.worst - 1e-9:
            best = fits[-1]
        if best.worst < _GOOD_ENOUGH:
            break
    assert best is not None  # there is at least one candidate
    return fits, best


def _matching_error(act, deq, targets, kernel, best: _Fit, tried, tol) -> MatchingError:
    detail = "; ".join(f"{name}: {w:.3g}" for name, w in tried)
    eqs = ", ".join(f"{n}={v:+.3g}" for n, v in zip(EQUATIONS, best.residuals))
    return MatchingError(
        f"No explicit network matches the {kernel.upper()} of the {act.name}-DEQ "
        f"(sigma_a2={_deq_sigma(deq):g}, tau0={targets.tau0:g}) within tol={tol:g}: best family "
        f"{_family_name(best.kinds)!r} leaves relative residuals {eqs} (largest per family: {detail}).",
        "Try family='auto' or another family, a deeper stack (n_layers), the other kernel, "
        "or tol=None to accept the best fit.",
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
