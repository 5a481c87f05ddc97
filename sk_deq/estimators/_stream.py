"""What ``partial_fit`` carries from one call to the next besides the network.

:meth:`sk_deq.estimators._base.TorchClassifierBase.partial_fit` trains on one
chunk per call with a minibatch optimizer whose state (Adam's moments, SGD's
momentum) and minibatch order continue from call to call.  :class:`Stream`
holds them; :func:`picklable` turns it into plain numpy for a pickle, and the
next call after loading restores the optimizer from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..nn.training import make_optimizer

__all__ = ["Stream", "numpy_to_tensors", "partial_fit_available", "picklable", "chunk_optimizer", "record_chunk"]


@dataclass
class Stream:
    """The optimizer and minibatch order of a stream of ``partial_fit`` calls.

    ``optimizer`` was built for ``config``, ``(kind, dtype, device)``.  A
    pickle holds ``saved``, the optimizer's state dict with numpy arrays,
    instead; the next call loads it into a new optimizer.
    """

    rng: np.random.RandomState  # minibatch order
    config: tuple | None = None
    optimizer: torch.optim.Optimizer | None = None
    saved: dict | None = None


def _tensors_to_numpy(obj):
    """``obj`` (nested dicts, lists and tuples) with every tensor replaced by a numpy copy on the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu").numpy().copy()
    if isinstance(obj, dict):
        return {k: _tensors_to_numpy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_tensors_to_numpy(v) for v in obj)
    return obj


def numpy_to_tensors(obj):
    """Inverse of the conversion :func:`picklable` applies to the optimizer's state."""
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.array(obj))
    if isinstance(obj, dict):
        return {k: numpy_to_tensors(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(numpy_to_tensors(v) for v in obj)
    return obj


def picklable(stream: Stream) -> Stream:
    """A copy of ``stream`` without torch objects: the optimizer's state as numpy arrays in ``saved``."""
    saved = stream.saved if stream.optimizer is None else _tensors_to_numpy(stream.optimizer.state_dict())
    return replace(stream, optimizer=None, saved=saved)


def partial_fit_available(est) -> bool:
    """``partial_fit`` exists for the minibatch optimizers only, as in MLPClassifier."""
    if getattr(est, "readout", "logistic") == "ridge":
        raise AttributeError(
            f"partial_fit is not available with readout='ridge' (a closed-form fit on all the data); "
            f"{type(est).__name__} trains a logistic readout chunk by chunk with readout='logistic'."
        )
    if isinstance(est.solver, str) and est.solver == "lbfgs":
        raise AttributeError(
            f"partial_fit is only available for the minibatch optimizers ('adam', 'sgd', and 'auto', which is "
            f"Adam in partial_fit); {type(est).__name__} has solver='lbfgs', a full-batch method. Use fit, or "
            "set solver='adam'."
        )
    return True


def chunk_optimizer(est, device) -> torch.optim.Optimizer:
    """The stream's optimizer, new (or restored from a pickle) when its kind, dtype or device changed."""
    if getattr(est, "_stream", None) is None:  # partial_fit after fit
        est._stream = Stream(np.random.RandomState(est._draw_seeds()[2]))
    stream = est._stream
    config = (est._optimizer(partial=True), est.dtype, str(device))
    if stream.optimizer is None or stream.config != config:
        saved = stream.saved if stream.optimizer is None else stream.optimizer.state_dict()
        params = [p for p in est.module_.parameters() if p.requires_grad]
        optimizer = make_optimizer(config[0], params, est._learning_rate())
        if saved is not None and stream.config is not None and stream.config[0] == config[0]:
            optimizer.load_state_dict(numpy_to_tensors(saved))  # casts to the parameters' dtype and device
        stream.config, stream.optimizer, stream.saved = config, optimizer, None
    for group in stream.optimizer.param_groups:
        group["lr"] = est._learning_rate()
    return stream.optimizer


def record_chunk(est, result, seconds: float) -> None:
    """Extend the history by the chunk's epoch (no convergence warning: one epoch is the point)."""
    est.module_.eval()
    est.history_.extend(result.history)
    est.n_iter_ = len(est.history_)
    est.best_loss_ = min(getattr(est, "best_loss_", math.inf), result.best_loss)
    est.best_validation_score_ = est.best_validation_loss_ = None
    est.fit_time_ = seconds
    if est.verbose:
        print(f"{type(est).__name__}: partial_fit epoch {est.n_iter_} ({est._stream.config[0]}) in {seconds:.2f}s")
