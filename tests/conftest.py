"""Fixtures shared by the test modules."""

import pytest


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
