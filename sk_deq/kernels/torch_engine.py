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
  by the numpy engine's own code, :class:`~sk_deq.kernels._series.HermiteSeries`,
  run on tensors (:data:`TORCH_OPS`): the degrees follow the exact
  truncation bounds, and the few entries no degree resolves go to
  two-dimensional quadrature (in numpy, on the host).

Every entry is solved to the engine's ``tol`` either way, so the kernels
agree with the numpy engine's to about ``1e-12`` of the kernel's scale.
This module imports torch; :mod:`sk_deq.kernels.engine` imports it only
when a device is asked for.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._duals import Samples, _ReluDual
from ._mehler import MEHLER_MAX_DEGREE, MehlerDual
from ._series import ArrayOps

__all__ = ["TorchKernelSolver"]

_DTYPE = torch.float64
_HERMITE_FIELDS = ("H", "tail", "dtail", "d2")


# ---------------------------------------------------------------------------
# the array operations torch spells its own way (for the shared Hermite-series Newton)

#: :class:`~sk_deq.kernels._series.ArrayOps` of torch.
TORCH_OPS = ArrayOps(
    torch,
    lambda t, a, b: t.addr_(a, b),
    lambda t, a, b: t.addcmul_(a, b),
    lambda mask: torch.nonzero(mask, as_tuple=True),
    lambda x: x.cpu().numpy(),
    lambda x, like: torch.as_tensor(x, dtype=like.dtype, device=like.device),
    False,
)


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
        r = torch.addmm(R.sx @ C.sx.T, R.aux_left, C.aux_right.T)
        rho = self._invert(r)
        si, sj = R.s[:, None], C.s[None, :]
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
            self._hermite = MehlerDual(activation, sa, sb, c, tol, max_degree=MEHLER_MAX_DEGREE)
            self._blocks = _HermiteBlocks(self._hermite.solver(TORCH_OPS, group=16384))

    def with_hermite(self, S: Samples) -> Samples:
        """``S`` with the Hermite data of its samples (computed here if the engine's dual did not)."""
        if self._hermite is None or all(k in S.arrays for k in _HERMITE_FIELDS):
            return S
        extra = self._hermite.extra(S.X, S.n_sq, S.a)
        return Samples(**{**S.arrays, **{k: extra[k] for k in _HERMITE_FIELDS}})

    def _to_device(self, S: Samples) -> Samples:
        return Samples(
            **{
                k: torch.as_tensor(np.ascontiguousarray(S.arrays[k]), dtype=_DTYPE, device=self.device)
                for k in self._blocks.fields
            }
        )

    def default_block_size(self, n: int, m: int) -> int:
        """Rows (= columns) per block: the whole problem on a GPU when it fits, else a square of the memory budget.

        On a CUDA device a quarter of the free memory at about
        :data:`~sk_deq._runtime.TORCH_BLOCK_ENTRY_BYTES` per entry of a
        block (the Hermite route's temporaries), on the CPU scikit-learn's
        ``working_memory``, as the numpy engine.
        """
        from .._runtime import TORCH_BLOCK_ENTRY_BYTES, auto_block_size

        if self.device.type == "cuda":
            free = int(torch.cuda.mem_get_info(self.device)[0])
            b = int(math.sqrt(free / 4 / TORCH_BLOCK_ENTRY_BYTES))
            return max(256, min(b, 16384))
        return auto_block_size(1)

    def blocks(self, SX: Samples, SY: Samples | None, pairs, kernel: str, *, host: bool = True):
        """Yield ``(rows, cols, block)`` for the given pairs of slices, every block a float64 numpy array.

        With ``host=False`` every block is the float64 tensor on the device
        (valid until the next block is asked for).  The flag is checked
        here, before the first block is asked for.
        """
        from .._validation import check_bool

        check_bool(host, "host")
        return self._blocks_of(SX, SY, pairs, kernel, host)

    def _blocks_of(self, SX, SY, pairs, kernel, host):
        SX = self.with_hermite(SX)
        hY = SX if SY is None else self.with_hermite(SY)  # the columns (the rows when symmetric)
        TX = self._to_device(SX)
        TY = TX if SY is None else self._to_device(hY)
        with torch.inference_mode():
            for bi, bj in pairs:
                blk = self._blocks.block(TX.take(bi), TY.take(bj), SX.take(bi), hY.take(bj), kernel)
                yield bi, bj, (blk.cpu().numpy() if host else blk)

    def kernel_tensor(self, SX: Samples, SY: Samples | None, pairs, kernel: str, bias: float, diagonal):
        """The kernel of the given blocks plus ``bias``, assembled on the device (float64).

        As :meth:`~sk_deq.kernels.ImplicitKernelEngine.kernel` writes the
        numpy blocks: in the symmetric case (``SY`` None, ``pairs`` on and
        above the diagonal) every block's mirror is written from it (a
        diagonal block's lower triangle from its upper one), and the
        diagonal is set to ``diagonal`` (numpy, the engine's O(n) values).
        """
        symmetric = SY is None
        n, m = len(SX), len(SX if SY is None else SY)
        out = torch.empty((n, m), dtype=_DTYPE, device=self.device)
        for bi, bj, blk in self.blocks(SX, SY, pairs, kernel, host=False):
            out[bi, bj] = blk + bias if bias else blk
            if not symmetric:
                continue
            if bi == bj:
                d = out[bi, bj]
                d.copy_(torch.triu(d) + torch.triu(d, 1).T)
            else:
                out[bj, bi] = out[bi, bj].T
        if symmetric and n:
            out.diagonal().copy_(torch.as_tensor(np.asarray(diagonal, dtype=np.float64), device=self.device))
        return out


class _HermiteBlocks:
    """Blocks of any activation through its Hermite expansion: the shared :class:`~sk_deq.kernels._series.HermiteSeries`."""

    fields = ("X", "n_sq", "a", "s", "H", "d2", "tail", "dtail")

    def __init__(self, series):
        self.series = series

    def block(self, R, C, hR, hC, kernel):
        return self.series.block(R.X @ C.X.T, R, C, hR, hC, kernel)
