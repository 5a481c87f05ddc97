"""The public API carries type hints, and the package says so to type checkers (PEP 561)."""

import importlib
import inspect
import tomllib
from pathlib import Path

import pytest

import sk_deq

ROOT = Path(__file__).resolve().parents[1]

ESTIMATORS = [
    "DEQClassifier",
    "DEQRegressor",
    "MatchedExplicitClassifier",
    "MatchedExplicitRegressor",
    "ExplicitClassifier",
    "ExplicitRegressor",
]
METHODS = [
    "fit",
    "partial_fit",
    "predict",
    "predict_proba",
    "predict_log_proba",
    "decision_function",
    "score",
    "transform",
    "fit_transform",
    "features",
    "to_torch",
    "diag",
    "__call__",
]
FUNCTIONS = [
    "sk_deq.deq_ck_coefficients",
    "sk_deq.deq_ntk_coefficients",
    "sk_deq.explicit_coefficients",
    "sk_deq.match_explicit",
    "sk_deq.resolve_device",
    "sk_deq.get_activation",
    "sk_deq.datasets.make_gaussian_mixture",
    "sk_deq.datasets.fetch_fashion_mnist",
    "sk_deq.datasets.fetch_mnist",
    "sk_deq.datasets.load_mnist_digits",
    "sk_deq.model_selection.compare_estimators",
    "sk_deq.experiments.compare_widths",
    "sk_deq.experiments.cross_validate_widths",
    "sk_deq.experiments.spectrum",
    "sk_deq.experiments.sphere_spectrum",
    "sk_deq.experiments.demo",
    "sk_deq.experiments.load_dataset",
]


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _unannotated(func) -> list[str]:
    """The parameters of ``func`` without a hint, and 'return' when the return has none."""
    sig = inspect.signature(func)
    missing = [name for name, p in sig.parameters.items() if name != "self" and p.annotation is p.empty]
    return missing + (["return"] if sig.return_annotation is sig.empty else [])


def test_the_package_ships_its_py_typed_marker():
    assert (Path(sk_deq.__file__).parent / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["sk_deq"]


@pytest.mark.parametrize("name", [*ESTIMATORS, "ImplicitCKTransformer", "ImplicitCKNystroem", "ImplicitCKKernel"])
def test_estimators_constructors_and_public_methods_are_annotated(name):
    cls = getattr(sk_deq, name)
    assert _unannotated(cls.__init__) == [], name
    checked = []
    for method in METHODS:
        func = getattr(inspect.getattr_static(cls, method, None), "fn", None) or getattr(cls, method, None)
        if func is None or getattr(func, "__module__", "").split(".")[0] != "sk_deq":
            continue  # absent, or scikit-learn's own (available_if's descriptor holds ours as .fn)
        assert _unannotated(inspect.unwrap(func)) == [], f"{name}.{method}"
        checked.append(method)
    assert {"fit", "predict"} <= set(checked) or {"fit", "transform"} <= set(checked) or "diag" in checked, checked
    if name in ESTIMATORS:
        assert {"partial_fit", "score", "features", "to_torch"} <= set(checked), checked


@pytest.mark.parametrize("dotted", FUNCTIONS)
def test_public_functions_are_annotated(dotted):
    assert _unannotated(inspect.unwrap(_resolve(dotted))) == [], dotted


def test_the_lazily_imported_names_are_visible_to_type_checkers():
    """``from sk_deq import DEQClassifier`` is typed: the module imports the lazy names under TYPE_CHECKING."""
    source = Path(sk_deq.__file__).read_text()
    block = source[source.index("if TYPE_CHECKING:") :].split("\n\n")[0]
    for name in sk_deq._LAZY:
        assert f"import {name} as {name}" in block, name
