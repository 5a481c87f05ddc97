"""The result of the study of where the equivalence ends: :class:`BoundaryResult`, its table and its figure.

:mod:`boundary_study` runs the study (:func:`boundary_study.where_equivalence_ends`)
and returns a :class:`BoundaryResult`; this module aggregates, prints and
draws it, also from the JSON a run wrote (``BoundaryResult.from_dict``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from sk_deq._json import JSONResult
from sk_deq.experiments._common import mean_std
from sk_deq.plotting import MODEL_STYLES, require_matplotlib
from sk_deq.plotting._common import panel_axes

#: The four contestants, in table order: the readout-trained DEQ and its matched network, the DEQ with
#: all weights trained and an explicit network with all weights trained.
BOUNDARY_MODELS = ("deq_readout", "matched_readout", "deq_all", "explicit_all")

_LABELS = {
    "deq_readout": "DEQ, readout",
    "matched_readout": "matched, readout",
    "deq_all": "DEQ, all weights",
    "explicit_all": "explicit, all weights",
}


# The library's colours and markers (sk_deq.plotting.MODEL_STYLES); dashed: readout-trained, solid: all weights.
def _style(base: dict, linestyle: str) -> dict:
    return {"color": base["color"], "marker": base["marker"], "linestyle": linestyle}


_STYLES = {
    "deq_readout": _style(MODEL_STYLES["deq"], "--"),
    "matched_readout": _style(MODEL_STYLES["matched"], "--"),
    "deq_all": _style(MODEL_STYLES["deq"], "-"),
    "explicit_all": {"color": "tab:red", "marker": "^", "linestyle": "-"},
}


# ---------------------------------------------------------------------------
# the result


@dataclass
class BoundaryResult(JSONResult):
    """Outcome of :func:`where_equivalence_ends`.

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
    """

    config: dict
    environment: dict
    grid: list
    records: list = field(default_factory=list)

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
            The result with the same ``config``, ``environment``, ``grid``
            and ``records``.
        """
        return cls(
            config=dict(data["config"]),
            environment=dict(data["environment"]),
            grid=list(data["grid"]),
            records=list(data["records"]),
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
            ``config``, ``environment``, ``grid``, ``summary``
            (:meth:`summary`) and ``records``.
            :func:`plot_where_equivalence_ends` accepts it in place of the
            result, and :meth:`from_dict` turns it back into one.
        """
        return {
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


# ---------------------------------------------------------------------------
# the figure


def _parts(result):
    if isinstance(result, BoundaryResult):
        return result.summary(), result.config, result.grid, result.records
    if isinstance(result, dict) and {"config", "grid", "records"} <= set(result):
        res = BoundaryResult.from_dict(result)
        return res.summary(), res.config, res.grid, res.records
    raise TypeError(
        f"result must be a BoundaryResult or its to_dict(), got {type(result).__name__}: "
        "use the output of boundary_study.where_equivalence_ends."
    )


def plot_where_equivalence_ends(result, *, show_profiles: bool = True, axes=None, title: str | None = None):
    """L∞ and L2 test error versus sharpness, one column per input dimension.

    Every panel shows the models of the run versus the sharpness ``k`` (log
    scales), the mean over the seeds with a bar of one standard deviation;
    dashed lines are the readout-trained models, solid lines the fully
    trained ones, and a grey line the best constant's L2 error.  With
    ``show_profiles`` a third row shows, at the largest sharpness, the target
    and every model's prediction along the first test line of the first seed.

    Parameters
    ----------
    result : BoundaryResult or dict
        From :func:`where_equivalence_ends`, or its ``to_dict()`` (e.g. read
        back from JSON).
    show_profiles : bool, default=True
        Add the row of profiles along ``u``.
    axes : array of matplotlib Axes, optional
        Axes to draw into, shape ``(n_rows, n_dims)`` with ``n_rows`` 3 if
        ``show_profiles`` else 2.  A new figure is made when None.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    TypeError
        If ``result`` is neither a :class:`BoundaryResult` nor its
        ``to_dict()``.
    ValueError
        If ``result`` holds no measurements.
    """
    plt = require_matplotlib()
    rows, config, grid, records = _parts(result)
    dims = [d for d in config["dims"] if any(r["d"] == d for r in rows)]
    if not dims:
        raise ValueError("result holds no measurements to plot.")
    n_rows = 3 if show_profiles else 2
    fig, axes = panel_axes(plt, axes, n_rows, len(dims), size=(3.7, 2.9), sharex=False)
    k_max = max(config["sharpness"])
    for j, d in enumerate(dims):
        block = [r for r in rows if r["d"] == d]
        for i, (metric, name) in enumerate((("linf", "L∞ error"), ("l2", "L2 error"))):
            _error_panel(axes[i, j], block, config["models"], metric)
            if i == 0:
                axes[i, j].set_title(f"d = {d}")
            if j == 0:
                axes[i, j].set_ylabel(f"test {name}")
        if show_profiles:
            first = config["seeds"][0]
            profiles = {
                r["model"]: r["profile"]
                for r in records
                if r["d"] == d and r["sharpness"] == k_max and r["seed"] == first and r["profile"] is not None
            }
            _profile_panel(axes[2, j], np.asarray(grid), k_max, config["models"], profiles, first=j == 0)
    handles, labels = axes[1, 0].get_legend_handles_labels()
    if show_profiles:
        h2, l2 = axes[2, 0].get_legend_handles_labels()
        handles, labels = handles + h2[:1], labels + l2[:1]
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 6), fontsize="small")
    if title:
        fig.suptitle(title)
    return fig


def _error_panel(ax, block, models, metric: str) -> None:
    """One error (``'linf'`` or ``'l2'``) of every model versus sharpness; the best constant's L2 error in grey."""
    for model in models:
        mr = sorted((r for r in block if r["model"] == model), key=lambda r: r["sharpness"])
        if mr:
            ax.errorbar(
                [r["sharpness"] for r in mr],
                [r[f"{metric}_mean"] for r in mr],
                yerr=[r[f"{metric}_std"] for r in mr],
                label=_LABELS[model],
                capsize=3,
                markersize=4,
                **_STYLES[model],
            )
    if metric == "l2":
        base = sorted({(r["sharpness"], r["baseline_l2_mean"]) for r in block})
        ax.plot([b[0] for b in base], [b[1] for b in base], color="0.6", lw=1, label="best constant")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_xlabel("sharpness k")


def _profile_panel(ax, s, k_max, models, profiles, *, first: bool) -> None:
    """The target and every model's prediction along one test line at the largest sharpness."""
    ax.plot(s, np.tanh(k_max * s), color="k", lw=1.5, label=f"target tanh({k_max:g} s)")
    for model in models:
        if model in profiles:
            style = {k: v for k, v in _STYLES[model].items() if k != "marker"}
            ax.plot(s, profiles[model], lw=1.2, label=_LABELS[model], **style)
    ax.set_xlabel("s = sqrt(d) u·x along a test line")
    if first:
        ax.set_ylabel(f"prediction, k = {k_max:g}")
    ax.set_ylim(-1.6, 1.6)
    ax.grid(True, alpha=0.3)
