"""Figures of spectra: DEQ kernels against their equivalents and explicit networks (Ling et al.'s (2024) Fig. 1-2),
and the workshop paper's unit-sphere experiment."""

from __future__ import annotations

import math

from .._validation import KERNELS
from ._common import ACT_LABELS, axes_row, require_matplotlib, result_dict, size_ticks

# What the TypeErrors name when a figure is given something other than its result.
_SPECTRUM = "a SpectrumResult from sk_deq.experiments.spectrum"
_SPHERE = "a SphereSpectrumResult from sk_deq.experiments.sphere_spectrum"

_KERNEL_LABELS = {"ck": r"Implicit-CK $G^*$", "feature": r"feature kernel $\Sigma^*$", "ntk": r"Implicit-NTK $K^*$"}


def plot_spectrum_errors(result, *, axes=None):
    """Relative spectral error between each DEQ kernel and its equivalent versus ``n`` (log-log).

    One panel per kernel (``G*``, ``Sigma*``, ``K*``), one line per
    activation: Ling et al.'s (2024) Fig. 1 (see :ref:`theory-figures` on the theory
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
        The figure, one log-log panel per kernel.
    """
    plt = require_matplotlib()
    d = result_dict(result, ("errors", "matched"), _SPECTRUM)
    kernels = [k for k in KERNELS if any(r["kernel"] == k for r in d["errors"])]
    fig, axes = axes_row(plt, axes, len(kernels), (4.2, 3.6))
    acts = list(dict.fromkeys(r["activation"] for r in d["errors"]))
    for ax, kern in zip(axes, kernels):
        for act in acts:
            rows = sorted((r["n"], r["error"]) for r in d["errors"] if r["activation"] == act and r["kernel"] == kern)
            if rows:
                ax.loglog(*zip(*rows), marker="o", label=ACT_LABELS.get(act, act))
        size_ticks(ax, sorted({r["n"] for r in d["errors"]}))
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
        The figure, one panel per (activation, kernel) pair.

    Raises
    ------
    ValueError
        If ``result`` has no matched-network comparison (``matched=()``).
    """
    plt = require_matplotlib()
    d = result_dict(result, ("errors", "matched"), _SPECTRUM)
    keys = list(dict.fromkeys((r["activation"], r["kernel"]) for r in d["matched"]))
    if not keys:
        raise ValueError("the result has no matched-network comparison (matched=()).")
    fig, axes = axes_row(plt, axes, len(keys), (4.0, 3.6))
    for ax, (act, kern) in zip(axes, keys):
        rows = sorted((r for r in d["matched"] if r["activation"] == act and r["kernel"] == kern), key=lambda r: r["n"])
        ns = [r["n"] for r in rows]
        ax.semilogy(
            ns, [r["matched"] for r in rows], marker="s", color="tab:orange", label=f"matched ({rows[0]['family']})"
        )
        ax.semilogy(ns, [r["plain"] for r in rows], marker="^", color="tab:green", label=f"plain {act} layer")
        ax.set_xscale("log")
        size_ticks(ax, ns)
        ax.set_title(f"{ACT_LABELS.get(act, act)}-DEQ, {'CK' if kern == 'ck' else 'NTK'}")
        ax.set_xlabel("number of samples $n$")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    axes[0].set_ylabel(r"$\|K_{DEQ} - K_{net}\|_2 / \|K_{DEQ}\|_2$")
    fig.tight_layout()
    return fig


def plot_eigenvalue_histograms(result, *, bins: int = 60, drop_below: float = 1e-3, axes=None):
    """Eigenvalue densities of the Implicit-CK (bars) and its equivalent (line).

    One panel per data set and activation: Ling et al.'s (2024) Fig. 2 (see
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
        The figure; axes beyond the number of spectra are hidden.

    Raises
    ------
    ValueError
        If ``result`` has no spectra (``histograms=False``).
    """
    import numpy as np

    plt = require_matplotlib()
    d = result_dict(result, ("errors", "matched"), _SPECTRUM)
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
                f"{r['dataset'].upper()} {ACT_LABELS.get(r['activation'], r['activation'])} (n={r['n']}, p={r['p']}); "
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
        The figure of the three panels (a), (b) and (c).

    Raises
    ------
    ValueError
        If the result has no spectra for ``kernel``.
    """
    import numpy as np

    plt = require_matplotlib()
    d = result_dict(result, ("spectra", "coefficients"), _SPHERE)
    rows = [r for r in d["spectra"] if r["kernel"] == kernel]
    if not rows:
        raise ValueError(f"the result has no spectra for kernel {kernel!r}.")
    row = rows[0]
    fig, axes = axes_row(plt, axes, 3, (4.33, 3.4))
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
        The figure, a CK and an NTK panel.

    Raises
    ------
    ValueError
        If the result has no errors.
    """
    plt = require_matplotlib()
    d = result_dict(result, ("spectra", "coefficients"), _SPHERE)
    if not d["errors"]:
        raise ValueError("the result has no errors (empty sizes).")
    kernels = list(dict.fromkeys(r["kernel"] for r in d["errors"]))
    fig, axes = axes_row(plt, axes, len(kernels), (4.6, 3.6))
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
        size_ticks(ax, [r["n"] for r in rows])
        ax.set_title(f"{kern.upper()} of the ReLU-DEQ on the sphere")
        ax.set_xlabel(f"number of samples $n$ ($d = {ratio:.2g}\\,n$)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(r"$\|K^* - K\|_2 / \|K^*\|_2$")
    axes[0].legend(fontsize="small", title=rf"$\sigma_a^2={d['settings'].get('sigma_a2', 0.2):g}$")
    fig.tight_layout()
    return fig
