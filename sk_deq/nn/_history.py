"""What every epoch of training records: losses, validation, the stopping rule, the history.

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
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ._lbfgs import LBFGSResult

__all__ = [
    "EXPLOSION_FACTOR",
    "LOSSES",
    "Epochs",
    "TrainResult",
    "TrainingDivergenceError",
    "loss_sum",
    "normalised_weights",
    "predict_logits",
    "start_epochs",
]

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
        self.best_score = None
        self.count = 0
        self.best_state = None

    def update(self, loss: float, valid_loss: float | None, score: float | None) -> bool:
        """Record one epoch; return whether it improved the monitored quantity."""
        watched, best = (valid_loss, self.best_valid_loss) if self.use_val else (loss, self.best_loss)
        improved = watched < best
        self.count = self.count + 1 if watched > best - self.tol else 0
        self.best_loss = min(self.best_loss, loss)
        if self.use_val and improved:
            self.best_valid_loss = valid_loss
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


class Printer:
    def __init__(self, enabled: bool, with_score: bool, stream=None, score_name: str = "valid_acc"):
        self.enabled = enabled
        self.with_score = with_score
        self.score_name = score_name
        self.stream = stream
        self.header_done = False

    def _write(self, s):
        stream = self.stream or sys.stdout
        stream.write(s + "\n")
        stream.flush()

    def row(self, rec: dict):
        if not self.enabled:
            return
        if not self.header_done:
            cols = (
                f"{'epoch':>7}  {'train_loss':>12}"
                + (f"  {'valid_loss':>12}  {self.score_name:>10}" if self.with_score else "")
                + f"  {'dur':>7}"
            )
            self._write(cols)
            self._write("-" * len(cols))
            self.header_done = True
        mark = "*" if rec["best"] else " "
        line = f"{rec['epoch']:>7}  {rec['train_loss']:>12.6f}"
        if self.with_score:
            line += f"  {rec['valid_loss']:>12.6f}  {rec['valid_score']:>10.4f}"
        line += f"  {rec['dur']:>6.2f}s {mark}"
        self._write(line)


class Epochs:
    """The end of every epoch: validation, the stopping rule's bookkeeping, the history and the verbose row."""

    def __init__(
        self,
        model,
        monitor: Monitor,
        printer: Printer,
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
        self.reference = None  # the loss an exploding one is measured against (minibatch training sets it)
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
    printer = Printer(verbose >= 1, use_val, stream, "valid_r2" if loss == "squared" else "valid_acc")
    valid = (X_val, y_val, w_val) if use_val else None
    return Epochs(model, monitor, printer, epoch_offset, chunk_size, valid, loss)
