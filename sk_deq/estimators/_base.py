"""The fit chain of the torch classifiers and regressors.

:class:`TorchEstimatorBase` runs ``fit`` in named phases, each visited once:

1. validate: :meth:`_validate` (the task's: inputs, targets, weights);
2. prepare the network: :meth:`_initialize` (input scaling, the theory's
   constants, the network; see :mod:`sk_deq.estimators._network`);
3. compute the features: :meth:`_cache_features` (frozen hidden weights:
   once, without a graph);
4. fit the readout (:func:`sk_deq.nn.readout.train_readout`) or train end
   to end (:func:`sk_deq.nn.train`): :meth:`_fit_network`;
5. record: :meth:`_record`.

``partial_fit`` runs the same phases on one chunk with one epoch of the
stream's optimizer.  The task (:class:`~sk_deq.estimators._classifier.TorchClassifierBase`,
:class:`~sk_deq.estimators._regressor.TorchRegressorBase`) supplies four hooks:
:meth:`_validate`, :meth:`_fit_targets`, :meth:`_targets` and
:meth:`_optimizer`; the network mixin three (see
:class:`~sk_deq.estimators._network.NetworkMixin`).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike
from sklearn.model_selection import train_test_split
import torch
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from .._dask import lazy_method
from .._validation import restored_on_failure
from .._validation import is_dask_collection
from .._runtime import full_float32_precision
from ._export import deployed_network
from .._scaling import fit_input_scaling, scaling_device
from .._validation import DEVICE_CONSTRAINTS, INPUT_SCALING, SortedStrOptions, fit_context, validate_samples
from .._validation import warn_unused_settings, warn_unused_training_settings
from ._stream import Stream, chunk_optimizer, record_chunk
from ._network import DTYPES, NetworkMixin, stage_inputs
from ..nn.readout import train_readout
from ..nn.solvers import SolverLog
from ..nn.training import TrainingDivergenceError, train

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["TorchEstimatorBase", "store_params"]

_TRAINABLE = ("readout", "hidden", "all")


def store_params(estimator, params: dict) -> None:
    """Store an ``__init__``'s arguments (its ``locals()``) as the estimator's attributes, unchanged."""
    for name, value in params.items():
        if name != "self":
            setattr(estimator, name, value)


class TorchEstimatorBase(NetworkMixin, BaseEstimator):
    """Base class of the torch estimators (not meant to be used directly); see the module docstring."""

    _parameter_constraints: ClassVar[dict] = {
        "n_hidden": [Interval(Integral, 1, None, closed="left")],
        "trainable": [SortedStrOptions(set(_TRAINABLE))],
        "input_scaling": [SortedStrOptions(set(INPUT_SCALING))],
        "solver": [SortedStrOptions({"auto", "adam", "sgd", "lbfgs"})],
        "learning_rate_init": [Interval(Real, 0, math.inf, closed="neither"), SortedStrOptions({"auto"})],
        "alpha": [Interval(Real, 0, math.inf, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), SortedStrOptions({"auto"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, math.inf, closed="left")],
        "warm_start": ["boolean"],
        "dtype": [SortedStrOptions(set(DTYPES))],
        "device": DEVICE_CONSTRAINTS,
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    # the parameters the fit chain reads, stored by every estimator's __init__ (declared for type checkers)
    trainable: str
    input_scaling: str
    solver: str
    learning_rate_init: float | str
    alpha: float
    batch_size: int | str
    max_iter: int
    early_stopping: bool
    validation_fraction: float
    n_iter_no_change: int
    tol: float
    warm_start: bool
    device: str | torch.device | None
    random_state: int | np.random.RandomState | None

    def __init_subclass__(cls, **kwargs):
        """A concrete estimator's constraints: its task base's, and those of its network component."""
        super().__init_subclass__(**kwargs)
        network = cls.__dict__.get("_network")
        if network is not None:
            cls._parameter_constraints = {**cls._parameter_constraints, **network.constraints}

    #: The training loss (:data:`sk_deq.nn.LOSSES`).
    _loss: ClassVar[str] = "cross_entropy"

    #: Whether the validation split is stratified by the targets (a classifier's labels).
    _stratify: ClassVar[bool] = False

    #: Step size of ``learning_rate_init='auto'`` for hidden weights in training, and for a readout trained alone
    #: (on frozen features, from zero) by Adam or SGD, chosen by the task: see :meth:`_learning_rate`.
    _HIDDEN_LEARNING_RATE: ClassVar[float] = 1e-3
    _READOUT_LEARNING_RATE: ClassVar[float] = 0.1

    #: What to do with a Dask array given to ``fit`` (:func:`sk_deq._validation.reject_dask`).
    _DASK_ADVICE: ClassVar[str] = (
        "Fit on a sample of its rows that fits in memory (X[rows].compute()), or train block by block with "
        "partial_fit on each block's rows computed in turn (X.blocks[i].compute()). predict, decision_function, "
        "predict_proba, features and score take Dask arrays lazily."
    )

    # ------------------------------------------------------------ task hooks
    def _validate(self, X, y, sample_weight, *, reset: bool, partial: bool = False, **options):
        """Validate ``(X, y, sample_weight)``; returns ``(Data, targets for _fit_targets, sample_weight)``.

        ``reset``: a new network (the first call); ``partial``: a
        ``partial_fit`` chunk (``options``: that call's own arguments).
        """
        raise NotImplementedError

    def _fit_targets(self, targets, first: bool) -> int:
        """Learn what the task needs from the targets (classes, target scaling); returns the number of outputs.

        ``first``: a new network; otherwise a later ``partial_fit`` chunk.
        """
        raise NotImplementedError

    def _targets(self, data: Data, device) -> torch.Tensor:
        """The targets of ``data`` as :func:`sk_deq.nn.train` takes them."""
        raise NotImplementedError

    def _optimizer(self, partial: bool = False) -> str:
        """The optimizer: ``solver``, or what ``'auto'`` stands for (``'ridge'``: the closed form)."""
        if self.solver != "auto":
            return self.solver
        return "adam" if partial or self._features_trainable() else "lbfgs"

    # ---------------------------------------------------------------- helpers
    def _learning_rate(self) -> float:
        """The step size of Adam and SGD: ``learning_rate_init``, or what ``'auto'`` stands for.

        ``'auto'`` is 1e-3 (MLPClassifier's) when hidden weights train, and
        the task's :attr:`_READOUT_LEARNING_RATE` for the readout alone,
        which starts from zero and moves each weight by about the step size
        per Adam step (see :ref:`incremental-learning`).
        """
        if not (isinstance(self.learning_rate_init, str) and self.learning_rate_init == "auto"):
            return float(self.learning_rate_init)
        return self._auto_learning_rate()

    def _auto_learning_rate(self) -> float:
        """What ``learning_rate_init='auto'`` stands for (see :meth:`_learning_rate`)."""
        return self._HIDDEN_LEARNING_RATE if self._features_trainable() else self._READOUT_LEARNING_RATE

    def _draw_seeds(self) -> list[int]:
        """Seeds of the weights, the validation split and the minibatch order, drawn from ``random_state``."""
        rng = check_random_state(self.random_state)
        return [int(rng.randint(np.iinfo(np.int32).max)) for _ in range(3)]

    # -------------------------------------------------------------------- fit
    @fit_context(prefer_skip_nested_validation=True)
    @restored_on_failure
    def fit(self, X: ArrayLike | torch.Tensor, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        """Fit the network on ``(X, y)``.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Training data (dense; sparse input is rejected).  A float32 or
            float64 tensor (CPU or CUDA) is used as it is, not copied to
            numpy (see :ref:`devices`); the outputs of every method are
            numpy arrays all the same.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets: class labels for a classifier (any hashable type, at
            least two classes, one column); real values for a regressor,
            one column per output.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of every sample.  The loss is the weighted
            mean and the input scaling uses weighted averages, so integer
            weights act as repeated rows.  A classifier multiplies them by
            ``class_weight`` in the loss.

        Returns
        -------
        object
            The fitted estimator (``self``).

        Raises
        ------
        MemoryError
            With ``trainable='readout'``, when the cached features (see the
            notes) would not fit in the memory available on the device.

        Warns
        -----
        UserWarning
            For a training setting away from its default that the optimizer
            of this fit does not use: ``learning_rate_init`` and
            ``batch_size`` (Adam's and SGD's) with L-BFGS or the closed-form
            readout; ``max_iter``, ``tol`` and ``n_iter_no_change`` with the
            closed form too; ``n_iter_no_change`` with L-BFGS and
            ``validation_fraction`` with any optimizer, without
            ``early_stopping``.
        ConvergenceWarning
            When the optimizer stops at ``max_iter``, or a DEQ's fixed-point
            solve at ``fixed_point_max_iter``, without converging.

        Notes
        -----
        With ``trainable='readout'`` the features of all training samples are
        computed once and cached in the network's dtype, ``n_samples *
        n_hidden * 4`` bytes in float32 (234 MiB for 60,000 samples at width
        1024).  The inputs are scaled, converted and passed through the
        network one chunk at a time (no copy of all of them) and the readout
        reads the cache one chunk (L-BFGS, ridge) or minibatch (Adam, SGD)
        at a time, so the peak memory of fitting is that cache plus a
        constant, the working memory of one chunk.  When the cache would
        not fit in the memory available, ``fit`` raises ``MemoryError``
        before computing anything rather than switch to another optimizer;
        :meth:`partial_fit` trains on chunks of any size instead.  With
        trained hidden weights nothing is cached: every minibatch goes
        through the network.  ``predict``, ``decision_function`` and
        ``predict_proba`` hold no such cache: they apply the readout to
        each block of features as it comes and keep only the float64
        outputs, ``n_samples * n_outputs * 8`` bytes, and one chunk.
        """
        warm = bool(self.warm_start) and hasattr(self, "module_")
        self.__dict__.pop("_stream", None)  # fit starts a new stream of partial_fit calls
        if warm:
            self._check_same_network("warm_start", "Set warm_start=False to build a new network.")
        data, targets, sample_weight = self._validate(X, y, sample_weight, reset=not warm)
        seeds = self._draw_seeds()
        device = self._device()
        draws = None if warm else self._weight_source(data.X.shape[1], targets, seeds[0], device)
        data = Data(stage_inputs(data.X, device), data.y, data.weight)  # on a GPU: one copy of X, not four
        self._initialize(data.X, targets, sample_weight, draws, device, warm)
        t_start = time.perf_counter()
        if self.early_stopping:
            name = type(self).__name__
            train_set, valid_set = split_validation(
                data, self.validation_fraction, seeds[1], stratify=self._stratify, owner=name
            )
        else:
            train_set, valid_set = data, None
        options = self._train_options(len(train_set), np.random.RandomState(seeds[2]), device)
        warn_unused_training_settings(self, options["optimizer"])
        result = self._fit_network(train_set, valid_set, options, device, "fit")
        self._record(result, time.perf_counter() - t_start)
        return self

    def _initialize(self, X, targets, sample_weight, draws, device, warm) -> None:
        """Fit the input scaling and the theory, and build the network from ``draws`` (kept as it is with ``warm``)."""
        self.device_ = str(device)
        if warm:
            self.module_.features.to(device=device, dtype=self._torch_dtype)
            self.module_.readout.to(device=device)
            self._sync_runtime_settings()
            return
        n_outputs = self._fit_targets(targets, first=True)
        scaling = fit_input_scaling(X, self.input_scaling, sample_weight, device=scaling_device(device))
        self.input_mean_, self.input_scale_, self.tau0_ = scaling
        self._network.prepare(self, self.tau0_)
        self.module_ = self._build_module(X.shape[1], n_outputs, draws, self._torch_dtype, device)
        self._built_with = self._network_definition()
        self.history_: list[dict] = []
        self._loss_reference: float | None = None

    def _train_options(self, n_samples: int, shuffle_rng, device=None, partial: bool = False) -> dict:
        """Keyword arguments of :func:`sk_deq.nn.train` and :func:`sk_deq.nn.readout.train_readout`."""
        return dict(
            optimizer=self._optimizer(partial),
            learning_rate=self._learning_rate(),
            batch_size=min(200, n_samples) if self.batch_size == "auto" else int(self.batch_size),
            max_epochs=self.max_iter,
            alpha=self.alpha,
            n_iter_no_change=self.n_iter_no_change,
            improvement_tol=self.tol,
            rng=shuffle_rng,
            verbose=int(self.verbose),
            epoch_offset=len(self.history_),
            chunk_size=self._chunk_rows(device),
            loss=self._loss,
            loss_reference=getattr(self, "_loss_reference", None),  # kept from the network's first minibatch run
        )

    @full_float32_precision()
    def _fit_network(self, train_set: Data, valid_set: Data | None, options: dict, device, where: str):
        """Fit the readout on cached features, or train the whole network; the solves go to ``fixed_point_info_``.

        Float32 products in full precision (no TF32) whatever the caller set
        (:func:`~sk_deq._runtime.full_float32_precision`), as in predict.
        """
        targets = self._targets(train_set, device)
        valid: dict[str, Any] = (
            {} if valid_set is None else {"y_val": self._targets(valid_set, device), "val_weight": valid_set.weight}
        )
        with SolverLog(self.module_) as log:
            try:
                if self._features_trainable():  # gradients through the network (implicit ones through a DEQ)
                    self.module_.train()
                    X_val = None if valid_set is None else self._to_tensor(valid_set.X, device, "fit")
                    X = self._to_tensor(train_set.X, device, "fit")
                    penalized = [self.module_.readout.weight]
                    result = train(
                        self.module_, X, targets, sample_weight=train_set.weight, X_val=X_val, penalized=penalized,
                        **valid, **options,
                    )  # fmt: skip
                else:
                    Z, Z_val = self._cache_features(train_set, valid_set, device, log)
                    self.module_.readout.train()
                    result = train_readout(
                        self.module_.readout, Z, targets, sample_weight=train_set.weight, X_val=Z_val, **valid,
                        **options,
                    )  # fmt: skip
            except TrainingDivergenceError as exc:  # the advice in this estimator's terms
                raise type(exc)(f"{type(self).__name__}: {exc.symptom}", self._step_size_advice(options)) from exc
        if result.loss_reference is not None:  # warm starts and partial_fit calls measure against the same loss
            self._loss_reference = result.loss_reference
        self.fixed_point_info_ = log.warn(type(self).__name__, where)
        return result

    def _step_size_advice(self, options: dict) -> str:
        """What to do when training diverged: a smaller ``learning_rate_init``, the step size in use named."""
        solver, rate, auto = options["optimizer"], options["learning_rate"], self._auto_learning_rate()
        if isinstance(self.learning_rate_init, str):
            return (
                f"learning_rate_init='auto' (a step size of {rate:g} here) is too large for solver={solver!r} "
                "on these data: pass a smaller learning_rate_init"
            )
        return (
            f"learning_rate_init={rate:g} is too large a step size for solver={solver!r}: lower learning_rate_init "
            f"(learning_rate_init='auto' is {auto:g} here)"
        )

    def _cache_features(self, train_set: Data, valid_set: Data | None, device, log):
        """The features of the training (and validation) inputs, computed once without a graph.

        The inputs go to the device one chunk at a time and the features stay
        in the network's dtype; the readout upcasts each chunk or minibatch
        it evaluates (see :mod:`sk_deq.nn.readout`).
        """
        t0 = time.perf_counter()
        self._check_features_fit(len(train_set) + (0 if valid_set is None else len(valid_set)), device)
        Z = self._compute_features(train_set.X, device, "fit", log, "features (train)")
        Z_val = (
            None if valid_set is None else self._compute_features(valid_set.X, device, "fit", log, "features (valid)")
        )
        if self.verbose:
            seconds = time.perf_counter() - t0
            print(f"{type(self).__name__}: features of {len(train_set)} samples computed in {seconds:.2f}s")
        return Z, Z_val

    def _record(self, result, seconds: float) -> None:
        """Store the training history and outcome; warn when the optimizer ran out of epochs."""
        self.module_.eval()
        name = type(self).__name__
        self.history_.extend(result.history)
        self.n_iter_ = len(self.history_)
        self.best_loss_ = result.best_loss
        self.best_validation_score_ = result.best_score
        self.best_validation_loss_ = result.best_valid_loss
        self.fit_time_ = seconds
        optimizer = self._optimizer()
        optimizer = "closed-form" if optimizer == "ridge" else optimizer
        if self.verbose:
            print(f"{name}: {result.n_epochs} epochs ({optimizer}) in {seconds:.2f}s; {result.message}")
        if not result.converged:
            unit = "iterations" if optimizer == "lbfgs" else "epochs"
            warnings.warn(
                f"{name}: the {optimizer} optimizer stopped after max_iter={self.max_iter} {unit} without "
                "meeting its stopping criterion; increase max_iter.",
                ConvergenceWarning,
                stacklevel=4,
            )

    # ------------------------------------------------------------ partial_fit
    @restored_on_failure
    def _partial_fit(self, X, y, sample_weight, **options) -> Self:
        """What ``partial_fit`` does once its public signature is bound (``options``: the task's own)."""
        first = not hasattr(self, "module_")
        if not first:
            self._check_same_network("partial_fit", "Call fit to build a new network.")
        why = "partial_fit trains one epoch per call on its chunk, with no validation split"
        warn_unused_settings(self, ["early_stopping"], why)
        data, targets, sample_weight = self._validate(X, y, sample_weight, reset=first, partial=True, **options)
        device = self._device()
        if first:
            seeds = self._draw_seeds()
            draws = self._weight_source(data.X.shape[1], targets, seeds[0], device)
            self._initialize(data.X, targets, sample_weight, draws, device, warm=False)
            self._stream = Stream(np.random.RandomState(seeds[2]))
        else:
            self._initialize(data.X, targets, sample_weight, None, device, warm=True)
            self._fit_targets(targets, first=False)
        t_start = time.perf_counter()
        data = data.positive()
        optimizer = chunk_optimizer(self, device)
        options = self._train_options(len(data), self._stream.rng, device, partial=True)
        options.update(max_epochs=1, torch_optimizer=optimizer)
        result = self._fit_network(data, None, options, device, "partial_fit")
        record_chunk(self, result, time.perf_counter() - t_start)
        return self

    # ---------------------------------------------------------------- predict
    @full_float32_precision()
    def _predict_features(self, X, outputs: bool = False) -> torch.Tensor:
        """The features of ``X`` on the device ``device`` names now (validated against the fit; no TF32).

        With ``outputs``, the readout's float64 outputs instead, computed
        block by block as the features come (see
        :meth:`~sk_deq.estimators._network.NetworkMixin._compute_features`): the
        features of all rows are never held.
        """
        check_is_fitted(self, "module_")
        self._validate_params()  # set_params after fit is checked as fit checks it
        X = validate_samples(self, X, reset=False, accept_sparse=False, dtype=[np.float64, np.float32])
        device = self._device()
        X = stage_inputs(X, device)  # on a GPU: one copy of X, not one blocking copy per chunk
        self.module_.to(device)
        self._sync_runtime_settings()
        self.module_.eval()
        readout = self.module_.readout if outputs else None
        with SolverLog(self.module_) as log:  # the inputs are scaled (in float64) one chunk at a time
            Z = self._compute_features(X, device, "predict", log, readout=readout)
        log.warn(type(self).__name__, "predict")
        return Z

    def _outputs(self, X) -> np.ndarray:
        """The readout's outputs on ``X`` (float64, one column per output; finite, or a ``ValueError``)."""
        return self._predict_features(X, outputs=True).to("cpu").numpy()

    def features(self, X: ArrayLike | torch.Tensor) -> np.ndarray:
        """Hidden features the readout sees (``z*`` of a DEQ, ``y_L`` of an explicit net).

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Raw inputs; the fitted input scaling is applied first.  A Dask
            array gives a lazy Dask array, row block by row block.

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples, n_hidden)
            The features, in float64 (numpy, for a tensor ``X`` too).
        """
        if is_dask_collection(X):
            return lazy_method(X, self.features, lambda est: (int(est.n_hidden), np.float64))
        return self._predict_features(X).detach().to("cpu", torch.float64).numpy()

    def to_torch(
        self, device: str | torch.device | None = None, *, fixed_iterations: int | None = None
    ) -> torch.nn.Module:
        """The fitted network as a standalone :class:`torch.nn.Module` from raw inputs to the outputs.

        The module maps a float tensor of shape ``(n, n_features)`` of raw
        inputs to float64 outputs equal to :meth:`decision_function` (a
        classifier's logits, 1-D for two classes) or :meth:`predict` (a
        regressor's predictions in target units): the input scaling, the
        activations and the target de-standardisation are folded in, and
        its ``forward`` uses torch operations only.  An explicit or matched
        network is a fixed graph that :func:`torch.export.export` accepts; a
        DEQ's ``forward`` runs the fixed-point loop (plain iteration to
        ``fixed_point_tol``, at most ``fixed_point_max_iter`` evaluations,
        per batch, whatever ``fixed_point_solver`` is), which stops on the
        data: to export a DEQ, pass ``fixed_iterations``.  See
        :ref:`deploying-to-torch`.

        Parameters
        ----------
        device : None, str or torch.device, default=None
            Where the module's weights go; None: the device the estimator
            predicts on (``device``, the CPU unless it names a GPU or is
            ``'auto'`` on a machine with one).
        fixed_iterations : int or None, default=None
            A DEQ only: run exactly this many evaluations of the fixed-point
            map, each sample still kept at its first iterate within
            ``fixed_point_tol``, instead of stopping once every sample has
            converged.  The loop is then a fixed graph that
            :func:`torch.export.export` accepts.  The outputs equal those of
            the module without it wherever every sample converges within
            ``fixed_iterations`` (for every input from
            ``fixed_iterations=fixed_point_max_iter`` on), and so agree with
            :meth:`decision_function` or :meth:`predict` to about
            ``fixed_point_tol``, relative; with fewer, a sample that needs
            more keeps its last iterate.

        Returns
        -------
        torch.nn.Module
            A :class:`sk_deq.estimators._export.DeployedNetwork` in eval mode, its
            parameters copies with ``requires_grad=False``.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        TypeError
            When an activation wraps an arbitrary python callable (only the
            named activations and the leaky-ReLU, hard-tanh and quadratic
            families have a torch module), or ``device`` is not a device
            (the inputs go to the returned module, as a tensor).
        ValueError
            For ``fixed_iterations`` below 1 or above
            ``sk_deq.estimators._export.MAX_FIXED_ITERATIONS`` (10,000), or
            given for an explicit or matched network (a fixed graph already);
            for a parameter set out of its range after ``fit``.
        """
        check_is_fitted(self, "module_")
        return deployed_network(self, device, fixed_iterations)

    # ----------------------------------------------------------------- tags
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        return tags


@dataclass
class Data:
    """Inputs, encoded targets and training weights (None: all equal) of one split."""

    X: np.ndarray
    y: np.ndarray
    weight: np.ndarray | None

    def __len__(self):
        return len(self.y)

    def subset(self, rows) -> Data:
        """The rows ``rows`` (indices or a mask)."""
        return Data(self.X[rows], self.y[rows], None if self.weight is None else self.weight[rows])

    def positive(self) -> Data:
        """The rows of positive weight (all rows when unweighted)."""
        return self if self.weight is None else self.subset(self.weight > 0)


def split_validation(data: Data, fraction: float, seed: int, *, stratify: bool, owner: str):
    """Hold out ``fraction`` of ``data`` (stratified by its labels with ``stratify``); returns ``(train, valid)``."""
    idx = np.arange(len(data))
    labels = data.y if stratify else None
    try:
        train_idx, val_idx = train_test_split(idx, test_size=fraction, random_state=seed, stratify=labels)
    except ValueError:
        if labels is None:
            raise
        train_idx, val_idx = train_test_split(idx, test_size=fraction, random_state=seed)
    if len(val_idx) < 2:
        raise ValueError(
            "The validation set is too small (fewer than 2 samples). Increase "
            "'validation_fraction' or the size of your dataset, or set early_stopping=False."
        )
    train_set, valid_set = data.subset(train_idx), data.subset(val_idx)
    if stratify and len(np.unique(train_set.positive().y)) < 2:
        raise ValueError(
            f"After the validation split the training set holds only 1 class; {owner} needs "
            "more samples per class, or early_stopping=False."
        )
    if valid_set.weight is not None and not np.any(valid_set.weight > 0):
        raise ValueError(
            "All sample weights of the validation set are zero; use another random_state, a larger "
            "validation_fraction, or early_stopping=False."
        )
    return train_set, valid_set
