"""The harness of the benchmarks (``benchmarks/_harness.py``): timing, command lines, JSON and provenance."""

import contextlib
import functools
import importlib
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import gpu, kernels, networks, peers, scale

GROUPS = (kernels, networks, gpu, scale, peers)
#: Every benchmark module of the groups, and the runner.
SCRIPTS = [f"{group.__name__}.{member}" for group in GROUPS for member in group.MEMBERS] + ["benchmarks.run_all"]


def _fake_runs(durations, calls, now):
    """Runs that take the given (fake) seconds in turn, recording their calls; each returns its name."""

    def run(name):
        calls.append(name)
        now[0] += next(durations[name])
        return name

    return {name: functools.partial(run, name) for name in durations}


def test_interleaved_gives_medians_of_interleaved_repeats_after_a_warm_up():
    from benchmarks._harness import interleaved

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
    from benchmarks._harness import fmt_range, rounds, timed

    seen = []
    out = rounds(["x", "y"], 3, lambda name, r: f"{name}{r}", after=lambda r, res: seen.append((r, res)))
    assert out == {"x": ["x0", "x1", "x2"], "y": ["y0", "y1", "y2"]}
    assert seen == [(r, {"x": f"x{r}", "y": f"y{r}"}) for r in range(3)]
    ticks = iter([2.0, 5.5])
    assert timed(lambda a, b=0: a + b, 1, b=2, clock=lambda: next(ticks)) == (3, 3.5)
    assert fmt_range([3.0, 1.0, 2.0]) == "2.00 [1.00-3.00]" and fmt_range([1.5], ".1f") == "1.5"


def test_write_json_puts_the_provenance_first_and_round_trips(tmp_path):
    from benchmarks._harness import SCHEMA, jsonable, read_json, write_json

    result = {"config": {"n": np.int64(3), "sizes": (1, 2)}, "records": [{"x": np.float64(1.5), "arr": np.arange(3)}]}
    result["records"][0].update(nan=float("nan"), inf=float("-inf"))
    path = write_json(tmp_path / "new" / "result.json", result, benchmark="benchmarks.kernels.cores")
    back = read_json(path)
    assert next(iter(back)) == "provenance" and back["provenance"]["schema"] == SCHEMA
    assert back["provenance"]["benchmark"] == "kernels.cores"  # the writer, named by its module in benchmarks
    plain = {"config": {"n": 3, "sizes": [1, 2]}, "records": [{"x": 1.5, "arr": [0, 1, 2], "nan": None, "inf": None}]}
    assert {k: v for k, v in back.items() if k != "provenance"} == plain == jsonable(result)
    # a result that holds its provenance keeps it: written again, the file reads back the same
    assert (
        read_json(write_json(tmp_path / "again.json", back, benchmark="other")) == back == json.loads(path.read_text())
    )


def _git(repo, *args):
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_provenance_says_clean_or_dirty_in_a_temporary_repository(tmp_path):
    from benchmarks._harness import git_state, provenance

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

    from benchmarks._harness import provenance, provenance_line

    record = provenance(benchmark="networks.forward")
    keys = {"schema", "benchmark", "created_utc", "command", "git", "machine", "versions", "threads", "sk_deq_path"}
    assert keys <= set(record) and record["benchmark"] == "networks.forward"
    assert shlex.split(record["command"]) == sys.orig_argv  # the exact command line, interpreter and all
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


class _Parsed(Exception):
    pass


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_parses_quick_repeats_and_json(script, monkeypatch, tmp_path):
    """Each script's own command line, stopped right after parsing."""
    import argparse

    parse = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, args=None, namespace=None):
        raise _Parsed(parse(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_and_stop)
    main = importlib.import_module(script).main
    extra = ["--read", "trace.json.gz"] if script == "benchmarks.gpu.trace" else []
    with pytest.raises(_Parsed) as parsed:
        main(["--quick", "--repeats", "2", "--json", str(tmp_path / "out.json"), *extra])
    args = parsed.value.args[0]
    assert args.quick is True and args.repeats == 2 and args.json == str(tmp_path / "out.json")
    assert args.benchmark == script.removeprefix("benchmarks.")  # what its results file names as its writer
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse)
    with pytest.raises(SystemExit):  # parse errors exit before any work
        main(["--repeats", "0", *extra])


def test_a_script_writes_its_json_with_the_provenance(tmp_path, capsys):
    from benchmarks.networks import weight_draws

    path = tmp_path / "draws.json"
    weight_draws.main(["--quick", "--json", str(path)])
    saved = json.loads(path.read_text())
    assert list(saved)[:2] == ["provenance", "cpu_count"] and saved["records"][0]["shape"] == [512, 784]
    assert saved["provenance"]["git"]["commit"] and "512x784" in capsys.readouterr().out
    assert saved["provenance"]["benchmark"] == "networks.weight_draws"


# -- the groups' entry points: python -m benchmarks.GROUP MEMBER [options] ----------------------------------


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.__name__)
def test_a_groups_help_lists_its_members_with_their_first_lines(group, capsys):
    with pytest.raises(SystemExit) as done:
        group.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert f"python -m {group.__name__}" in out
    for member in group.MEMBERS:
        module = importlib.import_module(f"{group.__name__}.{member}")
        assert f"  {member:<15} {module.__doc__.splitlines()[0]}" in out
    with pytest.raises(SystemExit) as done:
        group.main(["nope"])
    assert done.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err


def test_a_group_runs_the_member_with_its_options(capsys):
    with pytest.raises(SystemExit) as done:  # the member's own help, under the group's command
        networks.main(["weight_draws", "--help"])
    assert done.value.code == 0 and "usage: python -m benchmarks.networks weight_draws" in capsys.readouterr().out
    import types

    from benchmarks._harness import run_member

    calls = []
    fake = types.ModuleType("benchmarks.networks.fake")
    fake.main = lambda argv: calls.append(argv) or 3
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "benchmarks.networks.fake", fake)
        assert run_member("benchmarks.networks", ["fake"], "doc", ["fake", "--quick", "--only", "x"]) == 3
    assert calls == [["--quick", "--only", "x"]]


def test_the_entry_points_run_from_the_repository_root():
    """``python -m benchmarks.GROUP --help`` and ``python benchmarks/run_all.py --help`` in fresh processes."""
    root = Path(__file__).resolve().parents[2]
    for cmd in (["-m", "benchmarks.scale", "--help"], ["benchmarks/run_all.py", "--help"]):
        run = subprocess.run([sys.executable, *cmd], cwd=root, capture_output=True, text=True, check=False)
        assert run.returncode == 0 and run.stdout.startswith("usage: python"), run.stdout + run.stderr
