"""Fixtures for every test: those under tests/ and the docstring examples in sk_deq/."""

import os

import pytest

# Idle OpenMP threads sleep instead of spinning.  Under ``pytest -n`` a test of
# two torch threads shares the cores with the other worker, and spinning
# threads stall each other: on two busy cores the batch-invariance test of
# width 1024 on two threads took 19 s with the default policy, 12 s with this.
# Set before torch is imported (here, before any test module is collected).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session", autouse=True)
def one_blas_thread():
    """Run the whole session with one thread in each BLAS/OpenMP pool numpy and scipy use.

    The test machines are small and shared, and under ``pytest -n`` each worker
    has a core: extra BLAS threads only add synchronisation stalls, and every
    test sees the same thread count whether the run is split or not.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Run every test and docstring example on one torch thread, then restore the previous count.

    For networks of the sizes tested torch's intra-op threads only add
    synchronisation stalls (two threads made the partial_fit example 10 times
    slower).  Tests of another thread count set it themselves
    (``torch.set_num_threads``) and restore it.
    """
    import torch  # here, not at module level: collecting the tests does not import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
