"""Implicit kernels of DEQs as a scikit-learn transformer: :class:`ImplicitCKTransformer`.

:class:`ImplicitCKTransformer` turns samples into their kernel against the
training samples, so that any estimator taking a precomputed kernel
(``KernelRidge(kernel="precomputed")``, ``SVC(kernel="precomputed")``,
``KernelPCA``, ...) can use the infinite-width kernel of a DEQ inside a
:class:`~sklearn.pipeline.Pipeline` and a grid search.  The same kernel as a
Gaussian-process kernel is :class:`sk_deq.gaussian_process.ImplicitCKKernel`
(also importable from here).  Only numpy and scipy are needed; torch only
with a ``device`` (:mod:`sk_deq.kernels.torch_engine`).
"""

from __future__ import annotations

from numbers import Integral
from typing import TYPE_CHECKING, Any, ClassVar, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from ._dask import is_dask_collection, map_row_blocks
from ._runtime import resolve_device
from ._scaling import apply_input_scaling, fit_input_scaling, scaling_device, squared_norms
from ._persistence import restored_state, versioned_state
from ._validation import to_numpy, validate_samples
from .gaussian_process import ImplicitCKKernel  # noqa: F401  (defined there, importable from here too)
from ._validation import KERNEL_TRANSFORMER_CONSTRAINTS, SortedStrOptions, fit_context, warn_unused_settings
from .kernels import (
    ImplicitKernelEngine,
    MonteCarloDEQSampler,
    auto_block_size,
    check_kernel_fits_in_memory,
    linearized_block,
    linearized_kernel_coefficients,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    import dask.array
    import torch

    from typing_extensions import Self

    from .activations import Activation

__all__ = ["ImplicitCKTransformer"]

_METHODS = ("exact", "linearized", "monte_carlo")

#: what to do when the square training kernel of fit_transform does not fit (its rows cannot be split)
_SQUARE_ADVICE = (
    "The training kernel is square and cannot be computed a block of rows at a time. For kernel ridge on this many "
    "samples use sk_deq.ImplicitCKRidge or ImplicitCKRidgeClassifier, which store the kernel once (its lower "
    "triangle, in float32 where float64 does not fit; a pipeline ending in KernelRidge(kernel='precomputed') holds "
    "the transformer's output and KernelRidge's own copy of it); or sk_deq.ImplicitCKNystroem features, whose "
    "memory is linear in the samples; or fit on fewer samples."
)


class ImplicitCKTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Kernel of an infinite-width (or random finite-width) DEQ against the training data.

    ``fit(X)`` stores the (scaled) training samples and the data scale
    ``tau0``; ``transform(X)`` returns the kernel between ``X`` and the
    training samples, of shape (n_samples, n_training_samples); and
    ``fit_transform(X)`` the square training kernel.  So a pipeline ending in
    ``KernelRidge(kernel="precomputed")`` or ``SVC(kernel="precomputed")``
    fits and predicts with the DEQ kernel, and a grid search can tune
    ``sigma_a2`` and ``activation`` next to the ridge penalty.

    The kernels (see :ref:`theory-exact` and :ref:`theory-ntk`), all fixed
    points of entrywise recursions, are

    * ``kernel='ck'``: the Implicit-CK ``G*`` of Ling et al. (2024),
      ``G_ij = sigma_a2 E[phi(u) phi(v)] + sigma_b2 x_i^T x_j``, which keeps
      the input injection ``sigma_b2 X X^T``;
    * ``kernel='feature'``: ``Sigma* = (G* - sigma_b2 X X^T) / sigma_a2``,
      the Gram matrix of the DEQ's equilibrium features ``z*`` -- the kernel
      its linear readout actually sees;
    * ``kernel='ntk'``: the Implicit-NTK
      ``Sigma* / (1 - sigma_a2 E[phi'(u) phi'(v)])`` (readout and recurrent
      weights trained).

    ``phi = phi0 - c`` is the activation centred at the DEQ's pre-activation
    scale ``tau`` for the *training* scale ``tau0``; ``c`` stays fixed when
    new data are transformed.

    Parameters
    ----------
    activation : str, Activation or callable, default='relu'
        DEQ activation ``phi0``: a name from :data:`sk_deq.activations.ACTIVATIONS`
        (in any case, aliases included), an
        :class:`~sk_deq.activations.Activation` or a vectorised callable.
    sigma_a2 : float, default=0.2
        Variance of the recurrent weights, in (0, 1).
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        Which kernel (see above).
    method : {'exact', 'linearized', 'monte_carlo'}, default='exact'
        ``'exact'``: the infinite-width fixed point of every entry (closed
        forms for ReLU / leaky ReLU, erf, GELU and quadratic activations; a
        Hermite expansion of the dual activation with quadrature fallback for
        any other).  ``'linearized'``: the label-free high-dimensional
        equivalent (see :ref:`theory-gmm`, and
        :func:`sk_deq.kernels.linearized_implicit_kernel` for when it is
        accurate).  ``'monte_carlo'``: the average over ``n_draws`` random
        DEQs of width ``n_hidden``, as in Ling et al.'s (2024) experiments.
    sigma_b2 : float, default=None
        Variance of the input weights; ``1 - sigma_a2`` when None.  Below
        1e-4 it warns (see :ref:`input-scaling`).
    bias_variance : float, default=1.0
        A constant added to every entry of the kernel: the prior variance of
        a bias of the readout, as the NNGP kernels of networks with biased
        layers carry it (see :ref:`kernel-bias`).  The implicit kernels are
        centred (their entries between different samples average about
        zero), so a kernel machine without an intercept of its own, such as
        :class:`~sklearn.kernel_ridge.KernelRidge` or a Gaussian process,
        could not fit the targets' mean without it.  1 is the scale of the
        kernel's diagonal at ``tau0 = 1``; 0 gives the implicit kernel
        itself.
    input_scaling : {'global', 'none'}, default='global'
        ``'global'`` centres every feature with its training mean and divides
        by one global factor so that the training samples have mean squared
        norm 1 (``tau0_ = 1``), the protocol of Ling et al.'s (2024) experiments;
        ``'none'`` uses the inputs as given (``tau0_`` measured).
    n_hidden : int, default=2000
        Width of the random DEQs (``method='monte_carlo'`` only).  Not the
        classifiers' 1024: here the width sets no model's capacity but the
        accuracy of a kernel estimate (its noise is about
        ``sqrt(n_samples / (n_hidden * n_draws))`` of the kernel's norm), and
        2000 is also the default of
        :func:`sk_deq.kernels.monte_carlo_implicit_kernel`.
    n_draws : int, default=1
        Number of random DEQs averaged (``method='monte_carlo'`` only: with
        another method, ``n_hidden`` or ``n_draws`` away from its default
        warns at ``fit``).
    block_size : int, default=None
        Rows and columns of the kernel computed per block; bounds the memory
        of the computation to a few arrays of ``block_size ** 2`` entries
        besides the output.  Chosen from scikit-learn's ``working_memory``
        (``sklearn.set_config``) when None.
    n_jobs : int, default=None
        Number of blocks of the exact kernel computed in parallel through
        joblib: threads by default (each with a single BLAS thread), or the
        workers of a Dask cluster inside ``joblib.parallel_config(backend='dask')``.
        ``None`` means all cores outside a joblib context or worker (as
        scikit-learn's OpenMP code uses them; inside a
        ``joblib.parallel_config(n_jobs=...)`` context its value, inside a
        joblib worker 1: :func:`sk_deq.kernels.engine.kernel_workers`);
        ``1`` is serial.  Each block is solved as in serial.  The other
        methods use multithreaded BLAS.
    device : None, str or torch.device, default=None
        Where the blocks of the exact kernel are solved (``method='exact'``
        only): None for the numpy engine on the CPU; ``'auto'`` for CUDA
        when available, else the numpy engine; ``'cpu'``, ``'cuda'``,
        ``'cuda:N'`` or a :class:`torch.device` for torch in float64 on that
        device (see :ref:`kernels-gpu`).  The per-sample preparation stays in
        numpy and the output is a float64 numpy array either way, equal to
        the numpy engine's to about ``1e-12`` of the kernel's scale.  With a
        device ``n_jobs`` is ignored: the blocks are solved one after
        another on it.  The rule of every ``device`` of sk_deq
        (:func:`sk_deq.resolve_device`): anything else, or a GPU this
        machine lacks, is a ``ValueError`` at ``fit`` and equally at
        ``transform``, also after ``set_params`` or unpickling (a
        transformer fitted with ``device='cuda'`` and loaded without a GPU:
        ``set_params(device=None)`` or ``'auto'``).
    tol : float, default=1e-12
        Tolerance of every entry's fixed point (``method='exact'`` only:
        with another method, a ``tol`` away from its default warns at
        ``fit``).
    random_state : int, RandomState instance or None, default=None
        Seed of the random DEQs (``method='monte_carlo'`` only).

    Attributes
    ----------
    X_fit_ : ndarray of shape (n_training_samples, n_features)
        Training samples after input scaling: the columns of ``transform``.
    input_mean_ : ndarray of shape (n_features,) or None
        Training mean subtracted by ``input_scaling='global'``.
    input_scale_ : float
        Global factor the centred inputs are divided by.
    tau0_ : float
        Data scale of the scaled training samples, ``sqrt(mean ||x||^2)``.
    coefficients_ : sk_deq.theory.DEQCoefficients
        ``tau``, ``alpha1..alpha4`` and the centring constant
        (``coefficients_.moments.mean``) at ``tau0_``.
    dual_method_ : str
        How ``method='exact'`` evaluates the dual activation (closed form or
        Hermite expansion); None for the other methods.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.

    See Also
    --------
    sk_deq.gaussian_process.ImplicitCKKernel : The same kernel as a Gaussian-process kernel.
    sk_deq.kernels.implicit_kernel : The exact kernel as a plain function.
    sk_deq.kernels.monte_carlo_implicit_kernel : Monte-Carlo kernel of random DEQs.
    sklearn.kernel_approximation.Nystroem : Low-rank approximation of a kernel map.

    Notes
    -----
    Memory: the output has ``n_samples x n_training_samples`` entries; a
    kernel that would not fit in the available memory raises a
    ``MemoryError`` naming its size before anything is allocated.  Inside
    a pipeline ending in ``KernelRidge(kernel="precomputed")``, the
    training kernel is held twice at ``fit``: the transformer's output and
    KernelRidge's copy for its solve.  For kernel ridge on many samples,
    :class:`~sk_deq.ImplicitCKRidge` holds half of it once.  With
    ``method='monte_carlo'`` the fitted transformer also keeps the DEQ
    features of the training samples (``n_draws x n_training_samples x
    n_hidden`` floats).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.kernel_ridge import KernelRidge
    >>> from sklearn.pipeline import make_pipeline
    >>> from sk_deq import ImplicitCKTransformer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((60, 5))
    >>> y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(60)
    >>> model = make_pipeline(ImplicitCKTransformer(sigma_a2=0.2), KernelRidge(kernel="precomputed", alpha=0.1))
    >>> model.fit(X[:40], y[:40]).predict(X[40:]).shape
    (20,)
    >>> ImplicitCKTransformer().fit(X[:40]).transform(X[40:]).shape
    (20, 40)
    """

    #: What to do with a Dask array given to ``fit`` (:func:`sk_deq._validation.reject_dask`).
    _DASK_ADVICE: ClassVar[str] = (
        "It keeps its training samples: fit it on a sample of the rows that fits in memory (X[rows].compute()). "
        "transform maps a Dask array lazily, row block by row block, and ImplicitCKRidge fits a Dask array on a "
        "distributed cluster."
    )

    _parameter_constraints: ClassVar[dict] = {
        **KERNEL_TRANSFORMER_CONSTRAINTS,
        "method": [SortedStrOptions(set(_METHODS))],
        "n_hidden": [Interval(Integral, 1, None, closed="left")],
        "n_draws": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        activation: str | Activation | Callable[..., Any] = "relu",
        sigma_a2: float = 0.2,
        *,
        kernel: Literal["ck", "feature", "ntk"] = "ck",
        method: Literal["exact", "linearized", "monte_carlo"] = "exact",
        sigma_b2: float | None = None,
        bias_variance: float = 1.0,
        input_scaling: Literal["global", "none"] = "global",
        n_hidden: int = 2000,
        n_draws: int = 1,
        block_size: int | None = None,
        n_jobs: int | None = None,
        device: str | torch.device | None = None,
        tol: float = 1e-12,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.activation = activation
        self.sigma_a2 = sigma_a2
        self.kernel = kernel
        self.method = method
        self.sigma_b2 = sigma_b2
        self.bias_variance = bias_variance
        self.input_scaling = input_scaling
        self.n_hidden = n_hidden
        self.n_draws = n_draws
        self.block_size = block_size
        self.n_jobs = n_jobs
        self.device = device
        self.tol = tol
        self.random_state = random_state

    # -- pickling -------------------------------------------------------------
    #: What a pickle of a version without the readout bias lacks: its kernels had none.
    _PICKLE_DEFAULTS: ClassVar[dict] = {"bias_variance": 0.0}

    def __getstate__(self):
        return versioned_state(super().__getstate__())

    def __setstate__(self, state):
        super().__setstate__(restored_state(self, state))

    # -- fitting ------------------------------------------------------------
    def _fit(self, X, square=False):
        if self.method != "monte_carlo":  # the settings of the other methods, set away from their defaults
            why = f"they set the random DEQs of method='monte_carlo', and method={self.method!r}"
            warn_unused_settings(self, ["n_hidden", "n_draws"], why)
        if self.method != "exact":
            why = f"it is the tolerance of method='exact', and method={self.method!r}"
            warn_unused_settings(self, ["tol"], why)
        min_samples = 2 if self.input_scaling == "global" else 1
        if square and hasattr(X, "shape") and len(getattr(X, "shape", ())) == 2:
            check_kernel_fits_in_memory(X.shape[0], X.shape[0], advice=_SQUARE_ADVICE)  # before any work
        X = validate_samples(self, X, reset=True, dtype=np.float64, ensure_min_samples=min_samples)
        device = resolve_device(self.device)  # an unsupported or missing device: ValueError before any work
        mean, scale, tau0 = fit_input_scaling(X, self.input_scaling, device=scaling_device(device))
        Xs = to_numpy(apply_input_scaling(X, mean, scale))  # the engine prepares the samples on the host
        self.input_mean_, self.input_scale_, self.tau0_ = mean, scale, tau0
        self.X_fit_ = Xs
        self._build_state(Xs)
        return Xs

    def _build_state(self, Xs):
        if self.method == "monte_carlo":
            self._sampler = MonteCarloDEQSampler(
                self.activation,
                self.sigma_a2,
                self.tau0_,
                Xs.shape[1],
                kernel=self.kernel,
                sigma_b2=self.sigma_b2,
                n_hidden=self.n_hidden,
                n_draws=self.n_draws,
                random_state=self.random_state,
            )
            self.coefficients_ = self._coefficients()
            self.dual_method_ = None
            self._fit_features = self._sampler.features(Xs, block_size=self._block(1))
            return
        if self.method == "linearized":
            self.coefficients_ = self._coefficients()
            self._lin = linearized_kernel_coefficients(
                self.activation, self.sigma_a2, self.tau0_, kernel=self.kernel, sigma_b2=self.sigma_b2
            )
            self.dual_method_ = None
            self._fit_norms = squared_norms(Xs)
            return
        self._engine = ImplicitKernelEngine(
            self.activation,
            self.sigma_a2,
            self.tau0_,
            kernel=self.kernel,
            sigma_b2=self.sigma_b2,
            tol=self.tol,
            bias_variance=self.bias_variance,
            device=self.device,
        )
        self.coefficients_ = self._engine.coefficients
        self.dual_method_ = self._engine.method
        self._fit_samples = self._engine.prepare(Xs)

    def _coefficients(self):
        from .theory import deq_ck_coefficients

        return deq_ck_coefficients(self.activation, self.sigma_a2, self.tau0_, sigma_b2=self.sigma_b2)

    def _block(self, workers):
        return self.block_size if self.block_size is not None else auto_block_size(workers)

    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike | torch.Tensor, y: object = None) -> Self:
        """Store the scaled training samples and their scale ``tau0``.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Training samples.
        y : None
            Ignored.

        Returns
        -------
        ImplicitCKTransformer
            The fitted transformer (``self``).
        """
        self._fit(X)
        return self

    @fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X: ArrayLike | torch.Tensor, y: object = None) -> NDArray[np.float64]:
        """Fit, then return the square kernel of the training samples.

        The kernel is symmetric; every pair of blocks is computed once.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Training samples.
        y : None
            Ignored.

        Returns
        -------
        ndarray of shape (n_samples, n_samples)
            Kernel between the training samples.
        """
        Xs = self._fit(X, square=True)
        return self._kernel(Xs, square=True)

    @overload
    def transform(self, X: dask.array.Array) -> dask.array.Array: ...

    @overload
    def transform(self, X: ArrayLike | torch.Tensor) -> NDArray[np.float64]: ...

    def transform(self, X: ArrayLike | torch.Tensor | dask.array.Array) -> NDArray[np.float64] | dask.array.Array:
        """Kernel between ``X`` and the training samples.

        A Dask array gives a lazy Dask array with the same row chunks (see
        :doc:`/larger_than_memory`): every row block is transformed as an
        in-memory array when it is computed, and validated then.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples to transform.

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples, n_training_samples)
            ``K[i, j]`` is the kernel between ``X[i]`` and training sample ``j``.
        """
        check_is_fitted(self, "X_fit_")
        self._validate_params()  # set_params after fit is checked as fit checks it
        if is_dask_collection(X):
            return map_row_blocks(X, self.transform, len(self.X_fit_))
        if hasattr(X, "shape") and len(getattr(X, "shape", ())) == 2:
            check_kernel_fits_in_memory(X.shape[0], len(self.X_fit_))  # before any copy of X
        X = validate_samples(self, X, dtype=np.float64, reset=False)
        Xs = to_numpy(apply_input_scaling(X, self.input_mean_, self.input_scale_))
        return self._kernel(Xs, square=self._is_training_data(Xs))

    def _is_training_data(self, Xs) -> bool:
        """Whether the scaled ``Xs`` are the training samples, row for row (``fit(X).transform(X)``).

        Their kernel is then the square one of ``fit_transform``: symmetric,
        every pair of blocks computed once (about two thirds of the work).
        Checked on the values, in one pass over ``Xs``; exact kernels only.
        """
        fitted = getattr(self, "_fit_samples", None)
        if self.method != "exact" or fitted is None or Xs.shape != fitted.X.shape:
            return False
        return bool(np.array_equal(Xs, fitted.X))

    def _kernel(self, Xs, *, square):
        n, m = len(Xs), len(self.X_fit_)
        check_kernel_fits_in_memory(n, m)
        if self.method == "exact":
            # the device of now (set_params may have changed it since fit): resolved as at fit;
            # the engine adds the bias variance
            eng = self._engine.with_device(self.device)
            S = self._fit_samples if square else eng.prepare(Xs)
            return eng.kernel(S, None if square else self._fit_samples, block_size=self.block_size, n_jobs=self.n_jobs)
        K = self._approximate_kernel(Xs, square=square)
        K += self.bias_variance
        return K

    def _approximate_kernel(self, Xs, *, square):
        """The linearised or Monte-Carlo kernel between ``Xs`` and the training samples, without the bias variance."""
        n, m = len(Xs), len(self.X_fit_)
        if self.method == "linearized":
            out = np.empty((n, m))
            b = self._block(1)
            nx = self._fit_norms if square else squared_norms(Xs)
            for i0 in range(0, n, b):
                sl = slice(i0, i0 + b)
                out[sl] = linearized_block(self._lin, self.tau0_, Xs[sl], self.X_fit_, nx[sl], self._fit_norms)
            return out
        # Monte Carlo: features of the new samples under the fitted networks,
        # in row blocks so that memory stays bounded
        if square:
            return self._sampler.kernel_from_features(self._fit_features, self._fit_features, Xs, Xs)
        out = np.empty((n, m))
        b = self._block(1)
        for i0 in range(0, n, b):
            sl = slice(i0, i0 + b)
            F = self._sampler.features(Xs[sl])
            out[sl] = self._sampler.kernel_from_features(F, self._fit_features, Xs[sl], self.X_fit_)
        return out

    # -- scikit-learn plumbing ------------------------------------------------
    @property
    def _n_features_out(self):
        """Number of output columns: the number of training samples."""
        return len(self.X_fit_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64"]
        tags.input_tags.sparse = False
        return tags
