"""What the figures share: matplotlib on demand, labels, grids of panels and the results as dictionaries."""

from __future__ import annotations

#: How the figures write the named activations.
ACT_LABELS = {"relu": "ReLU", "tanh": "Tanh", "gelu": "GELU", "elu": "ELU", "silu": "SiLU", "erf": "Erf"}


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


def result_dict(result, keys, what: str) -> dict:
    """``result.to_dict()``, or ``result`` itself when it is such a dict (e.g. read back from JSON).

    Raises a TypeError naming ``what`` (the result expected) when neither
    form holds all of ``keys``.
    """
    d = result.to_dict() if hasattr(result, "to_dict") else result
    if not (isinstance(d, dict) and all(k in d for k in keys)):
        raise TypeError(f"result must be {what} or its to_dict() / JSON contents, got {type(result).__name__}.")
    return d


def panel_axes(plt, axes, n_rows: int, n_panels: int, *, size=(3.6, 3.0), sharex="col"):
    """The figure and its axes as an array of shape ``(n_rows, n_panels)``: new ones, or ``axes`` reshaped.

    A new figure gives every panel ``size`` (width, height) in inches, plus
    0.6 in of height for the legend.
    """
    import numpy as np

    if axes is None:
        return plt.subplots(
            n_rows,
            n_panels,
            figsize=(size[0] * n_panels, size[1] * n_rows + 0.6),
            sharex=sharex,
            squeeze=False,
            layout="constrained",
        )
    axes = np.asarray(axes, dtype=object).reshape(n_rows, n_panels)
    return axes[0, 0].figure, axes


def axes_row(plt, axes, n_panels: int, size) -> tuple:
    """The figure and a sequence of ``n_panels`` axes: a new row of panels of ``size`` inches each, or ``axes``."""
    if axes is None:
        fig, grid = plt.subplots(1, n_panels, figsize=(size[0] * n_panels, size[1]), squeeze=False)
        return fig, grid[0]
    return axes[0].figure, axes


def size_ticks(ax, sizes):
    """Label a log-scaled x axis with the sample sizes themselves."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(list(sizes))
    ax.set_xticklabels([str(n) for n in sizes])
