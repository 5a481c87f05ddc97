"""The architecture page tells the truth: its module map, the path of fit, the classes of an estimator."""

import ast
import re
import subprocess
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


def _layers() -> list:
    """The layers of the page's diagram, top first: each a set of the package's top-level names."""
    block = PAGE[PAGE.index(".. code-block:: text") :].split("\n\n", 2)[1].splitlines()
    column = re.match(r"\s*\S+\s+", block[0]).end()  # where the descriptions start
    layers, joined = [], False
    for line in block:
        names = line[:column].strip()
        if not joined:
            layers.append(set())
        layers[-1].update(n.strip() for n in names.split(",") if n.strip())
        joined = names.endswith(",")
    return layers


def _imports(path: Path):
    """``(line, target)`` for every import of the package in the module at ``path``.

    ``target`` is the top-level name imported (``'kernels'``, ``'_runtime'``), or
    ``'sk_deq:NAME'`` for a name read from the package's ``__init__.py`` itself.
    """
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = parts if parts[-1] == "__init__" else parts[:-1]
    package = [p for p in package if p != "__init__"]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = [*base, *(node.module.split(".") if node.module else [])]
            modules = [(".".join(module), [a.name for a in node.names])]
        else:
            continue
        for module, names in modules:
            split = module.split(".")
            if split[0] != "sk_deq":
                continue
            if len(split) > 1:
                yield node.lineno, split[1]
            else:  # the package itself: a submodule by name, or a name of its __init__
                for name in names or ["*"]:
                    sub = (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()
                    yield node.lineno, name if sub else f"sk_deq:{name}"


def test_every_import_of_the_package_goes_to_its_own_layer_or_below():
    layers = _layers()
    level = {name: i for i, layer in enumerate(layers) for name in layer}
    units = {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()
    }
    assert units == set(level), ("the diagram names", sorted(set(level) ^ units))
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel == Path("__init__.py"):
            continue  # the public face, above every layer
        unit = rel.parts[0].removesuffix(".py")
        for line, target in _imports(path):
            if target.startswith("sk_deq:"):
                if target != "sk_deq:__version__":
                    wrong.append(f"{rel}:{line} reads {target} from the package's __init__")
            elif level[target] < level[unit]:
                wrong.append(f"{rel}:{line} ({unit}) imports {target}, a layer above")
    assert not wrong, "\n".join(wrong)


def test_the_layer_check_sees_an_import_from_above(tmp_path, monkeypatch):
    """The check above can fail: an import of ``nn`` in the theory, a name of the package's __init__."""
    fake = tmp_path / "sk_deq" / "theory"
    fake.mkdir(parents=True)
    (fake / "_bad.py").write_text("from ..nn import layers\nfrom .. import DEQClassifier\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "sk_deq")
    (tmp_path / "sk_deq" / "nn").mkdir()
    (tmp_path / "sk_deq" / "nn" / "__init__.py").write_text("")
    assert list(_imports(fake / "_bad.py")) == [(1, "nn"), (2, "sk_deq:DEQClassifier")]


def test_the_theory_matching_kernels_and_data_sets_run_without_torch():
    code = (
        "import sys, numpy as np, sk_deq.theory, sk_deq.matching, sk_deq.kernels, sk_deq.datasets\n"
        "from sk_deq.kernels import implicit_kernel\n"
        "implicit_kernel(np.random.default_rng(0).standard_normal((6, 3)), activation='tanh', sigma_a2=0.2)\n"
        "sk_deq.matching.match_explicit('relu', 0.2, 1.0)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


_NUMBERS = {"four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


def test_the_top_of_the_package_holds_the_shared_services_alone():
    private = {p.stem for p in PACKAGE.glob("_*.py") if p.name != "__init__.py"}
    private |= {p.name for p in PACKAGE.glob("_*") if (p / "__init__.py").is_file()}  # a service of several modules
    services = {name for layer in _layers() for name in layer if name.startswith("_")}
    assert private == services
    count = re.search(r"and (\w+) shared\s+services, its only private modules", PAGE)
    assert count and _NUMBERS[count.group(1)] == len(private)


def _named_paths() -> set:
    """Every file or folder the page names in double backquotes (``sk_deq/...``, ``tests/...``, ``estimators/_base.py``)."""
    return {m for m in re.findall(r"``([\w./<>-]+)``", PAGE) if "/" in m and "<" not in m and not m.startswith("/")}


def test_every_file_the_page_names_exists():
    missing = [
        name
        for name in sorted(_named_paths())
        if not any((base / name).exists() for base in (ROOT, PACKAGE, ROOT / "docs"))
    ]
    tests = _section("Tests")
    top = set(re.findall(r"``(test_\w+)``", tests))
    missing += [f"tests/{name}.py" for name in sorted(top) if not (ROOT / "tests" / f"{name}.py").is_file()]
    assert not missing, missing


def test_every_object_the_page_refers_to_exists():
    import importlib

    for role, target in re.findall(r":(class|func|data|mod|meth):`~?([\w.]+)`", PAGE):
        parts = target.split(".")
        for i in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for name in parts[i:]:
                assert hasattr(obj, name), f":{role}:`{target}`"
                obj = getattr(obj, name)
            break
        else:
            pytest.fail(f":{role}:`{target}` does not import")


def test_where_to_look_names_what_its_files_define():
    import importlib

    table = _section("Where to look")
    for answer in re.findall(r"\n     - (.*?)(?=\n   \* - |\n\n)", table, re.S)[1:]:
        files = re.findall(r"``(sk_deq/[\w/]+)\.py``", answer)
        assert files, answer
        modules = [importlib.import_module(f.replace("/", ".")) for f in files]
        for name in re.findall(r"``([A-Za-z_]\w*)``", answer):
            assert any(hasattr(m, name) for m in modules), (name, files)


def test_where_to_add_things_names_what_exists():
    import inspect

    from sk_deq.activations import Activation
    from sk_deq.estimators import _base, _classifier, _component, _regressor

    assert "dual" in inspect.signature(Activation).parameters
    for hook in ("params", "constraints", "prepare", "make_features"):
        assert hasattr(_component.Network, hook), hook
    assert issubclass(_classifier.TorchClassifierBase, _base.TorchEstimatorBase)
    assert issubclass(_regressor.TorchRegressorBase, _base.TorchEstimatorBase)
    for hook in re.findall(r"``(_\w+)``", PAGE[PAGE.index("supply four hooks") :][:200]):
        assert all(hasattr(base, hook) for base in (_classifier.TorchClassifierBase, _regressor.TorchRegressorBase))


@pytest.mark.parametrize("what,folder", [("test file", "tests"), ("module of the package", "sk_deq")])
def test_no_file_is_longer_than_the_page_says(what, folder):
    limit = int(re.search(r"No test file is longer than (\d+) lines, and no module of the package is", PAGE)[1])
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / folder).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > limit
    }
    assert not long, f"{what}s longer than {limit} lines: {long}"


def test_the_test_folders_are_packages_named_after_the_package_or_the_repository():
    for folder in sorted(p for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert (folder / "__init__.py").is_file(), folder
        named = (PACKAGE / folder.name / "__init__.py").is_file() or (PACKAGE / f"_{folder.name}.py").is_file()
        assert named or (ROOT / folder.name).is_dir(), folder.name
    for name in re.findall(r"``tests/(\w+)/test_\w+\.py``", PAGE):
        assert (ROOT / "tests" / name / "__init__.py").is_file(), name


def test_the_shared_fixtures_are_where_the_page_says():
    sentence = PAGE[PAGE.index("Fixtures used by more than one file") :].split("or in a\nfolder", 1)[0]
    names = [n for n in re.findall(r"``(\w+)``", sentence)]
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    assert names and all(re.search(rf"@pytest.fixture[^\n]*\ndef {n}\(", conftest) for n in names), names


def test_the_torch_anderson_solver_is_held_to_the_numpy_one():
    from sk_deq import nn
    from sk_deq.kernels import anderson_fixed_point

    assert callable(nn.anderson) and callable(anderson_fixed_point)
    assert "anderson_fixed_point" in (ROOT / "tests" / "nn" / "test_layers.py").read_text()


@pytest.mark.parametrize("name", ["DEQClassifier", "DEQRegressor", "ExplicitClassifier", "MatchedExplicitRegressor"])
def test_at_most_four_classes_stand_between_an_estimator_and_base_estimator(name):
    cls = getattr(sk_deq, name)
    mro = cls.__mro__
    between = mro[1 : mro.index(BaseEstimator)]
    assert len(between) <= 4, [c.__name__ for c in between]
    assert cls._network.constraints.keys() <= cls._parameter_constraints.keys()


def _files_called(call) -> set:
    """The files of the package in which ``call`` runs a function (traced with sys.setprofile).

    A shared service of several modules (a private folder at the top, such as
    ``_validation/``) counts as one file: it is one concern however it is cut.
    """
    seen = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(str(PACKAGE)):
            seen.add(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    out = set()
    for f in seen:
        rel = Path(f).relative_to(PACKAGE)
        out.add(f"{rel.parts[0]}/" if len(rel.parts) > 1 and rel.parts[0].startswith("_") else str(rel))
    return out


def test_the_path_of_fit_runs_through_the_files_the_page_says():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X, y = X[:300], y[:300]
    estimator = sk_deq.DEQClassifier
    fitted = estimator(n_hidden=64, random_state=0).fit(X, y)
    fitted.predict(X)  # imports done: only calls are traced below
    fit_files = _files_called(lambda: estimator(n_hidden=64, random_state=0).fit(X, y))
    predict_files = _files_called(lambda: fitted.predict(X))
    stated = re.search(r"calls into (\d+) files\s+of the package \(``predict``: (\d+)[;)]", PAGE)
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
