"""Numerical building blocks of the exact implicit engine (numpy only).

* Gaussian quadrature per sample: composite Gauss-Legendre nodes in
  ``xi ~ N(0, 1)`` with panel edges at an activation's breakpoints
  (:func:`sample_nodes`), normalised Hermite polynomials at those nodes
  (:func:`hermite_table`), and two-dimensional quadrature in polar
  coordinates (:func:`polar_expectation`);
* Chebyshev interpolation of per-sample quantities on ``[-1, 1]``
  (:func:`chebyshev_points`, :func:`chebyshev_interpolation_matrix`);
* vectorised root finding on correlations in ``[-1, 1]``
  (:func:`newton`, :func:`safeguarded_newton`) and the entrywise
  fixed point of the diagonal (:func:`diagonal_newton`, given the
  variance and its derivative: a quadrature's, or a closed form's central
  difference).

Every stopping rule here is reachable in floating point: besides its
tolerance, each stops where rounding keeps the steps from shrinking (a
step that no longer decreases once it is within rounding reach of the
solution), so no iteration can circle between neighbouring floats until
its budget runs out.  An error blames ``sigma_a2`` only where the
contraction measured at the last iterate says the recursion is not
contracting; otherwise it reports a numerical failure with its numbers.
"""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = [
    "chebyshev_interpolation_matrix",
    "chebyshev_points",
    "diagonal_newton",
    "zero_roots",
    "hermite_table",
    "newton",
    "polar_expectation",
    "safeguarded_newton",
    "sample_nodes",
]

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_INV_SQRT_2PI = 1.0 / _SQRT_2PI
_XI_MAX = 11.0
_GL_X, _GL_W = np.polynomial.legendre.leggauss(20)


# ---------------------------------------------------------------------------
# per-sample Gaussian quadrature (vectorised over samples)


def _base_xi_edges() -> np.ndarray:
    # panel edges in xi: graded towards 0 (resolves phi(t xi) for large t),
    # half-unit panels up to |xi| = 8 (Hermite functions up to degree ~300),
    # unit panels beyond.
    inner = np.array([1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4])
    mid = np.arange(0.5, 8.0 + 0.25, 0.5)
    outer = np.arange(9.0, _XI_MAX + 0.5, 1.0)
    pos = np.concatenate([inner, mid, outer])
    return np.concatenate([-pos[::-1], [0.0], pos])


_BASE_EDGES = _base_xi_edges()


def _gl_on_edges(edges: np.ndarray):
    lo, hi = edges[..., :-1], edges[..., 1:]
    half = 0.5 * (hi - lo)
    mid = 0.5 * (hi + lo)
    xi = (mid[..., None] + half[..., None] * _GL_X).reshape(*edges.shape[:-1], -1)
    w = (half[..., None] * _GL_W).reshape(*edges.shape[:-1], -1) * _INV_SQRT_2PI * np.exp(-0.5 * xi * xi)
    return xi, w


_COMMON_XI, _COMMON_W = _gl_on_edges(_BASE_EDGES)


def shared_nodes(breakpoints: tuple) -> bool:
    """Whether :func:`sample_nodes` gives every sample the shared nodes: no breakpoint off 0."""
    return all(b == 0.0 for b in breakpoints)


def sample_nodes(scale: np.ndarray, breakpoints: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``xi`` and weights with ``sum(w * h(xi)) ~= E[h(xi)]`` per sample.

    Returns arrays of shape ``(1, Q)`` (shared) when every breakpoint of
    ``h(scale_i * xi)`` sits at 0, else ``(n, Q)`` with the breakpoints
    ``b / scale_i`` as extra panel edges.
    """
    if shared_nodes(breakpoints):
        return _COMMON_XI[None, :], _COMMON_W[None, :]
    bps = np.array([b for b in breakpoints if b != 0.0], dtype=float)
    scale = np.asarray(scale, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        mapped = bps[None, :] / scale[:, None]
    mapped = np.nan_to_num(mapped, nan=_XI_MAX, posinf=_XI_MAX, neginf=-_XI_MAX)
    mapped = np.clip(mapped, -_XI_MAX, _XI_MAX)
    edges = np.sort(
        np.concatenate([np.broadcast_to(_BASE_EDGES, (len(scale), len(_BASE_EDGES))), mapped], axis=1), axis=1
    )
    return _gl_on_edges(edges)


def hermite_table(xi: np.ndarray, degree: int) -> np.ndarray:
    """Normalised probabilists' Hermite polynomials ``He_k(xi) / sqrt(k!)``, k = 0..degree, last axis."""
    H = np.empty(xi.shape + (degree + 1,))
    H[..., 0] = 1.0
    if degree >= 1:
        H[..., 1] = xi
    for k in range(1, degree):
        H[..., k + 1] = (xi * H[..., k] - math.sqrt(k) * H[..., k - 1]) / math.sqrt(k + 1)
    return H


@functools.lru_cache(maxsize=8)
def common_weighted_hermite(degree: int) -> np.ndarray:
    """``hermite_table(xi, degree) * w[:, None]`` at the shared nodes of :func:`sample_nodes` (read-only, kept).

    The Hermite coefficients of every sample whose activation has no
    breakpoint off 0 are one product with it.
    """
    table = hermite_table(_COMMON_XI, degree) * _COMMON_W[:, None]
    table.flags.writeable = False
    return table


def polar_expectation(f, g, su, sv, rho, breakpoints, n_ang=32, chunk=8):
    """``E[f(u) g(v)]`` for ``u = su xi1``, ``v = sv (rho xi1 + sqrt(1 - rho^2) xi2)``, entrywise.

    Polar coordinates ``xi = r (cos psi, sin psi)`` turn ``v`` into
    ``sv r cos(psi - theta)`` (``theta = arccos rho``).  The angular range is
    split where ``u`` or ``v`` changes sign (kinks at 0), the radial range at
    every other breakpoint, each piece by composite Gauss-Legendre.
    """
    su, sv, rho = (np.atleast_1d(np.asarray(x, dtype=float)) for x in (su, sv, rho))
    out = np.empty(len(rho))
    bps = np.array([b for b in breakpoints if b != 0.0], dtype=float)
    gx, gw = np.polynomial.legendre.leggauss(n_ang)
    r_edges = np.concatenate([[0.0, 0.05, 0.15, 0.3, 0.5, 0.75], np.arange(1.0, _XI_MAX + 0.25, 0.5)])
    for e0 in range(0, len(rho), chunk):
        sl = slice(e0, e0 + chunk)
        th = np.arccos(np.clip(rho[sl], -1.0, 1.0))
        E = len(th)
        cuts = [np.full(E, 0.5 * np.pi), np.full(E, 1.5 * np.pi), th + 0.5 * np.pi, th + 1.5 * np.pi]
        # angles where a kink of f (r = bu / (su cos psi)) crosses one of g
        # (r = bv / (sv cos(psi - theta))): the radial integral is not smooth there
        for bu in bps:
            for bv in bps:
                psi_c = np.arctan2(bv * su[sl] - bu * sv[sl] * np.cos(th), bu * sv[sl] * np.sin(th))
                cuts += [psi_c, psi_c + np.pi]
        pts = np.sort(np.mod(np.stack(cuts, 1), 2 * np.pi), axis=1)
        ends = np.concatenate([pts, pts[:, :1] + 2 * np.pi], axis=1)
        # two sub-panels per arc
        a0, a1 = ends[:, :-1], ends[:, 1:]
        am = 0.5 * (a0 + a1)
        arcs_lo = np.concatenate([a0, am], axis=1)
        arcs_hi = np.concatenate([am, a1], axis=1)
        half = 0.5 * (arcs_hi - arcs_lo)
        psi = (0.5 * (arcs_lo + arcs_hi))[..., None] + half[..., None] * gx  # (E, 8, n_ang)
        wpsi = half[..., None] * gw
        psi, wpsi = psi.reshape(E, -1), wpsi.reshape(E, -1)
        cu = su[sl, None] * np.cos(psi)  # u = r * cu
        cv = sv[sl, None] * np.cos(psi - th[:, None])
        # radial edges: base plus breakpoint crossings
        extra = []
        with np.errstate(divide="ignore", invalid="ignore"):
            for b in bps:
                for cc in (cu, cv):
                    rb = b / cc
                    extra.append(np.where((rb > 0) & (rb < _XI_MAX), rb, _XI_MAX))
        if extra:
            edges = np.sort(
                np.concatenate([np.broadcast_to(r_edges, cu.shape + (len(r_edges),)), np.stack(extra, -1)], -1), -1
            )
        else:
            edges = np.broadcast_to(r_edges, cu.shape + (len(r_edges),))
        lo, hi = edges[..., :-1], edges[..., 1:]
        hh = 0.5 * (hi - lo)
        r = (0.5 * (lo + hi))[..., None] + hh[..., None] * _GL_X  # (E, A, P, 20)
        wr = hh[..., None] * _GL_W * r * np.exp(-0.5 * r * r)
        vals = f(r * cu[..., None, None]) * g(r * cv[..., None, None])
        out[sl] = np.einsum("ea,eapq,eapq->e", wpsi, wr, vals) / (2.0 * np.pi)
    return out


# ---------------------------------------------------------------------------
# Chebyshev interpolation


def chebyshev_points(m: int) -> np.ndarray:
    """The ``m`` Chebyshev points of the first kind ``cos((2k + 1) pi / (2m))`` in ``(-1, 1)``."""
    return np.cos((2.0 * np.arange(m) + 1.0) * math.pi / (2.0 * m))


def chebyshev_interpolation_matrix(x: np.ndarray, m: int) -> np.ndarray:
    """Matrix ``L`` of shape ``(len(x), m)`` with ``L @ f(chebyshev_points(m)) = p(x)``.

    ``p`` is the polynomial of degree ``m - 1`` interpolating ``f`` at the
    Chebyshev points (barycentric formula, stable at every ``x`` in
    ``[-1, 1]``; a row at a node is that node's indicator).
    """
    x = np.asarray(x, dtype=float)
    k = np.arange(m)
    nodes = chebyshev_points(m)
    w = (-1.0) ** k * np.sin((2.0 * k + 1.0) * math.pi / (2.0 * m))
    d = x[:, None] - nodes[None, :]
    hit = d == 0.0
    d[hit] = 1.0
    L = w / d
    L /= L.sum(axis=1, keepdims=True)
    rows = hit.any(axis=1)
    if rows.any():
        L[rows] = hit[rows]
    return L


# ---------------------------------------------------------------------------
# vectorised root finding


def safeguarded_newton(
    fun,
    rho,
    *,
    tol: float,
    max_iter: int = 100,
    what: str = "kernel",
    strict: bool = True,
    full: bool = False,
    xp=np,
):
    """Root in [-1, 1] of increasing functions, entrywise.

    ``fun(rho) -> (g, dg, *extra)``.  A Newton step is taken where it stays
    in the current bracket and is at most half the step before last;
    otherwise a bisection step (so the steps at least halve every other
    iteration and the iteration cannot cycle).  It stops once every step is
    at most ``tol`` (floored at a few ulps of 1: ``rho`` lies in [-1, 1]).
    With ``full=True`` also returns the last evaluation ``(g, dg, *extra)``
    and the last step, so callers can correct values computed at the
    previous iterate to first order instead of evaluating again.  The error
    on failure blames ``sigma_a2`` only where the measured slope ``dg`` is
    not positive (the recursion does not contract there).  ``xp`` is the
    array namespace of ``rho`` (``numpy`` or ``torch``).
    """
    rho = xp.clip(rho, -1.0, 1.0)
    lo = xp.full_like(rho, -1.0)
    hi = xp.full_like(rho, 1.0)
    prev, prev2 = xp.full_like(rho, np.inf), xp.full_like(rho, np.inf)
    stop = max(tol, _RHO_RESOLUTION)
    delta = np.inf
    for _ in range(max_iter):
        ev = fun(rho)
        g, dg = ev[0], ev[1]
        neg = g < 0
        lo = xp.where(neg, rho, lo)
        hi = xp.where(neg, hi, rho)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = rho - g / dg
        ok = (new >= lo) & (new <= hi) & (abs(new - rho) <= 0.5 * prev2)
        if not ok.all():
            new = xp.where(ok, new, 0.5 * (lo + hi))
        step = new - rho
        delta = _abs_max(step)
        prev2, prev = prev, abs(step)
        rho = new
        if delta <= stop:
            return (rho, ev, step) if full else rho
    if strict:
        raise ValueError(_correlation_failure(what, delta, _host(rho), _host(ev[1])))
    return (rho, ev, step) if full else rho


def _abs_max(x) -> float:
    """``max |x|`` as a float (0 when empty), of a numpy array or a tensor."""
    return float(abs(x).max()) if math.prod(x.shape) else 0.0


def _host(x) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else x.cpu().numpy()


#: Absolute resolution of a correlation in [-1, 1]: a few ulps of 1.
_RHO_RESOLUTION = 4.0 * np.finfo(float).eps


def _correlation_failure(what: str, delta: float, rho, dg) -> str:
    """Message of a correlation solve that ran out of steps: ``sigma_a2`` is named only if a slope is not positive."""
    dg = np.asarray(dg, dtype=float)
    if dg.size and not np.all(dg > 0):
        k = int(np.argmin(dg))
        return (
            f"The {what} fixed point did not converge: the DEQ kernel recursion is not contracting at this "
            f"sigma_a2 (its slope in the correlation is {float(dg.flat[k]):.3g} <= 0 at rho = "
            f"{float(np.asarray(rho).flat[k]):.6g}). Try a smaller sigma_a2."
        )
    return (
        f"The {what} fixed point was not solved to the tolerance (last correlation step {delta:.2e}) although "
        "the recursion is contracting there (every slope is positive): a failure of the numerical solver, "
        "not of sigma_a2."
    )


def newton(
    fun, rho, *, tol: float, max_iter: int = 30, strict: bool = True, full: bool = False, xp=np, step_at=None,
    clipped: bool = False,
):  # fmt: skip
    """Entrywise Newton iteration clipped to [-1, 1]; falls back to the
    bracketed :func:`safeguarded_newton` (from the same start) when it does
    not converge in ``max_iter`` steps.  Same returns and ``xp`` as that function.

    ``step_at(rho) -> (new, ev, step, max |step|)``, when given, takes a whole
    step at once (a compiled loop): the same values as ``fun`` and the
    operations below.  ``clipped`` says that ``rho`` already lies in
    [-1, 1] (NaN aside): it is then the start as it is, not a clipped copy
    (neither is written to).

    Newton converges quadratically: after a step ``delta`` the error is about
    ``C delta^2`` with ``C = |g'' / (2 g')|`` (below 0.2 for the kernel
    equations, whose curvature carries a factor sigma_a2).  The iteration
    therefore stops once ``max |delta| <= 0.1 sqrt(tol)`` (or ``tol``,
    whichever is larger), which leaves an error below ``tol / 100``.
    """
    start = rho if clipped else xp.clip(rho, -1.0, 1.0)
    rho = start
    stop = max(tol, 0.1 * math.sqrt(tol), _RHO_RESOLUTION)
    for _ in range(max_iter):
        if step_at is None:
            ev = fun(rho)
            new = ev[0] / ev[1]
            xp.subtract(rho, new, out=new)
            xp.clip(new, -1.0, 1.0, out=new)
            step = new - rho
            delta = _abs_max(step)
        else:
            new, ev, step, delta = step_at(rho)
        if not math.isfinite(delta):
            break
        rho = new
        if delta <= stop:
            return (rho, ev, step) if full else rho
    if not strict and math.isfinite(delta):
        return (rho, ev, step) if full else rho
    return safeguarded_newton(fun, start, tol=tol, strict=strict, full=full, xp=xp)


#: Relative step below which a Newton iterate is within rounding reach of the
#: root: a step this small that does not shrink is rounding, not progress.
_ROUNDING_REACH = 1e-12


def zero_roots(V, sa: float, n_sq: np.ndarray) -> np.ndarray:
    """The samples whose diagonal fixed point ``a = sa V(a) + sb n_sq`` is exactly ``a = 0``.

    Those of zero norm where ``V(0) = 0`` (``phi0(0) = c``, e.g. an odd
    activation) and the recursion contracts at 0 (``sa V'(0+) < 1``, so 0 is
    the attracting root).  An iteration reaches that root only geometrically,
    down through the subnormals, where its relative steps never shrink.

    Parameters
    ----------
    V : callable
        ``V(a)``: the variance ``E[(phi0(sqrt(a) xi) - c)^2]``, elementwise.
    sa : float
        Recurrent weight variance.
    n_sq : ndarray of shape (n,)
        Squared norms of the samples.

    Returns
    -------
    ndarray of bool, shape (n,)
        True where ``a = 0`` exactly.
    """
    n_sq = np.asarray(n_sq, dtype=float)
    root = n_sq == 0
    k = int(root.sum())
    if k:
        eps = 1e-100  # V(eps) / eps is V'(0+) where V(0) = 0
        with np.errstate(divide="ignore", invalid="ignore"):
            root[root] = (V(np.zeros(k)) == 0) & (sa * V(np.full(k, eps)) / eps < 1.0)
    return root


def diagonal_newton(evaluate, sa: float, sb: float, n_sq: np.ndarray, a0: np.ndarray, *, max_iter: int = 200):
    """Solve ``a = sa V(a) + sb n_sq`` for ``a > 0``, entrywise (the diagonal fixed point).

    ``evaluate(a) -> (V, dV)`` gives the variance ``V(a)`` and ``dV/da`` at
    the variances ``a`` (any subset of the entries).  Bracketed Newton on
    ``g(a) = a - sa V(a) - sb n_sq``: ``g(0+) <= 0``, so every iterate with
    ``g < 0`` is a lower bound and every one with ``g >= 0`` an upper bound.
    A Newton step is taken when it stays in the bracket and is at most half
    the step before last (or is already within rounding reach); otherwise a
    bisection step, or a plain fixed-point step while the bracket is not
    bounded away from 0 and infinity.  An entry stops at a relative step ``<= 1e-15``, or once its step
    is below ``1e-12`` relative and no longer shrinks (rounding: a 2-cycle
    between neighbouring floats stops here), or once its bracket is a few
    ulps wide.

    Parameters
    ----------
    evaluate : callable
        ``evaluate(a) -> (V, dV)``, elementwise in ``a``.
    sa, sb : float
        Recurrent and input weight variances.
    n_sq : ndarray of shape (n,)
        Squared norms of the samples.
    a0 : ndarray of shape (n,)
        Positive starting variances.
    max_iter : int, default=200
        Iteration budget per entry.

    Returns
    -------
    ndarray of shape (n,)
        The fixed points ``a``.

    Raises
    ------
    ValueError
        If an entry diverges (``sa V(a) + sb n_sq > a`` at every scale tried:
        the recursion expands, so ``sigma_a2`` is too large), or does not
        converge; the message names ``sigma_a2`` only where the measured
        contraction ``sa dV/da`` at the last iterate is at least 1.
    """
    n_sq = np.asarray(n_sq, dtype=float)
    a = np.maximum(np.array(a0, dtype=float), np.finfo(float).tiny)
    out = np.empty_like(a)
    lo, hi = np.zeros_like(a), np.full_like(a, np.inf)
    prev, prev2 = np.full_like(a, np.inf), np.full_like(a, np.inf)
    with np.errstate(over="ignore"):  # a bound beyond the float range is no bound
        limit = 1e12 * np.maximum(1.0, n_sq)
    root = zero_roots(lambda x: evaluate(x)[0], sa, n_sq)
    out[root] = 0.0
    idx = np.flatnonzero(~root)
    for _ in range(max_iter):
        if idx.size == 0:
            return out
        x = a[idx]
        V, dV = evaluate(x)
        fp = sa * V + sb * n_sq[idx]
        g = x - fp
        up = g < 0
        lo[idx] = np.where(up, x, lo[idx])
        hi[idx] = np.where(up, hi[idx], x)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            newton_ = x - g / (1.0 - sa * dV)
            step = np.abs(newton_ - x)
        reach = step <= _ROUNDING_REACH * newton_
        ok = np.isfinite(newton_) & (newton_ > 0) & (sa * dV < 1)
        ok &= reach | ((newton_ >= lo[idx]) & (newton_ <= hi[idx]) & (step <= 0.5 * prev2[idx]))
        # bisection once bracketed away from 0; a fixed-point step while not (a root at a = 0, e.g. an
        # odd activation at x = 0, is then reached as before: geometrically, down to exactly 0)
        fallback = np.where(np.isfinite(hi[idx]) & (lo[idx] > 0), 0.5 * (lo[idx] + hi[idx]), fp)
        new = np.where(ok, newton_, fallback)
        if not np.all(np.isfinite(new)) or np.any(new > limit[idx]):
            raise ValueError(_diagonal_divergence(x, fp, sa, dV, n_sq[idx], new, limit[idx]))
        step = np.abs(new - x)
        done = (step <= 1e-15 * new) | (ok & reach & (step >= prev[idx]))
        h = hi[idx]
        done |= np.isfinite(h) & (h - lo[idx] <= 8.0 * np.finfo(float).eps * h)
        out[idx[done]] = new[done]
        prev2[idx], prev[idx] = prev[idx], step
        a[idx] = new
        idx = idx[~done]
    x = a[idx]
    _, dV = evaluate(x)
    k = int(np.argmax(sa * dV)) if idx.size else 0
    q, at, n = float(sa * dV[k]), float(x[k]), float(n_sq[idx[k]])
    if not q < 1.0:
        raise ValueError(
            f"The diagonal kernel fixed point did not converge: the recursion is not contracting at "
            f"||x||^2 = {n:.6g} (sigma_a2 * dV/da = {q:.4g} >= 1 at a = {at:.6g}). Try a smaller sigma_a2."
        )
    raise ValueError(
        f"The diagonal kernel fixed point was not solved to floating-point precision in {max_iter} steps at "
        f"||x||^2 = {n:.6g}, sigma_a2 = {sa:.17g} (last iterate a = {at:.17g}, last relative step "
        f"{float(prev[idx[k]]) / at:.3g}); the recursion is contracting there (sigma_a2 * dV/da = {q:.4g} < 1), "
        "so this is a failure of the numerical solver, not of sigma_a2."
    )


def _diagonal_divergence(x, fp, sa, dV, n_sq, new, limit) -> str:
    """Message for a diagonal iteration that left the finite range, with the measured gain."""
    bad = ~np.isfinite(new) | (new > limit)
    k = int(np.flatnonzero(bad)[0])
    gain = float(fp[k] / x[k]) if x[k] > 0 else np.inf
    if not np.isfinite(fp[k]):
        return (
            f"The diagonal kernel fixed point cannot be computed at ||x||^2 = {n_sq[k]:.6g}: the activation's "
            f"variance is not finite at a = {x[k]:.6g}."
        )
    return (
        f"The diagonal kernel fixed point diverges at ||x||^2 = {n_sq[k]:.6g}: at a = {x[k]:.6g} the recursion "
        f"still expands (sigma_a2 V(a) + sigma_b2 ||x||^2 = {gain:.4g} a, sigma_a2 * dV/da = {sa * dV[k]:.4g}), so "
        "the DEQ has no finite pre-activation scale for this input. Try a smaller sigma_a2 or smaller inputs."
    )
