"""Input validation and scaling shared by the estimators, kernels and theory.

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
``input_scaling='none'``
    use the inputs as given; ``tau0`` is measured from the training data.

Either way the fitted estimator stores ``input_mean_`` (or ``None``),
``input_scale_`` and ``tau0_``, and applies the same map at predict time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np

from ._device import on_gpu
from ._validation import is_tensor, reject_meta, to_numpy

INPUT_SCALING = ("global", "none")

#: The data scale ``tau0`` of every training set under ``input_scaling='global'`` (and the
#: scale the estimators then match their explicit networks at).
SCALED_TAU0 = 1.0

__all__ = [
    "EXPLICIT_KERNELS",
    "INPUT_SCALING",
    "KERNELS",
    "SCALED_TAU0",
    "apply_input_scaling",
    "check_kernel",
    "check_samples",
    "check_sigma_a2",
    "check_sigma_a2_bounds",
    "check_sigma_b2",
    "check_tau0",
    "data_tau0",
    "fit_input_scaling",
    "power_of_two_scale",
    "scaling_device",
    "squared_norms",
    "Moments",
]


KERNELS = ("ck", "feature", "ntk")
"""The implicit kernels: the DEQ's CK ``G*``, its feature kernel ``Sigma*`` and its NTK."""

EXPLICIT_KERNELS = ("ck", "ntk")
"""The kernels an explicit network is matched on, and whose exact forms it has."""


def check_kernel(kernel, allowed: tuple = KERNELS) -> str:
    """``kernel`` if it is one of ``allowed``, else a ``ValueError`` listing them."""
    if not isinstance(kernel, str) or kernel not in allowed:
        names = ", ".join(repr(k) for k in allowed[:-1]) + f" or {allowed[-1]!r}"
        raise ValueError(f"kernel must be {names}, got {kernel!r}.")
    return kernel


def _real(value, name: str) -> float:
    """``value`` as a float, or a ``TypeError`` naming ``name``."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}.") from None


def check_sigma_a2(sigma_a2) -> float:
    """``sigma_a2`` as a float in (0, 1), or a clear error."""
    s = _real(sigma_a2, "sigma_a2")
    if not (np.isfinite(s) and 0.0 < s < 1.0):
        raise ValueError(
            f"sigma_a2 must lie in the open interval (0, 1), got {sigma_a2!r}; the DEQ's weight "
            "variance sigma_a2 scales the recurrent weights A and sigma_b2 = 1 - sigma_a2 the input "
            "weights B (Ling et al., 2024, use 0.2)."
        )
    return s


def check_sigma_a2_bounds(bounds):
    """``sigma_a2_bounds`` of a Gaussian-process kernel, returned as given: ``'fixed'`` or ``(low, high)``, ``0 < low < high < 1``.

    The GP optimiser searches ``log(sigma_a2)`` between the bounds, and
    ``sigma_a2`` lies in ``(0, 1)``; anything else is a ``ValueError``
    naming the fault (a NaN bound would otherwise be ignored by the
    optimiser).
    """
    rule = "sigma_a2_bounds must be 'fixed' or a pair (low, high) with 0 < low < high < 1"
    if isinstance(bounds, str):
        if bounds == "fixed":
            return bounds
        raise ValueError(f"{rule}, got the string {bounds!r}.")
    try:
        pair = np.asarray(bounds, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{rule}, got {bounds!r}.") from None
    if pair.shape not in ((2,), (1, 2)):
        raise ValueError(f"{rule}, got {bounds!r} (shape {pair.shape}, not two numbers).")
    low, high = pair.reshape(2)
    if not np.isfinite(pair).all():
        fault = "a bound is not finite"
    elif not low > 0:
        fault = "the lower bound must be positive (sigma_a2 is optimised on a log scale)"
    elif not high < 1:
        fault = "the upper bound must be below 1 (sigma_a2 lies in (0, 1))"
    elif not low < high:
        fault = "the lower bound must be below the upper one (use 'fixed' to keep sigma_a2 fixed)"
    else:
        return bounds
    raise ValueError(f"{rule}; got {bounds!r}: {fault}.")


def check_sigma_b2(sigma_b2, sigma_a2: float) -> float:
    """``sigma_b2`` as a positive float, ``1 - sigma_a2`` when ``None``."""
    if sigma_b2 is None:
        return 1.0 - sigma_a2
    s = float(sigma_b2)
    if not (np.isfinite(s) and s > 0.0):
        raise ValueError(f"sigma_b2 must be positive and finite, got {sigma_b2!r}.")
    return s


def check_bias_variance(value) -> float:
    """A kernel's ``bias_variance`` as a finite non-negative float, or a ValueError naming it."""
    v = float(value) if isinstance(value, Real) and not isinstance(value, bool) else math.nan
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"bias_variance must be a finite non-negative number, got {value!r}.")
    return v


def check_tau0(tau0) -> float:
    """The data scale ``tau0`` as a positive finite float, or a clear error."""
    t = _real(tau0, "tau0")
    if not (np.isfinite(t) and t > 0.0):
        raise ValueError(
            f"tau0 must be positive and finite, got {tau0!r}; tau0^2 is the mean squared sample "
            "norm (1/n) sum ||x_i||^2 of the data."
        )
    return t


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
    >>> from sk_deq._inputs import data_tau0
    >>> data_tau0(np.array([[3.0, 4.0], [0.0, 5.0]]))
    5.0
    """
    X = np.asarray(X, dtype=float)
    return check_tau0(math.sqrt(float(np.mean(squared_norms(X)))))


def check_samples(X, name: str = "X", *, n_features: int | None = None, caller: str | None = None) -> np.ndarray:
    """Validate samples for the kernel functions: a dense, finite, non-empty 2-D float64 array.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The samples.
    name : str, default='X'
        How error messages call the array.
    n_features : int, optional
        The number of features it must have (that of the other argument).
    caller : str, optional
        Name of the function or class, for error messages.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)

    Raises
    ------
    ValueError
        For NaN or infinity, sparse, empty or non-2-D input, non-numeric
        values, or the wrong number of features.
    """
    from sklearn.utils.validation import check_array

    reject_meta(X, name, caller)
    X = check_array(
        X,
        accept_sparse=False,
        dtype=np.float64,
        ensure_2d=True,
        ensure_all_finite=True,
        input_name=name,
        estimator=caller,
    )
    if n_features is not None and X.shape[1] != n_features:
        where = f" ({caller})" if caller else ""
        raise ValueError(f"{name} has {X.shape[1]} features, but X has {n_features}{where}: they must match.")
    return X


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
        positive weight identical, or all zero).
    """
    if mode not in INPUT_SCALING:
        raise ValueError(f"input_scaling must be one of {INPUT_SCALING}, got {mode!r}.")
    rows = _NumpyRows(X, sample_weight) if device is None else _TorchRows(X, sample_weight, device)

    def rms_norm(center):
        # sqrt(mean ||x - center||^2) without overflow: squares of entries near 1e154 overflow
        big = rows.abs_max(center)
        return big * math.sqrt(rows.mean_square_norm(center, big)) if big > 0 else 0.0

    if mode == "global":
        mean = rows.mean()
        scale = rms_norm(mean)
        if not scale > 0:
            raise ValueError(
                "All training samples (with positive weight) are identical: input_scaling='global' cannot "
                "normalise them."
            )
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


class _NumpyRows:
    """The rows of positive weight of ``X`` and the statistics of :func:`fit_input_scaling`, in numpy.

    The statistics are written against four operations, which
    :class:`_TorchRows` implements in torch: the (weighted) mean row, the
    largest ``|x - center|`` and the (weighted) mean of ``||(x - center) /
    big||^2``, every one over row blocks of 16 MiB (no centred copy of all
    of ``X``), and the conversion of the mean to numpy.
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
        return np.average(self.X, axis=0, weights=self.w)

    def abs_max(self, center) -> float:
        return max((float(np.max(np.abs(self.X[b] - center))) for b in self.blocks), default=0.0)

    def mean_square_norm(self, center, big) -> float:
        norms = np.concatenate([squared_norms((self.X[b] - center) / big) for b in self.blocks])
        return float(np.average(norms, axis=0, weights=self.w))

    @staticmethod
    def numpy(values):
        return values


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

    def mean_square_norm(self, center, big) -> float:
        def norms(b):
            x = (self._rows(b) - center).div_(big)
            return (x * x).sum(1)

        return float(sum(self._sum(norms(b), b) for b in self.blocks) / self.total)

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
