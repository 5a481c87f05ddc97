"""``sk-deq spectrum``: the spectral-equivalence experiment and the unit-sphere run from the command line."""

import json

import pytest

from sk_deq.cli import main


def test_cli_sphere(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from sk_deq.cli import main

    argv = ["spectrum", "--data", "sphere", "--quick", "--sizes", "40,80", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "matched quadratic layer" in out and "NTK (d=240)" in out
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["sphere.json", "sphere_errors.png", "sphere_spectra_ck.png", "sphere_spectra_ntk.png"]
    assert json.loads((tmp_path / "sphere.json").read_text())["settings"]["sizes"] == [40, 80]
    assert main(["spectrum", "--data", "sphere", "--quick", "--sizes", "40", "--json", "--method", "monte_carlo"]) == 0
    assert json.loads(capsys.readouterr().out)["settings"]["n_hidden"] == 4096


def test_cli_writes_figures_and_json(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    rc = main(
        [
            "spectrum",
            "--quick",
            "--sizes",
            "40,80",
            "--activations",
            "relu",
            "--matched",
            "tanh",
            "--no-mnist",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "relu" in out and "matched hard_tanh" in out
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["spectrum.json", "spectrum_eigenvalues.png", "spectrum_errors.png", "spectrum_matched.png"]
    assert json.loads((tmp_path / "spectrum.json").read_text())["settings"]["sizes"] == [40, 80]


def test_cli_errors(capsys):
    assert main(["spectrum", "--sizes", "2", "--no-histograms"]) == 2
    assert "sizes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["spectrum", "--method", "mean_field"])


def test_the_options_the_sphere_run_uses_are_accepted(capsys):
    argv = ["spectrum", "--data", "sphere", "--sizes", "8,16", "--sigma-a2", "0.3", "--method", "monte_carlo"]
    assert main([*argv, "--n-hidden", "64", "--random-state", "1", "--quick", "--no-progress", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["sizes"] == [8, 16] and data["settings"]["n_hidden"] == 64


def test_sizes_that_cannot_fit_are_refused_before_allocating(capsys, monkeypatch):
    import sk_deq._runtime as memory

    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 2**30)
    for argv in (["spectrum", "--data", "sphere"], ["spectrum"]):
        assert main([*argv, "--sizes", "100,20000", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "error: The size n = 20000" in err and "GiB of memory available. Use smaller sizes." in err
