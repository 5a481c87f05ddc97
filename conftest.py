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


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread_for_the_session():
    """One torch thread from the start of the session, module and session fixtures included.

    A module fixture runs before the function-scoped :func:`one_torch_thread`
    of its first test: without this one it would fit and predict on all the
    machine's cores, and a test comparing its outputs with a one-thread
    predict would compare thread counts, which the package does not promise
    bitwise (float32 outputs may differ in the last bits; seen on a 16-core
    machine).
    """
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


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


@pytest.fixture(scope="session", autouse=True)
def cpu_for_the_session():
    """Pin ``device='auto'`` to the CPU from the start of the session, module and session fixtures included.

    A module fixture runs before the function-scoped
    :func:`cpu_unless_gpu_marked` of its first test: without this pin, a
    module fixture that fits with ``device='auto'`` would fit on CUDA where
    there is one, and its tests would compare CUDA's outputs with the CPU's
    (seen on a GPU host: a DEQ's predictions 2.3e-7 apart "with the batch").
    The ``gpu`` module names its device explicitly.
    """
    from sk_deq._runtime import DEVICE_ENV

    with pytest.MonkeyPatch.context() as pin:
        pin.setenv(DEVICE_ENV, "cpu")
        yield


@pytest.fixture(autouse=True)
def cpu_unless_gpu_marked(request):
    """Pin ``device='auto'`` to the CPU in every test and docstring example but those marked ``gpu``.

    The estimators default to ``device='auto'``, which picks CUDA where it is
    available, and many tests assume the CPU (numpy views of weights, bitwise
    batch invariance, patched memory checks).  ``SK_DEQ_DEVICE=cpu`` (see
    :mod:`sk_deq._runtime`) keeps them there on any machine, subprocesses
    included; the ``gpu`` module (tests/test_gpu.py) compares CUDA with the
    CPU explicitly.  Tests that pretend CUDA exists remove the variable
    themselves.

    The pin has its own ``MonkeyPatch``, not the test's ``monkeypatch``
    fixture: a test that calls ``monkeypatch.undo()`` to end its own patches
    would otherwise remove the pin too, and its later calls would run on
    CUDA where there is one (seen on a GPU machine: a bitwise comparison of
    CPU features with CUDA's failed).
    """
    from sk_deq._runtime import DEVICE_ENV

    with pytest.MonkeyPatch.context() as pin:
        if request.node.get_closest_marker("gpu") is None:
            pin.setenv(DEVICE_ENV, "cpu")
        else:
            pin.delenv(DEVICE_ENV, raising=False)
        yield
