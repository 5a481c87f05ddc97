"""The architecture page tells the truth: its module map, the path of fit, the classes of an estimator."""

import re
import sys
from pathlib import Path

import pytest
from sklearn.base import BaseEstimator

import sk_deq

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "architecture.rst").read_text()
PACKAGE = Path(sk_deq.__file__).resolve().parent


def _section(title: str) -> str:
    start = PAGE.index(f"\n{title}\n")
    end = PAGE.find("\n.. _", start + 1)
    return PAGE[start : end if end > 0 else None]


def test_the_module_map_names_every_module_of_the_package_and_no_other():
    named = set(re.findall(r"``(sk_deq/[\w/]+\.py)``", _section("The module map")))
    modules = {str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")}
    assert named - modules == set(), "the map names modules that do not exist"
    assert modules - named == set(), "modules missing from the map"


def test_the_top_of_the_package_holds_few_private_modules():
    private = sorted(p.name for p in PACKAGE.glob("_*.py") if p.name != "__init__.py")
    assert len(private) <= 8, private


@pytest.mark.parametrize("name", ["DEQClassifier", "DEQRegressor", "ExplicitClassifier", "MatchedExplicitRegressor"])
def test_at_most_four_classes_stand_between_an_estimator_and_base_estimator(name):
    cls = getattr(sk_deq, name)
    mro = cls.__mro__
    between = mro[1 : mro.index(BaseEstimator)]
    assert len(between) <= 4, [c.__name__ for c in between]
    assert cls._network.constraints.keys() <= cls._parameter_constraints.keys()


def _files_called(call) -> set:
    """The files of the package in which ``call`` runs a function (traced with sys.setprofile)."""
    seen = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(str(PACKAGE)):
            seen.add(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return {str(Path(f).relative_to(PACKAGE)) for f in seen}


def test_the_path_of_fit_runs_through_the_files_the_page_says():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X, y = X[:300], y[:300]
    estimator = sk_deq.DEQClassifier
    fitted = estimator(n_hidden=64, random_state=0).fit(X, y)
    fitted.predict(X)  # imports done: only calls are traced below
    fit_files = _files_called(lambda: estimator(n_hidden=64, random_state=0).fit(X, y))
    predict_files = _files_called(lambda: fitted.predict(X))
    stated = re.search(r"calls into (\d+) files\s+of the package \(``predict``: (\d+)\)", PAGE)
    assert stated, "the page states how many files fit and predict run through"
    assert (len(fit_files), len(predict_files)) == (int(stated.group(1)), int(stated.group(2))), (
        sorted(fit_files),
        sorted(predict_files),
    )
    assert len(fit_files) <= 15 and len(predict_files) <= 10
    account = _section("The path of ``fit``")
    for path in fit_files:  # every file on the path is named in the page's account of it (activations/ as one)
        name = "activations/" if path.startswith("activations/") else path
        assert f"``{name}``" in account, path
