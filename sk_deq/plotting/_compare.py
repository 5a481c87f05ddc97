"""Figures of comparisons: accuracy and time versus width, and per-fold scores of cross-validated estimators."""

from __future__ import annotations

import math

from .._validation import check_bool
from ._common import ACT_LABELS, panel_axes, require_matplotlib, result_dict

# Colour, marker and label of every model of compare_widths (documented in __init__).
MODEL_STYLES = {
    "deq": {"color": "tab:blue", "marker": "o", "label": "DEQ"},
    "matched": {"color": "tab:orange", "marker": "s", "label": "matched explicit"},
    "plain": {"color": "tab:green", "marker": "^", "label": "plain explicit"},
}

# Colour and line of the exact kernel's entry of infinite width (a horizontal line).
EXACT_KERNEL_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.2}


def plot_compare_widths(result, *, show_time: bool = True, axes=None, title: str | None = None):
    """Accuracy (and fit+predict time) versus width, one column per data set and activation.

    The figure of Ling et al.'s (2024) predictive comparison: in every panel the test
    accuracy of the DEQ, its matched explicit network and the plain explicit
    network versus width (log scale), mean over the repeats with a bar of one
    standard deviation; with ``show_time`` a second row shows the median
    fit+predict time of each model (log scale), the DEQ/matched ratio printed
    at every width.  Where the result holds exact kernel fits
    (``compare_widths(exact_kernel=...)``), their accuracy is a horizontal
    dashed line in the accuracy panel, labelled with the kernel and "∞
    width" (a band of one standard deviation where there are several fits),
    and their median time one in the time panel.

    Parameters
    ----------
    result : CompareResult or dict
        From :func:`sk_deq.experiments.compare_widths`, or its ``to_dict()``
        (e.g. read back from the JSON that ``sk-deq compare --out`` writes).
    show_time : bool, default=True
        Add a row of time panels under the accuracy panels.
    axes : array of matplotlib Axes, optional
        Axes to draw into, shape ``(n_rows, n_panels)`` with ``n_rows`` 2 if
        ``show_time`` else 1 and ``n_panels`` the number of (data set,
        activation) pairs.  A new figure is made when None.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
        The figure: accuracy panels in the first row, time panels in the
        second (``show_time``).

    Raises
    ------
    ValueError
        If ``result`` holds no measurements.
    """
    check_bool(show_time, "show_time", "plot_compare_widths")
    plt = require_matplotlib()
    d = result_dict(result, ("summary", "config"), "a CompareResult from sk_deq.experiments.compare_widths")
    rows, config, datasets, matches = d["summary"], d["config"], d.get("datasets", {}), d.get("matches", {})
    exact = {(r["dataset"], r["activation"]): r for r in d.get("exact_kernel_summary") or []}
    panels = [(d, a) for d in config["datasets"] for a in config["activations"]]
    panels = [p for p in panels if any(r["dataset"] == p[0] and r["activation"] == p[1] for r in rows)]
    if not panels:
        raise ValueError("result holds no measurements to plot.")
    fig, axes = panel_axes(plt, axes, 2 if show_time else 1, len(panels))
    for j, (dataset, activation) in enumerate(panels):
        block = sorted(
            (r for r in rows if r["dataset"] == dataset and r["activation"] == activation), key=lambda r: r["width"]
        )
        family = matches.get(dataset, {}).get(activation, {}).get("family")
        name = datasets.get(dataset, {}).get("description", dataset).split(" (")[0]
        title_j = f"{name}, {ACT_LABELS.get(activation, activation)}-DEQ"
        limit = exact.get((dataset, activation))
        _accuracy_panel(axes[0, j], block, activation, family, title_j, first=j == 0, exact=limit)
        if show_time:
            _time_panel(axes[1, j], block, first=j == 0, exact=limit)
        else:
            axes[0, j].set_xlabel("width m")
    if title:
        fig.suptitle(title)
    return fig


def _paired_data(result):
    """Names, scores (estimator by fold), the score's name and the tests of a comparison or its ``to_dict()``."""
    import numpy as np

    if hasattr(result, "names") and hasattr(result, "scores") and hasattr(result, "pairwise"):
        tests = {pair: t.pvalue for pair, t in result.pairwise.items()}
        return list(result.names), np.asarray(result.scores, dtype=float), result.scoring, tests, result.alpha
    if isinstance(result, dict) and "names" in result and "scores" in result:
        tests = {(t["a"], t["b"]): t["pvalue"] for t in result.get("pairwise", [])}
        scores = np.asarray(result["scores"], dtype=float)
        return list(result["names"]), scores, result.get("scoring", "score"), tests, result.get("alpha", 0.05)
    raise TypeError(
        "result must be a ComparisonResult from sk_deq.model_selection.compare_estimators or its to_dict() / JSON "
        f"contents, got {type(result).__name__}."
    )


def _annotated_pairs(names, tests, annotate):
    """The pairs whose p-values ``plot_paired_scores`` writes, as ``(i, j)`` with ``i < j``, and their p-values."""
    index = {n: i for i, n in enumerate(names)}
    if annotate is None or annotate is False:
        return []
    if annotate is True or annotate == "adjacent":
        pairs = [(names[i], names[i + 1]) for i in range(len(names) - 1)]
    elif annotate == "first":
        pairs = [(names[0], n) for n in names[1:]]
    elif annotate == "all":
        pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    elif isinstance(annotate, str):
        raise ValueError(
            f"annotate must be 'adjacent', 'first', 'all', None or a list of (name, name) pairs, got {annotate!r}."
        )
    else:
        pairs = [tuple(p) for p in annotate]
    out = []
    for pair in pairs:
        if len(pair) != 2 or pair[0] not in index or pair[1] not in index or pair[0] == pair[1]:
            raise ValueError(f"annotate: {pair!r} is not a pair of two different estimator names ({', '.join(names)}).")
        i, j = sorted((index[pair[0]], index[pair[1]]))
        p = tests.get((names[i], names[j]))
        if p is not None:
            out.append((i, j, p))
    return out


def plot_paired_scores(result, *, ax=None, annotate="adjacent", title: str | None = None):
    """Per-fold scores of every estimator of a comparison, joined fold by fold, with the means marked.

    One grey line per fold joins that fold's scores across the estimators
    (their order is ``result.names``), so paired differences show as slopes:
    lines that all tilt the same way mean a consistent difference, crossing
    lines a difference within the noise of the folds.  The mean over the
    folds of every estimator is marked, and the p-values of the corrected
    resampled t-test (:func:`sk_deq.model_selection.corrected_resampled_ttest`)
    of the chosen pairs are written above brackets, in bold when below the
    result's ``alpha``.

    Parameters
    ----------
    result : ComparisonResult or dict
        From :func:`sk_deq.model_selection.compare_estimators`, or its
        ``to_dict()`` (e.g. read back from JSON).
    ax : matplotlib Axes, optional
        Axes to draw into; a new figure when None.
    annotate : {'adjacent', 'first', 'all'}, list of (str, str) or None, default='adjacent'
        Which pairs get their p-value: neighbours on the x axis, the first
        estimator against every other, every pair, the pairs of names
        listed, or none.  Pairs without a test (a single fold) are skipped.
    title : str, optional
        Axes title.

    Returns
    -------
    matplotlib.figure.Figure
        The figure holding ``ax``.

    Raises
    ------
    ValueError
        If ``annotate`` is not one of the accepted values or names an
        unknown estimator.
    """
    import numpy as np

    plt = require_matplotlib()
    names, scores, scoring, tests, alpha = _paired_data(result)
    pairs = _annotated_pairs(names, tests, annotate)
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(4.0, 1.5 * len(names) + 1.5), 4.0), layout="constrained")
    else:
        fig = ax.figure
    x = np.arange(len(names))
    n_folds = scores.shape[1] if scores.ndim == 2 else 0
    for j in range(n_folds):
        ax.plot(
            x, scores[:, j], color="0.55", alpha=0.6, lw=1.0, marker="o", ms=3, label="one fold" if j == 0 else None
        )
    means = np.nanmean(scores, axis=1) if n_folds else np.full(len(names), np.nan)
    ax.plot(x, means, color="black", lw=2.0, marker="D", ms=7, label="mean over the folds", zorder=3)
    if pairs:
        finite = scores[np.isfinite(scores)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        step = (hi - lo or abs(hi) or 1.0) * 0.08
        # each bracket on the lowest row where it touches no other
        rows: list[list[tuple[int, int]]] = []
        for i, j, p in sorted(pairs, key=lambda q: (q[1] - q[0], q[0])):
            row = next((k for k, used in enumerate(rows) if all(j < a or b < i for a, b in used)), len(rows))
            if row == len(rows):
                rows.append([])
            rows[row].append((i, j))
            level = hi + step * (1 + 1.7 * row)
            ax.plot([i, i, j, j], [level - step * 0.3, level, level, level - step * 0.3], color="black", lw=0.8)
            text = "p = nan" if not math.isfinite(p) else ("p < 0.001" if p < 0.001 else f"p = {p:.3f}")
            weight = "bold" if math.isfinite(p) and p < alpha else "normal"
            ax.text((i + j) / 2, level, text, ha="center", va="bottom", fontsize="small", fontweight=weight)
        ax.set_ylim(top=hi + step * (1 + 1.7 * len(rows)))
    ax.set_xticks(x, names)
    ax.set_xlim(-0.4, len(names) - 0.6)
    ax.set_ylabel(scoring)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="lower left")
    if title:
        ax.set_title(title)
    return fig


def _exact_label(row) -> str:
    return f"exact {row['kernel']} kernel (∞ width)"


def _accuracy_panel(ax, block, activation, family, title: str, *, first: bool, exact=None):
    """Test accuracy (mean and one standard deviation over the repeats) of every model versus width.

    ``exact``, a row of the exact kernel summary, is drawn as a horizontal line.
    """
    import numpy as np

    widths = [r["width"] for r in block]
    for model, style in MODEL_STYLES.items():
        if model not in block[0]["models"]:
            continue
        mean = np.array([100 * r["models"][model]["accuracy_mean"] for r in block])
        std = np.array([100 * r["models"][model]["accuracy_std"] for r in block])
        label = style["label"]
        if model == "matched":
            label = f"{label} ({family})" if family else label
        elif model == "plain":
            label = f"{label} ({activation})"
        ax.errorbar(widths, mean, yerr=std, color=style["color"], marker=style["marker"], capsize=3, label=label)
    if exact is not None:
        acc, std = 100 * exact["accuracy_mean"], 100 * exact["accuracy_std"]
        ax.axhline(acc, label=_exact_label(exact), **EXACT_KERNEL_STYLE)
        if std > 0:
            ax.axhspan(acc - std, acc + std, color=EXACT_KERNEL_STYLE["color"], alpha=0.1, linewidth=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(widths, [str(w) for w in widths])
    ax.set_title(title, fontsize="medium")
    if first:
        ax.set_ylabel("test accuracy (%)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best")


def _time_panel(ax_t, block, *, first: bool, exact=None):
    """Median fit+predict time of every model versus width, the DEQ/matched ratio written above the DEQ's.

    ``exact``, a row of the exact kernel summary, is drawn as a horizontal line at its median time.
    """
    widths = [r["width"] for r in block]
    for model, style in MODEL_STYLES.items():
        if model not in block[0]["models"]:
            continue
        secs = [r["models"][model]["seconds_median"] for r in block]
        ax_t.plot(widths, secs, color=style["color"], marker=style["marker"], label=style["label"])
    if exact is not None:
        ax_t.axhline(exact["seconds_median"], label=_exact_label(exact), **EXACT_KERNEL_STYLE)
    for r in block:
        ratio = r["time_ratio_median"]
        if ratio is not None and math.isfinite(ratio):
            ax_t.annotate(
                f"{ratio:.1f}x",
                (r["width"], r["models"]["deq"]["seconds_median"]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize="x-small",
                color=MODEL_STYLES["deq"]["color"],
            )
    ax_t.set_xscale("log", base=2)
    ax_t.set_yscale("log")
    ax_t.margins(y=0.2)
    ax_t.set_xticks(widths, [str(w) for w in widths])
    ax_t.set_xlabel("width m")
    if first:
        ax_t.set_ylabel("fit + predict (s)")
    ax_t.grid(True, which="both", alpha=0.3)
    if first:
        ax_t.legend(
            fontsize="small",
            loc="upper left",
            title="DEQ/matched time ratio above DEQ",
            title_fontsize="x-small",
        )
