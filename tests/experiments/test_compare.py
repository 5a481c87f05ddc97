"""Accuracy-versus-width experiment (:func:`sk_deq.experiments.compare_widths`) and its figure."""

import io
import json
import sys

import numpy as np
import pytest
from sklearn.datasets import load_digits

from sk_deq.experiments import MODELS, CompareResult, compare_widths

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def tiny():
    X, y = load_digits(return_X_y=True)
    rng = np.random.RandomState(0)
    idx = rng.choice(len(y), 240, replace=False)
    return compare_widths(
        [("tiny digits", X[idx], y[idx])],
        ["relu", "tanh"],
        [16, 8],
        repeats=2,
        random_state=3,
    )


def test_compare_widths_structure(tiny):
    assert isinstance(tiny, CompareResult)
    assert tiny.config["widths"] == [8, 16]  # sorted
    assert tiny.config["datasets"] == ["tiny digits"] and tiny.config["activations"] == ["relu", "tanh"]
    assert tiny.datasets["tiny digits"]["n_train"] + tiny.datasets["tiny digits"]["n_test"] == 240
    assert tiny.datasets["tiny digits"]["n_test"] == 48
    # one record per dataset x activation x width x repeat x model
    assert len(tiny.records) == 1 * 2 * 2 * 2 * 3
    keys = {(r["activation"], r["width"], r["repeat"], r["model"]) for r in tiny.records}
    assert len(keys) == len(tiny.records)
    for r in tiny.records:
        assert 0.0 <= r["accuracy"] <= 1.0
        assert r["seconds"] == pytest.approx(r["fit_seconds"] + r["predict_seconds"])
        assert r["seconds"] > 0
        if r["model"] == "deq":
            assert r["solver_mean_iter"] > 0 and r["solver_converged"] is True
        else:
            assert r["solver_mean_iter"] is None
    # the matched networks are the paper's families, fitted exactly
    assert tiny.matches["tiny digits"]["relu"]["family"] == "leaky_relu"
    assert tiny.matches["tiny digits"]["tanh"]["family"] == "hard_tanh"
    assert tiny.matches["tiny digits"]["relu"]["max_residual"] < 1e-6
    assert set(tiny.match_seconds) == {"relu", "tanh"}


def test_summary_aggregates_the_records(tiny):
    rows = tiny.summary()
    assert [(r["activation"], r["width"]) for r in rows] == [("relu", 8), ("relu", 16), ("tanh", 8), ("tanh", 16)]
    for row in rows:
        assert set(row["models"]) == set(MODELS)
        recs = [r for r in tiny.records if r["activation"] == row["activation"] and r["width"] == row["width"]]
        for model, stats in row["models"].items():
            accs = [r["accuracy"] for r in sorted(recs, key=lambda r: r["repeat"]) if r["model"] == model]
            assert stats["accuracies"] == accs
            assert stats["accuracy_mean"] == pytest.approx(np.mean(accs))
            assert stats["accuracy_std"] == pytest.approx(np.std(accs, ddof=1))
            assert 0.0 <= stats["accuracy_mean"] <= 1.0
        assert len(row["time_ratios"]) == 2 and all(t > 0 for t in row["time_ratios"])
        deq = {r["repeat"]: r["seconds"] for r in recs if r["model"] == "deq"}
        matched = {r["repeat"]: r["seconds"] for r in recs if r["model"] == "matched"}
        assert row["time_ratios"] == pytest.approx([deq[i] / matched[i] for i in (0, 1)])
        assert row["time_ratio_median"] == pytest.approx(np.median(row["time_ratios"]))


def test_result_serialises_and_prints(tiny, tmp_path):
    path = tmp_path / "r.json"
    text = tiny.to_json(path)
    data = json.loads(path.read_text())
    assert data == json.loads(text)
    assert {"config", "environment", "datasets", "matches", "match_seconds", "summary", "records"} <= set(data)
    table = str(tiny)
    assert "tiny digits: 192 train / 48 test; relu-DEQ vs matched leaky_relu" in table
    assert "tanh-DEQ vs matched hard_tanh" in table and "vs plain tanh" in table
    assert "DEQ/matched" in table and "±" in table  # mean ± std with 2 repeats


def test_learns_something_on_real_digits():
    res = compare_widths(["digits"], ["relu"], [64], repeats=1, n_samples=600)
    assert res.datasets["digits"]["n_train"] == 480
    for model in MODELS:
        # ten classes: chance is 0.1; a readout on 64 random features does far better
        assert res.summary()[0]["models"][model]["accuracy_mean"] > 0.7


def test_progress_and_verbose_go_to_the_stream():
    X, y = load_digits(return_X_y=True)
    buf = io.StringIO()
    compare_widths([("d", X[:150], y[:150])], ["relu"], [8], repeats=1, progress=True, verbose=1, stream=buf)
    out = buf.getvalue()
    assert "3/3 done" in out and "d relu width 8: DEQ" in out


def test_plain_depth_and_threads_are_restored():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(2)  # not the tests' own count (conftest: 1), which the run sets; the fixture restores it
    X, y = load_digits(return_X_y=True)
    res = compare_widths([("d", X[:150], y[:150])], ["relu"], [8], repeats=1, plain_depth=2, n_threads=1)
    assert torch.get_num_threads() == 2
    assert res.environment["torch_threads"] == 1
    assert "vs plain relu-relu" in res.format_table()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"datasets": ["cifar"]}, "unknown dataset 'cifar'"),
        ({"datasets": []}, "at least one data set"),
        ({"activations": ["cosh2"]}, "Unknown activation"),
        ({"activations": ["relu", "relu"]}, "distinct"),
        ({"widths": [32, 0]}, "widths must be positive integers"),
        ({"widths": [16.5]}, "widths must be positive integers"),
        ({"widths": []}, "at least one width"),
        ({"repeats": 0}, "repeats must be a positive integer"),
        ({"test_size": 1.5}, "test_size"),
        ({"n_samples": 5}, "n_samples"),
        ({"plain_depth": 0}, "plain_depth"),
        ({"n_threads": 0}, "n_threads"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, message):
    args = {"datasets": ["digits"], "activations": ["relu"], "widths": [8], **kwargs}
    with pytest.raises(ValueError, match=message):
        compare_widths(args.pop("datasets"), args.pop("activations"), args.pop("widths"), **args)


# ---------------------------------------------------------------------------
# figure


def test_plot_from_result_and_from_json(tiny):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sk_deq.plotting import plot_compare_widths

    fig = plot_compare_widths(tiny, title="tiny")
    assert len(fig.axes) == 4  # 2 panels (relu, tanh) x (accuracy, time)
    acc_ax = fig.axes[0]
    deq_line = acc_ax.lines[0]
    assert list(deq_line.get_xdata()) == [8, 16]
    expected = [100 * r["models"]["deq"]["accuracy_mean"] for r in tiny.summary() if r["activation"] == "relu"]
    assert np.allclose(deq_line.get_ydata(), expected)
    plt.close(fig)
    fig = plot_compare_widths(json.loads(tiny.to_json()), show_time=False)
    assert len(fig.axes) == 2
    plt.close(fig)
    with pytest.raises(TypeError, match="CompareResult"):
        plot_compare_widths([1, 2, 3])


def test_missing_matplotlib_names_the_plot_extra(monkeypatch):
    from sk_deq.plotting import require_matplotlib

    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"sk_deq\[plot\]"):
        require_matplotlib()
