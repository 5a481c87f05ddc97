"""Exact kernel ridge regression with the implicit kernels of a DEQ: :class:`ImplicitCKRidge`, :class:`ImplicitCKRidgeClassifier`."""

from __future__ import annotations

import contextlib
import time
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.preprocessing import LabelBinarizer
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from .._persistence import restored_state, versioned_state
from .._runtime import on_gpu, resolve_device
from .._scaling import apply_input_scaling, fit_input_scaling, scaling_device
from .._scoring import accuracy_of, r2_score_of
from .._validation import KERNEL_TRANSFORMER_CONSTRAINTS, checked_weights, fit_context, to_numpy, validate_samples
from ..kernels import ImplicitKernelEngine, auto_block_size
from ..kernels._workers import kernel_workers
from ._docs import ATTRIBUTES, PARAMETERS
from ._fit import choose_alpha, fill_store, predict_in_blocks, solve
from ._plan import plan_fit
from ._solvers import Weighted

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from typing_extensions import Self

    from ..activations import Activation

__all__ = ["ImplicitCKRidge", "ImplicitCKRidgeClassifier"]


class _Phases:
    """Wall time of the named phases of a fit (``with phases("kernel"): ...``), in seconds."""

    def __init__(self):
        self.seconds: dict = {}

    @contextlib.contextmanager
    def __call__(self, name):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


_WAYS_OUT = (
    "storage='float32' (half the memory of float64), fewer training rows, "
    "ImplicitCKNystroem features with a linear model (memory linear in the rows), "
    "or a Dask cluster whose workers hold the kernel's row blocks (fit with a dask.array, see the user guide's "
    "'Larger than memory')."
)

#: what a GPU adds to the ways out: its own memory is not the only one
_WAYS_OUT_GPU = "device=None (the kernel stored in the host's memory), "


class _ImplicitRidgeBase(BaseEstimator):
    """Fit and prediction of both estimators; the task bases say what the targets are and how to score them."""

    _parameter_constraints: ClassVar[dict] = {
        **{k: v for k, v in KERNEL_TRANSFORMER_CONSTRAINTS.items() if k != "tol"},
        "alpha": [Interval(Real, 0, None, closed="neither"), "array-like"],
        "solver": [StrOptions({"auto", "cholesky", "cg"})],
        "tol": [Interval(Real, 0, 1, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "preconditioner_rank": [Interval(Integral, 0, None, closed="left")],
        "storage": [StrOptions({"auto", "float64", "float32"})],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "kernel_tol": [Interval(Real, 0, None, closed="neither")],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        activation: str | Activation | Callable[..., Any] = "relu",
        sigma_a2: float = 0.2,
        *,
        kernel: Literal["ck", "feature", "ntk"] = "ck",
        sigma_b2: float | None = None,
        bias_variance: float = 1.0,
        input_scaling: Literal["global", "none"] = "global",
        alpha: float | ArrayLike = 1.0,
        solver: Literal["auto", "cholesky", "cg"] = "auto",
        tol: float = 1e-6,
        max_iter: int = 1000,
        preconditioner_rank: int = 1000,
        storage: Literal["auto", "float64", "float32"] = "auto",
        validation_fraction: float = 0.1,
        kernel_tol: float = 1e-12,
        block_size: int | None = None,
        n_jobs: int | None = None,
        device: str | torch.device | None = None,
        random_state: int | np.random.RandomState | None = None,
        verbose: int = 0,
    ) -> None:
        self.activation = activation
        self.sigma_a2 = sigma_a2
        self.kernel = kernel
        self.sigma_b2 = sigma_b2
        self.bias_variance = bias_variance
        self.input_scaling = input_scaling
        self.alpha = alpha
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.preconditioner_rank = preconditioner_rank
        self.storage = storage
        self.validation_fraction = validation_fraction
        self.kernel_tol = kernel_tol
        self.block_size = block_size
        self.n_jobs = n_jobs
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    # -- the task's hooks ------------------------------------------------------------
    def _targets(self, y) -> np.ndarray:  # pragma: no cover - defined by the task bases
        raise NotImplementedError

    def _heldout_score(self, Y, pred, weights) -> float:  # pragma: no cover
        raise NotImplementedError

    # -- fit ---------------------------------------------------------------------------
    def _alphas(self) -> np.ndarray:
        a = np.atleast_1d(np.asarray(self.alpha, dtype=np.float64))
        if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(
                f"alpha must be a positive number or a 1-D list of positive candidates, got {self.alpha!r}."
            )
        return a

    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike | torch.Tensor, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        """Fit exact kernel ridge regression: solve ``(K + alpha I) C = Y`` on the stored training kernel.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Training samples.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets (class labels for the classifier).
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the squared errors.

        Returns
        -------
        self
            The fitted estimator.
        """
        alphas = self._alphas()
        phases = _Phases()
        with phases("prepare"):
            X, Y, sw = self._validate_fit(X, y, sample_weight)
            Xs, S, plan = self._prepare(X, Y, sw, candidates=len(alphas) > 1)
        rng = check_random_state(self.random_state)
        order, n_train = self._split(Y, len(alphas) > 1, rng)
        with phases("kernel"):
            store = fill_store(
                self._engine,
                S.take(order),
                plan,
                n_jobs=self.n_jobs,
                block_size=self.block_size,
                progress=bool(self.verbose),
            )
        d = None if sw is None else np.sqrt(sw[order])
        op = store if d is None else Weighted(store, d)
        Yo = Y[order] if d is None else Y[order] * d[:, None]
        kw = {"tol": float(self.tol), "max_iter": int(self.max_iter), "rng": rng, "progress": bool(self.verbose)}
        x0 = factor = None
        if len(alphas) > 1:
            with phases("alpha"):
                self.alpha_, self.alpha_scores_, Ct, factor = self._choose_alpha(
                    store, op, Y[order], Yo, alphas, n_train, d, sw, order, plan, kw
                )
            x0 = np.vstack([Ct, np.zeros((len(Y) - n_train, Y.shape[1]))])
            self.validation_indices_ = np.sort(order[n_train:])
        else:
            self.alpha_ = float(alphas[0])
        with phases("solve"):
            C, info = solve(store, op, Yo, self.alpha_, plan, x0=x0, factor=factor, **kw)
        del store, op
        self._set_solution(C if d is None else C * d[:, None], order, info, plan)
        self.X_fit_, self._fit_samples, self.fit_time_ = Xs, S, phases.seconds
        return self

    def _validate_fit(self, X, y, sample_weight):
        """The validated samples (float64 numpy), the targets as columns and the sample weights (or None)."""
        min_samples = 2 if self.input_scaling == "global" else 1
        classifier = isinstance(self, ClassifierMixin)
        X, y = validate_samples(
            self,
            X,
            y,
            reset=True,
            dtype=np.float64,
            ensure_min_samples=min_samples,
            multi_output=not classifier,
            y_numeric=not classifier,
        )
        X = np.asarray(to_numpy(X), dtype=np.float64)
        return X, self._targets(y), checked_weights(sample_weight, X, type(self).__name__)

    def _prepare(self, X, Y, sw, *, candidates):
        """The input scaling, the kernel engine and the prepared samples; the memory plan (before any large array)."""
        device = resolve_device(self.device)
        mean, scale, tau0 = fit_input_scaling(X, self.input_scaling, sample_weight=sw, device=scaling_device(device))
        Xs = np.asarray(to_numpy(apply_input_scaling(X, mean, scale)), dtype=np.float64)
        self.input_mean_, self.input_scale_, self.tau0_ = mean, scale, tau0
        engine = ImplicitKernelEngine(
            self.activation,
            self.sigma_a2,
            tau0,
            kernel=self.kernel,
            sigma_b2=self.sigma_b2,
            tol=self.kernel_tol,
            bias_variance=self.bias_variance,
            device=self.device,
        )
        self._engine = engine
        self.coefficients_, self.dual_method_ = engine.coefficients, engine.method
        workers = 1 if engine.device is not None else kernel_workers(self.n_jobs)
        plan = plan_fit(
            len(X),
            X.shape[1],
            Y.shape[1],
            storage=self.storage,
            solver=self.solver,
            rank=self.preconditioner_rank,
            workers=workers,
            block=self.block_size or (None if on_gpu(device) else auto_block_size(workers)),
            candidates=candidates,
            alternatives=(_WAYS_OUT_GPU if on_gpu(device) else "") + _WAYS_OUT,
            device=device,
        )
        self.fit_plan_ = plan
        if self.verbose:
            print(plan.describe(), flush=True)
        return Xs, engine.prepare(Xs), plan

    def _set_solution(self, C, order, info, plan) -> None:
        """The dual coefficients in the samples' order, and how the solve went."""
        dual = np.empty_like(C)
        dual[order] = C
        self.dual_coef_ = dual[:, 0] if self._single_output else dual
        self.n_iter_, self.solver_ = max(info.n_iter, 1), plan.solver
        self.residual_ = None if plan.solver == "cholesky" else float(info.residuals.max())
        self._check_converged(info)

    def _split(self, Y, holdout, rng):
        """The order of the rows in the store (held-out rows last) and the number fitted while choosing alpha."""
        n = len(Y)
        if not holdout:
            return np.arange(n), n
        n_val = round(self.validation_fraction * n)
        if n_val < 1 or n - n_val < 1:
            raise ValueError(
                f"Choosing among {len(self._alphas())} alphas holds out validation_fraction={self.validation_fraction} "
                f"of the {n} samples: {n_val} rows, which leaves no split. Give more samples or one alpha."
            )
        perm = rng.permutation(n)
        return perm, n - n_val

    def _choose_alpha(self, store, op, Y_raw, Yo, alphas, n_train, d, sw, order, plan, kw):
        ops = store.ops
        dt = ops.asarray(np.ones(n_train) if d is None else d[:n_train])
        w_val = None if sw is None else sw[order][n_train:]

        def heldout(C):
            full = ops.zeros((store.n, C.shape[1]))
            full[:n_train] = C * dt[:, None]
            return ops.to_host(store.matmat(full)[n_train:])

        def score(pred):
            return self._heldout_score(Y_raw[n_train:], pred, w_val)

        return choose_alpha(op, Yo, alphas, n_train, heldout, score, plan, **kw)

    def _check_converged(self, info) -> None:
        if not info.converged:
            import warnings

            from sklearn.exceptions import ConvergenceWarning

            warnings.warn(
                f"{type(self).__name__}: conjugate gradients stopped after max_iter={self.max_iter} iterations with "
                f"a relative residual of {info.residuals.max():.2e}, above tol={self.tol:g}. Raise max_iter or "
                "preconditioner_rank, or a larger alpha makes the system better conditioned."
                + (
                    " With the kernel stored in float32 (fit_plan_.dtype) a residual under about 1e-6 times the "
                    "kernel's condition number cannot be resolved: a larger tol, or storage='float64'."
                    if self.fit_plan_.dtype == np.float32
                    else ""
                ),
                ConvergenceWarning,
                stacklevel=3,
            )

    # -- prediction --------------------------------------------------------------------
    def _rows_per_block(self) -> int:
        from sklearn import get_config

        budget = float(get_config().get("working_memory", 1024)) * 2**20
        return int(max(1, min(65536, budget // (3 * 8 * max(len(self.X_fit_), 1)))))

    def _decision(self, X) -> np.ndarray:
        check_is_fitted(self, "dual_coef_")
        X = np.asarray(to_numpy(validate_samples(self, X, reset=False, dtype=np.float64)), dtype=np.float64)
        Xs = np.asarray(to_numpy(apply_input_scaling(X, self.input_mean_, self.input_scale_)), dtype=np.float64)
        engine = self._engine.with_device(self.device)
        coef = self.dual_coef_.reshape(len(self.X_fit_), -1)
        return predict_in_blocks(
            engine, Xs, self._fit_samples, coef, self._rows_per_block(), n_jobs=self.n_jobs, block_size=self.block_size
        )

    def __getstate__(self):
        return versioned_state(super().__getstate__())

    def __setstate__(self, state):
        super().__setstate__(restored_state(self, state))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags


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
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_targets)
            Predictions.
        """
        out = self._decision(X)
        return out[:, 0] if self._single_output else out

    def score(self, X: ArrayLike | torch.Tensor, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """Coefficient of determination R² of the predictions.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Samples.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            True targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of every sample.

        Returns
        -------
        float
            :func:`sklearn.metrics.r2_score` of :meth:`predict`, averaged
            uniformly over the targets.
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
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_classes)
            The kernel ridge predictions of the ±1 targets.
        """
        out = self._decision(X)
        return out[:, 0] if self._single_output else out

    def predict(self, X: ArrayLike | torch.Tensor) -> NDArray:
        """Predict class labels: the class of the largest score.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples,)
            Labels.
        """
        scores = self.decision_function(X)
        idx = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[idx]

    def score(self, X: ArrayLike | torch.Tensor, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """Mean accuracy of :meth:`predict` on ``(X, y)``.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Samples.
        y : array-like of shape (n_samples,)
            True labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of every sample.

        Returns
        -------
        float
            The (weighted) fraction of correctly classified samples.
        """
        return accuracy_of(self, X, y, sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = False
        return tags


ImplicitCKRidgeClassifier.__doc__ = (ImplicitCKRidgeClassifier.__doc__ or "").format(
    params=PARAMETERS, attrs=ATTRIBUTES
)
