"""
Pipelines and grid search: DEQ, matched network and DEQ kernel
==============================================================

All ``sk_deq`` models are ordinary scikit-learn estimators, so they go into a
:class:`~sklearn.pipeline.Pipeline` and their hyperparameters, including the
DEQ's recurrent weight variance ``sigma_a2``, can be tuned with
:class:`~sklearn.model_selection.GridSearchCV`.  This example tunes three
models on a subset of scikit-learn's digits:

* :class:`~sk_deq.DEQClassifier`, a random-feature DEQ with a trained readout;
* :class:`~sk_deq.MatchedExplicitClassifier`, the two-layer explicit network
  with the same kernel as that DEQ (re-matched for every ``sigma_a2``);
* :class:`~sk_deq.ImplicitCKTransformer` followed by
  ``SVC(kernel="precomputed")``: a support vector machine on the DEQ's exact
  infinite-width kernel (its "feature" kernel, the one the readout sees).
"""

# %%
# Data
# ----
import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from sk_deq import DEQClassifier, ImplicitCKTransformer, MatchedExplicitClassifier

X, y = load_digits(return_X_y=True)
X, _, y, _ = train_test_split(X, y, train_size=900, stratify=y, random_state=0)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
print(f"{len(y_train)} training and {len(y_test)} test samples")

# %%
# Three pipelines and their grids
# -------------------------------
# The networks rescale their inputs themselves (centred, mean squared norm 1);
# a ``StandardScaler`` in front first puts every pixel on the same footing.
searches = {
    "DEQ": (
        make_pipeline(StandardScaler(), DEQClassifier(n_hidden=256, random_state=0)),
        {"deqclassifier__sigma_a2": [0.1, 0.2, 0.4], "deqclassifier__alpha": [1e-5, 1e-3]},
    ),
    "matched explicit": (
        make_pipeline(StandardScaler(), MatchedExplicitClassifier(n_hidden=256, random_state=0)),
        {"matchedexplicitclassifier__sigma_a2": [0.1, 0.2, 0.4], "matchedexplicitclassifier__alpha": [1e-5, 1e-3]},
    ),
    "DEQ kernel + SVC": (
        make_pipeline(StandardScaler(), ImplicitCKTransformer(kernel="feature"), SVC(kernel="precomputed")),
        {"implicitcktransformer__sigma_a2": [0.1, 0.2, 0.4], "svc__C": [1.0, 10.0]},
    ),
}

cv = StratifiedKFold(3, shuffle=True, random_state=0)
results = {}
for name, (pipe, grid) in searches.items():
    start = time.perf_counter()
    search = GridSearchCV(pipe, grid, cv=cv).fit(X_train, y_train)
    elapsed = time.perf_counter() - start
    results[name] = search
    print(
        f"{name:<17} best CV accuracy {search.best_score_:.3f}  test accuracy "
        f"{search.score(X_test, y_test):.3f}  ({elapsed:.1f}s for {len(search.cv_results_['params'])} "
        f"candidates x 3 folds)\n  best parameters: {search.best_params_}"
    )

# %%
# Cross-validated accuracy versus sigma_a2
# ----------------------------------------
# For every model, the best score over its other hyperparameter at each
# ``sigma_a2``.  The DEQ and its matched explicit network respond to
# ``sigma_a2`` alike, as they should: at every ``sigma_a2`` the explicit network
# is matched anew to the DEQ with that variance.
fig, ax = plt.subplots(figsize=(5.5, 3.5), layout="constrained")
for name, search in results.items():
    cvr = search.cv_results_
    key = next(k for k in cvr if k.startswith("param_") and k.endswith("sigma_a2"))
    values = np.array(cvr[key], dtype=float)
    grid_s = np.unique(values)
    best = [np.max(cvr["mean_test_score"][values == s]) for s in grid_s]
    ax.plot(grid_s, best, marker="o", label=name)
ax.set_xlabel("sigma_a2")
ax.set_ylabel("mean CV accuracy")
ax.set_title("3-fold CV on 630 digits")
ax.grid(True, alpha=0.3)
ax.legend()
