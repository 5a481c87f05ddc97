"""The runner of the benchmarks (``benchmarks/run_all.py``): registry, error capture, goals, markdown."""

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _fake_module(monkeypatch, name, **attrs):
    import types

    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


def test_run_all_records_errors_and_missing_benchmarks_and_goes_on(monkeypatch, tmp_path):
    import json

    from benchmarks import run_all

    calls = []

    def ok_collect(quick=False, repeats=3):
        calls.append((quick, repeats))
        return {
            "config": {"width": 8, "note": "a|b"},
            "records": [{"model": "deq", "acc_pct": 97.123456, "seconds": float("nan"), "raw": [1, 2]}],
            "goals": [
                {"id": "forward_gemm", "goal": "forward / GEMM", "target": ">= 90 %", "measured": "95 %", "met": True}
            ],
        }

    def failing_collect(quick=False, repeats=3):
        raise RuntimeError("boom")

    _fake_module(monkeypatch, "fake_bench_ok", collect=ok_collect)
    _fake_module(monkeypatch, "fake_bench_fails", collect=failing_collect)
    _fake_module(monkeypatch, "fake_bench_no_collect")
    registry = {
        "ok": run_all.Benchmark("fake_bench_ok"),
        "fails": run_all.Benchmark("fake_bench_fails"),
        "no_collect": run_all.Benchmark("fake_bench_no_collect"),
        "missing": run_all.Benchmark("fake_bench_that_does_not_exist"),
        "adapted": run_all.Benchmark("fake_bench_ok", "collect", lambda f, q, r: {"records": [{"q": q, "r": r}]}),
    }
    lines = []
    res = run_all.run_all(
        quick=True, repeats=2, out=tmp_path, registry=registry, progress=lambda *a, **k: lines.append(a[0])
    )
    bench = res["benchmarks"]
    assert [bench[n]["status"] for n in registry] == ["ok", "error", "not available", "not available", "ok"]
    assert "boom" in bench["fails"]["error"] and "RuntimeError" in bench["fails"]["traceback"]
    assert calls == [(True, 2)]
    assert bench["adapted"]["result"]["records"] == [{"q": True, "r": 2}]
    assert bench["ok"]["result"]["records"][0]["seconds"] is None  # NaN made JSON-safe
    assert len(lines) == 2 * len(registry) + 1
    saved = json.loads((tmp_path / "run_all_quick.json").read_text())
    assert saved["schema"] == run_all.SCHEMA and saved["quick"] and saved["repeats"] == 2
    prov = saved["provenance"]  # schema 2: the harness's provenance instead of a flat "machine"
    assert {"cpu_model", "cpu_count", "cpus_usable", "memory_bytes", "gpu"} <= set(prov["machine"])
    assert {"numpy", "torch"} <= set(prov["versions"]) and {"torch", "threadpools"} <= set(prov["threads"])
    assert prov["git"]["commit"] and "Provenance: " in (tmp_path / "run_all_quick.md").read_text()
    goals = {g["id"]: g for g in saved["goals"]}
    assert goals["forward_gemm"]["met"] is True and goals["forward_gemm"]["benchmark"] == "ok"
    assert goals["kernel_relu"]["met"] is None and "not measured" in goals["kernel_relu"]["note"]
    md = (tmp_path / "run_all_quick.md").read_text()
    assert md == run_all.markdown(saved)
    assert "## Goals" in md and "## fails" in md and "boom" in md and "| 97.12 |" in md
    assert "a\\|b" in md  # a pipe in a value does not break the table
    with pytest.raises(ValueError, match="unknown"):
        run_all.run_all(["nope"], registry=registry, progress=lambda *a, **k: None)


def test_markdown_of_a_small_results_dict():
    from benchmarks import run_all

    results = {
        "quick": False,
        "repeats": 3,
        "started": "2025-01-01T00:00:00+00:00",
        "wall_s": 12.5,
        "machine": {"cpu_model": "Test CPU", "cpu_count": 2, "versions": {"numpy": "2.0"}, "threadpools": []},
        "benchmarks": {
            "peers": {
                "module": "bench_peers",
                "status": "ok",
                "seconds": 3.0,
                "torch_threads": 2,
                "result": {
                    "config": {"width": 1024, "mlp": {"max_iter": 50}, "solvers": ["a", "b"]},
                    "records": [
                        {"contestant": "deq", "acc_pct": 96.5, "ok": True},
                        {"contestant": "mlp", "acc_pct": 95.0, "epochs": 50},
                    ],
                    "ratios": [{"width": 1024, "ratio": 3.25}],
                    "extra_tables": ["ratios"],
                },
            },
            "readout": {
                "module": "bench_readout",
                "status": "not available",
                "seconds": 0.0,
                "error": "ImportError: no module",
                "result": None,
            },
            "other": {
                "module": "bench_other",
                "status": "ok",
                "seconds": 1.0,
                "result": {"speed": [{"n": 10, "s": 0.5}], "max_diff": 1e-12},
            },
        },
        "goals": [
            {"goal": "g1", "target": ">= 3x", "measured": "3.25x", "met": True, "benchmark": "peers"},
            {"goal": "g2", "target": "<= 1e-10", "note": "not measured (x)", "met": None},
        ],
    }
    md = run_all.markdown(results)
    assert md.startswith("# sk_deq benchmarks (full, 3 repeats)")
    assert "Test CPU" in md and "numpy 2.0" in md
    assert "| g1 | >= 3x | 3.25x | met | peers |" in md
    assert "| g2 | <= 1e-10 | not measured (x) | — |  |" in md
    assert "| contestant | acc_pct | ok | epochs |" in md
    assert "| deq | 96.5 | yes |  |" in md and "| mlp | 95 |  | 50 |" in md
    assert "ratios:" in md and "| 1024 | 3.25 |" in md
    assert "Settings: width=1024; mlp=(max_iter=50); solvers=[a, b]." in md
    assert "## readout" in md and "ImportError: no module" in md
    assert "speed:" in md and "| 10 | 0.5 |" in md and "| max_diff | 1e-12 |" in md


def test_kernel_goals_and_torch_engine_agreement_from_records():
    from benchmarks import run_all

    recs = [
        {"n": 4000, "n_jobs": 1, "activation": a, "ratio": r}
        for a, r in [("relu", 1.2), ("tanh", 2.0), ("gelu", 3.5), ("relu", 1.4), ("relu", 1.3)]
    ]
    recs.append({"n": 1000, "n_jobs": 1, "activation": "gelu", "ratio": 9.0})  # a smaller n is ignored
    recs.append({"n": 4000, "n_jobs": 1, "activation": "erf", "ratio": [2.0, 2.5, 2.2]})  # bench_speed's lists
    goals = {g["id"]: g for g in run_all.kernel_goals(recs)}
    assert goals["kernel_relu"]["met"] and goals["kernel_relu"]["measured"] == "1.30x"
    assert not goals["kernel_smooth"]["met"]
    assert goals["kernel_smooth"]["measured"] == "3.50x (gelu); tanh 2.00x, erf 2.20x, gelu 3.50x"
    # with records on all cores (n_jobs -1), those are the goals' figure and the serial ones go beside
    recs += [{"n": 4000, "n_jobs": -1, "activation": a, "ratio": r} for a, r in [("relu", 1.6), ("tanh", 2.5)]]
    goals = {g["id"]: g for g in run_all.kernel_goals(recs)}
    assert not goals["kernel_relu"]["met"] and goals["kernel_relu"]["measured"] == "1.60x (serial 1.30x)"
    assert (
        goals["kernel_smooth"]["met"]
        and goals["kernel_smooth"]["measured"] == "2.50x (tanh); tanh 2.50x (serial 2.00x)"
    )
    assert "all cores" in goals["kernel_relu"]["goal"]
    derived = run_all._derived_goals("torch_engine", {"records": [{"max_abs_diff": 3e-12}, {"rel_err": 2e-11}]})
    assert derived[0]["met"] and derived[0]["measured"].startswith("2.00e-11")
    assert run_all._derived_goals("peers", {"records": [{"max_abs_diff": 1.0}]}) == []


def test_registry_modules_that_exist_have_collect():
    """The registry lists the benchmark modules of the groups, each by its collect.

    Not the trace reader (it has no collect), nor the kernel ridge at full size (not registered).
    """
    import inspect

    from benchmarks import gpu, kernels, networks, peers, run_all, scale

    members = [f"{g.__name__}.{m}" for g in (kernels, networks, gpu, scale, peers) for m in g.MEMBERS]
    unregistered = {"benchmarks.gpu.trace", "benchmarks.kernels.ridge"}
    assert sorted(spec.module for spec in run_all.REGISTRY.values()) == sorted(set(members) - unregistered)
    for name, spec in run_all.REGISTRY.items():
        src = (BENCH.parent / f"{spec.module.replace('.', '/')}.py").read_text()
        assert f"def {spec.entry}(" in src, name
        params = inspect.signature(getattr(importlib.import_module(spec.module), spec.entry)).parameters
        assert {"quick", "repeats"} <= set(params), name
    assert importlib.util.find_spec("benchmarks.run_all") is not None
