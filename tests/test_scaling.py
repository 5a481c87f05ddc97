"""The input scaling and the data scale (``sk_deq._scaling``) against hand computations."""

import math

import numpy as np
import pytest

from sk_deq._scaling import apply_input_scaling, fit_input_scaling, squared_norms

# three samples, two features: mean (2, 1); centred rows (-1, 1), (1, -2), (0, 1)
X3 = np.array([[1.0, 2.0], [3.0, -1.0], [2.0, 2.0]])


# -- input scaling ----------------------------------------------------------------------------------


def test_global_scaling_by_hand():
    mean, scale, tau0 = fit_input_scaling(X3, "global")
    np.testing.assert_array_equal(mean, [2.0, 1.0])
    # centred squared norms 2, 5, 1: mean 8/3
    assert scale == pytest.approx(math.sqrt(8 / 3), rel=1e-15)
    assert tau0 == 1.0
    Xs = apply_input_scaling(X3, mean, scale)
    np.testing.assert_allclose(Xs, (X3 - [2.0, 1.0]) / math.sqrt(8 / 3), rtol=1e-15)
    assert np.mean(np.sum(Xs**2, axis=1)) == pytest.approx(1.0, rel=1e-14)


def test_global_scaling_with_sample_weights_by_hand():
    w = np.array([1.0, 2.0, 1.0])
    mean, scale, tau0 = fit_input_scaling(X3, "global", sample_weight=w)
    m = (1 * X3[0] + 2 * X3[1] + 1 * X3[2]) / 4  # (2.25, 0.5)
    np.testing.assert_allclose(mean, [2.25, 0.5], rtol=1e-15)
    sq = np.sum((X3 - m) ** 2, axis=1)
    assert scale == pytest.approx(math.sqrt((sq[0] + 2 * sq[1] + sq[2]) / 4), rel=1e-14)
    assert tau0 == 1.0
    # integer weights act as repeated rows
    rep_mean, rep_scale, _ = fit_input_scaling(X3[[0, 1, 1, 2]], "global")
    np.testing.assert_allclose(mean, rep_mean, rtol=1e-14)
    assert scale == pytest.approx(rep_scale, rel=1e-14)


def test_zero_weights_drop_samples():
    X = np.vstack([X3, [[100.0, -50.0]]])
    got = fit_input_scaling(X, "global", sample_weight=[1.0, 1.0, 1.0, 0.0])
    ref = fit_input_scaling(X3, "global")
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-15)
    assert got[1] == pytest.approx(ref[1], rel=1e-15)


def test_no_scaling_measures_tau0_by_hand():
    mean, scale, tau0 = fit_input_scaling(X3, "none")
    assert mean is None and scale == 1.0
    # squared norms 5, 10, 8
    assert tau0 == pytest.approx(math.sqrt(23 / 3), rel=1e-15)
    _, _, tau0_w = fit_input_scaling(X3, "none", sample_weight=[0.0, 1.0, 3.0])
    assert tau0_w == pytest.approx(math.sqrt((10 + 3 * 8) / 4), rel=1e-15)
    np.testing.assert_array_equal(apply_input_scaling(X3, mean, scale), X3)


def _overflow_safe_rms(C, w):
    """``big sqrt(mean ||c / big||^2)``, ``big = max |c|``, the squared norms as numpy sums them."""
    big = float(np.max(np.abs(C)))
    Cs = C / big
    return big * math.sqrt(float(np.average(np.einsum("ij,ij->i", Cs, Cs), weights=w)))


@pytest.mark.parametrize("seed", range(4))
def test_tau0_of_no_scaling_is_the_overflow_safe_formula_to_the_bit(seed):
    """``tau0 = big sqrt(mean ||x / big||^2)``, ``big = max |x|``, however ``fit_input_scaling`` computes it:
    negative and positive extremes, zero rows, weights and scales from 1e-100 to 1e100."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((int(rng.integers(2, 60)), int(rng.integers(1, 9)))) * 10.0 ** rng.uniform(-100, 100)
    X[0] = 0.0
    X[1, 0] = -4.0 * np.abs(X).max()  # the largest entry is negative
    w = rng.uniform(0.1, 2.0, len(X)) if seed % 2 else None
    assert fit_input_scaling(X, "none", sample_weight=w)[2] == _overflow_safe_rms(X, w)


@pytest.mark.parametrize("seed", range(6))
def test_global_scale_is_the_overflow_safe_formula_to_the_bit(seed):
    """``scale = big sqrt(mean ||(x - mean) / big||^2)``, ``big = max |x - mean|`` over every entry, however
    ``fit_input_scaling`` computes it (from each column's extremes): constant columns (where the mean may miss
    the value by an ulp), the largest deviation below or above the mean, weights, scales from 1e-100 to 1e100."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((int(rng.integers(2, 80)), int(rng.integers(1, 9)))) * 10.0 ** rng.uniform(-100, 100)
    X[:, 0] = 0.1 * 10.0 ** rng.uniform(-100, 100)  # a constant column: its deviations are rounding only
    X[1, -1] = (4.0 if seed % 3 else -4.0) * np.abs(X).max()
    w = rng.uniform(0.1, 2.0, len(X)) if seed % 2 else None
    mean = np.average(X, axis=0, weights=w)
    got_mean, scale, _ = fit_input_scaling(X, "global", sample_weight=w)
    np.testing.assert_array_equal(got_mean, mean)
    assert scale == _overflow_safe_rms(X - mean, w)


@pytest.mark.parametrize("seed", range(6))
def test_largest_deviation_from_column_extremes_is_exact(seed):
    """``max |x - c|`` from each column's extremes equals numpy's over the centred copy, to the bit: centres
    inside, below and above a column's values, a constant column, several blocks of rows."""
    from sk_deq._scaling import _NumpyRows

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((int(rng.integers(1, 50)), int(rng.integers(1, 7)))) * 10.0 ** rng.uniform(-50, 50)
    X[:, 0] = X[0, 0]
    c = np.average(X, axis=0) + rng.choice([-3.0, 0.0, 3.0], X.shape[1]) * np.abs(X).max() * rng.uniform(
        size=X.shape[1]
    )
    rows = _NumpyRows(X, None)
    rows.blocks = [slice(i, i + 3) for i in range(0, len(X), 3)]
    assert rows.abs_max(c) == float(np.max(np.abs(X - c)))
    assert rows.abs_max(0.0) == float(np.max(np.abs(X)))


@pytest.mark.parametrize("factor", [1e-150, 1e200])
def test_scaling_of_tiny_and_huge_inputs_does_not_overflow(factor):
    mean, scale, _ = fit_input_scaling(X3 * factor, "global")
    assert scale == pytest.approx(factor * math.sqrt(8 / 3), rel=1e-14)
    np.testing.assert_allclose(
        apply_input_scaling(X3 * factor, mean, scale), apply_input_scaling(X3, [2, 1], math.sqrt(8 / 3))
    )


def test_input_scaling_errors():
    with pytest.raises(ValueError, match="identical"):
        fit_input_scaling(np.ones((4, 3)), "global")
    with pytest.raises(ValueError, match="identical"):
        fit_input_scaling(X3, "global", sample_weight=[0.0, 1.0, 0.0])  # one sample with positive weight
    with pytest.raises(ValueError, match="are zero"):
        fit_input_scaling(np.zeros((4, 3)), "none")
    with pytest.raises(ValueError, match="too large for the theory"):
        fit_input_scaling(X3 * 1e151, "none")
    with pytest.raises(ValueError, match=r"input_scaling must be one of \('global', 'none'\), got 'standard'"):
        fit_input_scaling(X3, "standard")


# -- squared norms ----------------------------------------------------------------------------------


def test_squared_norms():
    np.testing.assert_array_equal(squared_norms(X3), [5.0, 10.0, 8.0])
    assert squared_norms(np.zeros((0, 2))).shape == (0,)
    assert np.isfinite(squared_norms([[1e153, 1e153]])).all()


def test_squared_norms_overflow_is_a_clear_error():
    X = np.array([[1.0, 2.0], [3e154, 0.0]])
    with pytest.raises(
        ValueError, match=r"samples of Y overflow float64 \(largest \|value\| 3e\+154, after any input scaling\)"
    ):
        squared_norms(X, "Y")
