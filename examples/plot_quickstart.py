"""
Quickstart: a DEQ and its shallow explicit twin
===============================================

A deep equilibrium model (DEQ) computes its features as the fixed point of one
weight-tied layer, ``z* = phi(sqrt(sigma_a2) A z* + sqrt(1 - sigma_a2) B x) / sqrt(m)``.
With random weights and a trained linear readout it is a kernel machine whose
kernel depends on the activation ``phi`` and ``sigma_a2`` only through four
scalars.  :class:`~sk_deq.MatchedExplicitClassifier` solves those equations and
builds a *two-layer* explicit network with the same kernel, which needs no
fixed-point solve at all.

Here both are fitted on scikit-learn's handwritten digits.
"""

# %%
# Data: 8x8 digits, a stratified split
# ------------------------------------
import time

from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from sk_deq import DEQClassifier, MatchedExplicitClassifier

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
print(f"{len(y_train)} training and {len(y_test)} test samples, {X.shape[1]} features")

# %%
# Fit the DEQ and its matched explicit network
# --------------------------------------------
# Both scale the inputs the same way (centred, mean squared norm 1, so the
# data scale is ``tau0 = 1``), freeze their random weights and train only the
# readout (the setting of the theory).  The ReLU-DEQ with ``sigma_a2 = 0.2`` is
# matched by two leaky-ReLU layers.
models = {
    "DEQ (ReLU)": DEQClassifier(n_hidden=512, activation="relu", sigma_a2=0.2, random_state=0),
    "matched explicit": MatchedExplicitClassifier(activation="relu", sigma_a2=0.2, n_hidden=512, random_state=0),
}
for name, model in models.items():
    start = time.perf_counter()
    model.fit(X_train, y_train)
    fit_time = time.perf_counter() - start
    print(f"{name:<18} test accuracy {model.score(X_test, y_test):.3f}   fit {fit_time:.2f}s")

# %%
# What was matched
# ----------------
# ``match_`` holds the explicit network found at fit time: the layer
# parameters (slopes ``a`` for positive and ``b`` for negative inputs), the
# DEQ-side targets of the four matching equations M1-M4, and how closely each
# is met.
matched = models["matched explicit"]
print(matched.match_)

# %%
# The DEQ reports how its fixed-point solves went:
print(models["DEQ (ReLU)"].fixed_point_info_)

# %%
# The two networks agree on most test digits:
import numpy as np  # noqa: E402

agree = np.mean(models["DEQ (ReLU)"].predict(X_test) == matched.predict(X_test))
print(f"the DEQ and its matched explicit network predict the same class on {100 * agree:.1f}% of the test set")
