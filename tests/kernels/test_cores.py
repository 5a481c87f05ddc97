"""The exact kernels on several cores: the same numbers as in serial, and ``n_jobs`` honoured.

Timings are not asserted here (the machine is shared): the speed-up is
measured by ``python -m benchmarks.kernels cores``.
"""

import threading

import joblib
import numpy as np
import pytest
from joblib import Parallel, delayed

from sk_deq import ImplicitCKNystroem, ImplicitCKTransformer
from sk_deq.kernels import ImplicitKernelEngine, implicit_kernel
from sk_deq.kernels._workers import map_unordered
from sk_deq.kernels.engine import kernel_workers


@pytest.fixture(scope="module")
def rows(unit_rows):
    """``rows(n=300, p=10, seed=0)``: rows at ``tau0 = 1``, norms spread over [0.6, 1.5], a duplicate across blocks."""

    def duplicate(X, rng):
        X[7] = X[3]  # a duplicate across blocks

    return lambda n=300, p=10, seed=0: unit_rows(n, p, seed, spread=(0.6, 1.5), then=duplicate)


@pytest.mark.parametrize("act", ["tanh", "sigmoid", "gelu", "silu", "relu"])
@pytest.mark.parametrize("kernel", ["ck", "ntk"])
def test_parallel_blocks_equal_serial(act, kernel, rows):
    X = rows()
    Y = 1.2 * rows(90, seed=1)
    for args in ((X,), (X, Y)):
        serial = implicit_kernel(*args, activation=act, kernel=kernel, tau0=1.0, block_size=64, n_jobs=1)
        for n_jobs in (2, -1, None):
            par = implicit_kernel(*args, activation=act, kernel=kernel, tau0=1.0, block_size=64, n_jobs=n_jobs)
            np.testing.assert_allclose(par, serial, rtol=0, atol=1e-12 * np.abs(serial).max())


def test_feature_kernel_of_the_transformer_equals_serial(rows):
    X = rows(200)
    ref = ImplicitCKTransformer("softplus", kernel="feature", block_size=48, n_jobs=1).fit(X)
    par = ImplicitCKTransformer("softplus", kernel="feature", block_size=48).fit(X)
    np.testing.assert_allclose(par.transform(X[:70]), ref.transform(X[:70]), rtol=0, atol=1e-12)


def test_kernel_workers_resolves_n_jobs():
    assert kernel_workers(1) == 1
    assert kernel_workers(None) == kernel_workers(-1) == joblib.cpu_count()
    assert kernel_workers(3) == 3
    with joblib.parallel_config(n_jobs=1):
        assert kernel_workers(None) == 1
    with joblib.parallel_config(n_jobs=3):
        assert kernel_workers(None) == 3
        assert kernel_workers(1) == 1
    # inside a joblib worker the outer Parallel already uses the cores
    assert Parallel(n_jobs=2, prefer="threads")(delayed(kernel_workers)() for _ in range(2)) == [1, 1]
    with pytest.raises(ValueError, match="n_jobs"):
        kernel_workers(0)


class _CountingTime:
    """joblib's ``time`` module with its sleeps counted (joblib's result loop polls in sleeps of 10 ms)."""

    def __init__(self):
        import time

        self._module, self.sleeps = time, 0

    def __getattr__(self, name):
        return getattr(self._module, name)

    def sleep(self, seconds):
        self.sleeps += 1
        self._module.sleep(seconds)


def _slow_square(x, started: list, release: threading.Event):
    started.append(threading.current_thread().name)
    release.wait(0.02)
    return x * x


def test_threads_are_waited_on_not_polled(monkeypatch, rows):
    """On the default backend the tasks run on a pool of sk_deq's and the caller blocks on them: joblib's
    result loop, which sleeps 10 ms whenever no result is ready, is not used; under another active
    backend the tasks go to joblib."""
    import joblib.parallel

    clock = _CountingTime()
    monkeypatch.setattr(joblib.parallel, "time", clock)
    started: list = []
    tasks = [(x, started, threading.Event()) for x in range(6)]
    assert sorted(map_unordered(_slow_square, tasks, 2)) == [x * x for x in range(6)]
    assert clock.sleeps == 0
    assert len(started) == 6 and all(name.startswith("sk_deq-blocks") for name in started)
    X = rows(160)  # the engine's blocks and the Nystroem transform's rows go the same way
    eng = ImplicitKernelEngine("tanh", 0.2, 1.0)
    eng.kernel(eng.prepare(X), block_size=32)
    ImplicitCKNystroem("tanh", n_components=20, block_size=40, random_state=0).fit(X).transform(X)
    assert clock.sleeps == 0
    with joblib.parallel_config(backend="loky"):
        out = sorted(map_unordered(pow, [(x, 2) for x in range(6)], 2))
    assert out == [x * x for x in range(6)]
    # the same joblib path polls: the count would catch the pool's loss
    out = Parallel(n_jobs=2, prefer="threads", return_as="generator_unordered")(
        delayed(_slow_square)(*t) for t in tasks
    )
    assert sorted(out) == [x * x for x in range(6)] and clock.sleeps > 0


def _fail_or_wait(x, gate: threading.Event, ran: list):
    ran.append(x)
    if x == 0:
        raise ValueError("block 0 failed")
    gate.wait(0.05)
    return x


def test_a_failed_task_raises_and_cancels_the_rest():
    ran: list = []
    gate = threading.Event()
    with pytest.raises(ValueError, match="block 0 failed"):
        for _ in map_unordered(_fail_or_wait, [(x, gate, ran) for x in range(40)], 2):
            pass
    assert 0 in ran and len(ran) < 40  # the tasks not started when it raised never ran


def _record_threads(monkeypatch, dual):
    seen = []
    block = type(dual).block

    def recording(self, R, C, kernel, **kw):
        seen.append(threading.get_ident())
        return block(self, R, C, kernel, **kw)

    monkeypatch.setattr(type(dual), "block", recording)
    return seen


@pytest.mark.parametrize("n_jobs", [1, 2, None])
def test_blocks_run_where_n_jobs_says(monkeypatch, n_jobs, rows):
    eng = ImplicitKernelEngine("tanh", 0.2, 1.0)
    seen = _record_threads(monkeypatch, eng.dual)
    S = eng.prepare(rows(120))
    eng.kernel(S, block_size=32, n_jobs=n_jobs)
    assert len(seen) == 10  # 4 row blocks: the upper triangle's pairs
    main = threading.get_ident()
    if kernel_workers(n_jobs) == 1:
        assert set(seen) == {main}
    else:  # worker threads, never the caller's
        assert main not in seen


def test_single_block_and_context_stay_serial(monkeypatch, rows):
    eng = ImplicitKernelEngine("gelu", 0.2, 1.0)
    seen = _record_threads(monkeypatch, eng.dual)
    S = eng.prepare(rows(60))
    eng.kernel(S, n_jobs=2)  # one block: no threads started
    with joblib.parallel_config(n_jobs=1):
        eng.kernel(S, block_size=16)
    assert set(seen) == {threading.get_ident()} and len(seen) == 1 + 10


def test_nystroem_passes_n_jobs_to_the_landmark_kernels(monkeypatch, rows):
    asked = []
    kernel = ImplicitKernelEngine.kernel

    def recording(self, *args, **kwargs):
        asked.append(kwargs.get("n_jobs", "default"))
        return kernel(self, *args, **kwargs)

    monkeypatch.setattr(ImplicitKernelEngine, "kernel", recording)
    X = rows(80)
    ImplicitCKNystroem("tanh", n_components=20, random_state=0, n_jobs=1).fit(X)
    assert asked and set(asked) == {1}


def test_process_backend_sends_the_blocks_back(rows):
    """Workers of another process cannot write into the caller's array: their blocks come back."""
    X = rows(100)
    serial = implicit_kernel(X, activation="tanh", kernel="ntk", tau0=1.0, block_size=32, n_jobs=1)
    with joblib.parallel_config(backend="loky", n_jobs=2):
        par = implicit_kernel(X, activation="tanh", kernel="ntk", tau0=1.0, block_size=32)
    np.testing.assert_allclose(par, serial, rtol=0, atol=1e-12 * np.abs(serial).max())
    np.testing.assert_array_equal(par, par.T)


@pytest.mark.parametrize("blas_threads", [1, 2])
def test_serial_equals_parallel_bitwise_whatever_the_blas_threads(blas_threads):
    """The inner products of every block run on one BLAS thread, in serial too: a BLAS splits a
    product among its threads by shape and may then sum an entry in another order (seen at 3e-16
    with OpenBLAS on AVX-512), so only one thread gives the same bits for ``n_jobs=1`` and ``n_jobs=2``."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(3)
    X = rng.standard_normal((600, 784)) / np.sqrt(784)  # 784 features: 2 BLAS threads sum some entries otherwise
    eng = ImplicitKernelEngine("tanh", 0.2, 1.0)
    S = eng.prepare(X)
    with threadpool_limits(limits=blas_threads, user_api="blas"):
        serial = eng.kernel(S, block_size=512, n_jobs=1)
    par = eng.kernel(S, block_size=512, n_jobs=2)
    np.testing.assert_array_equal(par, serial)


@pytest.mark.parametrize("act", ["tanh", "relu", "gelu"])
def test_the_per_sample_preparation_runs_on_one_blas_thread(act, rows):
    """A multithreaded BLAS call leaves its threads spinning for a while after it returns, on the cores that
    the kernel's workers take next; the preparation's small products run on one thread instead."""
    from threadpoolctl import threadpool_info, threadpool_limits

    eng = ImplicitKernelEngine(act, 0.2, 1.0)
    seen = []
    prepare = eng.dual.prepare

    def spy(X):
        seen.extend(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
        return prepare(X)

    eng.dual.prepare = spy
    X = rows()
    with threadpool_limits(2, user_api="blas"):  # the caller's BLAS on two threads
        S = eng.prepare(X)
    assert seen and set(seen) == {1}
    assert len(S) == len(X)


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_diagonal_blocks_solve_their_upper_triangle(monkeypatch, act, rows):
    """In a symmetric kernel each chunk of a diagonal block leaves out the columns left of its first row (the
    mirror fills them): fewer entries solved than the same blocks in full, exactly symmetric, and within 1e-12 of
    the rectangular kernel, which solves every entry; a process backend's blocks come back mirrored the same way."""
    from sk_deq.kernels import _duals, engine

    X = rows()
    n, b, step = len(X), 128, 32
    monkeypatch.setattr(_duals, "SOLVE_CHUNK_ENTRIES", step * b)  # 32-row chunks of the 128-column blocks
    eng = ImplicitKernelEngine(act, 0.2, 1.0)
    cls = type(eng.dual)
    solved = []
    chunk_into = cls.chunk_into
    monkeypatch.setattr(cls, "chunk_into", lambda self, P, *a: (solved.append(P.size), chunk_into(self, P, *a))[1])
    S = eng.prepare(X)
    K = eng.kernel(S, block_size=b, n_jobs=1)
    sizes = [min(b, n - i) for i in range(0, n, b)]
    rows_of = {m: step * b // m for m in sizes}  # rows per chunk of a block of m columns
    diagonal = sum(min(rows_of[m], m - i) * (m - i) for m in sizes for i in range(0, m, rows_of[m]))
    above = sum(mi * mj for i, mi in enumerate(sizes) for mj in sizes[i + 1 :])
    assert sum(solved) == diagonal + above < n * (n + b) // 2
    np.testing.assert_array_equal(K, K.T)
    full = eng.kernel(S, eng.prepare(X), block_size=b, n_jobs=1)
    np.testing.assert_allclose(K, full, rtol=0, atol=1e-12 * np.abs(full).max())
    # a process backend's worker returns the block (its lower part unsolved) and the caller mirrors it
    out = np.full((n, n), np.nan)
    for bi in (slice(0, b), slice(b, 2 * b)):
        task = engine._block_task(eng.dual, "ck", bi, bi, S.take(bi), S.take(bi), None, True)
        engine._write_block(out, *task, True)
        np.testing.assert_array_equal(np.triu(out[bi, bi], 1), np.triu(K[bi, bi], 1))
        np.testing.assert_array_equal(out[bi, bi], out[bi, bi].T)
