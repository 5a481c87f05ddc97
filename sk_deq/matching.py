"""Match a DEQ's kernel with a shallow explicit network (SPEC §4, §5).

:func:`match_explicit` solves the matching equations M1-M4::

    (M1) linear_explicit   = linear_target      (X^T X)
    (M2) norm_explicit     = norm_target        (squared-norm fluctuations)
    (M3) inner_explicit    = inner_target       (squared inner products)
    (M4) identity_explicit = identity_target    (I)

where the targets are the DEQ's feature-kernel coefficients (CK) or its
Implicit-NTK coefficients (NTK), by nonlinear least squares from several
starts, and returns a :class:`MatchResult` with the explicit activation's
parameters and every equation's residual.

Families are stacks of layer *kinds*: ``'leaky_relu'`` (slopes ``a, b``),
``'hard_tanh'`` (gain ``a``, threshold ``c``) and ``'quadratic'``
(``c2, c1``).  Solutions are not unique: the CK and NTK are unchanged by a
sign flip of any layer, by the swap ``a <-> b`` of a leaky-ReLU layer, and by
moving a positive factor across a positively homogeneous layer (a leaky-ReLU
layer after another layer).  Among the good fits the one closest to the plain
activations (slopes ``(1, 0)``, hard-tanh ``(1, 1)``, quadratic ``(0, 1)``)
is returned, with non-negative slopes: large-gain roots amplify finite-sample
fluctuations of the sample norms (SPEC §4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from .activations import Activation, HardTanh, LeakyReLU, Quadratic, get_activation
from .theory import (
    DEQNTKCoefficients,
    ExplicitCoefficients,
    KernelCoefficients,
    deq_ck_coefficients,
    deq_ntk_coefficients,
    explicit_coefficients,
)

__all__ = ["MatchResult", "MatchingError", "match_explicit", "matching_targets", "FAMILIES", "LAYER_KINDS"]

EQUATIONS = ("M1", "M2", "M3", "M4")


@dataclass(frozen=True)
class _Kind:
    cls: type
    names: tuple
    plain: tuple
    lower: tuple  # lower bounds of the two parameters


#: Layer kinds a family can be built from.
LAYER_KINDS = {
    "leaky_relu": _Kind(LeakyReLU, ("a", "b"), (1.0, 0.0), (-np.inf, -np.inf)),
    "hard_tanh": _Kind(HardTanh, ("a", "c"), (1.0, 1.0), (-np.inf, 1e-6)),
    "quadratic": _Kind(Quadratic, ("c2", "c1"), (0.0, 1.0), (-np.inf, -np.inf)),
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
    for name, k in FAMILIES.items():
        if k == kinds:
            return name
    if len(set(kinds)) == 1:
        return f"{kinds[0]}x{len(kinds)}"
    return "_".join(kinds)


@dataclass(frozen=True)
class MatchResult:
    """An explicit network whose kernel matches a DEQ's.

    Attributes
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
        Relative residual of M1-M4, ``(achieved - target) / |target|``
        (absolute where the target is zero).
    tol : float
        The tolerance the residuals were checked against.
    explicit : ExplicitCoefficients
        Recursion output: input scale and centring constant of every layer.
    deq : DEQCoefficients or DEQNTKCoefficients
        The DEQ-side solution.
    candidates : tuple of (str, float)
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
        """A JSON-serialisable summary."""
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
                name: {"target": float(t[i]), "achieved": float(a[i]), "relative_residual": float(self.residuals[i])}
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

    Returns ``(targets, deq)``: for ``kernel='ck'`` the feature-kernel
    coefficients ``((alpha1 - sigma_b2)/sigma_a2, alpha2/sigma_a2,
    alpha3/sigma_a2, tau^2 ...)`` (M1-M4 of SPEC §4); for ``kernel='ntk'`` the
    Implicit-NTK coefficients ``(beta1, beta2, beta3, kappa^2)`` (SPEC §5).
    """
    if kernel == "ck":
        deq = deq_ck_coefficients(activation, sigma_a2, tau0, sigma_b2=sigma_b2)
        return deq.feature_kernel(), deq
    if kernel == "ntk":
        deq = deq_ntk_coefficients(activation, sigma_a2, tau0, sigma_b2=sigma_b2)
        return deq.kernel(), deq
    raise ValueError(f"kernel must be 'ck' or 'ntk', got {kernel!r}.")


def _resolve_family(family, n_layers, act: Activation) -> list:
    if isinstance(family, str):
        if family == "auto":
            if n_layers is not None:
                raise ValueError("n_layers cannot be combined with family='auto'.")
            return list(_AUTO_ODD if act.odd else _AUTO_OTHER)
        if family in FAMILIES:
            kinds = FAMILIES[family]
            if n_layers is not None:
                if len(set(kinds)) != 1:
                    raise ValueError(f"n_layers applies to single-kind families, not {family!r}.")
                if int(n_layers) < 1:
                    raise ValueError(f"n_layers must be at least 1, got {n_layers!r}.")
                kinds = (kinds[0],) * int(n_layers)
            return [kinds]
        raise ValueError(
            f"Unknown family {family!r}; use 'auto', one of {sorted(FAMILIES)}, "
            f"or a sequence of layer kinds from {sorted(LAYER_KINDS)}."
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


class _Problem:
    """Residuals of M1-M4 for one family as a function of the stacked parameters."""

    def __init__(self, kinds, targets: KernelCoefficients, kernel: str):
        self.kinds = kinds
        self.kernel = kernel
        self.tau0 = targets.tau0
        self.t = targets.equations()
        self.scale = np.where(np.abs(self.t) > 1e-12, np.abs(self.t), 1.0)
        self.plain = np.concatenate([LAYER_KINDS[k].plain for k in kinds])
        self.lower = np.concatenate([LAYER_KINDS[k].lower for k in kinds])

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

    def canonical(self, theta) -> np.ndarray:
        """Apply the discrete symmetries layer by layer.

        ``f -> -f`` and ``f(x) -> f(-x)`` leave every kernel unchanged (the
        weights are symmetric), so each layer has up to four equivalent
        parameter sets; keep the one closest to plain, non-negative on ties.
        """
        th = np.array(theta, dtype=float)
        for i, k in enumerate(self.kinds):
            p, q = th[2 * i], th[2 * i + 1]
            if k == "leaky_relu":  # -f: (-a, -b); f(-x): (-b, -a); -f(-x): (b, a)
                options = [(p, q), (q, p), (-p, -q), (-q, -p)]
            elif k == "hard_tanh":  # odd: -f = f(-x): (-a, c)
                options = [(abs(p), q)]
            else:  # quadratic: -f: (-c2, -c1); f(-x): (c2, -c1); -f(-x): (-c2, c1)
                options = [(abs(p), abs(q))]
            plain = LAYER_KINDS[k].plain
            th[2 * i : 2 * i + 2] = min(
                options, key=lambda o: ((o[0] - plain[0]) ** 2 + (o[1] - plain[1]) ** 2, -o[0], -o[1])
            )
        return th

    def distance(self, theta) -> float:
        return float(np.sum((np.asarray(theta) - self.plain) ** 2))


def _solve(problem: _Problem, n_starts: int, rng: np.random.Generator, tol: float):
    """Multi-start least squares; returns (theta, residuals) of the chosen root."""
    dim = len(problem.plain)
    lo, hi = problem.lower, np.full(dim, np.inf)
    starts = [np.maximum(problem.plain, lo + 1e-3)]
    while len(starts) < n_starts:
        x0 = problem.plain + rng.normal(scale=0.6, size=dim)
        starts.append(np.maximum(x0, lo + 1e-3))
    roots = []
    for x0 in starts:
        r = least_squares(
            problem.residuals, x0, bounds=(lo, hi), xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=400 * dim
        )
        roots.append(problem.canonical(r.x))
    fits = [(th, problem.residuals(th)) for th in roots]
    best = min(float(np.max(np.abs(f))) for _, f in fits)
    # Good fits: within a tenth of the tolerance of the best one.  Among them,
    # slide along the continuous symmetries towards the plain activation (a
    # pull towards plain, then an unregularised re-fit that drops back into
    # the valley), then keep the root closest to plain.
    good = [th for th, f in fits if np.max(np.abs(f)) <= best + 0.1 * tol]
    polished = []
    for th in good:
        pulled = least_squares(
            lambda x: np.concatenate([problem.residuals(x), 1e-2 * (x - problem.plain)]),
            th,
            bounds=(lo, hi),
            max_nfev=50 * dim,
        ).x
        refit = least_squares(
            problem.residuals, pulled, bounds=(lo, hi), xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=100 * dim
        ).x
        cand = problem.canonical(refit)
        f_old, f_new = problem.residuals(th), problem.residuals(cand)
        keep = cand if np.max(np.abs(f_new)) <= np.max(np.abs(f_old)) * (1 + 1e-6) + 1e-10 else th
        polished.append(keep)
    chosen = min(polished, key=problem.distance)
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
    n_starts: int = 8,
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
        equally well are resolved in that order.  Or a name from
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
    n_starts : int, default=8
        Least-squares starts per candidate family.
    random_state : int or None, default=0
        Seed of the random starts.

    Returns
    -------
    MatchResult

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
    """
    act = get_activation(activation)
    if tol is not None and not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number or None, got {tol!r}.")
    if int(n_starts) < 1:
        raise ValueError(f"n_starts must be at least 1, got {n_starts!r}.")
    fam_key = family if isinstance(family, str) else tuple(family)
    key = (act, float(sigma_a2), float(tau0), kernel, fam_key, n_layers, sigma_b2, tol, int(n_starts), random_state)
    if random_state is not None and _hashable(key):
        # Deterministic for a given seed: repeated fits (cross-validation folds,
        # grid searches) reuse the result, which is immutable.
        hit = _CACHE.get(key)
        if hit is None:
            hit = _match(act, sigma_a2, tau0, kernel, family, n_layers, sigma_b2, tol, int(n_starts), random_state)
            if len(_CACHE) >= 256:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[key] = hit
        return hit
    return _match(act, sigma_a2, tau0, kernel, family, n_layers, sigma_b2, tol, int(n_starts), random_state)


_CACHE: dict = {}


def _hashable(key) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def _match(act, sigma_a2, tau0, kernel, family, n_layers, sigma_b2, tol, n_starts, random_state) -> MatchResult:
    candidates = _resolve_family(family, n_layers, act)
    targets, deq = matching_targets(act, sigma_a2, tau0, kernel, sigma_b2=sigma_b2)
    rng = np.random.default_rng(random_state)
    eff_tol = 0.05 if tol is None else float(tol)
    results = []
    best_i = 0
    for kinds in candidates:
        problem = _Problem(kinds, targets, kernel)
        theta, res = _solve(problem, n_starts, rng, eff_tol)
        results.append((kinds, problem, theta, res, float(np.max(np.abs(res)))))
        # A later (deeper or less standard) candidate wins only if it fits
        # clearly better: its largest residual at least 10 % smaller.
        if results[-1][4] < 0.9 * results[best_i][4] - 1e-9:
            best_i = len(results) - 1
        if results[best_i][4] < 1e-8:  # exact: nothing can do better
            break
    kinds, problem, theta, res, worst = results[best_i]
    tried = tuple((_family_name(r[0]), r[4]) for r in results)
    if tol is not None and worst > tol:
        detail = "; ".join(f"{name}: {w:.3g}" for name, w in tried)
        eqs = ", ".join(f"{n}={v:+.3g}" for n, v in zip(EQUATIONS, res))
        raise MatchingError(
            f"No explicit network matches the {kernel.upper()} of the {act.name}-DEQ "
            f"(sigma_a2={_deq_sigma(deq):g}, tau0={targets.tau0:g}) within tol={tol:g}: best family "
            f"{_family_name(kinds)!r} leaves relative residuals {eqs} (largest per family: {detail}). "
            "Try family='auto' or another family, a deeper stack (n_layers), the other kernel, "
            "or tol=None to accept the best fit."
        )
    explicit = problem.coefficients(theta)
    layers = tuple(problem.layers(theta))
    params = tuple(_Params(layer.params) for layer in layers)  # read-only: results are cached
    res = np.array(res, dtype=float)
    res.setflags(write=False)
    return MatchResult(
        activation=act.name,
        sigma_a2=_deq_sigma(deq),
        sigma_b2=_deq_sigma(deq, "b"),
        tau0=targets.tau0,
        kernel=kernel,
        family=_family_name(kinds),
        kinds=tuple(kinds),
        params=params,
        layers=layers,
        targets=targets,
        achieved=explicit.kernel(kernel),
        residuals=res,
        tol=tol,
        explicit=explicit,
        deq=deq,
        candidates=tried,
    )


def _deq_sigma(deq, which: str = "a") -> float:
    ck = deq.ck if isinstance(deq, DEQNTKCoefficients) else deq
    return ck.sigma_a2 if which == "a" else ck.sigma_b2
