"""The compiled Hermite series (numba, optional) gives the bits of numpy's loops.

:mod:`sk_deq.kernels._compiled` replaces the numpy engine's Horner sums and
Newton equations of generic activations by compiled loops.  They perform the
same operations in the same order, so every kernel must agree bitwise with
``SK_DEQ_COMPILED=0``: odd and non-odd activations, the three kernels, the
entries gathered near correlation one (and those left to quadrature),
duplicate and zero-norm samples, one block and many, serial and threads.
The loops are also run uncompiled (plain Python, no numba needed), so their
logic is checked wherever the suite runs.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from sk_deq.kernels import ImplicitKernelEngine, _compiled, _compiled_closed, _duals, _series
from sk_deq.kernels._numerics import newton


@pytest.fixture(scope="module")
def rows(unit_rows):
    """``rows(n=160, p=12, seed=0)``: Gaussian samples, a few duplicates, a zero row and near-duplicates
    (correlations near one)."""

    def duplicates_zero_and_near(X, rng):
        p = X.shape[1]
        near = X[:4] * (1.0 + 1e-9) + 1e-7 * rng.standard_normal((4, p))
        return np.vstack([X, X[:3], np.zeros((1, p)), near])

    return lambda n=160, p=12, seed=0: unit_rows(n, p, seed, scale="features", then=duplicates_zero_and_near)


def _numpy_kernel(monkeypatch, eng, *samples, **kw):
    monkeypatch.setenv(_compiled.COMPILED_ENV, "0")
    assert _series.numpy_ops() is _series.NUMPY_OPS
    out = eng.kernel(*samples, **kw)
    monkeypatch.delenv(_compiled.COMPILED_ENV)
    return out


@pytest.fixture
def plain_python_loops(monkeypatch):
    """The compiled loops run as the Python they are written in (no numba needed)."""
    loops = _compiled.CompiledSeries(*_compiled.LOOPS)
    monkeypatch.setattr(_compiled, "_build", lambda: loops)
    monkeypatch.setattr(_compiled_closed, "_build", lambda: _compiled_closed.LOOPS)
    return loops


@pytest.mark.parametrize("activation", ["tanh", "silu"])
@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
def test_uncompiled_loops_give_the_bits_of_numpy(monkeypatch, plain_python_loops, activation, kernel, rows):
    X = rows(n=40, p=6)
    eng = ImplicitKernelEngine(activation, 0.3, 1.0, kernel=kernel)
    assert eng.method == "Hermite expansion"
    S = eng.prepare(X)
    Y = eng.prepare(X[::3] * 1.1)
    ref = _numpy_kernel(monkeypatch, eng, S, n_jobs=1)
    ref_xy = _numpy_kernel(monkeypatch, eng, Y, S, n_jobs=1)
    assert _series.numpy_ops().compiled is plain_python_loops
    np.testing.assert_array_equal(eng.kernel(S, n_jobs=1), ref)
    np.testing.assert_array_equal(eng.kernel(Y, S, n_jobs=1), ref_xy)


def test_the_environment_variable_and_a_missing_numba_keep_numpy(monkeypatch, rows):
    monkeypatch.setenv(_compiled.COMPILED_ENV, "0")
    assert _compiled.compiled_series() is None
    assert _series.numpy_ops() is _series.NUMPY_OPS
    monkeypatch.delenv(_compiled.COMPILED_ENV)
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    _compiled._build.cache_clear()
    _compiled_closed._build.cache_clear()
    try:
        assert _compiled.compiled_series() is None
        assert _series.numpy_ops() is _series.NUMPY_OPS
        for act in ("tanh", "gelu"):
            eng = ImplicitKernelEngine(act, 0.2, 1.0)
            assert act == "tanh" or eng.dual.compiled is None
            S = eng.prepare(rows(n=20, p=4))
            K = eng.kernel(S)
            assert np.all(np.isfinite(K))
    finally:
        _compiled._build.cache_clear()
        _compiled_closed._build.cache_clear()


def _compiled_or_skip():
    pytest.importorskip("numba")
    loops = _compiled.compiled_series()
    assert loops is not None, "numba is installed, so the compiled series must be used"
    return loops


@pytest.mark.parametrize("activation", ["tanh", "silu", "elu"])
@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
def test_compiled_gives_the_bits_of_numpy(monkeypatch, activation, kernel, rows):
    _compiled_or_skip()
    X = rows()
    eng = ImplicitKernelEngine(activation, 0.25, 1.0, kernel=kernel)
    S = eng.prepare(X)
    for kw in ({"n_jobs": 1}, {"n_jobs": 1, "block_size": 64}):
        ref = _numpy_kernel(monkeypatch, eng, S, **kw)
        assert _series.numpy_ops().compiled is not None
        got = eng.kernel(S, **kw)
        np.testing.assert_array_equal(got, ref)
    # threads give the bits of serial with the same blocks
    np.testing.assert_array_equal(eng.kernel(S, n_jobs=2, block_size=64), got)


@pytest.mark.parametrize("activation", ["relu", "leaky_relu"])
@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
def test_compiled_relu_table_gives_the_bits_of_numpy(monkeypatch, activation, kernel, rows):
    """The (leaky) ReLU kernel's table inversion, compiled, against numpy's operations (a large sigma_a2
    puts entries near rho = -1, where Newton steps follow the table)."""
    _compiled_or_skip()
    X = np.vstack([rows(), -rows()[:20]])  # opposite samples: correlations near -1
    eng = ImplicitKernelEngine(activation, 0.45, 1.0, kernel=kernel)
    S = eng.prepare(X)
    for kw in ({"n_jobs": 1}, {"n_jobs": 1, "block_size": 64}):
        ref = _numpy_kernel(monkeypatch, eng, S, **kw)
        np.testing.assert_array_equal(eng.kernel(S, **kw), ref)
    # threads give the bits of serial with the same blocks
    np.testing.assert_array_equal(eng.kernel(S, n_jobs=2, block_size=64), ref)


@pytest.mark.parametrize("activation", ["gelu", "erf"])
@pytest.mark.parametrize("kernel", ["ck", "feature", "ntk"])
def test_compiled_closed_forms_give_the_bits_of_numpy(monkeypatch, activation, kernel, rows):
    """GELU's and erf's Newton steps, compiled, against numpy's operations: duplicates, a zero row,
    near-duplicates, rows and columns of different samples, serial and threads."""
    _compiled_or_skip()
    X = rows()
    eng = ImplicitKernelEngine(activation, 0.4, 1.0, kernel=kernel)
    assert eng.dual.compiled is not None
    S, Y = eng.prepare(X), eng.prepare(X[::4] * 1.7)
    for kw in ({"n_jobs": 1}, {"n_jobs": 1, "block_size": 64}):
        ref = _numpy_kernel(monkeypatch, eng, S, **kw)
        assert eng.dual.compiled is not None
        np.testing.assert_array_equal(eng.kernel(S, **kw), ref)
    np.testing.assert_array_equal(eng.kernel(S, n_jobs=2, block_size=64), ref)
    np.testing.assert_array_equal(eng.kernel(Y, S, n_jobs=1), _numpy_kernel(monkeypatch, eng, Y, S, n_jobs=1))


@pytest.mark.parametrize("activation", ["gelu", "erf"])
def test_uncompiled_closed_form_loops_give_the_bits_of_numpy(monkeypatch, plain_python_loops, activation, rows):
    """The same loops run as plain Python, with few entries left moving (the iteration on a subset)."""
    X = rows(n=30, p=5)
    for kernel in ("ck", "ntk"):
        eng = ImplicitKernelEngine(activation, 0.6, 1.0, kernel=kernel)
        S = eng.prepare(X)
        ref = _numpy_kernel(monkeypatch, eng, S, n_jobs=1)
        assert eng.dual.compiled is not None
        np.testing.assert_array_equal(eng.kernel(S, n_jobs=1), ref)


@pytest.mark.parametrize("active_steps", [3, 4])
def test_closed_form_steps_of_a_subset_and_the_guarded_solver_match_numpy(monkeypatch, active_steps):
    """Entries still moving after three steps (of 1,600) are gathered, then stepped alone (four active
    steps) or handed to the guarded solver (three): both paths alike."""
    _compiled_or_skip()
    monkeypatch.setattr(_duals._ClosedFormDual, "_ACTIVE_ITER", active_steps)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((40, 6)) * rng.uniform(0.2, 3.0, size=(40, 1))
    eng = ImplicitKernelEngine("gelu", 0.5, 1.0)
    S = eng.prepare(X)
    guarded, steps = [], []
    monkeypatch.setattr(_duals, "newton", lambda fun, r, **kw: guarded.append(r.size) or newton(fun, r, **kw))
    step = _duals._ClosedFormDual._step
    monkeypatch.setattr(
        _duals._ClosedFormDual, "_step", lambda self, rho, *a: steps.append(rho.size) or step(self, rho, *a)
    )
    ref = _numpy_kernel(monkeypatch, eng, S, n_jobs=1)
    if active_steps == 3:
        assert 0 < sum(guarded) < 1600, "the data must reach the guarded solver with a subset"
    else:
        assert not guarded and min(steps) < max(steps), "the data must reach a step of a subset"
    n_ref, n_steps = len(guarded), len(steps)
    np.testing.assert_array_equal(eng.kernel(S, n_jobs=1), ref)
    assert (len(guarded), len(steps)) == (2 * n_ref, 2 * n_steps)


def test_other_formulas_keep_numpy():
    """Only the built-in GELU and erf formulas have compiled steps (a subclass may change ``pair``)."""
    from sk_deq.activations._duals import ErfDual, GeluDual, QuadraticDual

    class MyErf(ErfDual):
        pass

    assert _compiled_closed.compiled_closed_form(MyErf()) is None
    assert _compiled_closed.compiled_closed_form(QuadraticDual()) is None
    if _compiled.compiled_series() is not None:
        assert _compiled_closed.compiled_closed_form(GeluDual()) is not None


@pytest.mark.parametrize("plain", [False, True])
def test_compiled_tails_give_the_bits_of_numpy(monkeypatch, plain):
    """The truncation tails of the per-sample preparation, compiled (or its loop run as plain Python),
    against numpy's cumulative sums: tails that reach zero and a variance below the coefficients' sum."""
    if plain:
        monkeypatch.setattr(_compiled, "_build", lambda: _compiled.CompiledSeries(*_compiled.LOOPS))
    else:
        _compiled_or_skip()
    dual = ImplicitKernelEngine("tanh", 0.3, 1.0).dual
    a = np.array([0.01, 0.5, 2.0, 30.0])
    H, V, d2 = dual._coefficients(a)
    V = V.copy()
    V[0] = np.sum(H[0] ** 2) * (1 - 1e-9)  # every tail past the first degrees clipped at zero
    got = dual._tails(a, H, V, d2)
    monkeypatch.setenv(_compiled.COMPILED_ENV, "0")
    want = dual._tails(a, H, V, d2)
    assert np.any(want["tail"] == 0.0) and np.any(want["tail"] > 0.0)
    for k in ("tail", "dtail"):
        np.testing.assert_array_equal(got[k], want[k])


def test_a_newton_step_is_numpys_step_and_writes_only_what_is_kept(plain_python_loops):
    """One compiled step against the equation's evaluation and numpy's step; ``keep`` leaves out the
    rest without changing what it writes; the largest step, and NaN where a step is NaN."""
    rng = np.random.default_rng(2)
    Hr, Hc = rng.standard_normal((6, 9)) * 0.4, rng.standard_normal((7, 9)) * 0.4
    rho = np.clip(rng.standard_normal((6, 7)) / 3, -0.9, 0.9)
    s, rhs = rng.uniform(0.5, 1.5, (6, 7)), rng.standard_normal((6, 7)) * 0.2
    terms = _series._OuterTerms(_series.NUMPY_OPS, Hr, Hc)
    ks, eq = list(range(1, 9, 2)), (0.3, s, rhs)
    g, dg, p, dp = plain_python_loops.evaluate(rho, terms, ks, True, equation=eq)
    want = np.clip(rho - g / dg, -1.0, 1.0)
    new, ev, step, delta = plain_python_loops.newton_step(rho, terms, ks, True, eq)
    np.testing.assert_array_equal(new, want)
    for got, ref in zip(ev, (g, dg, p, dp)):
        np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(step, want - rho)
    assert delta == np.max(np.abs(want - rho))
    new2, ev2, step2, delta2 = plain_python_loops.newton_step(rho, terms, ks, True, eq, keep=("dp",))
    np.testing.assert_array_equal(new2, new)
    np.testing.assert_array_equal(ev2[3], dp)
    assert ev2[:3] == (None, None, None) and step2 is None and delta2 == delta
    bad = rho.copy()
    bad[2, 3] = np.nan
    assert np.isnan(plain_python_loops.newton_step(bad, terms, ks, True, eq, keep=())[3])


@pytest.mark.parametrize("odd", [True, False])
@pytest.mark.parametrize("n_degrees", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("loops", ["plain", "compiled"])
def test_sums_two_degrees_a_pass_give_numpys_bits(request, loops, odd, n_degrees):
    """The loops take two degrees per pass over a row and an odd count's last one alone: every count of
    degrees, odd and full series, against numpy's Horner loop; the largest step is the largest magnitude
    (of negative steps too), 0.0 where every step is zero, NaN where a step is NaN."""
    cs = request.getfixturevalue("plain_python_loops") if loops == "plain" else _compiled_or_skip()
    rng = np.random.default_rng(n_degrees)
    Hr, Hc = rng.standard_normal((5, 12)) * 0.4, rng.standard_normal((9, 12)) * 0.4
    rho = np.clip(rng.standard_normal((5, 9)) / 3, -0.9, 0.9)
    ks = list(range(1, 2 * n_degrees, 2)) if odd else list(range(n_degrees))
    series = _series.HermiteSeries(0.3, 0.1, 1e-12, ks[-1], odd, None, _series.NUMPY_OPS, 64)
    want = series._series(rho.copy(), _series._OuterTerms(_series.NUMPY_OPS, Hr, Hc), ks)
    terms = _series._OuterTerms(_series.NUMPY_OPS, Hr, Hc)
    for got, ref in zip(cs.evaluate(rho, terms, ks, odd), want):
        np.testing.assert_array_equal(got, ref)
    s, rhs = rng.uniform(0.5, 1.5, rho.shape), rng.standard_normal(rho.shape) * 0.2
    _, _, step, delta = cs.newton_step(rho, terms, ks, odd, (0.3, s, rhs))
    assert delta == np.max(np.abs(step)) and np.any(step < 0)
    assert np.isnan(cs.newton_step(np.where(rho == rho[1, 2], np.nan, rho), terms, ks, odd, (0.3, s, rhs))[3])
    # at a root of g(rho) = s rho - 0 * series - s rho every step is zero: the largest is 0.0, not NaN
    assert cs.newton_step(rho, terms, ks, odd, (0.0, s, s * rho))[3] == 0.0


def test_table_inverse_loop_gives_numpys_bits_at_the_ends_of_the_table():
    """The loop run as plain Python (no numba needed) on values inside, at and beyond both ends."""
    dual = ImplicitKernelEngine("relu", 0.3, 1.0).dual
    rng = np.random.default_rng(0)
    ends = [dual.h_hi, dual.h_lo, dual.h_hi + 1.0, dual.h_lo - 1.0, 0.0, -0.0, np.nextafter(dual.h_hi, 0.0)]
    r = np.concatenate([rng.uniform(dual.h_lo, dual.h_hi, 2002), ends]).reshape(-1, 7)
    loops = _compiled.CompiledSeries(*_compiled.LOOPS)
    table = (dual._coef, dual.h_hi, dual._inv_dv, dual._N - 1 - 1e-9)
    ref = dual._invert_table(r)
    got, low = loops.table_inverse(r, *table)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(low, ref < -0.75)
    assert low.any() and not low.all()
    si, sj = rng.uniform(0.5, 2.0, r.shape[0]), rng.uniform(0.5, 2.0, r.shape[1])
    got, low = loops.table_inverse(r, *table, si, sj)  # the CK: scaled, but not the low entries
    np.testing.assert_array_equal(got, np.where(low, ref, ref * si[:, None] * sj[None, :]))
    # written into a block of a larger matrix (strided rows), the same bits there and nothing else touched
    big = np.full((r.shape[0] + 3, r.shape[1] + 5), 7.0)
    view = big[2 : 2 + r.shape[0], 1 : 1 + r.shape[1]]
    into, low2 = loops.table_inverse(r, *table, si, sj, out=view)
    assert into is view
    np.testing.assert_array_equal(view, got)
    np.testing.assert_array_equal(low2, low)
    view[...] = 7.0
    assert (big == 7.0).all()
    # a target with strided columns is not written: the result comes in a new array
    other = np.zeros((r.shape[1], r.shape[0])).T
    fresh, _ = loops.table_inverse(r, *table, si, sj, out=other)
    assert fresh is not other and not other.any()
    np.testing.assert_array_equal(fresh, got)


def test_compiled_entries_near_one_and_quadrature_match_numpy(monkeypatch):
    """Correlations near one: gathered groups at high degree, and entries no degree resolves (quadrature)."""
    _compiled_or_skip()
    rng = np.random.default_rng(3)
    base = rng.standard_normal((6, 8)) / np.sqrt(8)
    X = np.vstack([base + 10.0**-e * rng.standard_normal((6, 8)) for e in (1, 2, 3, 4, 6)])
    eng = ImplicitKernelEngine("elu", 0.5, 1.0, kernel="ntk")  # a kink in phi0': slow Hermite decay
    S = eng.prepare(X)
    calls = []
    polar = eng.dual.polar_solve

    def counted(*a):
        calls.append(len(a[0]))
        return polar(*a)

    monkeypatch.setattr(eng.dual, "polar_solve", counted)
    ref = _numpy_kernel(monkeypatch, eng, S, n_jobs=1)
    n_ref = len(calls)
    got = eng.kernel(S, n_jobs=1)
    assert n_ref > 0 and len(calls) == 2 * n_ref, "the data must reach the quadrature in both paths"
    np.testing.assert_array_equal(got, ref)


def test_compiled_loops_take_any_layout_of_their_inputs():
    """Fortran-ordered or read-only samples are made contiguous, not misread."""
    loops = _compiled_or_skip()
    rng = np.random.default_rng(1)
    Hr, Hc = rng.standard_normal((5, 9)), rng.standard_normal((7, 9))
    rho = np.clip(rng.standard_normal((5, 7)) / 3, -0.9, 0.9)
    terms = _series._OuterTerms(_series.NUMPY_OPS, Hr, Hc)
    ks = list(range(9))
    p, dp = loops.evaluate(rho, terms, ks, odd=False)
    powers = rho[..., None] ** np.arange(9)
    np.testing.assert_allclose(p, np.einsum("ik,jk,ijk->ij", Hr, Hc, powers), rtol=1e-12, atol=1e-14)
    dpowers = np.arange(9) * rho[..., None] ** np.maximum(np.arange(9) - 1, 0)
    np.testing.assert_allclose(dp, np.einsum("ik,jk,ijk->ij", Hr, Hc, dpowers), rtol=1e-12, atol=1e-14)
    ro = np.asfortranarray(rho)
    ro.flags.writeable = False
    terms_f = _series._OuterTerms(_series.NUMPY_OPS, np.asfortranarray(Hr), Hc)
    p2, dp2 = loops.evaluate(ro, terms_f, ks, odd=False)
    np.testing.assert_array_equal(p2, p)
    np.testing.assert_array_equal(dp2, dp)


def test_threads_asking_at_once_get_one_set_of_loops(monkeypatch):
    """The engine's worker threads call compiled_series() together at the first kernel: one build, shared."""
    import threading
    import time

    builds = []

    def slow_build():
        builds.append(1)
        time.sleep(0.05)
        return "loops"

    monkeypatch.delenv(_compiled.COMPILED_ENV, raising=False)
    cached = _compiled.functools.cache(slow_build)
    monkeypatch.setattr(_compiled, "_build", cached)
    got = []
    threads = [threading.Thread(target=lambda: got.append(_compiled.compiled_series())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == ["loops"] * 4 and len(builds) == 1
