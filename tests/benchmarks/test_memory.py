"""The memory measurement of the benchmarks (``benchmarks/_memory.py``)."""

import numpy as np
import pytest


def test_peak_memory_sees_a_step_that_allocates():
    from benchmarks._memory import PeakMemory

    with PeakMemory() as mem:
        a = np.ones(200 * 2**20 // 8)  # 200 MiB, touched
        del a
    if not mem.reset:
        pytest.skip("VmHWM cannot be reset here")
    assert 150 * 2**20 < mem.above < 400 * 2**20
    with PeakMemory() as small:
        np.ones(1000)
    assert small.above < 50 * 2**20
