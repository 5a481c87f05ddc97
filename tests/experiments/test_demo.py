"""The demo (sk_deq.experiments.demo): medians of repeated timings, the latency of one sample, the match."""

import json

import pytest


def test_demo_reports_medians_of_repeats_and_latency_apart_from_fit():
    from sk_deq.experiments import demo

    res = demo("digits", "relu", 0.2, 64, repeats=3, latency_samples=5)
    assert [r["model"] for r in res.rows] == ["DEQ", "matched explicit", "plain explicit"]
    assert res.n_train + res.n_test == 1797 and res.torch_threads == 1 and res.repeats == 3
    deq = res.rows[0]
    for r in res.rows:
        assert len(r["fit_seconds_all"]) == len(r["predict_seconds_all"]) == len(r["latency_seconds_all"]) == 3
        assert r["fit_seconds"] == sorted(r["fit_seconds_all"])[1]  # the median
        assert r["fit_speedup"] == pytest.approx(deq["fit_seconds"] / r["fit_seconds"])
        assert r["latency_speedup"] == pytest.approx(deq["latency_seconds"] / r["latency_seconds"])
        assert 0.8 < r["accuracy"] <= 1.0
        # no timed comparison (the machine is shared): at width 64 one sample and the whole test set both
        # go through one block of 1024 rows, so their times differ by noise only
        assert r["latency_seconds"] > 0 and r["latency_seconds"] == sorted(r["latency_seconds_all"])[1]
    assert res.match["family"] == "leaky_relu" and res.match_seconds >= 0
    table = res.table()
    assert "median of 3 timed runs after a warm-up" in table and "1 sample" in table and "solved once" in table
    assert json.loads(res.to_json())["rows"][1]["model"] == "matched explicit"
