"""The one L-BFGS driver: scipy's L-BFGS-B on the host, or a float64 L-BFGS in torch on the device.

Both full-batch trainers use it: the readout on cached features
(:func:`sk_deq.nn.readout.fit_readout`, in preconditioned variables) and
end-to-end training of a whole network (:func:`sk_deq.nn.train` with
``optimizer='lbfgs'``).  It owns what they share: the thread limit, the
stopping test on the largest gradient entry, a callback that may stop the
run (early stopping on a validation set), the start that already meets the
test, and one evaluation per point (scipy asks for the starting point again).

Two back ends, one set of stopping rules (``backend``):

- ``'scipy'``: L-BFGS-B on a float64 numpy vector.  A torch starting point
  is copied to the host, and so is every evaluation's gradient.
- ``'torch'``: a float64 L-BFGS on the starting point's device
  (:mod:`sk_deq.nn._lbfgs_torch`: two-loop recursion over the last 10
  pairs, as scipy's default ``maxcor``; a strong-Wolfe line search whose
  unit step is accepted in the usual case).  Nothing but scalars crosses to
  the host: each evaluation packs the loss, the largest gradient entry and
  the directional derivatives into one tensor read once, so an iteration
  reads the host once in the usual case.  A pair that fails the curvature
  test is masked on the device, not skipped by a host branch.
- ``'auto'`` (the default): torch for a torch starting point on a GPU (or
  any device but the CPU), scipy otherwise.  On the CPU the two take about
  the same iterations and evaluations on the readout, in about the same
  time, and reach the same loss (:ref:`bench-defaults`); scipy stays the
  CPU default.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .._runtime import on_gpu
from .._runtime import one_blas_thread
from ._lbfgs_torch import minimize_torch

__all__ = ["BACKENDS", "LBFGSResult", "minimize_lbfgs"]

#: scipy's default relative-reduction tolerance of L-BFGS-B (``factr = 1e7``).
FTOL = 1e7 * np.finfo(float).eps
#: Back ends of :func:`minimize_lbfgs`.
BACKENDS = ("auto", "scipy", "torch")


@dataclass
class LBFGSResult:
    """Outcome of :func:`minimize_lbfgs`; every parameter is an attribute of the same name.

    Parameters
    ----------
    x : ndarray or torch.Tensor
        The last iterate (a float64 tensor on the starting point's device
        when the start was a tensor).
    loss : float
        The loss there.
    grad_max : float
        The convergence measure ``fun`` returned there.
    n_iter : int
        Iterations run (0 when the start met the test).
    n_eval : int
        Distinct evaluations of ``fun``.
    converged : bool
        Whether the gradient test (or scipy's relative-reduction test) was met.
    stopped : bool
        Whether the callback stopped the run.
    message : str
        How the run ended.
    """

    x: np.ndarray | torch.Tensor
    loss: float
    grad_max: float
    n_iter: int
    n_eval: int
    converged: bool
    stopped: bool
    message: str


class _Stop(Exception):
    def __init__(self, converged: bool, stopped: bool):
        super().__init__()
        self.converged, self.stopped = converged, stopped


def minimize_lbfgs(
    fun: Callable,
    x0,
    *,
    max_iter: int,
    tol: float,
    ftol: float = FTOL,
    callback: Callable | None = None,
    backend: str = "auto",
) -> LBFGSResult:
    """Minimise ``fun`` by L-BFGS from ``x0``: scipy's L-BFGS-B (one BLAS thread) or the torch back end.

    Parameters
    ----------
    fun : callable
        ``fun(x) -> (loss, grad, grad_max)``: the loss, its gradient (of the
        shape of ``x``) and the convergence measure, the largest gradient
        entry in the variables that matter (they may differ from ``x``, e.g.
        preconditioned ones).  For a numpy ``x0``: floats and a float64
        array.  For a torch ``x0``: ``x`` is a float64 tensor on its device
        and ``fun`` returns tensors there (``loss`` and ``grad_max`` 0-d),
        which it should not read on the host.
    x0 : ndarray or torch.Tensor of shape (n,)
        Starting point (converted to float64).
    max_iter : int
        Largest number of iterations.
    tol : float
        Stop once ``grad_max`` is at most ``tol`` (the start included).
    ftol : float, default=FTOL
        Also stop once an iteration reduces the loss by less than this
        fraction (of the larger of the two losses and 1).
    callback : callable, optional
        ``callback(x, loss) -> bool`` after every iteration (``x`` of the
        type of ``x0``); True stops the run (``stopped``).
    backend : {'auto', 'scipy', 'torch'}, default='auto'
        See the module docstring; ``'torch'`` needs a tensor ``x0``.  Both
        also stop after ``20 * max_iter + 20`` evaluations.

    Returns
    -------
    LBFGSResult
        The last iterate and how the run ended.

    Raises
    ------
    FloatingPointError
        On a tensor ``x0``: the loss is not finite at the start, or NaN at
        a trial point (an infinite one makes the line search back off).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}.")
    tensor = isinstance(x0, torch.Tensor)
    if backend == "torch" and not tensor:
        raise TypeError(f"backend='torch' needs a torch.Tensor x0, got {type(x0).__name__}.")
    max_eval = 20 * int(max_iter) + 20
    stops = dict(max_iter=int(max_iter), tol=float(tol), ftol=float(ftol), callback=callback, max_eval=max_eval)
    # L-BFGS's own work is vector operations on the parameters, where threads do not pay off;
    # and numpy's BLAS threads, spinning between calls, take the cores from torch's (both back ends)
    with one_blas_thread():
        if backend == "torch" or (backend == "auto" and tensor and on_gpu(x0.device)):
            p, *end = minimize_torch(fun, x0, **stops)
            return LBFGSResult(p.x, p.loss, p.grad_max, *end)
        if not tensor:
            return _minimize_scipy(fun, np.asarray(x0, dtype=np.float64), **stops)
        fun_host, callback_host = _on_host(fun, callback, x0.device)
        x0_host = x0.detach().to("cpu", torch.float64).reshape(-1).numpy()
        res = _minimize_scipy(fun_host, x0_host, **{**stops, "callback": callback_host})
    res.x = torch.from_numpy(res.x).to(x0.device)
    return res


def _on_host(fun, callback, device):
    """``fun`` and ``callback`` of tensors on ``device`` as scipy's functions of float64 arrays."""

    def fun_host(x):
        loss, grad, gmax = fun(torch.from_numpy(x).to(device))
        scalars = torch.stack(
            [torch.as_tensor(v, dtype=torch.float64, device=device).reshape(()) for v in (loss, gmax)]
        )
        loss, gmax = scalars.tolist()
        if not math.isfinite(loss) and (fun_host.first or math.isnan(loss)):
            raise FloatingPointError(f"The loss became {loss}{' at the starting point' if fun_host.first else ''}.")
        fun_host.first = False
        return loss, grad.detach().reshape(-1).to("cpu", torch.float64).numpy(), gmax

    fun_host.first = True
    if callback is None:
        return fun_host, None
    return fun_host, lambda x, loss: callback(torch.from_numpy(x).to(device), loss)


def _minimize_scipy(fun, x0: np.ndarray, *, max_iter, tol, ftol, callback, max_eval) -> LBFGSResult:
    """scipy's L-BFGS-B with one BLAS thread, ``fun`` of float64 arrays (see :func:`minimize_lbfgs`)."""
    from scipy.optimize import minimize

    last = {"x": None, "out": None, "n_eval": 0, "n_iter": 0}

    def evaluate(x):
        if last["x"] is None or not np.array_equal(x, last["x"]):
            loss, grad, gmax = fun(x)
            last.update(x=np.array(x, copy=True), out=(float(loss), np.asarray(grad, dtype=np.float64), gmax))
            last["n_eval"] += 1
        loss, grad, _ = last["out"]
        return loss, grad.copy()

    def on_iter(x):
        last["n_iter"] += 1
        last["xk"] = np.array(x, copy=True)
        if callback is not None and callback(x, last["out"][0]):
            raise _Stop(converged=True, stopped=True)
        if np.array_equal(x, last["x"]) and last["out"][2] <= tol:
            raise _Stop(converged=True, stopped=False)

    def result(x, converged, stopped, message):
        if not np.array_equal(x, last["x"]):
            evaluate(x)
        loss, _, gmax = last["out"]
        return LBFGSResult(x, loss, gmax, last["n_iter"], last["n_eval"], converged, stopped, message)

    evaluate(x0)
    gmax = last["out"][2]
    if gmax <= tol or max_iter <= 0:
        return result(x0, gmax <= tol, False, "converged at the start")
    options = {"maxiter": max_iter, "gtol": 0.0, "ftol": ftol, "maxfun": max_eval}
    try:
        res = minimize(evaluate, x0, jac=True, method="L-BFGS-B", callback=on_iter, options=options)
    except _Stop as stop:
        how = (
            "stopped by the callback" if stop.stopped else f"largest gradient entry {last['out'][2]:.3g} <= tol={tol:g}"
        )
        return result(last["xk"], stop.converged, stop.stopped, how)
    return result(res.x, bool(res.success), False, str(res.message))
