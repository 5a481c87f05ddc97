"""The result of the accuracy-versus-width experiment: :class:`CompareResult`, its table and its verdict."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from .._json import JSONResult
from ._common import MODELS, mean_std
from ._exact_kernel import EXACT_KERNEL_TEXT


@dataclass
class CompareResult(JSONResult):
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
        Per data set: ``description``, ``n_train``, ``n_test``, ``split``
        (``'random'``: a new stratified split per repeat; ``'fixed'``: the
        data set's own test set in every repeat), ``n_features``,
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
    provenance : dict, default={}
        Where the figures come from (:func:`sk_deq.experiments._provenance.provenance`,
        taken when the run starts): command, time, git commit, machine,
        versions and threads.
    exact_kernel_records : list of dict, default=[]
        One entry per exact kernel fit (``config['exact_kernel']``), in the
        order run: ``dataset``, ``activation``, ``repeats`` (the repeats
        whose split it was fitted on: one, or all where the data set has a
        test set of its own), ``kernel``, ``accuracy``, ``fit_seconds``,
        ``predict_seconds``, ``seconds``, ``n_train``, ``alpha`` (the ridge
        chosen), ``alpha_scores`` (held-out accuracy of every candidate of
        ``config['exact_kernel_alphas']``), ``solver``, ``n_iter``,
        ``residual``, ``storage`` (the stored kernel's dtype) and
        ``warnings``.
    """

    config: dict
    environment: dict
    datasets: dict
    matches: dict = field(default_factory=dict)
    match_seconds: dict = field(default_factory=dict)
    records: list = field(default_factory=list)
    provenance: dict = field(default_factory=dict)
    exact_kernel_records: list = field(default_factory=list)

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
                        mean, std = mean_std(r["accuracy"] for r in mr)
                        secs = [r["seconds"] for r in mr]
                        models[model] = {
                            "accuracy_mean": mean,
                            "accuracy_std": std,
                            "accuracies": [r["accuracy"] for r in mr],
                            "seconds_median": statistics.median(secs) if secs else math.nan,
                            "seconds": secs,
                        }
                    by_rep: dict[int, dict[str, float]] = {}
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

    def exact_kernel_summary(self) -> list:
        """Aggregate the exact kernel fits: one row per (dataset, activation), the entry of infinite width.

        Returns
        -------
        list of dict
            One row per (dataset, activation) that has exact kernel records,
            in the order of ``config`` (none without ``exact_kernel``), with
            ``dataset``, ``activation``, ``kernel``, ``n_fits`` (one per
            split), ``accuracy_mean``, ``accuracy_std`` (sample standard
            deviation over the fits, 0 for one), ``accuracies``,
            ``seconds_median``, ``seconds`` (fit+predict seconds per fit)
            and ``alphas`` (the ridge chosen by every fit).
        """
        rows = []
        for dataset in self.config["datasets"]:
            for activation in self.config["activations"]:
                recs = [
                    r for r in self.exact_kernel_records if r["dataset"] == dataset and r["activation"] == activation
                ]
                if not recs:
                    continue
                mean, std = mean_std(r["accuracy"] for r in recs)
                secs = [r["seconds"] for r in recs]
                rows.append(
                    {
                        "dataset": dataset,
                        "activation": activation,
                        "kernel": recs[0]["kernel"],
                        "n_fits": len(recs),
                        "accuracy_mean": mean,
                        "accuracy_std": std,
                        "accuracies": [r["accuracy"] for r in recs],
                        "seconds_median": statistics.median(secs),
                        "seconds": secs,
                        "alphas": [r["alpha"] for r in recs],
                    }
                )
        return rows

    def _tests(self, dataset, models) -> dict:
        """The corrected resampled t-test of the DEQ against every other model, over the paired repeats."""
        from ..model_selection import corrected_resampled_ttest

        info = self.datasets.get(dataset, {})
        deq = models.get("deq", {}).get("accuracies", [])
        tests: dict[str, dict | None] = {}
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
            ``provenance``, ``config``, ``environment``, ``datasets``,
            ``matches``, ``match_seconds``, ``summary`` (:meth:`summary`),
            ``records``, ``exact_kernel_summary``
            (:meth:`exact_kernel_summary`) and ``exact_kernel_records``
            (both empty lists without ``exact_kernel``).
            :func:`sk_deq.plotting.plot_compare_widths` accepts it in place of
            the result.
        """
        return {
            "provenance": self.provenance,
            "config": self.config,
            "environment": self.environment,
            "datasets": self.datasets,
            "matches": self.matches,
            "match_seconds": self.match_seconds,
            "summary": self.summary(),
            "records": self.records,
            "exact_kernel_summary": self.exact_kernel_summary(),
            "exact_kernel_records": self.exact_kernel_records,
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
            distinct warnings raised during the fits.  With exact kernel fits
            (``config['exact_kernel']``), every data set and activation ends
            with a line of infinite width (``∞``): the exact kernel's
            accuracy (mean ± std over its fits where there are several), the
            ridge it chose and its median fit+predict seconds.
        """
        rows = self.summary()
        exact = {(r["dataset"], r["activation"]): r for r in self.exact_kernel_summary()}
        n_rep = self.config["repeats"]
        lines = [
            f"{self._training_text()}, sigma_a2={self.config['sigma_a2']:g}; accuracy in % "
            f"({'mean ± std over ' + str(n_rep) + ' repeats' if n_rep > 1 else 'one repeat'}), "
            "fit+predict seconds (median), DEQ/matched time ratio (median of paired repeats).",
            "p: DEQ vs matched / vs plain accuracy, corrected resampled t-test over the paired repeats "
            "(Nadeau & Bengio 2003), * below 0.05.",
        ]
        if exact:
            lines.append(_exact_kernel_text(self.config))
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
                split = " (the same split in every repeat)" if info.get("split") == "fixed" else ""
                title = (
                    f"{info.get('description', dataset)}: {info.get('n_train', '?')} train / "
                    f"{info.get('n_test', '?')} test{split}; {activation}-DEQ"
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
                        f"{p_text(r['tests'].get('matched')):>9} {p_text(r['tests'].get('plain')):>8} | "
                        f"{m['deq']['seconds_median']:>8.3f} {m['matched']['seconds_median']:>9.3f} "
                        f"{m['plain']['seconds_median']:>8.3f} | {r['time_ratio_median']:>10.2f}x"
                    )
                if (dataset, activation) in exact:
                    lines.append(_exact_kernel_line(exact[dataset, activation]))
        verdict = _verdict(rows)
        if verdict:
            lines.append("")
            lines.append(verdict)
        if self.match_seconds:
            solves = ", ".join(f"{a} {s:.2f}s" for a, s in self.match_seconds.items())
            lines.append("")
            lines.append(f"One matching solve per activation (not in the matched fit times): {solves}.")
        warned = sorted({w for r in [*self.records, *self.exact_kernel_records] for w in r["warnings"]})
        if warned:
            lines.append("")
            lines.append(f"{len(warned)} distinct warning(s) during the fits:")
            lines.extend(f"  - {w}" for w in warned)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format_table()

    def _training_text(self) -> str:
        """How the networks were trained, for the table's first line."""
        params = self.config.get("estimator_params") or {}
        if self.config.get("trainable", "readout") == "readout":
            return "Readout-trained networks"
        solver = params.get("solver", "auto")
        what = f"{solver.upper() if solver == 'sgd' else solver}, {params.get('max_iter', '?')} epochs"
        if "learning_rate_init" in params:
            what += f", step {params['learning_rate_init']:g}"
        if "batch_size" in params:
            what += f", batches of {params['batch_size']}"
        return f"Networks trained end to end ({what})"


def _exact_kernel_text(config) -> str:
    """The table's line on its exact kernel fits: which kernel, how the ridge was chosen."""
    alphas = ", ".join(f"{a:g}" for a in config.get("exact_kernel_alphas") or [])
    kernel = config["exact_kernel"]
    return (
        f"∞: exact kernel ridge with {EXACT_KERNEL_TEXT.get(kernel, kernel)}, one fit per split, the ridge chosen "
        f"among {alphas} on a held-out tenth of the training samples."
    )


def _exact_kernel_line(row) -> str:
    """The line of infinite width: the exact kernel's accuracy, its ridge and its time."""
    acc = f"{100 * row['accuracy_mean']:.2f}"
    if row["n_fits"] > 1:
        acc += f"±{100 * row['accuracy_std']:.2f}"
    alphas = ",".join(f"{a:g}" for a in sorted(set(row["alphas"])))
    return (
        f"{'∞':>6} | {acc:>11} exact {row['kernel']} kernel ridge (alpha {alphas}) | "
        f"{row['seconds_median']:>8.3f} s fit+predict"
    )


def p_text(test) -> str:
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
