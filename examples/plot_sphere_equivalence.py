"""
A ReLU-DEQ and a one-layer quadratic network on the unit sphere
===============================================================

The experiment of the HLD 2023 workshop paper on implicit and explicit
networks (its Fig. 1): data uniform on the unit sphere of ``R^d``, a DEQ
with the uncentred normalised ReLU ``sqrt(2) max(x, 0)`` and
``sigma_a2 = 0.2``.  On the sphere the DEQ's conjugate kernel ``G*`` and NTK
``K*`` are, in operator norm, ``alpha 1 1^T + beta X^T X + mu I``, and one
explicit layer with the quadratic activation ``a2 t^2 + a1 t + a0`` of
Corollary 1 has the same three coefficients, hence the same spectrum; one
layer with the plain ReLU does not.  The formulas are on the theory page
(:ref:`theory-sphere`).

This example runs the spectra at the paper's size (``n = 1000``,
``d = 1200``) and the errors for ``n`` up to 1000; ``sk-deq spectrum --data
sphere --out DIR`` adds ``n = 2000`` (about 30 s on two cores).
"""

# %%
# The coefficients and the matched activation
# -------------------------------------------
# :func:`~sk_deq.theory.sphere_deq_coefficients` evaluates Theorems 1 and 3
# through ``g(0), g'(0), g''(0)`` of the implicit map;
# :func:`~sk_deq.theory.sphere_quadratic_match` solves Corollary 1 in closed
# form.  The NTK here trains the explicit layer's weights ``W``
# (``Theta = Sigma + (X^T X) * E[sigma' sigma']``), the workshop's convention.
import time

import matplotlib.pyplot as plt

from sk_deq.experiments import sphere_spectrum
from sk_deq.plotting import plot_sphere_errors, plot_sphere_spectra
from sk_deq.theory import sphere_quadratic_match

for kernel in ("ck", "ntk"):
    m = sphere_quadratic_match(0.2, 1200, kernel)
    t = m.targets
    print(f"{kernel.upper()}: alpha={t.alpha:.5f} beta={t.beta:.5f} mu={t.mu:.5f}")
    print(f"     sigma(t) = {m.a2:.5f} t^2 + {m.a1:.5f} t + {m.a0:.5f}")

# %%
# Spectra and errors
# ------------------
# Exact kernels throughout: Lemma 1's scalar fixed point for the DEQ, closed
# Gaussian expectations for the quadratic layer, the arc-cosine kernel for the
# ReLU layer (``n_hidden=4096`` would use random networks of that width
# instead).
start = time.perf_counter()
result = sphere_spectrum(sigma_a2=0.2, size=(1000, 1200), sizes=(125, 250, 500, 1000))
print(result)
print(f"({time.perf_counter() - start:.1f}s)")

# %%
# The three panels of the figure for the CK (the bulk; the titles give the
# largest eigenvalues): the plain ReLU layer's bulk is narrower and its
# largest eigenvalue, the ``alpha n`` spike of ``alpha 1 1^T``, is 319 against
# the DEQ's 72; the quadratic layer's spectrum is the DEQ's.
plot_sphere_spectra(result, "ck")

# %%
# The same for the NTK: the plain layer's bulk starts at 0.69 (its ``mu``)
# instead of 0.18.
plot_sphere_spectra(result, "ntk")

# %%
# Operator-norm errors at ``d / n = 1.2``: the quadratic layer and the
# equivalent approach the DEQ's kernels, by a factor of about 2.7 for every
# doubling of ``n``; the plain ReLU layer stays off by a factor of about
# three, most of it in the ``1 1^T`` direction.
plot_sphere_errors(result)
plt.show()
