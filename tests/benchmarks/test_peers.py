"""The benchmarks against other methods (``benchmarks/peers``) in tiny configurations."""

import pytest


def test_the_classifiers_collect_in_a_tiny_configuration():
    pytest.importorskip("mlxtend")
    from benchmarks.peers import classifiers

    peers = classifiers.collect(
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


def test_regression_markdown_reads_the_comparison_dicts():
    from benchmarks.peers.regressors import markdown

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
