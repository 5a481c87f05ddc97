"""Every script in examples/ runs to completion (as sphinx-gallery would run it)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("plot_*.py"))


def test_examples_are_found():
    names = {p.stem for p in EXAMPLES}
    assert {
        "plot_quickstart",
        "plot_pipeline_gridsearch",
        "plot_kernel_ridge",
        "plot_custom_activation",
        "plot_train_all_weights",
        "plot_spectrum",
        "plot_compare_widths",
    } <= names


@pytest.mark.heavy
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs(script, tmp_path):
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "error::RuntimeWarning"}
    # a generous limit that only guards against a hang; timings are not asserted
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip(), "an example should print what it found"
    assert "nan" not in proc.stdout.lower().split(), proc.stdout
