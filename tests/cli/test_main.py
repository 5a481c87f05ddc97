"""The ``sk-deq`` command (:func:`sk_deq.cli.main`): the parser, ``match`` and ``demo``, the options every
subcommand shares and their errors."""

import json
import shutil
import subprocess
import sys

import pytest

from sk_deq.cli import main


def test_match_prints_coefficients_family_and_residuals(capsys):
    assert main(["match", "--activation", "relu", "--sigma-a2", "0.2", "--tau0", "1.0"]) == 0
    out = capsys.readouterr().out
    assert "alpha1=0.84210526" in out and "tau=0.92656613" in out
    assert "family leaky_relu, 2 layer(s)" in out
    for eq in ("M1", "M2", "M3", "M4"):
        assert f"  {eq}: target" in out


def test_match_json_round_trips(capsys):
    assert main(["match", "--activation", "tanh", "--kernel", "ntk", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kernel"] == "ntk" and data["family"] == "hard_tanh"
    assert set(data["equations"]) == {"M1", "M2", "M3", "M4"}
    assert data["deq"]["beta1"] > 0 and data["max_residual"] < 1e-8
    assert data["layers"][0]["kind"] == "hard_tanh"


def test_match_family_as_kinds_and_tol_none(capsys):
    assert main(["match", "--family", "quadratic", "--tol", "none", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["family"] == "quadratic" and data["tol"] is None
    assert main(["match", "--activation", "softplus", "--family", "quadratic,leaky_relu"]) == 0
    assert "family quadratic_leaky_relu" in capsys.readouterr().out


def test_version(capsys):
    from sk_deq import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"sk-deq {__version__}"


def _argument_error(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


# Every subcommand, a bad value of each kind of option: an argument error naming the option.
BAD_VALUES = [
    (["match", "--sigma-a2", "1.5"], "argument --sigma-a2: expected a number in (0, 1), got '1.5'"),
    (["match", "--sigma-a2", "nan"], "argument --sigma-a2: expected a number in (0, 1)"),
    (["match", "--sigma-b2", "0"], "argument --sigma-b2: expected a positive number"),
    (["match", "--tau0", "-1"], "argument --tau0: expected a positive number"),
    (["match", "--tau0", "inf"], "argument --tau0: expected a positive number"),
    (["match", "--tol", "0"], "argument --tol: expected a positive number or none"),
    (["match", "--tol", "abc"], "argument --tol: expected a positive number or none"),
    (["match", "--n-layers", "0"], "argument --n-layers: expected a positive integer"),
    (["match", "--kernel", "nngp"], "argument --kernel: invalid choice"),
    (["match", "--activation", "cosh2"], "argument --activation: unknown activation 'cosh2'"),
    (["demo", "--n-hidden", "0"], "argument --n-hidden: expected a positive integer"),
    (["demo", "--sigma-a2", "0"], "argument --sigma-a2: expected a number in (0, 1)"),
    (["demo", "--dataset", "cifar"], "argument --dataset: invalid choice"),
    (["demo", "--activation", "foo"], "argument --activation: unknown activation"),
    (["demo", "--repeats", "0"], "argument --repeats: expected a positive integer"),
    (
        ["compare", "--datasets", "cifar"],
        "argument --data/--datasets: unknown dataset 'cifar': use one of digits, fashion-mnist, mnist, mnist-full, "
        "or a FILE.npz of your own",
    ),
    (["compare", "--data", "missing.npz"], "argument --data/--datasets: no such file: 'missing.npz'"),
    (["compare", "--trainable", "hidden"], "argument --trainable: invalid choice"),
    (["compare", "--trainable", "all", "--epochs", "0"], "argument --epochs"),
    (["compare", "--activations", "relu,bar"], "argument --activations: unknown activation 'bar'"),
    (["compare", "--widths", "32,0"], "argument --widths: expected comma-separated positive integers"),
    (["compare", "--threads", "-1"], "argument --threads: expected 0 or a positive integer"),
    (["compare", "--test-size", "1.5"], "argument --test-size: expected a number in (0, 1)"),
    (["compare", "--repeats", "0"], "argument --repeats: expected a positive integer"),
    (["spectrum", "--ratio", "0"], "argument --ratio: expected a positive number"),
    (["spectrum", "--sizes", "10,-3"], "argument --sizes: expected comma-separated positive integers"),
    (["spectrum", "--method", "magic"], "argument --method: invalid choice"),
    (["spectrum", "--matched", "nope"], "argument --matched: unknown activation"),
    (["spectrum", "--n-hidden", "0"], "argument --n-hidden: expected a positive integer"),
    (["boundary", "--repeats", "0"], "argument --repeats: expected a positive integer"),
    (["boundary", "--threads", "-1"], "argument --threads: expected 0 or a positive integer"),
]


@pytest.mark.parametrize("argv,message", BAD_VALUES, ids=[" ".join(a) for a, _ in BAD_VALUES])
def test_every_subcommand_rejects_bad_values_naming_the_option(capsys, argv, message):
    assert message in _argument_error(capsys, argv)


def test_lists_of_valid_names_are_sorted(capsys):
    from sk_deq.activations import ACTIVATION_NAMES

    err = _argument_error(capsys, ["match", "--activation", "cosh2"])
    listed = err.split("use one of ")[1].strip().split(", ")
    assert listed == sorted(listed) == list(ACTIVATION_NAMES) and "swish" in listed
    err = _argument_error(capsys, ["match", "--family", "cubic"])
    kinds = err.split("layer kinds from ")[1].strip().split(", ")
    assert kinds == sorted(kinds)


def test_errors_from_the_library_use_the_commands_spelling(capsys):
    assert main(["match", "--family", "quadratic"]) == 2
    err = capsys.readouterr().err
    assert "No explicit network matches" in err
    assert "--tol 0.05" in err and "--tol none" in err and "--family auto" in err and "--sigma-a2 0.2" in err
    for python_spelling in ("tol=", "sigma_a2", "family='auto'", "n_layers"):
        assert python_spelling not in err


def test_family_names_the_command_prints_are_names_it_accepts(capsys):
    assert main(["match", "--kernel", "ntk", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["family"] == "leaky_relux3"
    for family in [data["family"]] + [c["family"] for c in data["candidates"]]:
        assert main(["match", "--kernel", "ntk", "--family", family, "--tol", "none", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["family"] == family
    assert main(["match", "--family", "hard_tanh_leaky_relu", "--tol", "none", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["family"] == "hard_tanh_leaky_relu"


def test_unknown_family_is_an_argument_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["match", "--family", "cubic"])
    assert info.value.code == 2
    assert "unknown family" in capsys.readouterr().err


def test_console_script_is_installed():
    exe = shutil.which("sk-deq")
    cmd = [exe] if exe else [sys.executable, "-m", "sk_deq.cli"]
    res = subprocess.run(cmd + ["match", "--activation", "erf", "--json"], capture_output=True, text=True, check=True)
    assert json.loads(res.stdout)["family"] == "hard_tanh"


def _subcommand_defaults(name):
    from sk_deq.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[name]
    # options whose default is filled in after parsing (so that a command can tell whether they were given)
    return {a.dest: a.default for a in sub._actions if a.dest != "help"} | (sub.get_default("_deferred") or {})


@pytest.mark.parametrize("command", ["demo", "compare", "spectrum"])
def test_option_defaults_are_the_library_defaults(command):
    import inspect

    from sk_deq import experiments

    func = {"demo": experiments.demo, "compare": experiments.compare_widths, "spectrum": experiments.spectrum}[command]
    library = {k: p.default for k, p in inspect.signature(func).parameters.items()}
    options = _subcommand_defaults(command)
    library["threads"] = library.pop("n_threads", None)
    shared = set(options) & set(library)
    assert {"sigma_a2", "random_state"} <= shared
    # None: the library's default, or --quick's
    deferred = {"demo": set(), "compare": {"widths", "repeats", "n_samples"}, "spectrum": {"sizes"}}[command]
    for name in shared - deferred:
        assert options[name] == library[name], name
    for name in deferred:
        assert options[name] is None
        text = ",".join(map(str, library[name])) if isinstance(library[name], tuple) else str(library[name])
        assert f"(default: {'all' if library[name] is None else text}" in _help(command)


def _help(command):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        main([command, "--help"])
    return " ".join(buf.getvalue().split())


def test_match_defaults_are_the_demos_matched_network():
    import inspect

    from sk_deq.experiments import demo
    from sk_deq.matching import match_explicit

    options = _subcommand_defaults("match")
    demo_defaults = inspect.signature(demo).parameters
    assert options["activation"] == demo_defaults["activation"].default
    assert options["sigma_a2"] == demo_defaults["sigma_a2"].default
    assert options["tau0"] == 1.0  # the data scale input_scaling='global' gives the estimators
    for name in ("kernel", "family", "n_layers", "sigma_b2", "tol"):
        assert options[name] == inspect.signature(match_explicit).parameters[name].default, name


# ---------------------------------------------------------------------------
# --out, options that do not apply, and errors in the command's spelling


@pytest.mark.parametrize("command", [["compare", "--quick"], ["spectrum", "--quick"], ["spectrum", "--data", "sphere"]])
def test_an_unwritable_out_is_refused_before_the_run(capsys, tmp_path, command, monkeypatch):
    pytest.importorskip("matplotlib")
    import functools

    from sk_deq.cli import _compare, _spectrum

    for module, name in ((_compare, "compare_widths"), (_spectrum, "spectrum"), (_spectrum, "sphere_spectrum")):

        @functools.wraps(getattr(module, name))  # the same signature: the options' defaults are read from it
        def never(*args, **kwargs):
            raise AssertionError("the experiment ran")

        monkeypatch.setattr(module, name, never)
    (tmp_path / "a_file").write_text("")
    for out in ("/proc/forbidden", str(tmp_path / "a_file" / "sub"), str(tmp_path / "a_file")):
        err = _argument_error(capsys, [*command, "--out", out])
        assert "error: --out" in err and "Traceback" not in err


INAPPLICABLE = [
    (["spectrum", "--data", "sphere", "--activations", "tanh"], "--activations does not apply with --data sphere"),
    (["spectrum", "--data", "sphere", "--matched", "relu"], "--matched does not apply with --data sphere"),
    (["spectrum", "--data", "sphere", "--ratio", "2"], "--ratio does not apply with --data sphere"),
    (["spectrum", "--data", "sphere", "--no-mnist"], "--no-mnist does not apply with --data sphere"),
    (["spectrum", "--data", "sphere", "--no-histograms"], "--no-histograms does not apply with --data sphere"),
    (["spectrum", "--data", "sphere", "--method", "monte_carlo", "--n-draws", "2"], "--n-draws does not apply"),
    (["spectrum", "--data", "sphere", "--n-hidden", "64"], "--n-hidden does not apply with --method exact"),
    (["spectrum", "--n-hidden", "64"], "--n-hidden does not apply with --method exact"),
    (["spectrum", "--n-draws", "2"], "--n-draws does not apply with --method exact"),
    (["spectrum", "--no-mnist", "--no-histograms"], "--no-mnist does not apply with --no-histograms"),
    (["compare", "--cv", "3", "--repeats", "2"], "--repeats does not apply with --cv"),
    (["compare", "--cv", "3", "--test-size", "0.3"], "--test-size does not apply with --cv"),
    (["compare", "--cv", "3", "--repeats", "2", "--test-size", "0.2"], "--repeats, --test-size do not apply"),
    (["compare", "--widths", "32,32"], "argument --widths: 32 given more than once"),
    (["compare", "--widths", "32,032"], "argument --widths: a number is given more than once"),
    (["compare", "--activations", "relu,tanh,relu"], "argument --activations: relu given more than once"),
    (["spectrum", "--sizes", "100,100"], "argument --sizes: 100 given more than once"),
    (["compare", "--cv", "1"], "argument --cv: expected an integer of at least 2 folds, got '1'"),
    (["compare", "--device", "mps"], "argument --device: --device mps is not supported: MPS devices have no float64"),
    (["compare", "--device", "gpu"], "argument --device: --device gpu names no device"),
]


@pytest.mark.parametrize("argv,message", INAPPLICABLE, ids=[" ".join(a) for a, _ in INAPPLICABLE])
def test_options_that_do_not_apply_are_errors(capsys, argv, message):
    err = _argument_error(capsys, argv)
    assert f"sk-deq {argv[0]}: error: {message}" in err and "Traceback" not in err


def test_compare_help_names_the_files_of_cv():
    text = _help("compare")
    assert "compare_widths.json" in text and "compare_cv.json" in text
    assert "compare_cv_DATASET_ACTIVATION_WIDTH.png" in text


@pytest.mark.parametrize("command", ["demo", "compare", "spectrum"])
@pytest.mark.parametrize("seed", ["-1", "4294967296"])
def test_random_state_out_of_range_is_an_argument_error(capsys, command, seed):
    err = _argument_error(capsys, [command, "--random-state", seed])
    assert "argument --random-state: expected an integer in [0, 2**32 - 1]" in err


def test_library_errors_of_compare_and_spectrum_name_the_options(capsys):
    assert main(["compare", "--n-samples", "5", "--datasets", "digits", "--widths", "8", "--no-progress"]) == 2
    assert "error: --n-samples must be" in capsys.readouterr().err
    assert main(["spectrum", "--sizes", "8", "--no-histograms", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "error: The size n = 8 with --ratio 0.8 gives p = 6 features" in err and "Traceback" not in err


def test_cli_demo_json(capsys):
    assert main(["demo", "--n-hidden", "32", "--repeats", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["repeats"] == 1 and data["n_hidden"] == 32 and len(data["rows"]) == 3
