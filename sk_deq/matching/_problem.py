"""The matching equations M1-M4 of one family, their scale-free residuals, and their solution."""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from .families import LAYER_KINDS
from ..theory import (
    ExplicitCoefficients,
    KernelCoefficients,
    explicit_coefficients,
)


#: Names of the matching equations, in the order of ``KernelCoefficients.equations()``.
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
        DEQ-side coefficients (``MatchResult.targets``).

    Returns
    -------
    ndarray of shape (4,)
        Positive denominators of the residuals of M1-M4.

    Examples
    --------
    >>> from sk_deq.matching import match_explicit
    >>> m1, m2 = match_explicit("relu", 0.2, 1.0), match_explicit("relu", 0.2, 1e3)
    >>> (m1.targets.equations() / m1.scales).round(6).tolist()
    [1.0, 1.0, 1.0, 1.0]
    >>> bool(abs(m2.scales[2] / m1.scales[2] - 1e-6) < 1e-18)
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

    def commuted(self, theta) -> list:
        """The points of ``theta`` with a (nearly) linear layer moved to another place in a chain of leaky ReLUs.

        A leaky-ReLU layer with ``a = b > 0`` is a positive scaling, which
        commutes with every positively homogeneous layer: the kernel is the
        same in any order.  Where the fit is flat along such a layer (a
        least-squares fit, e.g. ELU's CK) the solver returns one order or the
        other depending on its path, which differs between machines (scipy,
        BLAS); :func:`_solve` polishes every order and lets the choice break
        the tie, so the result does not depend on the path.
        """
        if len(self.kinds) < 2 or any(k != "leaky_relu" for k in self.kinds):
            return []
        pairs = np.asarray(theta, dtype=float).reshape(-1, 2)
        moved = []
        for i, (p, q) in enumerate(pairs):
            if p > 0 and abs(p - q) <= _NEAR_LINEAR * p:
                others = [j for j in range(len(pairs)) if j != i]
                moved += [pairs[others[:j] + [i] + others[j:]].reshape(-1) for j in range(len(pairs)) if j != i]
        return moved

    def distance(self, theta) -> float:
        return float(np.sum((np.asarray(theta) - self.plain) ** 2))


#: A leaky-ReLU layer with ``|a - b| <= _NEAR_LINEAR * a`` counts as linear (see :meth:`_Problem.commuted`).
_NEAR_LINEAR = 1e-3

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
    return max(tied, key=lambda th: tuple(np.round(np.asarray(th), 4)))


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
    roots = sorted(roots, key=lambda th: (problem.distance(th), tuple(-np.round(np.asarray(th), 6))))[:_MAX_SLIDES]
    roots = [fit(th, 100 * dim, xtol=1e-15) for th in roots]
    roots += [fit(v, 100 * dim, xtol=1e-15) for th in roots for v in problem.commuted(th)]
    slid = []
    for th in roots:
        new = th
        for pull in (1e-2, 1e-3, 1e-4):
            new = fit(new, 100 * dim, pull)
        new = fit(new, 100 * dim, xtol=1e-15)
        slid.append(new if worst(new) <= worst(th) * (1 + 1e-6) + 1e-12 else th)
    chosen = _choose(problem, good_fits(roots + slid))
    return chosen, problem.residuals(chosen)
