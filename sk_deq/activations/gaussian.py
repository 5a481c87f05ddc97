"""One engine for Gaussian expectations.

Everything the theory needs reduces to integrals against a standard normal
``xi ~ N(0, 1)``:

* 1-D moments ``E_t[f] = E[f(t xi)]``;
* derivative moments through Stein's identities, which need no derivative and
  are exact for kinked functions (the Dirac masses of ``relu''`` are handled
  by the identity itself)::

      E_t[f']  = E[xi f(t xi)] / t
      E_t[f''] = E[(xi**2 - 1) f(t xi)] / t**2

* 2-D expectations ``E[f(u) g(v)]`` for a correlated Gaussian pair.

Quadrature is composite Gauss-Legendre on ``[-L, L]`` in the ``xi`` variable
(the Gaussian mass outside ``|xi| > 11`` is below ``1e-27``).  Panel edges are
placed at the function's breakpoints (kinks, jumps) mapped to ``xi = b / t``,
on a unit grid in ``xi`` and on a half-unit grid in ``x = t xi`` so that
activations with structure near the origin stay resolved when ``t`` is large.
Inside each panel the integrand is smooth, so 12 nodes give close to machine
precision (checked against ``scipy.integrate.quad`` in the tests).

This module imports numpy only.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = [
    "gaussian_nodes",
    "expect",
    "stein_d1",
    "stein_d2",
    "expect_pair",
]

_XI_MAX = 11.0  # half-width of the integration window in standard-normal units
_X_REFINE = 16.0  # refine panels to width 0.5 for |x| <= this, in input units
_ORDER = 12  # Gauss-Legendre nodes per panel
_GL_X, _GL_W = np.polynomial.legendre.leggauss(_ORDER)
_INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)


def _panel_edges(t: float, breakpoints: tuple[float, ...], shift: float = 0.0) -> np.ndarray:
    # Panels in xi for the integrand h(shift + t * xi): a unit grid in xi, a
    # half-unit grid in the argument x = shift + t * xi near the origin, and
    # the breakpoints of h mapped to xi.
    edges = [np.arange(-_XI_MAX, _XI_MAX + 0.5, 1.0)]
    if t > 0:
        x_grid = np.arange(-_X_REFINE, _X_REFINE + 0.25, 0.5)
        edges.append((x_grid - shift) / t)
        if breakpoints:
            edges.append((np.asarray(breakpoints, dtype=float) - shift) / t)
    e = np.concatenate(edges)
    e = e[(e >= -_XI_MAX) & (e <= _XI_MAX)]
    e = np.unique(np.concatenate([e, [-_XI_MAX, _XI_MAX]]))
    # drop panels narrower than 1e-12 (duplicate breakpoints after mapping)
    keep = np.concatenate([[True], np.diff(e) > 1e-12])
    return e[keep]


def _nodes(t: float, breakpoints: tuple[float, ...], shift: float = 0.0):
    edges = _panel_edges(t, breakpoints, shift)
    lo, hi = edges[:-1], edges[1:]
    half = 0.5 * (hi - lo)
    mid = 0.5 * (hi + lo)
    xi = (mid[:, None] + half[:, None] * _GL_X[None, :]).ravel()
    w = (half[:, None] * _GL_W[None, :]).ravel() * _INV_SQRT_2PI * np.exp(-0.5 * xi * xi)
    return xi, w


@lru_cache(maxsize=256)
def gaussian_nodes(t: float, breakpoints: tuple[float, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes ``xi`` and weights ``w`` with ``sum(w * h(xi)) ~= E[h(xi)]``.

    The panels respect the breakpoints of ``f(t xi)``, so integrands that are
    smooth between breakpoints are integrated to about machine precision.

    Parameters
    ----------
    t : float
        Standard deviation of the Gaussian argument (``x = t * xi``).
    breakpoints : tuple of float
        Points in ``x`` where the integrand is not smooth.

    Returns
    -------
    xi, w : ndarray
        Nodes in standard-normal units and weights including the density
        (read-only; cached per ``(t, breakpoints)``).
    """
    xi, w = _nodes(float(t), tuple(breakpoints))
    xi.setflags(write=False)
    w.setflags(write=False)
    return xi, w


def _check_t(t: float, *, strict: bool) -> float:
    t = float(t)
    if not np.isfinite(t) or t < 0 or (strict and t == 0):
        raise ValueError(f"Gaussian scale t must be finite and {'positive' if strict else 'non-negative'}, got {t!r}.")
    return t


def expect(f, t: float, breakpoints: tuple[float, ...] = ()) -> float:
    """``E[f(t xi)]`` for ``xi ~ N(0, 1)``.

    Parameters
    ----------
    f : callable
        Vectorised function of a numpy array.
    t : float
        Standard deviation (``t >= 0``; ``t == 0`` returns ``f(0)``).
    breakpoints : tuple of float
        Points in ``x`` where ``f`` is not smooth.
    """
    t = _check_t(t, strict=False)
    if t == 0.0:
        return float(np.asarray(f(np.zeros(1)))[0])
    xi, w = gaussian_nodes(t, tuple(breakpoints))
    return float(np.dot(w, f(t * xi)))


def stein_d1(f, t: float, breakpoints: tuple[float, ...] = ()) -> float:
    """``E[f'(t xi)]`` through Stein's identity ``E[xi f(t xi)] / t``."""
    t = _check_t(t, strict=True)
    xi, w = gaussian_nodes(t, tuple(breakpoints))
    return float(np.dot(w * xi, f(t * xi)) / t)


def stein_d2(f, t: float, breakpoints: tuple[float, ...] = ()) -> float:
    """``E[f''(t xi)]`` through Stein's identity ``E[(xi^2 - 1) f(t xi)] / t^2``."""
    t = _check_t(t, strict=True)
    xi, w = gaussian_nodes(t, tuple(breakpoints))
    return float(np.dot(w * (xi * xi - 1.0), f(t * xi)) / (t * t))


def expect_pair(
    f,
    g,
    var_u: float,
    var_v: float,
    cov: float,
    breakpoints_f: tuple[float, ...] = (),
    breakpoints_g: tuple[float, ...] = (),
) -> float:
    """``E[f(u) g(v)]`` for ``(u, v) ~ N(0, [[var_u, cov], [cov, var_v]])``.

    Nested breakpoint-aware quadrature: ``u = a xi1`` and
    ``v = (cov / a) xi1 + s xi2`` with ``a = sqrt(var_u)`` and
    ``s = sqrt(var_v - cov^2 / var_u)``; the inner integral over ``xi2`` is
    taken for every outer node, with ``g``'s breakpoints mapped accordingly.
    Accurate to about 1e-12 for kinked ``f`` and ``g``; it is a scalar
    reference, not a kernel-matrix routine.
    """
    var_u, var_v, cov = float(var_u), float(var_v), float(cov)
    if not (np.isfinite(var_u) and np.isfinite(var_v) and np.isfinite(cov)):
        raise ValueError("Covariance entries must be finite.")
    if var_u < 0 or var_v < 0:
        raise ValueError(f"Variances must be non-negative, got {var_u!r}, {var_v!r}.")
    if cov * cov > var_u * var_v * (1 + 1e-12) + 1e-300:
        raise ValueError("Covariance matrix is not positive semi-definite.")
    if var_u == 0.0:
        return float(np.asarray(f(np.zeros(1)))[0]) * expect(g, np.sqrt(var_v), breakpoints_g)
    a = np.sqrt(var_u)
    slope = cov / a  # v = slope * xi1 + s * xi2
    s2 = max(var_v - slope * slope, 0.0)
    # A correlation within a few ulps of +-1 is +-1: the inputs cannot say
    # more, and near |rho| = 1 expectations of kinked functions move like
    # sqrt(1 - |rho|), so rounding noise of 1e-16 would show up as 1e-8 / 2 pi.
    if s2 <= 8 * np.finfo(float).eps * var_v:
        s2 = 0.0
    s = np.sqrt(s2)
    # Outer breakpoints: those of f, and where the inner mean crosses a kink of g.
    # There the inner integral is a kink smoothed over a width s / |slope| (in
    # xi1), which becomes sharp as |rho| -> 1: panel edges at geometric
    # multiples of that width resolve it.
    outer_bp = list(breakpoints_f)
    if slope != 0.0:
        width = a * s / abs(slope)  # in units of u = a * xi1
        for b in breakpoints_g:
            u_kink = b * a / slope
            outer_bp.append(u_kink)
            if width > 0:
                outer_bp += [u_kink + sign * k * width for k in (0.5, 1.0, 2.0, 4.0, 8.0) for sign in (-1.0, 1.0)]
    xi1, w1 = gaussian_nodes(a, tuple(outer_bp))
    fu = f(a * xi1)
    if s == 0.0:
        inner = g(slope * xi1)
    else:
        inner = np.empty_like(xi1)
        bp_g = tuple(breakpoints_g)
        for k, x1 in enumerate(xi1):
            shift = slope * x1
            xi2, w2 = _nodes(s, bp_g, shift)
            inner[k] = np.dot(w2, g(shift + s * xi2))
    return float(np.dot(w1, fu * inner))
