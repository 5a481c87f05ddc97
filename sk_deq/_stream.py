"""What ``partial_fit`` carries from one call to the next besides the network.

:meth:`sk_deq._torch_base.TorchClassifierBase.partial_fit` trains on one
chunk per call with a minibatch optimizer whose state (Adam's moments, SGD's
momentum) and minibatch order continue from call to call.  :class:`Stream`
holds them; :func:`picklable` turns it into plain numpy for a pickle, and the
next call after loading restores the optimizer from it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

__all__ = ["Moments", "Stream", "numpy_to_tensors", "partial_fit_available", "picklable"]


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


@dataclass(frozen=True)
class Moments:
    """Weighted mean and standard deviation of every column of the targets seen so far.

    ``weight`` is the total weight (the number of rows when unweighted).
    :meth:`of` measures a chunk and :meth:`merge` combines two sets of
    rows (Chan et al.'s parallel update), so that the moments of a stream
    are those of all its rows, whatever the chunks.  Both work in units of
    the column's largest magnitude and keep standard deviations rather than
    variances, so no finite target overflows.
    """

    weight: float
    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def of(cls, Y: np.ndarray, sample_weight: np.ndarray | None = None) -> Moments:
        """The moments of the rows of ``Y`` (n x k), weighted by ``sample_weight`` (None: all 1)."""
        w = np.ones(len(Y)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        unit = np.max(np.abs(Y), axis=0)
        unit = np.where(unit > 0, unit, 1.0)
        scaled = Y / unit
        mean = np.average(scaled, axis=0, weights=w)
        std = np.sqrt(np.average((scaled - mean) ** 2, axis=0, weights=w))
        return cls(float(w.sum()), mean * unit, std * unit)

    def merge(self, other: Moments) -> Moments:
        """The moments of the rows of ``self`` and ``other`` together."""
        total = self.weight + other.weight
        fa, fb = self.weight / total, other.weight / total
        delta = other.mean / 2 - self.mean / 2  # halves: the difference of two finite means stays finite
        unit = np.maximum(np.maximum(self.std, other.std), np.abs(delta))
        unit = np.where(unit > 0, unit, 1.0)
        var = fa * (self.std / unit) ** 2 + fb * (other.std / unit) ** 2 + 4 * fa * fb * (delta / unit) ** 2
        return Moments(total, fa * self.mean + fb * other.mean, np.sqrt(var) * unit)

    def scale(self) -> np.ndarray:
        """The standard deviations, with 1 for a (nearly) constant column, which keeps its units."""
        tiny = 10 * np.finfo(np.float64).eps * np.maximum(np.abs(self.mean), 1.0)
        return np.where(self.std > tiny, self.std, 1.0)


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
    if isinstance(est.optimizer, str) and est.optimizer == "lbfgs":
        raise AttributeError(
            f"partial_fit is only available for the minibatch optimizers ('adam', 'sgd', and 'auto', which is "
            f"Adam in partial_fit); {type(est).__name__} has optimizer='lbfgs', a full-batch method. Use fit, or "
            "set optimizer='adam'."
        )
    return True
