"""Fixtures of the tests of sk_deq.nn."""

import pytest
import torch


def _readout_problem(n=300, m=40, k=4, seed=0, dtype=torch.float64, shift=0.5, separation=0.3):
    g = torch.Generator().manual_seed(seed)
    # overlapping classes (separation 0.3), as real data; 1.0 makes them nearly separable
    centres = separation * torch.randn(k, m, generator=g, dtype=torch.float64)
    y = torch.randint(0, k, (n,), generator=g)
    # features with a common mean and unequal scales: badly conditioned, as random features are
    Z = centres[y] + torch.randn(n, m, generator=g, dtype=torch.float64)
    Z = (Z * torch.logspace(-2, 0, m, dtype=torch.float64) + shift).to(dtype)
    w = torch.rand(n, generator=g, dtype=torch.float64) * 2
    return Z, y, w * (n / w.sum())


@pytest.fixture(scope="session")
def readout_problem():
    """``readout_problem(n=300, m=40, k=4, ...)``: features ``Z``, labels ``y`` and sample weights ``w`` of a readout
    problem with overlapping classes and badly conditioned features (a common mean, scales from 1e-2 to 1)."""
    return _readout_problem
