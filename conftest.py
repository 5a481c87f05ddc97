"""Fixtures for every test: those under tests/ and the docstring examples in sk_deq/."""

import pytest


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
