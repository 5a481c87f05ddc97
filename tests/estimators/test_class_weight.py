"""``class_weight``: every weight of a dict checked in one place (a finite, non-negative number, an error naming the
class and the weight otherwise), and ``'balanced'`` when a class's samples all weigh zero."""

import warnings

import numpy as np
import pytest

from sk_deq import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier
from sk_deq._validation import check_class_weight
from sk_deq.estimators._classifier import class_weighted

CLASSIFIERS = (DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = np.arange(60) % 3
    return X + y[:, None], y


BAD = [
    (-1.0, "the weight -1.0, which is negative"),
    (-2, "the weight -2, which is negative"),
    (float("nan"), "the weight nan, which is not finite"),
    (float("inf"), "the weight inf, which is not finite"),
    (np.float32("-inf"), r"the weight np.float32\(-inf\), which is not finite"),
    ("2", "the weight '2', which is not a number"),
    (None, "the weight None, which is not a number"),
    ([1.0], r"the weight \[1.0\], which is not a number"),
    (1 + 2j, r"the weight \(1\+2j\), which is not a number"),
    (True, "the weight True, which is a boolean, not a number"),
]


@pytest.mark.parametrize("weight,message", BAD, ids=[repr(w) for w, _ in BAD])
@pytest.mark.parametrize("cls", CLASSIFIERS)
def test_a_bad_weight_is_an_error_naming_the_class_and_the_weight(data, cls, weight, message):
    X, y = data
    with pytest.raises(ValueError, match=rf"^{cls.__name__}: class_weight gives class 1 {message}; class weights"):
        cls(n_hidden=8, class_weight={0: 1.0, 1: weight, 2: 1.0}).fit(X, y)
    with pytest.raises(ValueError, match=rf"^{cls.__name__}: class_weight gives class 1 {message}"):
        cls(n_hidden=8, class_weight={0: 1.0, 1: weight}).partial_fit(X, y, classes=[0, 1, 2])


def test_string_labels_are_named_as_given():
    with pytest.raises(ValueError, match=r"class_weight gives class 'cat' the weight -0.5, which is negative"):
        check_class_weight({"dog": 1.0, "cat": -0.5}, "ExplicitClassifier")


@pytest.mark.parametrize("weights", [{0: np.float32(2.0), 1: np.int64(1)}, {0: 2, 1: 1}, {0: 0.0, 1: 1e300}])
def test_numbers_of_any_real_type_are_weights(weights):
    check_class_weight(weights, "ExplicitClassifier")
    check_class_weight("balanced", "ExplicitClassifier")
    check_class_weight(None, "ExplicitClassifier")


def test_numpy_weights_give_the_model_of_python_floats(data):
    X, y = data
    a = ExplicitClassifier(n_hidden=8, random_state=0, class_weight={0: np.float32(2.0), 1: np.int64(1)}).fit(X, y)
    b = ExplicitClassifier(n_hidden=8, random_state=0, class_weight={0: 2.0, 1: 1.0}).fit(X, y)
    np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))


def test_balanced_with_a_class_of_zero_total_weight_gives_it_weight_zero(data):
    X, y = data
    classes = np.unique(y)
    sw = np.where(y == 0, 0.0, 1.0 + (np.arange(len(y)) % 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no division by zero on the way
        weight = class_weighted("balanced", classes, y, y, sw)
    # scikit-learn's 'balanced' weight of class k: total weight / (number of classes x weight of class k)
    per_class = np.array([0.0] + [sw.sum() / (3 * sw[y == k].sum()) for k in (1, 2)])
    expected = sw * per_class[y]
    np.testing.assert_allclose(weight / weight.max(), expected / expected.max(), rtol=1e-15)
    est = ExplicitClassifier(n_hidden=8, random_state=0, class_weight="balanced").fit(X, y, sample_weight=sw)
    assert list(est.classes_) == [0, 1, 2] and np.isfinite(est.decision_function(X)).all()
