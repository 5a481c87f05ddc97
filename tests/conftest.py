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
