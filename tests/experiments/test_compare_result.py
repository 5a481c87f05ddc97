"""The significance compare_widths reports (sk_deq.experiments): the corrected resampled t-test in its summary,
table, JSON and verbose lines, and in ``sk-deq compare``."""

import json

import pytest

from sk_deq.model_selection import corrected_resampled_ttest


def test_compare_widths_reports_the_corrected_test():
    from sklearn.datasets import load_digits

    from sk_deq.experiments import compare_widths

    X, y = load_digits(return_X_y=True)
    res = compare_widths([("d", X[:200], y[:200])], ["tanh"], [8], repeats=3, random_state=1)
    row = res.summary()[0]
    n_train, n_test = res.datasets["d"]["n_train"], res.datasets["d"]["n_test"]
    for model in ("matched", "plain"):
        expected = corrected_resampled_ttest(
            row["models"]["deq"]["accuracies"], row["models"][model]["accuracies"], n_train, n_test
        )
        assert row["tests"][model] == expected.to_dict()
    table = res.format_table()
    assert "p matched" in table and "Nadeau & Bengio" in table and "DEQ vs matched: significant" in table
    assert json.loads(res.to_json())["summary"][0]["tests"]["matched"]["df"] == 2
    one = compare_widths([("d", X[:200], y[:200])], ["tanh"], [8], repeats=1)
    assert one.summary()[0]["tests"] == {"matched": None, "plain": None}
    assert "DEQ vs matched: significant" not in one.format_table()


def test_cli_compare_prints_and_writes_the_significance(capsys, tmp_path):
    from sk_deq.cli import main

    argv = ["compare", "--datasets", "digits", "--activations", "tanh", "--widths", "8", "--repeats", "2"]
    assert main([*argv, "--n-samples", "200", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "p matched" in out and "p plain" in out and "DEQ vs matched: significant (p < 0.05) in" in out
    assert main([*argv, "--n-samples", "200", "--no-progress", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    test = data["summary"][0]["tests"]["matched"]
    assert test["df"] == 1 and 0.0 <= test["pvalue"] <= 1.0 and test["test_train_ratio"] == pytest.approx(0.25)


def test_compare_widths_verbose_line_has_the_p_value():
    import io

    from sklearn.datasets import load_digits

    from sk_deq.experiments import compare_widths

    X, y = load_digits(return_X_y=True)
    buf = io.StringIO()
    compare_widths([("d", X[:150], y[:150])], ["relu"], [8], repeats=2, verbose=1, stream=buf)
    assert "d relu width 8: DEQ" in buf.getvalue() and "DEQ vs matched p = " in buf.getvalue()
