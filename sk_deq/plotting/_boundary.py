"""The figure of the study of where the equivalence ends (:func:`sk_deq.experiments.where_equivalence_ends`)."""

from __future__ import annotations

import math

import numpy as np

from .._validation import check_bool
from ._common import panel_axes, require_matplotlib, result_dict
from ._compare import MODEL_STYLES


def _style(base: dict, linestyle: str, label: str) -> dict:
    return {"color": base["color"], "marker": base["marker"], "linestyle": linestyle, "label": label}


# Colour, marker, line and label of every contestant: the colours and markers of MODEL_STYLES (the DEQ's and
# the matched network's), dashed for the readout-trained models, solid for those with all weights trained.
_STYLES = {
    "deq_readout": _style(MODEL_STYLES["deq"], "--", "DEQ, readout"),
    "matched_readout": _style(MODEL_STYLES["matched"], "--", "matched, readout"),
    "deq_all": _style(MODEL_STYLES["deq"], "-", "DEQ, all weights"),
    "explicit_all": {"color": "tab:red", "marker": "^", "linestyle": "-", "label": "explicit, all weights"},
}


def _number(value) -> float:
    """A summary value as a float: NaN for None (a mean without measurements, written to JSON as null)."""
    return math.nan if value is None else float(value)


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
        From :func:`~sk_deq.experiments.where_equivalence_ends`, or its
        ``to_dict()`` (e.g. read back from JSON).
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
        If ``show_profiles`` is not a bool, or ``result`` is neither a
        :class:`~sk_deq.experiments.BoundaryResult` nor its ``to_dict()``.
    ValueError
        If ``result`` holds no measurements.
    """
    check_bool(show_profiles, "show_profiles", "plot_where_equivalence_ends")
    plt = require_matplotlib()
    data = result_dict(result, ("config", "grid", "summary", "records"), "a BoundaryResult")
    rows, config, grid, records = data["summary"], data["config"], data["grid"], data["records"]
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
                [_number(r[f"{metric}_mean"]) for r in mr],
                yerr=[_number(r[f"{metric}_std"]) for r in mr],
                capsize=3,
                markersize=4,
                **_STYLES[model],
            )
    if metric == "l2":
        base = sorted({(r["sharpness"], r["baseline_l2_mean"]) for r in block})
        ax.plot([b[0] for b in base], [_number(b[1]) for b in base], color="0.6", lw=1, label="best constant")
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
            ax.plot(s, profiles[model], lw=1.2, **style)
    ax.set_xlabel("s = sqrt(d) u·x along a test line")
    if first:
        ax.set_ylabel(f"prediction, k = {k_max:g}")
    ax.set_ylim(-1.6, 1.6)
    ax.grid(True, alpha=0.3)
