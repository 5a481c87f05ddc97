"""The benchmarks of time and memory against n (``benchmarks/scale``)."""

import numpy as np
import pytest


def test_scale_slope_recovers_the_exponent():
    from benchmarks.scale.sizes import slope

    rows = [{"n": n, "seconds": 3e-6 * n**2, "status": "ok"} for n in (1000, 3162, 10000)]
    rows.append({"n": 31623, "seconds": float("nan"), "status": "MemoryError: too large"})
    assert slope(rows, "seconds") == pytest.approx(2.0, abs=1e-9)
    assert np.isnan(slope(rows[:1], "seconds"))


def test_in_subprocess_runs_a_function_of_the_package_in_a_fresh_python():
    from benchmarks._harness import in_subprocess

    rows = [{"n": n, "seconds": 2e-6 * n**1.5, "status": "ok"} for n in (100, 1000)]
    assert in_subprocess("benchmarks.scale.sizes", "slope", rows, "seconds") == pytest.approx(1.5, abs=1e-9)
    with pytest.raises(RuntimeError, match="AttributeError"):
        in_subprocess("benchmarks.scale.sizes", "no_such_function")


def test_the_subprocess_steps_find_their_data_and_memory_helpers(tmp_path):
    """The steps a benchmark runs in a child process (``sizes._child``, ``large_fit.build_data``,
    ``nystroem._scale_child``), called here in this process on a few rows."""
    pytest.importorskip("mlxtend")
    from benchmarks.kernels import nystroem
    from benchmarks.scale import large_fit, sizes

    rec = sizes._child("nystroem", 120, "relu", 0.2, 8, 20, 1)
    assert rec["status"] == "ok" and rec["n"] == 120 and rec["seconds"] >= rec["fit_s"] > 0
    assert rec["peak_gib"] >= rec["before_gib"] > 0 and rec["data_gib"] == pytest.approx(120 * 784 * 8 / 2**30)
    built = large_fit.build_data(200, tmp_path / "data.npz")
    assert built["n_train"] == 200 and built["n_copies"] == 0 and (tmp_path / "data.npz").exists()
    scaled = nystroem._scale_child("mnist", 120, 20, "tanh", 0.2, 1)
    assert scaled["n"] == 120 and scaled["finite"] and scaled["output_gib"] == pytest.approx(120 * 20 * 8 / 2**30)
