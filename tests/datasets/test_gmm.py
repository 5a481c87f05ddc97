"""The paper's Gaussian mixture (sk_deq.datasets.make_gaussian_mixture)."""

import math

import numpy as np
import pytest

from sk_deq.datasets import make_gaussian_mixture


def test_paper_mixture_moments():
    n, p = 4000, 400
    X, y, stats = make_gaussian_mixture(n, p, random_state=0, shuffle=False, return_stats=True)
    assert X.shape == (n, p) and np.bincount(y).tolist() == [n // 2, n // 2]
    np.testing.assert_array_equal(stats.means[0][:9], [8, 0, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(stats.means[1][:9], [0, 0, 0, 0, 0, 0, 0, 0, 8])
    assert stats.covariances[1, 0] == pytest.approx(1 + 8 / math.sqrt(p))
    Z = math.sqrt(p) * X - stats.means[y]
    for a in (0, 1):
        var = Z[y == a].var(axis=0).mean()
        assert var == pytest.approx(stats.covariances[a, 0], rel=0.01)
        assert np.abs(Z[y == a].mean(axis=0)).max() < 5 * math.sqrt(stats.covariances[a, 0] / (n / 2))
    # ||x||^2 = (||mu||^2 + tr C_a) / p on average
    sq = np.sum(X**2, axis=1)
    for a in (0, 1):
        assert sq[y == a].mean() == pytest.approx((64 + p * stats.covariances[a, 0]) / p, rel=0.01)


def test_seed_shuffle_weights_and_custom_moments():
    X1, y1 = make_gaussian_mixture(100, 30, 3, random_state=5)
    X2, y2 = make_gaussian_mixture(100, 30, 3, random_state=5)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    assert not np.all(np.diff(y1) >= 0)  # shuffled
    _, y = make_gaussian_mixture(101, 30, 3, weights=[0.5, 0.3, 0.2], random_state=0)
    assert np.bincount(y).tolist() == [51, 30, 20]
    means = np.zeros((2, 5))
    X, y, st = make_gaussian_mixture(20000, 5, means=means, covariances=[1.0, 4.0], random_state=0, return_stats=True)
    assert X[y == 1].var(axis=0).mean() * 5 == pytest.approx(4.0, rel=0.03)
    assert st.covariances.shape == (2, 5)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(n_samples=10, n_features=8, n_classes=3), "at least 8"),
        (dict(n_samples=2, n_features=30, n_classes=3), "smaller than n_classes"),
        (dict(n_samples=10, n_features=30, n_classes=2, weights=[1.0]), "weights"),
        (dict(n_samples=10, n_features=30, n_classes=2, means=np.zeros((3, 30))), "means must have shape"),
        (dict(n_samples=10, n_features=30, n_classes=2, covariances=[1.0, -1.0]), "non-negative"),
        (dict(n_samples=10, n_features=0), "n_features"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_gaussian_mixture(**kwargs)
