"""The ``sk-deq`` command."""

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


@pytest.mark.parametrize(
    "argv,message",
    [
        (["match", "--sigma-a2", "1.5"], "sigma_a2 must lie in the open interval"),
        (["match", "--family", "quadratic"], "No explicit network matches"),
        (["match", "--activation", "cosh2"], "Unknown activation"),
    ],
)
def test_errors_exit_2_with_a_message(capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


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
