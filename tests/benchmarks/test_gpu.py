"""The GPU benchmarks (``benchmarks/gpu``) without a GPU: their CPU paths, their arithmetic and the kept trace."""

from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_gpu_section_without_cuda_is_null_with_its_reason(monkeypatch):
    import torch

    from benchmarks.gpu import fit as gpu_fit
    from benchmarks.run_all import goals_table, markdown

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = gpu_fit.collect(quick=True)
    assert result["cuda"] is None and "no CUDA GPU" in result["reason"]
    rows = goals_table({"gpu": {"status": "ok", "result": result}})
    busy = next(r for r in rows if r["id"] == "gpu_busy_share")
    assert busy["measured"] is None and busy["benchmark"] == "gpu" and "no CUDA GPU" in busy["note"]
    assert "no CUDA GPU" in markdown({"benchmarks": {"gpu": {"status": "ok", "result": result}}, "goals": rows})


def test_the_gpu_phase_clock_times_each_phase_of_a_cpu_fit():
    from benchmarks.gpu import fit as gpu_fit

    X, y = gpu_fit.mixture(300, p=20, k=3)
    rec = gpu_fit.timed_fit("matched", 32, "cpu", X, y)
    assert rec["initialize_s"] > 0 and rec["features_s"] > 0 and rec["readout_s"] > 0
    assert rec["fit_s"] >= rec["initialize_s"] + rec["features_s"] + rec["readout_s"]
    assert rec["accuracy"] > 0.9 and "syncs_total" not in rec  # syncs are counted on CUDA only


def test_gpu_busy_time_counts_overlaps_once_and_not_the_phase_windows():
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from benchmarks.gpu import fit as gpu_fit

    def event(name, start, end, device=DeviceType.CUDA):
        return SimpleNamespace(name=name, device_type=device, time_range=SimpleNamespace(start=start, end=end))

    assert gpu_fit.union_us([(0, 10), (5, 12), (20, 25)]) == 17
    events = [
        event("phase_readout", 0, 100),  # the annotation's window: not work
        event("gemm", 10, 40),
        event("Memcpy HtoD", 30, 50),  # overlaps the gemm by 10
        event("softmax", 200, 210),  # outside the window
        event("host op", 0, 1000, DeviceType.CPU),
    ]
    out = gpu_fit.device_busy(events, wall=1e-3)
    assert out["kernels_s"] == pytest.approx(40e-6) and out["copies_s"] == pytest.approx(20e-6)
    assert out["busy_s"] == pytest.approx(50e-6) and out["busy_share"] == pytest.approx(0.05)
    assert out["busy_readout_s"] == pytest.approx(40e-6)


def _trace_event(name, cat, ts, dur):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur}


def test_gpu_trace_finds_the_idle_gaps_of_a_synthetic_trace(tmp_path):
    import gzip
    import json

    from benchmarks.gpu.trace import read, table

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
    from benchmarks.gpu.trace import read

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

    from benchmarks.gpu.trace import read, record

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    path = tmp_path / "trace.json.gz"
    busy = record(path, n=600, width=32, device="cpu")
    assert busy["busy_s"] == 0.0 and busy["profiled_fit_s"] > 0
    got = read(path)
    assert {"initialize", "cache_features", "fit_network"} <= set(got["phases_ms"])
    assert got["busy_ms"] == 0.0 and got["idle_gaps"] and got["idle_gaps"][0]["host_torch_ms"] > 0


def test_the_gpu_load_benchmark_without_cuda_is_null_and_its_draw_part_runs_on_the_cpu(monkeypatch):
    import torch

    from benchmarks.gpu import load as gpu_load

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_load.bench(quick=True)["cuda"] is None
    records = gpu_load.draw(False, 2, "cpu", progress=lambda line: None, configs=[("matched", 16), ("deq", 16)], n=300)
    assert [(r["model"], r["n_hidden"], r["device"]) for r in records] == [("matched", 16, "cpu"), ("deq", 16, "cpu")]
    for r in records:
        assert len(r["fit_s"]["ahead"]) == len(r["fit_s"]["at_build"]) == 2 and r["median_ahead_s"] > 0
    from sk_deq.estimators._network import NetworkMixin

    assert NetworkMixin._weight_source.__name__ == "_weight_source"  # the default put back


def test_the_exact_kernel_ridge_of_the_gpu_benchmark_solves_and_cross_validates():
    import torch

    from benchmarks.gpu import krr as gpu_krr

    rng = np.random.default_rng(0)
    F = rng.standard_normal((90, 30))
    K = torch.from_numpy(F @ F.T)
    y = np.arange(90) % 10
    Y = gpu_krr._one_hot(y, torch, "cpu")
    assert torch.equal(Y.argmax(1), torch.as_tensor(y)) and float(Y.sum()) == 90 * (1 - 9)
    before = K.clone()
    coef = gpu_krr._solve(K, Y, 0.5, torch)
    assert torch.equal(K, before)  # the kernel is left as it was
    ref = np.linalg.solve(F @ F.T + 0.5 * np.eye(90), Y.numpy())
    np.testing.assert_allclose(coef.numpy(), ref, rtol=1e-9, atol=1e-12)
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        gpu_krr._solve(-K, Y, 0.5, torch)
    alpha, scores = gpu_krr._cv_alpha(K, y, 60, torch, "cpu")
    assert alpha in gpu_krr.ALPHAS and len(scores) == len(gpu_krr.ALPHAS)
    assert alpha == gpu_krr.ALPHAS[int(np.argmax(scores))]
