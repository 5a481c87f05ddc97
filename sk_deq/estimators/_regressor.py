"""The task of the torch regressors: real multi-output targets, their standardisation, the squared error, R²."""

from __future__ import annotations

import math
from dataclasses import dataclass

from typing import TYPE_CHECKING, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
import torch
from sklearn.base import RegressorMixin

from .._scaling import power_of_two_scale
from ._stream import partial_fit_available
from ._base import TorchEstimatorBase
from .._dask import lazy_method
from .._validation import is_dask_collection, is_tensor, validate_samples
from .._scaling import unit_max
from .._scoring import r2_score_of
from .._validation import available_if, checked_weights, fit_context
from ._base import Data

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["TorchRegressorBase"]


class TorchRegressorBase(RegressorMixin, TorchEstimatorBase):
    """Base class of the torch regressors (not meant to be used directly).

    Targets are real, one column per output (``n_outputs_``), and the loss
    is half the squared error summed over the outputs.  Every column is
    standardised with its (weighted) training mean and standard deviation
    (``target_mean_``, ``target_scale_``) before training, and the outputs
    are mapped back.  For the readout this is the same minimiser as on the
    raw targets (the problem separates by column, and rescaling a column
    rescales its loss and its penalty alike); it makes the optimizers' step
    sizes and tolerances independent of the targets' units.
    """

    _loss: ClassVar[str] = "squared"
    # targets in units of their standard deviation: 0.1 overshoots, 0.005 is slow (see _learning_rate)
    _READOUT_LEARNING_RATE: ClassVar[float] = 0.01

    def _optimizer(self, partial: bool = False) -> str:
        # the readout alone (frozen features), and no iterations asked for: the closed form
        if self.solver == "auto" and not (partial or self.early_stopping or self._features_trainable()):
            return "ridge"
        return super()._optimizer(partial)

    def _validate(self, X, y, sample_weight, *, reset: bool, partial: bool = False):  # type: ignore[override]
        """Validate ``X``, ``y`` (real, one or more columns) and the weights (a chunk may hold one sample)."""
        X, y = validate_samples(
            self,
            X,
            y,
            reset=reset,
            accept_sparse=False,
            dtype=[np.float64, np.float32],
            ensure_min_samples=1 if partial else 2,
            multi_output=True,
            y_numeric=True,
        )
        X = X if is_tensor(X) else np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        Y = y.reshape(len(y), -1)
        name = type(self).__name__
        if Y.shape[1] == 0:
            raise ValueError(f"{name}: y has no columns; it needs at least one output.")
        sample_weight = checked_weights(sample_weight, X, name)
        moments = Moments.of(Y, sample_weight)  # the weights on their own scale: chunks merge by it
        sample_weight = None if sample_weight is None else unit_max(sample_weight)
        if not reset and Y.shape[1] != self.n_outputs_:
            what, remedy = (
                ("partial_fit", "call fit to start afresh") if partial else ("warm_start", "set warm_start=False")
            )
            raise ValueError(
                f"y has {Y.shape[1]} output(s) but {name} was fitted with {self.n_outputs_}; "
                f"{what} keeps the readout and its outputs ({remedy})."
            )
        return Data(X, Y, sample_weight), (Y, y.ndim == 1, moments), sample_weight

    def _fit_targets(self, targets, first: bool) -> int:
        Y, one_column, moments = targets
        if first:
            self.n_outputs_ = int(Y.shape[1])
            self._y_1d = bool(one_column)
            self._target_moments = moments
            self.target_mean_ = self._target_moments.mean
            self.target_scale_ = self._target_moments.scale()
        else:
            self._merge_targets(moments)
        return self.n_outputs_

    def _merge_targets(self, chunk_moments) -> None:
        """Merge a chunk's targets into the running standardisation; rescale the readout to keep its predictions.

        The readout's outputs ``o`` predict ``o * target_scale_ +
        target_mean_``: with new moments ``(m', s')`` the readout becomes
        ``W s / s'`` and ``(b s + m - m') / s'``, which predicts the same.
        """
        moments = getattr(self, "_target_moments", None)
        if moments is None:  # pickled before the moments were kept: the scaling stays as it is
            return
        self._target_moments = moments.merge(chunk_moments)
        mean, scale = self._target_moments.mean, self._target_moments.scale()
        ratio = self.target_scale_ / scale
        if np.array_equal(mean, self.target_mean_) and np.all(ratio == 1.0):
            return
        readout = self.module_.readout
        with torch.no_grad():
            factor = torch.as_tensor(ratio, dtype=readout.weight.dtype, device=readout.weight.device)
            shift = torch.as_tensor((self.target_mean_ - mean) / scale, dtype=factor.dtype, device=factor.device)
            readout.weight.mul_(factor[:, None])
            readout.bias.mul_(factor).add_(shift)
        self.target_mean_, self.target_scale_ = mean, scale

    def _targets(self, data: Data, device) -> torch.Tensor:
        half = 0.5 * data.y - 0.5 * self.target_mean_  # (y - mean) / 2, which cannot overflow
        return torch.from_numpy(half / self.target_scale_ * 2.0).to(device)

    @available_if(partial_fit_available)
    @fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X: ArrayLike | torch.Tensor, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        """Train on one chunk of data: one epoch of Adam or SGD over its rows.

        The first call (on an unfitted regressor) fits the input scaling
        and ``tau0_`` on its chunk and builds the network as :meth:`fit`
        does; later calls keep them and continue training, and so does a
        call after :meth:`fit` (a new ``fit`` starts afresh).  The target
        standardisation (``target_mean_``, ``target_scale_``) is a running
        one: the weighted mean and standard deviation of every target seen
        so far (by :meth:`fit` and every chunk), updated on each call, with
        the readout rescaled so that its predictions do not change.  The optimizer
        (``'auto'`` is Adam here; ``'lbfgs'`` has no ``partial_fit``) keeps
        its state from call to call.  With ``trainable='hidden'`` or
        ``'all'`` the hidden weights train too.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            One chunk of training data (dense).
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Its targets, with as many outputs as on the first call.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of every sample in the loss, and in the
            input and target scaling on the first call.  Rows of zero weight
            are dropped from the chunk, exactly as if absent.

        Returns
        -------
        object
            The regressor (``self``).

        Raises
        ------
        ValueError
            When the number of features or outputs changes or no sample has
            a positive weight.

        Notes
        -----
        The first chunk fixes the input scaling: make it representative of
        the stream (shuffle the rows first).  The target standardisation
        follows the stream, so a first chunk of constant targets (scale 1
        until the next chunk) does no harm.
        ``early_stopping``, ``max_iter``, ``n_iter_no_change``,
        ``tol`` and ``warm_start`` do not apply (``early_stopping=True``
        warns): every call is one epoch over its chunk.
        """
        return self._partial_fit(X, y, sample_weight)

    # ---------------------------------------------------------------- predict
    def predict(self, X: ArrayLike | torch.Tensor) -> NDArray[np.float64]:
        """Predicted targets.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples to predict targets for, unscaled as in ``fit``.  A Dask
            array gives a lazy Dask array, row block by row block.

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,) or (n_samples, n_outputs)
            One column per output, in the shape of the training targets (1-D
            when ``y`` was 1-D).
        """
        if is_dask_collection(X):
            return lazy_method(X, self.predict, lambda est: (None if est._y_1d else est.n_outputs_, np.float64))
        with np.errstate(over="ignore"):  # halves first: no overflow short of predictions beyond float64
            out = (self._outputs(X) * (0.5 * self.target_scale_) + 0.5 * self.target_mean_) * 2.0
        if not np.all(np.isfinite(out)):
            raise ValueError(
                f"{type(self).__name__}'s predictions overflow float64: the targets it was fitted on (scale "
                f"{np.max(self.target_scale_):.3g}) are too close to the largest float64 value. Rescale the targets."
            )
        return out[:, 0] if self._y_1d else out

    def score(self, X: ArrayLike | torch.Tensor, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """Coefficient of determination R² of the predictions.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Raw inputs (the fitted input scaling is applied).  With Dask
            arrays (``X``, ``y`` or the weights) the predictions are compared
            block by block where they are computed; only sums come back.
        y : array-like or dask.array.Array of shape (n_samples,) or (n_samples, n_outputs)
            True targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of every sample.

        Returns
        -------
        float
            :func:`sklearn.metrics.r2_score` of :meth:`predict`, averaged
            uniformly over the outputs: 1 for a perfect fit, 0 for the
            constant mean, negative for worse.  Computed on the targets and
            predictions divided by a common power of two (and weights by
            another), so that targets beyond 1e154 (or below 1e-154) and
            weights up to the largest float64 give the same R² as in units.
        """
        return r2_score_of(self, X, y, sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags


@dataclass(frozen=True)
class Moments:
    """Weighted mean and standard deviation of every target column seen so far, for any finite float64 targets.

    :meth:`of` measures a set of rows and :meth:`merge` combines two (Chan et
    al.'s parallel update), so that the moments of a ``partial_fit`` stream
    are those of all its rows, whatever the chunks.  Every column is divided
    by a power of two near its largest ``|value|`` first (exact), and
    standard deviations are kept rather than variances, so no finite target
    overflows (1e154 or more) or underflows (1e-154 or less).  The total
    weight is ``weight * 2**exponent``: weights up to the largest float64
    add up without overflow, and chunks weighted on different scales merge
    in the right proportion.

    Parameters
    ----------
    weight : float
        Total weight, in units of ``2**exponent``.
    mean, std : ndarray of shape (n_outputs,)
        Weighted mean and standard deviation of every column.
    exponent : int, default=0
        Binary exponent of the weight's unit.
    """

    weight: float
    mean: np.ndarray
    std: np.ndarray
    exponent: int = 0

    @classmethod
    def of(cls, Y, sample_weight=None) -> Moments:
        """The moments of the rows of ``Y`` (n x k), weighted by ``sample_weight`` (None: all 1).

        Parameters
        ----------
        Y : ndarray of shape (n_samples, n_outputs)
            Finite targets.
        sample_weight : ndarray of shape (n_samples,), optional
            Non-negative finite weights, not all zero.

        Returns
        -------
        Moments
        """
        Y = np.asarray(Y, dtype=np.float64)
        if sample_weight is None:
            w, exponent = np.ones(len(Y)), 0
        else:
            w = np.asarray(sample_weight, dtype=np.float64)
            unit = power_of_two_scale(w)
            w, exponent = w / unit, int(np.frexp(unit)[1]) - 1  # exact; sums of up to 2 n_samples
        unit = power_of_two_scale(Y, axis=0)
        Z = Y / unit
        ref = Z[np.argmax(w > 0)]  # about a row of positive weight: a constant column's mean is exact, its std 0
        mean = ref + np.average(Z - ref, axis=0, weights=w)
        std = np.sqrt(np.average((Z - mean) ** 2, axis=0, weights=w))
        return cls(float(w.sum()), mean * unit, std * unit, exponent)

    def merge(self, other: Moments) -> Moments:
        """The moments of the rows of ``self`` and ``other`` together.

        Parameters
        ----------
        other : Moments

        Returns
        -------
        Moments
        """
        exponent = max(self.exponent, other.exponent)
        a = math.ldexp(self.weight, self.exponent - exponent)
        b = math.ldexp(other.weight, other.exponent - exponent)
        fa, fb = a / (a + b), b / (a + b)
        delta = other.mean / 2 - self.mean / 2  # halves: the difference of two finite means stays finite
        unit = np.maximum(np.maximum(self.std, other.std), np.abs(delta))
        unit = np.where(unit > 0, unit, 1.0)
        var = fa * (self.std / unit) ** 2 + fb * (other.std / unit) ** 2 + 4 * fa * fb * (delta / unit) ** 2
        return Moments(a + b, fa * self.mean + fb * other.mean, np.sqrt(var) * unit, exponent)

    def scale(self) -> np.ndarray:
        """The standard deviations, with 1 for a constant column (which keeps its units).

        A column counts as constant when its standard deviation is zero or
        within rounding of its mean (the mean of equal values is not exact);
        tiny targets (1e-300) that vary keep their own scale.

        Returns
        -------
        ndarray of shape (n_outputs,)
        """
        varies = (self.std > 0) & (self.std > 10 * np.finfo(np.float64).eps * np.abs(self.mean))
        return np.where(varies, self.std, 1.0)
