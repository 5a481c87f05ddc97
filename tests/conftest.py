"""Fixtures shared by the test modules."""

import pytest


@pytest.fixture
def one_torch_thread():
    """Run the test on one torch thread, then restore the previous count.

    The test machines are small and shared: for networks of the sizes tested
    torch's intra-op threads only add synchronisation stalls.  Modules that
    train or solve with torch use it for every test
    (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``).
    """
    import torch  # here, not at module level: collecting the tests does not import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def dask_client():
    """A ``distributed`` client of a two-process cluster on the loopback interface, one thread per worker.

    Module-scoped: one cluster per test module that uses it (mark those tests
    ``heavy``).  Skips where ``distributed`` is not installed.
    """
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
    )
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()
