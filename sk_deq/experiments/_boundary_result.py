"""The result of the study of where the equivalence ends: :class:`BoundaryResult` and its table.

``_boundary.py`` runs the study (:func:`where_equivalence_ends`) and returns a
:class:`BoundaryResult`; this module aggregates and prints it, also from the
JSON a run wrote (``BoundaryResult.from_dict``).  Its figure is
:func:`sk_deq.plotting.plot_where_equivalence_ends`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from .._json import JSONResult
from ._common import mean_std

# How the table names the contestants (_boundary_models.BOUNDARY_MODELS).
_LABELS = {
    "deq_readout": "DEQ, readout",
    "matched_readout": "matched, readout",
    "deq_all": "DEQ, all weights",
    "explicit_all": "explicit, all weights",
}


# ---------------------------------------------------------------------------
# the result


@dataclass
class BoundaryResult(JSONResult):
    """Outcome of :func:`~sk_deq.experiments.where_equivalence_ends`.

    Every parameter is stored as an attribute of the same name.
    ``str(result)`` is :meth:`format_table`.

    Parameters
    ----------
    config : dict
        The arguments of the run (sharpness values, dimensions, seeds, sizes,
        training settings, the models).
    environment : dict
        Versions of Python, torch, numpy and scikit-learn, the machine and the
        number of torch threads.
    grid : list of float
        The positions ``s`` along the direction ``u`` where the errors are
        measured (the same on every test line).
    records : list of dict, default=[]
        One entry per fit: ``d``, ``sharpness``, ``seed``, ``model``,
        ``linf`` (largest absolute error on the test lines), ``l2`` (root
        mean squared error on them), ``train_rmse`` (these three None when
        the fit failed), ``error`` (None, or the message of the error that
        stopped the fit: a :class:`~sk_deq.nn.DEQDivergenceError` when
        training moved a DEQ's fixed-point map out of its contraction
        region), ``baseline_l2`` (root
        mean squared error of the best constant on the test lines),
        ``rms_to_deq_readout`` (root mean squared difference between this
        model's and the readout-trained DEQ's predictions on the test lines;
        None for the DEQ itself or without it), ``rms_redrawn_deq`` (for
        the readout-trained DEQ, when the matched network is in the run: the
        same difference between it and the same DEQ with other random
        weights, seed ``seed + 10000``, the finite-width noise floor of the
        comparison; else None), ``alpha`` (readout penalty), ``fit_seconds``,
        ``n_hidden`` (width), ``n_params`` (all parameters of the fitted
        torch module), ``n_trainable`` (those trained), ``n_epochs``,
        ``solver`` (DEQs: forward and, when trained, adjoint fixed-point
        diagnostics of the fit; else None), ``warnings`` (messages raised
        during fit and predict) and ``profile`` (predictions on the first
        test line, for the first seed; else None).
    provenance : dict, default={}
        Where the figures come from (:func:`sk_deq.experiments._provenance.provenance`,
        taken when the run starts): command, time, git commit, machine,
        versions and threads.
    """

    config: dict
    environment: dict
    grid: list
    records: list = field(default_factory=list)
    provenance: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict) -> BoundaryResult:
        """Rebuild a result from :meth:`to_dict` (e.g. read back from JSON).

        Parameters
        ----------
        data : dict
            The output of :meth:`to_dict` (``summary`` is recomputed and
            ignored).

        Returns
        -------
        BoundaryResult
            The result with the same ``config``, ``environment``, ``grid``,
            ``records`` and ``provenance`` (empty where ``data`` has none).
        """
        return cls(
            config=dict(data["config"]),
            environment=dict(data["environment"]),
            grid=list(data["grid"]),
            records=list(data["records"]),
            provenance=dict(data.get("provenance") or {}),
        )

    def summary(self) -> list:
        """Aggregate the seeds: one row per (d, sharpness, model).

        Returns
        -------
        list of dict
            In the order of ``config``: ``d``, ``sharpness``, ``model``,
            ``linf_mean``, ``linf_std``, ``l2_mean``, ``l2_std`` (sample
            standard deviations over the seeds, 0 for one seed), ``linf`` and
            ``l2`` (one per seed), ``train_rmse_mean``,
            ``rms_to_deq_readout_mean`` and ``rms_redrawn_deq_mean`` (NaN
            where not recorded),
            ``baseline_l2_mean``, ``fit_seconds_median``, ``n_hidden``,
            ``n_params``, ``n_trainable``, ``solver_converged`` (whether every
            fixed-point solve of every seed's fit reached its tolerance; None
            for explicit networks), ``n_seeds`` (fits that completed; the
            means are over them) and ``n_failed`` (fits that stopped with an
            error).
        """
        rows = []
        for d in self.config["dims"]:
            for k in self.config["sharpness"]:
                for model in self.config["models"]:
                    recs = sorted(
                        (r for r in self.records if r["d"] == d and r["sharpness"] == k and r["model"] == model),
                        key=lambda r: r["seed"],
                    )
                    if recs:
                        rows.append({"d": d, "sharpness": k, "model": model, **_aggregate(recs)})
        return rows

    def to_dict(self) -> dict:
        """All numbers of the run as a JSON-serialisable dict (``summary`` included).

        Returns
        -------
        dict
            ``provenance``, ``config``, ``environment``, ``grid``,
            ``summary`` (:meth:`summary`) and ``records``.
            :func:`~sk_deq.plotting.plot_where_equivalence_ends` accepts it in place of the
            result, and :meth:`from_dict` turns it back into one.
        """
        return {
            "provenance": self.provenance,
            "config": self.config,
            "environment": self.environment,
            "grid": self.grid,
            "summary": self.summary(),
            "records": self.records,
        }

    def format_table(self) -> str:
        """The results as a readable text table.

        Returns
        -------
        str
            The training settings; per input dimension the widths and
            parameter counts of the models, then one line per sharpness with
            every model's L∞ and L2 test error (mean ± standard deviation over
            the seeds), the constant predictor's L2 error and the root mean
            squared difference between the readout-trained DEQ's and the
            matched network's predictions, and between two draws of the
            readout-trained DEQ's random weights; then the fixed-point convergence
            of the DEQ fits and the distinct warnings.
        """
        cfg = self.config
        rows = self.summary()
        lines = _settings_lines(cfg)
        for d in cfg["dims"]:
            block = [r for r in rows if r["d"] == d]
            if block:
                lines.append("")
                lines.extend(_dimension_lines(d, block, cfg))
        lines.extend(_notes(self.records))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format_table()


def _aggregate(recs) -> dict:
    """The seeds of one (d, sharpness, model) summarised: see :meth:`BoundaryResult.summary`."""
    failed = [r for r in recs if r.get("error")]
    done = [r for r in recs if not r.get("error")]
    linf_mean, linf_std = mean_std(r["linf"] for r in done)
    l2_mean, l2_std = mean_std(r["l2"] for r in done)
    solvers = [r["solver"] for r in done if r["solver"]]
    first = (done or failed)[0]
    return {
        "linf_mean": linf_mean,
        "linf_std": linf_std,
        "l2_mean": l2_mean,
        "l2_std": l2_std,
        "linf": [r["linf"] for r in done],
        "l2": [r["l2"] for r in done],
        "train_rmse_mean": mean_std(r["train_rmse"] for r in done)[0],
        "rms_to_deq_readout_mean": mean_std(
            r["rms_to_deq_readout"] for r in done if r["rms_to_deq_readout"] is not None
        )[0],
        "rms_redrawn_deq_mean": mean_std(r["rms_redrawn_deq"] for r in done if r.get("rms_redrawn_deq") is not None)[0],
        "baseline_l2_mean": mean_std(r["baseline_l2"] for r in done or failed)[0],
        "fit_seconds_median": statistics.median(r["fit_seconds"] for r in done) if done else math.nan,
        "n_hidden": first["n_hidden"],
        "n_params": first["n_params"],
        "n_trainable": first["n_trainable"],
        "solver_converged": all(s["converged"] for s in solvers) if solvers else None,
        "n_seeds": len(done),
        "n_failed": len(failed),
    }


def _settings_lines(cfg) -> list:
    """The first lines of the table: the target, the data, the error measures and the training settings."""
    n_seeds = len(cfg["seeds"])
    spread = f"mean ± std over {n_seeds} seeds" if n_seeds > 1 else "one seed"
    alphas = cfg["alpha_readout"]
    alpha = (
        f"{alphas[0]:g}"
        if len(alphas) == 1
        else f"chosen by leave-one-out error from {', '.join(f'{a:g}' for a in alphas)}"
    )
    lbfgs = cfg["optimizer"] == "lbfgs"
    steps = f"{cfg['max_epochs']} {'iterations' if lbfgs else 'epochs'}"
    rate = "" if lbfgs else f", learning rate {cfg['learning_rate']:g}"
    return [
        f"Steep target tanh(k s), s = sqrt(d) u^T x, x ~ N(0, I/d); {cfg['n_train']} training samples; "
        f"errors on {cfg['n_lines']} lines along u, s in [-{cfg['grid_radius']:g}, {cfg['grid_radius']:g}] "
        f"({cfg['n_grid']} points each); L∞ / L2, {spread}.",
        f"{cfg['activation']}-DEQ, sigma_a2={cfg['sigma_a2']:g}.  Readout-trained: width "
        f"{cfg['n_hidden_readout']}, closed-form ridge readout, alpha {alpha}.  "
        f"All weights trained: {cfg['optimizer']}, {steps}{rate}, alpha={cfg['alpha_trained']:g}; "
        f"explicit layers {'-'.join(cfg['explicit_layers'])}.",
    ]


def _dimension_lines(d, block, cfg, width: int = 22) -> list:
    """The sizes of the models at one input dimension, then one line per sharpness."""
    models = cfg["models"]
    by = {(r["model"], r["sharpness"]): r for r in block}
    first = {r["model"]: r for r in reversed(block)}
    sizes = [
        f"{_LABELS[m]} m={first[m]['n_hidden']} ({first[m]['n_trainable']:,} of {first[m]['n_params']:,})"
        for m in models
        if m in first
    ]
    head = f"{'k':>5} | " + " ".join(f"{_LABELS[m]:>{width}}" for m in models) + " | constant | DEQ-matched | DEQ-DEQ'"
    lines = [f"d = {d}: width (trained of all parameters): " + "; ".join(sizes), head, "-" * len(head)]
    for k in cfg["sharpness"]:
        cells = [_cell(by.get((m, k)), width) for m in models]
        base = next((by[m, k]["baseline_l2_mean"] for m in reversed(models) if (m, k) in by), math.nan)
        gap = by.get(("matched_readout", k), {}).get("rms_to_deq_readout_mean", math.nan)
        floor = by.get(("deq_readout", k), {}).get("rms_redrawn_deq_mean", math.nan)
        lines.append(f"{k:>5g} | " + " ".join(cells) + f" | {base:>8.3f} | {gap:>11.3f} | {floor:>8.3f}")
    return lines


def _cell(row, width: int) -> str:
    """One model's L∞ and L2 errors at one sharpness: mean ± std / mean; ``*`` when some seeds failed."""
    if row is None:
        return f"{'-':>{width}}"
    if not row["n_seeds"]:
        return "failed".rjust(width)
    mark = "*" if row["n_failed"] else ""
    return f"{mark}{row['linf_mean']:.2f}±{row['linf_std']:.2f} / {row['l2_mean']:.3f}".rjust(width)


def _notes(records) -> list:
    """The closing lines: the columns explained, failed fits, the DEQs' fixed-point convergence, the warnings."""
    lines = []
    if any(r["model"] == "matched_readout" and r["rms_to_deq_readout"] is not None for r in records):
        lines += [
            "",
            "constant: L2 error of the best constant; DEQ-matched: root mean squared difference between the "
            "predictions of the readout-trained DEQ and of its matched network on the test lines (mean over seeds); "
            "DEQ-DEQ': the same between the readout-trained DEQ and the same DEQ with other random weights.",
        ]
    failed = [r for r in records if r.get("error")]
    if failed:
        where = "; ".join(f"{r['model']} d={r['d']} k={r['sharpness']:g} seed {r['seed']}" for r in failed)
        lines.append(
            f"{len(failed)} fit(s) stopped with an error (marked * where other seeds completed; the means are "
            f"over those): {where}."
        )
        lines.extend(f"  - {e}" for e in sorted({r["error"] for r in failed}))
    lines.extend(_solver_lines([r for r in records if r["solver"]]))
    warned = sorted({w for r in records for w in r["warnings"]})
    if warned:
        lines.append(f"{len(warned)} distinct warning(s) during the fits:")
        lines.extend(f"  - {w}" for w in warned)
    return lines


def _solver_lines(deq) -> list:
    """How many DEQ fits had every fixed-point solve within tolerance, and the trained DEQs' mean iterations."""
    if not deq:
        return []
    bad = [r for r in deq if not r["solver"]["converged"]]
    trained = [r["solver"] for r in deq if "adjoint" in r["solver"]]
    text = (
        f"DEQ fixed points: {len(deq) - len(bad)} of {len(deq)} fits had every forward"
        + (" and adjoint" if trained else "")
        + " solve within tol"
    )
    if trained:
        text += (
            f"; trained DEQs: mean {statistics.fmean(s['mean_iter'] for s in trained):.1f} forward, "
            f"{statistics.fmean(s['adjoint']['mean_iter'] for s in trained):.1f} adjoint iterations per sample"
        )
    return [text + "."]
