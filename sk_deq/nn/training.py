"""One training loop for every estimator of the package.

:func:`train` fits a module that maps a batch of inputs to logits (a DEQ or
an explicit net with its readout, or the readout alone on cached features)
with cross-entropy (logistic loss for one logit) or, for regression, the
squared error, an L2 penalty on chosen parameters, and

- minibatch Adam or SGD (with Nesterov momentum), shuffled with a seeded
  ``numpy.random.RandomState``; or
- full-batch L-BFGS (scipy's L-BFGS-B on the flattened parameters), for
  which one "epoch" is one L-BFGS iteration.

Sample weights multiply every sample's loss; the loss is the weighted mean,
so integer weights act as repeated rows.

Stopping: with a validation set the validation *loss* (weighted
cross-entropy or squared error) is monitored, the parameters of the epoch with the lowest one
are restored at the end, and training stops after ``n_iter_no_change``
epochs without an improvement of at least ``improvement_tol``; without one
the training loss is monitored the same way.  The validation loss rather
than its accuracy: a readout from zero improves its loss long after the
accuracy of a small validation set has stopped moving in steps of one
sample, and stopping on those plateaus cost up to 6 accuracy points
(``DEQClassifier(optimizer='adam', early_stopping=True)`` on digits stopped
at epoch 13 with a training loss of 1.96).  The validation accuracy is
recorded too (the coefficient of determination R² for the squared loss).
``verbose`` prints one line per epoch and, from
``verbose >= 2``, a progress bar over the minibatches of each epoch.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .._progress import ProgressBar  # re-exported: sk_deq.nn.training.ProgressBar is imported elsewhere
from .deq import DEQDivergenceError
from .readout import LOSSES, LinearReadout, ReadoutObjective, fit_readout

__all__ = ["LOSSES", "OPTIMIZERS", "TrainResult", "ProgressBar", "train", "predict_logits"]

#: Optimizers accepted by :func:`train`.
OPTIMIZERS = ("adam", "sgd", "lbfgs")


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
    stopped_early : bool, default=False
        Whether training stopped on the validation loss.
    best_score : float or None, default=None
        Validation accuracy (R² for the squared loss) of the restored (lowest validation loss) epoch;
        None without a validation set.
    best_valid_loss : float or None, default=None
        Lowest validation loss; None without a validation set.
    best_loss : float, default=inf
        Lowest training loss.
    message : str, default=''
        How training ended.
    """

    history: list = field(default_factory=list)
    n_epochs: int = 0
    converged: bool = False
    stopped_early: bool = False
    best_score: float | None = None
    best_valid_loss: float | None = None
    best_loss: float = math.inf
    message: str = ""


class _StopTraining(Exception):
    pass


def _loss_sum(
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


def _score(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, loss: str) -> float:
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


def _normalised_weights(weight, n: int, device):
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


def _penalty(params, alpha: float):
    if not alpha or not params:
        return None
    return 0.5 * alpha * sum((p * p).sum() for p in params)


class _Monitor:
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


class _Printer:
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


def train(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    sample_weight: torch.Tensor | None = None,
    X_val: torch.Tensor | None = None,
    y_val: torch.Tensor | None = None,
    val_weight: torch.Tensor | None = None,
    optimizer: str = "adam",
    learning_rate: float = 1e-3,
    batch_size: int = 200,
    max_epochs: int = 200,
    alpha: float = 0.0,
    penalized=(),
    n_iter_no_change: int = 10,
    improvement_tol: float = 1e-4,
    rng: np.random.RandomState | None = None,
    verbose: int = 0,
    epoch_offset: int = 0,
    chunk_size: int | None = None,
    after_step=None,
    stream=None,
    torch_optimizer: torch.optim.Optimizer | None = None,
    loss: str = "cross_entropy",
) -> TrainResult:
    """Train ``model`` (inputs -> outputs) with cross-entropy or squared error.

    The loss is the (weighted) mean cross-entropy of the training set (the
    logistic loss for one logit) or mean squared error, plus the L2 penalty; the stopping rule is
    described in the module :mod:`sk_deq.nn.training`.  The parameters of
    ``model`` are trained in place (every parameter with ``requires_grad``).

    Parameters
    ----------
    model : torch.nn.Module
        Maps a batch of ``X`` to logits of shape (n, 1) (binary, logistic
        loss on the logit of the second class) or (n, n_classes).
    X : torch.Tensor of shape (n, ...)
        Training inputs, on the model's device.
    y : torch.Tensor of shape (n,) or (n, n_outputs)
        Integer targets ``0 .. n_classes-1`` (0 or 1 for one logit), or real
        targets for ``loss='squared'``, on the model's device.
    sample_weight : array-like of shape (n,), optional
        Non-negative weight of every training sample: the loss is the
        weighted mean, so integer weights act as repeated rows.  A minibatch
        uses the weights of its samples, scaled so that its loss is an
        unbiased estimate of the weighted mean.  None weighs all samples
        equally.
    X_val : torch.Tensor of shape (n_val, ...), optional
        Validation inputs; with ``y_val``, the validation loss drives early
        stopping and the parameters of the epoch with the lowest validation
        loss are restored at the end.
    y_val : torch.Tensor of shape (n_val,), optional
        Validation targets; without them (or with none) the training loss is
        monitored.
    val_weight : array-like of shape (n_val,), optional
        Weights of the validation samples (in its loss and score).
    optimizer : {'adam', 'sgd', 'lbfgs'}, default='adam'
        Minibatch Adam or SGD (Nesterov momentum 0.9), or full-batch L-BFGS
        (scipy's L-BFGS-B on the flattened parameters).  A trial point of
        L-BFGS's line search at which a DEQ's fixed point diverges
        (:class:`~sk_deq.nn.DEQDivergenceError`) counts as an infinite loss,
        and the search backs off; at the starting point it is an error.
    learning_rate : float, default=1e-3
        Step size of Adam / SGD (ignored by L-BFGS).
    batch_size : int, default=200
        Minibatch size of Adam / SGD, capped at ``n`` (L-BFGS uses the full
        batch).
    max_epochs : int, default=200
        Largest number of epochs (L-BFGS: iterations).
    alpha : float, default=0.0
        L2 penalty ``alpha/2 * sum ||p||^2`` over ``penalized``, added to the
        mean loss.
    penalized : sequence of torch.nn.Parameter, default=()
        The parameters the penalty applies to.
    n_iter_no_change : int, default=10
        Patience of the stopping rule: training stops once the monitored
        loss has not improved by ``improvement_tol`` for more than this many
        epochs (L-BFGS without a validation set stops on its own criteria).
    improvement_tol : float, default=1e-4
        Minimal improvement of the monitored loss (and the projected-gradient
        tolerance ``gtol`` of L-BFGS).
    rng : numpy.random.RandomState, optional
        Source of the minibatch order; None uses ``RandomState(0)``.
    verbose : int, default=0
        0 silent, 1 one line per epoch, 2 also a progress bar over the
        minibatches of every epoch.
    epoch_offset : int, default=0
        Number of the first epoch minus one (for warm starts); it only
        labels the epochs.
    chunk_size : int, optional
        Rows per forward pass when evaluating full-batch losses and scores
        (L-BFGS, validation); None uses all rows at once.
    after_step : callable, optional
        Called with no argument after every optimizer step (L-BFGS: every
        evaluation of the loss; every iteration for a linear model, which
        :mod:`sk_deq.nn.readout` trains), e.g. to collect solver
        diagnostics.
    stream : file-like, optional
        Where verbose output goes (``sys.stdout`` by default).
    torch_optimizer : torch.optim.Optimizer, optional
        A minibatch optimizer over the trainable parameters of ``model`` to
        step instead of a new one of kind ``optimizer`` (which must then be
        ``'adam'`` or ``'sgd'``); its state, Adam's moments or SGD's
        momentum, carries over from call to call (this is how
        ``partial_fit`` continues).  Its own learning rate is used.
    loss : {'cross_entropy', 'squared'}, default='cross_entropy'
        The per-sample loss: cross-entropy of the softmax of the outputs
        (logistic for one output), or half the squared error summed over
        the outputs.  The validation score is the accuracy, or R² averaged
        over the outputs.

    Returns
    -------
    TrainResult
        The history of every epoch, how training ended and the best losses.

    Raises
    ------
    ValueError
        For an unknown ``optimizer``, a model without trainable parameters,
        sample weights of the wrong shape, negative, non-finite or all zero,
        or a ``torch_optimizer`` with ``optimizer='lbfgs'``.
    FloatingPointError
        If the training loss becomes infinite or NaN.

    Examples
    --------
    A logistic regression (a linear model with two logits) on separable
    data, trained by L-BFGS with a small penalty on the weights:

    >>> import torch
    >>> from sk_deq.nn import predict_logits, train
    >>> _ = torch.manual_seed(0)
    >>> X = torch.randn(200, 2)
    >>> y = (X[:, 0] > X[:, 1]).long()
    >>> model = torch.nn.Linear(2, 2)
    >>> result = train(model, X, y, optimizer="lbfgs", max_epochs=100, alpha=1e-3, penalized=[model.weight])
    >>> result.converged, result.n_epochs == len(result.history)
    (True, True)
    >>> float((predict_logits(model, X).argmax(dim=1) == y).double().mean())
    1.0
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}.")
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {list(LOSSES)}, got {loss!r}.")
    rng = np.random.RandomState(0) if rng is None else rng
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("The model has no trainable parameters.")
    penalized = list(penalized)
    w = _normalised_weights(sample_weight, X.shape[0], X.device)
    use_val = X_val is not None and y_val is not None and len(y_val) > 0
    w_val = _normalised_weights(val_weight, len(y_val), X.device) if use_val and val_weight is not None else None
    monitor = _Monitor(params, use_val, n_iter_no_change, improvement_tol)
    printer = _Printer(verbose >= 1, use_val, stream, "valid_r2" if loss == "squared" else "valid_acc")
    valid = (X_val, y_val, w_val) if use_val else None
    epochs = _Epochs(model, monitor, printer, epoch_offset, chunk_size, valid, loss)

    if optimizer == "lbfgs":
        if torch_optimizer is not None:
            raise ValueError("torch_optimizer continues a minibatch optimizer; it cannot be used with 'lbfgs'.")
        linear = _linear_readout(model, params, penalized)
        if linear is not None:
            alpha = alpha if penalized else 0.0
            _train_lbfgs_linear(linear, X, y, w, alpha, max_epochs, improvement_tol, epochs, after_step)
        else:
            _train_lbfgs(model, X, y, w, params, penalized, alpha, max_epochs, improvement_tol, epochs, after_step)
    else:
        opt = _make_optimizer(optimizer, params, learning_rate) if torch_optimizer is None else torch_optimizer
        _train_minibatch(
            model,
            X,
            y,
            w,
            opt,
            penalized,
            alpha,
            epochs,
            batch_size=batch_size,
            max_epochs=max_epochs,
            rng=rng,
            verbose=verbose,
            stream=stream,
            after_step=after_step,
            n_iter_no_change=n_iter_no_change,
            improvement_tol=improvement_tol,
        )
    return epochs.finish()


def _make_optimizer(kind: str, params, learning_rate: float) -> torch.optim.Optimizer:
    """A new Adam (torch's defaults) or SGD (Nesterov momentum 0.9) optimizer over ``params``."""
    if kind == "adam":
        return torch.optim.Adam(params, lr=learning_rate)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=learning_rate, momentum=0.9, nesterov=True)
    raise ValueError(f"{kind!r} is not a minibatch optimizer; use 'adam' or 'sgd'.")


class _Epochs:
    """The end of every epoch: validation, the stopping rule's bookkeeping, the history and the verbose row."""

    def __init__(
        self,
        model,
        monitor: _Monitor,
        printer: _Printer,
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
        loss = float(_loss_sum(logits, y_val, w_val, self.loss)) / m
        return loss, _score(logits, y_val, w_val, self.loss)

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
        if not math.isfinite(loss):
            raise FloatingPointError(
                f"The training loss became {loss} at epoch {rec['epoch']}; lower the learning_rate."
            )

    def finish(self) -> TrainResult:
        """Restore the best parameters (with a validation set) and fill in the result."""
        monitor, result, use_val = self.monitor, self.result, self.monitor.use_val
        monitor.restore()
        result.best_score = monitor.best_score if use_val else None
        result.best_valid_loss = monitor.best_valid_loss if use_val else None
        result.best_loss = monitor.best_loss
        return result


def _train_minibatch(
    model,
    X,
    y,
    w,
    opt,
    penalized,
    alpha,
    epochs,
    *,
    batch_size,
    max_epochs,
    rng,
    verbose,
    stream,
    after_step,
    n_iter_no_change,
    improvement_tol,
):
    """Epochs of shuffled minibatch steps until the stopping rule or ``max_epochs``."""
    n = X.shape[0]
    bs = max(1, min(int(batch_size), n))
    n_batches = math.ceil(n / bs)
    monitor, result = epochs.monitor, epochs.result
    for _ in range(int(max_epochs)):
        t0 = time.perf_counter()
        order = torch.from_numpy(rng.permutation(n)).to(X.device)
        with ProgressBar(n_batches, f"epoch {epochs.number}", enabled=verbose >= 2, stream=stream) as bar:
            total = _minibatch_epoch(model, X, y, w, order, bs, opt, penalized, alpha, after_step, bar, epochs.loss)
        epochs.end(total / n, t0)
        if monitor.stop:
            result.converged = True
            result.stopped_early = monitor.use_val
            what = "validation loss" if monitor.use_val else "training loss"
            result.message = f"{what} did not improve by {improvement_tol:g} for {n_iter_no_change} epochs"
            return
    result.message = f"reached max_epochs={max_epochs}"


def _minibatch_epoch(model, X, y, w, order, bs, opt, penalized, alpha, after_step, bar, loss_kind) -> float:
    """One pass over the minibatches of ``order``; returns the summed loss (data and penalty)."""
    n = X.shape[0]
    total = 0.0
    for i in range(0, n, bs):
        idx = order[i : i + bs]
        opt.zero_grad(set_to_none=True)
        data = _loss_sum(model(X[idx]), y[idx], None if w is None else w[idx], loss_kind)
        loss = data / len(idx)
        pen = _penalty(penalized, alpha)
        if pen is not None:
            loss = loss + pen
        loss.backward()
        opt.step()
        if after_step is not None:
            after_step()
        total += float(data.detach()) + (float(pen.detach()) * len(idx) if pen is not None else 0.0)
        bar.update()
    return total


def _linear_readout(model, params, penalized) -> nn.Linear | None:
    """The ``nn.Linear`` of a linear model the fused readout solver can train (penalty on its weight only), or None."""
    linear = model.linear if isinstance(model, LinearReadout) else model
    if type(linear) is not nn.Linear or linear.bias is None:
        return None
    if len(params) != 2 or {id(p) for p in params} != {id(linear.weight), id(linear.bias)}:
        return None
    if any(p is not linear.weight for p in penalized):
        return None
    return linear


def _train_lbfgs_linear(linear, X, y, w, alpha, max_epochs, tol, epochs, after_step):
    """L-BFGS-B on a linear model: fused loss and gradient, preconditioned variables (:mod:`sk_deq.nn.readout`)."""
    result = epochs.result
    # all rows in one pass: the loss's temporaries are n x k (logits), not n x m, and
    # one pass is the fastest (measured: 0.48 s against 0.60 s in chunks of 1,024 rows)
    objective = ReadoutObjective(X, y, linear.out_features, alpha, w, loss=epochs.loss)
    t0 = [time.perf_counter()]

    def callback(loss):
        if after_step is not None:
            after_step()
        epochs.end(loss, t0[0])
        t0[0] = time.perf_counter()
        if epochs.monitor.use_val and epochs.monitor.stop:
            raise _StopTraining

    try:
        info = fit_readout(linear, objective, max_iter=max_epochs, tol=tol, callback=callback)
    except _StopTraining:
        result.converged = True
        result.stopped_early = True
        result.message = f"validation loss did not improve by {tol:g} for {epochs.monitor.n_iter_no_change} iterations"
        return
    if result.n_epochs == 0:  # converged at the starting point: record it
        epochs.end(info["loss"], t0[0])
    result.converged = bool(info["converged"])
    result.message = info["message"]


def _train_lbfgs(model, X, y, w, params, penalized, alpha, max_epochs, tol, epochs, after_step):
    """Full-batch L-BFGS-B (scipy) on the flattened parameters; one iteration is one epoch."""
    from scipy.optimize import minimize
    from threadpoolctl import threadpool_limits

    monitor, result, end_epoch = epochs.monitor, epochs.result, epochs.end
    n = X.shape[0]
    chunk = n if not epochs.chunk_size else int(epochs.chunk_size)
    sizes = [p.numel() for p in params]
    last = {"loss": math.nan, "t0": time.perf_counter(), "n_eval": 0}

    def set_params(v):
        # one float64 vector for scipy; each parameter keeps its own dtype
        v = torch.from_numpy(np.asarray(v, dtype=np.float64))
        with torch.no_grad():
            for p, part in zip(params, torch.split(v, sizes)):
                p.copy_(part.view_as(p))

    def fun(v):
        set_params(v)
        for p in params:
            p.grad = None
        total = 0.0
        try:
            for i in range(0, n, chunk):
                sl = slice(i, i + chunk)
                loss = _loss_sum(model(X[sl]), y[sl], None if w is None else w[sl], epochs.loss) / n
                loss.backward()
                total += float(loss.detach())
        except DEQDivergenceError:
            # A trial point of the line search left the region where the fixed point exists:
            # an infinite loss makes L-BFGS-B back off (the starting point must be finite).
            if last["n_eval"] == 0:
                raise
            last["n_eval"] += 1
            return math.inf, np.zeros(sum(sizes))
        last["n_eval"] += 1
        pen = _penalty(penalized, alpha)
        if pen is not None:
            pen.backward()
            total += float(pen.detach())
        if after_step is not None:
            after_step()
        grad = torch.cat(
            [
                (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to("cpu", torch.float64)
                for p in params
            ]
        )
        last["loss"] = total
        return total, grad.numpy()

    def callback(vk):
        set_params(vk)
        end_epoch(last["loss"], last["t0"])
        last["t0"] = time.perf_counter()
        if monitor.use_val and monitor.stop:
            raise _StopTraining

    v0 = torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in params]).numpy()
    try:
        # L-BFGS-B's own work is vector operations on the parameters: threads do
        # not pay off at this size, and on a busy machine they stall.
        with threadpool_limits(limits=1, user_api="blas"):
            res = minimize(
                fun,
                v0,
                jac=True,
                method="L-BFGS-B",
                callback=callback,
                options={"maxiter": int(max_epochs), "gtol": float(tol), "maxfun": 20 * int(max_epochs) + 20},
            )
    except _StopTraining:
        result.converged = True
        result.stopped_early = True
        result.message = f"validation loss did not improve by {tol:g} for {monitor.n_iter_no_change} iterations"
        return
    set_params(res.x)
    if result.n_epochs == 0:  # converged at the starting point: record it
        end_epoch(last["loss"], last["t0"])
    result.converged = bool(res.success)
    result.message = str(res.message)
