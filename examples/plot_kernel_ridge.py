"""
Kernel ridge regression and Gaussian processes with the DEQ kernel
==================================================================

The infinite-width limit of a random DEQ is a kernel machine.  Its kernel, the
Implicit-CK, is computed exactly (entry by entry, as the fixed point of a
scalar recursion) by :class:`~sk_deq.ImplicitCKTransformer`, which turns
samples into their kernel against the training samples, so that any
estimator taking a precomputed kernel can use it.  Here it drives
:class:`~sklearn.kernel_ridge.KernelRidge` on scikit-learn's diabetes
regression data, next to the usual RBF kernel, and
:class:`~sk_deq.gaussian_process.ImplicitCKKernel` drives a
:class:`~sklearn.gaussian_process.GaussianProcessRegressor` that tunes the
DEQ's ``sigma_a2`` by maximising the marginal likelihood.
"""

# %%
# Data
# ----
import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.compose import TransformedTargetRegressor
from sklearn.datasets import load_diabetes
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel
from sklearn.kernel_ridge import KernelRidge
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV, KFold, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sk_deq import ImplicitCKTransformer
from sk_deq.gaussian_process import ImplicitCKKernel

X, y = load_diabetes(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
print(f"{len(y_train)} training and {len(y_test)} test samples, {X.shape[1]} features, mean target {y.mean():.0f}")

# %%
# Kernel ridge: DEQ kernel versus RBF
# -----------------------------------
# The DEQ kernel has the DEQ's hyperparameters (``activation``, ``sigma_a2``),
# tuned here by cross-validation next to the ridge penalty.  The transformer
# centres the inputs and scales them to mean squared norm 1, the data scale
# the theory assumes, and adds the variance of a readout bias (``bias_variance``,
# 1 by default) to the kernel: kernel ridge has no intercept, and with it the
# targets are used as they are, mean included.
cv = KFold(5, shuffle=True, random_state=0)
deq_krr = GridSearchCV(
    make_pipeline(ImplicitCKTransformer(), KernelRidge(kernel="precomputed")),
    {
        "implicitcktransformer__activation": ["relu", "tanh"],
        "implicitcktransformer__sigma_a2": [0.2, 0.5, 0.8],
        "kernelridge__alpha": [0.1, 0.3, 1.0, 3.0],
    },
    cv=cv,
)
# The RBF kernel has no constant part either: its targets are standardised
# (and its predictions mapped back) by a ``TransformedTargetRegressor``.
rbf_krr = GridSearchCV(
    TransformedTargetRegressor(
        make_pipeline(StandardScaler(), KernelRidge(kernel="rbf")), transformer=StandardScaler()
    ),
    {
        "regressor__kernelridge__gamma": [0.003, 0.01, 0.03, 0.1],
        "regressor__kernelridge__alpha": [0.1, 0.3, 1.0, 3.0],
    },
    cv=cv,
)
predictions = {}
for name, model in {"DEQ kernel ridge": deq_krr, "RBF kernel ridge": rbf_krr}.items():
    start = time.perf_counter()
    model.fit(X_train, y_train)
    elapsed = time.perf_counter() - start
    predictions[name] = model.predict(X_test)
    print(
        f"{name:<17} test R^2 {r2_score(y_test, predictions[name]):.3f}  (CV R^2 {model.best_score_:.3f}, "
        f"search {elapsed:.1f}s)\n  best: {model.best_params_}"
    )

# %%
# A Gaussian process with the DEQ kernel
# --------------------------------------
# :class:`~sk_deq.gaussian_process.ImplicitCKKernel` is a scikit-learn GP kernel
# with ``sigma_a2`` as a hyperparameter.  A kernel is a fixed function of its
# two arguments, so it assumes inputs already at the data scale ``tau0``
# (here 1): scale them like the transformer does, with the training mean and
# one global factor.
mean = X_train.mean(axis=0)
scale = np.sqrt(np.mean(np.sum((X_train - mean) ** 2, axis=1)))
Xs_train, Xs_test = (X_train - mean) / scale, (X_test - mean) / scale

kernel = ConstantKernel(1.0) * ImplicitCKKernel(activation="relu", sigma_a2=0.5) + WhiteKernel(0.5)
start = time.perf_counter()
gp = GaussianProcessRegressor(kernel, normalize_y=True, random_state=0).fit(Xs_train, y_train)
elapsed = time.perf_counter() - start
gp_mean, gp_std = gp.predict(Xs_test, return_std=True)
predictions["DEQ-kernel GP"] = gp_mean
print(f"GP fitted in {elapsed:.1f}s; learned kernel: {gp.kernel_}")
print(f"DEQ-kernel GP     test R^2 {r2_score(y_test, gp_mean):.3f}")
inside = np.mean(np.abs(y_test - gp_mean) <= 1.96 * gp_std)
print(f"{100 * inside:.0f}% of the test targets lie inside the GP's 95% predictive interval")

# %%
# Predictions against the truth
# -----------------------------
fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), sharex=True, sharey=True, layout="constrained")
lims = [y.min() - 10, y.max() + 10]
for ax, (name, pred) in zip(axes, predictions.items()):
    ax.scatter(y_test, pred, s=12, alpha=0.7)
    ax.plot(lims, lims, color="grey", lw=1)
    ax.set_title(f"{name}\nR$^2$ = {r2_score(y_test, pred):.3f}", fontsize="medium")
    ax.set_xlabel("true target")
axes[0].set_ylabel("prediction")
