"""sk_deq._runtime.one_blas_thread: the limit holds inside, the caller's setting comes back, one scan is reused."""

import sys
import types

from threadpoolctl import threadpool_info, threadpool_limits

import sk_deq._runtime as threads


def _blas_threads():
    return sorted({lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"})


def test_one_blas_thread_inside_and_the_callers_setting_after():
    assert _blas_threads(), "numpy's BLAS is loaded"
    with threadpool_limits(limits=2, user_api="blas"):  # the session runs at 1; a caller of 2 threads
        assert _blas_threads() == [2]
        with threads.one_blas_thread():
            assert _blas_threads() == [1]
        assert _blas_threads() == [2]


def test_the_libraries_are_scanned_once_until_a_module_is_imported(monkeypatch):
    monkeypatch.setitem(threads._cached, "controller", None)
    first = threads._controller()
    assert threads._controller() is first  # no import since: the same scan
    monkeypatch.setitem(sys.modules, "sk_deq_test_new_module", types.ModuleType("sk_deq_test_new_module"))
    again = threads._controller()
    assert again is not first  # a new module may have brought a new BLAS: scanned again
    assert threads._controller() is again
