"""``sk-deq spectrum``: the spectral-equivalence experiment and the unit-sphere run from the command line."""

import json

import pytest


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
