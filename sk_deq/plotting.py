"""Figures (matplotlib, an optional dependency: ``pip install 'sk_deq[plot]'``).

matplotlib is imported inside the functions, so ``import sk_deq.plotting``
works without it; calling a function without it raises an ``ImportError``
that names the ``plot`` extra.
"""

from __future__ import annotations

import math

__all__ = ["MODEL_STYLES", "plot_compare_widths", "require_matplotlib"]

#: Colour, marker and label of every model of :func:`sk_deq.experiments.compare_widths`.
MODEL_STYLES = {
    "deq": {"color": "tab:blue", "marker": "o", "label": "DEQ"},
    "matched": {"color": "tab:orange", "marker": "s", "label": "matched explicit"},
    "plain": {"color": "tab:green", "marker": "^", "label": "plain explicit"},
}


def require_matplotlib():
    """Import and return ``matplotlib.pyplot``, or raise a helpful ImportError.

    Returns
    -------
    module
        ``matplotlib.pyplot``.

    Raises
    ------
    ImportError
        If matplotlib is not installed; the message names the ``plot`` extra.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            "sk_deq's figures need matplotlib, which is not installed: pip install 'sk_deq[plot]' "
            "(or pip install matplotlib)."
        ) from exc
    return plt


_ACT_LABELS = {"relu": "ReLU", "tanh": "Tanh", "gelu": "GELU", "elu": "ELU", "silu": "SiLU", "erf": "Erf"}


def _summary(result):
    if hasattr(result, "summary"):
        return result.summary(), result.config, getattr(result, "datasets", {}), getattr(result, "matches", {})
    if isinstance(result, dict) and "summary" in result and "config" in result:
        return result["summary"], result["config"], result.get("datasets", {}), result.get("matches", {})
    raise TypeError(
        "result must be a CompareResult from sk_deq.experiments.compare_widths or its to_dict() / JSON "
        f"contents, got {type(result).__name__}."
    )


def plot_compare_widths(result, *, show_time: bool = True, axes=None, title: str | None = None):
    """Accuracy (and fit+predict time) versus width, one column per data set and activation.

    The figure of the paper's predictive comparison: in every panel the test
    accuracy of the DEQ, its matched explicit network and the plain explicit
    network versus width (log scale), mean over the repeats with a bar of one
    standard deviation; with ``show_time`` a second row shows the median
    fit+predict time of each model (log scale), the DEQ/matched ratio printed
    at every width.

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

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    """
    plt = require_matplotlib()
    import numpy as np

    rows, config, datasets, matches = _summary(result)
    panels = [(d, a) for d in config["datasets"] for a in config["activations"]]
    panels = [p for p in panels if any(r["dataset"] == p[0] and r["activation"] == p[1] for r in rows)]
    if not panels:
        raise ValueError("result holds no measurements to plot.")
    n_rows = 2 if show_time else 1
    if axes is None:
        fig, axes = plt.subplots(
            n_rows,
            len(panels),
            figsize=(3.6 * len(panels), 3.0 * n_rows + 0.6),
            sharex="col",
            squeeze=False,
            layout="constrained",
        )
    else:
        axes = np.asarray(axes, dtype=object).reshape(n_rows, len(panels))
        fig = axes[0, 0].figure
    for j, (dataset, activation) in enumerate(panels):
        block = sorted(
            (r for r in rows if r["dataset"] == dataset and r["activation"] == activation), key=lambda r: r["width"]
        )
        widths = [r["width"] for r in block]
        ax = axes[0, j]
        for model, style in MODEL_STYLES.items():
            if model not in block[0]["models"]:
                continue
            mean = np.array([100 * r["models"][model]["accuracy_mean"] for r in block])
            std = np.array([100 * r["models"][model]["accuracy_std"] for r in block])
            label = style["label"]
            if model == "matched":
                fam = matches.get(dataset, {}).get(activation, {}).get("family")
                label = f"{label} ({fam})" if fam else label
            elif model == "plain":
                label = f"{label} ({activation})"
            ax.errorbar(widths, mean, yerr=std, color=style["color"], marker=style["marker"], capsize=3, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(widths, [str(w) for w in widths])
        name = datasets.get(dataset, {}).get("description", dataset).split(" (")[0]
        ax.set_title(f"{name}, {_ACT_LABELS.get(activation, activation)}-DEQ", fontsize="medium")
        if j == 0:
            ax.set_ylabel("test accuracy (%)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", loc="best")
        if show_time:
            ax_t = axes[1, j]
            for model, style in MODEL_STYLES.items():
                if model not in block[0]["models"]:
                    continue
                secs = [r["models"][model]["seconds_median"] for r in block]
                ax_t.plot(widths, secs, color=style["color"], marker=style["marker"], label=style["label"])
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
            if j == 0:
                ax_t.set_ylabel("fit + predict (s)")
            ax_t.grid(True, which="both", alpha=0.3)
            if j == 0:
                ax_t.legend(
                    fontsize="small",
                    loc="upper left",
                    title="DEQ/matched time ratio above DEQ",
                    title_fontsize="x-small",
                )
        else:
            ax.set_xlabel("width m")
    if title:
        fig.suptitle(title)
    return fig
