"""The entry of infinite width of compare_widths: exact kernel ridge with the DEQ's kernel on the networks' splits."""

import io
import json

import numpy as np
import pytest
from sklearn.datasets import load_digits

from sk_deq import ImplicitCKRidgeClassifier
from sk_deq.experiments import EXACT_KERNEL_ALPHAS, compare_widths
from sk_deq.experiments._compare import _splits

pytest.importorskip("matplotlib")

SEED = 5


@pytest.fixture(scope="module")
def data():
    """Digits: 200 rows split at random, and 160 + 60 rows with a test set of their own."""
    X, y = load_digits(return_X_y=True)
    return {"random": (X[:200], y[:200]), "fixed": (X[200:360], y[200:360], X[360:420], y[360:420])}


@pytest.fixture(scope="module")
def run(data):
    buf = io.StringIO()
    res = compare_widths(
        [("random", *data["random"]), ("fixed", *data["fixed"])],
        ["relu"],
        [8],
        repeats=2,
        exact_kernel="feature",
        random_state=SEED,
        progress=True,
        verbose=1,
        stream=buf,
    )
    return res, buf.getvalue()


def _direct(split, seed, kernel="feature"):
    """The estimator itself, fitted on ``split`` as compare_widths fits it (on one kernel thread, as it runs)."""
    X_tr, X_te, y_tr, y_te = split
    est = ImplicitCKRidgeClassifier(
        activation="relu", kernel=kernel, alpha=list(EXACT_KERNEL_ALPHAS), n_jobs=1, random_state=seed
    )
    est.fit(X_tr, y_tr)
    return est, est.score(X_te, y_te)


def test_one_fit_per_split_recorded_with_its_choice_of_alpha(run):
    res, _ = run
    assert res.config["exact_kernel"] == "feature"
    assert res.config["exact_kernel_alphas"] == list(EXACT_KERNEL_ALPHAS)
    # a new split per repeat: one fit each; the data set's own test set: one fit for both repeats
    assert [(r["dataset"], r["repeats"]) for r in res.exact_kernel_records] == [
        ("random", [0]),
        ("random", [1]),
        ("fixed", [0, 1]),
    ]
    for r in res.exact_kernel_records:
        assert r["kernel"] == "feature" and r["activation"] == "relu"
        assert 0.0 <= r["accuracy"] <= 1.0
        assert r["seconds"] == pytest.approx(r["fit_seconds"] + r["predict_seconds"]) and r["seconds"] > 0
        assert len(r["alpha_scores"]) == len(EXACT_KERNEL_ALPHAS)
        best = max(r["alpha_scores"])  # the best held-out score, the largest ridge among equals
        assert r["alpha"] == max(a for a, s in zip(EXACT_KERNEL_ALPHAS, r["alpha_scores"]) if s == best)
        assert r["solver"] == "cholesky" and r["storage"] == "float64" and r["warnings"] == []
    assert [r["n_train"] for r in res.exact_kernel_records] == [160, 160, 160]
    # the networks' records and summary are those of a run without it: one row per width
    assert {r["model"] for r in res.records} == {"deq", "matched", "plain"}
    assert [(r["dataset"], r["width"]) for r in res.summary()] == [("random", 8), ("fixed", 8)]


def test_its_accuracy_is_that_of_the_estimator_on_the_same_split(run, data):
    res, _ = run
    X, y = data["random"]
    for r, split in enumerate(_splits(X, y, None, 0.2, SEED, 2)):
        est, score = _direct(split, SEED + r)
        rec = res.exact_kernel_records[r]
        assert rec["accuracy"] == score
        assert rec["alpha"] == est.alpha_ and rec["alpha_scores"] == est.alpha_scores_.tolist()
    X, y, X_test, y_test = data["fixed"]
    _, score = _direct((X, X_test, y, y_test), SEED)
    assert res.exact_kernel_records[2]["accuracy"] == score


def test_summary_aggregates_the_fits_per_data_set_and_activation(run):
    res, _ = run
    rows = res.exact_kernel_summary()
    assert [(r["dataset"], r["activation"], r["kernel"], r["n_fits"]) for r in rows] == [
        ("random", "relu", "feature", 2),
        ("fixed", "relu", "feature", 1),
    ]
    for row in rows:
        recs = [r for r in res.exact_kernel_records if r["dataset"] == row["dataset"]]
        accs = [r["accuracy"] for r in recs]
        assert row["accuracies"] == accs and row["alphas"] == [r["alpha"] for r in recs]
        assert row["accuracy_mean"] == pytest.approx(np.mean(accs))
        assert row["accuracy_std"] == pytest.approx(np.std(accs, ddof=1) if len(accs) > 1 else 0.0)
        assert row["seconds_median"] == pytest.approx(np.median([r["seconds"] for r in recs]))


def test_the_table_ends_every_block_with_the_line_of_infinite_width(run):
    res, _ = run
    lines = str(res).splitlines()
    assert any(line.startswith("∞: exact kernel ridge with the DEQ's feature kernel") for line in lines)
    assert "among " + ", ".join(f"{a:g}" for a in EXACT_KERNEL_ALPHAS) + " on a held-out tenth" in str(res)
    infinite = [line for line in lines if line.startswith("     ∞ |")]
    assert len(infinite) == 2
    rows = {r["dataset"]: r for r in res.exact_kernel_summary()}
    rand, fixed = rows["random"], rows["fixed"]
    assert (
        f"{100 * rand['accuracy_mean']:.2f}±{100 * rand['accuracy_std']:.2f} exact feature kernel ridge" in infinite[0]
    )
    assert f" {100 * fixed['accuracy_mean']:.2f} exact feature kernel ridge" in infinite[1]
    assert "±" not in infinite[1]  # one fit
    assert f"{rand['seconds_median']:.3f} s fit+predict" in infinite[0]
    # below the block's width line
    assert lines.index(infinite[0]) == next(i for i, s in enumerate(lines) if s.startswith("     8 |")) + 1


def test_json_round_trip_and_the_figure(run):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sk_deq.plotting import plot_compare_widths

    res, _ = run
    data = json.loads(res.to_json())
    assert data["exact_kernel_records"] == res.exact_kernel_records
    assert data["exact_kernel_summary"] == res.exact_kernel_summary()
    assert data["config"]["exact_kernel"] == "feature"
    for source in (res, data):
        fig = plot_compare_widths(source)
        for j, row in enumerate(res.exact_kernel_summary()):
            acc_ax, time_ax = fig.axes[j], fig.axes[2 + j]
            (line,) = [ln for ln in acc_ax.lines if ln.get_label() == "exact feature kernel (∞ width)"]
            np.testing.assert_allclose(line.get_ydata(), [100 * row["accuracy_mean"]] * 2)
            (t_line,) = [ln for ln in time_ax.lines if ln.get_label() == "exact feature kernel (∞ width)"]
            np.testing.assert_allclose(t_line.get_ydata(), [row["seconds_median"]] * 2)
        assert "exact feature kernel (∞ width)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        plt.close(fig)


def test_progress_and_verbose_show_the_kernel_fit(run, capsys):
    _, out = run
    assert "random relu repeat 1: exact feature kernel" in out and "fixed relu all repeats: exact feature kernel" in out
    assert "A fit on 160 samples needs" in out  # the estimator's memory plan
    assert "kernel tiles" in out  # its bars: the kernel, every candidate's solve
    assert all(f"alpha={a:.3g}: residual" in out for a in EXACT_KERNEL_ALPHAS)
    assert out.count("relu exact feature kernel (infinite width): ") == 3  # the verbose lines
    assert "15/15 done" in out  # 2 data sets x 2 repeats x 3 models, and 3 kernel fits
    assert capsys.readouterr().out == ""  # nothing reaches standard output (sk-deq compare --json prints there)


def test_without_it_the_result_has_no_such_entry():
    X, y = load_digits(return_X_y=True)
    res = compare_widths([("d", X[:120], y[:120])], ["tanh"], [8], repeats=1)
    assert res.config["exact_kernel"] is None and res.config["exact_kernel_alphas"] is None
    assert res.exact_kernel_summary() == [] and res.to_dict()["exact_kernel_records"] == []
    assert "∞" not in str(res)


def test_the_ntk_and_a_bad_kernel():
    X, y = load_digits(return_X_y=True)
    res = compare_widths([("d", X[:120], y[:120])], ["tanh"], [8], repeats=1, exact_kernel="ntk", random_state=2)
    (rec,) = res.exact_kernel_records
    split = _splits(X[:120], y[:120], None, 0.2, 2, 1)[0]
    X_tr, X_te, y_tr, y_te = split
    est = ImplicitCKRidgeClassifier(
        activation="tanh", kernel="ntk", alpha=list(EXACT_KERNEL_ALPHAS), n_jobs=1, random_state=2
    ).fit(X_tr, y_tr)
    assert rec["kernel"] == "ntk" and rec["accuracy"] == est.score(X_te, y_te)
    assert "exact ntk kernel ridge" in str(res)
    with pytest.raises(ValueError, match="exact_kernel must be None or one of 'feature', 'ck', 'ntk', got 'rbf'"):
        compare_widths(["digits"], ["relu"], [8], exact_kernel="rbf")


def test_the_feature_kernel_is_the_limit_of_the_readout_trained_deq():
    """A DEQ with a least-squares readout tends to exact kernel ridge with its feature kernel, not with its CK.

    The readout minimises the mean squared error plus ``alpha/2 ||W||^2``
    with an unpenalised bias: kernel ridge with the Gram matrix of the
    features, the ridge ``n * alpha`` and a constant kernel term of large
    prior variance.  The scores' relative difference to the feature kernel's
    shrinks like ``1/sqrt(m)`` (measured about 0.22 at width 128 and 0.055
    at 2048 on these rows, over seeds); the CK's, about 0.11 at 2048, does
    not vanish: it adds the input's linear kernel, which the readout does
    not see.
    """
    pytest.importorskip("torch")
    from sk_deq import DEQClassifier

    X, y = load_digits(return_X_y=True)
    X_tr, y_tr, X_te = X[:240], y[:240], X[240:400]
    alpha = 1e-4
    limits = {
        kernel: ImplicitCKRidgeClassifier(kernel=kernel, alpha=len(y_tr) * alpha, bias_variance=100.0, n_jobs=1)
        .fit(X_tr, y_tr)
        .decision_function(X_te)
        for kernel in ("feature", "ck")
    }
    diff = {}
    for width in (128, 2048):
        deq = DEQClassifier(n_hidden=width, readout="ridge", alpha=alpha, dtype="float64", random_state=1)
        scores = deq.fit(X_tr, y_tr).decision_function(X_te)
        diff[width] = {k: np.linalg.norm(scores - f) / np.linalg.norm(f) for k, f in limits.items()}
    assert diff[2048]["feature"] < 0.4 * diff[128]["feature"]  # 1/sqrt(16) = 0.25 expected
    assert diff[2048]["feature"] < 0.08
    assert diff[2048]["ck"] > 0.09
