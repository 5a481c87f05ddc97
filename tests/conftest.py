"""Fixtures shared by the test modules: data sets, the test rows of the kernels, and helpers that compare outputs."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def blobs():
    """150 samples of three Gaussian blobs in 5 features (``make_blobs``, ``random_state=0``): ``X, y``."""
    from sklearn.datasets import make_blobs

    X, y = make_blobs(n_samples=150, centers=3, n_features=5, random_state=0)
    return X, y


@pytest.fixture(scope="module")
def digits():
    """scikit-learn's 1,797 digits split 70/30, stratified (``random_state=0``): ``X_train, X_test, y_train, y_test``."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    return train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)


def _unit_rows(n, p, seed, *, spread=None, scale="mean", then=None):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    if spread is not None:
        X = X * rng.uniform(*spread, size=(n, 1))
    X = X / (np.sqrt((X * X).sum(1).mean()) if scale == "mean" else np.sqrt(p))
    if then is None:
        return X
    out = then(X, rng)
    return X if out is None else out


@pytest.fixture(scope="session")
def unit_rows():
    """``unit_rows(n, p, seed)``: test rows at the data scale the kernels are centred on.

    ``n`` Gaussian rows of ``p`` features drawn from ``numpy.random.default_rng(seed)``; with
    ``spread=(low, high)`` each row's norm multiplied by a uniform factor (drawn after the rows);
    scaled to a mean squared norm of exactly one (``scale='mean'``, ``tau0 = 1``) or divided by
    ``sqrt(p)`` (``scale='features'``, one on average).  ``then(X, rng)`` adds the rows a test
    needs (duplicates, zero rows, correlations near one) with the same generator: it edits ``X`` in
    place, or returns what the test takes instead.
    """
    return _unit_rows


def _rel_error(A, B):
    return float(np.max(np.abs(np.asarray(A) - B)) / np.max(np.abs(B)))


@pytest.fixture(scope="session")
def rel_error():
    """``rel_error(A, B)``: the largest absolute difference of ``A`` from ``B``, relative to the largest entry of ``B``."""
    return _rel_error


def _outputs(est, X):
    if type(est).__name__.endswith("Regressor"):
        return np.asarray(est.predict(X)).reshape(len(X), -1)
    return np.hstack([est.decision_function(X), est.predict_proba(X)])


@pytest.fixture(scope="session")
def outputs():
    """``outputs(est, X)``: a regressor's predictions as a column per target; a classifier's decision function and
    probabilities side by side."""
    return _outputs


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
