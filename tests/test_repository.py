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
