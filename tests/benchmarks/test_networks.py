"""The benchmarks of the networks (``benchmarks/networks``) in tiny configurations, and their goals."""

import numpy as np
import pytest


def test_the_readout_bound_solves_for_the_ratio():
    """The readout speed-up it reports gives exactly the target ratio; none can where the rest alone misses it."""
    from benchmarks.networks.readout import needed_speedup

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
    from benchmarks.networks.readout import readout_parts

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
    from benchmarks.networks import readout

    (b,) = readout.bench_bound(quick=True, repeats=1)
    assert b["width"] == 256 and b["n_train"] == 1000
    assert b["ratio"] == pytest.approx(b["deq_s"] / b["matched_s"])
    rest = (b["deq_s"] - b["deq_readout_s"]) / (b["matched_s"] - b["matched_readout_s"])
    assert b["ratio_without_readouts"] == pytest.approx(rest)
    assert 0 < b["deq_readout_s"] < b["deq_s"] and 0 < b["matched_readout_s"] < b["matched_s"]
    assert b["reachable_by_the_readouts"] == (b["readout_speedup_needed"] <= b["matched_readout_most_speedup"])
    assert 0.5 < b["matched_accuracy"] <= 1.0 and 0.5 < b["deq_accuracy"] <= 1.0


def test_the_busy_core_bench_stops_its_spinner():
    """The spinning child runs inside the block only, and is stopped when the block raises too."""
    from benchmarks.networks import busy_core

    with busy_core.busy_core(False) as none:
        assert none is None
    with pytest.raises(RuntimeError), busy_core.busy_core(True) as spinner:
        assert spinner.poll() is None  # running
        raise RuntimeError("stop")
    assert spinner.poll() is not None


def test_the_busy_core_bench_runs_in_a_tiny_configuration():
    pytest.importorskip("mlxtend")
    from benchmarks.networks import busy_core

    out = busy_core.collect(quick=True, repeats=1, width=32)
    rows = {(r["condition"], r["model"]): r for r in out["records"]}
    assert set(rows) == {(c, m) for c in ("quiet", "busy") for m in ("matched", "deq")}
    for r in rows.values():
        assert r["all threads s"] > 0 and r["1 thread s"] > 0
        assert r["speed-up of all threads"] == pytest.approx(r["1 thread s"] / r["all threads s"])


def test_the_blocks_benchmark_runs_in_a_tiny_configuration():
    pytest.importorskip("mlxtend")
    from benchmarks.networks import blocks

    res = blocks.collect(quick=True, repeats=1, widths=(32,))
    assert {r["block"] for r in res["records"]} >= {"batch", "16"} and all(r["many_s"] > 0 for r in res["records"])
    fit = blocks.collect_fit(repeats=1, widths=(64,))
    assert [r["entries"] for r in fit["records"]] == list(blocks.FIT_ENTRIES)
    assert all(r["features_gemm_ratio"] > 0 and r["mean_iter"] >= 1 for r in fit["records"])


def test_forward_collects_in_a_tiny_configuration():
    pytest.importorskip("mlxtend")
    from benchmarks.networks import forward

    fwd = forward.collect(quick=True, repeats=1, n=64, width=32)
    rec = fwd["records"][0]
    assert rec["n"] == 64 and rec["m"] == 32 and rec["iterations"] >= 1
    assert rec["forward_gflops"] > 0 and rec["gemm_gflops"] > 0 and rec["ratio"] > 0
    assert fwd["goals"][0]["id"] == "forward_gemm"


def test_the_fit_goal_comes_from_its_records():
    from benchmarks.networks import blocks

    rec = {"default": True, "width": 1024, "threads": 2, "features_gemm_ratio": 1.2}
    other = {**rec, "default": False, "features_gemm_ratio": 1.0}
    (g,) = blocks.fit_goals([other, rec, {**rec, "width": 4096, "features_gemm_ratio": 1.1}])
    assert g["id"] == "fit_features_gemm" and g["measured"] == "1.20x" and not g["met"] and "2 threads" in g["goal"]
    assert blocks.fit_goals([{**rec, "width": 4096}]) == []


def test_bench_readout_goals_follow_the_end_to_end_records():
    from benchmarks.networks.readout import _goals

    rows = [
        {"width": 1024, "activation": "tanh", "speedup_matched_over_deq": 3.2, "accuracy_gap_points": 0.4},
        {"width": 4096, "activation": "tanh", "speedup_matched_over_deq": 4.5, "accuracy_gap_points": -0.3},
    ]
    goals = {g["id"]: g for g in _goals(rows)}
    assert goals["readout_ratio_1024"]["met"] and goals["readout_ratio_1024"]["target"] == ">= 3x"
    assert not goals["readout_ratio_4096"]["met"] and goals["readout_ratio_4096"]["target"] == ">= 5x"
    assert goals["readout_accuracy_1024"]["measured"] == "-0.40 pt" and goals["readout_accuracy_4096"]["met"]


def test_weight_draws_benchmark_in_a_tiny_configuration():
    from benchmarks.networks import weight_draws

    result = weight_draws.collect(shapes=((70, 9),), repeats=1)
    assert {r["threads"] for r in result["records"]} >= {1}
    assert all(r["torch_s"] > 0 and r["streams_s"] > 0 and r["speedup"] > 0 for r in result["records"])
    assert "70x9" in weight_draws.table(result)
