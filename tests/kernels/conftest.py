"""Fixtures of the kernel tests."""

import pytest


@pytest.fixture(scope="session")
def correlated_rows(unit_rows):
    """``correlated_rows(n=10, p=8, seed=1)``: rows at ``tau0 = 1`` with correlations near 1 and -1 and a large norm."""

    def awkward(X, rng):
        X[1] = 0.95 * X[0] + 0.05 * X[2]  # correlation ~0.99
        X[3] = -0.9 * X[4] + 0.1 * X[5]  # correlation ~-0.97
        X[6] *= 1.8  # a large norm

    return lambda n=10, p=8, seed=1: unit_rows(n, p, seed, then=awkward)
