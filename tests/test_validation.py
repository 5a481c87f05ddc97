"""Validation in one place (``sk_deq._validation``): samples and scalars against hand computations."""

import numpy as np
import pytest
from scipy import sparse

from sk_deq._validation import (
    EXPLICIT_KERNELS,
    KERNELS,
    check_kernel,
    check_samples,
    check_sigma_a2,
    check_sigma_b2,
    check_tau0,
)


# -- samples ----------------------------------------------------------------------------------------


def test_check_samples_returns_a_float64_2d_array():
    X = check_samples([[1, 2], [3, 4]])
    assert X.dtype == np.float64 and X.shape == (2, 2)
    Y = check_samples(np.ones((3, 2), dtype=np.float32), "Y", n_features=2)
    assert Y.dtype == np.float64


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (np.array([[np.nan, 1.0]]), ValueError, "Input Y contains NaN"),
        (np.array([[np.inf, 1.0]]), ValueError, "Input Y contains infinity"),
        (np.array([1.0, 2.0]), ValueError, "Expected 2D array"),
        (np.zeros((2, 2, 2)), ValueError, "dim 3.*MyKernel"),
        (np.zeros((0, 3)), ValueError, "0 sample.*MyKernel"),
        (sparse.csr_matrix(np.eye(3)), TypeError, "Sparse data was passed for Y"),
        ([["a", "b"]], ValueError, "could not convert string"),
    ],
    ids=["nan", "inf", "1d", "3d", "empty", "sparse", "strings"],
)
def test_check_samples_messages(bad, error, message):
    with pytest.raises(error, match=message):
        check_samples(bad, "Y", caller="MyKernel")


def test_check_samples_feature_mismatch_names_both_arrays_and_the_caller():
    with pytest.raises(ValueError, match=r"^Y has 3 features, but X has 4 \(MyKernel\): they must match\.$"):
        check_samples(np.ones((2, 3)), "Y", n_features=4, caller="MyKernel")
    with pytest.raises(ValueError, match=r"^Y has 3 features, but X has 4: they must match\.$"):
        check_samples(np.ones((2, 3)), "Y", n_features=4)


# -- scalars ----------------------------------------------------------------------------------------


def test_check_kernel():
    for k in KERNELS:
        assert check_kernel(k) == k
    assert check_kernel("ntk", EXPLICIT_KERNELS) == "ntk"
    with pytest.raises(ValueError, match=r"^kernel must be 'ck', 'feature' or 'ntk', got 'rbf'\.$"):
        check_kernel("rbf")
    with pytest.raises(ValueError, match=r"^kernel must be 'ck' or 'ntk', got 'feature'\.$"):
        check_kernel("feature", EXPLICIT_KERNELS)
    with pytest.raises(ValueError, match="got 'CK'"):  # kernel names are case-sensitive
        check_kernel("CK")
    with pytest.raises(ValueError, match="got None"):
        check_kernel(None)


def test_check_sigma_a2():
    assert check_sigma_a2(0.2) == 0.2
    value = check_sigma_a2(np.float32(0.5))
    assert value == 0.5 and type(value) is float
    for bad in (0, 1, 1.5, -0.1, np.nan, np.inf):
        with pytest.raises(ValueError, match=r"open interval \(0, 1\)"):
            check_sigma_a2(bad)
    for bad in (None, "strong", [0.2, 0.3]):
        with pytest.raises(TypeError, match="sigma_a2 must be a real number"):
            check_sigma_a2(bad)


def test_check_sigma_b2():
    assert check_sigma_b2(None, 0.3) == pytest.approx(0.7)
    assert check_sigma_b2(2.0, 0.3) == 2.0
    for bad in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="sigma_b2 must be positive and finite"):
            check_sigma_b2(bad, 0.3)


def test_check_tau0():
    assert check_tau0(2) == 2.0 and type(check_tau0(np.float32(0.5))) is float
    for bad in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match=r"tau0 must be positive and finite.*mean squared sample norm"):
            check_tau0(bad)
    for bad in (None, "one"):
        with pytest.raises(TypeError, match="tau0 must be a real number"):
            check_tau0(bad)
