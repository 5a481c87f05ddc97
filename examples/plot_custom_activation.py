"""
Matching a DEQ with a custom activation
=======================================

Any scalar function can be the activation of a DEQ.  Wrap it in
:class:`sk_deq.activations.Activation`, giving its derivative and the points
where it has kinks (the Gaussian integrals of the theory are exact only
between those points), and the whole pipeline works as for the built-in
activations:

1. solve the DEQ's four equations for its kernel coefficients
   (:func:`sk_deq.deq_ck_coefficients`);
2. find a shallow explicit network with the same kernel
   (:func:`sk_deq.match_explicit` with ``family="auto"``) and read the
   residual of every matching equation;
3. check on data that the kernels agree, with the exact and Monte-Carlo
   kernels of :mod:`sk_deq.kernels`.
"""

# %%
# A kinked activation
# -------------------
# A ReLU whose slope rises from 1 to 1.5 at ``x = 1``: piecewise linear with
# kinks at 0 and 1.  It is neither odd nor positively homogeneous, so none of
# the paper's closed-form matches applies.
import time

import matplotlib.pyplot as plt
import numpy as np

from sk_deq import Activation, deq_ck_coefficients, make_gaussian_mixture, match_explicit
from sk_deq.kernels import (
    explicit_kernel,
    implicit_kernel,
    monte_carlo_explicit_kernel,
    monte_carlo_implicit_kernel,
    relative_spectral_error,
)


def kinked_relu(x):
    return np.maximum(x, 0.0) + 0.5 * np.maximum(x - 1.0, 0.0)


def kinked_relu_derivative(x):
    return (x > 0).astype(float) + 0.5 * (x > 1.0)


act = Activation(kinked_relu, "kinked_relu", derivative=kinked_relu_derivative, breakpoints=(0.0, 1.0))

# %%
# The four equations
# ------------------
# The data below, the paper's two-class Gaussian mixture, has data scale
# ``tau0`` (root mean squared sample norm) of about 1.23.  The DEQ's
# pre-activation scale ``tau`` and its kernel coefficients ``alpha1..alpha3``
# follow from ``tau0``, the activation and ``sigma_a2``:
X, y = make_gaussian_mixture(300, 240, random_state=0)
tau0 = float(np.sqrt(np.mean(np.sum(X**2, axis=1))))
sigma_a2 = 0.2
deq = deq_ck_coefficients(act, sigma_a2, tau0)
print(f"tau0 = {tau0:.4f}")
print(deq)

# %%
# The matched explicit network
# ----------------------------
# ``family="auto"`` tries two leaky-ReLU layers, a leaky-ReLU layer with a
# quadratic one (both orders) and three leaky-ReLU layers, and keeps the one
# with the smallest largest residual.  A residual is relative:
# ``(achieved - target) / |target|``.
start = time.perf_counter()
match = match_explicit(act, sigma_a2, tau0, family="auto")
print(f"matched in {time.perf_counter() - start:.1f}s")
print(match)
print("families tried (largest residual):", ", ".join(f"{f} {r:.3g}" for f, r in match.candidates))

# %%
# The activations side by side
# ----------------------------
# Every activation is centred at its own input scale (the DEQ's at ``tau``,
# layer ``l`` of the explicit network at ``tau_{l-1}``), which is what the
# networks compute.
x = np.linspace(-3, 3, 601)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
ax = axes[0]
ax.plot(x, act(x) - deq.moments.mean, lw=2.5, color="black", label="DEQ: kinked ReLU")
for i, (layer, center, kind) in enumerate(zip(match.layers, match.centers, match.kinds), 1):
    ax.plot(x, layer(x) - center, lw=1.8, label=f"explicit layer {i}: {kind}")
ax.axhline(0, color="grey", lw=0.5)
ax.set_xlabel("pre-activation")
ax.set_title("activations (centred)", fontsize="medium")
ax.legend(fontsize="small")

# %%
# Do the kernels agree?
# ---------------------
# The readout of the DEQ sees the *feature kernel* ``Z*^T Z*`` of the
# equilibrium features.  Its exact infinite-width limit is compared with the
# exact kernel of the matched network, with a plain one-layer network with the
# same kinked activation (Monte Carlo, width 2000), and with one random DEQ of
# width 2000 (the finite-width noise floor).
start = time.perf_counter()
K_deq = implicit_kernel(X, activation=act, sigma_a2=sigma_a2, kernel="feature")
K_matched = explicit_kernel(X, layers=match.layers, tau0=tau0)
K_plain = monte_carlo_explicit_kernel(X, [act], n_hidden=2000, random_state=0)
K_deq_mc = monte_carlo_implicit_kernel(X, act, sigma_a2, kernel="feature", n_hidden=2000, random_state=0)
print(f"kernels computed in {time.perf_counter() - start:.1f}s")
for name, K in [
    ("matched explicit (exact)", K_matched),
    ("plain one layer (MC)", K_plain),
    ("random DEQ (MC)", K_deq_mc),
]:
    print(f"relative spectral error of {name:<25} {relative_spectral_error(K_deq, K):.3f}")

# %%
# The matched network's kernel lies close to the DEQ's, closer than one
# random DEQ of width 2000; the plain network's does not.  Every off-diagonal
# entry:
iu = np.triu_indices_from(K_deq, k=1)
ax = axes[1]
ax.scatter(K_deq[iu], K_plain[iu], s=2, alpha=0.3, label="plain one layer")
ax.scatter(K_deq[iu], K_matched[iu], s=2, alpha=0.3, label=f"matched ({match.family})")
lims = [K_deq[iu].min(), K_deq[iu].max()]
ax.plot(lims, lims, color="black", lw=1)
ax.set_xlabel("DEQ feature kernel entry (exact)")
ax.set_ylabel("explicit kernel entry")
ax.set_title("kernel entries on the Gaussian mixture", fontsize="medium")
ax.legend(fontsize="small", markerscale=4)
