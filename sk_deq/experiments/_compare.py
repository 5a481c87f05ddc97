"""The accuracy-versus-width experiment: :func:`compare_widths` and its :class:`CompareResult`.

The package documentation (:mod:`sk_deq.experiments`) describes the three
models it compares and what it records.
"""

from __future__ import annotations

import math
import statistics
import sys
import warnings
from dataclasses import dataclass, field
from numbers import Integral

import numpy as np

from ._common import (
    DATASETS,
    MODELS,
    _environment,
    _fit_one,
    _JSONResult,
    _make,
    _solve_match,
    _steps,
    _torch_threads,
    load_dataset,
)

_MODEL_LABELS = {"deq": "DEQ", "matched": "matched", "plain": "plain"}


def _mean_std(values):
    values = [float(v) for v in values]
    if not values:
        return math.nan, math.nan
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return mean, std


@dataclass
class CompareResult(_JSONResult):
    """Outcome of :func:`compare_widths`.

    Returned by :func:`compare_widths`, which fills in ``matches``,
    ``match_seconds`` and ``records`` as the fits run; every parameter is
    stored as an attribute of the same name.  ``str(result)`` is
    :meth:`format_table`.

    Parameters
    ----------
    config : dict
        The arguments of the run (data sets, activations, widths, repeats,
        ``sigma_a2``, test fraction, subsample size, seed, threads, device).
    environment : dict
        Versions of Python, torch, numpy and scikit-learn, the machine and the
        number of torch threads used for the timings.
    datasets : dict
        Per data set: ``description``, ``n_train``, ``n_test``, ``n_features``,
        ``n_classes``.
    matches : dict, default={}
        ``matches[dataset][activation]``: the matched explicit network
        (:meth:`sk_deq.matching.MatchResult.to_dict`) of the first fit.
    match_seconds : dict, default={}
        Per activation: wall time in seconds of one matching solve (done once
        per activation; every fit at the same data scale reuses it, so it is
        not part of the matched network's fit time).
    records : list of dict, default=[]
        One entry per fit, in the order run: ``dataset``, ``activation``, ``width``, ``repeat``,
        ``model``, ``accuracy``, ``fit_seconds``, ``predict_seconds``,
        ``seconds`` (fit + predict), ``n_epochs`` (readout iterations),
        ``solver_mean_iter`` and ``solver_converged`` (DEQ only, else None),
        ``warnings`` (messages raised during the fit).
    """

    config: dict
    environment: dict
    datasets: dict
    matches: dict = field(default_factory=dict)
    match_seconds: dict = field(default_factory=dict)
    records: list = field(default_factory=list)

    # -- aggregation --------------------------------------------------------
    def summary(self) -> list:
        """Aggregate the repeats: one row per (dataset, activation, width).

        Returns
        -------
        list of dict
            One row per (dataset, activation, width) that has records, in the
            order of ``config``.  Each has ``dataset``, ``activation``,
            ``width``, ``models`` (per model of :data:`MODELS`:
            ``accuracy_mean``, ``accuracy_std`` (sample standard deviation, 0
            for one repeat), ``accuracies`` (one per repeat),
            ``seconds_median`` and ``seconds`` (fit+predict seconds per
            repeat)), ``time_ratio_median`` and ``time_ratios`` (DEQ
            fit+predict time over the matched network's, paired within every
            repeat; NaN without a pair), and ``tests``: per other model
            (``'matched'``, ``'plain'``), the corrected resampled t-test of
            the DEQ's accuracy minus that model's over the paired repeats
            (:meth:`sk_deq.model_selection.CorrectedTTestResult.to_dict`;
            None with fewer than two repeats).
        """
        rows = []
        for dataset in self.config["datasets"]:
            for activation in self.config["activations"]:
                for width in self.config["widths"]:
                    recs = [
                        r
                        for r in self.records
                        if r["dataset"] == dataset and r["activation"] == activation and r["width"] == width
                    ]
                    if not recs:
                        continue
                    models = {}
                    for model in MODELS:
                        mr = sorted((r for r in recs if r["model"] == model), key=lambda r: r["repeat"])
                        mean, std = _mean_std(r["accuracy"] for r in mr)
                        secs = [r["seconds"] for r in mr]
                        models[model] = {
                            "accuracy_mean": mean,
                            "accuracy_std": std,
                            "accuracies": [r["accuracy"] for r in mr],
                            "seconds_median": statistics.median(secs) if secs else math.nan,
                            "seconds": secs,
                        }
                    by_rep = {}
                    for r in recs:
                        by_rep.setdefault(r["repeat"], {})[r["model"]] = r["seconds"]
                    ratios = [
                        t["deq"] / t["matched"] for _, t in sorted(by_rep.items()) if "deq" in t and "matched" in t
                    ]
                    rows.append(
                        {
                            "dataset": dataset,
                            "activation": activation,
                            "width": width,
                            "models": models,
                            "time_ratio_median": statistics.median(ratios) if ratios else math.nan,
                            "time_ratios": ratios,
                            "tests": self._tests(dataset, models),
                        }
                    )
        return rows

    def _tests(self, dataset, models) -> dict:
        """The corrected resampled t-test of the DEQ against every other model, over the paired repeats."""
        from ..model_selection import corrected_resampled_ttest

        info = self.datasets.get(dataset, {})
        deq = models.get("deq", {}).get("accuracies", [])
        tests = {}
        for model in MODELS[1:]:
            other = models.get(model, {}).get("accuracies", [])
            if len(deq) >= 2 and len(other) == len(deq) and info.get("n_train") and info.get("n_test"):
                tests[model] = corrected_resampled_ttest(deq, other, info["n_train"], info["n_test"]).to_dict()
            else:
                tests[model] = None
        return tests

    def to_dict(self) -> dict:
        """All numbers of the run as a JSON-serialisable dict (``summary`` included).

        Returns
        -------
        dict
            ``config``, ``environment``, ``datasets``, ``matches``,
            ``match_seconds``, ``summary`` (:meth:`summary`) and ``records``.
            :func:`sk_deq.plotting.plot_compare_widths` accepts it in place of
            the result.
        """
        return {
            "config": self.config,
            "environment": self.environment,
            "datasets": self.datasets,
            "matches": self.matches,
            "match_seconds": self.match_seconds,
            "summary": self.summary(),
            "records": self.records,
        }

    # -- display ------------------------------------------------------------
    def format_table(self) -> str:
        """The results as a readable text table.

        Returns
        -------
        str
            Per data set and activation, one line per width: accuracy of every
            model (in %, mean ± standard deviation over the repeats), the
            p-values of the DEQ against the matched and the plain network
            (corrected resampled t-test over the paired repeats, ``*`` below
            0.05; ``-`` with one repeat), median fit+predict seconds of every
            model and the DEQ/matched time ratio; then a verdict on the
            DEQ-versus-matched differences, the matching solve times and the
            distinct warnings raised during the fits.
        """
        rows = self.summary()
        n_rep = self.config["repeats"]
        lines = [
            f"Readout-trained networks, sigma_a2={self.config['sigma_a2']:g}; accuracy in % "
            f"({'mean ± std over ' + str(n_rep) + ' repeats' if n_rep > 1 else 'one repeat'}), "
            "fit+predict seconds (median), DEQ/matched time ratio (median of paired repeats).",
            "p: DEQ vs matched / vs plain accuracy, corrected resampled t-test over the paired repeats "
            "(Nadeau & Bengio 2003), * below 0.05.",
        ]
        head = (
            f"{'width':>6} | {'DEQ acc':>11} {'matched':>11} {'plain':>11} | {'p matched':>9} {'p plain':>8} | "
            f"{'DEQ s':>8} {'matched s':>9} {'plain s':>8} | {'DEQ/matched':>11}"
        )
        for dataset in self.config["datasets"]:
            info = self.datasets.get(dataset, {})
            for activation in self.config["activations"]:
                block = [r for r in rows if r["dataset"] == dataset and r["activation"] == activation]
                if not block:
                    continue
                lines.append("")
                title = (
                    f"{info.get('description', dataset)}: {info.get('n_train', '?')} train / "
                    f"{info.get('n_test', '?')} test; {activation}-DEQ"
                )
                match = self.matches.get(dataset, {}).get(activation)
                if match:
                    title += f" vs matched {match['family']} (largest residual {match['max_residual']:.1e})"
                plain = "-".join([activation] * int(self.config.get("plain_depth", 1)))
                title += f" vs plain {plain}"
                lines.append(title)
                lines.append(head)
                lines.append("-" * len(head))
                for r in block:
                    m = r["models"]

                    def acc(name, m=m):
                        a, s = m[name]["accuracy_mean"], m[name]["accuracy_std"]
                        return f"{100 * a:.2f}" if n_rep == 1 else f"{100 * a:.2f}±{100 * s:.2f}"

                    lines.append(
                        f"{r['width']:>6} | {acc('deq'):>11} {acc('matched'):>11} {acc('plain'):>11} | "
                        f"{_p_text(r['tests'].get('matched')):>9} {_p_text(r['tests'].get('plain')):>8} | "
                        f"{m['deq']['seconds_median']:>8.3f} {m['matched']['seconds_median']:>9.3f} "
                        f"{m['plain']['seconds_median']:>8.3f} | {r['time_ratio_median']:>10.2f}x"
                    )
        verdict = _verdict(rows)
        if verdict:
            lines.append("")
            lines.append(verdict)
        if self.match_seconds:
            solves = ", ".join(f"{a} {s:.2f}s" for a, s in self.match_seconds.items())
            lines.append("")
            lines.append(f"One matching solve per activation (not in the matched fit times): {solves}.")
        warned = sorted({w for r in self.records for w in r["warnings"]})
        if warned:
            lines.append("")
            lines.append(f"{len(warned)} distinct warning(s) during the fits:")
            lines.extend(f"  - {w}" for w in warned)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format_table()


def _p_text(test) -> str:
    """A p-value in a table cell: three decimals, ``*`` below 0.05, ``-`` without a test."""
    if not test or not math.isfinite(test["pvalue"]):
        return "-"
    p = test["pvalue"]
    return ("<0.001" if p < 0.001 else f"{p:.3f}") + ("*" if p < 0.05 else "")


def _verdict(rows) -> str:
    """One sentence: at how many widths the DEQ and the matched network differ significantly (p < 0.05)."""
    tests = [(r, r["tests"].get("matched")) for r in rows]
    tests = [(r, t) for r, t in tests if t and math.isfinite(t["pvalue"])]
    if not tests:
        return ""
    hits = [(r, t) for r, t in tests if t["pvalue"] < 0.05]
    text = f"DEQ vs matched: significant (p < 0.05) in {len(hits)} of {len(tests)} comparisons"
    if hits:
        where = ", ".join(
            f"{r['dataset']} {r['activation']} width {r['width']} "
            f"({'DEQ' if t['mean_difference'] > 0 else 'matched'} ahead by {100 * abs(t['mean_difference']):.2f} points)"
            for r, t in hits
        )
        text += f": {where}"
    return text + "."


def cv_verdict(runs) -> str:
    """The closing line of :func:`compare_widths`' table for the runs of :func:`cross_validate_widths`.

    Parameters
    ----------
    runs : list of dict
        :func:`cross_validate_widths`' output.

    Returns
    -------
    str
        At how many widths the DEQ and the matched network differ
        significantly (p < 0.05), and where; empty if no test has a p-value.
    """
    rows = [
        {
            **{k: run[k] for k in ("dataset", "activation", "width")},
            "tests": {"matched": run["result"].test("deq", "matched").to_dict()},
        }
        for run in runs
        if run["result"].pairwise
    ]
    return _verdict(rows)


def _validate(datasets, activations, widths, repeats, test_size, n_samples, plain_depth, n_threads):
    if isinstance(datasets, str):
        datasets = (datasets,)
    datasets = tuple(datasets)
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

    from ..activations import ACTIVATIONS, get_activation

    if isinstance(activations, str):
        activations = (activations,)
    activations = tuple(activations)
    if not activations:
        raise ValueError("activations must name at least one activation.")
    for a in activations:
        if not isinstance(a, str):
            raise ValueError(f"activations must be given by name (one of {', '.join(sorted(ACTIVATIONS))}), got {a!r}.")
        get_activation(a)  # raises a ValueError naming the known activations
    if len(set(activations)) != len(activations):
        raise ValueError(f"activations must be distinct, got {list(activations)}.")

    if isinstance(widths, Integral):
        widths = (widths,)
    widths = tuple(widths)
    if not widths:
        raise ValueError("widths must hold at least one width.")
    for w in widths:
        if isinstance(w, bool) or not isinstance(w, Integral) or w < 1:
            raise ValueError(f"widths must be positive integers, got {w!r}.")
    widths = tuple(sorted({int(w) for w in widths}))

    if isinstance(repeats, bool) or not isinstance(repeats, Integral) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}.")
    if not (isinstance(test_size, float) and 0.0 < test_size < 1.0):
        raise ValueError(f"test_size must be a float in (0, 1), got {test_size!r}.")
    if n_samples is not None and (isinstance(n_samples, bool) or not isinstance(n_samples, Integral) or n_samples < 20):
        raise ValueError(f"n_samples must be None or an integer of at least 20, got {n_samples!r}.")
    if isinstance(plain_depth, bool) or not isinstance(plain_depth, Integral) or plain_depth < 1:
        raise ValueError(f"plain_depth must be a positive integer, got {plain_depth!r}.")
    if n_threads is not None and (isinstance(n_threads, bool) or not isinstance(n_threads, Integral) or n_threads < 1):
        raise ValueError(f"n_threads must be None or a positive integer, got {n_threads!r}.")
    return datasets, names, activations, widths


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
        The DEQ's recurrent weight variance (the paper's value).
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

    with _torch_threads(n_threads) as threads:
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
            environment=_environment(threads),
            datasets=info,
        )
        # One matching solve per activation, timed on its own: every fit reuses it.
        for activation in activations:
            _, result.match_seconds[activation] = _solve_match(activation, sigma_a2)

        total = len(names) * len(activations) * len(widths) * int(repeats) * len(MODELS)
        ticker = _steps(total, progress, out)
        try:
            for name in names:
                splits = _splits(*loaded[name], test_size, random_state, int(repeats))
                _warm_up(name, splits[0], activations, widths[0], opts, ticker)
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


def _warm_up(name, split, activations, width, opts, ticker):
    """Fit every model once on a few samples, untimed: one-off costs stay out of the timings."""
    X_w, y_w = split[0][:60], split[2][:60]
    if len(np.unique(y_w)) < 2:
        X_w, y_w = split[0], split[2]
    for activation in activations:
        ticker.set_description(f"{name} {activation}: warm-up")
        for model in MODELS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _make(model, activation, width, 0, opts).fit(X_w, y_w)


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
        parts.append(f"DEQ vs matched p = {_p_text(test)}")
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

    if isinstance(cv, bool) or not isinstance(cv, Integral) or cv < 2:
        raise ValueError(f"cv must be an integer of at least 2 folds, got {cv!r}.")
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
    with _torch_threads(n_threads):
        for name, (X, y) in loaded.items():
            for activation in activations:
                for width in widths:
                    models = {m: _make(m, activation, width, random_state, opts) for m in MODELS}
                    result = compare_estimators(
                        models, X, y, cv=folds, scoring="accuracy", fold_seed=random_state, n_jobs=n_jobs
                    )
                    out.append({"dataset": name, "activation": activation, "width": int(width), "result": result})
    return out
