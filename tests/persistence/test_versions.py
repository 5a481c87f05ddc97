"""Pickles across versions of sk_deq: the version every estimator, transformer and kernel records, the warning
when another version loads it, real pickles of 0.1.0, and the clear error for the names 0.1.0's pickles refer to
and this version no longer has."""

import importlib
import json
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import InconsistentVersionWarning as SklearnVersionWarning

import sk_deq
from sk_deq import IncompatiblePickleError, InconsistentVersionWarning
from sk_deq._persistence import REMOVED_MODULES, REMOVED_NAMES, VERSION_KEY

from .test_pickled_state import fitted

V010 = Path(__file__).with_name("pickles_0.1.0")
rng = np.random.default_rng(0)
X_V010, Z_V010 = rng.normal(size=(30, 3)), rng.normal(size=(4, 3))  # as make_v010_pickles.py draws them


def _outputs(obj, X):
    if hasattr(obj, "predict"):
        return obj.predict(X)
    return obj.transform(X) if hasattr(obj, "transform") else obj(X)


@pytest.fixture(scope="module")
def objects():
    return fitted()


def test_every_class_records_this_version_and_loads_silently_under_it(objects):
    for name, obj in objects.items():
        assert obj.__getstate__()[VERSION_KEY] == sk_deq.__version__, name
        with warnings.catch_warnings():
            warnings.simplefilter("error", SklearnVersionWarning)  # sk_deq's warning is one of these
            loaded = pickle.loads(pickle.dumps(obj))
        assert VERSION_KEY not in vars(loaded), name
        np.testing.assert_array_equal(_outputs(loaded, X_V010), _outputs(obj, X_V010), err_msg=name)


def test_a_pickle_of_another_version_warns_naming_the_class_and_both_versions(objects, monkeypatch):
    for name, obj in objects.items():
        with monkeypatch.context() as m:
            m.setattr(sk_deq, "__version__", "0.1.7")
            data = pickle.dumps(obj)
        with pytest.warns(InconsistentVersionWarning) as record:
            loaded = pickle.loads(data)
        (warning,) = [w.message for w in record if isinstance(w.message, InconsistentVersionWarning)]
        assert isinstance(warning, SklearnVersionWarning)  # a filter on scikit-learn's category covers it
        assert (warning.estimator_name, warning.original_version, warning.current_version) == (
            name,
            "0.1.7",
            sk_deq.__version__,
        )
        assert f"Trying to unpickle {name} from sk_deq version 0.1.7 when using version {sk_deq.__version__}" in str(
            warning
        )
        np.testing.assert_array_equal(_outputs(loaded, X_V010), _outputs(obj, X_V010), err_msg=name)


def test_a_pickle_without_a_version_is_one_of_0_1_0(objects):
    obj = objects["ExplicitRegressor"]
    state = obj.__getstate__()
    del state[VERSION_KEY]
    fresh = type(obj).__new__(type(obj))
    with pytest.warns(InconsistentVersionWarning, match="from sk_deq version 0.1.0 when using version"):
        fresh.__setstate__(state)


def test_the_readout_bias_of_an_earlier_pickle_is_zero_the_kernel_it_computed(objects):
    for name in ("ImplicitCKTransformer", "ImplicitCKNystroem", "ImplicitCKKernel"):
        obj = objects[name]
        state = obj.__getstate__()
        del state["bias_variance"]
        same = type(obj).__new__(type(obj))
        same.__setstate__(state)  # this version wrote it: nothing is filled in
        assert not hasattr(same, "bias_variance")
        older = type(obj).__new__(type(obj))
        with pytest.warns(InconsistentVersionWarning):
            older.__setstate__({**state, VERSION_KEY: "0.1.0"})
        assert older.bias_variance == 0.0


# ------------------------------------------------------------------------------------------ real pickles of 0.1.0


def _load_v010(name):
    with pytest.warns(InconsistentVersionWarning, match=f"unpickle {name} from sk_deq version 0.1.0"):
        return pickle.loads((V010 / f"{name}.pkl").read_bytes())


def test_a_deq_classifier_of_0_1_0_loads_and_predicts_as_it_did():
    clf = _load_v010("DEQClassifier")
    expected = json.loads((V010 / "outputs.json").read_text())["DEQClassifier"]
    # written on another machine perhaps: float32 features, summed in another order by another BLAS
    np.testing.assert_allclose(clf.predict_proba(Z_V010), expected, rtol=1e-5, atol=1e-7)


def test_an_implicit_ck_kernel_of_0_1_0_computes_its_kernel_without_the_readout_bias():
    kernel = _load_v010("ImplicitCKKernel")
    assert kernel.bias_variance == 0.0 and kernel.get_params()["bias_variance"] == 0.0
    expected = json.loads((V010 / "outputs.json").read_text())["ImplicitCKKernel"]
    np.testing.assert_allclose(kernel(Z_V010), expected, rtol=1e-13, atol=0)
    np.testing.assert_array_equal(kernel(Z_V010), sk_deq.ImplicitCKKernel(bias_variance=0.0)(Z_V010))


@pytest.mark.parametrize(
    "name,missing",
    [
        ("DEQRegressor", "sk_deq._inputs.Moments"),
        ("ExplicitClassifier", "sk_deq.theory._coefficients.ExplicitCoefficients"),
    ],
)
def test_a_pickle_of_0_1_0_that_cannot_load_says_so_and_to_fit_again(name, missing):
    with pytest.raises(IncompatiblePickleError) as info:
        pickle.loads((V010 / f"{name}.pkl").read_bytes())
    msg = str(info.value)
    assert msg.startswith(f"{missing} exists in sk_deq 0.1.0 only, not in sk_deq {sk_deq.__version__}")
    assert f"Fit it again with sk_deq {sk_deq.__version__}" in msg
    assert isinstance(info.value, ImportError) and info.value.name == missing


# ------------------------------------------------------------------------------------------ the removed names


def test_every_removed_name_is_absent_from_the_package():
    package = Path(sk_deq.__file__).parent
    for module in REMOVED_MODULES:
        path = package.joinpath(*module.split(".")[1:])
        assert not path.with_suffix(".py").exists() and not path.is_dir(), module
    for module, names in REMOVED_NAMES.items():
        for name in names:
            assert name not in vars(importlib.import_module(module)), f"{module}.{name}"


@pytest.mark.parametrize(
    "module,name",
    [(m, "Anything") for m in sorted(REMOVED_MODULES)[:3]]
    + [
        ("sk_deq.theory._coefficients", "ExplicitCoefficients"),
    ],
)
def test_a_removed_name_in_a_pickle_is_an_incompatible_pickle_error(module, name):
    data = f"c{module}\n{name}\n.".encode()  # protocol 0: the global, pushed and returned
    with pytest.raises(IncompatiblePickleError, match=rf"^{module}.{name} exists in sk_deq 0.1.0 only"):
        pickle.loads(data)


def test_the_removed_modules_keep_the_import_rules():
    module = importlib.import_module("sk_deq.nn.deq")
    assert not hasattr(module, "__path__")  # dunder lookups are plain AttributeErrors
    with pytest.raises(IncompatiblePickleError, match=r"sk_deq.nn.deq.DEQLayer exists in sk_deq 0.1.0 only"):
        from sk_deq.nn.deq import DEQLayer  # noqa: F401
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        getattr(importlib.import_module("sk_deq.theory._coefficients"), "no_such_name")  # noqa: B009
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sk_deq.no_such_module")
