"""Every public estimator given Dask arrays: lazy (predictions, transforms, scores), or a clear error; never a silent
load of the whole array into this process.

Dask's synchronous scheduler, no cluster: the estimators' lazy paths are the
same on one (tests/test_dask.py, tests/test_dask_ridge.py run them on a local
cluster).  The arrays count the blocks read from them, so that a refusal or
the building of a lazy result is seen to read nothing.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning, UndefinedMetricWarning
from sklearn.metrics import accuracy_score, r2_score

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

from sk_deq import (  # noqa: E402
    ImplicitCKKernel,
    ImplicitCKNystroem,
    ImplicitCKRidge,
    ImplicitCKRidgeClassifier,
    ImplicitCKTransformer,
)
from sk_deq._dask import lazy_score, map_row_blocks  # noqa: E402
from sk_deq.kernels import implicit_kernel, implicit_kernel_diagonal  # noqa: E402

from ._networks import CLASSIFIERS, NETWORKS, small  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.standard_normal((160, 5))
LABELS = np.where(X[:, 0] + X[:, 1] ** 2 > 1, "yes", np.where(X[:, 2] > 0, "no", "maybe"))
TARGETS = np.column_stack([np.sin(X[:, 0]), X[:, 1] * X[:, 2]])
WEIGHTS = RNG.uniform(0.1, 2.0, len(X))


class Reads:
    """A Dask array of ``values`` in blocks of 40 rows that counts the blocks computed from it."""

    def __init__(self, values):
        self.count = 0

        def source(block):
            self.count += 1
            return block

        arr = da.from_array(values, chunks=(40,) + values.shape[1:])
        meta = np.empty((0,) * values.ndim, dtype=values.dtype)
        self.array = arr.map_blocks(source, dtype=values.dtype, meta=meta)


def _sync(a):
    return a.compute(scheduler="sync")


def _fit(cls, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.filterwarnings("ignore", "ExplicitRegressor does not use|DEQRegressor does not use", UserWarning)
        return small(cls).fit(X, y)


@pytest.fixture(scope="module")
def networks():
    """The six networks fitted on in-memory rows: the classifiers on three labels, the regressors on two targets."""
    return [_fit(cls, X[:120], LABELS[:120] if cls in CLASSIFIERS else TARGETS[:120]) for cls in NETWORKS]


@pytest.fixture(scope="module")
def ridges():
    kw = {"alpha": 0.1, "solver": "cg", "tol": 1e-10, "preconditioner_rank": 30, "random_state": 0}
    return [
        ImplicitCKRidgeClassifier(**kw).fit(X[:120], LABELS[:120]),
        ImplicitCKRidge(**kw).fit(X[:120], TARGETS[:120]),
        ImplicitCKRidge(**kw).fit(X[:120], TARGETS[:120, 0]),
        ImplicitCKRidgeClassifier(**kw).fit(X[:120], LABELS[:120] == "yes"),
    ]


def _lazy_methods(est):
    names = ["predict", "decision_function", "predict_proba", "predict_log_proba", "features"]
    return [m for m in names if hasattr(est, m)]


# ------------------------------------------------------------------ lazy outputs equal the in-memory ones
@pytest.mark.parametrize("i", range(len(NETWORKS)), ids=[c.__name__ for c in NETWORKS])
def test_network_outputs_of_dask_arrays_are_lazy_and_equal_in_memory(networks, i):
    est = networks[i]
    for name in _lazy_methods(est):
        reads = Reads(X)
        out = getattr(est, name)(reads.array)
        assert isinstance(out, da.Array) and reads.count == 0, name  # built: nothing read
        ref = getattr(est, name)(X)
        assert out.shape == ref.shape and out.dtype == ref.dtype, name
        got = _sync(out)
        assert reads.count == 4, name
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12, err_msg=name)
        else:
            np.testing.assert_array_equal(got, ref, err_msg=name)


@pytest.mark.parametrize("i", range(4))
def test_ridge_outputs_of_dask_arrays_are_lazy_and_equal_in_memory(ridges, i):
    est = ridges[i]
    for name in _lazy_methods(est):
        reads = Reads(X)
        out = getattr(est, name)(reads.array)
        assert isinstance(out, da.Array) and reads.count == 0
        ref = getattr(est, name)(X)
        assert out.shape == ref.shape and out.dtype == ref.dtype, name
        got = _sync(out)
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12, err_msg=name)
        else:
            np.testing.assert_array_equal(got, ref, err_msg=name)


def test_lazy_outputs_of_an_unfitted_estimator_raise_not_fitted():
    from sklearn.exceptions import NotFittedError

    for est in (small(NETWORKS[0]), ImplicitCKRidge()):
        with pytest.raises(NotFittedError):
            est.predict(da.from_array(X, chunks=40))


def test_lazy_predictions_check_the_features_when_built(ridges, networks):
    for est in (ridges[0], networks[0]):
        with pytest.raises(ValueError, match="X has 4 features"):
            est.predict(da.from_array(X[:, :4], chunks=40))


# ------------------------------------------------------------------ scores
@pytest.mark.parametrize("weighted", [False, True])
def test_scores_of_dask_arrays_equal_in_memory(networks, ridges, weighted):
    w = WEIGHTS if weighted else None
    for est in [*networks, *ridges[:2]]:
        y = LABELS if hasattr(est, "classes_") else TARGETS
        ref = est.score(X, y, sample_weight=w)
        for Xa, ya, wa in [
            (Reads(X).array, y, w),
            (X, da.from_array(y, chunks=50), w),
            (Reads(X).array, da.from_array(y, chunks=70), None if w is None else da.from_array(w, chunks=30)),
        ]:
            got = est.score(Xa, ya, sample_weight=wa)
            assert isinstance(got, float)
            assert got == pytest.approx(ref, rel=1e-12, abs=1e-12), type(est).__name__


def test_lazy_score_follows_scikit_learn_on_edge_cases(ridges):
    reg = ridges[2]
    pred = reg.predict(X)
    # an independent check of the lazy R2 and accuracy against scikit-learn's metrics
    y = pred + RNG.standard_normal(len(X))
    assert lazy_score(reg, da.from_array(X, chunks=33), y, WEIGHTS, "r2") == pytest.approx(
        r2_score(y, pred, sample_weight=WEIGHTS), rel=1e-12
    )
    clf = ridges[0]
    truth = np.roll(LABELS, 3)
    assert lazy_score(clf, da.from_array(X, chunks=33), truth, None, "accuracy") == pytest.approx(
        accuracy_score(truth, clf.predict(X)), rel=1e-12
    )

    # constant targets: 1 when predicted exactly, as r2_score says (force_finite)
    class Constant:
        def predict(self, X):
            return np.zeros(len(X))

    zeros = np.zeros(len(X))
    assert lazy_score(Constant(), X, da.from_array(zeros, chunks=40), None, "r2") == r2_score(zeros, zeros) == 1.0
    assert lazy_score(Constant(), X, da.from_array(zeros + 1, chunks=40), None, "r2") == r2_score(zeros + 1, zeros)
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(lazy_score(Constant(), X[:1], da.from_array(zeros[:1], chunks=1), None, "r2"))


def test_lazy_score_refuses_bad_inputs(ridges):
    reg = ridges[2]
    Xd = da.from_array(X, chunks=40)
    with pytest.raises(ValueError, match="inconsistent numbers of samples: \\[160, 100\\]"):
        reg.score(Xd, TARGETS[:100, 0])
    bad = WEIGHTS.copy()
    bad[5] = -1.0
    with pytest.raises(ValueError, match="sample_weight must be finite and non-negative"):
        reg.score(Xd, TARGETS[:, 0], sample_weight=bad)
    with pytest.raises(ValueError, match="sample_weight must be finite"):
        reg.score(Xd, TARGETS[:, 0], sample_weight=np.zeros(len(X)))
    masked = da.from_array(TARGETS[:, 0], chunks=40)
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        reg.score(Xd, masked[masked > -100])


# ------------------------------------------------------------------ refusals, reading nothing
@pytest.mark.parametrize("cls", NETWORKS, ids=lambda c: c.__name__)
def test_network_fits_refuse_dask_arrays_naming_the_ways_out(cls):
    y = LABELS if cls in CLASSIFIERS else TARGETS
    est = small(cls)
    reads = Reads(X)
    kw = {"classes": np.unique(LABELS)} if cls in CLASSIFIERS else {}
    for call in (lambda: est.fit(reads.array, y), lambda: est.partial_fit(reads.array, y, **kw)):
        with pytest.raises(TypeError, match=r"does not take a Dask Array as X to fit.*partial_fit.*predict.*lazily"):
            call()
    with pytest.raises(TypeError, match="Dask Array as y"):
        est.fit(X, Reads(y).array)
    with pytest.raises(TypeError, match="Dask Array as sample_weight"):
        est.fit(X, y, sample_weight=Reads(WEIGHTS).array)
    assert reads.count == 0


@pytest.mark.parametrize("cls", [ImplicitCKTransformer, ImplicitCKNystroem])
def test_transformer_fits_refuse_dask_arrays(cls):
    reads = Reads(X)
    est = cls(n_components=20) if cls is ImplicitCKNystroem else cls()
    for call in (est.fit, est.fit_transform):
        with pytest.raises(TypeError, match=r"as X to fit.*sample of the rows.*transform.*lazily"):
            call(reads.array)
    assert reads.count == 0


def test_kernel_matrices_refuse_dask_arrays():
    reads = Reads(X)
    kernel = ImplicitCKKernel()
    for call in (
        lambda: kernel(reads.array),
        lambda: kernel(X, reads.array),
        lambda: kernel.diag(reads.array),
        lambda: implicit_kernel(reads.array),
        lambda: implicit_kernel_diagonal(reads.array),
    ):
        with pytest.raises(TypeError, match=r"Dask Array as [XY] to compute a kernel matrix.*ImplicitCKRidge"):
            call()
    assert reads.count == 0


def test_ridge_fit_of_a_dask_array_needs_a_cluster_and_conjugate_gradients():
    reads = Reads(X)
    with pytest.raises(ValueError, match=r"no distributed Client is active: start one first.*X.compute\(\)"):
        ImplicitCKRidge().fit(reads.array, TARGETS)
    with pytest.raises(ValueError, match=r"solver='cholesky'\) cannot fit a Dask array.*solver='cg'"):
        ImplicitCKRidge(solver="cholesky").fit(reads.array, TARGETS)
    with pytest.raises(TypeError, match=r"Dask Array as y to fit.*y.compute\(\)"):
        ImplicitCKRidgeClassifier().fit(X, Reads(LABELS).array)
    assert reads.count == 0


def test_dask_dataframes_are_refused_with_the_conversion():
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    df = dd.from_pandas(pd.DataFrame(X, columns=[f"f{i}" for i in range(5)]), npartitions=4)
    est = ImplicitCKTransformer().fit(X)
    with pytest.raises(TypeError, match=r"to_dask_array\(lengths=True\)"):
        est.transform(df)
    with pytest.raises(TypeError, match=r"Dask DataFrame as X to fit"):
        ImplicitCKTransformer().fit(df)


# ------------------------------------------------------------------ map_row_blocks' outputs
def test_map_row_blocks_of_one_value_per_row_and_empty_blocks(ridges):
    clf = ridges[0]
    Xd = da.from_array(X, chunks=((70, 0, 90), (5,)))
    labels = map_row_blocks(Xd, clf.predict, None, clf.classes_.dtype)
    assert labels.shape == (160,) and labels.chunks == ((70, 0, 90),) and labels.dtype == clf.classes_.dtype
    np.testing.assert_array_equal(_sync(labels), clf.predict(X))
    scores = map_row_blocks(Xd, clf.decision_function, 3)
    np.testing.assert_allclose(_sync(scores), clf.decision_function(X), rtol=1e-12, atol=1e-12)
