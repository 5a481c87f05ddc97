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


@pytest.fixture
def count_host_syncs():
    """A context manager factory counting the torch operations that make the host wait for the device.

    ``with count_host_syncs() as syncs: ...`` then ``syncs.total`` (and
    ``syncs.by_op``, a Counter).  Counted: scalar reads (``item()``, ``bool()``,
    ``int()``, ``float()`` of a tensor: ``aten._local_scalar_dense``,
    ``aten.is_nonzero``), ``aten.equal``, outputs of data-dependent size
    (``nonzero``, ``masked_select``, ``unique``, boolean-mask indexing) and
    copies from a GPU to the CPU.  On the CPU the last kind does not exist
    (``.cpu()`` of a CPU tensor dispatches nothing), so a CPU count is that of
    the scalar reads and data-dependent shapes; on CUDA it is complete.
    """
    import collections

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    reads = {aten._local_scalar_dense, aten.is_nonzero, aten.equal, aten.nonzero, aten.masked_select, aten._unique2}

    def off_device(t):
        return isinstance(t, torch.Tensor) and t.device.type != "cpu"

    def syncs(func, args, kwargs) -> bool:
        packet = func.overloadpacket
        if packet in reads:
            return True
        if packet is aten.index and len(args) > 1:
            return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] or ())
        if packet is aten._to_copy:
            return off_device(args[0]) and torch.device(kwargs.get("device") or args[0].device).type == "cpu"
        if packet is aten.copy_:
            return args[0].device.type == "cpu" and off_device(args[1])
        return False

    class HostSyncs(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.by_op = collections.Counter()

        @property
        def total(self) -> int:
            return sum(self.by_op.values())

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if syncs(func, args, kwargs):
                self.by_op[str(func.overloadpacket)] += 1
            return func(*args, **kwargs)

    return HostSyncs
