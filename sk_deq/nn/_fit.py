"""What every training run of a network shares: the L-BFGS driver, the losses, and the history of its epochs.

**L-BFGS.**  The one L-BFGS driver: scipy's L-BFGS-B on the host, or a float64 L-BFGS in torch on the device.

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

**The history.**  What every epoch of training records: losses, validation, the stopping rule, the history.

:func:`sk_deq.nn.train` (end-to-end training) and
:func:`sk_deq.nn.readout.train_readout` (the readout on cached features)
share this bookkeeping.  With a validation set the validation *loss*
(weighted cross-entropy or squared error) is monitored, the parameters of
the epoch with the lowest one are restored at the end, and training stops
after ``n_iter_no_change`` epochs without an improvement of at least
``improvement_tol``; without one the training loss is monitored the same
way.  The validation loss rather than its accuracy: a readout from zero
improves its loss long after the accuracy of a small validation set has
stopped moving in steps of one sample.  The validation accuracy is recorded
too (the coefficient of determination R² for the squared loss).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
import numpy as np
import torch
from ._lbfgs_torch import minimize_torch
from .._runtime import on_gpu, one_blas_thread
import time
from dataclasses import field
import torch.nn.functional as F
from torch import nn
from .._progress import EpochPrinter

__all__ = [
    "BACKENDS",
    "EXPLOSION_FACTOR",
    "Epochs",
    "LBFGSResult",
    "LOSSES",
    "TrainResult",
    "TrainingDivergenceError",
    "loss_sum",
    "minimize_lbfgs",
    "normalised_weights",
    "predict_logits",
    "start_epochs",
]


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
    stops: dict[str, Any] = dict(
        max_iter=int(max_iter), tol=float(tol), ftol=float(ftol), callback=callback, max_eval=max_eval
    )
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

    last: dict[str, Any] = {"x": None, "out": None, "n_eval": 0, "n_iter": 0}

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


#: The per-sample losses: cross-entropy (classification) and squared error (regression).
LOSSES = ("cross_entropy", "squared")

#: Minibatch training stops with a :class:`TrainingDivergenceError` when an epoch's mean loss, or the loss after
#: the last step, exceeds this many times its reference: by default the larger of the loss at the start and the
#: loss of zero outputs (``log k`` of the cross-entropy of ``k`` classes, half the mean square of the targets),
#: which no useful step size leaves that far behind.
EXPLOSION_FACTOR = 100.0


class TrainingDivergenceError(FloatingPointError):
    """Training diverged: the loss became infinite or NaN, or grew far above its start (:data:`EXPLOSION_FACTOR`).

    Parameters
    ----------
    symptom : str
        What happened (the message without its advice).
    advice : str, default=''
        What to change, in the caller's terms (:func:`~sk_deq.nn.train`:
        its ``learning_rate``; an estimator: its ``learning_rate_init``).

    Attributes
    ----------
    symptom, advice : str
        The two parts of the message, so that a caller can restate the advice.
    """

    def __init__(self, symptom: str = "", advice: str = ""):
        super().__init__(f"{symptom}; {advice}." if advice else symptom)
        self.symptom, self.advice = symptom, advice


@dataclass
class TrainResult:
    """Outcome of :func:`train`.

    Returned by :func:`train`, which fills it in epoch by epoch; every
    parameter is stored as an attribute of the same name.

    Parameters
    ----------
    history : list of dict, default=[]
        One entry per epoch: ``epoch`` (its number, counted from
        ``epoch_offset + 1``), ``train_loss`` (mean loss with the penalty),
        ``valid_loss`` and ``valid_score`` (validation loss and accuracy,
        or R² for the squared loss; None without a validation set), ``best`` (whether it improved the
        monitored loss), ``dur`` (seconds).
    n_epochs : int, default=0
        Epochs (L-BFGS: iterations) run in this call.
    converged : bool, default=False
        Whether a stopping criterion was met before ``max_epochs``.
    best_score : float or None, default=None
        Validation accuracy (R² for the squared loss) of the restored (lowest validation loss) epoch;
        None without a validation set.
    best_valid_loss : float or None, default=None
        Lowest validation loss; None without a validation set.
    best_loss : float, default=inf
        Lowest training loss.
    message : str, default=''
        How training ended.
    loss_reference : float or None, default=None
        The loss minibatch training measured an exploding one against (see
        :data:`EXPLOSION_FACTOR`); None for L-BFGS and the closed form.
    """

    history: list = field(default_factory=list)
    n_epochs: int = 0
    converged: bool = False
    best_score: float | None = None
    best_valid_loss: float | None = None
    best_loss: float = math.inf
    message: str = ""
    loss_reference: float | None = None


def loss_sum(
    logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None, loss: str = "cross_entropy"
) -> torch.Tensor:
    """Sum of the (weighted) loss of a batch.

    Cross-entropy (one logit: the logistic loss) of integer targets, or half
    the squared error summed over the outputs of real targets.
    """
    reduction = "sum" if weight is None else "none"
    if loss == "squared":
        per = 0.5 * (logits - target.reshape(logits.shape)).square().sum(dim=1)
        return per.sum() if weight is None else (per * weight.to(per.dtype)).sum()
    if logits.shape[1] == 1:
        out = F.binary_cross_entropy_with_logits(logits[:, 0], target.to(logits.dtype), reduction=reduction)
    else:
        out = F.cross_entropy(logits, target, reduction=reduction)
    return out if weight is None else (out * weight.to(out.dtype)).sum()


def score(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, loss: str) -> float:
    """Accuracy (cross-entropy) or R² averaged over the outputs (squared loss), weighted."""
    w = torch.ones(len(target), dtype=torch.float64, device=logits.device) if weight is None else weight
    w = w.to(torch.float64)
    if loss != "squared":
        pred = (logits[:, 0] > 0).long() if logits.shape[1] == 1 else logits.argmax(dim=1)
        return float(((pred == target).double() * w).sum() / w.sum())
    y = target.reshape(logits.shape).to(torch.float64)
    mean = (w[:, None] * y).sum(dim=0) / w.sum()
    residual = (w[:, None] * (y - logits.to(torch.float64)).square()).sum(dim=0)
    total = (w[:, None] * (y - mean).square()).sum(dim=0)
    # as sklearn's r2_score: a constant target scores 1 when predicted exactly, else 0
    r2 = torch.where(total > 0, 1.0 - residual / total.clamp_min(1e-300), (residual == 0).double())
    return float(r2.mean())


def normalised_weights(weight, n: int, device):
    """Weights scaled to mean one (so that the mean loss is the weighted mean), or None."""
    if weight is None:
        return None
    w = torch.as_tensor(weight, dtype=torch.float64, device=device)
    if w.shape != (n,):
        raise ValueError(f"sample weights must have shape ({n},), got {tuple(w.shape)}.")
    total = float(w.sum())
    if not (total > 0 and bool(torch.isfinite(w).all()) and bool((w >= 0).all())):
        raise ValueError("sample weights must be finite, non-negative and not all zero.")
    return w * (n / total)


def predict_logits(model: nn.Module, X: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """Logits of ``model`` on ``X`` in chunks, without gradients.

    Parameters
    ----------
    model : torch.nn.Module
        Maps a batch of inputs to logits.
    X : torch.Tensor of shape (n_samples, ...)
        Inputs, on the model's device.
    chunk_size : int or None, default=None
        Rows per forward pass, to bound memory; None (or 0) passes all rows
        at once.

    Returns
    -------
    torch.Tensor of shape (n_samples, n_outputs)
        The logits, the chunks' outputs concatenated in order.

    Examples
    --------
    >>> import torch
    >>> from sk_deq.nn import predict_logits
    >>> model = torch.nn.Linear(3, 2)
    >>> predict_logits(model, torch.ones(10, 3), chunk_size=4).shape
    torch.Size([10, 2])
    """
    n = X.shape[0]
    chunk = n if not chunk_size else int(chunk_size)
    with torch.no_grad():
        return torch.cat([model(X[i : i + chunk]) for i in range(0, n, max(chunk, 1))]) if n else model(X)


_ADVICE = "lower the learning_rate"


class Monitor:
    """MLP-style stopping rule and best-parameter bookkeeping.

    Monitors the validation loss when there is a validation set (and keeps
    the parameters of its best epoch), the training loss otherwise.
    """

    def __init__(self, params, use_val: bool, n_iter_no_change: int, tol: float):
        self.params = params
        self.use_val = use_val
        self.n_iter_no_change = int(n_iter_no_change)
        self.tol = float(tol)
        self.best_loss = math.inf
        self.best_valid_loss = math.inf
        self.best_score: float | None = None
        self.count = 0
        self.best_state: list[torch.Tensor] | None = None

    def update(self, loss: float, valid_loss: float | None, score: float | None) -> bool:
        """Record one epoch; return whether it improved the monitored quantity."""
        watched, best = (valid_loss, self.best_valid_loss) if self.use_val else (loss, self.best_loss)
        assert watched is not None  # a validation loss with use_val
        improved = watched < best
        self.count = self.count + 1 if watched > best - self.tol else 0
        self.best_loss = min(self.best_loss, loss)
        if self.use_val and improved:
            self.best_valid_loss = watched
            self.best_score = score
            self.best_state = [p.detach().clone() for p in self.params]
        return improved

    @property
    def stop(self) -> bool:
        return self.count > self.n_iter_no_change

    def restore(self):
        if self.use_val and self.best_state is not None:
            with torch.no_grad():
                for p, b in zip(self.params, self.best_state):
                    p.copy_(b)


class Epochs:
    """The end of every epoch: validation, the stopping rule's bookkeeping, the history and the verbose row."""

    def __init__(
        self,
        model,
        monitor: Monitor,
        printer: EpochPrinter | None,
        epoch_offset: int,
        chunk_size,
        valid=None,
        loss="cross_entropy",
    ):
        self.model = model
        self.loss = loss
        self.monitor = monitor
        self.printer = printer
        self.epoch_offset = epoch_offset
        self.chunk_size = chunk_size
        self.valid = valid  # (X_val, y_val, w_val) or None
        self.result = TrainResult()
        self.t0 = time.perf_counter()  # start of the running L-BFGS iteration
        self.reference: float | None = (
            None  # the loss an exploding one is measured against (minibatch training sets it)
        )
        self.result.loss_reference = None

    @property
    def number(self) -> int:
        """Number of the epoch running (for labels)."""
        return self.epoch_offset + self.result.n_epochs + 1

    def validate(self):
        """Loss and score (accuracy or R²) on the validation set (``(None, None)`` without one)."""
        if self.valid is None:
            return None, None
        X_val, y_val, w_val = self.valid
        logits = predict_logits(self.model, X_val, self.chunk_size)
        m = len(y_val)
        loss = float(loss_sum(logits, y_val, w_val, self.loss)) / m
        return loss, score(logits, y_val, w_val, self.loss)

    def end(self, loss, t0):
        """Record an epoch of training loss ``loss`` started at ``t0``."""
        valid_loss, score = self.validate()
        best = self.monitor.update(loss, valid_loss, score)
        rec = {
            "epoch": self.number,
            "train_loss": float(loss),
            "valid_loss": valid_loss,
            "valid_score": score,
            "best": bool(best),
            "dur": time.perf_counter() - t0,
        }
        self.result.history.append(rec)
        self.result.n_epochs += 1
        if self.printer is not None:
            self.printer.row(rec)
        self.check(loss, f"at epoch {rec['epoch']}")

    def check(self, loss: float, when: str) -> None:
        """Raise :class:`TrainingDivergenceError` for a non-finite ``loss``, or one far above :attr:`reference`."""
        if not math.isfinite(loss):
            raise TrainingDivergenceError(f"the training loss became {loss} {when}", _ADVICE)
        ref = self.reference
        if ref is not None and ref > 0 and loss > EXPLOSION_FACTOR * ref:
            raise TrainingDivergenceError(
                f"the training loss grew to {loss:.3g} {when}, more than {EXPLOSION_FACTOR:g} times {ref:.3g}, the "
                "larger of its value at the start and that of zero outputs: the optimizer diverged",
                _ADVICE,
            )

    def set_reference(self, start, zero, n: int) -> None:
        """Set :attr:`reference` (if unset) from the summed losses of ``n`` rows at the start and for zero outputs."""
        if self.reference is None and n > 0:
            self.reference = self.result.loss_reference = max(float(start), float(zero)) / n

    def finish(self) -> TrainResult:
        """Restore the best parameters (with a validation set) and fill in the result."""
        monitor, result, use_val = self.monitor, self.result, self.monitor.use_val
        monitor.restore()
        result.best_score = monitor.best_score if use_val else None
        result.best_valid_loss = monitor.best_valid_loss if use_val else None
        result.best_loss = monitor.best_loss
        return result

    def lbfgs_iteration(self, loss: float) -> bool:
        """Record an L-BFGS iteration as an epoch; True when the validation loss says stop."""
        self.end(loss, self.t0)
        self.t0 = time.perf_counter()
        return self.monitor.use_val and self.monitor.stop

    def lbfgs_finish(self, res: LBFGSResult, tol: float) -> TrainResult:
        """Fill in how an L-BFGS run ended (a start that met the test is recorded as one epoch)."""
        result = self.result
        if res.stopped:
            result.converged = True
            n = self.monitor.n_iter_no_change
            result.message = f"validation loss did not improve by {tol:g} for {n} iterations"
        else:
            if result.n_epochs == 0:
                self.end(res.loss, self.t0)
            result.converged, result.message = res.converged, res.message
        return self.finish()


def start_epochs(
    model,
    params,
    *,
    X_val=None,
    y_val=None,
    val_weight=None,
    n_iter_no_change: int = 10,
    improvement_tol: float = 1e-4,
    verbose: int = 0,
    stream=None,
    epoch_offset: int = 0,
    chunk_size=None,
    loss: str = "cross_entropy",
) -> Epochs:
    """The bookkeeping of a training run of ``model`` (monitoring ``params``); see :class:`Epochs`."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {list(LOSSES)}, got {loss!r}.")
    use_val = X_val is not None and y_val is not None and len(y_val) > 0
    w_val = normalised_weights(val_weight, len(y_val), X_val.device) if use_val and val_weight is not None else None
    monitor = Monitor(params, use_val, n_iter_no_change, improvement_tol)
    printer = (
        EpochPrinter(True, use_val, stream, "valid_r2" if loss == "squared" else "valid_acc") if verbose >= 1 else None
    )
    valid = (X_val, y_val, w_val) if use_val else None
    return Epochs(model, monitor, printer, epoch_offset, chunk_size, valid, loss)
