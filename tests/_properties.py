"""The settings, strategies and checks the property tests (hypothesis) share.

Each property test lives beside what it tests (``tests/kernels/test_engine.py``, ``tests/test_transformers.py``,
...); the examples are derandomized: hypothesis seeds each test from its own source, so a test's examples stay the
same wherever it is.
"""

import math

import numpy as np
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sk_deq.activations import LeakyReLU, Quadratic

# derandomized (CI sees the same examples every run); shrinking capped so a failure reports quickly
SETTINGS = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
)

# activations of every dual route: closed forms (relu, leaky, erf, gelu, quadratic) and the Hermite expansion
ACTIVATIONS = ["relu", "tanh", "gelu", "erf", "silu", "sigmoid", LeakyReLU(1.0, 0.3), Quadratic(0.2, 0.9)]
KERNELS = ["ck", "feature", "ntk"]


def samples(min_rows=1, max_rows=6, min_cols=1, max_cols=5, bound=2.0):
    """Small float64 sample matrices with entries in [-bound, bound]."""
    shape = st.tuples(st.integers(min_rows, max_rows), st.integers(min_cols, max_cols))
    return shape.flatmap(lambda s: arrays(np.float64, s, elements=st.floats(-bound, bound, allow_nan=False, width=64)))


def two_samples(bound=2.0):
    """X and Y with the same number of columns."""
    return st.integers(1, 5).flatmap(
        lambda p: st.tuples(
            arrays(np.float64, st.tuples(st.integers(1, 5), st.just(p)), elements=st.floats(-bound, bound, width=64)),
            arrays(np.float64, st.tuples(st.integers(1, 5), st.just(p)), elements=st.floats(-bound, bound, width=64)),
        )
    )


def _scale(X):
    """Rows with mean squared norm ~1 (the data scale the kernels are centred for), zero rows allowed."""
    ms = float(np.mean(np.sum(X * X, axis=1)))
    return X / math.sqrt(ms) if ms > 0 else X


def _close(A, B, rtol=1e-10):
    scale = max(float(np.max(np.abs(A))), float(np.max(np.abs(B))), 1e-300)
    np.testing.assert_allclose(A, B, rtol=rtol, atol=rtol * scale)


def _check_kernel_function(kernel, X, Y, rtol=1e-10, psd=True):
    """``kernel(A, B)`` is symmetric in its arguments and (``psd``) ``kernel(A, None)`` a PSD Gram matrix."""
    X, Y = _scale(X), _scale(Y)
    _close(kernel(X, Y), kernel(Y, X).T, rtol=rtol)
    if psd:
        _psd(kernel(X, None))


def _psd(K):
    np.testing.assert_array_equal(K, K.T)
    w = np.linalg.eigvalsh(K)
    assert w.min() >= -1e-10 * max(abs(w.max()), 1e-300), (w.min(), w.max())


ANY_FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)


def _clear_error_or_finite(call):
    try:
        out = call()
    except (ValueError, TypeError) as exc:
        assert len(str(exc)) > 20  # a sentence, not a bare numpy error
        return None
    assert np.all(np.isfinite(out)), out
    return out
