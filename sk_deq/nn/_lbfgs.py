"""The one L-BFGS driver: scipy's L-BFGS-B on a flat float64 vector.

Both full-batch trainers use it: the readout on cached features
(:func:`sk_deq.nn.readout.fit_readout`, in preconditioned variables) and
end-to-end training of a whole network (:func:`sk_deq.nn.train` with
``optimizer='lbfgs'``).  It owns what they share: the thread limit, the
stopping test on the largest gradient entry, a callback that may stop the
run (early stopping on a validation set), the start that already meets the
test, and one evaluation per point (scipy asks for the starting point again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["LBFGSResult", "minimize_lbfgs"]

#: scipy's default relative-reduction tolerance of L-BFGS-B (``factr = 1e7``).
FTOL = 1e7 * np.finfo(float).eps


@dataclass
class LBFGSResult:
    """Outcome of :func:`minimize_lbfgs`; every parameter is an attribute of the same name.

    Parameters
    ----------
    x : ndarray
        The last iterate.
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

    x: np.ndarray
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
    x0: np.ndarray,
    *,
    max_iter: int,
    tol: float,
    ftol: float = FTOL,
    callback: Callable | None = None,
) -> LBFGSResult:
    """Minimise ``fun`` by L-BFGS-B from ``x0`` with one BLAS thread.

    Parameters
    ----------
    fun : callable
        ``fun(x) -> (loss, grad, grad_max)``: the loss, its gradient (a
        float64 array of the shape of ``x``) and the convergence measure,
        the largest gradient entry in the variables that matter (they may
        differ from ``x``, e.g. preconditioned ones).
    x0 : ndarray of shape (n,)
        Starting point (float64).
    max_iter : int
        Largest number of iterations.
    tol : float
        Stop once ``grad_max`` is at most ``tol`` (the start included).
    ftol : float, default=FTOL
        L-BFGS-B also stops once an iteration reduces the loss by less than
        this fraction.
    callback : callable, optional
        ``callback(x, loss) -> bool`` after every iteration; True stops the
        run (``stopped``).

    Returns
    -------
    LBFGSResult
        The last iterate and how the run ended.
    """
    from scipy.optimize import minimize
    from threadpoolctl import threadpool_limits

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

    x0 = np.asarray(x0, dtype=np.float64)
    evaluate(x0)
    gmax = last["out"][2]
    if gmax <= tol or max_iter <= 0:
        return result(x0, gmax <= tol, False, "converged at the start")
    options = {"maxiter": int(max_iter), "gtol": 0.0, "ftol": float(ftol), "maxfun": 20 * int(max_iter) + 20}
    try:
        # L-BFGS-B's own work is vector operations on the parameters, where threads do not pay
        # off; and numpy's BLAS threads, waiting for work, take the cores from torch's.
        with threadpool_limits(limits=1, user_api="blas"):
            res = minimize(evaluate, x0, jac=True, method="L-BFGS-B", callback=on_iter, options=options)
    except _Stop as stop:
        how = (
            "stopped by the callback" if stop.stopped else f"largest gradient entry {last['out'][2]:.3g} <= tol={tol:g}"
        )
        return result(last["xk"], stop.converged, stop.stopped, how)
    return result(res.x, bool(res.success), False, str(res.message))
