"""Input scaling shared by the estimators, the kernel transformers and the kernels: the data scale ``tau0``.

The theory takes inputs with ``||x||^2`` of order one and unscaled ``N(0, 1)``
input weights (see :ref:`theory-deq` and :ref:`theory-explicit`; the user
guide's :ref:`input-scaling` explains the choice).  A scikit-learn user's
features are usually standardised instead (``||x||^2`` about ``p``), which
saturates tanh-like activations.  The estimators therefore follow Ling et al.'s (2024) experimental
protocol by default:

``input_scaling='global'``
    centre every feature with its training mean, then divide by one global
    factor so that the mean squared norm of the training samples is 1.  The
    data scale the theory sees is then ``tau0 = 1`` on the training data.
    A factor set by a few outlying rows (the largest 1 %), beside which the
    other rows spread less than ``sqrt(SIGMA_B2_MIN)`` of it about their own
    mean, warns (:func:`fit_input_scaling`); a mean or scale that overflows
    float64 is an error.
``input_scaling='none'``
    use the inputs as given; ``tau0`` is measured from the training data.

Either way the fitted estimator stores ``input_mean_`` (or ``None``),
``input_scale_`` and ``tau0_``, and applies the same map at predict time.

:func:`squared_norms` and :func:`data_tau0` measure the data scale with a
clear error where a norm overflows; :func:`power_of_two_scale` and
:func:`unit_max` rescale by powers of two, exactly, so that sums of squares
and of weights cannot overflow.

"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ._runtime import on_gpu
from ._validation import INPUT_SCALING, SIGMA_B2_MIN, _outside_stacklevel, check_tau0, is_tensor, to_numpy

__all__ = [
    "SCALED_TAU0",
    "apply_input_scaling",
    "data_tau0",
    "fit_input_scaling",
    "power_of_two_scale",
    "scaling_device",
    "squared_norms",
    "unit_max",
]


#: The data scale ``tau0`` of every training set under ``input_scaling='global'`` (and the
#: scale the estimators then match their explicit networks at).
SCALED_TAU0 = 1.0


def squared_norms(X, name: str = "X") -> np.ndarray:
    """Squared norm of every row, with a clear error where one overflows float64.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Finite samples.
    name : str, default='X'
        How the error message calls the array.

    Returns
    -------
    norms : ndarray of shape (n_samples,)

    Raises
    ------
    ValueError
        If a squared norm is not finite (entries of about 1e154 or more).
    """
    X = np.asarray(X, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.einsum("ij,ij->i", X, X)
    if not np.all(np.isfinite(norms)):
        big = float(np.max(np.abs(X))) if X.size else 0.0
        raise ValueError(
            f"The squared norms of the samples of {name} overflow float64 (largest |value| {big:.3g}, after any "
            "input scaling): the kernels depend on them. Rescale the inputs (input_scaling='global', where an "
            "estimator or transformer has it, brings data on the scale of its training data to norms about 1, not "
            "data far outside it)."
        )
    return norms


def data_tau0(X) -> float:
    """Data scale ``tau0 = sqrt((1/n) sum ||x_i||^2)`` of samples in rows.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Finite samples, one per row.

    Returns
    -------
    float
        The root mean squared norm of the rows.

    Raises
    ------
    ValueError
        If the scale is zero (all samples zero) or a squared norm overflows.

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq._scaling import data_tau0
    >>> data_tau0(np.array([[3.0, 4.0], [0.0, 5.0]]))
    5.0
    """
    X = np.asarray(X, dtype=float)
    return check_tau0(math.sqrt(float(np.mean(squared_norms(X)))))


def fit_input_scaling(X, mode: str = "global", sample_weight=None, device=None):
    """Fit the input map; returns ``(mean, scale, tau0)``.

    Parameters
    ----------
    X : ndarray or torch.Tensor of shape (n_samples, n_features)
        Validated, finite training data.
    mode : {'global', 'none'}
        The input scaling (see the module's documentation).
    sample_weight : ndarray of shape (n_samples,), optional
        Non-negative weights: the mean and the mean squared norm are weighted
        averages, so integer weights act as repeated rows.
    device : torch.device, optional
        Where the statistics are computed: None in numpy on the host (a
        tensor ``X`` through the numpy array it shares memory with, a GPU
        tensor copied); a torch device in float64 torch there, ``X`` (numpy
        or tensor) moved in blocks of 16 MiB (128 MiB on a GPU, where each
        block costs kernel launches and the memory is the device's).  The estimators pass
        :func:`scaling_device` of theirs: torch on a GPU, numpy on the CPU.
        Both compute the same statistics to about 1e-15 relative (their
        sums run in another order).

    Returns
    -------
    mean : ndarray of shape (n_features,) or None
        Subtracted from the inputs (``mode='global'``).
    scale : float
        Factor the (centred) inputs are divided by.
    tau0 : float
        Data scale of the *transformed* training data.

    Raises
    ------
    ValueError
        For an unknown mode, or data whose scale is zero (all samples with
        positive weight identical, or all zero), or whose mean or scale
        overflows float64.

    Warns
    -----
    UserWarning
        With ``mode='global'``, when the scale is set by the largest 1 % of
        the rows (at least one) and the other rows spread less than
        ``sqrt(SIGMA_B2_MIN)`` (1 %) of it about their own mean: they would
        reach the network nearly as one point, as a ``sigma_b2`` below
        :data:`~sk_deq._validation.SIGMA_B2_MIN` would bring them.
    """
    if mode not in INPUT_SCALING:
        raise ValueError(f"input_scaling must be one of {INPUT_SCALING}, got {mode!r}.")
    rows = _NumpyRows(X, sample_weight) if device is None else _TorchRows(X, sample_weight, device)

    def rms_norm(center, norms=None):
        # sqrt(mean ||x - center||^2) without overflow: squares of entries near 1e154 overflow
        big = rows.abs_max(center)
        if not big > 0:
            return 0.0
        values = rows.norms(center, big)
        if norms is not None:
            norms.append(rows.numpy(values))
        return big * math.sqrt(rows.average(values))

    if mode == "global":
        mean = rows.mean()
        norms: list = []
        scale = rms_norm(mean, norms) if np.all(np.isfinite(rows.numpy(mean))) else math.inf
        if not math.isfinite(scale):
            raise ValueError(
                "The mean or the spread of the training samples overflows float64 (entries near the largest float64 "
                "value, 1.8e308): input_scaling='global' cannot centre them. Rescale the inputs."
            )
        if not scale > 0:
            raise ValueError(
                "All training samples (with positive weight) are identical: input_scaling='global' cannot "
                "normalise them."
            )
        _warn_if_dominated(rows, norms[0], scale)
        return rows.numpy(mean), scale, SCALED_TAU0
    tau0 = rms_norm(0.0)
    if not tau0 > 0:
        raise ValueError("All training samples (with positive weight) are zero: the data scale tau0 would be 0.")
    if not 1e-150 < tau0 < 1e150:  # tau0^2 enters the theory
        which = "large" if tau0 >= 1e150 else "small"
        raise ValueError(
            f"The data scale tau0 = {tau0:.3g} of input_scaling='none' is too {which} for the theory (tau0^2 "
            f"{'overflows' if which == 'large' else 'underflows'}); use input_scaling='global' or rescale "
            "the inputs."
        )
    return None, 1.0, tau0


def _warn_if_dominated(rows, norms: np.ndarray, scale: float) -> None:
    """Warn when the largest 1 % of the rows (at least one) set ``scale`` and the others hardly spread beside it.

    ``norms`` are every row's squared distance to the mean (in any common
    unit).  Where the other rows hold half the total or more, their own
    spread cannot be small (the few rows move the mean by too little) and
    nothing more is computed; otherwise :meth:`_NumpyRows.rest_spread`
    measures it.
    """
    n = len(norms)
    k = max(1, n // 100)
    if n - k < 2:
        return
    w = np.ones(n) if rows.w is None else np.asarray(to_numpy(rows.w), dtype=float)
    top = np.argpartition(norms, n - k)[n - k :]
    share = float(w[top] @ norms[top]) / float(w @ norms)
    if not share > 0.5:
        return
    spread = rows.rest_spread(top, scale)
    if spread is None or spread >= SIGMA_B2_MIN:
        return
    warnings.warn(
        f"input_scaling='global': the largest {k} of the {n} training rows (1 %) hold {share:.4%} of the squared norm "
        f"that sets the global scale ({scale:.3g}); the other rows spread only {math.sqrt(spread):.3g} times it about "
        f"their own mean, less than sqrt({SIGMA_B2_MIN:g}), and reach the network nearly as one point (as a "
        f"sigma_b2 below {SIGMA_B2_MIN:g} would bring them). Remove or clip the outlying rows or entries, or scale "
        "the inputs yourself and pass input_scaling='none'.",
        UserWarning,
        stacklevel=_outside_stacklevel(),
    )


def scaling_device(device):
    """Where :func:`fit_input_scaling` computes for an estimator on ``device``: None (numpy) on the CPU.

    On the CPU numpy keeps the statistics those of every earlier version,
    to the last bit; on a GPU the statistics are computed there, from raw
    blocks of the inputs, instead of on the host.

    Parameters
    ----------
    device : torch.device or None
        The estimator's device (None: the CPU).

    Returns
    -------
    torch.device or None
    """
    return device if on_gpu(device) else None


#: Entries of a block of the statistics: 2^21 (16 MiB of float64) in numpy and on the CPU, 2^24 on a GPU.
STAT_BLOCK_ENTRIES, GPU_STAT_BLOCK_ENTRIES = 1 << 21, 1 << 24


def _is_zero(center) -> bool:
    return isinstance(center, float) and center == 0.0


class _NumpyRows:
    """The rows of positive weight of ``X`` and the statistics of :func:`fit_input_scaling`, in numpy.

    The statistics are written against five operations, which
    :class:`_TorchRows` implements in torch: the (weighted) mean row, the
    largest ``|x - center|``, every row's ``||(x - center) / big||^2`` and
    the (weighted) mean of such values, every one over row blocks of 16 MiB
    (no centred copy of all of ``X``), and the conversion to numpy.
    """

    def __init__(self, X, sample_weight):
        X = np.asarray(to_numpy(X), dtype=float)
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=float)
        if w is not None and not np.all(w > 0):  # rows of weight zero count as absent, to the last bit
            X, w = X[w > 0], w[w > 0]
        self.X, self.w = X, w
        step = max(1, STAT_BLOCK_ENTRIES // max(X.shape[1], 1))
        self.blocks = [slice(i, i + step) for i in range(0, X.shape[0], step)] if X.size else []

    def mean(self):
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is the caller's error
            return np.average(self.X, axis=0, weights=self.w)

    def abs_max(self, center) -> float:
        """``max |x - center|``, from each column's extremes: no centred copy.

        Rounding is monotone, so ``max_i fl(x_ij - c_j) = fl(max_i x_ij - c_j)``
        and ``max_i fl(c_j - x_ij) = fl(c_j - min_i x_ij)``: the same value as
        ``np.max(np.abs(X - center))``, to the last bit.
        """
        if _is_zero(center):  # max |x| = max(max x, -min x)
            return max((max(float(self.X[b].max()), -float(self.X[b].min())) for b in self.blocks), default=0.0)

        def block_max(b):
            return max(float(np.max(self.X[b].max(axis=0) - center)), float(np.max(center - self.X[b].min(axis=0))))

        return max((block_max(b) for b in self.blocks), default=0.0)

    def norms(self, center, big) -> np.ndarray:
        """``||(x - center) / big||^2`` of every row."""

        def centred(b):  # (x - center) / big in one temporary (x - 0 is x)
            if _is_zero(center):
                return self.X[b] / big
            x = self.X[b] - center
            x /= big
            return x

        return np.concatenate([squared_norms(centred(b)) for b in self.blocks])

    def average(self, values) -> float:
        """The (weighted) mean of one value per row."""
        return float(np.average(values, axis=0, weights=self.w))

    @staticmethod
    def numpy(values):
        return values

    def rest_spread(self, top, scale: float) -> float | None:
        """Mean squared distance of the rows outside ``top`` to their own (weighted) mean, over ``scale ** 2``.

        None when those rows are all equal (to rounding): then no spread of
        theirs is lost.  Three passes over their blocks, on the host, with
        no copy of all of ``X``.
        """
        w = np.ones(self.X.shape[0]) if self.w is None else np.array(to_numpy(self.w), dtype=float)
        w[top] = 0.0

        def blocks():  # the rows of each block outside top, and their weights
            for b in self.blocks:
                keep = w[b] > 0
                yield np.asarray(to_numpy(self.X[b]), dtype=float)[keep], w[b][keep]

        big = max(float(np.max(np.abs(x), initial=0.0)) for x, _ in blocks())
        if not big > 0:
            return None
        mean = sum(wb @ (x / big) for x, wb in blocks()) / w.sum() * big
        dev, total = 0.0, 0.0
        for x, wb in blocks():
            d = (x - mean) / big
            dev = max(dev, float(np.max(np.abs(d), initial=0.0)))
            total += float(wb @ squared_norms(d))
        if dev <= 4.0 * np.finfo(float).eps:
            return None
        return (big / scale) ** 2 * (total / w.sum())


class _TorchRows(_NumpyRows):
    """:class:`_NumpyRows` in float64 torch on ``device``: every block of ``X`` moved there, one host read per statistic."""

    def __init__(self, X, sample_weight, device):
        import torch

        self.torch, self.device = torch, torch.device(device)
        n, p = X.shape
        w = None if sample_weight is None else torch.as_tensor(sample_weight, dtype=torch.float64, device=device)
        if w is not None and not bool((w > 0).all()):  # rows of weight zero count as absent
            keep = w > 0
            X, w = X[keep.to(X.device) if is_tensor(X) else keep.cpu().numpy()], w[keep]
            n = X.shape[0]
        self.X, self.w = X, w
        entries = GPU_STAT_BLOCK_ENTRIES if on_gpu(self.device) else STAT_BLOCK_ENTRIES
        step = max(1, entries // max(p, 1))
        self.blocks = [slice(i, i + step) for i in range(0, n, step)] if n * p else []
        self.total = float(n) if w is None else w.sum()

    def _rows(self, b):
        return self.torch.as_tensor(self.X[b]).to(self.device, self.torch.float64)

    def _sum(self, values, b):
        """Sum over the rows of ``values`` (the rows ``b``), weighted."""
        return values.sum(0) if self.w is None else self.w[b] @ values

    def mean(self):
        return sum(self._sum(self._rows(b), b) for b in self.blocks) / self.total

    def abs_max(self, center) -> float:
        if not self.blocks:
            return 0.0
        return float(self.torch.stack([(self._rows(b) - center).abs_().max() for b in self.blocks]).max())

    def norms(self, center, big):
        def block(b):
            x = (self._rows(b) - center).div_(big)
            return (x * x).sum(1)

        return self.torch.cat([block(b) for b in self.blocks])

    def average(self, values) -> float:
        return float((values.sum() if self.w is None else self.w @ values) / self.total)

    @staticmethod
    def numpy(values):
        return values.cpu().numpy()


def apply_input_scaling(X, mean, scale):
    """Apply a map fitted by :func:`fit_input_scaling`.

    A torch tensor is scaled in float64 where it lies (the same operations,
    and so the same bits, as numpy's); the caller's array is left alone.
    """
    if is_tensor(X):
        import torch

        X = X.to(torch.float64)
        mean = None if mean is None else torch.as_tensor(mean, dtype=torch.float64, device=X.device)
    else:
        X = np.asarray(X, dtype=float)
    if mean is not None:
        X = X - mean  # a new array (the caller's is left alone), divided in place below
        if scale != 1.0:
            X /= scale
    elif scale != 1.0:
        X = X / scale
    return X


def power_of_two_scale(values, axis=None):
    """A power of two within a factor 2 below ``max |values|`` (1 where that is 0).

    Dividing by it is exact (barring subnormals) and leaves entries below 2.

    Parameters
    ----------
    values : array-like
        Finite values.
    axis : int, optional
        Axis the maximum is taken over (None: all entries).

    Returns
    -------
    ndarray or float
        ``2**(e - 1)`` where ``max |values| = f 2**e`` with ``0.5 <= f < 1``
        (``2**e`` itself overflows for the largest float64 values).
    """
    values = np.asarray(values, dtype=np.float64)
    top = np.max(np.abs(values), axis=axis, initial=0.0)
    _, exponent = np.frexp(top)
    return np.where(top > 0, np.ldexp(1.0, exponent - 1), 1.0)


def unit_max(weights: np.ndarray | None) -> np.ndarray | None:
    """Non-negative ``weights`` divided by a power of two near their largest: exact, all below 2, sums finite.

    None (all weights equal) stays None.
    """
    return None if weights is None else weights / power_of_two_scale(weights)
