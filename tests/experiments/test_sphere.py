"""The unit-sphere experiment (sk_deq.experiments.sphere_spectrum) and its figures."""

import json

import pytest

from sk_deq.theory import sphere_quadratic_match

SA = 0.2


@pytest.fixture(scope="module")
def sphere_run():
    from sk_deq.experiments import sphere_spectrum

    return sphere_spectrum(size=(60, 72), sizes=(40, 80))


def test_sphere_spectrum_structure(sphere_run):
    r = sphere_run
    assert [row["kernel"] for row in r.spectra] == ["ck", "ntk"]
    assert {(e["kernel"], e["n"], e["d"]) for e in r.errors} == {
        (k, n, round(1.2 * n)) for k in ("ck", "ntk") for n in (40, 80)
    }
    for row in r.spectra:
        assert len(row["eigenvalues_implicit"]) == 60
        assert row["quadratic"] < 0.01 < 1.0 < row["plain"]
    q = r.coefficients["ck"]["quadratic"]
    assert (q["a2"], q["a1"]) == pytest.approx(sphere_quadratic_match(SA, 72, "ck").coefficients[:2])
    back = json.loads(r.to_json())
    assert back["settings"]["sizes"] == [40, 80] and "quadratic" in str(r)


def test_sphere_figures_from_result_and_json(sphere_run):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from sk_deq.plotting import plot_sphere_errors, plot_sphere_spectra

    for source in (sphere_run, json.loads(sphere_run.to_json())):
        assert len(plot_sphere_spectra(source, "ntk").axes) == 3
        assert len(plot_sphere_errors(source).axes) == 2
    with pytest.raises(TypeError, match="SphereSpectrumResult"):
        plot_sphere_errors({"errors": []})
    with pytest.raises(ValueError, match="sizes"):
        from sk_deq.experiments import sphere_spectrum

        sphere_spectrum(sizes=(2,))
