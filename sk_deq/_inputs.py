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

import numpy as np

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
    "check_sigma_b2",
    "check_tau0",
    "data_tau0",
    "fit_input_scaling",
    "power_of_two_scale",
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


def check_sigma_b2(sigma_b2, sigma_a2: float) -> float:
    """``sigma_b2`` as a positive float, ``1 - sigma_a2`` when ``None``."""
    if sigma_b2 is None:
        return 1.0 - sigma_a2
    s = float(sigma_b2)
    if not (np.isfinite(s) and s > 0.0):
        raise ValueError(f"sigma_b2 must be positive and finite, got {sigma_b2!r}.")
    return s


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
            "input scaling): the kernels depend on them. Rescale the inputs; input_scaling='global' brings data "
            "on the scale of the training data to norms about 1, not data far outside it."
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


def fit_input_scaling(X, mode: str = "global", sample_weight=None):
    """Fit the input map; returns ``(mean, scale, tau0)``.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Validated, finite training data.
    mode : {'global', 'none'}
        The input scaling (see the module's documentation).
    sample_weight : ndarray of shape (n_samples,), optional
        Non-negative weights: the mean and the mean squared norm are weighted
        averages, so integer weights act as repeated rows.

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
    X = np.asarray(X, dtype=float)
    w = None if sample_weight is None else np.asarray(sample_weight, dtype=float)
    if w is not None and not np.all(w > 0):  # rows of weight zero count as absent, to the last bit
        X, w = X[w > 0], w[w > 0]

    def average(values, axis=0):
        return np.average(values, axis=axis, weights=w)

    step = max(1, 2**21 // max(X.shape[1], 1))  # rows of 16 MiB at a time: no centred copy of all of X
    blocks = [slice(i, i + step) for i in range(0, X.shape[0], step)] if X.size else []

    def rms_norm(center):
        # sqrt(mean ||x - center||^2) without overflow: squares of entries near 1e154 overflow
        big = max((float(np.max(np.abs(X[b] - center))) for b in blocks), default=0.0)
        if not big > 0:
            return 0.0
        norms = np.concatenate([squared_norms((X[b] - center) / big) for b in blocks])
        return big * math.sqrt(float(average(norms)))

    if mode == "global":
        mean = average(X)
        scale = rms_norm(mean)
        if not scale > 0:
            raise ValueError(
                "All training samples (with positive weight) are identical: input_scaling='global' cannot "
                "normalise them."
            )
        return mean, scale, SCALED_TAU0
    if mode == "none":
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
    raise ValueError(f"input_scaling must be one of {INPUT_SCALING}, got {mode!r}.")


def apply_input_scaling(X, mean, scale):
    """Apply a map fitted by :func:`fit_input_scaling`."""
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
