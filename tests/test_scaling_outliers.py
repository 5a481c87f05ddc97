"""``input_scaling='global'`` set by a few outlying rows warns; a mean or scale beyond float64 is an error.

One entry of 1e308 sets the global factor for every row: the other rows,
divided by it, reach the network nearly as one point (training accuracy
near chance).  :func:`sk_deq._scaling.fit_input_scaling` warns when the
largest 1 % of the rows set the scale and the others spread less than
``sqrt(SIGMA_B2_MIN)`` of it about their own mean.
"""

import math
import re
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from sk_deq import DEQClassifier, ImplicitCKNystroem, ImplicitCKTransformer
from sk_deq._scaling import fit_input_scaling

DOMINATED = "input_scaling='global': the largest"


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:200].copy(), y[:200]


def _scaling_warnings(call, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(*args, **kwargs)
    return [str(w.message) for w in caught if str(w.message).startswith(DOMINATED)]


@pytest.mark.parametrize("value", [1e308, -1e308, 1e200])
def test_one_huge_entry_setting_the_scale_warns_naming_the_rows_and_their_spread(digits, value):
    X, y = digits
    X = X.copy()
    X[7, 3] = value
    messages = _scaling_warnings(DEQClassifier(n_hidden=32, random_state=0).fit, X, y)
    assert len(messages) == 1
    assert re.search(r"the largest 2 of the 200 training rows \(1 %\) hold 99\.\d+% of the squared norm", messages[0])
    assert "spread only 0 times it" in messages[0]  # 1e-200 of the scale and less: zero to three digits
    for est in (ImplicitCKTransformer(), ImplicitCKNystroem(n_components=10, random_state=0)):
        assert len(_scaling_warnings(est.fit, X)) == 1


def test_the_spread_the_warning_reports_is_that_of_the_other_rows_about_their_own_mean():
    rng = np.random.default_rng(0)
    X = 1e-3 * rng.standard_normal((300, 5))
    X[0] = 1e2
    messages = _scaling_warnings(fit_input_scaling, X, "global")
    assert len(messages) == 1
    # computed here: the largest 1 % (3 rows) by distance to the mean set aside, the others about their own mean
    centred = X - X.mean(axis=0)
    scale = math.sqrt(np.mean(np.sum(centred**2, axis=1)))
    rest = np.delete(X, np.argsort(np.sum(centred**2, axis=1))[-3:], axis=0)
    spread = math.sqrt(np.mean(np.sum((rest - rest.mean(axis=0)) ** 2, axis=1))) / scale
    reported = float(re.search(r"spread only (\S+) times it", messages[0]).group(1))
    assert reported == pytest.approx(spread, rel=1e-2)
    assert "largest 3 of the 300 training rows" in messages[0]


@pytest.mark.parametrize(
    "case",
    ["digits", "1 % of rows ten times larger", "cauchy", "constant rows and one other", "weighted digits", "tensor"],
)
def test_data_whose_rows_keep_their_spread_fit_without_the_warning(digits, case):
    X, _ = digits
    rng = np.random.default_rng(1)
    weights = None
    if case == "1 % of rows ten times larger":
        X = rng.standard_normal((1000, 10))
        X[:10] *= 10
    elif case == "cauchy":
        X = rng.standard_cauchy((1000, 10))
    elif case == "constant rows and one other":  # the other rows lose no spread: they have none
        X = np.full((100, 3), 0.1)
        X[0] = 1e6
    elif case == "weighted digits":
        weights = rng.integers(1, 5, len(X)).astype(float)
    device = None
    if case == "tensor":  # the torch statistics (a GPU's) on the CPU
        X, device = torch.from_numpy(X), torch.device("cpu")
    assert _scaling_warnings(fit_input_scaling, X, "global", weights, device=device) == []


def test_the_torch_statistics_warn_as_numpy_does(digits):
    X, _ = digits
    X = X.copy()
    X[0, 0] = 1e300
    on_host = _scaling_warnings(fit_input_scaling, X, "global")
    with_torch = _scaling_warnings(fit_input_scaling, torch.from_numpy(X), "global", device=torch.device("cpu"))
    assert len(on_host) == len(with_torch) == 1


def test_a_mean_beyond_float64_is_an_error_naming_the_overflow(digits):
    X, y = digits
    X = X.copy()
    X[:2, 3] = 1.5e308  # their sum overflows
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no numpy overflow warning on the way either
        with pytest.raises(ValueError, match="mean or the spread of the training samples overflows float64"):
            fit_input_scaling(X, "global")
        with pytest.raises(ValueError, match="overflows float64"):
            DEQClassifier(n_hidden=32).fit(X, y)
