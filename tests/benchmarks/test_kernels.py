"""The benchmarks of the implicit kernels (``benchmarks/kernels``) in tiny configurations, and their goals."""

import numpy as np
import pytest


def test_the_user_call_bench_compares_the_pool_with_joblib():
    """Its ``joblib`` run hands the blocks to joblib; its plain run uses the engine's pool."""
    import threading

    from benchmarks.kernels import user_call

    from sk_deq.kernels._workers import map_unordered

    def names():
        return set(map_unordered(lambda: threading.current_thread().name, [()] * 4, 2))

    with user_call._context("all cores"):
        assert all(n.startswith("sk_deq-blocks") for n in names())
    with user_call._context("all cores, joblib"):
        assert not any(n.startswith("sk_deq-blocks") for n in names())


def test_the_user_call_bench_times_the_fit_of_each_call():
    """Each call appends its fit's seconds, and the kernel it returns is the user's."""
    from benchmarks.kernels import user_call

    from sk_deq import ImplicitCKTransformer

    X = np.random.default_rng(0).normal(size=(40, 6))
    fits: list = []
    call = user_call._call(X, 1, fits)
    K = call()
    call()
    assert len(fits) == 2 and all(0 < f < 60 for f in fits)
    ref = ImplicitCKTransformer(activation="tanh", input_scaling="none", n_jobs=1).fit(X).transform(X)
    np.testing.assert_array_equal(K, ref)
    assert user_call._call(X, 1)() is not None  # no list: nothing recorded


def test_the_cores_goal_comes_from_its_records():
    from benchmarks.kernels import user_call

    (g,) = user_call.cores_goals([{"n": 2000, "cores speed-up": 1.5}, {"n": 4000, "cores speed-up": 1.7}])
    assert g["measured"] == "1.50x (n=2000), 1.70x (n=4000)" and not g["met"]
    (g,) = user_call.cores_goals([{"n": 2000, "cores speed-up": 1.65}])
    assert g["met"] and g["id"] == "kernel_cores_user_call"


def test_kernel_cores_benchmark_in_a_tiny_configuration():
    pytest.importorskip("mlxtend")
    from benchmarks.kernels import cores

    result = cores.collect(sizes=(150,), acts=("tanh",), repeats=1)
    (rec,) = result["records"]
    assert rec["n"] == 150 and rec["activation"] == "tanh" and rec["max_rel_diff"] <= 1e-12
    assert rec["speedup"] > 0 and rec["ratio_to_gemm_1"] > 0 and rec["ratio_to_gemm_all"] > 0
    assert "tanh" in cores.table(result)
    if rec["loops"] == "compiled":  # numba installed: the numpy loops ran beside, to the same bits
        assert rec["max_rel_diff"] == 0.0 and rec["compiled_over_numpy_1"] > 0 and rec["numpy_speedup"] > 0
        assert "(numpy)" in cores.table(result)


def test_the_dask_benchmark_measures_every_process_with_the_shared_memory_helpers():
    """``_Peaks`` runs the same functions on the client and, through ``client.run``, on every worker."""
    from benchmarks.kernels import ridge_dask

    class Client:  # two workers, here in this process
        def run(self, func):
            return {"tcp://a": func(), "tcp://b": func()}

    with ridge_dask._Peaks(Client()) as peaks:
        block = np.ones(20 * 2**20 // 8)  # 20 MiB, touched
        del block
    record = peaks.record()
    assert set(record["peak_rss"]) == set(record["rss_before"]) == {"client", "tcp://a", "tcp://b"}
    assert all(record["peak_rss"][k] >= record["rss_before"][k] > 0 for k in record["peak_rss"])
    assert record["peak_since_start_only"] is not peaks.reset
    assert ridge_dask._peak_rss() >= ridge_dask._rss() > 0
