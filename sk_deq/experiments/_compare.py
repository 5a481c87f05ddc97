"""The accuracy-versus-width experiment: :func:`compare_widths` and :func:`cross_validate_widths`.

Its result, :class:`CompareResult`, lives in ``_compare_result``.  The package documentation (:mod:`sk_deq.experiments`) describes the three
models it compares and what it records.
"""

from __future__ import annotations

import math
import statistics
import sys

import numpy as np

from ._compare_result import CompareResult, p_text
from ._common import (
    DATASETS,
    MODELS,
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


def _check_datasets(datasets) -> tuple:
    """The data sets as a tuple of names of :data:`DATASETS` and ``(name, X, y)`` tuples, and their distinct names."""
    datasets = (datasets,) if isinstance(datasets, str) else tuple(datasets)
    if not datasets:
        raise ValueError("datasets must name at least one data set.")
    names = []
    for d in datasets:
        if isinstance(d, str):
            if d not in DATASETS:
                raise ValueError(f"unknown dataset {d!r}: use one of {', '.join(sorted(DATASETS))}.")
            names.append(d)
        elif isinstance(d, tuple) and len(d) == 3 and isinstance(d[0], str):
            names.append(d[0])
        else:
            raise ValueError(f"a dataset must be a name from {', '.join(DATASETS)} or a tuple (name, X, y), got {d!r}.")
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


def _subsample(X, y, n_samples, seed):
    if n_samples is None or n_samples >= len(y):
        return X, y
    from sklearn.model_selection import train_test_split

    X_keep, _, y_keep, _ = train_test_split(X, y, train_size=int(n_samples), stratify=y, random_state=seed)
    return X_keep, y_keep


def compare_widths(
    datasets=("mnist", "digits"),
    activations=("relu", "tanh"),
    widths=(32, 128, 256, 1024),
    *,
    repeats: int = 3,
    sigma_a2: float = 0.2,
    test_size: float = 0.2,
    n_samples: int | None = None,
    plain_depth: int = 1,
    n_threads: int | None = 1,
    device: str = "auto",
    dtype: str = "float32",
    random_state: int = 0,
    progress: bool = False,
    verbose: int = 0,
    stream=None,
) -> CompareResult:
    """Accuracy and fit+predict time of a DEQ, its matched explicit net and a plain net versus width.

    For every data set, activation, width and repeat the three models of
    :data:`MODELS` are fitted on one stratified train/test split and scored on
    its test part; every repeat draws a new split and new random weights
    (seed ``random_state + repeat``), shared by the three models so that
    their accuracies and times are paired.  The order in which the three
    models are fitted rotates from one repeat to the next, so a burst of load
    on a shared machine does not always hit the same model.  Before the timed
    fits every model is fitted once on a few samples, untimed, so that
    one-off costs (imports, the matching solve, first calls into torch) are
    not counted.

    Parameters
    ----------
    datasets : sequence of str or (name, X, y), default=('mnist', 'digits')
        Names from :data:`DATASETS` or ``(name, X, y)`` tuples of your own data.
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
        Test fraction of every split.
    n_samples : int or None, default=None
        Size of a stratified subsample (at least 20) drawn from every data
        set before splitting; None uses all samples.
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
    random_state : int, default=0
        Base seed: repeat ``r`` uses ``random_state + r`` for its split and
        its networks' weights; the subsample uses ``random_state``.
    progress : bool, default=False
        Show a one-line progress display (fits done, the fit running, elapsed
        time and an estimate of the time left) on ``stream``.
    verbose : int, default=0
        ``1`` prints one line per width with the accuracies and times.
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
        For an unknown data set or activation, a non-positive width or
        repeat count, or an invalid test fraction or subsample size.

    Examples
    --------
    >>> from sk_deq.experiments import compare_widths
    >>> res = compare_widths(["digits"], ["tanh"], [32], repeats=1, n_samples=300)
    >>> [r["width"] for r in res.summary()]
    [32]
    >>> 0.0 <= res.summary()[0]["models"]["matched"]["accuracy_mean"] <= 1.0
    True
    """
    datasets, names, activations, widths = _validate(
        datasets, activations, widths, repeats, test_size, n_samples, plain_depth, n_threads
    )
    out = stream or sys.stderr
    opts = {
        "sigma_a2": float(sigma_a2),
        "plain_depth": int(plain_depth),
        "estimator": {"device": device, "dtype": dtype},
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
                "random_state": int(random_state),
                "models": list(MODELS),
            },
            environment=environment(threads),
            datasets=info,
        )
        # One matching solve per activation, timed on its own: every fit reuses it.
        for activation in activations:
            _, result.match_seconds[activation] = _solve_match(activation, sigma_a2)

        total = len(names) * len(activations) * len(widths) * int(repeats) * len(MODELS)
        ticker = progress_bar(total, progress, out)
        try:
            for name in names:
                splits = _splits(*loaded[name], test_size, random_state, int(repeats))
                ticker.set_description(f"{name}: warm-up")
                warm_up(splits[0], activations, widths[0], opts, n_samples=60)
                for activation in activations:
                    for width in widths:
                        _fit_width(result, name, activation, width, splits, random_state, opts, ticker)
                        if verbose:
                            _report_width(result, name, activation, width, out, after_progress=progress)
        finally:
            ticker.close("done")
    return result


def _load(datasets, names, n_samples, test_size, random_state):
    """Every data set as ``(X, y)`` (subsampled) by name, and its description and sizes by name."""
    loaded = {}
    info = {}
    for spec, name in zip(datasets, names):
        if isinstance(spec, str):
            X, y = load_dataset(spec)
            description = DATASETS[spec]
        else:
            X, y = np.asarray(spec[1], dtype=float), np.asarray(spec[2])
            if X.ndim != 2 or len(X) != len(y):
                raise ValueError(f"dataset {name!r}: X must be 2-D with as many rows as y has entries.")
            description = name
        X, y = _subsample(X, y, n_samples, random_state)
        loaded[name] = (X, y)
        n_test = math.ceil(test_size * len(y))
        info[name] = {
            "description": description,
            "n_train": len(y) - n_test,
            "n_test": n_test,
            "n_features": int(X.shape[1]),
            "n_classes": len(np.unique(y)),
        }
    return loaded, info


def _splits(X, y, test_size, random_state, repeats):
    """One stratified train/test split per repeat (seed ``random_state + repeat``)."""
    from sklearn.model_selection import train_test_split

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


def cross_validate_widths(
    datasets=("digits",),
    activations=("relu", "tanh"),
    widths=(256, 1024),
    *,
    cv: int = 5,
    sigma_a2: float = 0.2,
    n_samples: int | None = None,
    plain_depth: int = 1,
    n_threads: int | None = 1,
    device: str = "auto",
    dtype: str = "float32",
    random_state: int = 0,
    n_jobs: int | None = None,
) -> list:
    """Cross-validate the DEQ, its matched network and a plain network at every width.

    The counterpart of :func:`compare_widths` on ``cv`` stratified folds
    instead of repeated random splits: for every data set, activation and
    width, :func:`sk_deq.model_selection.compare_estimators` fits the three
    models on the same folds (new weights on every fold, the same for the
    three: ``fold_seed=random_state``) and tests every pair with the
    corrected resampled t-test.

    Parameters
    ----------
    datasets : sequence of str or (name, X, y), default=('digits',)
        Names from :data:`DATASETS` or ``(name, X, y)`` tuples of your own data.
    activations : sequence of str, default=('relu', 'tanh')
        DEQ activations.
    widths : sequence of int, default=(256, 1024)
        Widths ``m``.
    cv : int, default=5
        Number of stratified folds (shuffled with ``random_state``).
    sigma_a2 : float, default=0.2
        The DEQ's recurrent weight variance.
    n_samples : int or None, default=None
        Size of a stratified subsample of every data set; None uses all.
    plain_depth : int, default=1
        Number of layers of the plain network.
    n_threads : int or None, default=1
        Torch intra-op threads during the run (restored afterwards).
    device : str, default='auto'
        Torch device of all estimators.
    dtype : {'float32', 'float64'}, default='float32'
        Precision of all estimators.
    random_state : int, default=0
        Seed of the folds, of the subsample and of the weights.
    n_jobs : int or None, default=None
        Parallel (model, fold) fits (see
        :func:`~sk_deq.model_selection.compare_estimators`).

    Returns
    -------
    list of dict
        One entry per data set, activation and width: ``dataset``,
        ``activation``, ``width`` and ``result`` (a
        :class:`~sk_deq.model_selection.ComparisonResult` of the models
        ``deq``, ``matched`` and ``plain``, scored by accuracy).

    Examples
    --------
    >>> from sk_deq.experiments import cross_validate_widths
    >>> out = cross_validate_widths(["digits"], ["tanh"], [32], cv=3, n_samples=300)
    >>> out[0]["result"].names
    ['deq', 'matched', 'plain']
    >>> 0.0 <= out[0]["result"].test("deq", "matched").pvalue <= 1.0
    True
    """
    from sklearn.model_selection import StratifiedKFold

    from ..model_selection import compare_estimators

    check_count(cv, "cv", 2)
    datasets, names, activations, widths = _validate(
        datasets, activations, widths, 1, 0.2, n_samples, plain_depth, n_threads
    )
    opts = {
        "sigma_a2": float(sigma_a2),
        "plain_depth": int(plain_depth),
        "estimator": {"device": device, "dtype": dtype},
    }
    folds = StratifiedKFold(int(cv), shuffle=True, random_state=random_state)
    out = []
    loaded, _ = _load(datasets, names, n_samples, 0.2, random_state)  # (the test fraction only sizes the info)
    with torch_threads(n_threads):
        for name, (X, y) in loaded.items():
            for activation in activations:
                for width in widths:
                    models = {m: _make(m, activation, width, random_state, opts) for m in MODELS}
                    result = compare_estimators(
                        models, X, y, cv=folds, scoring="accuracy", fold_seed=random_state, n_jobs=n_jobs
                    )
                    out.append({"dataset": name, "activation": activation, "width": int(width), "result": result})
    return out
