"""The demo: a DEQ, its matched explicit network and a plain one on one split, with steady timings."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from .._json import JSONResult
from ._common import DATASETS, _fit_one, _solve_match, check_count, load_dataset, torch_threads, warm_up
from ._provenance import provenance

# The models of the demo's table by their row label.
_MODELS = {"DEQ": "deq", "matched explicit": "matched", "plain explicit": "plain"}


@dataclass
class DemoResult(JSONResult):
    """What :func:`demo` measured.

    Returned by :func:`demo`; every parameter is stored as an attribute of the
    same name.  ``str(result)`` is :meth:`table`.

    Parameters
    ----------
    dataset : str
        Description of the data set (a value of :data:`DATASETS`).
    n_train : int
        Number of training samples.
    n_test : int
        Number of test samples.
    n_hidden : int
        Width of the three networks.
    activation : str
        The DEQ's activation.
    sigma_a2 : float
        The DEQ's recurrent weight variance.
    repeats : int
        Number of timed fits per model.
    torch_threads : int
        Torch intra-op threads during the timings.
    match : dict, default={}
        The matched network (:meth:`sk_deq.matching.MatchResult.to_dict`).
    match_seconds : float, default=0.0
        Time in seconds of the one matching solve (every fit reuses its
        cached result).
    rows : list of dict, default=[]
        Per model (``'DEQ'``, ``'matched explicit'``, ``'plain explicit'``):
        ``accuracy`` on the test set, median ``fit_seconds``, median
        ``predict_seconds`` (whole test set), median ``latency_seconds`` (one
        sample), every repeat's times (``fit_seconds_all``,
        ``predict_seconds_all``, ``latency_seconds_all``), and the speed-ups
        over the DEQ (``fit_speedup``, ``predict_speedup``,
        ``latency_speedup``: the DEQ's median time over the model's).
    seconds : float, default=0.0
        Wall time in seconds of the whole run, warm-up included.
    provenance : dict, default={}
        Where the figures come from (:func:`sk_deq.experiments._provenance.provenance`,
        taken when the run starts): command, time, git commit, machine,
        versions and threads.
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
    provenance: dict = field(default_factory=dict)

    def table(self) -> str:
        """The results as readable text.

        Returns
        -------
        str
            The data set, the DEQ and its matched network (layers and largest
            residual), then one row per model: accuracy, median fit time and
            speed-up, median prediction time for the test set, median
            one-sample latency and its speed-up.
        """
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
        Number of test samples whose one-sample prediction is timed (the
        median counts).

    Returns
    -------
    DemoResult
        Print it (or its :meth:`~DemoResult.table`) for a table;
        ``to_json`` for all numbers.

    Raises
    ------
    ValueError
        If ``repeats`` is below 1 or ``dataset`` is unknown.
    """
    from sklearn.model_selection import train_test_split

    check_count(repeats, "repeats")
    start = time.perf_counter()
    record = provenance(benchmark="sk-deq demo")
    X, y = load_dataset(dataset)
    split = train_test_split(X, y, test_size=0.3, stratify=y, random_state=random_state)
    opts = {"estimator": {}, "sigma_a2": sigma_a2, "plain_depth": 1}
    with torch_threads(n_threads) as threads:
        match, match_seconds = _solve_match(activation, sigma_a2)  # what the matched fits use
        # first-call costs of torch and BLAS: every model fitted (5 epochs, 300 samples) and used once
        warm_up(split, [activation], n_hidden, opts, n_samples=300, seed=random_state, predict=True, max_iter=5)
        times, accuracy = _timed_runs(split, activation, n_hidden, random_state, opts, repeats, latency_samples)
    _, _, y_tr, y_te = split
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
        rows=_rows(times, accuracy),
        seconds=time.perf_counter() - start,
        provenance=record,
    )


def _timed_runs(split, activation, n_hidden, random_state, opts, repeats, latency_samples):
    """Fit and prediction times, one-sample latencies and accuracy of every model, ``repeats`` times interleaved."""
    X_te = split[1]
    times = {name: {"fit": [], "predict": [], "latency": []} for name in _MODELS}
    accuracy = {}
    for _ in range(int(repeats)):
        for name, model in _MODELS.items():
            est, record = _fit_one(model, activation, n_hidden, random_state, split, opts)
            times[name]["latency"].append(_latency(est, X_te, latency_samples))
            times[name]["fit"].append(record["fit_seconds"])
            times[name]["predict"].append(record["predict_seconds"])
            accuracy[name] = record["accuracy"]
    return times, accuracy


def _latency(est, X_te, n_samples):
    """Median time of a prediction for one sample, over the first ``n_samples`` test samples."""
    one = []
    for i in range(min(int(n_samples), len(X_te))):
        t0 = time.perf_counter()
        est.predict(X_te[i : i + 1])
        one.append(time.perf_counter() - t0)
    return statistics.median(one)


def _rows(times, accuracy):
    """The table rows: accuracy, median times and speed-ups over the DEQ of every model."""
    med = {name: {k: statistics.median(v) for k, v in t.items()} for name, t in times.items()}
    deq = med["DEQ"]
    return [
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
        for name in _MODELS
    ]
