"""The commands the README gives are the ones CI runs."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = [line for line in readme.splitlines() if line.startswith("pip install") and "pytest" in line]
    assert len(commands) == 1, commands
    return commands[0]


def test_ci_runs_the_readme_test_command():
    command = _readme_test_command()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci
    # CI runs the heavy tests the quick default run leaves out, and lists the slowest
    assert re.search(r'-m "not slow"', command) and "--durations=15" in command


def test_every_run_executes_the_docstring_examples():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--doctest-modules" in options["addopts"].split()
    assert "sk_deq" in options["testpaths"]


def test_the_gpu_module_is_registered_named_by_the_readme_and_skipped_without_cuda():
    import subprocess
    import sys

    import torch

    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(marker.startswith("gpu:") for marker in options["markers"])
    assert "`python -m pytest -m gpu tests/test_gpu.py`" in (ROOT / "README.md").read_text()
    if torch.cuda.is_available():
        return
    # the README's test command (-m "not slow") collects the module and skips it, naming the reason; the run passes
    other = "tests/test_repository.py::test_every_run_executes_the_docstring_examples"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_gpu.py", other, "-m", "not slow", "-rs", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "needs a CUDA GPU" in run.stdout and "1 passed" in run.stdout and "error" not in run.stdout.lower()


def test_the_install_page_says_what_the_readme_command_and_ci_run():
    page = (ROOT / "docs" / "install.rst").read_text()
    assert f"``{_readme_test_command()}``" in page
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    after = ci[ci.index(_readme_test_command()) + 1 :]
    checks = [line for line in after if line.startswith(("python -m mypy", "python -m sphinx"))]
    assert len(checks) == 2, checks  # the type check and the documentation build
    for command in checks:
        assert f"``{command}``" in page, command
    assert "dataset-fashion-mnist" in (ROOT / ".ci" / "run").read_text() and "dataset-fashion-mnist" in page
    for other in ("python -m pytest -m slow", 'python -m pytest -m ""', "python -m pytest -m gpu tests/test_gpu.py"):
        assert f"``{other}``" in page, other
