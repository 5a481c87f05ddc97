"""The code of the page "Data larger than memory" (``docs/larger_than_memory.rst``).

The page shows these functions; ``tests/test_dask.py`` runs them on a
small Dask array on a local cluster and compares their results with in-memory
computations.
"""

import dask
import dask.array as da
import joblib
import numpy as np
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

from sk_deq import ImplicitCKNystroem


def sample_rows(X, y, n_rows, random_state=0):
    """``n_rows`` random rows of the Dask arrays ``X`` and ``y``, as numpy arrays."""
    rng = np.random.default_rng(random_state)
    rows = np.sort(rng.choice(X.shape[0], size=min(n_rows, X.shape[0]), replace=False))
    return dask.compute(X[rows], y[rows])


def grid_search(X_sample, y_sample, n_components=300):
    """Kernel and ridge parameters chosen on an in-memory sample; every fit runs on a worker."""
    model = make_pipeline(
        ImplicitCKNystroem(n_components=n_components, random_state=0), LogisticRegression(max_iter=1000)
    )
    grid = {
        "implicitcknystroem__activation": ["relu", "tanh"],
        "implicitcknystroem__sigma_a2": [0.1, 0.3],
        "logisticregression__C": [0.1, 1.0, 10.0],
    }
    search = GridSearchCV(model, grid, cv=3, n_jobs=-1)
    with joblib.parallel_config(backend="dask"):
        search.fit(X_sample, y_sample)
    return search


def train_sgd(features, y, classes, n_epochs=5):
    """A linear classifier trained by passes over the row blocks, one block in memory at a time."""
    clf = SGDClassifier(loss="log_loss", alpha=1e-4, random_state=0)
    for _ in range(n_epochs):
        for i in range(features.numblocks[0]):
            F, y_block = dask.compute(features.blocks[i], y.blocks[i])
            clf.partial_fit(F, y_block, classes=classes)
    return clf


def predict(clf, features):
    """Labels of every row of a (lazy) feature array, computed block by block when asked."""
    labels = np.empty(0, dtype=clf.classes_.dtype)
    return features.map_blocks(clf.predict, drop_axis=1, dtype=labels.dtype, meta=labels)


def fit_larger_than_memory(X, y, n_sample=5000, n_components=300):
    """The whole pattern: ``X``, ``y`` Dask arrays with the same row chunks."""
    X_sample, y_sample = sample_rows(X, y, n_sample)
    search = grid_search(X_sample, y_sample, n_components)
    nystroem = search.best_estimator_.named_steps["implicitcknystroem"]  # fitted on the sample
    features = nystroem.transform(X)  # lazy: (n_samples, n_components), the row chunks of X
    features = features.persist()  # computed once, in parallel, kept in the workers' memory
    classes = da.unique(y).compute()
    clf = train_sgd(features, y, classes)
    return search, clf, features
