"""
Regression with a DEQ and its matched explicit network
======================================================

:class:`~sk_deq.DEQRegressor`, :class:`~sk_deq.MatchedExplicitRegressor` and
:class:`~sk_deq.ExplicitRegressor` are the classifiers' networks with a
linear readout fitted by least squares (in closed form when only the readout
is trained).  Here they meet kernel ridge regression on the DEQ's exact
implicit feature kernel, the model both networks approximate at infinite
width, on Friedman's first regression problem, all on the same five folds
(:func:`~sk_deq.model_selection.compare_estimators`).
"""

# %%
# Data and contestants
# --------------------
# ``make_friedman1``: 10 inputs, of which the target uses 5.  The networks'
# readout is ridge regression on their features, so at infinite width it
# becomes kernel ridge regression with the DEQ's *feature* kernel
# (``kernel="feature"``, the limit of the Gram matrix of ``z*``) and the
# networks' penalty ``n_samples * alpha`` (800 x 1e-4).  Kernel ridge has no
# intercept, so its targets are standardised, as the networks standardise
# theirs.
import matplotlib.pyplot as plt
import numpy as np
from sklearn.compose import TransformedTargetRegressor
from sklearn.datasets import make_friedman1
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sk_deq import DEQRegressor, ExplicitRegressor, ImplicitCKTransformer, MatchedExplicitRegressor
from sk_deq.model_selection import compare_estimators
from sk_deq.plotting import plot_paired_scores

X, y = make_friedman1(n_samples=1000, noise=1.0, random_state=0)
width = 512
estimators = {
    "DEQ": DEQRegressor("relu", 0.2, n_hidden=width, random_state=0),
    "matched": MatchedExplicitRegressor("relu", 0.2, n_hidden=width, random_state=0),
    "plain ReLU": ExplicitRegressor(("relu",), n_hidden=width, random_state=0),
    "KRR, feature kernel": TransformedTargetRegressor(
        make_pipeline(
            ImplicitCKTransformer("relu", 0.2, kernel="feature"), KernelRidge(alpha=800 * 1e-4, kernel="precomputed")
        ),
        transformer=StandardScaler(),
    ),
}

# %%
# Five folds, paired
# ------------------
# Every estimator is fitted on the same folds, so the per-fold R² are paired;
# the corrected resampled t-test says which differences the folds support.
result = compare_estimators(estimators, X, y, cv=KFold(5, shuffle=True, random_state=0), scoring="r2")
print(result)

# %%
# The per-fold scores as paired lines: one line per fold.
fig = plot_paired_scores(result)
fig.axes[0].set_title("Friedman #1, R² on 5 folds")
plt.show()

# %%
# Predictions of the DEQ and of its matched network
# -------------------------------------------------
# The two networks share a kernel, not weights: their predictions on held-out
# samples agree closely, and both follow the target.
train, test = np.arange(800), np.arange(800, 1000)
deq = estimators["DEQ"].fit(X[train], y[train])
matched = estimators["matched"].fit(X[train], y[train])
fig, axes = plt.subplots(1, 2, figsize=(9, 4), layout="constrained")
axes[0].scatter(y[test], deq.predict(X[test]), s=8, label="DEQ")
axes[0].scatter(y[test], matched.predict(X[test]), s=8, label="matched")
axes[0].plot([y.min(), y.max()], [y.min(), y.max()], color="k", lw=1)
axes[0].set(xlabel="target", ylabel="prediction", title="held-out samples")
axes[0].legend()
axes[1].scatter(deq.predict(X[test]), matched.predict(X[test]), s=8)
axes[1].set(xlabel="DEQ prediction", ylabel="matched prediction", title="DEQ against matched")
print(
    f"correlation of the two networks' predictions: {np.corrcoef(deq.predict(X[test]), matched.predict(X[test]))[0, 1]:.3f}"
)
plt.show()
