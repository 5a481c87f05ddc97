"""``sk-deq compare``: the accuracy-versus-width experiment and its cross-validated form from the command line."""

import json

import pytest

from sk_deq.cli import main

pytest.importorskip("matplotlib")


def test_cli_compare_quick_writes_png_and_json(tmp_path, capsys):
    out = tmp_path / "fig"
    assert main(["compare", "--quick", "--datasets", "digits", "--activations", "relu,tanh", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "scikit-learn digits" in captured.out and "DEQ/matched" in captured.out
    assert "done" in captured.err  # progress display on stderr
    png = (out / "compare_widths.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    data = json.loads((out / "compare_widths.json").read_text())
    assert data["config"]["widths"] == [32, 128, 512] and data["config"]["repeats"] == 1
    assert data["config"]["n_samples"] == 1000
    assert len(data["summary"]) == 2 * 3
    for row in data["summary"]:
        for stats in row["models"].values():
            assert 0.0 <= stats["accuracy_mean"] <= 1.0
        assert row["time_ratio_median"] > 0


def test_cli_compare_json_output(capsys):
    argv = ["compare", "--datasets", "digits", "--activations", "tanh", "--widths", "8", "--repeats", "1"]
    assert main([*argv, "--n-samples", "200", "--json", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    data = json.loads(captured.out)
    assert data["summary"][0]["width"] == 8 and data["config"]["n_samples"] == 200


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--widths", "32,0"], "argument --widths: expected comma-separated positive integers"),
        (["--widths=-8"], "argument --widths: expected comma-separated positive integers"),
        (["--widths", "32,abc"], "argument --widths: expected comma-separated positive integers"),
        (["--repeats", "0"], "positive integer"),
        (["--datasets", ""], "comma-separated list"),
        (["--datasets", "cifar"], "unknown dataset 'cifar'"),
        (["--activations", "relu,cosh2"], "unknown activation 'cosh2'"),
        (["--test-size", "2"], "argument --test-size"),
        (["--threads", "-1"], "argument --threads"),
        (["--exact-kernel", "rbf"], "argument --exact-kernel: invalid choice: 'rbf'"),
        (["--cv", "3", "--exact-kernel"], "--exact-kernel does not apply with --cv"),
    ],
)
def test_cli_compare_bad_arguments_are_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        main(["compare", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_out_must_be_a_directory(tmp_path, capsys):
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(SystemExit) as exit_:  # an argument error, before the run
        main(["compare", "--quick", "--datasets", "digits", "--out", str(f)])
    assert exit_.value.code == 2
    assert "--out must be a directory" in capsys.readouterr().err


def test_compare_cv_runs_compare_estimators_per_width(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    args = ["compare", "--cv", "3", "--datasets", "digits", "--activations", "tanh", "--widths", "32,64"]
    args += ["--n-samples", "300", "--no-progress"]
    assert main([*args, "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["dataset"], r["activation"], r["width"]) for r in records] == [
        ("digits", "tanh", 32),
        ("digits", "tanh", 64),
    ]
    for r in records:
        assert r["names"] == ["deq", "matched", "plain"]
        assert len(r["scores"][0]) == 3  # three folds
        assert sum(r["n_test"]) == 300  # the folds partition the subsample
    assert main([*args, "-v", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("corrected resampled t-test") == 2 and "deq - matched" in out
    assert (tmp_path / "compare_cv.json").exists()
    assert (tmp_path / "compare_cv_digits_tanh_64.png").stat().st_size > 0
    assert "DEQ vs matched: significant (p < 0.05) in " in out and out.index("DEQ vs matched") > out.rindex(
        "deq - matched"
    )


_TINY_COMPARE = ["compare", "--datasets", "digits", "--activations", "tanh", "--widths", "8", "--n-samples", "100"]
_TINY_COMPARE += ["--repeats", "1", "--no-progress"]


def test_the_table_is_printed_before_the_files_are_written(capsys, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from sk_deq.cli import _args

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_args, "write_outputs", disk_full)
    assert main([*_TINY_COMPARE, "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "Total run time" in captured.out and "p matched" in captured.out
    assert "sk-deq compare: error: [Errno 28] No space left on device" in captured.err


def test_cli_exact_kernel_adds_the_entry_of_infinite_width(capsys, tmp_path):
    argv = ["compare", "--datasets", "digits", "--activations", "relu", "--widths", "8", "--repeats", "1"]
    argv += ["--n-samples", "150", "--no-progress"]
    assert main([*argv, "--exact-kernel", "--json"]) == 0  # alone: the feature kernel
    captured = capsys.readouterr()
    assert captured.err == ""
    data = json.loads(captured.out)
    assert data["config"]["exact_kernel"] == "feature" and len(data["config"]["exact_kernel_alphas"]) > 1
    (row,) = data["exact_kernel_summary"]
    (rec,) = data["exact_kernel_records"]
    assert (row["dataset"], row["activation"], row["kernel"], row["n_fits"]) == ("digits", "relu", "feature", 1)
    assert row["accuracies"] == [rec["accuracy"]] and rec["alpha"] in data["config"]["exact_kernel_alphas"]
    # another kernel, the table, -v and the files
    assert main([*argv, "--exact-kernel", "ck", "-v", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "exact ck kernel ridge (alpha " in captured.out and "Implicit-CK" in captured.out
    assert "digits relu exact ck kernel (infinite width): " in captured.err
    written = json.loads((tmp_path / "compare_widths.json").read_text())
    assert written["exact_kernel_records"][0]["kernel"] == "ck"
    assert (tmp_path / "compare_widths.png").stat().st_size > 0
