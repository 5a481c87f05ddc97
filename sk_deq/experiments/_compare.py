"""The accuracy-versus-width experiment: :func:`compare_widths` (cross-validated: ``_compare_cv``).

Its result, :class:`CompareResult`, lives in ``_compare_result``.  The package documentation (:mod:`sk_deq.experiments`) describes the three
models it compares and what it records.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
from collections.abc import Sequence
from typing import IO, Any

import numpy as np

from .._validation import check_bool, check_label_vector
from ._compare_result import CompareResult, p_text
from ._exact_kernel import (
    EXACT_KERNEL_ALPHAS,
    check_exact_kernel,
    exact_kernel_splits,
    fit_exact_kernel,
    report_line,
    warm_up_exact_kernel,
)
from ._own_data import check_dataset, load_npz
from ._provenance import provenance
from ._common import (
    DATASETS,
    MODELS,
    OFFICIAL_TEST_SIZES,
    _fit_one,
    _make,
    _solve_match,
    check_count,
    check_counts,
    environment,
    load_dataset,
    progress_bar,
    torch_threads,
    warm_up,
)

_MODEL_LABELS = {"deq": "DEQ", "matched": "matched", "plain": "plain"}


# What trainable='all' trains with unless estimator_params say otherwise (documented in compare_widths).
SGD_TRAINING = {"solver": "sgd", "learning_rate_init": 3.0, "batch_size": 128, "max_iter": 10}


def _validate(datasets, activations, widths, repeats, test_size, n_samples, plain_depth, n_threads):
    """Check the arguments of :func:`compare_widths`; return the data sets, their names, the activations and widths."""
    datasets, names = _check_datasets(datasets)
    activations = _check_activations(activations)
    widths = tuple(sorted(set(check_counts(widths, "widths", "width"))))
    check_count(repeats, "repeats")
    if not (isinstance(test_size, float) and 0.0 < test_size < 1.0):
        raise ValueError(f"test_size must be a float in (0, 1), got {test_size!r}.")
    check_count(n_samples, "n_samples", 20, allow_none=True)
    check_count(plain_depth, "plain_depth")
    check_count(n_threads, "n_threads", allow_none=True)
    return datasets, names, activations, widths


def _estimator_options(trainable, estimator_params, device, dtype) -> dict:
    """The parameters every compared estimator gets: device, dtype, ``trainable`` and the training settings."""
    if trainable not in ("readout", "all"):
        raise ValueError(f"trainable must be 'readout' or 'all', got {trainable!r}.")
    if estimator_params is not None and not isinstance(estimator_params, dict):
        raise ValueError(f"estimator_params must be a dict of estimator parameters, got {estimator_params!r}.")
    params = dict(SGD_TRAINING) if trainable == "all" else {}
    params.update(estimator_params or {})
    reserved = sorted({"n_hidden", "random_state", "activation", "sigma_a2", "layers"} & set(params))
    if reserved:
        raise ValueError(f"estimator_params cannot set {', '.join(reserved)}: the comparison sets them per model.")
    return {"device": device, "dtype": dtype, "trainable": trainable, **params}


def _check_datasets(datasets) -> tuple:
    """The data sets as a tuple of names, ``.npz`` paths and tuples of arrays, and their distinct names."""
    datasets = (datasets,) if isinstance(datasets, str) else tuple(datasets)
    if not datasets:
        raise ValueError("datasets must name at least one data set.")
    names = []
    for d in datasets:
        if isinstance(d, str) and d in DATASETS:
            names.append(d)
        elif isinstance(d, str) and d.endswith(".npz"):
            names.append(os.path.splitext(os.path.basename(d))[0])
        elif isinstance(d, tuple) and len(d) in (3, 5) and isinstance(d[0], str):
            names.append(d[0])
        elif isinstance(d, str):
            raise ValueError(f"unknown dataset {d!r}: use one of {', '.join(sorted(DATASETS))}, or a .npz file.")
        else:
            raise ValueError(
                f"a dataset must be a name from {', '.join(DATASETS)}, a .npz file, or a tuple (name, X, y) or "
                f"(name, X, y, X_test, y_test), got {d!r}."
            )
    if len(set(names)) != len(names):
        raise ValueError(f"dataset names must be distinct, got {names}.")
    return datasets, names


def _check_activations(activations) -> tuple:
    """The activations as a tuple of distinct known names."""
    from ..activations import ACTIVATIONS, get_activation

    activations = (activations,) if isinstance(activations, str) else tuple(activations)
    if not activations:
        raise ValueError("activations must name at least one activation.")
    for a in activations:
        if not isinstance(a, str):
            raise ValueError(f"activations must be given by name (one of {', '.join(sorted(ACTIVATIONS))}), got {a!r}.")
        get_activation(a)  # raises a ValueError naming the known activations
    if len(set(activations)) != len(activations):
        raise ValueError(f"activations must be distinct, got {list(activations)}.")
    return activations


def _subsample(X, y, n_test, n_samples, seed):
    """A stratified subsample of ``n_samples`` rows; with a fixed test set (its last ``n_test`` rows) of each part,
    in proportion to their sizes.  Returns ``X, y, n_test``."""
    if n_samples is None or n_samples >= len(y):
        return X, y, n_test
    from sklearn.model_selection import train_test_split

    if n_test is None:
        X_keep, _, y_keep, _ = train_test_split(X, y, train_size=int(n_samples), stratify=y, random_state=seed)
        return X_keep, y_keep, None
    k = len(y) - n_test
    n_test_keep = max(1, round(n_samples * n_test / len(y)))
    parts = []
    for Xp, yp, size in ((X[:k], y[:k], n_samples - n_test_keep), (X[k:], y[k:], n_test_keep)):
        if size < len(yp):
            Xp, _, yp, _ = train_test_split(Xp, yp, train_size=size, stratify=yp, random_state=seed)
        parts.append((Xp, yp))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), len(parts[1][1])


def compare_widths(
    datasets: Sequence[str | tuple] = ("mnist", "digits"),
    activations: Sequence[str] = ("relu", "tanh"),
    widths: Sequence[int] = (32, 128, 256, 1024),
    *,
    repeats: int = 3,
    sigma_a2: float = 0.2,
    test_size: float = 0.2,
    n_samples: int | None = None,
    plain_depth: int = 1,
    n_threads: int | None = 1,
    device: str = "auto",
    dtype: str = "float32",
    trainable: str = "readout",
    estimator_params: dict | None = None,
    exact_kernel: str | None = None,
    random_state: int = 0,
    progress: bool = False,
    verbose: int = 0,
    stream: IO[str] | None = None,
) -> CompareResult:
    """Accuracy and fit+predict time of a DEQ, its matched explicit net and a plain net versus width.

    For every data set, activation, width and repeat the three models of
    :data:`MODELS` are fitted on one train/test split and scored on its test
    part.  Every repeat draws new random weights (seed ``random_state +
    repeat``), shared by the three models so that their accuracies and times
    are paired; it also draws a new stratified split, except for a data set
    with a test set of its own (the official split of ``'fashion-mnist'``
    and ``'mnist-full'``, ``X_test`` of a ``.npz`` file), which every repeat
    keeps.  The order in which the three
    models are fitted rotates from one repeat to the next, so a burst of load
    on a shared machine does not always hit the same model.  Before the timed
    fits every model is fitted once on a few samples, untimed, so that
    one-off costs (imports, the matching solve, first calls into torch) are
    not counted.

    Parameters
    ----------
    datasets : sequence of str or tuple, default=('mnist', 'digits')
        Names from :data:`DATASETS`; paths of ``.npz`` files of your own
        data (arrays ``X``, ``y`` and optionally ``X_test``, ``y_test``,
        named after the file); or tuples ``(name, X, y)`` or ``(name, X, y,
        X_test, y_test)``.
    activations : sequence of str, default=('relu', 'tanh')
        DEQ activations (names of :data:`sk_deq.activations.ACTIVATIONS`).
        ``'relu'`` is matched by two leaky-ReLU layers, ``'tanh'`` by one
        hard-tanh layer.
    widths : sequence of int, default=(32, 128, 256, 1024)
        Widths ``m`` (hidden units of the DEQ and of every explicit layer).
    repeats : int, default=3
        Repeats per width, each with its own split and weight draw.
    sigma_a2 : float, default=0.2
        The DEQ's recurrent weight variance (Ling et al.'s (2024) value).
    test_size : float, default=0.2
        Test fraction of every random split (a data set with its own test
        set keeps it).
    n_samples : int or None, default=None
        Size of a stratified subsample (at least 20) drawn from every data
        set before splitting (from its training and test sets in proportion
        to their sizes, where it has its own); None uses all samples.
    plain_depth : int, default=1
        Number of layers of the plain network (``1``: one layer of the plain
        activation; ``2``: the matched ReLU network's architecture with plain
        ReLUs).
    n_threads : int or None, default=1
        Torch intra-op threads during the run (restored afterwards); None
        keeps torch's setting.  The networks compared here are small enough
        that one thread loses little, and it keeps the timings steady: on a
        2-core machine with other load, torch's default two threads made the
        same fits up to ten times slower and erratic.
    device : str, default='auto'
        Torch device of all estimators (``'auto'``: CUDA when available, else
        the CPU).
    dtype : {'float32', 'float64'}, default='float32'
        Precision of all estimators.
    trainable : {'readout', 'all'}, default='readout'
        ``'readout'``: the random weights frozen and the readout fitted by
        L-BFGS on the cached features (Ling et al.'s (2024) theory);
        ``'all'``: every weight trained end to end with minibatch SGD, as in
        Ling et al.'s (2024) experiments, with :data:`SGD_TRAINING` (Nesterov
        momentum 0.9, step 3.0, batches of 128, 10 epochs) unless
        ``estimator_params`` says otherwise.  The features are scaled by
        ``1 / sqrt(m)``, so the readout's gradients are small and SGD needs a
        large step.
    estimator_params : dict or None, default=None
        Parameters set on all three estimators (e.g. ``{"max_iter": 5}`` or
        ``{"alpha": 1e-4}``), checked by them; they override the training
        defaults of ``trainable='all'``.
    exact_kernel : {'feature', 'ck', 'ntk'} or None, default=None
        Also fit exact kernel ridge with this implicit kernel of the DEQ
        (:class:`~sk_deq.ImplicitCKRidgeClassifier` on ±1 one-hot targets,
        float64, the kernel's blocks on ``device`` and its threads
        ``n_threads``) for every data set and activation: the entry of
        infinite width.  ``'feature'`` is the limit of the Gram matrix of
        the DEQ's features, the kernel its readout sees, so exact kernel
        ridge with it is the infinite-width limit of the readout-trained
        DEQ with a least-squares readout (``estimator_params={"readout":
        "ridge"}``; the default cross-entropy readout has the same kernel
        and another loss) and, as far as the matching holds, of the matched
        network; ``'ck'`` adds the input's linear kernel ``sigma_b2 x.y`` (the
        Implicit-CK), ``'ntk'`` is the Implicit-NTK.  The kernel does not
        depend on the seed, so it is fitted once per split: once per
        repeat, or once for all repeats on a data set with a test set of
        its own.  The ridge is chosen by the estimator among
        :data:`EXACT_KERNEL_ALPHAS` on a held-out tenth of the training
        samples (seeded by the split's seed).  See
        :meth:`CompareResult.exact_kernel_summary`.
    random_state : int, default=0
        Base seed: repeat ``r`` uses ``random_state + r`` for its split and
        its networks' weights; the subsample uses ``random_state``.
    progress : bool, default=False
        Show a one-line progress display (fits done, the fit running, elapsed
        time and an estimate of the time left) on ``stream``; an exact
        kernel fit also shows its memory plan and the progress of its kernel
        and of its solves there.
    verbose : int, default=0
        ``1`` prints one line per width with the accuracies and times (and
        one per exact kernel fit).
    stream : file-like or None, default=None
        Where progress and verbose lines go; None means ``sys.stderr``.

    Returns
    -------
    CompareResult
        Print it for a table; ``to_json`` for all numbers;
        :func:`sk_deq.plotting.plot_compare_widths` draws it.

    Raises
    ------
    ValueError
        For an unknown data set, activation or exact kernel, a non-positive
        width or repeat count, or an invalid test fraction or subsample
        size.

    Examples
    --------
    >>> from sk_deq.experiments import compare_widths
    >>> res = compare_widths(["digits"], ["tanh"], [32], repeats=1, n_samples=300)
    >>> [r["width"] for r in res.summary()]
    [32]
    >>> 0.0 <= res.summary()[0]["models"]["matched"]["accuracy_mean"] <= 1.0
    True
    """
    check_bool(progress, "progress", "compare_widths")
    datasets, names, activations, widths = _validate(
        datasets, activations, widths, repeats, test_size, n_samples, plain_depth, n_threads
    )
    exact_kernel = check_exact_kernel(exact_kernel)
    out = stream or sys.stderr
    opts: dict[str, Any] = {
        "sigma_a2": float(sigma_a2),
        "plain_depth": int(plain_depth),
        "estimator": _estimator_options(trainable, estimator_params, device, dtype),
        "exact_kernel_alphas": EXACT_KERNEL_ALPHAS,
        "n_jobs": n_threads,
    }
    # Cheap checks of the estimator settings (fail before any long work).
    for model in MODELS:
        _make(model, activations[0], widths[0], 0, opts).get_params()
    loaded, info = _load(datasets, names, n_samples, test_size, random_state)

    with torch_threads(n_threads) as threads:
        result = CompareResult(
            config={
                "datasets": names,
                "activations": list(activations),
                "widths": list(widths),
                "repeats": int(repeats),
                "sigma_a2": float(sigma_a2),
                "test_size": float(test_size),
                "n_samples": n_samples,
                "plain_depth": int(plain_depth),
                "device": device,
                "dtype": dtype,
                "trainable": trainable,
                "estimator_params": {k: v for k, v in opts["estimator"].items() if k not in ("device", "dtype")},
                "random_state": int(random_state),
                "models": list(MODELS),
                "exact_kernel": exact_kernel,
                "exact_kernel_alphas": list(EXACT_KERNEL_ALPHAS) if exact_kernel else None,
            },
            environment=environment(threads),
            datasets=info,
            provenance=provenance(benchmark="sk-deq compare"),
        )
        # One matching solve per activation, timed on its own: every fit reuses it.
        for activation in activations:
            _, result.match_seconds[activation] = _solve_match(activation, sigma_a2)

        total = len(names) * len(activations) * len(widths) * int(repeats) * len(MODELS)
        if exact_kernel:  # one fit per split and activation
            total += len(activations) * sum(1 if info[n]["split"] == "fixed" else int(repeats) for n in names)
        ticker = progress_bar(total, progress, out)
        try:
            for name in names:
                splits = _splits(*loaded[name], test_size, random_state, int(repeats))
                ticker.set_description(f"{name}: warm-up")
                warm_up(splits[0], activations, widths[0], opts, n_samples=60)
                if exact_kernel:
                    warm_up_exact_kernel(splits[0], activations, exact_kernel, opts)
                for activation in activations:
                    for width in widths:
                        _fit_width(result, name, activation, width, splits, random_state, opts, ticker)
                        if verbose:
                            _report_width(result, name, activation, width, out, after_progress=progress)
                    if exact_kernel:
                        _fit_exact_kernel(result, name, activation, splits, random_state, opts, ticker, out, verbose)
        finally:
            ticker.close("done")
    return result


def _load(
    datasets, names, n_samples, test_size, random_state
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray, int | None]], dict[str, dict]]:
    """Every data set as ``(X, y, n_test)`` (subsampled; ``n_test`` the size of its own test set, its last rows, or
    None) by name, and its description and sizes by name."""
    loaded: dict[str, tuple[np.ndarray, np.ndarray, int | None]] = {}
    info: dict[str, dict] = {}
    for spec, name in zip(datasets, names):
        X, y, n_test, description = _load_one(spec, name)
        X, y, n_test = _subsample(X, y, n_test, n_samples, random_state)
        loaded[name] = (X, y, n_test)
        n_test_split = n_test if n_test is not None else math.ceil(test_size * len(y))
        info[name] = {
            "description": description,
            "n_train": len(y) - n_test_split,
            "n_test": n_test_split,
            "split": "random" if n_test is None else "fixed",
            "n_features": int(X.shape[1]),
            "n_classes": len(np.unique(y)),
        }
    return loaded, info


def _load_one(spec, name):
    """One data set as ``(X, y, n_test, description)``."""
    if isinstance(spec, str) and spec in DATASETS:
        X, y = load_dataset(spec)
        return X, y, OFFICIAL_TEST_SIZES.get(spec), DATASETS[spec]
    if isinstance(spec, str):
        X, y, n_test = load_npz(spec)
        return X, y, n_test, f"{os.path.basename(spec)} ({'own test set' if n_test else 'random splits'})"
    parts = []
    for i, names in zip((1, 3), (("X", "y"), ("X_test", "y_test"))):
        if i < len(spec):  # one label per sample: a column vector is raveled, never compared with every prediction
            y = check_label_vector(np.asarray(spec[i + 1]), names[1], f"dataset {name!r}")
            parts.append((check_dataset(spec[i], y, f"dataset {name!r}", names, test=i > 1), y))
    if len(parts) == 2 and parts[1][0].shape[1] != parts[0][0].shape[1]:
        raise ValueError(f"dataset {name!r}: X_test must have as many columns as X.")
    X = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    return X, y, (len(parts[1][1]) if len(parts) == 2 else None), name


def _splits(X, y, n_test, test_size, random_state, repeats):
    """One split per repeat: the data set's own test set (its last ``n_test`` rows) every time, or a new stratified
    split per repeat (seed ``random_state + repeat``)."""
    from sklearn.model_selection import train_test_split

    if n_test is not None:
        k = len(y) - n_test
        return [(X[:k], X[k:], y[:k], y[k:])] * repeats
    return [
        train_test_split(X, y, test_size=test_size, stratify=y, random_state=random_state + r) for r in range(repeats)
    ]


def _fit_width(result, name, activation, width, splits, random_state, opts, ticker):
    """Fit the three models on every repeat's split at one width and record them.

    The order of the models rotates from one repeat to the next; the matched
    network of the first fit is kept in ``result.matches``.
    """
    for r, split in enumerate(splits):
        order = MODELS[r % 3 :] + MODELS[: r % 3]
        for model in order:
            ticker.set_description(f"{name} {activation} width {width} repeat {r + 1}: {model}")
            est, rec = _fit_one(model, activation, width, random_state + r, split, opts)
            rec = {"dataset": name, "activation": activation, "width": width, "repeat": r, **rec}
            result.records.append(rec)
            if model == "matched" and activation not in result.matches.setdefault(name, {}):
                result.matches[name][activation] = est.match_.to_dict()
            ticker.update(refresh=False)


def _fit_exact_kernel(result, name, activation, splits, random_state, opts, ticker, out, verbose):
    """Fit the exact kernel once per split of the data set (its progress below the progress display) and record it."""
    kernel = result.config["exact_kernel"]
    for repeats, split in exact_kernel_splits(splits, result.datasets[name]["split"] == "fixed"):
        which = f"repeat {repeats[0] + 1}" if len(repeats) == 1 else "all repeats"
        ticker.set_description(f"{name} {activation} {which}: exact {kernel} kernel")
        if ticker.enabled:
            out.write("\n")  # the fit's plan and bars below the display's line
        rec = fit_exact_kernel(
            activation, kernel, random_state + repeats[0], split, opts, stream=out if ticker.enabled else None
        )
        result.exact_kernel_records.append({"dataset": name, "activation": activation, "repeats": repeats, **rec})
        ticker.update(refresh=False)
        if verbose:
            report_line(name, activation, rec, out)


def _report_width(result, name, activation, width, out, *, after_progress: bool):
    """The verbose line of one width: mean accuracy and median time of every model."""
    recs = [x for x in result.records if x["dataset"] == name and x["activation"] == activation and x["width"] == width]
    parts = []
    for model in MODELS:
        acc = statistics.fmean(x["accuracy"] for x in recs if x["model"] == model)
        sec = statistics.median(x["seconds"] for x in recs if x["model"] == model)
        parts.append(f"{_MODEL_LABELS[model]} {100 * acc:.2f}% {sec:.2f}s")
    row = next(
        (r for r in result.summary() if r["dataset"] == name and r["activation"] == activation and r["width"] == width),
        None,
    )
    test = row["tests"].get("matched") if row else None
    if test:
        parts.append(f"DEQ vs matched p = {p_text(test)}")
    if after_progress:
        out.write("\n")
    out.write(f"{name} {activation} width {width}: " + ", ".join(parts) + "\n")
    out.flush()
