"""Exact kernel ridge regression with the implicit kernels of a DEQ: :class:`ImplicitCKRidge`, :class:`ImplicitCKRidgeClassifier`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.preprocessing import LabelBinarizer
from sklearn.utils.multiclass import check_classification_targets

from .._dask import lazy_method
from .._validation import is_dask_collection
from .._scoring import accuracy_of, r2_score_of
from ._base import _ImplicitRidgeBase
from ._docs import ATTRIBUTES, PARAMETERS

if TYPE_CHECKING:
    import torch

__all__ = ["ImplicitCKRidge", "ImplicitCKRidgeClassifier"]


class ImplicitCKRidge(MultiOutputMixin, RegressorMixin, _ImplicitRidgeBase):
    """Exact kernel ridge regression with the infinite-width kernel of a DEQ, at any number of samples.

    The model of ``make_pipeline(ImplicitCKTransformer(), KernelRidge(kernel="precomputed"))``,
    fitted without holding the square kernel more than once: its lower
    triangle is stored in tiles (float64, or float32 where float64 does
    not fit), computed tile by tile by the exact kernel engine, and
    ``(K + alpha I) C = Y`` is solved for every target at once by a
    blocked Cholesky factorisation in place or by preconditioned conjugate
    gradients.  Predictions stream the test kernel in row blocks (sized by
    scikit-learn's ``working_memory``).  See :ref:`exact-kernel-ridge`.

    Parameters
    ----------
    {params}

    Attributes
    ----------
    {attrs}

    See Also
    --------
    ImplicitCKRidgeClassifier : The same on ±1 targets, for classification.
    sk_deq.ImplicitCKTransformer : The kernel itself, for any kernel machine.
    sk_deq.ImplicitCKNystroem : Low-rank features, memory linear in the samples.
    sklearn.kernel_ridge.KernelRidge : Kernel ridge on a precomputed kernel.

    Notes
    -----
    ``fit`` says what it will need in memory before it allocates anything
    (``fit_plan_``; printed with ``verbose``), and raises a ``MemoryError``
    naming the ways out where even float32 storage does not fit.

    Examples
    --------
    >>> from sklearn.datasets import load_diabetes
    >>> from sk_deq import ImplicitCKRidge
    >>> X, y = load_diabetes(return_X_y=True)
    >>> model = ImplicitCKRidge(alpha=[1.0, 0.1, 0.01], random_state=0).fit(X[:300], y[:300])
    >>> model.alpha_ in (1.0, 0.1, 0.01), model.predict(X[300:]).shape
    (True, (142,))
    """

    _single_output = False

    def _targets(self, y) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        self._single_output = y.ndim == 1
        return y.reshape(len(y), -1)

    def _heldout_score(self, Y, pred, weights) -> float:
        from sklearn.metrics import r2_score

        return float(r2_score(Y, pred, sample_weight=weights))

    def predict(self, X: ArrayLike | torch.Tensor) -> NDArray[np.float64]:
        """Predict the targets of ``X``.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples.  A Dask array gives a lazy Dask array, row block by row
            block (each worker receives the fitted estimator once).

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,) or (n_samples, n_targets)
            Predictions.
        """
        if is_dask_collection(X):
            return lazy_method(
                X, self.predict, lambda est: (None if est._single_output else est.dual_coef_.shape[1], np.float64)
            )
        out = self._decision(X)
        return out[:, 0] if self._single_output else out

    def score(self, X: ArrayLike | torch.Tensor, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """Coefficient of determination R² of :meth:`predict`, averaged uniformly over the targets.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples.  With Dask arrays (``X``, ``y`` or the weights) the
            predictions are compared block by block where they are computed;
            only sums come back.
        y : array-like or dask.array.Array of shape (n_samples,) or (n_samples, n_targets)
            True targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of every sample.

        Returns
        -------
        float
            :func:`sklearn.metrics.r2_score`.
        """
        return r2_score_of(self, X, y, sample_weight)


ImplicitCKRidge.__doc__ = (ImplicitCKRidge.__doc__ or "").format(params=PARAMETERS, attrs=ATTRIBUTES)


class ImplicitCKRidgeClassifier(ClassifierMixin, _ImplicitRidgeBase):
    """Classification by exact kernel ridge regression on ±1 targets with the infinite-width kernel of a DEQ.

    :class:`ImplicitCKRidge` on one ±1 column per class (one column for two
    classes), as :class:`~sklearn.linear_model.RidgeClassifier` does; the
    class of the largest score is predicted.  See :ref:`exact-kernel-ridge`.

    Parameters
    ----------
    {params}

    Attributes
    ----------
    {attrs}
    classes_ : ndarray of shape (n_classes,)
        The class labels.

    See Also
    --------
    ImplicitCKRidge : The regressor.
    sklearn.linear_model.RidgeClassifier : The same construction with a linear model.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sk_deq import ImplicitCKRidgeClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = ImplicitCKRidgeClassifier(alpha=0.01).fit(X[:1000], y[:1000])
    >>> bool(clf.score(X[1000:], y[1000:]) > 0.9)
    True
    """

    _single_output = False

    def _targets(self, y) -> np.ndarray:
        check_classification_targets(y)
        self._binarizer = LabelBinarizer(pos_label=1, neg_label=-1)
        Y = self._binarizer.fit_transform(y).astype(np.float64)
        self.classes_ = self._binarizer.classes_
        if len(self.classes_) < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, but the data contain only "
                f"one class: {self.classes_[0]!r}."
            )
        self._single_output = Y.shape[1] == 1
        return Y

    def _heldout_score(self, Y, pred, weights) -> float:
        truth = (Y[:, 0] > 0).astype(int) if Y.shape[1] == 1 else Y.argmax(axis=1)
        guess = (pred[:, 0] > 0).astype(int) if pred.shape[1] == 1 else pred.argmax(axis=1)
        return float(np.average(truth == guess, weights=weights))

    def decision_function(self, X: ArrayLike | torch.Tensor) -> NDArray[np.float64]:
        """Scores of the classes (one column for two classes, the second's).

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples (a Dask array: a lazy Dask array out, row block by row block).

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,) or (n_samples, n_classes)
            The kernel ridge predictions of the ±1 targets.
        """
        if is_dask_collection(X):
            return lazy_method(
                X, self.decision_function, lambda est: (None if est._single_output else len(est.classes_), np.float64)
            )
        out = self._decision(X)
        return out[:, 0] if self._single_output else out

    def predict(self, X: ArrayLike | torch.Tensor) -> NDArray:
        """Predict class labels: the class of the largest score.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples (a Dask array: a lazy Dask array out, row block by row block).

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,)
            Labels.
        """
        if is_dask_collection(X):
            return lazy_method(X, self.predict, lambda est: (None, est.classes_.dtype))
        scores = self.decision_function(X)
        idx = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[idx]

    def score(self, X: ArrayLike | torch.Tensor, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """Mean accuracy of :meth:`predict`.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples.  With Dask arrays (``X``, ``y`` or the weights) the
            predictions are compared block by block where they are computed;
            only sums come back.
        y : array-like or dask.array.Array of shape (n_samples,)
            True labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of every sample.

        Returns
        -------
        float
            The (weighted) share of right labels.
        """
        return accuracy_of(self, X, y, sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = False
        return tags


ImplicitCKRidgeClassifier.__doc__ = (ImplicitCKRidgeClassifier.__doc__ or "").format(
    params=PARAMETERS, attrs=ATTRIBUTES
)
