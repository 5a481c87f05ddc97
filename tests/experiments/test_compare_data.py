"""compare_widths and cross_validate_widths on data sets with a test set of their own, .npz files, and SGD."""

import io
import json

import numpy as np
import pytest
from sklearn.datasets import load_digits

from sk_deq.cli import main
from sk_deq.experiments import SGD_TRAINING, compare_widths, cross_validate_widths
from sk_deq.experiments._own_data import load_npz
from sk_deq.experiments._compare import _splits


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:240], y[:240], X[240:300], y[240:300]


def test_a_test_set_of_its_own_is_kept_in_every_repeat(digits, tmp_path):
    X, y, X_test, y_test = digits
    path = tmp_path / "own.npz"
    np.savez(path, X=X, y=y, X_test=X_test, y_test=y_test)
    res = compare_widths([str(path)], ["tanh"], [8], repeats=2, random_state=3)
    info = res.datasets["own"]
    assert (info["n_train"], info["n_test"], info["split"]) == (240, 60, "fixed")
    accs = [r["accuracy"] for r in res.records]
    # every repeat splits at the official boundary: the file's test rows, in order
    X_all, y_all = np.concatenate([X, X_test]), np.concatenate([y, y_test])
    for X_tr, X_te, y_tr, y_te in _splits(X_all, y_all, 60, 0.2, 3, 2):
        np.testing.assert_array_equal(X_tr, X)
        np.testing.assert_array_equal(X_te, X_test)
        np.testing.assert_array_equal(y_tr, y)
        np.testing.assert_array_equal(y_te, y_test)
    assert not np.array_equal(_splits(X_all, y_all, None, 0.2, 3, 1)[0][1], X_test)  # a random split differs
    # the same as passing the arrays as a tuple (name, X, y, X_test, y_test)
    same = compare_widths([("own", X, y, X_test, y_test)], ["tanh"], [8], repeats=2, random_state=3)
    assert [r["accuracy"] for r in same.records] == accs
    assert "the same split in every repeat" in res.format_table()


def test_without_a_test_set_every_repeat_draws_a_split(digits, tmp_path):
    X, y, _, _ = digits
    path = tmp_path / "plain.npz"
    np.savez(path, X=X, y=y)
    res = compare_widths([str(path)], ["relu"], [8], repeats=2, test_size=0.25)
    assert res.datasets["plain"]["split"] == "random" and res.datasets["plain"]["n_test"] == 60


def test_a_subsample_takes_from_the_training_and_the_test_set_in_proportion(digits):
    X, y, X_test, y_test = digits
    res = compare_widths([("d", X, y, X_test, y_test)], ["relu"], [8], repeats=1, n_samples=100)
    assert (res.datasets["d"]["n_train"], res.datasets["d"]["n_test"]) == (80, 20)


@pytest.mark.parametrize(
    "arrays,match",
    [
        ({"X": np.zeros((4, 2))}, "no array y"),
        ({"X": np.zeros((4, 2)), "y": np.zeros(3)}, "one entry per row"),
        ({"X": np.zeros((4, 2)), "y": np.zeros(4), "X_test": np.zeros((2, 2))}, "both X_test and y_test"),
        ({"X": np.zeros((4, 2)), "y": np.arange(4) % 2, "X_test": np.zeros((2, 3)), "y_test": np.zeros(2)}, "columns"),
        ({"X": np.zeros(4), "y": np.zeros(4)}, "2-D"),
    ],
)
def test_a_faulty_npz_file_is_a_clear_error(tmp_path, arrays, match):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=match):
        load_npz(path)


def test_a_file_that_is_not_npz_is_a_clear_error(tmp_path):
    path = tmp_path / "text.npz"
    path.write_text("not an archive")
    with pytest.raises(ValueError, match=r"text.npz' is not a \.npz file"):
        load_npz(path)


def test_trainable_all_trains_every_model_end_to_end_with_sgd(digits):
    X, y, X_test, y_test = digits
    res = compare_widths(
        [("d", X, y, X_test, y_test)], ["tanh"], [8], repeats=1, trainable="all", estimator_params={"max_iter": 2}
    )
    assert res.config["trainable"] == "all"
    assert res.config["estimator_params"] == {**SGD_TRAINING, "trainable": "all", "max_iter": 2}
    assert {r["n_epochs"] for r in res.records} == {2}
    assert res.format_table().startswith("Networks trained end to end (SGD, 2 epochs, step 3, batches of 128)")
    readout = compare_widths([("d", X, y, X_test, y_test)], ["tanh"], [8], repeats=1)
    assert readout.format_table().startswith("Readout-trained networks")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(trainable="hidden"), "trainable must be 'readout' or 'all'"),
        (dict(estimator_params={"n_hidden": 5}), "cannot set n_hidden"),
        (dict(estimator_params=[("alpha", 1.0)]), "must be a dict"),
    ],
)
def test_bad_training_arguments(digits, kwargs, match):
    X, y, _, _ = digits
    with pytest.raises(ValueError, match=match):
        compare_widths([("d", X, y)], ["tanh"], [8], repeats=1, **kwargs)


def test_cross_validation_shows_progress_and_a_line_per_width(digits):
    X, y, _, _ = digits
    out = io.StringIO()
    runs = cross_validate_widths([("d", X, y)], ["tanh"], [4, 8], cv=2, progress=True, verbose=1, stream=out)
    text = out.getvalue()
    assert len(runs) == 2 and "2/2" in text and "d tanh width 4: 2 folds x 3 models" in text
    assert "d tanh width 8: DEQ" in text and "DEQ vs matched p = " in text


def test_the_command_takes_an_npz_file_and_sgd_options(digits, tmp_path, capsys):
    X, y, X_test, y_test = digits
    path = tmp_path / "feat.npz"
    np.savez(path, X=X, y=y, X_test=X_test, y_test=y_test)
    argv = ["compare", "--data", str(path), "--activations", "tanh", "--widths", "8", "--repeats", "1"]
    assert (
        main([*argv, "--trainable", "all", "--epochs", "2", "--learning-rate", "1.5", "--json", "--no-progress"]) == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["config"]["estimator_params"]["learning_rate_init"] == 1.5
    assert result["datasets"]["feat"]["split"] == "fixed"
    with pytest.raises(SystemExit):
        main([*argv, "--epochs", "2"])
    assert "--epochs does not apply without --trainable all" in capsys.readouterr().err


def test_fashion_mnist_by_name():
    """The data set of the paper's figure, where Debian's dataset-fashion-mnist installed it (CI installs it)."""
    from sk_deq.datasets import fetch_fashion_mnist

    try:
        fetch_fashion_mnist(subset="test", download_if_missing=False)
    except FileNotFoundError as exc:
        pytest.skip(f"Fashion-MNIST is not installed here ({exc})")
    res = compare_widths(["fashion-mnist"], ["relu"], [8], repeats=1, n_samples=140)
    info = res.datasets["fashion-mnist"]
    assert (info["n_train"], info["n_test"], info["split"]) == (120, 20, "fixed")
