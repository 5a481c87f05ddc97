"""``sk-deq boundary``: the study of where the equivalence ends from the command line."""

import json

import pytest

from sk_deq.cli import main
from sk_deq.experiments import BoundaryResult

# --quick made tiny: the command's plumbing, not the study (tests/experiments/test_boundary.py)
TINY = dict(
    sharpness=(1.0, 8.0),
    dims=(2,),
    seeds=(0, 1, 2),
    n_train=48,
    n_hidden=4,
    n_hidden_readout=32,
    max_epochs=3,
    n_grid=11,
    n_lines=1,
)


@pytest.fixture
def tiny_quick(monkeypatch):
    import sk_deq.cli._boundary as command

    monkeypatch.setattr(command, "QUICK", TINY)


def test_cli_prints_the_table_and_writes_the_json_and_the_figure(tmp_path, capsys, tiny_quick):
    pytest.importorskip("matplotlib")
    assert main(["boundary", "--quick", "--repeats", "2", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "d = 2" in out and "DEQ, readout" in out and "explicit, all weights" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["where_equivalence_ends.json", "where_equivalence_ends.png"]
    result = BoundaryResult.from_dict(json.loads((tmp_path / "where_equivalence_ends.json").read_text()))
    assert result.config["seeds"] == [0, 1] and result.config["n_hidden"] == 4  # --repeats 2 over --quick's seeds
    assert result.environment["torch_threads"] == 1 and len(result.records) == 2 * 2 * 4


def test_cli_json_prints_the_results(capsys, tiny_quick):
    assert main(["boundary", "--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["seeds"] == [0, 1, 2] and len(data["summary"]) == 2 * 4
