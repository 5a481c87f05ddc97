"""The O(n^2) part of the exact implicit engine in torch (float64, CPU or CUDA).

:class:`~sk_deq.kernels.ImplicitKernelEngine` given a ``device`` keeps its
per-sample preparation in numpy (O(n): the diagonal fixed points, and the
Hermite coefficients of every sample) and hands the kernel blocks to
:class:`TorchKernelSolver`, which moves the prepared arrays to the device
once and solves every block there in float64:

* leaky ReLU (ReLU included): the universal correlation equation
  ``h(rho) = r`` of the numpy engine, ``r`` from one matrix product of
  scaled inputs plus a rank-3 term, inverted by the same piecewise-cubic
  table in ``v = sqrt(h(1) - r)`` with Newton steps near ``rho = -1``;
* every other activation, those with closed forms (erf, GELU) included:
  the Hermite (Mehler) route, ``F_c(G) = sum_k h_k(i) h_k(j) rho^k``, solved
  by Newton on the truncated series.  As in the numpy engine, the degree
  follows the exact truncation bounds from the Parseval tails: the whole
  block at the degree of a split correlation, the entries above it gathered,
  sorted and solved in groups at their own degrees, and the few entries no
  degree up to ``MEHLER_MAX_DEGREE`` resolves by two-dimensional quadrature
  (in numpy, on the host).  Duplicate samples and zero-norm rows get the
  exact values the numpy engine gives them.

Every entry is solved to the engine's ``tol`` either way, so the kernels
agree with the numpy engine's to about ``1e-12`` of the kernel's scale.
This module imports torch; :mod:`sk_deq.kernels.engine` imports it only
when a device is asked for.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .duals import MEHLER_MAX_DEGREE, Samples, _MehlerDual, _ReluDual
from .numerics import _RHO_RESOLUTION, _correlation_failure, polar_expectation, safeguarded_newton

__all__ = ["TorchKernelSolver"]

_DTYPE = torch.float64
_MARGIN = 0.05  # correlation margin of the degree choice (as the numpy engine)
_PRE_TOL = 1e-8  # truncation tolerance of the low-degree pre-solve
_SPLITS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_HERMITE_FIELDS = ("H", "tail", "dtail", "d2")


# ---------------------------------------------------------------------------
# root finding on tensors (the iterations of sk_deq.kernels.numerics)


def _safeguarded_newton(fun, rho, *, tol, max_iter=100):
    """Bracketed Newton in [-1, 1] for increasing functions (the rule of :func:`numerics.safeguarded_newton`).

    Bisection where a Newton step leaves the bracket or is more than half the step before last.
    """
    rho = rho.clamp(-1.0, 1.0)
    lo = torch.full_like(rho, -1.0)
    hi = torch.full_like(rho, 1.0)
    prev = prev2 = torch.full_like(rho, math.inf)
    stop = max(tol, _RHO_RESOLUTION)
    delta = math.inf
    for _ in range(max_iter):
        ev = fun(rho)
        g, dg = ev[0], ev[1]
        neg = g < 0
        lo = torch.where(neg, rho, lo)
        hi = torch.where(neg, hi, rho)
        new = rho - g / dg
        ok = (new >= lo) & (new <= hi) & ((new - rho).abs() <= 0.5 * prev2)
        new = torch.where(ok, new, 0.5 * (lo + hi))
        step = new - rho
        delta = float(step.abs().max()) if step.numel() else 0.0
        prev2, prev = prev, step.abs()
        rho = new
        if delta <= stop:
            return rho, ev, step
    raise ValueError(_correlation_failure("kernel", delta, rho.cpu().numpy(), ev[1].cpu().numpy()))


def _newton(fun, rho, *, tol, max_iter=30, strict=True):
    """Newton clipped to [-1, 1], stopping at a step below ``max(tol, 0.1 sqrt(tol))``.

    Returns the iterate, the last evaluation ``(g, dg, *extra)`` (at the
    previous iterate) and the last step.  Falls back to the bracketed
    iteration when it does not converge (unless not ``strict``).
    """
    start = rho.clamp(-1.0, 1.0)
    rho = start
    stop = max(tol, 0.1 * math.sqrt(tol), _RHO_RESOLUTION)
    ev, step, delta = None, None, math.inf
    for _ in range(max_iter):
        ev = fun(rho)
        new = (rho - ev[0] / ev[1]).clamp_(-1.0, 1.0)
        step = new - rho
        delta = float(step.abs().max()) if step.numel() else 0.0
        if not math.isfinite(delta):
            break
        rho = new
        if delta <= stop:
            return rho, ev, step
    if not strict and math.isfinite(delta):
        return rho, ev, step
    return _safeguarded_newton(fun, start, tol=tol)


# ---------------------------------------------------------------------------
# leaky ReLU: the universal correlation equation and its inverse


class _LeakyReluBlocks:
    """Blocks of a leaky ReLU ``max(alpha x, beta x)`` by inverting ``h(rho) = r``.

    ``h(rho) = lin rho - curv kappa(rho)`` with ``kappa(rho) = (sqrt(1 -
    rho^2) + (pi - arccos rho) rho) / (2 pi)``; its inverse is a
    piecewise-cubic Hermite table in ``v = sqrt(h(1) - r)`` (the numpy
    solver's, moved to the device once), refined by Newton steps where
    ``rho < -0.75``.
    """

    fields = ("sx", "aux_left", "aux_right", "s")

    def __init__(self, activation, formula, sa, sb, c, tol, device):
        # the numpy solver's inversion table, moved to the device
        table = _ReluDual(activation, sa, sb, c, tol, formula)
        self.alpha, self.beta, self.sa, self.c = table.alpha, table.beta, sa, c
        self.lin, self.curv, self.mu = table.lin, table.curv, table.mu
        self.h_hi, self.inv_dv, self.n_nodes = table.h_hi, table._inv_dv, table._N
        self.coef = torch.as_tensor(table._coef, dtype=_DTYPE, device=device)

    def _h(self, rho):
        rho = rho.clamp(-1.0, 1.0)
        t = torch.arccos(rho)
        kap = (torch.sqrt((1.0 - rho * rho).clamp_(min=0.0)) + (math.pi - t) * rho) / (2.0 * math.pi)
        return self.lin * rho - self.curv * kap, self.lin - self.curv * (math.pi - t) / (2.0 * math.pi)

    def _invert(self, r):
        v = (self.h_hi - r).clamp_(min=0.0).sqrt_().mul_(self.inv_dv).clamp_(max=self.n_nodes - 1 - 1e-9)
        idx = v.long()
        v -= idx
        c0, c1, c2, c3 = self.coef
        rho = torch.take(c3, idx)
        rho.mul_(v).add_(torch.take(c2, idx)).mul_(v).add_(torch.take(c1, idx)).mul_(v).add_(torch.take(c0, idx))
        low = rho < -0.75  # (1 + rho)^{3/2} behaviour of kappa near rho = -1
        if bool(low.any()):
            rl, tl = rho[low], r[low]
            for _ in range(4):
                hv, dh = self._h(rl)
                rl = (rl - (hv - tl) / dh).clamp_(-1.0, 1.0)
            rho[low] = rl
        return rho

    def block(self, R, C, hR, hC, kernel):
        r = torch.addmm(R["sx"] @ C["sx"].T, R["aux_left"], C["aux_right"].T)
        rho = self._invert(r)
        si, sj = R["s"][:, None], C["s"][None, :]
        if kernel == "ck":
            return rho.mul_(si).mul_(sj)
        feat = (rho - r).mul_(si * (1.0 / self.sa)).mul_(sj)
        feat += self.c * self.c
        feat -= (self.c * self.mu) * (si + sj)
        if kernel == "feature":
            return feat
        # E[phi'(u) phi'(v)] has a square-root singularity at rho = 1:
        # identical samples (r at rounding distance from h(1)) get rho = 1
        rho = torch.where((self.h_hi - r) < 1e-13, torch.ones_like(rho), rho)
        al, be = self.alpha, self.beta
        D = torch.arccos(rho).mul_(-((al - be) ** 2) / (2.0 * math.pi))
        D += al * be + (al - be) ** 2 / 2.0
        D.mul_(-self.sa).add_(1.0)
        return feat.div_(D)


# ---------------------------------------------------------------------------
# any activation: the Hermite (Mehler) expansion


class _OuterTerms:
    """Coefficients ``c_k = Hr[:, k] Hc[:, k]^T`` of a block (never stored: added in place)."""

    def __init__(self, Hr, Hc):
        self.Hr, self.Hc = Hr, Hc

    def first(self, k):
        return torch.outer(self.Hr[:, k], self.Hc[:, k])

    def add_(self, t, k):
        return t.addr_(self.Hr[:, k], self.Hc[:, k])


class _PairedTerms(_OuterTerms):
    """Coefficients ``c_k = Hr[:, k] * Hc[:, k]`` of gathered entries (row ``e`` of both is entry ``e``)."""

    def first(self, k):
        return self.Hr[:, k] * self.Hc[:, k]

    def add_(self, t, k):
        return t.addcmul_(self.Hr[:, k], self.Hc[:, k])


class _HermiteBlocks:
    """Blocks of any activation through its Hermite expansion (see the module docstring)."""

    fields = ("X", "n_sq", "a", "s", "H", "d2")
    _GROUP = 16384  # near entries solved per group (sorted by correlation)

    def __init__(self, act, sa, sb, c, tol, max_degree):
        self.act, self.sa, self.sb, self.c, self.tol = act, sa, sb, c, tol
        self.K = int(max_degree)
        self.bps = tuple(act.breakpoints)
        phi_zero = float(np.asarray(act(np.zeros(1)), dtype=np.float64)[0])
        self.odd = bool(act.odd) and abs(c - phi_zero) <= 1e-15 * max(1.0, abs(c))

    # -- degrees (on the host, from the exact truncation bounds) ----------------
    def _degrees(self, rho_abs, bounds, tol=None):
        """Smallest degree meeting the tolerance for each correlation bound (``K + 1`` where none does)."""
        tail_r, tail_c, dtail_r, dtail_c, scale, ntk = bounds
        K = np.arange(self.K + 1)
        rho_abs = np.minimum(np.atleast_1d(np.asarray(rho_abs, dtype=np.float64)), 1.0)
        with np.errstate(under="ignore", divide="ignore"):
            lr = np.log(np.maximum(rho_abs, 1e-300))[:, None]
            bound = self.sa * np.exp(lr * (K + 1)) * np.sqrt(tail_r * tail_c)
            if ntk:
                bound = np.maximum(bound, self.sa * np.exp(lr * K) * np.sqrt(dtail_r * dtail_c) * scale)
        ok = bound <= (self.tol if tol is None else tol) * scale
        return np.where(ok.any(axis=1), ok.argmax(axis=1), self.K + 1)

    def _degree(self, rho_abs, bounds, tol=None):
        return int(self._degrees(min(1.0, rho_abs), bounds, tol)[0])

    def _ks(self, K):
        # odd activations (phi0 - c odd) have vanishing even coefficients
        return list(range(1, K + 1, 2)) if self.odd else list(range(K + 1))

    # -- the truncated series -------------------------------------------------
    def _series(self, rho, terms, K):
        """Value and rho-derivative of ``sum_k c_k rho^k`` over the degrees used up to ``K`` (Horner)."""
        ks = self._ks(K)[::-1]
        if self.odd:  # rho q(rho^2)
            y = rho * rho
            q, dq = terms.first(ks[0]), torch.zeros_like(rho)
            for k in ks[1:]:
                dq.mul_(y).add_(q)
                terms.add_(q.mul_(y), k)
            dq.mul_(2.0 * y).add_(q)
            return q.mul_(rho), dq
        p, dp = terms.first(ks[0]), torch.zeros_like(rho)
        for k in ks[1:]:
            dp.mul_(rho).add_(p)
            terms.add_(p.mul_(rho), k)
        return p, dp

    def _solve(self, rho0, s, rhs, terms, K, K_pre, exact_derivative):
        """Newton on the degree-``K`` equation, started from the solution of the degree-``K_pre`` one.

        ``terms`` gives the coefficients ``c_k`` (:class:`_OuterTerms` or
        :class:`_PairedTerms`).
        """
        sa = self.sa

        def make(kmax):
            def fun(rho):
                p, dp = self._series(rho, terms, kmax)
                g = p * -sa
                g += s * rho
                g -= rhs
                dg = dp * -sa
                dg += s
                return g, dg, p, dp

            return fun

        if K_pre is not None and K_pre < K - 2:
            rho0, _, _ = _newton(make(max(K_pre, 1)), rho0, tol=_PRE_TOL, max_iter=8, strict=False)
        rho, (_, _, p, dp), step = _newton(make(K), rho0, tol=self.tol)
        if exact_derivative:  # the NTK needs E[phi' phi'] at the returned iterate
            p, dp = self._series(rho, terms, K)
        else:  # values at the previous iterate, moved to the returned one to first order
            p = p + dp * step
        return rho, p, dp

    # -- one block ----------------------------------------------------------------
    def block(self, R, C, hR, hC, kernel):
        sa, sb = self.sa, self.sb
        P = R["X"] @ C["X"].T
        s = R["s"][:, None] * C["s"][None, :]
        rhs = sb * P
        nsum = R["n_sq"][:, None] + C["n_sq"][None, :]
        dup = (nsum - 2.0 * P) <= 1e-13 * nsum
        zero = s <= 1e-300
        special = dup | zero
        has_special = bool(special.any())
        s_safe = torch.where(zero, torch.ones_like(s), s) if has_special else s
        Hr, Hc = R["H"], C["H"]
        rho0 = (rhs + sa * torch.outer(Hr[:, 0], Hc[:, 0])) / (s_safe - sa * torch.outer(Hr[:, 1], Hc[:, 1]))
        rho0.clamp_(-1.0, 1.0)
        if has_special:
            rho0.masked_fill_(special, 0.0)
        scale = float(max(np.max(hR.a, initial=0.0), np.max(hC.a, initial=0.0), 1e-300))
        ntk = kernel == "ntk"
        bounds = (
            np.max(hR.tail, axis=0, initial=0.0),
            np.max(hC.tail, axis=0, initial=0.0),
            np.max(hR.dtail, axis=0, initial=0.0),
            np.max(hC.dtail, axis=0, initial=0.0),
            scale,
            ntk,
        )
        abs0 = rho0.abs()
        # bulk: the whole block at the degree of a split correlation chosen to
        # minimise (block size x degree + 2 x near entries x their degrees)
        cands = np.array(_SPLITS)
        Kc = self._degrees(np.minimum(cands + _MARGIN, 1.0), bounds)
        cut = torch.as_tensor(cands, dtype=_DTYPE, device=abs0.device)
        hist = torch.bincount(torch.bucketize(abs0.reshape(-1), cut), minlength=len(cands) + 1).cpu().numpy()
        above = hist[::-1].cumsum()[::-1]  # above[i]: entries in buckets >= i
        top = float(abs0.max()) if abs0.numel() else 0.0
        k_top = min(self._degree(top + _MARGIN, bounds), self.K)
        best = None
        for i, (cand, k_c) in enumerate(zip(cands, Kc)):
            if k_c > self.K:
                continue
            n_near = int(above[i + 1])  # |rho0| > cand
            cost = abs0.numel() * max(k_c, 1) + 2 * n_near * k_top
            if best is None or cost < best[0]:
                best = (cost, float(cand), int(k_c))
        split, K_bulk = (0.0, 1) if best is None else best[1:]
        K_pre = self._degree(split + _MARGIN, bounds, tol=_PRE_TOL)
        K_bulk = max(K_bulk, 1)
        rho, p, dp = self._solve(rho0, s_safe, rhs, _OuterTerms(Hr, Hc), K_bulk, K_pre, ntk)
        near = (rho.abs() > split + _MARGIN) | (abs0 > split)
        if has_special:
            near &= ~special
        if bool(near.any()):
            ii, jj = torch.nonzero(near, as_tuple=True)
            vals = self._near(rho[ii, jj], s_safe[ii, jj], rhs[ii, jj], R, C, hR, hC, ii, jj, ntk, bounds)
            rho[ii, jj], p[ii, jj], dp[ii, jj] = vals
        if kernel == "ck":
            out = s * rho
        elif kernel == "feature":
            out = p
        else:
            dp = (dp / s_safe).mul_(-sa).add_(1.0)
            out = p / dp
        if has_special:
            if bool(dup.any()):
                di, dj = torch.nonzero(dup, as_tuple=True)
                a = R["a"][di]
                if kernel == "ck":
                    out[di, dj] = a
                else:
                    feat = (a - sb * R["n_sq"][di]) / sa
                    out[di, dj] = feat if kernel == "feature" else feat / (1.0 - sa * R["d2"][di])
            if bool(zero.any()):
                feat0 = torch.outer(Hr[:, 0], Hc[:, 0])[zero]
                out[zero] = sa * feat0 + rhs[zero] if kernel == "ck" else feat0
        return out

    def _near(self, rho0, s, rhs, R, C, hR, hC, ii, jj, ntk, bounds):
        """Entries with large correlations: sorted groups at their own degree,
        two-dimensional quadrature where the Hermite bound is not met."""
        rho, p, dp = torch.empty_like(rho0), torch.empty_like(rho0), torch.empty_like(rho0)
        order = torch.argsort(rho0.abs())
        polar = []
        scale = bounds[4]
        for g0 in range(0, len(order), self._GROUP):
            idx = order[g0 : g0 + self._GROUP]
            rmax = min(1.0, float(rho0[idx].abs().max()) + _MARGIN)
            K = max(1, min(self._degree(rmax, bounds), self.K))
            K_pre = self._degree(rmax, bounds, tol=_PRE_TOL)
            gi, gj = ii[idx], jj[idx]
            Hr, Hc = R["H"][gi, : K + 1], C["H"][gj, : K + 1]
            r_, p_, dp_ = self._solve(rho0[idx], s[idx], rhs[idx], _PairedTerms(Hr, Hc), K, K_pre, ntk)
            # exact per-entry bound at the final correlation
            ar = r_.abs()
            bound = self.sa * ar ** (K + 1) * torch.sqrt(R["tail"][gi, K] * C["tail"][gj, K])
            if ntk:
                bound = torch.maximum(
                    bound, self.sa * ar**K * torch.sqrt(R["dtail"][gi, K] * C["dtail"][gj, K]) * s[idx]
                )
            bad = bound > self.tol * max(scale, 1e-300)
            rho[idx], p[idx], dp[idx] = r_, p_, dp_
            if bool(bad.any()):
                polar.append(idx[bad])
        if polar:
            k = torch.cat(polar)
            host = [t.cpu().numpy() for t in (rho[k], s[k], rhs[k], R["s"][ii[k]], C["s"][jj[k]])]
            vals = self._polar_solve(*host)
            rho[k], p[k], dp[k] = (torch.as_tensor(v, dtype=_DTYPE, device=rho.device) for v in vals)
        return rho, p, dp

    def _polar_solve(self, rho0, s, rhs, si, sj):
        """The entries no Hermite degree resolves, by polar quadrature (numpy, on the host)."""
        sa = self.sa

        def f(x):
            return self.act(x) - self.c

        df = self.act.derivative

        def fun(rho):
            p = polar_expectation(f, f, si, sj, rho, self.bps)
            dp = polar_expectation(df, df, si, sj, rho, self.bps) * s
            return s * rho - sa * p - rhs, s - sa * dp

        with np.errstate(all="ignore"):
            rho = safeguarded_newton(fun, rho0, tol=self.tol)
            p = polar_expectation(f, f, si, sj, rho, self.bps)
            dp = polar_expectation(df, df, si, sj, rho, self.bps) * s
        return rho, p, dp


# ---------------------------------------------------------------------------
# the solver


class TorchKernelSolver:
    """Kernel blocks of an :class:`~sk_deq.kernels.ImplicitKernelEngine` computed with torch on ``device``.

    Parameters
    ----------
    activation : Activation
        The engine's activation.
    sigma_a2, sigma_b2 : float
        Weight variances.
    centring : float
        The centring constant ``c``.
    tol : float
        Tolerance of every entry's fixed point.
    device : torch.device
        Where the blocks are computed.
    """

    def __init__(self, activation, sigma_a2, sigma_b2, centring, tol, device):
        self.device = torch.device(device)
        self.activation = activation
        sa, sb, c = float(sigma_a2), float(sigma_b2), float(centring)
        formula = activation.dual
        if formula is not None and formula.implicit and formula.slopes is not None:
            self.route = "leaky-relu"
            self._blocks = _LeakyReluBlocks(activation, formula, sa, sb, c, tol, self.device)
            self._hermite = None
        else:
            self.route = "hermite"
            self._blocks = _HermiteBlocks(activation, sa, sb, c, tol, MEHLER_MAX_DEGREE)
            self._hermite = _MehlerDual(activation, sa, sb, c, tol, max_degree=MEHLER_MAX_DEGREE)

    def with_hermite(self, S: Samples) -> Samples:
        """``S`` with the Hermite data of its samples (computed here if the engine's dual did not)."""
        if self._hermite is None or all(k in S.arrays for k in _HERMITE_FIELDS):
            return S
        extra = self._hermite.extra(S.X, S.n_sq, S.a)
        return Samples(**{**S.arrays, **{k: extra[k] for k in _HERMITE_FIELDS}})

    def _to_device(self, S: Samples) -> dict:
        names = self._blocks.fields
        if self.route == "hermite":
            names = (*names, "tail", "dtail")
        return {k: torch.as_tensor(np.ascontiguousarray(S.arrays[k]), dtype=_DTYPE, device=self.device) for k in names}

    def default_block_size(self, n: int, m: int) -> int:
        """Rows (= columns) per block: the whole problem on a GPU when it fits, else a square of the memory budget.

        On a CUDA device a quarter of the free memory at about 200 bytes
        per entry of a block (the Hermite route's temporaries), on the
        CPU scikit-learn's ``working_memory``, as the numpy engine.
        """
        from .memory import auto_block_size

        if self.device.type == "cuda":
            free = int(torch.cuda.mem_get_info(self.device)[0])
            b = int(math.sqrt(free / 4 / 200))
            return max(256, min(b, 16384))
        return auto_block_size(1)

    def blocks(self, SX: Samples, SY: Samples, pairs, kernel: str):
        """Yield ``(rows, cols, block)`` for the given pairs of slices, every block a float64 numpy array."""
        SX, SY = self.with_hermite(SX), (None if SY is None else self.with_hermite(SY))
        symmetric = SY is None
        TX = self._to_device(SX)
        TY = TX if symmetric else self._to_device(SY)
        hY = SX if symmetric else SY
        sl = {}
        with torch.inference_mode():
            for bi, bj in pairs:
                R = {k: v[bi] for k, v in TX.items()}
                C = {k: v[bj] for k, v in TY.items()}
                hR = sl.setdefault(("x", bi.start, bi.stop), _host_view(SX, bi))
                hC = sl.setdefault(("y", bj.start, bj.stop), _host_view(hY, bj))
                blk = self._blocks.block(R, C, hR, hC, kernel)
                yield bi, bj, blk.cpu().numpy()


class _HostRows:
    """The host-side (numpy) per-sample data a block's degree choice needs."""

    def __init__(self, a, tail=None, dtail=None):
        self.a, self.tail, self.dtail = a, tail, dtail


def _host_view(S: Samples, rows: slice) -> _HostRows:
    arr = S.arrays
    if "tail" in arr:
        return _HostRows(arr["a"][rows], arr["tail"][rows], arr["dtail"][rows])
    return _HostRows(arr["a"][rows])
