"""The corrected resampled t-test (sk_deq.model_selection.corrected_resampled_ttest) against independent computations."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from sk_deq.model_selection import CorrectedTTestResult, corrected_resampled_ttest


def test_ttest_matches_an_independent_computation():
    rng = np.random.default_rng(0)
    a = 0.9 + 0.02 * rng.standard_normal(10)
    b = a - 0.01 + 0.015 * rng.standard_normal(10)
    n_train, n_test = 900, 100
    res = corrected_resampled_ttest(a, b, n_train, n_test)
    assert isinstance(res, CorrectedTTestResult)
    J, ratio = 10, n_test / n_train
    # the corrected statistic is the ordinary paired t divided by sqrt(1 + J n_test / n_train)
    paired = stats.ttest_rel(a, b)
    assert res.statistic == pytest.approx(paired.statistic / math.sqrt(1 + J * ratio), rel=1e-12)
    assert res.df == J - 1 == int(paired.df)
    assert res.pvalue == pytest.approx(2 * stats.t.sf(abs(res.statistic), J - 1), rel=1e-12)
    # and the formula written out
    d = a - b
    se = math.sqrt((1 / J + ratio) * np.var(d, ddof=1))
    assert res.mean_difference == pytest.approx(d.mean(), rel=1e-14)
    assert res.std_difference == pytest.approx(np.std(d, ddof=1), rel=1e-12)
    assert res.standard_error == pytest.approx(se, rel=1e-12)
    assert res.statistic == pytest.approx(d.mean() / se, rel=1e-12)
    assert res.test_train_ratio == pytest.approx(ratio) and res.n_folds == J


def test_ttest_is_more_conservative_than_the_paired_test():
    rng = np.random.default_rng(1)
    for _ in range(20):
        a = rng.normal(0.8, 0.02, 5)
        b = rng.normal(0.79, 0.02, 5)
        res = corrected_resampled_ttest(a, b, 800, 200)
        paired = stats.ttest_rel(a, b)
        assert abs(res.statistic) < abs(paired.statistic)
        assert res.pvalue > paired.pvalue
    # a ratio of test to training sizes of zero gives back the ordinary paired test
    res = corrected_resampled_ttest(a, b, 1e12, 1e-12)
    assert res.pvalue == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-6)


def test_ttest_one_sided_alternatives_and_reversal():
    a, b = [0.9, 0.92, 0.91, 0.95], [0.88, 0.9, 0.91, 0.9]
    two = corrected_resampled_ttest(a, b, 300, 100)
    greater = corrected_resampled_ttest(a, b, 300, 100, alternative="greater")
    less = corrected_resampled_ttest(a, b, 300, 100, alternative="less")
    assert greater.pvalue == pytest.approx(two.pvalue / 2) and less.pvalue == pytest.approx(1 - two.pvalue / 2)
    rev = corrected_resampled_ttest(b, a, 300, 100)
    assert two.reversed().statistic == pytest.approx(rev.statistic) and two.reversed().pvalue == pytest.approx(
        rev.pvalue
    )
    assert greater.reversed().alternative == "less"
    assert two.significant(0.5) is (two.pvalue < 0.5)
    assert json.loads(json.dumps(two.to_dict()))["df"] == 3


def test_ttest_per_fold_sizes_use_their_means():
    a, b = [0.9, 0.92, 0.91], [0.88, 0.9, 0.91]
    res = corrected_resampled_ttest(a, b, [100, 101, 102], [34, 33, 32])
    assert res.test_train_ratio == pytest.approx(33 / 101)


def test_ttest_zero_variance():
    same = corrected_resampled_ttest([0.9, 0.8, 0.7], [0.9, 0.8, 0.7], 10, 5)
    assert same.statistic == 0.0 and same.pvalue == 1.0 and same.mean_difference == 0.0
    up = corrected_resampled_ttest([0.9, 0.8, 0.7], [0.8, 0.7, 0.6], 10, 5)  # equal non-zero differences
    assert up.statistic == math.inf and up.pvalue == 0.0
    down = corrected_resampled_ttest([0.8, 0.7, 0.6], [0.9, 0.8, 0.7], 10, 5, alternative="greater")
    assert down.statistic == -math.inf and down.pvalue == 1.0


def test_ttest_nan_scores_give_nan():
    res = corrected_resampled_ttest([0.9, np.nan, 0.7], [0.9, 0.8, 0.6], 10, 5)
    assert math.isnan(res.statistic) and math.isnan(res.pvalue) and not res.significant()


@pytest.mark.parametrize(
    "args,kwargs,message",
    [
        (([0.9], [0.8], 10, 5), {}, "at least two folds"),
        (([0.9, 0.8], [0.8], 10, 5), {}, "one score per fold"),
        (([[0.9, 0.8]], [[0.8, 0.7]], 10, 5), {}, "1-D"),
        (([0.9, 0.8], [0.8, 0.7], 0, 5), {}, "n_train must be positive"),
        (([0.9, 0.8], [0.8, 0.7], 10, [5, 5, 5]), {}, "n_test must be one number or one per fold"),
        (([0.9, 0.8], [0.8, 0.7], 10, 5), {"alternative": "bigger"}, "alternative must be one of"),
    ],
)
def test_ttest_bad_inputs(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        corrected_resampled_ttest(*args, **kwargs)


def test_ttest_rejects_scores_that_are_not_numbers():
    with pytest.raises(ValueError, match="scores_a and scores_b must be numbers"):
        corrected_resampled_ttest(["a", "b"], [1, 3], 10, 5)
