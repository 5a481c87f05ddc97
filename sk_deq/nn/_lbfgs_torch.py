"""The torch back end of :func:`sk_deq.nn._fit.minimize_lbfgs`: a float64 L-BFGS on any device.

Imported only by :mod:`sk_deq.nn._fit` (the one driver, which owns the
result type and the stopping rules' documentation).  The iterate, the
gradients and the history live on the starting point's device; the host
holds only the scalars that steer the run, read once per evaluation by
:func:`_read` from one packed tensor: the loss, the largest gradient entry,
the directional derivatives along the search direction (at the trial point
and at the start of the line search) and ``g . g``.  In the usual case the
unit step is accepted and an iteration costs one evaluation and one read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

#: Pairs ``(s, y)`` kept (scipy's default ``maxcor``).
HISTORY = 10
#: Evaluations per line search (scipy's default ``maxls``).
MAX_LINE_SEARCH = 20
#: Sufficient-decrease and curvature constants of the strong-Wolfe line search (scipy's).
WOLFE_C1, WOLFE_C2 = 1e-3, 0.9
#: A pair enters the two-loop recursion only if ``s . y > CURVATURE_EPS * y . y``.
CURVATURE_EPS = float(np.finfo(np.float64).eps)
#: Losses within this fraction of each other count as equal in the line search (float64 rounding).
ROUNDING = 4 * CURVATURE_EPS


def _read(packed: torch.Tensor) -> list[float]:
    """The one host read of an evaluation: the values of a small float64 tensor."""
    return packed.tolist()


@dataclass
class _Point:
    """An evaluated point: ``x`` and ``g`` on the device, the scalars read with them on the host."""

    x: torch.Tensor
    g: torch.Tensor
    loss: float
    grad_max: float
    dg: float  # g . d, d the search direction of the evaluation
    gg: float  # g . g
    dg0: float  # the gradient at the line search's start, dotted with d


class _Evaluations:
    """Calls ``fun`` and reads its scalars once; counts the evaluations; a NaN loss is an error."""

    def __init__(self, fun):
        self.fun = fun
        self.n = 0

    def __call__(self, x, d=None, dg0=None) -> _Point:
        loss, grad, gmax = self.fun(x)
        self.n += 1
        grad = grad.reshape(-1).to(torch.float64)
        zero = grad.new_zeros(())
        scalars = [torch.as_tensor(v, dtype=torch.float64, device=grad.device).reshape(()) for v in (loss, gmax)]
        dg = torch.dot(grad, d) if d is not None else zero
        f, gm, dgv, gg, dg0v = _read(torch.stack([*scalars, dg, torch.dot(grad, grad), zero if dg0 is None else dg0]))
        if math.isnan(f) or (self.n == 1 and not math.isfinite(f)):
            where = "the starting point" if self.n == 1 else f"evaluation {self.n} (a trial point of the line search)"
            raise FloatingPointError(f"The loss became {f} at {where}.")
        return _Point(x, grad, f, gm, dgv, gg, dg0v)


class _History:
    """The last :data:`HISTORY` pairs on the device and the two-loop recursion over them.

    A pair failing the curvature test is stored with ``rho = 0``, which makes
    it a no-op in both loops (masked by ``torch.where``, no host branch).
    """

    def __init__(self, like: torch.Tensor):
        self.like = like
        self.reset()

    def reset(self):
        self.pairs = []
        self.gamma = torch.ones((), dtype=torch.float64, device=self.like.device)

    def push(self, s, y):
        sy, yy = torch.dot(s, y), torch.dot(y, y)
        ok = sy > CURVATURE_EPS * yy
        rho = torch.where(ok, sy.reciprocal(), torch.zeros_like(sy))
        self.gamma = torch.where(ok, sy / yy, self.gamma)
        self.pairs = [*self.pairs, (s, y, rho)][-HISTORY:]

    def direction(self, g):
        """``-H g``, ``H`` the L-BFGS inverse Hessian (``gamma I`` scaled by the newest good pair)."""
        q = -g
        alphas = []
        for s, y, rho in reversed(self.pairs):
            a = rho * torch.dot(s, q)
            q = q - a * y
            alphas.append(a)
        r = self.gamma * q
        for (s, y, rho), a in zip(self.pairs, reversed(alphas)):
            r = r + (a - rho * torch.dot(y, r)) * s
        return r


def _interpolate(lo, hi) -> float:
    """The minimiser of the cubic through ``lo`` and ``hi`` (``(t, f, dg)``), kept inside their bracket."""
    (ta, fa, ga), (tb, fb, gb) = lo, hi
    left, width = min(ta, tb), abs(tb - ta)
    t = ta + 0.5 * (tb - ta)  # bisection when the cubic fails (a non-finite end, no real minimiser)
    if all(math.isfinite(v) for v in (fa, fb, ga, gb)) and width > 0:
        d1 = ga + gb - 3.0 * (fa - fb) / (ta - tb)
        disc = d1 * d1 - ga * gb
        if disc >= 0:
            d2 = math.copysign(math.sqrt(disc), tb - ta)
            den = gb - ga + 2.0 * d2
            if den != 0:
                t = tb - (tb - ta) * (gb + d2 - d1) / den
    return min(max(t, left + 0.1 * width), left + 0.9 * width)


def _line_search(evaluate, p: _Point, d, t: float, max_eval: int):
    """A point along ``d`` from ``p`` meeting the strong Wolfe conditions (first trial ``t``).

    Returns None when ``d`` is not a descent direction or no point with a
    sufficient decrease was found; after :data:`MAX_LINE_SEARCH` trials (or
    the evaluation budget) a point with sufficient decrease is accepted.
    """
    dg0_dev = torch.dot(p.g, d)
    lo, hi, dg0 = None, None, None
    # losses equal to rounding (near the optimum, at a tight tol) are told apart by the derivatives
    slack = ROUNDING * abs(p.loss)
    for _ in range(MAX_LINE_SEARCH):
        if evaluate.n >= max_eval:
            break
        q = evaluate(p.x + t * d, d, dg0_dev)
        if dg0 is None:
            dg0 = q.dg0  # read with the first trial: no read of its own
            if not dg0 < 0:
                return None
            lo = (0.0, p.loss, dg0, p)
        assert lo is not None  # set with the first trial
        if not math.isfinite(q.loss) or q.loss > p.loss + WOLFE_C1 * t * dg0 + slack or q.loss > lo[1] + slack:
            hi = (t, q.loss, q.dg, q)
        elif abs(q.dg) <= -WOLFE_C2 * dg0:
            return q
        else:
            if (q.dg >= 0) if hi is None else (q.dg * (hi[0] - t) >= 0):
                hi = lo
            lo = (t, q.loss, q.dg, q)
        t = 4.0 * t if hi is None else _interpolate(lo[:3], hi[:3])
    return lo[3] if lo is not None and lo[0] > 0 else None


def minimize_torch(fun, x0: torch.Tensor, *, max_iter: int, tol: float, ftol: float, callback, max_eval: int):
    """The torch back end of :func:`~sk_deq.nn._fit.minimize_lbfgs` (same arguments and stopping rules).

    Returns
    -------
    tuple
        The last :class:`_Point`, the iterations, the evaluations,
        ``converged``, ``stopped`` and the message.
    """
    evaluate = _Evaluations(fun)
    p = evaluate(x0.detach().to(torch.float64).reshape(-1).clone())
    if p.grad_max <= tol or max_iter <= 0:
        return p, 0, evaluate.n, p.grad_max <= tol, False, "converged at the start"
    history = _History(p.x)
    n_iter = 0
    while True:
        t = 1.0 / math.sqrt(p.gg) if not history.pairs and p.gg > 0 else 1.0  # scipy's first step 1 / ||d||
        new = _line_search(evaluate, p, history.direction(p.g), t, max_eval)
        if new is None:
            if evaluate.n >= max_eval:
                return p, n_iter, evaluate.n, False, False, "STOP: TOTAL NO. OF F,G EVALUATIONS EXCEEDS LIMIT"
            if not history.pairs:
                return p, n_iter, evaluate.n, False, False, "ABNORMAL: the line search found no sufficient decrease"
            history.reset()  # as L-BFGS-B: restart from steepest descent once the search fails
            continue
        history.push(new.x - p.x, new.g - p.g)
        n_iter, prev, p = n_iter + 1, p, new
        end = _stop(p, prev, n_iter, evaluate.n, tol=tol, ftol=ftol, max_iter=max_iter, max_eval=max_eval)
        if callback is not None and callback(p.x, p.loss):
            end = (True, True, "stopped by the callback")
        if end is not None:
            return (p, n_iter, evaluate.n, *end)


def _stop(p, prev, n_iter, n_eval, *, tol, ftol, max_iter, max_eval):
    """``(converged, stopped, message)`` when a stopping test holds after an iteration, else None."""
    if p.grad_max <= tol:
        return True, False, f"largest gradient entry {p.grad_max:.3g} <= tol={tol:g}"
    if prev.loss - p.loss <= ftol * max(abs(prev.loss), abs(p.loss), 1.0):
        return True, False, "CONVERGENCE: RELATIVE REDUCTION OF F <= FACTR*EPSMCH"
    if n_iter >= max_iter:
        return False, False, "STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT"
    if n_eval >= max_eval:
        return False, False, "STOP: TOTAL NO. OF F,G EVALUATIONS EXCEEDS LIMIT"
    return None
