"""Dual activations: closed forms of an activation's Gaussian expectations.

For ``(u, v) ~ N(0, [[a_i, G], [G, a_j]])`` the *dual* of an activation
``phi0`` is ``F(G) = E[phi0(u) phi0(v)]``; its derivative in ``G`` is
``D(G) = E[phi0'(u) phi0'(v)]`` (Price's theorem), and ``m(a) = E[phi0(u)]``
for ``u ~ N(0, a)`` gives the centring.  These three are all the
infinite-width kernels need of a layer: a layer centred at ``c`` maps the
covariance ``G`` to ``F(G) - c (m(a_i) + m(a_j)) + c^2`` and carries the NTK
through ``D(G)`` (see :ref:`theory-exact`, :ref:`theory-ntk` and
:ref:`theory-explicit`).

An :class:`~sk_deq.activations.Activation` carries its formula as
``activation.dual``: a :class:`DualFormula` where it has closed forms, else
``None`` (the exact kernels then use a Hermite expansion and quadrature).
This module is a leaf: it imports only numpy and scipy.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

__all__ = ["DualFormula", "ErfDual", "GeluDual", "HardTanhDual", "LeakyReLUDual", "QuadraticDual"]

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


class DualFormula:
    """Closed forms of ``E[phi0(u) phi0(v)]``, ``E[phi0'(u) phi0'(v)]`` and ``E[phi0(u)]``.

    Give one to an :class:`~sk_deq.activations.Activation` (its ``dual``
    parameter) and both the exact implicit kernels
    (:class:`sk_deq.kernels.ImplicitKernelEngine`) and the exact kernels of
    explicit networks (:func:`sk_deq.kernels.explicit_kernel`) use it.  A
    subclass implements :meth:`pair` and :meth:`mean`, and may move the
    quantities that do not depend on ``G`` into :meth:`pre` (the implicit
    engine evaluates :meth:`pair` at every Newton step of an entry).  All
    methods work entrywise on arrays of any (broadcast) shape.

    Attributes
    ----------
    name : str
        How the kernels report the formula (``ImplicitKernelEngine.method``).
    implicit : bool
        Whether the exact implicit engine uses the formula.  ``False`` for a
        formula less accurate than the engine's ``1e-12`` (hard-tanh's
        quadrature); the engine then takes its Hermite route.
    slopes : tuple of float or None
        ``(alpha, beta)`` of a piecewise-linear activation (slope ``alpha``
        for ``x >= 0``, ``beta`` below).  Its correlation equation is then
        the same for every entry, and the implicit engine inverts it once
        with a table instead of solving each entry.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import special
    >>> from sk_deq.activations import Activation, DualFormula
    >>> class ScaledErfDual(DualFormula):
    ...     name = "2 erf (closed form)"
    ...
    ...     def pair(self, G, pre):
    ...         q = np.sqrt((1 + 2 * pre["ai"]) * (1 + 2 * pre["aj"]))
    ...         F = 4 * 2 / np.pi * np.arcsin(2 * G / q)
    ...         D = 4 * 4 / (np.pi * np.sqrt(q * q - 4 * G * G))
    ...         return F, D
    ...
    ...     def mean(self, a):
    ...         return np.zeros_like(a)
    >>> act = Activation(lambda x: 2 * special.erf(x), "2erf", dual=ScaledErfDual(), odd=True)
    >>> F, D = act.dual.expectations(0.5, 1.0, 1.0)
    >>> round(float(F), 6)
    0.865388
    >>> from sk_deq.kernels import ImplicitKernelEngine
    >>> ImplicitKernelEngine(act, 0.2, 1.0).method
    '2 erf (closed form)'
    """

    name = "closed form"
    implicit = True
    slopes: tuple[float, float] | None = None

    def pre(self, ai, aj) -> dict:
        """Entrywise quantities that do not depend on ``G`` (by default the variances ``ai``, ``aj``).

        Override it to precompute what :meth:`pair` needs at every ``G`` of
        an entry (square roots, products of the variances).

        Parameters
        ----------
        ai, aj : ndarray
            Variances of ``u`` and ``v`` (broadcastable arrays).

        Returns
        -------
        dict
            Named arrays that :meth:`pair` receives as ``pre``; by default
            ``{'ai': ai, 'aj': aj}``.
        """
        return {"ai": ai, "aj": aj}

    def pair(self, G, pre) -> tuple:
        """``(E[phi0(u) phi0(v)], E[phi0'(u) phi0'(v)])`` at covariance ``G``.

        The method every subclass implements.

        Parameters
        ----------
        G : ndarray
            Covariances of ``(u, v)``, entrywise (``|G| <= sqrt(ai aj)``).
        pre : dict
            ``self.pre(ai, aj)`` for the variances of the same entries.

        Returns
        -------
        F : ndarray
            ``E[phi0(u) phi0(v)]``, of the broadcast shape of ``G`` and
            ``pre``.
        D : ndarray
            ``E[phi0'(u) phi0'(v)]``, the derivative of ``F`` in ``G``
            (Price's theorem), of the same shape.
        """
        raise NotImplementedError

    def mean(self, a):
        """``E[phi0(u)]`` for ``u ~ N(0, a)``.

        The method every subclass implements (zeros for an odd activation).

        Parameters
        ----------
        a : ndarray
            Variances of ``u``, entrywise.

        Returns
        -------
        ndarray
            ``E[phi0(u)]``, of the shape of ``a``.
        """
        raise NotImplementedError

    def expectations(self, G, ai, aj) -> tuple:
        """:meth:`pair` at covariance ``G`` and variances ``ai``, ``aj`` (arrays or scalars).

        The convenient entry point: the arguments are broadcast together and
        :meth:`pre` is applied for you.

        Parameters
        ----------
        G : float or array-like
            Covariances of ``(u, v)``.
        ai, aj : float or array-like
            Variances of ``u`` and ``v``.

        Returns
        -------
        F : ndarray
            ``E[phi0(u) phi0(v)]``, of the broadcast shape of the arguments
            (0-d for scalars).
        D : ndarray
            ``E[phi0'(u) phi0'(v)]``, of the same shape.
        """
        shape = np.broadcast_shapes(np.shape(G), np.shape(ai), np.shape(aj))
        G, ai, aj = (np.array(np.broadcast_to(np.asarray(x, dtype=float), shape), ndmin=1) for x in (G, ai, aj))
        F, D = self.pair(G, self.pre(ai, aj))
        return np.reshape(F, shape), np.reshape(D, shape)

    def centred_pair(self, G, ai, aj, c) -> tuple:
        """``(E[(phi0(u) - c)(phi0(v) - c)], E[phi0'(u) phi0'(v)])``: one layer centred at ``c``.

        Parameters
        ----------
        G : ndarray
            Covariances of ``(u, v)``, entrywise.
        ai, aj : ndarray
            Variances of ``u`` and ``v`` (broadcastable with ``G``).
        c : float
            Centring constant of the layer, ``E_t[phi0]`` at its input scale.

        Returns
        -------
        F : ndarray
            ``E[phi0(u) phi0(v)] - c (m(ai) + m(aj)) + c^2``, the covariance
            of the centred outputs.
        D : ndarray
            ``E[phi0'(u) phi0'(v)]`` (centring does not change it).
        """
        F, D = self.pair(G, self.pre(ai, aj))
        return F - c * (self.mean(ai) + self.mean(aj)) + c * c, D

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.name}>"


class LeakyReLUDual(DualFormula):
    """Leaky ReLU ``x -> alpha x`` for ``x >= 0``, ``beta x`` below (ReLU: ``(1, 0)``): the arc-cosine kernel.

    With ``s = sqrt(a_i a_j)``, ``rho = G / s`` and ``t = arccos(rho)``::

        E[phi0(u) phi0(v)] = s (alpha beta rho + (alpha - beta)^2 kappa(rho)),
        kappa(rho) = (sin t + (pi - t) rho) / (2 pi),
        E[phi0'(u) phi0'(v)] = alpha beta + (alpha - beta)^2 (pi - t) / (2 pi),
        E[phi0(u)] = (alpha - beta) sqrt(a) / sqrt(2 pi).
    """

    name = "leaky-relu (closed form)"

    def __init__(self, alpha: float = 1.0, beta: float = 0.0):
        self.slopes = (float(alpha), float(beta))
        self.mu = (self.slopes[0] - self.slopes[1]) * _INV_SQRT_2PI

    def pair(self, G, pre):
        al, be = self.slopes
        ai, aj = pre["ai"], pre["aj"]
        s = np.sqrt(ai * aj)
        with np.errstate(divide="ignore", invalid="ignore"):
            rho = np.clip(np.where(s > 0, G / s, 0.0), -1.0, 1.0)
        # identical inputs: rho = 1 up to rounding, where the derivative
        # dual has a square-root singularity
        rho = np.where(rho > 1.0 - 1e-13, 1.0, rho)
        t = np.arccos(rho)
        kap = (np.sqrt(np.maximum(1.0 - rho * rho, 0.0)) + (math.pi - t) * rho) / (2.0 * math.pi)
        F = s * (al * be * rho + (al - be) ** 2 * kap)
        D = al * be + (al - be) ** 2 * (math.pi - t) / (2.0 * math.pi)
        return F, D

    def mean(self, a):
        return self.mu * np.sqrt(a)

    def centred_pair(self, G, ai, aj, c):
        F, D = self.pair(G, self.pre(ai, aj))
        return F - c * self.mu * (np.sqrt(ai) + np.sqrt(aj)) + c * c, D


class ErfDual(DualFormula):
    """``erf``: the arcsine kernel ``(2/pi) arcsin(2G / sqrt((1 + 2a)(1 + 2b)))``."""

    name = "erf (closed form)"

    def pre(self, ai, aj):
        q = np.sqrt((1.0 + 2.0 * ai) * (1.0 + 2.0 * aj))
        return {"inv_q2": 2.0 / q, "q2sq": (q * q) / 4.0}

    def pair(self, G, pre):
        z = G * pre["inv_q2"]
        np.clip(z, -1.0, 1.0, out=z)
        F = np.arcsin(z)
        F *= 2.0 / math.pi
        R = np.subtract(pre["q2sq"], G * G)
        np.maximum(R, 1e-300, out=R)
        np.sqrt(R, out=R)
        D = np.divide(2.0 / math.pi, R)
        return F, D

    def mean(self, a):
        return np.zeros_like(a)


class GeluDual(DualFormula):
    """GELU ``x Phi(x)``: closed form from Stein's lemma.

    With ``Q = (1 + a)(1 + b)`` and ``R = Q - G^2``::

        E[gelu(u) gelu(v)] = G (1/4 + arcsin(G / sqrt(Q)) / (2 pi))
                             + (a b Q + G^2 (1 - a b)) / (2 pi Q sqrt(R))

    and its derivative in ``G`` is ``E[gelu'(u) gelu'(v)]`` (Price's theorem).
    """

    name = "gelu (closed form)"

    def pre(self, ai, aj):
        Q = (1.0 + ai) * (1.0 + aj)
        ab = ai * aj
        return {
            "Q": Q,
            "inv_sqQ": 1.0 / np.sqrt(Q),
            "abQ": ab * Q,
            "one_m_ab": 1.0 - ab,
            "inv_2piQ": 1.0 / (2.0 * math.pi * Q),
        }

    def pair(self, G, pre):
        G2 = G * G
        R = np.subtract(pre["Q"], G2)
        np.maximum(R, 1e-300, out=R)
        sqR = np.sqrt(R)
        z = G * pre["inv_sqQ"]
        np.clip(z, -1.0, 1.0, out=z)
        base = np.arcsin(z)
        base *= 1.0 / (2.0 * math.pi)
        base += 0.25  # 1/4 + arcsin / (2 pi)
        t = G2 * pre["one_m_ab"]  # G^2 (1 - ab)
        N = t + pre["abQ"]
        N *= pre["inv_2piQ"]  # N / (2 pi Q)
        F = G * base
        F += N / sqR
        # D = base + G / (2 pi sqR) + G (2 (1 - ab) R + N) / (2 pi Q R sqR)
        D = (2.0 * pre["one_m_ab"] * pre["inv_2piQ"]) * R
        D += N
        D *= G
        D /= R
        D += G * (1.0 / (2.0 * math.pi))
        D /= sqR
        D += base
        return F, D

    def mean(self, a):
        return a / np.sqrt(2.0 * math.pi * (1.0 + a))


class QuadraticDual(DualFormula):
    """``c2 x^2 + c1 x``: ``E = c2^2 (a b + 2 G^2) + c1^2 G``."""

    name = "quadratic (closed form)"

    def __init__(self, c2: float = 0.0, c1: float = 1.0):
        self.c2, self.c1 = float(c2), float(c1)

    def pre(self, ai, aj):
        return {"ab": ai * aj}

    def pair(self, G, pre):
        c2, c1 = self.c2, self.c1
        return c2 * c2 * (pre["ab"] + 2.0 * G * G) + c1 * c1 * G, 4.0 * c2 * c2 * G + c1 * c1

    def mean(self, a):
        return self.c2 * a


class HardTanhDual(DualFormula):
    """Hard-tanh ``x -> gain * clip(x, -c, c)``: one-dimensional quadrature of closed-form conditionals.

    Accurate to about ``1e-10`` (see :func:`_hard_tanh_pair`), enough for the
    kernels of explicit layers; the implicit engine, which solves every
    entry to ``1e-12``, uses its Hermite route instead (``implicit = False``).
    """

    name = "hard-tanh (quadrature)"
    implicit = False

    def __init__(self, gain: float = 1.0, c: float = 1.0):
        self.gain, self.c = float(gain), float(c)

    def pair(self, G, pre):
        return _hard_tanh_pair(self.gain, self.c, G, pre["ai"], pre["aj"])

    def mean(self, a):
        return np.zeros_like(np.asarray(a, float))  # odd


# ---------------------------------------------------------------------------
# hard-tanh: Gauss-Legendre over u of closed-form conditionals in v

_HT_NODES, _HT_WEIGHTS = np.polynomial.legendre.leggauss(8)


def _hard_tanh_pair(gain: float, c: float, G, ai, aj):
    """``E[s(u) s(v)]`` and ``E[s'(u) s'(v)]`` for ``s = gain * clip(., -c, c)``, entrywise.

    Conditionally on ``u``, ``v`` is Gaussian and ``E[clip(v) | u]``,
    ``P(|v| < c | u)`` have closed forms; the remaining integral over ``u`` is
    composite Gauss-Legendre with panel edges at the kinks ``u = +-c`` (8 nodes
    per panel half the smallest standard deviation wide).  Accurate to
    about 1e-10 for correlations up to 0.99 and exact on the diagonal; the
    inner conditional kink sharpens as the correlation tends to 1, where the
    error grows (about 1e-6 at 0.9999).
    """
    G, ai, aj = np.broadcast_arrays(np.asarray(G, float), np.asarray(ai, float), np.asarray(aj, float))
    shape = G.shape
    G, ai, aj = G.ravel(), ai.ravel(), aj.ravel()
    F = np.empty_like(G)
    D = np.empty_like(G)
    g2 = gain * gain
    # u == 0 (a zero-norm sample): s(u) = 0 and s'(u) = gain, so F = 0, D = gain^2 P(|v| < c).
    zero = ai <= 0
    if zero.any():
        F[zero] = 0.0
        with np.errstate(divide="ignore"):
            D[zero] = g2 * np.where(aj[zero] > 0, special.erf(c / np.sqrt(2.0 * np.maximum(aj[zero], 0.0))), 1.0)
    # |rho| = 1 (collinear samples): v = beta u exactly, and the kinks of clip(beta u) would fall
    # inside the panels; closed form instead.
    with np.errstate(divide="ignore", invalid="ignore"):
        collinear = ~zero & (aj > 0) & (G * G >= ai * aj * (1.0 - 1e-12))
    if collinear.any():
        F[collinear], D[collinear] = _hard_tanh_collinear(g2, c, ai[collinear], G[collinear] / ai[collinear])
    # The panels are as wide as half the smallest standard deviation of a chunk: chunks of entries
    # sorted by it, whose standard deviations differ by at most a factor 2, keep their number bounded.
    order = np.flatnonzero(~zero & ~collinear)
    order = order[np.argsort(ai[order], kind="stable")]
    s0 = 0
    while s0 < order.size:
        s1 = min(s0 + 2048, order.size)
        s1 = s0 + int(np.searchsorted(ai[order[s0:s1]], 4.0 * ai[order[s0]], side="right"))
        idx = order[s0:s1]
        s0 = s1
        g, a, b = G[idx], ai[idx], aj[idx]
        smax, smin = math.sqrt(float(a.max())), math.sqrt(float(a.min()))
        L = 9.0 * smax
        h = 0.5 * smin
        edges = np.arange(-L, L + h, h)
        edges = np.unique(np.concatenate([np.clip(edges, -L, L), [-c, c] if c < L else []]))
        lo, hi = edges[:-1], edges[1:]
        half = 0.5 * (hi - lo)
        u = (0.5 * (hi + lo)[:, None] + half[:, None] * _HT_NODES[None, :]).ravel()
        wu = (half[:, None] * _HT_WEIGHTS[None, :]).ravel()
        dens = np.exp(-0.5 * u[None, :] ** 2 / a[:, None]) / np.sqrt(2.0 * math.pi * a[:, None])
        beta = (g / a)[:, None]
        sd = np.sqrt(np.maximum(b - g * g / a, 0.0))[:, None]
        mu = beta * u[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            lo_z = np.where(sd > 0, (-c - mu) / sd, np.where(mu > -c, -np.inf, np.inf))
            hi_z = np.where(sd > 0, (c - mu) / sd, np.where(mu < c, np.inf, -np.inf))
        P_lo, P_hi = special.ndtr(lo_z), special.ndtr(hi_z)
        pdf = lambda z: np.exp(-0.5 * np.where(np.isfinite(z), z, 0.0) ** 2) * np.isfinite(z) * _INV_SQRT_2PI
        mean_clip = -c * P_lo + c * (1.0 - P_hi) + mu * (P_hi - P_lo) + sd * (pdf(lo_z) - pdf(hi_z))
        wd = wu[None, :] * dens
        F[idx] = g2 * np.sum(wd * np.clip(u, -c, c)[None, :] * mean_clip, axis=1)
        D[idx] = g2 * np.sum(wd * (np.abs(u) < c)[None, :] * (P_hi - P_lo), axis=1)
    return F.reshape(shape), D.reshape(shape)


def _hard_tanh_collinear(g2: float, c: float, a, beta):
    """``g2 E[clip(u) clip(beta u)]`` and ``g2 P(|u| < c, |beta u| < c)`` for ``u ~ N(0, a)`` (clip at ``c``).

    Piecewise in ``|u|``: both linear below ``k = min(c, c/|beta|)``, one
    saturated up to ``K = max(c, c/|beta|)``, both saturated beyond; each
    piece a truncated Gaussian moment.
    """
    s = np.sqrt(a)
    b = np.abs(beta)
    sign = np.sign(beta)
    with np.errstate(divide="ignore"):
        k = np.minimum(c, c / b)
        K = np.maximum(c, c / b)
    zk, zK = k / s, K / s
    pk, pK = np.exp(-0.5 * zk * zk) * _INV_SQRT_2PI, np.exp(-0.5 * zK * zK) * _INV_SQRT_2PI
    inner = a * (special.ndtr(zk) - 0.5 - zk * pk)  # int_0^k u^2 phi_a(u) du
    middle = s * (pk - pK)  # int_k^K u phi_a(u) du
    outer = special.ndtr(-zK)  # int_K^inf phi_a(u) du
    slope = np.minimum(b, 1.0)  # the unsaturated factor's slope in the middle piece
    F = 2.0 * g2 * (beta * inner + sign * c * slope * middle + sign * c * c * outer)
    D = g2 * special.erf(k / (np.sqrt(2.0) * s))
    return F, D
