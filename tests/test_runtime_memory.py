"""The memory guard of ``sk_deq._runtime``: every limit on the process (machine, cgroups, rlimits) and the errors it gives."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sk_deq.estimators._network as network
from sk_deq import _runtime as memory
from sk_deq._runtime import available_memory_bytes, check_fits_in_memory, check_kernel_fits_in_memory

GiB = 2**30


@pytest.fixture
def fake_proc(tmp_path, monkeypatch):
    """Point the guard at files under ``tmp_path``, with no rlimit; returns a writer of files there."""
    monkeypatch.setattr(memory, "_PROC_MEMINFO", str(tmp_path / "meminfo"))
    monkeypatch.setattr(memory, "_PROC_CGROUP", str(tmp_path / "cgroup"))
    monkeypatch.setattr(memory, "_PROC_STATUS", str(tmp_path / "status"))
    monkeypatch.setattr(memory, "_CGROUP_ROOT", str(tmp_path / "sys"))
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    def write(path, text):
        full = tmp_path / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)

    write("meminfo", "MemTotal:  67108864 kB\nMemAvailable:  33554432 kB\n")  # 32 GiB available
    return write


def test_machine_memory_alone(fake_proc):
    assert available_memory_bytes() == 32 * GiB


def test_cgroup_v2_limit_less_non_reclaimable_usage(fake_proc):
    fake_proc("cgroup", "0::/job/step\n")
    fake_proc("sys/job/step/memory.max", f"{4 * GiB}\n")
    fake_proc("sys/job/step/memory.current", f"{3 * GiB}\n")
    fake_proc("sys/job/step/memory.stat", f"anon 1\ninactive_file {GiB}\nactive_file 5\n")
    fake_proc("sys/job/memory.max", "max\n")
    assert available_memory_bytes() == 2 * GiB  # 4 - (3 - 1): dropping page cache is free
    fake_proc("sys/job/memory.max", f"{GiB}\n")  # a parent's smaller limit counts
    fake_proc("sys/job/memory.current", "0\n")
    assert available_memory_bytes() == GiB


def test_cgroup_v1_and_its_no_limit_value(fake_proc):
    fake_proc("cgroup", "5:cpu:/x\n4:memory:/pod/c1\n0::/\n")
    fake_proc("sys/memory/pod/c1/memory.limit_in_bytes", "9223372036854771712\n")  # v1's "no limit"
    assert available_memory_bytes() == 32 * GiB
    fake_proc("sys/memory/pod/c1/memory.limit_in_bytes", f"{3 * GiB}\n")
    fake_proc("sys/memory/pod/c1/memory.usage_in_bytes", f"{2 * GiB}\n")
    fake_proc("sys/memory/pod/c1/memory.stat", "cache 7\ntotal_inactive_file 0\n")
    assert available_memory_bytes() == GiB


def test_cgroup_path_not_visible_in_a_namespace_falls_back_to_the_root(fake_proc):
    fake_proc("cgroup", "0::/host/path/of/this/container\n")
    fake_proc("sys/memory.max", f"{5 * GiB}\n")
    fake_proc("sys/memory.current", f"{GiB}\n")
    assert available_memory_bytes() == 4 * GiB


def test_rlimit_as_less_the_virtual_size(fake_proc, monkeypatch):
    import resource

    limits = {resource.RLIMIT_AS: (6 * GiB, resource.RLIM_INFINITY)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits.get(which, (resource.RLIM_INFINITY,) * 2))
    fake_proc("status", "Name: python\nVmSize:\t 2097152 kB\nVmData:\t 1048576 kB\n")  # 2 GiB mapped
    assert available_memory_bytes() == 4 * GiB
    limits[resource.RLIMIT_DATA] = (2 * GiB, resource.RLIM_INFINITY)  # less the 1 GiB data segment
    assert available_memory_bytes() == GiB


def test_nothing_readable_is_not_an_error(fake_proc, monkeypatch):
    monkeypatch.setattr(memory, "_PROC_MEMINFO", "/nonexistent/meminfo")
    monkeypatch.setattr(memory.os, "sysconf", lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert available_memory_bytes() is None
    assert check_fits_in_memory(10**30, "Anything needs", "Nothing.") == 10**30  # cannot tell: no error


def test_messages_name_the_dtype_and_the_bytes():
    with pytest.raises(MemoryError, match=r"\(1000, 1000\) in float32 needs: .* \(4000000 bytes\), more than"):
        check_kernel_fits_in_memory(1000, 1000, itemsize=4, available=10**6)
    with pytest.raises(MemoryError, match=r"in float64 needs: .*\(8000000 bytes\)"):
        check_kernel_fits_in_memory(1000, 1000, available=10**6)


def test_the_estimators_use_the_guard_at_predict_too(monkeypatch):
    from sk_deq import DEQRegressor

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(64, 3)), rng.normal(size=64)
    reg = DEQRegressor(n_hidden=32, random_state=0).fit(X, y)
    monkeypatch.setattr(network, "available_memory_bytes", lambda: 100 * 32 * 4 - 1)
    reg.predict(X)  # 64 rows fit
    with pytest.raises(MemoryError, match=r"computes the features of the 100 samples on cpu: 100 x 32 float32"):
        reg.features(np.tile(X, (2, 1))[:100])
    # predict holds the outputs and one chunk's features (the whole batch here: it is a single chunk)
    with pytest.raises(MemoryError, match=r"outputs of the 100 samples on cpu: 100 x 1 float64 outputs and a chunk"):
        reg.predict(np.tile(X, (2, 1))[:100])
    with pytest.raises(MemoryError, match=r"DEQRegressor\(n_hidden=32\) on 3 features: its hidden weights"):
        DEQRegressor(n_hidden=32).fit(X, y)  # the network itself: 32 x 32 and 32 x 3 weights


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", ["DEQ", "Explicit", "MatchedExplicit"])
@pytest.mark.parametrize("task", ["Classifier", "Regressor"])
def test_predict_needs_the_memory_of_its_outputs_and_one_chunk_not_of_all_features(name, task, monkeypatch):
    import sk_deq
    from sk_deq.estimators._base import TorchEstimatorBase

    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 3))
    y = (X[:, 0] > 0).astype(int) if task == "Classifier" else X[:, 0]
    short = {"max_iter": 20} if task == "Classifier" else {}  # a regressor's readout is fitted in closed form
    est = getattr(sk_deq, name + task)(n_hidden=32, random_state=0, **short).fit(X, y)
    reference, reference_features = (
        est.decision_function(X) if task == "Classifier" else est.predict(X),
        est.features(X),
    )
    block = est._block_rows()  # 1024 rows at width 32: chunks are whole blocks, as _chunk_rows makes them
    monkeypatch.setattr(TorchEstimatorBase, "_chunk_rows", lambda self, device=None, fit=False: block)
    monkeypatch.setattr(network, "available_memory_bytes", lambda: 3000 * 8 + block * 32 * 4 + 100)
    # all the features (384,000 bytes) do not fit, the outputs and one chunk's features do
    got = est.decision_function(X) if task == "Classifier" else est.predict(X)
    np.testing.assert_array_equal(got, reference)  # chunks of whole blocks: the same blocks, bitwise
    with pytest.raises(MemoryError, match="computes the features of the 3000 samples"):
        est.features(X)
    monkeypatch.undo()
    np.testing.assert_array_equal(est.features(X), reference_features)


_PREDICT_PEAK = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from _memory import PeakMemory
from sk_deq import MatchedExplicitClassifier

rng = np.random.default_rng(0)
X = rng.normal(size=(50_000, 16)).astype(np.float32)
y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)
est = MatchedExplicitClassifier("relu", 0.2, n_hidden=512, random_state=0).fit(X[:500], y[:500])
est.decision_function(X[:10_000])  # one-off allocations (more than a chunk) before the measurement
with PeakMemory() as mem:
    out = est.decision_function(X)
print(json.dumps({"added": mem.above, "reset": mem.reset, "features": X.shape[0] * 512 * 4, "out": out.nbytes}))
"""


@pytest.mark.heavy  # a subprocess: seconds
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and /proc/self/clear_refs are Linux's")
def test_decision_function_holds_the_outputs_not_the_features_of_all_rows():
    import json

    import sk_deq

    root = os.path.dirname(os.path.dirname(os.path.abspath(sk_deq.__file__)))
    env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS="1")
    bench = os.path.join(root, "benchmarks")
    run = subprocess.run(
        [sys.executable, "-c", _PREDICT_PEAK, bench], capture_output=True, text=True, env=env, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    peak = json.loads(run.stdout.strip().splitlines()[-1])
    if not peak["reset"]:
        pytest.skip("the peak resident set cannot be reset here")
    # the float32 features of all rows are 102 MB (the code before kept them and a float64 copy of the inputs)
    assert peak["added"] < 0.25 * peak["features"], peak


@pytest.mark.heavy
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_under_ulimit_v_a_network_too_large_is_a_memory_error_not_torchs_runtime_error():
    code = textwrap.dedent(
        """
        import resource
        import numpy as np
        import torch
        from sk_deq import DEQRegressor
        from sk_deq._runtime import available_memory_bytes

        vm = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, resource.RLIM_INFINITY))
        assert available_memory_bytes() <= 2**30, available_memory_bytes()
        X, y = np.random.default_rng(0).normal(size=(20, 3)), np.arange(20.0)
        try:
            DEQRegressor(n_hidden=20000).fit(X, y)  # 1.6e9 float32 weights drawn in float64: 4.8 GB
        except MemoryError as exc:
            print("MemoryError:", exc)
        """
    )
    import sk_deq

    root = os.path.dirname(os.path.dirname(os.path.abspath(sk_deq.__file__)))
    env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "MemoryError: DEQRegressor(n_hidden=20000) on 3 features" in run.stdout
