"""End-to-end training of a network: minibatch Adam or SGD, or full-batch L-BFGS.

:func:`train` fits a module that maps a batch of inputs to outputs (a DEQ or
an explicit net with its readout) with cross-entropy (logistic loss for one
logit) or, for regression, the squared error, an L2 penalty on chosen
parameters, and

- minibatch Adam or SGD (with Nesterov momentum), shuffled with a seeded
  ``numpy.random.RandomState``; or
- full-batch L-BFGS (:func:`sk_deq.nn._fit.minimize_lbfgs` on the
  flattened parameters), for which one "epoch" is one L-BFGS iteration.

Sample weights multiply every sample's loss; the loss is the weighted mean,
so integer weights act as repeated rows.  The stopping rule and the history
are those of :mod:`sk_deq.nn._fit`.  ``verbose`` prints one line per
epoch and, from ``verbose >= 2``, a progress bar over the minibatches of
each epoch.  A readout alone, on cached features, is fitted by
:func:`sk_deq.nn.readout.train_readout`.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import nn

from .._progress import ProgressBar
from .._validation import check_targets
from .layers import DEQDivergenceError
from ._fit import _ADVICE, TrainingDivergenceError, TrainResult, loss_sum, normalised_weights, start_epochs
from ._fit import minimize_lbfgs

__all__ = ["OPTIMIZERS", "DEQTrainingDivergenceError", "make_optimizer", "train"]

#: Optimizers accepted by :func:`train`.
OPTIMIZERS = ("adam", "sgd", "lbfgs")


class DEQTrainingDivergenceError(TrainingDivergenceError, DEQDivergenceError):
    """A DEQ's fixed point diverged after training steps: the step size took the weights where none exists.

    Both a :class:`~sk_deq.nn.TrainingDivergenceError` (the cause is the
    optimizer's step size) and a :class:`~sk_deq.nn.DEQDivergenceError`
    (what failed is the fixed point).

    Parameters
    ----------
    symptom : str
        What happened (the message without its advice).
    advice : str, default=''
        What to change, in the caller's terms.
    """


def _penalty(params, alpha: float):
    if not alpha or not params:
        return None
    return 0.5 * alpha * sum((p * p).sum() for p in params)


def train(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    sample_weight: ArrayLike | torch.Tensor | None = None,
    X_val: torch.Tensor | None = None,
    y_val: torch.Tensor | None = None,
    val_weight: ArrayLike | torch.Tensor | None = None,
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
    stream=None,
    torch_optimizer: torch.optim.Optimizer | None = None,
    loss: str = "cross_entropy",
    lbfgs_backend: str = "auto",
    loss_reference: float | None = None,
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
        (on the flattened parameters; see ``lbfgs_backend``).  A trial point of
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
    lbfgs_backend : {'auto', 'scipy', 'torch'}, default='auto'
        The back end of L-BFGS (:func:`sk_deq.nn._fit.minimize_lbfgs`):
        ``'auto'`` runs the torch one on the parameters' device when that is
        not the CPU, scipy's L-BFGS-B on the host otherwise.
    loss_reference : float, optional
        What Adam and SGD measure a diverging loss against: training stops
        with a :class:`~sk_deq.nn.TrainingDivergenceError` once an epoch's
        mean loss, or the loss of a minibatch after the last step, exceeds
        :data:`~sk_deq.nn._fit.EXPLOSION_FACTOR` times it.  None: the
        larger of the loss at the start and that of zero outputs, on the
        first minibatch (returned as ``TrainResult.loss_reference``, for a
        continued run to pass on: steps that grow the loss a little at
        every call would otherwise never be caught).

    Returns
    -------
    TrainResult
        The history of every epoch, how training ended and the best losses.

    Raises
    ------
    ValueError
        For an unknown ``optimizer``, a model without trainable parameters,
        sample weights of the wrong shape, negative, non-finite or all zero,
        a ``torch_optimizer`` with ``optimizer='lbfgs'``, or ``y`` (``y_val``)
        without one entry per sample (labels: one column at most, a column
        vector raveled with a ``DataConversionWarning``).
    TrainingDivergenceError
        A ``FloatingPointError``: if minibatch training makes the loss
        infinite or NaN, or an epoch's mean loss more than
        :data:`~sk_deq.nn._fit.EXPLOSION_FACTOR` times the larger of
        the loss at the start and that of zero outputs; a
        :class:`DEQTrainingDivergenceError` (also a
        :class:`~sk_deq.nn.DEQDivergenceError`) if a DEQ's fixed point
        diverges once the optimizer has stepped.

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
    y = check_targets(y, X.shape[0], labels=loss == "cross_entropy")
    if X_val is not None and y_val is not None:
        y_val = check_targets(y_val, X_val.shape[0], "y_val", labels=loss == "cross_entropy")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("The model has no trainable parameters.")
    epochs = start_epochs(
        model,
        params,
        X_val=X_val,
        y_val=y_val,
        val_weight=val_weight,
        n_iter_no_change=n_iter_no_change,
        improvement_tol=improvement_tol,
        verbose=verbose,
        stream=stream,
        epoch_offset=epoch_offset,
        chunk_size=chunk_size,
        loss=loss,
    )
    w = normalised_weights(sample_weight, X.shape[0], X.device)
    penalized = list(penalized)
    if optimizer == "lbfgs":
        if torch_optimizer is not None:
            raise ValueError("torch_optimizer continues a minibatch optimizer; it cannot be used with 'lbfgs'.")
        run = dict(max_iter=max_epochs, tol=improvement_tol, backend=lbfgs_backend)
        return _train_lbfgs(model, X, y, w, params, penalized, alpha, epochs, run)
    opt = make_optimizer(optimizer, params, learning_rate) if torch_optimizer is None else torch_optimizer
    rng = np.random.RandomState(0) if rng is None else rng
    batch = max(1, min(int(batch_size), X.shape[0]))
    if loss_reference is not None:
        epochs.reference = epochs.result.loss_reference = float(loss_reference)
    _train_minibatch(model, X, y, w, opt, penalized, alpha, epochs, batch, max_epochs, rng, verbose >= 2, stream)
    return epochs.finish()


def make_optimizer(kind: str, params, learning_rate: float) -> torch.optim.Optimizer:
    """A new Adam (torch's defaults) or SGD (Nesterov momentum 0.9) optimizer over ``params``.

    Parameters
    ----------
    kind : {'adam', 'sgd'}
        Which optimizer.
    params : iterable of torch.nn.Parameter
        The parameters it steps.
    learning_rate : float
        Its step size.

    Returns
    -------
    torch.optim.Optimizer
        The optimizer.
    """
    if kind == "adam":
        return torch.optim.Adam(params, lr=learning_rate)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=learning_rate, momentum=0.9, nesterov=True)
    raise ValueError(f"{kind!r} is not a minibatch optimizer; use 'adam' or 'sgd'.")


def _train_minibatch(model, X, y, w, opt, penalized, alpha, epochs, batch, max_epochs, rng, bars, stream):
    """Epochs of shuffled minibatch steps until the stopping rule or ``max_epochs``."""
    n = X.shape[0]
    monitor, result = epochs.monitor, epochs.result
    order = None
    for _ in range(int(max_epochs)):
        t0 = time.perf_counter()
        order = torch.from_numpy(rng.permutation(n)).to(X.device)
        with ProgressBar(math.ceil(n / batch), f"epoch {epochs.number}", enabled=bars, stream=stream) as bar:
            try:
                total = _minibatch_epoch(model, X, y, w, order, batch, opt, penalized, alpha, bar, epochs)
            except DEQDivergenceError as exc:
                if not opt.state:  # no step taken yet: the fixed point diverges at the weights as they came
                    raise
                raise DEQTrainingDivergenceError(
                    f"the DEQ's fixed point diverged during epoch {epochs.number}, after optimizer steps: they took "
                    "the trained weights out of the region where the fixed point exists",
                    _ADVICE,
                ) from exc
        epochs.end(total / n, t0)
        if monitor.stop:
            result.converged = True
            what = "validation loss" if monitor.use_val else "training loss"
            result.message = f"{what} did not improve by {monitor.tol:g} for {monitor.n_iter_no_change} epochs"
            break
    else:
        result.message = f"reached max_epochs={max_epochs}"
    if order is not None:
        _check_last_step(model, X, y, w, order[:batch], penalized, alpha, epochs)


def _check_last_step(model, X, y, w, idx, penalized, alpha, epochs) -> None:
    """The loss of one minibatch after the last step, checked as an epoch's (the epochs' losses precede steps)."""
    if epochs.monitor.use_val:  # the parameters of the best epoch were kept, or are about to be
        return
    with torch.no_grad():
        loss = loss_sum(model(X[idx]), y[idx], None if w is None else w[idx], epochs.loss) / len(idx)
        pen = _penalty(penalized, alpha)
        epochs.check(float(loss if pen is None else loss + pen), "after the last step")


def _minibatch_epoch(model, X, y, w, order, bs, opt, penalized, alpha, bar, epochs) -> float:
    """One pass over the minibatches of ``order``; returns the summed loss (data and penalty).

    The first minibatch of a run, before its step, sets the reference of
    :meth:`~sk_deq.nn._fit.Epochs.end`'s test for an exploding loss.
    """
    n = X.shape[0]
    total = 0.0
    for i in range(0, n, bs):
        idx = order[i : i + bs]
        opt.zero_grad(set_to_none=True)
        out, wb = model(X[idx]), None if w is None else w[idx]
        data = loss_sum(out, y[idx], wb, epochs.loss)
        loss = data / len(idx)
        pen = _penalty(penalized, alpha)
        if pen is not None:
            loss = loss + pen
        if epochs.reference is None:
            with torch.no_grad():
                zero = loss_sum(torch.zeros_like(out), y[idx], wb, epochs.loss)
                epochs.set_reference(loss * len(idx), zero, len(idx))
        loss.backward()
        opt.step()
        total += float(data.detach()) + (float(pen.detach()) * len(idx) if pen is not None else 0.0)
        bar.update()
    return total


class _FlatParameters:
    """The trainable parameters as one float64 vector on their device (each keeps its own dtype)."""

    def __init__(self, params):
        self.params = params
        self.sizes = [p.numel() for p in params]

    def get(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1).to(torch.float64) for p in self.params])

    def set(self, v: torch.Tensor) -> None:
        with torch.no_grad():
            for p, part in zip(self.params, torch.split(v, self.sizes)):
                p.copy_(part.view_as(p))

    def grad(self) -> torch.Tensor:
        parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.params]
        return torch.cat([g.to(torch.float64) for g in parts])


def _train_lbfgs(model, X, y, w, params, penalized, alpha, epochs, run) -> TrainResult:
    """Full-batch L-BFGS on the flattened parameters (``run``: the driver's options); one iteration is one epoch."""
    n = X.shape[0]
    chunk = n if not epochs.chunk_size else int(epochs.chunk_size)
    flat = _FlatParameters(params)
    n_eval = [0]

    def fun(v):
        flat.set(v)
        for p in params:
            p.grad = None
        total = torch.zeros((), dtype=torch.float64, device=v.device)
        try:
            for i in range(0, n, chunk):
                sl = slice(i, i + chunk)
                loss = loss_sum(model(X[sl]), y[sl], None if w is None else w[sl], epochs.loss) / n
                loss.backward()
                total = total + loss.detach()
        except DEQDivergenceError:
            # A trial point of the line search left the region where the fixed point exists:
            # an infinite loss makes L-BFGS back off (the starting point must be finite).
            if n_eval[0] == 0:
                raise
            inf = torch.full((), math.inf, dtype=torch.float64, device=v.device)
            return inf, torch.zeros_like(v), inf
        finally:
            n_eval[0] += 1
        pen = _penalty(penalized, alpha)
        if pen is not None:
            pen.backward()
            total = total + pen.detach()
        grad = flat.grad()
        return total, grad, grad.abs().max() if grad.numel() else grad.new_zeros(())

    def callback(v, loss):
        flat.set(v)
        return epochs.lbfgs_iteration(loss)

    res = minimize_lbfgs(fun, flat.get(), callback=callback, **run)
    assert isinstance(res.x, torch.Tensor)  # x0 was one
    flat.set(res.x)
    return epochs.lbfgs_finish(res, run["tol"])
