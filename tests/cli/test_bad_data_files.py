"""``sk-deq compare --data FILE.npz`` on every kind of bad file, and a diverging ``--trainable all`` run: one line
on standard error naming the file (or the option) and the problem, exit status 2, no traceback."""

import json
import re
import zipfile

import numpy as np
import pytest
from sklearn.datasets import load_digits

import sk_deq.cli as cli
from sk_deq.cli import main
from sk_deq.experiments import SGD_TRAINING

RUN = ["--activations", "relu", "--widths", "8", "--repeats", "1", "--no-progress"]
rng = np.random.default_rng(0)
X40, labels = rng.normal(size=(40, 3)), np.arange(40) % 2


def _good(path, **extra):
    X, y = load_digits(return_X_y=True)
    np.savez(path, X=X[:100], y=y[:100], **extra)
    return path


def _truncated(tmp):
    data = _good(tmp / "good.npz").read_bytes()
    (tmp / "f.npz").write_bytes(data[: len(data) // 2])


def _bad_crc(tmp):
    rng = np.random.default_rng(0)
    np.savez(tmp / "f.npz", X=rng.normal(size=(40, 3)), y=np.arange(40) % 2)
    data = bytearray((tmp / "f.npz").read_bytes())
    with zipfile.ZipFile(tmp / "f.npz") as z:
        info = z.getinfo("X.npy")
    data[info.header_offset + 30 + len("X.npy") + 200] ^= 0xFF  # a byte of X's data, past its local header
    (tmp / "f.npz").write_bytes(bytes(data))


def _npy(tmp):
    np.save(tmp / "f.npy", X40)
    (tmp / "f.npy").rename(tmp / "f.npz")


def _savez(**arrays):
    return lambda tmp: np.savez(tmp / "f.npz", **arrays)


CASES = {
    "empty file": (lambda tmp: (tmp / "f.npz").write_bytes(b""), r"'.*f.npz' is empty \(0 bytes\), not a .npz file"),
    "truncated file": (_truncated, r"'.*f.npz' is a damaged .npz file \(File is not a zip file\): write it again"),
    "bad CRC of a member": (_bad_crc, r"'.*f.npz': X is damaged \(Bad CRC-32 for file 'X.npy'\)"),
    "text file": (lambda tmp: (tmp / "f.npz").write_text("X,y\n1,2\n"), r"'.*f.npz' is not a .npz file"),
    ".npy file": (_npy, r"'.*f.npz' is a .npy file \(one array\), not a .npz archive"),
    "object array": (
        _savez(X=np.array([[1, "a"]] * 40, dtype=object), y=labels),
        r"'.*f.npz': X is an array of Python objects, which is not read",
    ),
    "empty X": (_savez(X=np.zeros((0, 3)), y=np.zeros(0)), r"'.*f.npz': X is empty \(shape \(0, 3\)\)"),
    "continuous y": (_savez(X=X40, y=rng.normal(size=40)), r"'.*f.npz': y holds continuous values .*not class labels"),
    "NaN in X": (_savez(X=np.where(X40 > 1, np.nan, X40), y=labels), r"'.*f.npz': X holds \d+ NaN or infinite value"),
    "NaN in y": (_savez(X=X40, y=np.where(labels > 0, np.nan, 0)), r"'.*f.npz': y holds 20 missing values"),
    "strings in X": (_savez(X=np.full((40, 3), "a"), y=labels), r"'.*f.npz': X holds values of dtype <U1, not numbers"),
    "one class": (_savez(X=X40, y=np.ones(40)), r"'.*f.npz': y holds a single class \(1.0\)"),
    "infinite X_test": (
        _savez(X=X40, y=labels, X_test=np.full((4, 3), np.inf), y_test=labels[:4]),
        r"'.*f.npz': X_test holds 12 NaN or infinite",
    ),
    "no y": (_savez(X=X40), r"'.*f.npz' has no array y \(it holds X\)"),
    "y of another length": (_savez(X=X40, y=labels[:5]), r"'.*f.npz': X must be 2-D and y 1-D with one entry per row"),
}


def _one_error_line(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"sk-deq {argv[0]}: error: "), err
    return err.strip()


@pytest.mark.parametrize("case", CASES)
def test_a_bad_npz_file_is_one_line_naming_the_file_and_the_problem(tmp_path, capsys, case):
    write, message = CASES[case]
    write(tmp_path)
    err = _one_error_line(capsys, ["compare", "--data", str(tmp_path / "f.npz"), *RUN])
    assert str(tmp_path / "f.npz") in err
    assert re.search(message, err), err
    assert "--n-samples" not in err  # not given: the message is about the data


def test_the_same_checks_hold_for_arrays_passed_as_a_tuple():
    from sk_deq.experiments import compare_widths

    with pytest.raises(ValueError, match=r"^dataset 'mine': y holds continuous values"):
        compare_widths([("mine", X40, rng.normal(size=40))], ["relu"], [8], repeats=1)
    with pytest.raises(ValueError, match=r"^dataset 'mine': y holds 1 missing value .*the first at row 3"):
        compare_widths([("mine", X40, np.where(np.arange(40) == 3, None, labels))], ["relu"], [8], repeats=1)
    with pytest.raises(ValueError, match=r"^dataset 'mine': X_test is empty"):
        compare_widths([("mine", X40, labels, np.zeros((0, 3)), labels[:0])], ["relu"], [8], repeats=1)


def test_a_good_npz_file_still_runs(tmp_path, capsys):
    path = _good(tmp_path / "digits100.npz")
    assert main(["compare", "--data", str(path), *RUN, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["datasets"]["digits100"]["n_train"] == 80


def test_a_diverging_training_names_the_commands_option(tmp_path, capsys):
    path = _good(tmp_path / "d.npz")
    argv = ["compare", "--data", str(path), *RUN, "--trainable", "all", "--epochs", "3", "--learning-rate", "10000"]
    err = _one_error_line(capsys, argv)
    assert "the optimizer diverged" in err
    assert "--learning-rate 10000 is too large a step size for these data: pass a smaller --learning-rate" in err
    assert "learning_rate_init" not in err and "solver=" not in err


def test_a_diverging_training_at_the_default_step_size_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(SGD_TRAINING, "learning_rate_init", 10000.0)
    path = _good(tmp_path / "d.npz")
    err = _one_error_line(capsys, ["compare", "--data", str(path), *RUN, "--trainable", "all", "--epochs", "3"])
    assert "--learning-rate 10000 (the default) is too large a step size" in err


def test_a_message_of_several_lines_is_printed_as_one(capsys, monkeypatch):
    def fail(args):
        raise OSError(
            "Could not download the MNIST file t10k:\n  https://a/t10k.gz: timed out\n  file:///b: gone\nTo get it, ..."
        )

    monkeypatch.setattr(cli, "_cmd_match", fail)
    err = _one_error_line(capsys, ["match"])
    assert err.endswith(
        "Could not download the MNIST file t10k: https://a/t10k.gz: timed out; file:///b: gone; To get it, ..."
    )


def test_a_floating_point_error_that_is_not_a_divergence_keeps_its_traceback(monkeypatch):
    def fail(args):
        raise FloatingPointError("overflow encountered in multiply")

    monkeypatch.setattr(cli, "_cmd_match", fail)
    with pytest.raises(FloatingPointError, match="overflow"):
        main(["match"])
