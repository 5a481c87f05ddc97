"""The spectral-equivalence experiment (the paper's Fig. 1-2, :func:`sk_deq.experiments.spectrum`) and its figures."""

import json

import numpy as np
import pytest

from sk_deq.experiments import SpectrumResult, spectrum


@pytest.fixture(scope="module")
def small():
    return spectrum(
        activations=("relu", "tanh"),
        sizes=(100, 400),
        matched=("relu", "tanh"),
        matched_kernels=("ck",),
        gmm_size=(80, 100),
        mnist_samples=None,
    )


def test_structure_and_numbers(small):
    assert isinstance(small, SpectrumResult)
    assert len(small.errors) == 2 * 2 * 3  # activations x sizes x kernels
    assert {r["kernel"] for r in small.errors} == {"ck", "feature", "ntk"}
    assert all(0 < r["error"] < 0.5 for r in small.errors)
    assert [r["p"] for r in small.errors if r["activation"] == "relu" and r["kernel"] == "ck"] == [80, 320]
    # the equivalent gets better as n and p grow (theory page, 'High-dimensional equivalent on a Gaussian mixture')
    for act in ("relu", "tanh"):
        for kern in ("ck", "feature", "ntk"):
            e = [r["error"] for r in small.errors if r["activation"] == act and r["kernel"] == kern]
            assert e[1] < e[0]
    # matched networks follow the DEQ far more closely than a plain layer
    for r in small.matched:
        assert r["matched"] < 0.2 * r["plain"]
    assert {r["family"] for r in small.matched} == {"leaky_relu", "hard_tanh"}
    # spectra: eigenvalues sorted, same count, a small error
    assert [(r["dataset"], r["activation"]) for r in small.spectra] == [("gmm", "relu"), ("gmm", "tanh")]
    for r in small.spectra:
        assert len(r["eigenvalues_deq"]) == len(r["eigenvalues_equivalent"]) == 80
        assert np.all(np.diff(r["eigenvalues_deq"]) >= 0) and r["error"] < 0.05


def test_table_and_json_round_trip(small):
    text = small.table()
    assert "feature" in text and "matched leaky_relu" in text and "plain tanh" in text and "gmm" in text
    data = json.loads(small.to_json())
    assert data["settings"]["sizes"] == [100, 400] and len(data["spectra"][0]["eigenvalues_deq"]) == 80


def test_figures_from_result_and_from_json(small, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from sk_deq.plotting import plot_eigenvalue_histograms, plot_matched_errors, plot_spectrum_errors

    for plot in (plot_spectrum_errors, plot_matched_errors, plot_eigenvalue_histograms):
        for source in (small, json.loads(small.to_json())):
            fig = plot(source)
            assert fig.axes
            fig.savefig(tmp_path / f"{plot.__name__}.png")
    with pytest.raises(TypeError, match="SpectrumResult"):
        plot_spectrum_errors([1, 2])


def test_monte_carlo_method_runs_and_is_close():
    r = spectrum(activations=("relu",), sizes=(40,), matched=(), histograms=False, method="monte_carlo", n_hidden=2000)
    ck = next(x["error"] for x in r.errors if x["kernel"] == "ck")
    assert ck < 0.05


def test_bad_arguments():
    with pytest.raises(ValueError, match="method"):
        spectrum(method="mean_field")
    with pytest.raises(ValueError, match="sizes"):
        spectrum(sizes=(2,))
    with pytest.raises(ValueError, match="matched_kernels"):
        spectrum(sizes=(40,), matched_kernels=("nngp",))
