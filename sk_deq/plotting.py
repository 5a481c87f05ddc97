"""Figures (matplotlib, an optional dependency: ``pip install 'sk_deq[plot]'``).

matplotlib is imported inside the functions, so ``import sk_deq.plotting``
works without it; calling a function without it raises an ``ImportError``
that names the ``plot`` extra.
"""

from __future__ import annotations

import math

from ._inputs import KERNELS

__all__ = [
    "MODEL_STYLES",
    "plot_compare_widths",
    "plot_eigenvalue_histograms",
    "plot_matched_errors",
    "plot_paired_scores",
    "plot_spectrum_errors",
    "plot_sphere_errors",
    "plot_sphere_spectra",
    "require_matplotlib",
]

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
        The figure drawn into.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    TypeError
        If ``result`` is neither a :class:`~sk_deq.experiments.CompareResult`
        nor its ``to_dict()``.
    ValueError
        If ``result`` holds no measurements.
    """
    plt = require_matplotlib()
    rows, config, datasets, matches = _summary(result)
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
        title_j = f"{name}, {_ACT_LABELS.get(activation, activation)}-DEQ"
        _accuracy_panel(axes[0, j], block, activation, family, title_j, first=j == 0)
        if show_time:
            _time_panel(axes[1, j], block, first=j == 0)
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
        The figure drawn into.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    TypeError
        If ``result`` is neither a
        :class:`~sk_deq.model_selection.ComparisonResult` nor its
        ``to_dict()``.
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
        rows = []
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


def _accuracy_panel(ax, block, activation, family, title: str, *, first: bool):
    """Test accuracy (mean and one standard deviation over the repeats) of every model versus width."""
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
    ax.set_xscale("log", base=2)
    ax.set_xticks(widths, [str(w) for w in widths])
    ax.set_title(title, fontsize="medium")
    if first:
        ax.set_ylabel("test accuracy (%)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best")


def _time_panel(ax_t, block, *, first: bool):
    """Median fit+predict time of every model versus width, the DEQ/matched ratio written above the DEQ's."""
    widths = [r["width"] for r in block]
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


# ---------------------------------------------------------------------------
# spectra (the paper's Fig. 1-2 and the eigenvalue densities)

_KERNEL_LABELS = {"ck": r"Implicit-CK $G^*$", "feature": r"feature kernel $\Sigma^*$", "ntk": r"Implicit-NTK $K^*$"}


def _size_ticks(ax, sizes):
    """Label a log-scaled x axis with the sample sizes themselves."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(list(sizes))
    ax.set_xticklabels([str(n) for n in sizes])


def _spectrum_dict(result):
    if hasattr(result, "to_dict"):
        return result.to_dict()
    if isinstance(result, dict) and "errors" in result:
        return result
    raise TypeError(f"result must be a SpectrumResult or its to_dict() / JSON contents, got {type(result).__name__}.")


def plot_spectrum_errors(result, *, axes=None):
    """Relative spectral error between each DEQ kernel and its equivalent versus ``n`` (log-log).

    One panel per kernel (``G*``, ``Sigma*``, ``K*``), one line per
    activation: the paper's Fig. 1 (see :ref:`theory-figures` on the theory
    page).

    Parameters
    ----------
    result : SpectrumResult or dict
        From :func:`sk_deq.experiments.spectrum`, or its ``to_dict()`` (e.g.
        read back from the JSON that ``sk-deq spectrum --out`` writes).
    axes : sequence of matplotlib Axes, optional
        One axes per kernel in ``result.errors`` (three for a full run) to
        draw into; a new figure when None.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    TypeError
        If ``result`` is neither a :class:`~sk_deq.experiments.SpectrumResult`
        nor its ``to_dict()``.
    """
    plt = require_matplotlib()
    d = _spectrum_dict(result)
    kernels = [k for k in KERNELS if any(r["kernel"] == k for r in d["errors"])]
    if axes is None:
        fig, axes = plt.subplots(1, len(kernels), figsize=(4.2 * len(kernels), 3.6), squeeze=False)
        axes = axes[0]
    else:
        fig = axes[0].figure
    acts = list(dict.fromkeys(r["activation"] for r in d["errors"]))
    for ax, kern in zip(axes, kernels):
        for act in acts:
            rows = sorted((r["n"], r["error"]) for r in d["errors"] if r["activation"] == act and r["kernel"] == kern)
            if rows:
                ax.loglog(*zip(*rows), marker="o", label=_ACT_LABELS.get(act, act))
        _size_ticks(ax, sorted({r["n"] for r in d["errors"]}))
        ax.set_title(_KERNEL_LABELS[kern])
        ratio = d["settings"].get("ratio", 0.8)
        ax.set_xlabel(f"number of samples $n$ ($p = {ratio:.2g}\\,n$)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(r"$\|K - \bar K\|_2 / \|K\|_2$")
    sigma_a2 = d["settings"].get("sigma_a2", 0.2)
    axes[0].legend(title=rf"DEQ, $\sigma_a^2={sigma_a2:g}$")
    fig.tight_layout()
    return fig


def plot_matched_errors(result, *, axes=None):
    """DEQ kernel versus the matched explicit network's and a plain layer's, versus ``n``.

    One panel per activation and kernel of ``result.matched``: the relative
    spectral error between the DEQ's kernel (its feature kernel for the CK,
    its NTK for the NTK) and that of the matched explicit network, and of
    one plain layer of the DEQ's activation (log scales).

    Parameters
    ----------
    result : SpectrumResult or dict
        From :func:`sk_deq.experiments.spectrum` with a matched-network
        comparison, or its ``to_dict()`` (e.g. read back from the JSON that
        ``sk-deq spectrum --out`` writes).
    axes : sequence of matplotlib Axes, optional
        One axes per (activation, kernel) pair to draw into; a new figure
        when None.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    TypeError
        If ``result`` is neither a :class:`~sk_deq.experiments.SpectrumResult`
        nor its ``to_dict()``.
    ValueError
        If ``result`` has no matched-network comparison (``matched=()``).
    """
    plt = require_matplotlib()
    d = _spectrum_dict(result)
    keys = list(dict.fromkeys((r["activation"], r["kernel"]) for r in d["matched"]))
    if not keys:
        raise ValueError("the result has no matched-network comparison (matched=()).")
    if axes is None:
        fig, axes = plt.subplots(1, len(keys), figsize=(4.0 * len(keys), 3.6), squeeze=False)
        axes = axes[0]
    else:
        fig = axes[0].figure
    for ax, (act, kern) in zip(axes, keys):
        rows = sorted((r for r in d["matched"] if r["activation"] == act and r["kernel"] == kern), key=lambda r: r["n"])
        ns = [r["n"] for r in rows]
        ax.semilogy(
            ns, [r["matched"] for r in rows], marker="s", color="tab:orange", label=f"matched ({rows[0]['family']})"
        )
        ax.semilogy(ns, [r["plain"] for r in rows], marker="^", color="tab:green", label=f"plain {act} layer")
        ax.set_xscale("log")
        _size_ticks(ax, ns)
        ax.set_title(f"{_ACT_LABELS.get(act, act)}-DEQ, {'CK' if kern == 'ck' else 'NTK'}")
        ax.set_xlabel("number of samples $n$")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    axes[0].set_ylabel(r"$\|K_{DEQ} - K_{net}\|_2 / \|K_{DEQ}\|_2$")
    fig.tight_layout()
    return fig


def plot_eigenvalue_histograms(result, *, bins: int = 60, drop_below: float = 1e-3, axes=None):
    """Eigenvalue densities of the Implicit-CK (bars) and its equivalent (line).

    One panel per data set and activation: the paper's Fig. 2 (see
    :ref:`theory-figures` on the theory page).  The few outlying large
    eigenvalues (the class means) are left out of the histogram and the
    largest three listed in the panel's title; eigenvalues below
    ``drop_below`` times the largest are left out, as the near-zero ones of
    real data would dominate the picture.

    Parameters
    ----------
    result : SpectrumResult or dict
        From :func:`sk_deq.experiments.spectrum` with ``histograms=True``,
        or its ``to_dict()`` (e.g. read back from the JSON that
        ``sk-deq spectrum --out`` writes).
    bins : int, default=60
        Number of histogram bins over the bulk (up to the 98th percentile of
        the eigenvalues kept; the larger ones are the spikes).
    drop_below : float, default=1e-3
        Eigenvalues below this fraction of the largest are left out.
    axes : sequence of matplotlib Axes, optional
        One axes per spectrum to draw into; a new figure with two columns
        when None.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    TypeError
        If ``result`` is neither a :class:`~sk_deq.experiments.SpectrumResult`
        nor its ``to_dict()``.
    ValueError
        If ``result`` has no spectra (``histograms=False``).
    """
    import numpy as np

    plt = require_matplotlib()
    d = _spectrum_dict(result)
    rows = d["spectra"]
    if not rows:
        raise ValueError("the result has no spectra (histograms=False).")
    if axes is None:
        cols = 2
        nrows = math.ceil(len(rows) / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(5.0 * cols, 3.4 * nrows), squeeze=False)
        axes = axes.ravel()
    else:
        fig = axes[0].figure
    for ax, r in zip(axes, rows):
        ev = np.asarray(r["eigenvalues_deq"])
        eq = np.asarray(r["eigenvalues_equivalent"])
        top = ev.max()
        keep, keep_eq = ev[ev > drop_below * top], eq[eq > drop_below * top]
        # the bulk: everything up to the 98th percentile, the rest are spikes
        hi = np.quantile(keep, 0.98)
        edges = np.linspace(keep.min(), hi, bins + 1)
        ax.hist(keep[keep <= hi], bins=edges, density=True, alpha=0.5, color="tab:blue", label=r"DEQ $G^*$")
        hist_eq, _ = np.histogram(keep_eq[keep_eq <= hi], bins=edges, density=True)
        centres = 0.5 * (edges[1:] + edges[:-1])
        ax.plot(centres, hist_eq, color="tab:red", lw=1.5, label=r"equivalent $\bar G$")
        spikes = ev[ev > hi]
        if spikes.size:
            ax.set_title(
                f"{r['dataset'].upper()} {_ACT_LABELS.get(r['activation'], r['activation'])} (n={r['n']}, p={r['p']}); "
                f"spikes {', '.join(f'{s:.1f}' for s in spikes[-3:])}",
                fontsize="small",
            )
        else:
            ax.set_title(f"{r['dataset'].upper()} {r['activation']} (n={r['n']}, p={r['p']})", fontsize="small")
        ax.text(0.97, 0.9, f"rel. error {r['error']:.3f}", transform=ax.transAxes, ha="right", fontsize="small")
        ax.set_xlabel("eigenvalue")
        ax.legend(fontsize="small", loc="center right")
    for ax in list(axes)[len(rows) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# The workshop paper's experiment on the unit sphere (sk_deq.experiments.sphere_spectrum)

_SPHERE_PANELS = (
    ("implicit", "(a) implicit (ReLU-DEQ)", "tab:blue"),
    ("plain", "(b) explicit, plain ReLU", "tab:green"),
    ("quadratic", "(c) explicit, quadratic", "tab:orange"),
)


def _sphere_dict(result):
    if hasattr(result, "to_dict") and hasattr(result, "coefficients"):
        return result.to_dict()
    if isinstance(result, dict) and "spectra" in result and "coefficients" in result:
        return result
    raise TypeError(
        "result must be a SphereSpectrumResult from sk_deq.experiments.sphere_spectrum or its to_dict() / JSON "
        f"contents, got {type(result).__name__}."
    )


def plot_sphere_spectra(result, kernel: str = "ck", *, bins: int = 50, axes=None):
    """Spectral densities of the DEQ's kernel and of two one-layer networks on the unit sphere (3 panels).

    The panels of Fig. 1 of the workshop paper for one kernel (see
    :ref:`theory-sphere` on the theory page): (a) the ReLU-DEQ's exact kernel,
    (b) one explicit layer with the plain normalised ReLU, (c) one layer with
    the matched quadratic activation.  Each histogram shows the bulk; the
    isolated large eigenvalues (the ``alpha n`` spike of ``alpha 1 1^T``) are
    given in the title.  Panels (b) and (c) repeat the DEQ's density as a
    line.

    Parameters
    ----------
    result : SphereSpectrumResult or dict
        From :func:`sk_deq.experiments.sphere_spectrum`, or its ``to_dict()``
        (e.g. read back from the JSON that ``sk-deq spectrum --data sphere
        --out`` writes).
    kernel : {'ck', 'ntk'}, default='ck'
        Which kernel's spectra.
    bins : int, default=50
        Histogram bins over the common range of the three bulks.
    axes : sequence of three matplotlib Axes, optional
        The axes to draw into; a new figure with one row when None.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    TypeError
        If ``result`` is neither a
        :class:`~sk_deq.experiments.SphereSpectrumResult` nor its
        ``to_dict()``.
    ValueError
        If the result has no spectra for ``kernel``.
    """
    import numpy as np

    plt = require_matplotlib()
    d = _sphere_dict(result)
    rows = [r for r in d["spectra"] if r["kernel"] == kernel]
    if not rows:
        raise ValueError(f"the result has no spectra for kernel {kernel!r}.")
    row = rows[0]
    if axes is None:
        fig, axes = plt.subplots(1, 3, figsize=(13.0, 3.4), squeeze=False)
        axes = axes[0]
    else:
        fig = axes[0].figure
    spectra = {key: np.asarray(row[f"eigenvalues_{key}"]) for key, _, _ in _SPHERE_PANELS}
    # the bulk: below a gap of the largest eigenvalues (the spikes), at most the top 1 % of them
    bulks, spikes = {}, {}
    for key, ev in spectra.items():
        k = max(1, int(np.ceil(0.01 * len(ev))))
        hi = np.quantile(ev, 1.0 - k / len(ev))
        bulks[key], spikes[key] = ev[ev <= hi], ev[ev > hi]
    lo = min(b.min() for b in bulks.values())
    top = max(b.max() for b in bulks.values())
    edges = np.linspace(lo, top, bins + 1)
    centres = 0.5 * (edges[1:] + edges[:-1])
    ref, _ = np.histogram(bulks["implicit"], bins=edges, density=True)
    errors = {"implicit": None, "plain": row["plain"], "quadratic": row["quadratic"]}
    for ax, (key, title, color) in zip(axes, _SPHERE_PANELS):
        ax.hist(bulks[key], bins=edges, density=True, color=color, alpha=0.6)
        if key != "implicit":
            ax.plot(centres, ref, color="tab:blue", lw=1.2, label="DEQ")
            ax.text(0.97, 0.9, f"rel. error {errors[key]:.2g}", transform=ax.transAxes, ha="right", fontsize="small")
            ax.legend(fontsize="small", loc="center right")
        spike = ", ".join(f"{v:.1f}" for v in spikes[key][-2:])
        ax.set_title(f"{title}\nspikes {spike}", fontsize="small")
        ax.set_xlabel("eigenvalue")
    axes[0].set_ylabel(f"{kernel.upper()} density (n={row['n']}, d={row['d']})")
    fig.tight_layout()
    return fig


def plot_sphere_errors(result, *, axes=None):
    """Operator-norm errors against the DEQ's kernel versus ``n`` at fixed ``d / n`` (log-log).

    One panel per kernel (CK, NTK), one line per approximation: the
    equivalent ``alpha 1 1^T + beta X^T X + mu I``, the matched quadratic
    layer and the plain normalised-ReLU layer (see :ref:`theory-sphere`).

    Parameters
    ----------
    result : SphereSpectrumResult or dict
        From :func:`sk_deq.experiments.sphere_spectrum`, or its ``to_dict()``.
    axes : sequence of two matplotlib Axes, optional
        The axes to draw into; a new figure when None.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    TypeError
        If ``result`` is neither a
        :class:`~sk_deq.experiments.SphereSpectrumResult` nor its
        ``to_dict()``.
    ValueError
        If the result has no errors.
    """
    plt = require_matplotlib()
    d = _sphere_dict(result)
    if not d["errors"]:
        raise ValueError("the result has no errors (empty sizes).")
    kernels = list(dict.fromkeys(r["kernel"] for r in d["errors"]))
    if axes is None:
        fig, axes = plt.subplots(1, len(kernels), figsize=(4.6 * len(kernels), 3.6), squeeze=False)
        axes = axes[0]
    else:
        fig = axes[0].figure
    lines = (
        ("plain", "plain ReLU layer", "tab:green", "^"),
        ("quadratic", "matched quadratic layer", "tab:orange", "s"),
        ("equivalent", r"$\alpha 11^\top + \beta X^\top X + \mu I$", "tab:purple", "o"),
    )
    ratio = d["settings"].get("ratio", 1.2)
    for ax, kern in zip(axes, kernels):
        rows = sorted((r for r in d["errors"] if r["kernel"] == kern), key=lambda r: r["n"])
        for key, label, color, marker in lines:
            ax.loglog([r["n"] for r in rows], [r[key] for r in rows], marker=marker, color=color, label=label)
        _size_ticks(ax, [r["n"] for r in rows])
        ax.set_title(f"{kern.upper()} of the ReLU-DEQ on the sphere")
        ax.set_xlabel(f"number of samples $n$ ($d = {ratio:.2g}\\,n$)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(r"$\|K^* - K\|_2 / \|K^*\|_2$")
    axes[0].legend(fontsize="small", title=rf"$\sigma_a^2={d['settings'].get('sigma_a2', 0.2):g}$")
    fig.tight_layout()
    return fig
