"""The infinite-width entry of the accuracy-versus-width experiment: exact kernel ridge with the DEQ's kernel.

:func:`sk_deq.experiments.compare_widths` with ``exact_kernel`` fits
:class:`~sk_deq.ImplicitCKRidgeClassifier` with the DEQ's exact implicit
kernel on the splits of the networks: once per split, the kernel being
deterministic (a data set with a test set of its own: once, for all
repeats).  The ridge is chosen by the estimator among
:data:`EXACT_KERNEL_ALPHAS` on a held-out part of the training samples.
"""

from __future__ import annotations

import contextlib
import time
import warnings

import numpy as np

__all__ = [
    "EXACT_KERNELS",
    "EXACT_KERNEL_ALPHAS",
    "EXACT_KERNEL_TEXT",
    "check_exact_kernel",
    "exact_kernel_splits",
    "fit_exact_kernel",
    "report_line",
    "warm_up_exact_kernel",
]

#: The kernels ``exact_kernel`` accepts: the DEQ's feature kernel (the Gram matrix of its features, which the
#: readout sees), its Implicit-CK (the feature kernel plus the input's linear kernel) and its Implicit-NTK.
EXACT_KERNELS = ("feature", "ck", "ntk")

#: How the table names every kernel of :data:`EXACT_KERNELS`.
EXACT_KERNEL_TEXT = {
    "feature": "the DEQ's feature kernel (the limit of its features' Gram matrix, which the readout sees)",
    "ck": "the DEQ's Implicit-CK (its feature kernel plus the input's linear kernel)",
    "ntk": "the DEQ's Implicit-NTK",
}

#: The candidate ridges of the exact kernel fit (``alpha`` of ImplicitCKRidgeClassifier): the estimator holds
#: out a tenth of the training samples, scores every candidate there and refits all samples with the best.
#: They bracket the best ridge of the feature kernel and the CK on subsamples of digits, MNIST and Fashion-MNIST
#: (ReLU and tanh, thousands of rows).  A smaller one, 1e-4, tied 1e-3 on digits and the 5,000 MNIST digits (where
#: ties go to the larger) and lost to it on 20,000 Fashion-MNIST images, after more than twice the conjugate-gradient
#: iterations (benchmarks/results/kernel_ridge_defaults_feature.json).
EXACT_KERNEL_ALPHAS = (1e-3, 1e-2, 1e-1)


def check_exact_kernel(value) -> str | None:
    """``value`` if it is None or a kernel of :data:`EXACT_KERNELS`; else a ValueError naming them."""
    if value is None or (isinstance(value, str) and value in EXACT_KERNELS):
        return value
    raise ValueError(f"exact_kernel must be None or one of {', '.join(map(repr, EXACT_KERNELS))}, got {value!r}.")


def exact_kernel_splits(splits, fixed: bool) -> list:
    """The splits the exact kernel is fitted on, as ``(repeats, split)``: one per repeat, or one for all (fixed)."""
    if fixed:
        return [(list(range(len(splits))), splits[0])]
    return [([r], split) for r, split in enumerate(splits)]


def _estimator(activation, kernel, seed, opts, *, verbose: int):
    from ..kernel_ridge import ImplicitCKRidgeClassifier

    return ImplicitCKRidgeClassifier(
        activation=activation,
        sigma_a2=opts["sigma_a2"],
        kernel=kernel,
        alpha=list(opts["exact_kernel_alphas"]),
        device=opts["estimator"]["device"],
        n_jobs=opts.get("n_jobs"),
        random_state=int(seed),
        verbose=verbose,
    )


def fit_exact_kernel(activation, kernel, seed, split, opts, *, stream=None) -> dict:
    """Fit and score exact kernel ridge on ``split``; its record (without the data set, activation and repeats).

    With a ``stream``, the estimator's memory plan and progress (its kernel
    tiles, every solve) are written there; without, it is silent.
    """
    X_tr, X_te, y_tr, y_te = split
    est = _estimator(activation, kernel, seed, opts, verbose=int(stream is not None))
    shown = contextlib.ExitStack()
    if stream is not None:  # the estimator prints its plan and draws its bars on the standard streams
        shown.enter_context(contextlib.redirect_stdout(stream))
        shown.enter_context(contextlib.redirect_stderr(stream))
    with shown, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        est.fit(X_tr, y_tr)
        t1 = time.perf_counter()
        pred = est.predict(X_te)
        t2 = time.perf_counter()
    scores = getattr(est, "alpha_scores_", None)
    return {
        "kernel": kernel,
        "accuracy": float(np.mean(pred == y_te)),
        "fit_seconds": t1 - t0,
        "predict_seconds": t2 - t1,
        "seconds": t2 - t0,
        "n_train": len(y_tr),
        "alpha": float(est.alpha_),
        "alpha_scores": None if scores is None else [float(s) for s in scores],
        "solver": est.solver_,
        "n_iter": int(est.n_iter_),
        "residual": est.residual_,
        "storage": est.fit_plan_.dtype.name,
        "warnings": sorted({f"{type(w.message).__name__}: {w.message}" for w in caught}),
    }


def warm_up_exact_kernel(split, activations, kernel, opts, *, n_samples: int = 60) -> None:
    """Fit the exact kernel once per activation on ``n_samples`` training rows, untimed (one-off costs)."""
    X_tr, _, y_tr, _ = split
    X_w, y_w = X_tr[:n_samples], y_tr[:n_samples]
    if len(np.unique(y_w)) < 2:
        X_w, y_w = X_tr, y_tr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for activation in activations:
            est = _estimator(activation, kernel, 0, opts, verbose=0).set_params(alpha=1.0)
            est.fit(X_w, y_w)


def report_line(name, activation, rec, out) -> None:
    """The verbose line of one exact kernel fit."""
    out.write(
        f"{name} {activation} exact {rec['kernel']} kernel (infinite width): {100 * rec['accuracy']:.2f}% "
        f"{rec['seconds']:.2f}s, alpha {rec['alpha']:g}\n"
    )
    out.flush()
