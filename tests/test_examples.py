"""The scripts in examples/ are gallery pages: found, titled, and valid Python.

Running them is the documentation build's job (``.ci/run``: sphinx-gallery executes
every example, and ``docs/conf.py`` fails the build on an example that raises, warns
a RuntimeWarning, prints nothing, prints ``nan`` or takes more CPU time than its limit,
``SK_DEQ_EXAMPLE_LIMIT_S``), so the test run does not run them a second time.
"""

import ast
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_is_a_titled_gallery_page(script):
    tree = ast.parse(script.read_text(encoding="utf-8"), filename=str(script))
    doc = ast.get_docstring(tree, clean=False)
    assert doc, "sphinx-gallery needs a module docstring: its title and introduction"
    title, underline = doc.strip().splitlines()[:2]
    assert set(underline) == {"="} and len(underline) >= len(title), "the title is underlined with '='"
