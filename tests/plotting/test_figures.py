"""The figures of sk_deq.plotting, drawn from small hand-made results with matplotlib's Agg backend.

The experiments' own tests (tests/experiments/) draw the
figures of real runs; here every panel, line and label is checked against the
numbers it was given.
"""

import subprocess
import sys

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sk_deq.plotting import (  # noqa: E402
    EXACT_KERNEL_STYLE,
    MODEL_STYLES,
    plot_compare_widths,
    plot_eigenvalue_histograms,
    plot_matched_errors,
    plot_spectrum_errors,
    require_matplotlib,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# -- accuracy versus width --------------------------------------------------------------------------


def _models(acc, secs):
    return {
        model: {"accuracy_mean": a, "accuracy_std": 0.01, "seconds_median": s}
        for model, a, s in zip(("deq", "matched", "plain"), acc, secs)
    }


def _compare_result():
    """The to_dict() layout of sk_deq.experiments.CompareResult, two data sets, one activation, two widths."""
    summary = []
    for dataset, shift in (("digits", 0.0), ("mnist", -0.1)):
        for width, acc, secs, ratio in (
            (16, (0.90, 0.88, 0.85), (2.0, 1.0, 0.5), 2.0),
            (64, (0.95, 0.94, 0.93), (8.0, 2.0, 1.0), 4.0),
        ):
            summary.append(
                {
                    "dataset": dataset,
                    "activation": "relu",
                    "width": width,
                    "models": _models([a + shift for a in acc], secs),
                    "time_ratio_median": ratio,
                }
            )
    return {
        "config": {"datasets": ["digits", "mnist"], "activations": ["relu"]},
        "datasets": {"digits": {"description": "sklearn digits (1797 x 64)"}, "mnist": {"description": "MNIST"}},
        "matches": {"digits": {"relu": {"family": "leaky_relu"}}},
        "summary": summary,
    }


def test_compare_widths_panels_lines_and_labels():
    fig = plot_compare_widths(_compare_result(), title="widths")
    assert len(fig.axes) == 4  # (accuracy, time) x (digits, mnist)
    acc_digits, acc_mnist, time_digits, _ = fig.axes
    assert acc_digits.get_title() == "sklearn digits, ReLU-DEQ" and acc_mnist.get_title() == "MNIST, ReLU-DEQ"
    assert fig.get_suptitle() == "widths"
    labels = [c.get_label() for c in acc_digits.containers]
    assert labels == ["DEQ", "matched explicit (leaky_relu)", "plain explicit (relu)"]
    assert [c.get_label() for c in acc_mnist.containers][1] == "matched explicit"  # no match recorded
    deq_line = acc_mnist.containers[0].lines[0]
    np.testing.assert_allclose(np.asarray(deq_line.get_xdata(), dtype=float), [16, 64])
    np.testing.assert_allclose(deq_line.get_ydata(), [80.0, 85.0])
    assert deq_line.get_color() == MODEL_STYLES["deq"]["color"]
    assert acc_digits.get_xscale() == "log" and acc_digits.get_ylabel() == "test accuracy (%)"
    # time row: one line per model, the DEQ/matched ratio written above the DEQ's points
    assert [ln.get_label() for ln in time_digits.lines] == ["DEQ", "matched explicit", "plain explicit"]
    np.testing.assert_allclose(time_digits.lines[1].get_ydata(), [1.0, 2.0])
    assert [t.get_text() for t in time_digits.texts] == ["2.0x", "4.0x"]
    assert time_digits.get_yscale() == "log" and time_digits.get_xlabel() == "width m"


def test_compare_widths_without_time_into_given_axes():
    fig, axes = plt.subplots(1, 2)
    out = plot_compare_widths(_compare_result(), show_time=False, axes=axes)
    assert out is fig and len(fig.axes) == 2
    assert all(len(ax.containers) == 3 for ax in axes) and not any(ax.texts for ax in axes)
    assert axes[0].get_xlabel() == "width m"


def test_compare_widths_draws_only_the_models_measured():
    result = _compare_result()
    for row in result["summary"]:
        del row["models"]["plain"]
    fig = plot_compare_widths(result)
    assert [c.get_label() for c in fig.axes[0].containers] == ["DEQ", "matched explicit (leaky_relu)"]


def test_compare_widths_errors():
    empty = {**_compare_result(), "summary": []}
    with pytest.raises(ValueError, match="no measurements"):
        plot_compare_widths(empty)
    with pytest.raises(TypeError, match="CompareResult"):
        plot_compare_widths({"summary": []})  # no config


def test_compare_widths_draws_the_exact_kernel_as_a_horizontal_line():
    result = _compare_result()
    result["exact_kernel_summary"] = [  # digits only: mnist's panels have no such line
        {
            "dataset": "digits",
            "activation": "relu",
            "kernel": "feature",
            "n_fits": 3,
            "accuracy_mean": 0.97,
            "accuracy_std": 0.005,
            "seconds_median": 40.0,
        }
    ]
    fig = plot_compare_widths(result)
    acc_digits, acc_mnist, time_digits, time_mnist = fig.axes
    label = "exact feature kernel (∞ width)"
    (line,) = [ln for ln in acc_digits.lines if ln.get_label() == label]
    np.testing.assert_allclose(line.get_ydata(), [97.0, 97.0])
    np.testing.assert_allclose(line.get_xdata(), [0.0, 1.0])  # across the whole panel (axes coordinates)
    assert line.get_linestyle() == "--" and line.get_color() == EXACT_KERNEL_STYLE["color"]
    # a band of one standard deviation over the fits
    (band,) = acc_digits.patches
    np.testing.assert_allclose([band.get_y(), band.get_y() + band.get_height()], [96.5, 97.5])
    assert label in [t.get_text() for t in acc_digits.get_legend().get_texts()]
    (t_line,) = [ln for ln in time_digits.lines if ln.get_label() == label]
    np.testing.assert_allclose(t_line.get_ydata(), [40.0, 40.0])
    assert not [ln for ax in (acc_mnist, time_mnist) for ln in ax.lines if ln.get_label() == label]
    assert not acc_mnist.patches
    # one fit: no band
    result["exact_kernel_summary"][0].update(n_fits=1, accuracy_std=0.0)
    assert not plot_compare_widths(result).axes[0].patches


# -- spectra ----------------------------------------------------------------------------------------


def _spectrum_result(spectra=True):
    """The to_dict() layout of sk_deq.experiments.SpectrumResult."""
    errors = [
        {"activation": act, "n": n, "p": int(0.8 * n), "kernel": kern, "error": err / n}
        for act, err in (("relu", 2.0), ("tanh", 3.0))
        for kern in ("ck", "ntk")
        for n in (400, 100)  # unsorted: the figure sorts by n
    ]
    matched = [
        {"activation": "relu", "kernel": "ck", "n": n, "family": "leaky_relu", "matched": 1e-4 * n, "plain": 0.1}
        for n in (100, 400)
    ]
    rng = np.random.default_rng(0)
    rows = []
    if spectra:
        for act in ("relu", "tanh", "gelu"):
            ev = np.sort(np.concatenate([rng.uniform(0.5, 2.0, 200), [30.0, 40.0]]))
            rows.append(
                {
                    "dataset": "gmm",
                    "activation": act,
                    "n": 202,
                    "p": 160,
                    "eigenvalues_deq": list(ev),
                    "eigenvalues_equivalent": list(ev * 1.01),
                    "error": 0.0123,
                }
            )
    return {"errors": errors, "matched": matched, "spectra": rows, "settings": {"sigma_a2": 0.3, "ratio": 0.8}}


def test_spectrum_errors_one_panel_per_kernel_one_line_per_activation():
    fig = plot_spectrum_errors(_spectrum_result())
    assert len(fig.axes) == 2  # only the kernels in the result
    ck, ntk = fig.axes
    assert ck.get_title() == r"Implicit-CK $G^*$" and ntk.get_title() == r"Implicit-NTK $K^*$"
    assert [ln.get_label() for ln in ck.lines] == ["ReLU", "Tanh"]
    np.testing.assert_allclose(ntk.lines[1].get_xdata(), [100, 400])
    np.testing.assert_allclose(ntk.lines[1].get_ydata(), [0.03, 0.0075])
    assert ck.get_xscale() == ck.get_yscale() == "log"
    assert [t.get_text() for t in ck.get_xticklabels()] == ["100", "400"]
    assert ck.get_legend().get_title().get_text() == r"DEQ, $\sigma_a^2=0.3$"


def test_matched_errors_matched_and_plain_lines():
    fig = plot_matched_errors(_spectrum_result())
    (ax,) = fig.axes
    assert ax.get_title() == "ReLU-DEQ, CK"
    assert [ln.get_label() for ln in ax.lines] == ["matched (leaky_relu)", "plain relu layer"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [0.01, 0.04])
    np.testing.assert_allclose(ax.lines[1].get_xdata(), [100, 400])
    with pytest.raises(ValueError, match="no matched-network comparison"):
        plot_matched_errors({**_spectrum_result(), "matched": []})


def test_eigenvalue_histograms_bars_line_spikes_and_unused_panels():
    fig = plot_eigenvalue_histograms(_spectrum_result(), bins=20)
    assert len(fig.axes) == 4  # a 2 x 2 grid for three spectra
    first, *_, unused = fig.axes
    assert not unused.get_visible() and all(ax.get_visible() for ax in fig.axes[:3])
    assert len(first.patches) == 20 and len(first.lines) == 1  # the bars (DEQ) and the line (equivalent)
    assert "spikes" in first.get_title() and "40.0" in first.get_title()
    assert [t.get_text() for t in first.texts] == ["rel. error 0.012"]
    # densities: the bars integrate to one
    widths = [p.get_width() for p in first.patches]
    heights = [p.get_height() for p in first.patches]
    assert np.dot(widths, heights) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no spectra"):
        plot_eigenvalue_histograms(_spectrum_result(spectra=False))


def test_a_figure_refuses_the_result_of_another_experiment():
    """The sphere's result has ``errors`` and ``spectra`` too, but is no SpectrumResult: a TypeError, not a KeyError."""
    from sk_deq.experiments import SphereSpectrumResult
    from sk_deq.plotting import plot_sphere_errors

    sphere = SphereSpectrumResult(errors=[{"kernel": "ck", "n": 10, "d": 12, "plain": 1.0}], settings={})
    for plot in (plot_spectrum_errors, plot_eigenvalue_histograms):
        with pytest.raises(TypeError, match=r"SpectrumResult from sk_deq\.experiments\.spectrum"):
            plot(sphere)
        with pytest.raises(TypeError, match="SpectrumResult"):
            plot(sphere.to_dict())
    with pytest.raises(TypeError, match="SphereSpectrumResult"):
        plot_sphere_errors(_spectrum_result())


# -- without matplotlib -----------------------------------------------------------------------------


def test_require_matplotlib_returns_pyplot():
    assert require_matplotlib() is plt


@pytest.mark.parametrize(
    ("plot", "result"),
    [
        (plot_compare_widths, _compare_result()),
        (plot_spectrum_errors, _spectrum_result()),
        (plot_matched_errors, _spectrum_result()),
        (plot_eigenvalue_histograms, _spectrum_result()),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_every_figure_names_the_plot_extra_without_matplotlib(monkeypatch, plot, result):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'sk_deq\[plot\]'") as info:
        plot(result)
    assert isinstance(info.value.__cause__, ImportError)


def test_the_module_imports_without_matplotlib():
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "import sk_deq.plotting as p\n"
        "try:\n"
        "    p.require_matplotlib()\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "sk_deq's figures need matplotlib, which is not installed: pip install 'sk_deq[plot]'" in out
