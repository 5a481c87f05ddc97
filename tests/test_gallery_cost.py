"""The documentation build's record of each gallery example's cost, and its limit (``docs/_gallery_cost.py``).

The clocks are replaced by counters, so that what is recorded is known exactly.
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cost():
    module = _load("_gallery_cost_under_test", ROOT / "docs" / "_gallery_cost.py")
    yield module
    sys.modules.pop("_gallery_cost_under_test", None)


def _fake_clocks(monkeypatch, cost, cpu, wall):
    cpu, wall = iter(cpu), iter(wall)
    monkeypatch.setattr(cost, "_cpu_seconds", lambda: next(cpu))
    monkeypatch.setattr(cost.time, "perf_counter", lambda: next(wall))


def test_record_keeps_the_cpu_and_wall_time_between_before_and_after(cost, monkeypatch):
    _fake_clocks(monkeypatch, cost, cpu=[10.0, 13.5, 20.0, 20.25], wall=[100.0, 102.0, 200.0, 210.0])
    cost.record({}, None, when="before")  # entering a folder: no example, no clock read
    cost.record({}, "plot_a.py", when="before")
    cost.record({}, "plot_a.py", when="after")
    cost.record({}, "/x/plot_b.py", when="before")
    cost.record({}, "/x/plot_b.py", when="after")
    assert cost.COSTS == {"plot_a": {"cpu_s": 3.5, "wall_s": 2.0}, "plot_b": {"cpu_s": 0.25, "wall_s": 10.0}}


def test_an_after_without_a_before_records_nothing(cost, monkeypatch):
    _fake_clocks(monkeypatch, cost, cpu=[], wall=[])
    cost.record({}, "plot_a.py", when="after")
    assert cost.COSTS == {}


def test_the_limit_applies_to_cpu_time_only_and_is_strict(cost):
    costs = {
        "plot_at": {"cpu_s": 30.0, "wall_s": 300.0},  # at the limit, however long its wall time: passes
        "plot_over": {"cpu_s": 31.0, "wall_s": 20.0},
        "plot_far_over": {"cpu_s": 45.5, "wall_s": 50.0},
        "plot_small": {"cpu_s": 1.0, "wall_s": 1.0},
    }
    problems = cost.over_limit(costs, 30.0)
    assert [p.split()[0] for p in problems] == ["plot_far_over", "plot_over"]
    assert "45.5 s of CPU time" in problems[0] and "30 s limit" in problems[0] and cost.LIMIT_ENV in problems[0]
    assert cost.over_limit(costs, 50.0) == []


def test_the_limit_comes_from_the_environment(cost):
    assert cost.limit_s({}) == cost.DEFAULT_LIMIT_S
    assert cost.limit_s({cost.LIMIT_ENV: " "}) == cost.DEFAULT_LIMIT_S
    assert cost.limit_s({cost.LIMIT_ENV: "90"}) == 90.0
    assert cost.limit_s({cost.LIMIT_ENV: "2.5"}) == 2.5


@pytest.mark.parametrize("text", ["abc", "0", "-3", "inf", "nan", "30s"])
def test_a_bad_limit_is_an_error_naming_the_variable(cost, text):
    with pytest.raises(ValueError, match=cost.LIMIT_ENV):
        cost.limit_s({cost.LIMIT_ENV: text})


def test_save_merges_with_the_costs_of_earlier_builds(cost, tmp_path):
    path = tmp_path / "example_costs.json"
    cost.save({"plot_a": {"cpu_s": 1.0, "wall_s": 2.0}, "plot_b": {"cpu_s": 3.0, "wall_s": 4.0}}, path)
    cost.save({"plot_b": {"cpu_s": 5.0, "wall_s": 6.0}}, path)
    assert json.loads(path.read_text()) == {
        "plot_a": {"cpu_s": 1.0, "wall_s": 2.0},
        "plot_b": {"cpu_s": 5.0, "wall_s": 6.0},
    }
    summary = cost.summary({"plot_a": {"cpu_s": 1.0, "wall_s": 2.0}, "plot_b": {"cpu_s": 3.0, "wall_s": 4.0}})
    assert summary.splitlines()[0].split()[0] == "plot_b" and "4.0 s" in summary.splitlines()[-1]


SG_TIMES = """
:orphan:

.. _sphx_glr_sg_execution_times:

Computation times
=================
**01:02.500** total execution time for 2 files **from all galleries**:

.. container::

  .. list-table::
   :header-rows: 1
   :class: table table-striped sg-datatable

   * - Example
     - Time
     - Mem (MB)
   * - :ref:`sphx_glr_auto_examples_plot_slow.py` (``../examples/plot_slow.py``)
     - 01:00.250
     - 0.0
   * - :ref:`sphx_glr_auto_examples_plot_fast.py` (``../examples/plot_fast.py``)
     - 00:02.250
     - 0.0
"""


def test_the_docs_build_benchmark_reads_sphinx_gallerys_times():
    bench = _load("docs_build_under_test", ROOT / "benchmarks" / "docs_build.py")
    assert bench.example_wall_times(SG_TIMES) == {"plot_slow": 60.25, "plot_fast": 2.25}
