"""Missing values (None, NaN, pd.NA, NaT) in pandas inputs and arrays of objects: one clear error, at fit and
predict, for every estimator and transformer and the Gaussian-process kernel.

scikit-learn's own validation turns them into errors about dtype promotion (a datetime column holding NaT),
``float()`` of ``NAType`` (an object column holding pd.NA), an unknown label type (an object y holding None),
or, for a regressor's object y, into a NaN after its finiteness check (a training that then diverges).
"""

import numpy as np
import pandas as pd
import pytest

from sk_deq import (
    DEQClassifier,
    DEQRegressor,
    ExplicitClassifier,
    ExplicitRegressor,
    ImplicitCKKernel,
    ImplicitCKNystroem,
    ImplicitCKTransformer,
)
from sk_deq._validation import _missing_mask, reject_missing

ESTIMATORS = {
    "DEQClassifier": lambda: DEQClassifier(n_hidden=8, random_state=0),
    "ExplicitRegressor": lambda: ExplicitRegressor(n_hidden=8, random_state=0),
    "transformer": lambda: ImplicitCKTransformer(),
    "nystroem": lambda: ImplicitCKNystroem(n_components=5, random_state=0),
}
N = 12


def _frame():
    rng = np.random.default_rng(0)
    return pd.DataFrame(rng.normal(size=(N, 3)), columns=["a", "b", "c"])


def _with_dates(kind):
    X = _frame()
    X["d"] = pd.date_range("2020-01-01", periods=N) if kind == "datetime" else pd.to_timedelta(np.arange(N), "s")
    X.loc[4, "d"] = pd.NaT
    return X, "row 4, column 'd'"


def _extension(dtype):
    X = (_frame() * 10).round().astype(dtype)
    X.iloc[2, 1] = pd.NA
    return X, "row 2, column 'b'"


def _objects(value, numpy=False):
    X = _frame().astype(object)
    X.iloc[7, 2] = value
    return (X.to_numpy(), "row 7, column 2") if numpy else (X, "row 7, column 'c'")


X_CASES = {
    "datetime column with NaT": lambda: _with_dates("datetime"),
    "timedelta column with NaT": lambda: _with_dates("timedelta"),
    "Float64 column with pd.NA": lambda: _extension("Float64"),
    "Int64 column with pd.NA": lambda: _extension("Int64"),
    "object column with pd.NA": lambda: _objects(pd.NA),
    "object column with None": lambda: _objects(None),
    "numpy object array with None": lambda: _objects(None, numpy=True),
    "numpy object array with pd.NA": lambda: _objects(pd.NA, numpy=True),
}


def _fit(est, X, y=None):
    if isinstance(est, (ImplicitCKTransformer, ImplicitCKNystroem)):
        return est.fit(X)
    if y is None:
        y = np.arange(len(X)) % 2 if hasattr(est, "predict_proba") else np.linspace(0, 1, len(X))
    return est.fit(X, y)


@pytest.mark.parametrize("case", X_CASES)
@pytest.mark.parametrize("name", ESTIMATORS)
def test_missing_values_in_X_are_an_error_naming_the_first(name, case):
    X, where = X_CASES[case]()
    owner = type(ESTIMATORS[name]()).__name__
    with pytest.raises(ValueError, match=rf"^{owner}: X holds 1 missing value \(None, NaN, pd.NA or NaT\)") as info:
        _fit(ESTIMATORS[name](), X)
    assert f"the first at {where}:" in str(info.value) and "impute" in str(info.value)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_missing_values_at_predict_and_transform(name):
    est = _fit(ESTIMATORS[name](), _frame())
    X, where = _objects(pd.NA)
    X.iloc[9, 0] = None
    with pytest.raises(ValueError, match=rf"X holds 2 missing values .*, the first at {where}"):
        est.transform(X) if hasattr(est, "transform") else est.predict(X)


def test_the_gaussian_process_kernel_names_missing_values():
    X, where = _extension("Float64")
    with pytest.raises(ValueError, match=rf"ImplicitCKKernel: X holds 1 missing value .*the first at {where}"):
        ImplicitCKKernel()(X)


def test_a_column_of_dates_is_not_numbers():
    X = _frame()
    X["when"] = pd.date_range("2020-01-01", periods=N, tz="UTC")
    with pytest.raises(ValueError, match=r"X holds dates or durations \(column 'when'\), not numbers"):
        ExplicitClassifier(n_hidden=8).fit(X, np.arange(N) % 2)


Y_CASES = {
    "object array with None": lambda: np.array([0, 1] * 5 + [None, 1], dtype=object),
    "object strings with None": lambda: np.array(["a", "b"] * 5 + [None, "a"], dtype=object),
    "object strings with NaN": lambda: np.array(["a", "b"] * 5 + [np.nan, "a"], dtype=object),
    "Series with pd.NA": lambda: pd.Series(["a", "b"] * 5 + [pd.NA, "a"]),
    "string dtype with pd.NA": lambda: pd.Series(["a", "b"] * 5 + [None, "a"], dtype="string"),
    "list with None": lambda: [0, 1] * 5 + [None, 1],
}


@pytest.mark.parametrize("case", Y_CASES)
def test_a_classifier_target_with_missing_labels_is_an_error_naming_the_row(case):
    with pytest.raises(
        ValueError, match=r"^DEQClassifier: y holds 1 missing value .*the first at row 10: every sample"
    ):
        DEQClassifier(n_hidden=8).fit(_frame(), Y_CASES[case]())


@pytest.mark.parametrize(
    "y",
    [
        pd.Series(np.linspace(0, 1, N), dtype=object).where(np.arange(N) != 5, None),
        pd.Series(np.linspace(0, 1, N), dtype="Float64").where(np.arange(N) != 5, pd.NA),
    ],
    ids=["object with None", "Float64 with pd.NA"],
)
def test_a_regression_target_with_missing_values_is_an_error_not_a_nan_in_training(y):
    with pytest.raises(ValueError, match=r"^DEQRegressor: y holds 1 missing value .*the first at row 5"):
        DEQRegressor(n_hidden=8).fit(_frame(), y)


def test_complete_pandas_inputs_and_numeric_arrays_pass():
    X = _extension("Float64")[0].fillna(0.0)
    est = ExplicitClassifier(n_hidden=8, random_state=0).fit(X, pd.Series(["a", "b"] * (N // 2)))
    assert list(est.feature_names_in_) == ["a", "b", "c"] and list(est.classes_) == ["a", "b"]
    reject_missing(np.full((3, 2), np.nan), "X")  # scikit-learn checks numeric arrays for NaN itself


def test_the_mask_without_pandas_follows_pandas():
    values = np.array(
        [[1.0, None, "a"], [np.nan, np.float32("nan"), 3], [np.datetime64("NaT"), np.timedelta64(2, "s"), 0.5]],
        dtype=object,
    )
    dates = np.array(["2020-01-01", "NaT"], dtype="datetime64[D]")
    for a in (values, dates, dates - dates[0]):
        np.testing.assert_array_equal(_missing_mask(a, None), _missing_mask(a, pd))
    np.testing.assert_array_equal(
        _missing_mask(values, None), [[False, True, False], [True, True, False], [True, False, False]]
    )
