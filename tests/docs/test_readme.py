"""The README's code runs as written: every Python block, on its own, as a file."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 3  # the three uses (the quickstart)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_a_readme_block_runs_by_itself(code, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "error::RuntimeWarning"}
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip(), "a README block should print what it shows"
    assert "nan" not in run.stdout.lower().split()
