"""What both exact kernel ridge estimators share: :class:`_ImplicitRidgeBase` (fit, on one machine or a cluster, and prediction)."""

from __future__ import annotations

import contextlib
import time
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._persistence import restored_state, versioned_state
from .._runtime import on_gpu, resolve_device
from .._scaling import apply_input_scaling, fit_input_scaling, scaling_device
from .._validation import (
    restored_on_failure,
    KERNEL_TRANSFORMER_CONSTRAINTS,
    checked_weights,
    fit_context,
    is_dask_collection,
    to_numpy,
    validate_samples,
)
from ..kernels import ImplicitKernelEngine, auto_block_size
from ..kernels._workers import kernel_workers
from ._distributed import DaskStore, cluster_client, cluster_workers, computed, gather_samples
from ._fit import choose_alpha, fill_store, predict_in_blocks, solve
from ._plan import plan_cluster, plan_fit
from ._solvers import Weighted
from ._tiles import TileLayout

if TYPE_CHECKING:
    from collections.abc import Callable

    import dask.array
    import torch
    from typing_extensions import Self

    from ..activations import Activation

__all__ = ["_ImplicitRidgeBase"]


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

_WAYS_OUT_CLUSTER = (
    "storage='float32' (half the memory of float64), more workers or workers with more memory, fewer training rows, "
    "or ImplicitCKNystroem features with a linear model (memory linear in the rows)."
)


class _ImplicitRidgeBase(BaseEstimator):
    """Fit and prediction of both estimators; the task bases say what the targets are and how to score them."""

    #: What to do with Dask targets or weights of an in-memory ``X`` (:func:`sk_deq._validation.reject_dask`).
    _DASK_ADVICE: ClassVar[str] = (
        "Compute them first (y.compute()), or fit a Dask array X on a distributed cluster: its targets and weights "
        "are then gathered with it."
    )

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
        tol: float = 1e-4,
        max_iter: int = 1000,
        preconditioner_rank: int = 4000,
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
    @restored_on_failure
    def fit(
        self, X: ArrayLike | torch.Tensor | dask.array.Array, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Fit exact kernel ridge regression: solve ``(K + alpha I) C = Y`` on the stored training kernel.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Training samples.  A Dask array is fitted on the active
            ``distributed`` cluster: the kernel's row slabs are computed and
            kept by the workers, and conjugate gradients run their products
            there (see :ref:`krr-dask`); ``X`` itself, ``y`` and the weights
            are gathered here (the fitted estimator keeps the samples).
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
        for stale in ("alpha_scores_", "validation_indices_"):  # of an earlier fit with several alphas
            self.__dict__.pop(stale, None)
        phases = _Phases()
        client = None
        with phases("prepare"):
            if is_dask_collection(X):
                client = self._cluster_inputs()
                X, y, sample_weight = gather_samples(X, type(self).__name__), computed(y), computed(sample_weight)
            Xv, Y, sw = self._validated(X, y, sample_weight)
            n = Xv.shape[0]
            rng = check_random_state(self.random_state)
            engine, Xs = self._prepared(Xv, sw)
            plan = self._plan(n, Xv.shape[1], Y.shape[1], engine, client, len(alphas) > 1)
            if self.verbose:
                print(plan.describe(), flush=True)
            order, n_train = self._split(Y, len(alphas) > 1, rng)
            S = engine.prepare(Xs)
        kw = {"n_jobs": self.n_jobs, "block_size": self.block_size, "progress": bool(self.verbose)}
        store: TileLayout | DaskStore
        with phases("kernel"):
            if client is None:
                store = fill_store(engine, S.take(order), plan, **kw)
            else:
                store = DaskStore.fill(client, engine, S.take(order), plan, **kw)
        try:
            C, info = self._solve(store, Y, sw, order, alphas, n_train, plan, rng, phases)
        finally:
            if isinstance(store, DaskStore):
                store.release()  # the workers' memory, now
        del store
        dual = np.empty_like(C)
        dual[order] = C
        self.dual_coef_ = dual[:, 0] if self._single_output else dual
        self.n_iter_, self.solver_ = max(info.n_iter, 1), plan.solver
        self.residual_ = None if plan.solver == "cholesky" else float(info.residuals.max())
        self._check_converged(info)
        self.X_fit_, self._fit_samples, self.fit_time_ = Xs, S, phases.seconds
        return self

    def _cluster_inputs(self):
        """The active distributed client for a fit of a Dask array (conjugate gradients only)."""
        if self.solver == "cholesky":
            raise ValueError(
                f"{type(self).__name__}(solver='cholesky') cannot fit a Dask array: the Cholesky factorisation "
                "needs the whole kernel in one memory, and on a cluster the workers hold its row slabs. Use "
                "solver='cg' (or 'auto', which picks it for Dask arrays), or fit an in-memory array."
            )
        return cluster_client(type(self).__name__)

    def _validated(self, X, y, sample_weight):
        """The validated samples (float64), targets (one column per target) and weights."""
        X, y = validate_samples(
            self,
            X,
            y,
            reset=True,
            dtype=np.float64,
            ensure_min_samples=2 if self.input_scaling == "global" else 1,
            multi_output=not isinstance(self, ClassifierMixin),
            y_numeric=not isinstance(self, ClassifierMixin),
        )
        X = np.asarray(to_numpy(X), dtype=np.float64)
        return X, self._targets(y), checked_weights(sample_weight, X, type(self).__name__)

    def _prepared(self, X, sw):
        """The kernel engine of the fit and the scaled samples; sets the fitted scaling and coefficients."""
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
        return engine, Xs

    def _plan(self, n, n_features, n_outputs, engine, client, candidates):
        """The memory plan (``fit_plan_``): of this machine, or of the cluster's workers and this client."""
        if client is not None:
            plan = plan_cluster(
                n,
                n_features,
                n_outputs,
                cluster_workers(client),
                storage=self.storage,
                rank=self.preconditioner_rank,
                block=self.block_size or auto_block_size(1),
                alternatives=_WAYS_OUT_CLUSTER,
            )
        else:
            workers = 1 if engine.device is not None else kernel_workers(self.n_jobs)
            device = engine.device
            plan = plan_fit(
                n,
                n_features,
                n_outputs,
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
        return plan

    def _solve(self, store, Y, sw, order, alphas, n_train, plan, rng, phases):
        """The solution of every target in the store's row order (``alpha_`` chosen first among several).

        The candidates' preconditioner factor, extended to all rows, serves the final solve.
        """
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
        if d is not None:
            C *= d[:, None]
        return C, info

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
