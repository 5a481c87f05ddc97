"""Low-rank features of the implicit kernels: :class:`ImplicitCKNystroem`.

The exact implicit kernel of :class:`~sk_deq.ImplicitCKTransformer` has
``n_samples x n_training_samples`` entries: at 50,000 training samples it no
longer fits in memory.  The Nystroem method replaces it by features
``Phi = K(X, L) K(L, L)^{-1/2}`` against ``n_components`` landmarks ``L``
drawn from the training set, so that ``Phi Phi^T`` approximates ``K`` and any
linear model (``RidgeClassifier``, ``LogisticRegression``,
``SGDClassifier.partial_fit``) trained on ``Phi`` approximates kernel
regression with the DEQ's kernel, in ``O(n_samples x n_components)`` time
and memory.

Only numpy, scipy and scikit-learn are needed; torch only with a ``device``
(:mod:`sk_deq.kernels.torch_engine`).
"""

from __future__ import annotations

import warnings
from numbers import Integral
from typing import TYPE_CHECKING, Any, ClassVar, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import linalg
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from ._dask import is_dask_collection, map_row_blocks
from ._runtime import resolve_device
from ._scaling import apply_input_scaling, fit_input_scaling, scaling_device
from ._persistence import restored_state, versioned_state
from ._validation import to_numpy, validate_samples
from ._validation import KERNEL_TRANSFORMER_CONSTRAINTS, SortedStrOptions, fit_context
from ._runtime import one_blas_thread
from .kernels import ImplicitKernelEngine
from .kernels._rpcholesky import rp_cholesky
from .kernels._workers import kernel_workers, map_unordered
from ._runtime import check_kernel_fits_in_memory

if TYPE_CHECKING:
    from collections.abc import Callable

    import dask.array
    import torch

    from typing_extensions import Self

    from .activations import Activation

__all__ = ["LANDMARKS", "ImplicitCKNystroem"]

#: Landmark selection rules of :class:`ImplicitCKNystroem`.
LANDMARKS = ("uniform", "kmeans++", "rpcholesky")

#: Pivots drawn per round of block randomly pivoted Cholesky.
_RPC_BLOCK = 64


class ImplicitCKNystroem(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Nystroem features of a DEQ's exact implicit kernel.

    ``fit(X)`` picks ``n_components`` landmark samples ``L`` from ``X`` and
    factors their kernel; ``transform(X)`` returns the features
    ``Phi = K(X, L) K(L, L)^{-1/2}``, whose inner products ``Phi Phi^T``
    approximate the kernel ``K(X, X)`` of :class:`~sk_deq.ImplicitCKTransformer`
    (exact on the landmarks).  So a linear model on ``Phi`` approximates
    kernel regression with the DEQ's infinite-width kernel, at
    ``O(n_samples x n_components)`` cost instead of ``O(n_samples^2)``: this
    is the transformer for training sets too large for the exact kernel, as
    :class:`sklearn.kernel_approximation.Nystroem` is for the RBF kernel.

    Parameters
    ----------
    activation : str, Activation or callable, default='relu'
        DEQ activation ``phi0``: a name from :data:`sk_deq.activations.ACTIVATIONS`
        (in any case, aliases included), an
        :class:`~sk_deq.activations.Activation` or a vectorised callable.
    sigma_a2 : float, default=0.2
        Variance of the recurrent weights, in (0, 1).
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        Which kernel is approximated (see :class:`~sk_deq.ImplicitCKTransformer`).
    n_components : int, default=100
        Number of landmarks, i.e. of output features.  More than the number
        of training samples is capped to it with a warning, as in
        scikit-learn's ``Nystroem`` (the landmarks are training samples; the
        features are then those of the full kernel).
    landmarks : {'kmeans++', 'rpcholesky', 'uniform'}, default='kmeans++'
        How the landmarks are drawn from the training samples:

        * ``'uniform'``: uniformly without replacement, as scikit-learn's
          ``Nystroem``;
        * ``'kmeans++'``: k-means++ seeding on the scaled inputs
          (:func:`sklearn.cluster.kmeans_plusplus`), which spreads the
          landmarks over the data;
        * ``'rpcholesky'``: block randomly pivoted Cholesky on the kernel
          itself: every round draws landmarks with probability proportional
          to the part of their kernel diagonal that the landmarks already
          drawn do not explain (Chen, Epperly, Tropp & Webber, 2024,
          "Randomly pivoted Cholesky: practical approximation of a kernel
          matrix with few entry evaluations", Comm. Pure Appl. Math.).  It
          costs about as much as one ``transform`` of the training set.

        At equal ``n_components`` both adaptive rules come closer to exact
        kernel ridge regression than ``'uniform'`` on MNIST
        (``python -m benchmarks.kernels nystroem``; :ref:`nystroem` and the
        :ref:`benchmarks page <bench-defaults>`).  ``'kmeans++'`` is the
        default: as good as the best, and it needs no kernel evaluation
        beyond the landmarks'.
    sigma_b2 : float, default=None
        Variance of the input weights; ``1 - sigma_a2`` when None.  Below
        1e-4 it warns (see :ref:`input-scaling`).
    bias_variance : float, default=1.0
        A constant added to every entry of the approximated kernel, the prior
        variance of a readout bias, as in
        :class:`~sk_deq.ImplicitCKTransformer` (see :ref:`kernel-bias`).
    input_scaling : {'global', 'none'}, default='global'
        Input map fitted on the training samples, as in
        :class:`~sk_deq.ImplicitCKTransformer` (see :ref:`input-scaling`).
    block_size : int, default=None
        Rows transformed per block.  Memory beyond the output stays at a few
        arrays of ``block_size x max(n_components, n_features)`` entries.
        Chosen from scikit-learn's ``working_memory`` when None.
    n_jobs : int, default=None
        Row blocks transformed in parallel: on threads by default (one BLAS
        thread each), or through joblib on a Dask cluster's workers inside
        ``joblib.parallel_config(backend='dask')``; also the threads of the
        landmark kernels of ``fit``.  ``None`` means all cores outside a
        joblib context or worker, as for every exact kernel
        (:func:`sk_deq.kernels.engine.kernel_workers`); ``1`` is serial
        (with multithreaded BLAS).  Each block is solved as in serial.
    device : None, str or torch.device, default=None
        Where the blocks of the exact kernel are solved: None for the numpy
        engine on the CPU; ``'auto'`` for CUDA when available, else the
        numpy engine; ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or a
        :class:`torch.device` for torch in float64 on that device (see
        :ref:`kernels-gpu`).  The per-sample preparation, the landmark
        factorisation and the product with ``normalization_`` stay in numpy;
        the features are float64 numpy arrays either way.  With a device
        ``n_jobs`` is ignored: the row blocks are transformed one after
        another on it.  The rule of every ``device`` of sk_deq
        (:func:`sk_deq.resolve_device`): anything else, or a GPU this
        machine lacks, is a ``ValueError`` at ``fit`` and equally at
        ``transform``, also after ``set_params`` or unpickling.
    tol : float, default=1e-12
        Tolerance of every kernel entry's fixed point.
    random_state : int, RandomState instance or None, default=None
        Seed of the landmark selection.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        The landmarks, after input scaling.
    component_indices_ : ndarray of shape (n_components,)
        Rows of the training data that are the landmarks.
    normalization_ : ndarray of shape (n_components, n_components)
        ``K(L, L)^{-1/2}``: the features are ``K(X, L) @ normalization_``.
    landmark_eigenvalues_ : ndarray of shape (n_components,)
        Eigenvalues of ``K(L, L)``, in increasing order.  Those at or below
        ``eigenvalue_floor_`` are treated as zero.
    eigenvalue_floor_ : float
        ``max(tol, n_components * eps)`` times the largest eigenvalue.
    n_components_ : int
        Number of output features: ``min(n_components, n_samples)`` of the
        training set.
    input_mean_ : ndarray of shape (n_features,) or None
        Training mean subtracted by ``input_scaling='global'``.
    input_scale_ : float
        Global factor the centred inputs are divided by.
    tau0_ : float
        Data scale of the scaled training samples.
    coefficients_ : sk_deq.theory.DEQCoefficients
        ``tau``, ``alpha1..alpha4`` and the centring constant at ``tau0_``.
    dual_method_ : str
        How the dual activation is evaluated (closed form or Hermite expansion).
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.

    See Also
    --------
    sk_deq.ImplicitCKTransformer : The exact kernel against all training samples.
    sklearn.kernel_approximation.Nystroem : Nystroem features of scikit-learn's kernels.

    Notes
    -----
    The landmark kernel is factored by an eigendecomposition,
    ``K(L, L) = U diag(s) U^T``, and ``normalization_ = U diag(s^{-1/2})
    U^T`` with the eigenvalues below ``eigenvalue_floor_`` left out (a
    pseudo-inverse square root): nearly duplicate landmarks then add zero
    features instead of amplified rounding.  ``Phi Phi^T = K(X, L) K(L,
    L)^+ K(L, X)``, the usual Nystroem approximation.

    Memory: ``transform`` writes its ``n_samples x n_components`` output
    and otherwise holds one row block per worker; the kernel between ``X``
    and the training set is never formed.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import RidgeClassifier
    >>> from sklearn.pipeline import make_pipeline
    >>> from sk_deq import ImplicitCKNystroem, ImplicitCKTransformer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 8))
    >>> y = (X[:, 0] + X[:, 1] ** 2 > 1).astype(int)
    >>> nys = ImplicitCKNystroem("tanh", 0.2, n_components=150, random_state=0).fit(X)
    >>> Phi = nys.transform(X)
    >>> Phi.shape
    (200, 150)
    >>> K = ImplicitCKTransformer("tanh", 0.2).fit_transform(X)
    >>> bool(np.linalg.norm(Phi @ Phi.T - K) < 0.01 * np.linalg.norm(K))
    True
    >>> model = make_pipeline(ImplicitCKNystroem(n_components=50, random_state=0), RidgeClassifier())
    >>> model.fit(X[:150], y[:150]).score(X[150:], y[150:]) > 0.8
    True
    """

    #: What to do with a Dask array given to ``fit`` (:func:`sk_deq._validation.reject_dask`).
    _DASK_ADVICE: ClassVar[str] = (
        "Fit it on a sample of the rows that fits in memory (X[rows].compute()): its landmarks come from that "
        "sample. transform then maps the whole Dask array lazily, row block by row block."
    )

    _parameter_constraints: ClassVar[dict] = {
        **KERNEL_TRANSFORMER_CONSTRAINTS,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "landmarks": [SortedStrOptions(set(LANDMARKS))],
    }

    def __init__(
        self,
        activation: str | Activation | Callable[..., Any] = "relu",
        sigma_a2: float = 0.2,
        *,
        kernel: Literal["ck", "feature", "ntk"] = "ck",
        n_components: int = 100,
        landmarks: Literal["kmeans++", "rpcholesky", "uniform"] = "kmeans++",
        sigma_b2: float | None = None,
        bias_variance: float = 1.0,
        input_scaling: Literal["global", "none"] = "global",
        block_size: int | None = None,
        n_jobs: int | None = None,
        device: str | torch.device | None = None,
        tol: float = 1e-12,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.activation = activation
        self.sigma_a2 = sigma_a2
        self.kernel = kernel
        self.n_components = n_components
        self.landmarks = landmarks
        self.sigma_b2 = sigma_b2
        self.bias_variance = bias_variance
        self.input_scaling = input_scaling
        self.block_size = block_size
        self.n_jobs = n_jobs
        self.device = device
        self.tol = tol
        self.random_state = random_state

    # -- fit ------------------------------------------------------------------
    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike | torch.Tensor, y: object = None) -> Self:
        """Choose the landmarks among the rows of ``X`` and factor their kernel.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Training samples; the input scaling is fitted on all of them.
        y : None
            Ignored.

        Returns
        -------
        ImplicitCKNystroem
            The fitted transformer (``self``).

        Warns
        -----
        UserWarning
            If ``n_components`` exceeds the number of training samples: it
            is capped to ``n_samples``.
        """
        min_samples = 2 if self.input_scaling == "global" else 1
        checked = validate_samples(self, X, reset=True, dtype=np.float64, ensure_min_samples=min_samples)
        n = checked.shape[0]
        k = int(self.n_components)
        if k > n:
            warnings.warn(
                f"n_components > n_samples ({k} > {n}). This is not possible: the landmarks are training "
                "samples. n_components was set to n_samples, which results in inefficient evaluation of the "
                "full kernel.",
                UserWarning,
                stacklevel=2,
            )
            k = n
        device = scaling_device(resolve_device(self.device))
        mean, scale, tau0 = fit_input_scaling(checked, self.input_scaling, device=device)
        X = np.asarray(to_numpy(checked), dtype=np.float64)  # the engine prepares the samples on the host
        self.input_mean_, self.input_scale_, self.tau0_ = mean, scale, tau0
        self._engine = ImplicitKernelEngine(
            self.activation,
            self.sigma_a2,
            tau0,
            kernel=self.kernel,
            sigma_b2=self.sigma_b2,
            tol=self.tol,
            bias_variance=self.bias_variance,
            device=self.device,
        )
        self.coefficients_ = self._engine.coefficients
        self.dual_method_ = self._engine.method
        rng = check_random_state(self.random_state)
        idx, prepared = self._select(X, k, rng)
        self.component_indices_ = idx
        self.components_ = apply_input_scaling(X[idx], mean, scale)
        self._landmarks = prepared.take(idx) if prepared is not None else self._engine.prepare(self.components_)
        self._factor(self._engine.kernel(self._landmarks, n_jobs=self.n_jobs))
        self.n_components_ = len(idx)
        return self

    def _select(self, X, k, rng):
        """Sorted indices of ``k`` landmarks among the rows of ``X``, and the prepared rows if computed."""
        n = X.shape[0]
        if self.landmarks == "uniform":
            return np.sort(rng.permutation(n)[:k]), None
        if self.landmarks == "kmeans++":
            from sklearn.cluster import kmeans_plusplus

            Xs = apply_input_scaling(X, self.input_mean_, self.input_scale_)
            _, idx = kmeans_plusplus(Xs, k, random_state=rng)
            return np.sort(_distinct(idx, n, k, rng)), None
        S = self._prepare_rows(X, self._engine)
        return np.sort(self._rpcholesky(S, k, rng)), S

    def _rpcholesky(self, S, k, rng) -> np.ndarray:
        """Block randomly pivoted Cholesky on the prepared rows ``S``: ``k`` pivots drawn by residual diagonal."""
        eng = self._engine
        pivots, _ = rp_cholesky(
            lambda idx: eng.kernel(S, S.take(idx), n_jobs=self.n_jobs),
            eng.diagonal(S),
            k,
            rng,
            block=_RPC_BLOCK,
            fill=True,
        )
        return pivots

    def _factor(self, K_LL):
        """``normalization_ = K_LL^{-1/2}`` with eigenvalues under the floor left out."""
        s, U = linalg.eigh(K_LL)
        floor = max(float(self.tol), len(s) * np.finfo(np.float64).eps) * max(float(s[-1]), 0.0)
        keep = s > floor
        inv_sqrt = np.zeros_like(s)
        inv_sqrt[keep] = 1.0 / np.sqrt(s[keep])
        self.landmark_eigenvalues_ = s
        self.eigenvalue_floor_ = floor
        self.normalization_ = (U * inv_sqrt) @ U.T

    # -- transform ----------------------------------------------------------
    def _prepare_rows(self, X, engine):
        """Scale raw rows and prepare them for ``engine``."""
        return engine.prepare(apply_input_scaling(X, self.input_mean_, self.input_scale_))

    def _block(self) -> int:
        if self.block_size is not None:
            return int(self.block_size)
        from sklearn import get_config

        budget = float(get_config().get("working_memory", 1024)) * 2**20
        # bytes per row: the scaled row, the kernel row and the engine's temporaries
        per_row = 8 * (self.n_features_in_ + 4 * self.n_components_)
        return int(min(4096, max(64, budget // (4 * per_row))))

    def _transform_rows(self, X, engine) -> np.ndarray:
        """Features of validated raw rows (one block), the kernel computed by ``engine``."""
        K = engine.kernel(self._prepare_rows(X, engine), self._landmarks, block_size=max(len(X), 1), n_jobs=1)
        return K @ self.normalization_

    @overload
    def transform(self, X: dask.array.Array) -> dask.array.Array: ...

    @overload
    def transform(self, X: ArrayLike | torch.Tensor) -> NDArray[np.float64]: ...

    def transform(self, X: ArrayLike | torch.Tensor | dask.array.Array) -> NDArray[np.float64] | dask.array.Array:
        """Nystroem features of ``X``: ``K(X, L) @ normalization_``.

        A Dask array gives a lazy Dask array with the same row chunks (see
        :doc:`/larger_than_memory`): every row block is transformed as an
        in-memory array when it is computed, and validated then.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples to transform (raw: the fitted input scaling is applied).

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples, n_components)
            The features, in float64.
        """
        check_is_fitted(self, "normalization_")
        self._validate_params()  # set_params after fit is checked as fit checks it
        if is_dask_collection(X):
            return map_row_blocks(X, self.transform, self.n_components_)
        if hasattr(X, "shape") and len(getattr(X, "shape", ())) == 2:
            check_kernel_fits_in_memory(X.shape[0], self.n_components_)  # the output, before any copy of X
        X = np.asarray(to_numpy(validate_samples(self, X, dtype=np.float64, reset=False)), dtype=np.float64)
        n = X.shape[0]
        out = np.empty((n, self.n_components_))
        b = self._block()
        rows = [slice(i, min(i + b, n)) for i in range(0, n, b)]
        # the device of now (set_params may have changed it since fit): resolved as at fit
        engine = self._engine.with_device(self.device)
        workers = 1 if engine.device is not None else kernel_workers(self.n_jobs)
        if workers == 1 or len(rows) == 1:
            for sl in rows:
                out[sl] = self._transform_rows(X[sl], engine)
            return out
        # one BLAS thread per worker, set before the first block starts: the row blocks are the parallelism
        with one_blas_thread():
            for sl, block in map_unordered(_row_task, ((self, engine, sl, X[sl]) for sl in rows), workers):
                out[sl] = block
        return out

    # -- pickling -------------------------------------------------------------
    #: What a pickle of a version without the readout bias lacks: its kernels had none.
    _PICKLE_DEFAULTS: ClassVar[dict] = {"bias_variance": 0.0}

    def __getstate__(self):
        return versioned_state(super().__getstate__())

    def __setstate__(self, state):
        super().__setstate__(restored_state(self, state))

    # -- scikit-learn plumbing ------------------------------------------------
    @property
    def _n_features_out(self):
        """Number of output columns: the number of landmarks."""
        return self.n_components_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64"]
        tags.input_tags.sparse = False
        return tags


def _distinct(idx, n, k, rng) -> np.ndarray:
    """``k`` distinct rows: ``idx`` with repeats replaced by rows drawn uniformly from the unused ones.

    k-means++ seeding draws a row again once every row coincides with a
    centre (data with fewer distinct rows than ``k``).
    """
    idx = np.unique(idx)
    if len(idx) < k:
        rest = np.setdiff1d(np.arange(n), idx)
        idx = np.concatenate([idx, rng.permutation(rest)[: k - len(idx)]])
    return idx


def _row_task(nys, engine, sl, X):
    return sl, nys._transform_rows(X, engine)
