"""Exact kernel ridge regression with the implicit kernels of a DEQ: :class:`ImplicitCKRidge`, :class:`ImplicitCKRidgeClassifier`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.preprocessing import LabelBinarizer
from sklearn.utils.multiclass import check_classification_targets

from .._dask import lazy_method, lazy_score
from .._validation import is_dask_collection
from ._base import _ImplicitRidgeBase

if TYPE_CHECKING:
    import torch

__all__ = ["ImplicitCKRidge", "ImplicitCKRidgeClassifier"]

_PARAMETERS = """activation : str, Activation or callable, default='relu'
        DEQ activation ``phi0``: a name from :data:`sk_deq.activations.ACTIVATIONS`
        (in any case, aliases included), an
        :class:`~sk_deq.activations.Activation` or a vectorised callable.
    sigma_a2 : float, default=0.2
        Variance of the recurrent weights, in (0, 1).
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        Which implicit kernel (as :class:`~sk_deq.ImplicitCKTransformer`'s).
    sigma_b2 : float, default=None
        Variance of the input weights; ``1 - sigma_a2`` when None.
    bias_variance : float, default=1.0
        A constant added to every kernel entry: the prior variance of a
        readout bias, which lets the model fit the targets' mean (see
        :ref:`kernel-bias`).
    input_scaling : {'global', 'none'}, default='global'
        ``'global'`` centres the features and divides by one factor so that
        the training samples have mean squared norm 1; ``'none'`` uses the
        inputs as given.
    alpha : float or array-like of shape (n_alphas,), default=1.0
        The ridge: ``(K + alpha I) C = Y``.  Several values are candidates:
        ``fit`` holds out ``validation_fraction`` of the samples, solves for
        each candidate on the rest (from the largest to the smallest, each
        solve started from the one before, one preconditioner for all, the
        kernel computed once) and scores it on the held-out samples, then
        fits all samples with the best (``alpha_``).
    solver : {'auto', 'cholesky', 'cg'}, default='auto'
        ``'cholesky'``: the stored kernel is factored in place (blocked, a
        tile at a time), exact to rounding; ``'cg'``: conjugate gradients
        with a randomly pivoted Cholesky preconditioner, stopped at ``tol``;
        ``'auto'``: Cholesky up to
        :data:`~sk_deq.kernel_ridge._plan.CHOLESKY_MAX_ROWS` samples,
        conjugate gradients above, and for a Dask array (on a cluster,
        where ``'cholesky'`` is refused).
    tol : float, default=1e-6
        Largest relative residual ``||Y - (K + alpha I) C|| / ||Y||`` of a
        target column (conjugate gradients).  With the kernel stored in
        float32 a residual under about ``1e-6`` cannot be resolved.
    max_iter : int, default=1000
        Most conjugate-gradient iterations (products with the stored kernel).
    preconditioner_rank : int, default=1000
        Columns of the randomly pivoted Cholesky factor of the kernel that
        preconditions the conjugate gradients (0: none).  Read from the
        stored kernel; ``n_samples x preconditioner_rank`` float64 in memory.
    storage : {'auto', 'float64', 'float32'}, default='auto'
        Dtype of the stored training kernel (its lower triangle): float64,
        float32 (half the memory; entries rounded to about ``6e-8`` of their
        size), or ``'auto'``: float64 where the fit fits in the memory
        available (on a cluster: every worker's part, below its spilling
        threshold), else float32.  Each tile is computed in float64.
    validation_fraction : float, default=0.1
        Share of the samples held out to choose among several ``alpha``.
    kernel_tol : float, default=1e-12
        Tolerance of every kernel entry's fixed point.
    block_size : int, default=None
        Rows and columns of the kernel engine's blocks (by default from
        scikit-learn's ``working_memory``).
    n_jobs : int, default=None
        Threads of the kernel engine (None: all cores, as
        :class:`~sk_deq.ImplicitCKTransformer`'s ``n_jobs``).  On a
        cluster, the threads of every slab's task on its worker (None: one;
        the worker's threads compute several slabs at once).
    device : None, str or torch.device, default=None
        Where the kernel's blocks are solved (:func:`sk_deq.resolve_device`);
        None for the numpy engine.
    random_state : int, RandomState instance or None, default=None
        Seed of the held-out split and of the preconditioner's pivots.
    verbose : int, default=0
        Print the fit's memory plan, then show the progress of the kernel's
        tiles and of every solve (residual and time left) on standard error."""

_ATTRIBUTES = """dual_coef_ : ndarray of shape (n_samples,) or (n_samples, n_targets)
        The solution ``C``: predictions are ``K(X, X_fit_) @ dual_coef_``.
    alpha_ : float
        The ridge of the fit (the best candidate when ``alpha`` lists several).
    alpha_scores_ : ndarray of shape (n_alphas,)
        Held-out score of every candidate, in the order of ``alpha`` (only
        when it lists several).
    solver_ : str
        The solver used, ``'cholesky'`` or ``'cg'``.
    n_iter_ : int
        Conjugate-gradient iterations of the final solve (1 for Cholesky:
        one direct solve).
    residual_ : float or None
        Largest relative residual of the final solve, recomputed from its
        definition (None for Cholesky, a direct solve).
    fit_plan_ : FitPlan or ClusterPlan
        The memory the fit needed, by part (``fit_plan_.describe()``), the
        storage dtype and the solver; on a cluster, the kernel's row slabs,
        the worker of each and the memory of the busiest worker and of the
        client.
    X_fit_ : ndarray of shape (n_samples, n_features)
        Training samples after input scaling.
    input_mean_ : ndarray of shape (n_features,) or None
        Training mean subtracted by ``input_scaling='global'``.
    input_scale_ : float
        Global factor the centred inputs are divided by.
    tau0_ : float
        Data scale of the scaled training samples.
    coefficients_ : sk_deq.theory.DEQCoefficients
        The DEQ's coefficients at ``tau0_``.
    dual_method_ : str
        How the dual activation is evaluated (closed form or Hermite expansion).
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names."""


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
        if any(is_dask_collection(v) for v in (X, y, sample_weight)):
            return lazy_score(self, X, y, sample_weight, "r2")
        return super().score(X, y, sample_weight=sample_weight)


ImplicitCKRidge.__doc__ = (ImplicitCKRidge.__doc__ or "").format(params=_PARAMETERS, attrs=_ATTRIBUTES)


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
        if any(is_dask_collection(v) for v in (X, y, sample_weight)):
            return lazy_score(self, X, y, sample_weight, "accuracy")
        return super().score(X, y, sample_weight=sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = False
        return tags


ImplicitCKRidgeClassifier.__doc__ = (ImplicitCKRidgeClassifier.__doc__ or "").format(
    params=_PARAMETERS, attrs=_ATTRIBUTES
)
