"""Shared scikit-learn machinery of the torch classifiers and regressors.

:class:`TorchEstimatorBase` does everything that depends neither on the
network nor on the task: input validation, the input scaling (see
:ref:`input-scaling`), seeding, device choice, the validation split, feature caching when only the
readout is trained, the call to :func:`sk_deq.nn.train`, incremental
training (``partial_fit``), the network's outputs, and pickling.
:class:`TorchClassifierBase` adds what a classifier needs (label encoding,
class weights, the cross-entropy, probabilities) and
:class:`TorchRegressorBase` what a regressor needs (real, possibly
multi-output targets, the squared error, R²).  A concrete estimator combines
one of the two with a network mixin that says how to build the feature
module (a DEQ or an explicit net) through three hooks: :meth:`_prepare`,
:meth:`_make_features` and :meth:`_feature_chunk`.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from numbers import Integral, Real
from typing import ClassVar

import numpy as np
import torch
from scipy import special
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets, unique_labels
from sklearn.utils.validation import _check_sample_weight, check_array, check_is_fitted, validate_data

from ._device import resolve_device
from ._inputs import INPUT_SCALING, Moments, apply_input_scaling, fit_input_scaling, power_of_two_scale
from ._param_validation import DEVICE_CONSTRAINTS, SortedStrOptions
from ._stream import Stream, numpy_to_tensors, partial_fit_available, picklable
from .kernels.memory import available_memory_bytes, check_fits_in_memory
from .nn.blocks import block_rows, map_row_blocks
from .nn.readout import LinearReadout, ReadoutObjective, ridge_readout
from .nn.training import ProgressBar, TrainResult, _make_optimizer, _normalised_weights, train

__all__ = ["TorchClassifierBase", "TorchEstimatorBase", "TorchRegressorBase"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_TRAINABLE = ("readout", "hidden", "all")
#: How the readout is fitted: cross-entropy by an optimizer, or least squares in closed form.
READOUTS = ("logistic", "ridge")


def _sorted_labels(labels: np.ndarray, name: str) -> np.ndarray:
    """Classification targets checked and their sorted distinct labels, with scikit-learn's error for
    strings mixed with numbers (numpy's own sort would raise ``'<' not supported``)."""
    if labels.dtype == object and len({isinstance(v, str) for v in labels.ravel()}) > 1:
        raise ValueError(
            f"Mix of label input types (string and number) in {name}: "
            f"{sorted({type(v).__name__ for v in labels.ravel()})}. Use labels of one type."
        )
    try:
        check_classification_targets(labels)
        return unique_labels(labels)
    except TypeError as exc:
        raise ValueError(f"The labels of {name} cannot be ordered ({exc}); use labels of one type.") from None


def _unit_max(weights: np.ndarray) -> np.ndarray:
    """Non-negative ``weights`` divided by a power of two near their largest: exact, all below 2, sums finite."""
    return weights / power_of_two_scale(weights)


def _device_memory(device: torch.device) -> int | None:
    """Bytes free on ``device``: CUDA's own count, else :func:`~sk_deq.kernels.memory.available_memory_bytes`."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return available_memory_bytes()


class _Model(torch.nn.Module):
    """Feature module followed by a linear readout.

    The readout is kept in float64 whatever the network's dtype: it is small
    (``n_hidden x n_outputs``), its loss is then solved to a precision that
    makes weighted and repeated samples give the same fit, and its rounding
    never shows in the outputs.
    """

    def __init__(self, features: torch.nn.Module, n_hidden: int, n_outputs: int, device):
        super().__init__()
        self.features = features
        # skip_init: no draw from torch's global generator (the readout starts at zero)
        self.readout = torch.nn.utils.skip_init(
            torch.nn.Linear, n_hidden, n_outputs, dtype=torch.float64, device=device
        )
        with torch.no_grad():  # a convex readout problem: start from zero
            self.readout.weight.zero_()
            self.readout.bias.zero_()

    def forward(self, x):
        return self.readout(self.features(x).to(torch.float64))


def _frozen(value):
    """``value`` with lists turned into tuples (``layers=['relu']`` defines the same network as ``('relu',)``)."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _same_value(a, b) -> bool:
    """Whether two parameter values are equal (by identity where ``==`` gives no truth value)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


@dataclass
class _Data:
    """Inputs, encoded targets and training weights (None: all equal) of one split."""

    X: np.ndarray
    y: np.ndarray
    weight: np.ndarray | None

    def __len__(self):
        return len(self.y)

    def positive(self) -> _Data:
        """The rows of positive weight (all rows when unweighted)."""
        if self.weight is None:
            return self
        keep = self.weight > 0
        return _Data(self.X[keep], self.y[keep], self.weight[keep])


def _has_probabilities(est) -> bool:
    """Probabilities come from the softmax of a cross-entropy readout; a ridge readout has none."""
    if getattr(est, "readout", "logistic") == "ridge":
        raise AttributeError(
            f"{type(est).__name__} with readout='ridge' has no predict_proba: its least-squares outputs are not "
            "probabilities (as with RidgeClassifier). Use decision_function, or readout='logistic'."
        )
    return True


class TorchEstimatorBase(BaseEstimator):
    """Base class of the torch estimators (not meant to be used directly).

    ``fit`` runs named phases, each a method a subclass may override:
    :meth:`_validate_training_data` -> :meth:`_initialize` ->
    :meth:`_split_validation` -> :meth:`_train` (:meth:`_train_readout` on
    cached features, or :meth:`_train_end_to_end`) -> :meth:`_record`.
    ``partial_fit`` runs :meth:`_validate_chunk` -> :meth:`_initialize` (on
    its first call; afterwards it only moves the network to the device) ->
    :meth:`_train_chunk` (one epoch of the same two training modes with the
    stream's optimizer) -> :meth:`_record_chunk`.

    The task (:class:`TorchClassifierBase`, :class:`TorchRegressorBase`)
    supplies the loss (:attr:`_loss`), the validation of targets
    (:meth:`_validate_training_data`, :meth:`_validate_chunk`), what is
    learnt from them before training (:meth:`_fit_targets`), their
    encoding for torch (:meth:`_targets`), the number of outputs and
    whether the readout is solved in closed form (:meth:`_closed_form`).
    """

    _parameter_constraints: ClassVar[dict] = {
        "n_hidden": [Interval(Integral, 1, None, closed="left")],
        "trainable": [SortedStrOptions(set(_TRAINABLE))],
        "input_scaling": [SortedStrOptions(set(INPUT_SCALING))],
        "optimizer": [SortedStrOptions({"auto", "adam", "sgd", "lbfgs"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), SortedStrOptions({"auto"})],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), SortedStrOptions({"auto"})],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "improvement_tol": [Interval(Real, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "dtype": [SortedStrOptions(set(_DTYPES))],
        "device": DEVICE_CONSTRAINTS,
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    #: The training loss (:data:`sk_deq.nn.LOSSES`).
    _loss: ClassVar[str] = "cross_entropy"

    #: Step size of ``learning_rate='auto'`` for hidden weights in training, and for a readout trained alone
    #: (on frozen features, from zero) by Adam or SGD, chosen by the task: see :meth:`_learning_rate`.
    _HIDDEN_LEARNING_RATE: ClassVar[float] = 1e-3
    _READOUT_LEARNING_RATE: ClassVar[float] = 0.1

    #: Parameters of every network that define it (the network mixins add theirs as ``_network_params``):
    #: a warm start or a later ``partial_fit`` keeps the network, so changing one of them is an error.
    #: The solver settings (``solver``, ``max_iter``, ``tol``) and ``dtype`` are applied to the kept
    #: network instead, and the rest only concern training.
    _NETWORK_PARAMS: ClassVar[tuple] = ("n_hidden", "input_scaling", "trainable")

    # ------------------------------------------------------------------ hooks
    def _prepare(self, tau0: float) -> None:
        """Compute the theory-side constants (centring, matching) at fit."""
        raise NotImplementedError

    def _make_features(self, n_features: int, generator, dtype, device) -> torch.nn.Module:
        """Build the feature module (weights drawn from ``generator``)."""
        raise NotImplementedError

    def _hidden_weight_shapes(self, n_features: int) -> list[tuple[int, int]]:
        """Shapes of the hidden weight matrices :meth:`_make_features` draws (for the memory check)."""
        raise NotImplementedError

    def _feature_chunk(self, features: torch.nn.Module, x: torch.Tensor, diagnostics: list, n_rows: int):
        """Features of one chunk without gradients (may append solver diagnostics of its first ``n_rows``)."""
        with torch.no_grad():
            return features(x)

    def _check_diagnostics(self, diagnostics: list, where: str) -> dict | None:
        """Warn about solver diagnostics collected by :meth:`_feature_chunk`."""
        return None

    def _after_step_hook(self, diagnostics: list):
        return None

    # ------------------------------------------------------------ task hooks
    def _check_options(self) -> None:
        """Reject parameter combinations before any work (nothing by default)."""

    def _validate_training_data(self, X, y, sample_weight, warm):
        """Validate ``(X, y, sample_weight)``; returns ``(_Data, targets for _fit_targets, sample_weight)``."""
        raise NotImplementedError

    def _validate_chunk(self, X, y, sample_weight, first: bool, **options):
        """partial_fit's counterpart of :meth:`_validate_training_data`."""
        raise NotImplementedError

    def _fit_targets(self, targets, sample_weight) -> None:
        """Learn what the task needs from the targets of a new fit (classes, target scaling)."""
        raise NotImplementedError

    def _continue_targets(self, targets) -> None:
        """Update what :meth:`_fit_targets` learnt with a later ``partial_fit`` chunk (nothing by default)."""

    def _n_outputs(self) -> int:
        raise NotImplementedError

    def _targets(self, data: _Data, device) -> torch.Tensor:
        """The targets of ``data`` as :func:`sk_deq.nn.train` takes them."""
        raise NotImplementedError

    def _stratify(self, data: _Data):
        """Labels to stratify the validation split by (None: a plain random split)."""
        return None

    def _check_split(self, train_set: _Data) -> None:
        """Reject a training split the task cannot learn from (nothing by default)."""

    def _closed_form(self) -> bool:
        """Whether the readout is the closed-form least-squares solution (:meth:`_fit_ridge`)."""
        return False

    @staticmethod
    def _checked_weights(sample_weight, X, name: str):
        """Validated ``sample_weight`` on its own scale (None stays None); all zero is an error."""
        if sample_weight is None:
            return None
        sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        if not np.any(sample_weight > 0):
            raise ValueError(f"{name}: all sample weights are zero; at least one must be positive.")
        return sample_weight

    @classmethod
    def _positive_weights(cls, sample_weight, X, name: str):
        """:meth:`_checked_weights`, rescaled by :func:`_unit_max`.

        Every use of the weights is a weighted average, which their scale
        does not change; rescaled below 2, their sums cannot overflow
        (weights up to the largest float64).
        """
        sample_weight = cls._checked_weights(sample_weight, X, name)
        return None if sample_weight is None else _unit_max(sample_weight)

    # ---------------------------------------------------------------- helpers
    @property
    def _torch_dtype(self):
        return _DTYPES[self.dtype]

    def _block_rows(self) -> int:
        return block_rows(int(self.n_hidden))

    def _chunk_rows(self) -> int:
        """Rows scaled and moved to the device at once: whole blocks, about 2^22 features."""
        block = self._block_rows()
        return max(1, (1 << 22) // (max(int(self.n_hidden), 1) * block)) * block

    def _to_tensor(self, X, device, where: str = "predict") -> torch.Tensor:
        X = apply_input_scaling(X, self.input_mean_, self.input_scale_)
        dtype = np.float64 if self.dtype == "float64" else np.float32
        # The input term B x of a layer is about ||x|| in size: keep it within the dtype's range.
        limit = math.sqrt(np.finfo(dtype).max) / 1e3
        big = max(float(X.max()), -float(X.min())) if X.size else 0.0  # max |x| without a temporary
        if not big * math.sqrt(max(X.shape[1], 1)) < limit:
            raise ValueError(
                f"After input scaling the inputs of {type(self).__name__} reach {big:.3g}, too large for "
                f"dtype='{self.dtype}' (samples of norm up to about {limit:.1g}); {self._range_advice(where)}"
            )
        X = np.require(X, dtype=dtype, requirements=["C", "W"])
        return torch.from_numpy(X).to(device)

    def _range_advice(self, where: str) -> str:
        """What to do about inputs too large after scaling: it depends on the scaling and on what is computed."""
        if self.input_mean_ is None:  # fitted with input_scaling='none'
            return (
                "use input_scaling='global' (fitted on data of the same scale), dtype='float64', or rescale the inputs."
            )
        scaling = (
            f"input_scaling='global' divides by the (weighted) spread {self.input_scale_:.3g} of the data it was "
            "fitted on"
        )
        if where == "fit":
            return (
                f"{scaling}, and these training samples lie far outside it. Sample weights spanning many orders "
                "of magnitude make that spread the heaviest samples' alone (give weight 0 to rows that should "
                "not count); a partial_fit chunk or a warm_start fit may be on another scale than the data the "
                "scaling was fitted on."
            )
        return f"{scaling}, and these samples lie far outside it: pass inputs in the units of the training data."

    def _build_module(self, n_features, n_outputs, generator, dtype, device) -> _Model:
        self._check_network_fits(n_features, n_outputs, torch.device(device))
        feats = self._make_features(n_features, generator, dtype, device)
        return _Model(feats, int(self.n_hidden), n_outputs, device)

    def _compute_features(self, X: np.ndarray, device, where: str, desc: str = "features"):
        """Features of the raw inputs ``X`` in chunks; returns ``(Z, solver summary or None)``.

        Every chunk is scaled, converted and moved to ``device`` on its own
        (no scaled copy of all of ``X``), and goes through the network in
        blocks of exactly :func:`~sk_deq.nn.block_rows` rows (see
        :mod:`sk_deq.nn.blocks`), so a sample's features do not depend on
        the other rows of its batch.
        """
        feats = self.module_.features
        feats.eval()
        chunk, block = self._chunk_rows(), self._block_rows()
        n = X.shape[0]
        self._check_features_fit(n, device, where)
        diagnostics: list = []

        def network(xb, rows):
            return self._feature_chunk(feats, xb, diagnostics, rows)

        # filled in place (concatenating chunks would hold the features twice), checked chunk by chunk
        Z = torch.empty(n, int(self.n_hidden), dtype=self._torch_dtype, device=device)
        finite = True
        n_chunks = max(1, math.ceil(n / chunk))
        with ProgressBar(n_chunks, desc, enabled=bool(self.verbose) and n_chunks > 1) as bar:
            for i in range(0, n, chunk):
                x = self._to_tensor(X[i : i + chunk], device, where)
                part = map_row_blocks(network, x, block, Z[i : i + chunk])
                finite = finite and bool(torch.isfinite(part).all())
                bar.update()
        summary = self._check_diagnostics(diagnostics, where)
        if not finite:
            raise ValueError(
                f"{type(self).__name__} produced non-finite features; the inputs are far outside the range "
                "the network can handle. Check the input scaling."
            )
        return Z, summary

    def _check_features_fit(self, n_rows: int, device: torch.device, where: str = "fit") -> None:
        """Raise ``MemoryError`` when the features of ``n_rows`` samples cannot be held on ``device``."""
        name, values = type(self).__name__, f"{int(n_rows)} x {self.n_hidden} {self.dtype} values need"
        if where == "fit":
            what = f"{name} caches the features of the {n_rows} training samples to fit the readout on {device}"
            remedy = (
                "Train in chunks with partial_fit (it holds one chunk's features at a time), fit on fewer "
                "samples, or reduce n_hidden."
            )
        else:
            what = f"{name} computes the features of the {n_rows} samples on {device}"
            remedy = "Pass fewer samples at a time (every sample's output depends on it alone)."
        nbytes = int(n_rows) * int(self.n_hidden) * self._torch_dtype.itemsize
        check_fits_in_memory(nbytes, f"{what}: {values}", remedy, available=_device_memory(device))

    def _check_network_fits(self, n_features: int, n_outputs: int, device: torch.device) -> None:
        """Raise ``MemoryError`` when the network's weights cannot be allocated, before drawing them.

        The hidden weights (:meth:`_hidden_weight_shapes`) are drawn in
        float64 on the CPU, then cast to the network's dtype and moved to
        ``device``; the readout is float64.
        """
        shapes = self._hidden_weight_shapes(int(n_features))
        n_weights = sum(int(r) * int(c) for r, c in shapes)
        itemsize = self._torch_dtype.itemsize
        kept = n_weights * itemsize + (int(self.n_hidden) + 1) * int(n_outputs) * 8
        drawn = 0 if itemsize == 8 and device.type == "cpu" else n_weights * 8  # the float64 draws, on the CPU
        what = (
            f"{type(self).__name__}(n_hidden={self.n_hidden}) on {n_features} features: its hidden weights "
            f"({', '.join(f'{r} x {c}' for r, c in shapes)}: {n_weights:.4g} values in {self.dtype}, drawn in "
            "float64 on the CPU) and its float64 readout"
        )
        host = _device_memory(torch.device("cpu"))
        if device.type == "cpu":
            check_fits_in_memory(kept + drawn, f"{what} need", "Reduce n_hidden.", available=host)
            return
        check_fits_in_memory(drawn, f"{what}: the float64 draws on the CPU need", "Reduce n_hidden.", available=host)
        check_fits_in_memory(kept, f"{what} need on {device}", "Reduce n_hidden.", available=_device_memory(device))

    def _features_trainable(self) -> bool:
        return any(p.requires_grad for p in self.module_.features.parameters())

    def _learning_rate(self) -> float:
        """The step size of Adam and SGD: ``learning_rate``, or what ``'auto'`` stands for.

        ``'auto'`` is 1e-3 (MLPClassifier's) when hidden weights train, and
        the task's :attr:`_READOUT_LEARNING_RATE` for the readout alone,
        which starts from zero and moves each weight by about the step size
        per Adam step (measured on streams of digits and diabetes, see
        :ref:`incremental-learning`).
        """
        if not (isinstance(self.learning_rate, str) and self.learning_rate == "auto"):
            return float(self.learning_rate)
        return self._HIDDEN_LEARNING_RATE if self._features_trainable() else self._READOUT_LEARNING_RATE

    def _resolve_optimizer(self, partial: bool = False) -> str:
        if self.optimizer != "auto":
            return self.optimizer
        return "adam" if partial or self._features_trainable() else "lbfgs"

    def _draw_seeds(self) -> list[int]:
        """Seeds of the weights, the validation split and the minibatch order, drawn from ``random_state``."""
        rng = check_random_state(self.random_state)
        return [int(rng.randint(np.iinfo(np.int32).max)) for _ in range(3)]

    def _network_definition(self) -> dict:
        """The parameters that define the network, as built (see :attr:`_NETWORK_PARAMS`)."""
        names = TorchEstimatorBase._NETWORK_PARAMS + tuple(getattr(self, "_network_params", ()))
        return {name: _frozen(getattr(self, name)) for name in names}

    def _check_same_network(self, what: str, remedy: str) -> None:
        """Raise when a parameter that defines the network changed since it was built (warm start, partial_fit)."""
        built = getattr(self, "_built_with", None)
        if built is None:  # pickled before the definition was recorded: the width is all there is to check
            built = {"n_hidden": self.module_.readout.in_features}
        now = self._network_definition()
        changed = [name for name, value in built.items() if not _same_value(value, now[name])]
        if changed:
            kept = ", ".join(f"{name}={built[name]!r}" for name in changed)
            got = ", ".join(f"{name}={now[name]!r}" for name in changed)
            raise ValueError(f"{what} keeps the network of the previous fit ({kept}); got {got}. {remedy}")

    # -------------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit the network on ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (dense; sparse input is rejected).
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
        through the network.
        """
        warm = bool(self.warm_start) and hasattr(self, "module_")
        self.__dict__.pop("_stream", None)  # fit starts a new stream of partial_fit calls
        self._check_options()
        data, targets, sample_weight = self._validate_training_data(X, y, sample_weight, warm)
        seeds = self._draw_seeds()
        device = self._device()
        self._initialize(data.X, targets, sample_weight, seeds[0], device, warm)
        t_start = time.perf_counter()
        train_set, valid_set = self._split_validation(data, seeds[1])
        result = self._train(train_set, valid_set, np.random.RandomState(seeds[2]), device)
        self._record(result, time.perf_counter() - t_start)
        return self

    def _initialize(self, X, targets, sample_weight, weight_seed, device, warm) -> None:
        """Fit the input scaling and the theory, and build the network (kept as it is with ``warm``)."""
        self.device_ = str(device)
        if warm:
            self.module_.features.to(device=device, dtype=self._torch_dtype)
            self.module_.readout.to(device=device)
            self._sync_runtime_settings()
            return
        self._fit_targets(targets, sample_weight)
        self.input_mean_, self.input_scale_, self.tau0_ = fit_input_scaling(X, self.input_scaling, sample_weight)
        self._prepare(self.tau0_)
        generator = torch.Generator().manual_seed(weight_seed)
        self.module_ = self._build_module(X.shape[1], self._n_outputs(), generator, self._torch_dtype, device)
        self._built_with = self._network_definition()
        self.history_ = []

    def _split_validation(self, data: _Data, seed: int):
        """Hold out ``validation_fraction`` of the data (stratified for a classifier) when ``early_stopping``."""
        if not self.early_stopping:
            return data, None
        idx = np.arange(len(data))
        stratify = self._stratify(data)
        try:
            train_idx, val_idx = train_test_split(
                idx, test_size=self.validation_fraction, random_state=seed, stratify=stratify
            )
        except ValueError:
            if stratify is None:
                raise
            train_idx, val_idx = train_test_split(idx, test_size=self.validation_fraction, random_state=seed)
        if len(val_idx) < 2:
            raise ValueError(
                "The validation set is too small (fewer than 2 samples). Increase "
                "'validation_fraction' or the size of your dataset, or set early_stopping=False."
            )

        def subset(rows):
            w = None if data.weight is None else data.weight[rows]
            return _Data(data.X[rows], data.y[rows], w)

        train_set, valid_set = subset(train_idx), subset(val_idx)
        self._check_split(train_set)
        if valid_set.weight is not None and not np.any(valid_set.weight > 0):
            raise ValueError(
                "All sample weights of the validation set are zero; use another random_state, a larger "
                "validation_fraction, or early_stopping=False."
            )
        return train_set, valid_set

    def _train_options(self, n_samples: int, shuffle_rng) -> dict:
        """Keyword arguments of :func:`sk_deq.nn.train` shared by both training modes."""
        return dict(
            optimizer=self._resolve_optimizer(),
            learning_rate=self._learning_rate(),
            batch_size=min(200, n_samples) if self.batch_size == "auto" else int(self.batch_size),
            max_epochs=self.max_epochs,
            alpha=self.alpha,
            penalized=[self.module_.readout.weight],
            n_iter_no_change=self.n_iter_no_change,
            improvement_tol=self.improvement_tol,
            rng=shuffle_rng,
            verbose=int(self.verbose),
            epoch_offset=len(self.history_),
            chunk_size=self._chunk_rows(),
            loss=self._loss,
        )

    def _train(self, train_set: _Data, valid_set: _Data | None, shuffle_rng, device):
        """Train on ``device``: the readout alone on cached features, or the whole network."""
        options = self._train_options(len(train_set), shuffle_rng)
        if self._features_trainable():
            return self._train_end_to_end(train_set, valid_set, options, device)
        return self._train_readout(train_set, valid_set, options, device, closed_form=self._closed_form())

    def _train_readout(
        self, train_set: _Data, valid_set: _Data | None, options: dict, device, closed_form: bool = False
    ):
        """Frozen features: compute them once (no graph), then fit the readout on them.

        With ``closed_form`` the readout is the least-squares solution
        (:meth:`_fit_ridge`), else it is trained by ``options``' optimizer.

        The inputs go to the device one chunk at a time and the features stay
        in the network's dtype; :class:`~sk_deq.nn.readout.LinearReadout` upcasts each chunk
        or minibatch the training loop evaluates.
        """
        t0 = time.perf_counter()
        self._check_features_fit(len(train_set) + (0 if valid_set is None else len(valid_set)), device)
        Ft, self.solver_info_ = self._compute_features(train_set.X, device, "fit", "features (train)")
        Fv = None if valid_set is None else self._compute_features(valid_set.X, device, "fit", "features (valid)")[0]
        if self.verbose:
            print(
                f"{type(self).__name__}: features of {len(train_set)} samples computed in "
                f"{time.perf_counter() - t0:.2f}s"
            )
        self.module_.readout.train()
        if closed_form:
            return self._fit_ridge(Ft, train_set, options, device)
        return train(
            LinearReadout(self.module_.readout),
            Ft,
            self._targets(train_set, device),
            sample_weight=train_set.weight,
            X_val=Fv,
            y_val=None if valid_set is None else self._targets(valid_set, device),
            val_weight=None if valid_set is None else valid_set.weight,
            **options,
        )

    def _train_end_to_end(self, train_set: _Data, valid_set: _Data | None, options: dict, device):
        """Trained hidden weights: gradients through the network (implicit ones through a DEQ)."""
        diagnostics: list = []
        self.module_.train()
        result = train(
            self.module_,
            self._to_tensor(train_set.X, device, "fit"),
            self._targets(train_set, device),
            sample_weight=train_set.weight,
            X_val=None if valid_set is None else self._to_tensor(valid_set.X, device, "fit"),
            y_val=None if valid_set is None else self._targets(valid_set, device),
            val_weight=None if valid_set is None else valid_set.weight,
            after_step=self._after_step_hook(diagnostics),
            **options,
        )
        self.solver_info_ = self._check_diagnostics(diagnostics, "fit")
        return result

    def _fit_ridge(self, Z, train_set: _Data, options: dict, device) -> TrainResult:
        """The closed-form least-squares readout (:func:`~sk_deq.nn.readout.ridge_readout`), as one 'epoch'."""
        t0 = time.perf_counter()
        weight = _normalised_weights(train_set.weight, len(train_set), device)
        objective = ReadoutObjective(
            Z,
            self._targets(train_set, device),
            self._n_outputs(),
            self.alpha,
            weight,
            options["chunk_size"],
            loss=self._loss,
        )
        W, b, loss = ridge_readout(objective)
        with torch.no_grad():
            self.module_.readout.weight.copy_(W.T)
            self.module_.readout.bias.copy_(b)
        rec = {
            "epoch": options["epoch_offset"] + 1,
            "train_loss": loss,
            "valid_loss": None,
            "valid_score": None,
            "best": True,
            "dur": time.perf_counter() - t0,
        }
        if self.verbose:
            print(f"{type(self).__name__}: least-squares readout, loss {loss:.6g} ({rec['dur']:.2f}s)")
        return TrainResult(
            history=[rec], n_epochs=1, converged=True, best_loss=loss, message="closed-form least squares"
        )

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
        optimizer = "closed-form" if self._closed_form() else self._resolve_optimizer()
        if self.verbose:
            print(f"{name}: {result.n_epochs} epochs ({optimizer}) in {seconds:.2f}s; {result.message}")
        if not result.converged:
            unit = "iterations" if optimizer == "lbfgs" else "epochs"
            warnings.warn(
                f"{name}: the {optimizer} optimizer stopped after max_epochs={self.max_epochs} {unit} without "
                "meeting its stopping criterion; increase max_epochs.",
                ConvergenceWarning,
                stacklevel=4,
            )

    def _sync_runtime_settings(self) -> None:
        """Copy parameters that may change after fit (solver settings) into the module."""

    # ------------------------------------------------------------ partial_fit
    def _partial_fit(self, X, y, sample_weight, **options):
        """What ``partial_fit`` does once its public signature is bound (``options``: the task's own)."""
        first = not hasattr(self, "module_")
        data, targets, sample_weight = self._validate_chunk(X, y, sample_weight, first, **options)
        device = self._device()
        if first:
            seeds = self._draw_seeds()
            self._initialize(data.X, targets, sample_weight, seeds[0], device, warm=False)
            self._stream = Stream(np.random.RandomState(seeds[2]))
        else:
            self._initialize(data.X, targets, sample_weight, None, device, warm=True)
            self._continue_targets(targets)
        t_start = time.perf_counter()
        result = self._train_chunk(data.positive(), device)
        self._record_chunk(result, time.perf_counter() - t_start)
        return self

    def _chunk_optimizer(self, device) -> torch.optim.Optimizer:
        """The stream's optimizer, new (or restored from a pickle) when its kind, dtype or device changed."""
        if getattr(self, "_stream", None) is None:  # partial_fit after fit
            self._stream = Stream(np.random.RandomState(self._draw_seeds()[2]))
        stream = self._stream
        config = (self._resolve_optimizer(partial=True), self.dtype, str(device))
        if stream.optimizer is None or stream.config != config:
            saved = stream.saved if stream.optimizer is None else stream.optimizer.state_dict()
            params = [p for p in self.module_.parameters() if p.requires_grad]
            optimizer = _make_optimizer(config[0], params, self._learning_rate())
            if saved is not None and stream.config is not None and stream.config[0] == config[0]:
                optimizer.load_state_dict(numpy_to_tensors(saved))  # casts to the parameters' dtype and device
            stream.config, stream.optimizer, stream.saved = config, optimizer, None
        for group in stream.optimizer.param_groups:
            group["lr"] = self._learning_rate()
        return stream.optimizer

    def _train_chunk(self, data: _Data, device):
        """One epoch of the stream's optimizer over ``data``: the readout alone, or the whole network."""
        optimizer = self._chunk_optimizer(device)
        options = self._train_options(len(data), self._stream.rng)
        options.update(optimizer=self._stream.config[0], max_epochs=1, torch_optimizer=optimizer)
        if self._features_trainable():
            return self._train_end_to_end(data, None, options, device)
        return self._train_readout(data, None, options, device)

    def _record_chunk(self, result, seconds: float) -> None:
        """Extend the history by the chunk's epoch (no convergence warning: one epoch is the point)."""
        self.module_.eval()
        self.history_.extend(result.history)
        self.n_iter_ = len(self.history_)
        self.best_loss_ = min(getattr(self, "best_loss_", math.inf), result.best_loss)
        self.best_validation_score_ = self.best_validation_loss_ = None
        self.fit_time_ = seconds
        if self.verbose:
            print(
                f"{type(self).__name__}: partial_fit epoch {self.n_iter_} ({self._stream.config[0]}) in {seconds:.2f}s"
            )

    # ---------------------------------------------------------------- predict
    def _device(self) -> torch.device:
        """The torch device ``device`` names now (:func:`sk_deq.resolve_device`; None: the CPU).

        ``fit``, ``partial_fit`` and ``predict`` resolve it alike, at every
        call: an unsupported or missing device is the same ``ValueError``
        everywhere, a fitted (or unpickled) model included.
        """
        dev = resolve_device(self.device)
        return torch.device("cpu") if dev is None else dev

    def _predict_device(self) -> torch.device:
        dev = self._device()
        self.module_.to(dev)
        return dev

    def _outputs(self, X) -> np.ndarray:
        """The readout's outputs on ``X`` (float64, one column per output)."""
        check_is_fitted(self, "module_")
        X = validate_data(self, X, reset=False, accept_sparse=False, dtype=[np.float64, np.float32])
        X = np.asarray(X, dtype=np.float64)
        dev = self._predict_device()
        self._sync_runtime_settings()
        self.module_.eval()
        Z, _ = self._compute_features(X, dev, "predict")
        readout = self.module_.readout
        logits = torch.empty(Z.shape[0], readout.out_features, dtype=torch.float64, device=dev)
        with torch.no_grad():  # the readout is float64 (see _Model); in the features' blocks
            map_row_blocks(lambda zb, rows: readout(zb.to(torch.float64)), Z, self._block_rows(), logits)
        out = logits.to("cpu").numpy()
        if not np.all(np.isfinite(out)):
            raise ValueError(f"{type(self).__name__} produced non-finite outputs; check the inputs' scale.")
        return out

    def features(self, X):
        """Hidden features the readout sees (``z*`` of a DEQ, ``y_L`` of an explicit net).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Raw inputs (the fitted input scaling is applied).

        Returns
        -------
        ndarray of shape (n_samples, n_hidden)
            The features, in float64.
        """
        check_is_fitted(self, "module_")
        X = validate_data(self, X, reset=False, accept_sparse=False, dtype=[np.float64, np.float32])
        dev = self._predict_device()
        self._sync_runtime_settings()
        Z, _ = self._compute_features(np.asarray(X, dtype=np.float64), dev, "predict")
        return Z.detach().to("cpu", torch.float64).numpy()

    # ----------------------------------------------------------------- tags
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        return tags

    # -------------------------------------------------------------- pickling
    def __getstate__(self):
        state = super().__getstate__()
        state = dict(state)
        stream = state.pop("_stream", None)
        if stream is not None:
            state["_stream"] = picklable(stream)
        module = state.pop("module_", None)
        if module is not None:
            # Plain numpy arrays: the pickle holds no torch storage, so a model
            # fitted on a GPU loads on a CPU-only machine.
            state["_module_state"] = {k: v.detach().to("cpu").numpy().copy() for k, v in module.state_dict().items()}
        return state

    def __setstate__(self, state):
        state = dict(state)
        module_state = state.pop("_module_state", None)
        super().__setstate__(state)
        if module_state is not None:
            dtype = _DTYPES.get(self.dtype, torch.float32)
            generator = torch.Generator().manual_seed(0)  # placeholder weights, overwritten below
            module = self._build_module(self.n_features_in_, self._n_outputs(), generator, dtype, torch.device("cpu"))
            module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in module_state.items()})
            module.eval()
            self.module_ = module


class TorchClassifierBase(ClassifierMixin, TorchEstimatorBase):
    """Base class of the torch classifiers (not meant to be used directly).

    Labels are encoded as ``0 .. n_classes-1`` (``classes_``), the loss is
    the cross-entropy (``readout='logistic'``) or least squares on ``-1 / 1``
    one-hot targets (``readout='ridge'``), and ``class_weight`` multiplies
    the sample weights.
    """

    _parameter_constraints: ClassVar[dict] = {
        **TorchEstimatorBase._parameter_constraints,
        "readout": [SortedStrOptions(set(READOUTS))],
        "class_weight": [dict, SortedStrOptions({"balanced"}), None],
    }

    _loss: ClassVar[str] = "cross_entropy"

    def _closed_form(self) -> bool:
        return self.readout == "ridge"

    def _fit_targets(self, targets, sample_weight) -> None:
        self.classes_ = targets

    def _stratify(self, data: _Data):
        return data.y

    def _check_split(self, train_set: _Data) -> None:
        positive = train_set.y if train_set.weight is None else train_set.y[train_set.weight > 0]
        if len(np.unique(positive)) < 2:
            raise ValueError(
                f"After the validation split the training set holds only 1 class; {type(self).__name__} needs "
                "more samples per class, or early_stopping=False."
            )

    def _check_options(self) -> None:
        """``readout='ridge'`` is a closed-form fit on frozen features: no early stopping, no hidden training."""
        if self.readout != "ridge":
            return
        name = type(self).__name__
        if self.trainable != "readout":
            raise ValueError(
                f"{name}: readout='ridge' solves for the readout in closed form on frozen features; it needs "
                f"trainable='readout' (got trainable={self.trainable!r}). Use readout='logistic' to train the "
                "hidden weights."
            )
        if self.early_stopping:
            raise ValueError(
                f"{name}: readout='ridge' is a closed-form fit with no iterations to stop early; set "
                "early_stopping=False."
            )

    def _validate_training_data(self, X, y, sample_weight, warm):
        """Validate ``X``, ``y`` and the weights; encode the labels.

        Returns the training :class:`_Data` (weights: ``sample_weight`` times
        ``class_weight``, None when all equal), the sorted classes and the
        validated ``sample_weight`` (None when not given), which the input
        scaling uses.
        """
        X, y = validate_data(
            self,
            X,
            y,
            reset=not warm,
            accept_sparse=False,
            dtype=[np.float64, np.float32],
            ensure_min_samples=2,
        )
        X = np.asarray(X, dtype=np.float64)
        classes = _sorted_labels(y, "y")
        name = type(self).__name__
        sample_weight = self._positive_weights(sample_weight, X, name)
        weighted = classes if sample_weight is None else np.unique(y[sample_weight > 0])
        if len(weighted) < 2:
            what = "" if sample_weight is None else " with positive sample_weight"
            raise ValueError(
                f"{name} needs samples of at least 2 classes{what} to train; got 1 class ({weighted[0]!r})."
            )
        if warm:
            self._check_same_network("warm_start", "Set warm_start=False to build a new network.")
            if not np.array_equal(classes, self.classes_):
                raise ValueError(
                    "warm_start can only be used where `y` has the same classes as in the previous call "
                    f"to fit. Previously got {self.classes_}, `y` has {classes}."
                )
        y_enc = np.searchsorted(classes, y)
        weight = sample_weight
        if self.class_weight is not None:
            per_class = compute_class_weight(self.class_weight, classes=classes, y=y, sample_weight=sample_weight)
            per_class = _unit_max(per_class)  # both factors below 2: their product cannot overflow
            weight = per_class[y_enc] if weight is None else weight * per_class[y_enc]
            kept = classes[np.unique(y_enc[weight > 0])]
            if len(kept) < 2:
                raise ValueError(
                    f"{name} needs samples of at least 2 classes with positive weight (sample_weight x "
                    f"class_weight) to train; got {len(kept)} ({kept.tolist()}): check class_weight."
                )
        return _Data(X, y_enc, weight), classes, sample_weight

    def _targets(self, data: _Data, device) -> torch.Tensor:
        return torch.from_numpy(np.asarray(data.y, dtype=np.int64)).to(device)

    def _n_outputs(self) -> int:
        return 1 if len(self.classes_) == 2 else len(self.classes_)

    @available_if(partial_fit_available)
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """Train on one chunk of data: one epoch of Adam or SGD over its rows.

        The first call (on an unfitted classifier) fits the input scaling
        and ``tau0_`` on its chunk and builds the network as :meth:`fit`
        does; later calls keep them and continue training, and so does a
        call after :meth:`fit` (a new ``fit`` starts afresh).  The optimizer
        (``'auto'`` is Adam here; ``'lbfgs'`` has no ``partial_fit``) keeps
        its state from call to call, so successive chunks act like the
        minibatches of one long training run.  The readout is trained on
        the chunk's features; with ``trainable='hidden'`` or ``'all'`` the
        hidden weights train too, through the network (implicit gradients
        through a DEQ).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            One chunk of training data (dense).
        y : array-like of shape (n_samples,)
            Its labels, all among the classes of the first call; a chunk
            may hold a single class.
        classes : array-like of shape (n_classes,), default=None
            Every label the stream will hold (e.g. ``np.unique(y_all)``),
            at least two.  Required on the first call; later calls may
            omit it or pass the same labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of every sample in the loss (times
            ``class_weight``), and in the input scaling on the first call.
            Rows of zero weight are dropped from the chunk, exactly as if
            absent.

        Returns
        -------
        object
            The classifier (``self``).

        Raises
        ------
        ValueError
            When ``classes`` is missing on the first call or differs from
            ``classes_``, ``y`` holds a label not in ``classes_``, the
            number of features changes, no sample has a positive weight, or
            ``class_weight='balanced'``.

        Notes
        -----
        ``class_weight='balanced'`` needs the class frequencies of the whole
        stream, which no chunk has: compute them with
        :func:`sklearn.utils.class_weight.compute_class_weight` on a
        representative sample of the labels and pass the dict.
        ``early_stopping``, ``max_epochs``, ``n_iter_no_change``,
        ``improvement_tol`` and ``warm_start`` do not apply: every call is one
        epoch over its chunk.  ``history_`` gains one entry per call (the
        chunk's mean training loss) and ``n_iter_`` counts them.  A pickled
        classifier keeps the optimizer's state and the minibatch order's
        random state: after loading, ``partial_fit`` continues as the
        original would.

        The readout starts from zero and Adam moves each weight by about
        the step size per step: ``learning_rate='auto'`` is 0.1 for the
        readout alone.  On shuffled digits streamed as below (width 1024,
        1,500 rows) 1e-3, MLPClassifier's, reached 92-93%; 0.1 reached 97.2-
        97.6% on average over five shuffles (95.3-99.0% each, within 1.3
        points of ``fit``), and SGDClassifier 94.1% (see
        :ref:`incremental-learning`).

        Examples
        --------
        Five passes over a stream of 250-sample chunks:

        >>> import numpy as np
        >>> from sklearn.datasets import load_digits
        >>> from sk_deq import DEQClassifier
        >>> X, y = load_digits(return_X_y=True)
        >>> clf = DEQClassifier(n_hidden=256, random_state=0)
        >>> for epoch in range(5):
        ...     for start in range(0, 1500, 250):
        ...         rows = slice(start, start + 250)
        ...         _ = clf.partial_fit(X[rows], y[rows], classes=np.arange(10))
        >>> clf.n_iter_
        30
        >>> clf.score(X[1500:], y[1500:]) > 0.85
        True
        """
        return self._partial_fit(X, y, sample_weight, classes=classes)

    def _chunk_classes(self, classes, first: bool) -> np.ndarray:
        """The sorted classes of the stream: ``classes`` on the first call, ``classes_`` afterwards."""
        if classes is None:
            if first:
                raise ValueError(
                    f"classes must be passed on the first call to partial_fit: every label the stream will hold "
                    f"(e.g. np.unique(y_all)), since a chunk may lack some; {type(self).__name__} is not fitted yet."
                )
            return self.classes_
        classes = _sorted_labels(np.asarray(classes), "classes")
        if not first and not np.array_equal(classes, self.classes_):
            raise ValueError(
                f"classes={classes.tolist()} differs from the classes_ of the previous calls, "
                f"{self.classes_.tolist()}: partial_fit keeps the classes of its first call (or of fit)."
            )
        if len(classes) < 2:
            raise ValueError(f"classes must hold at least 2 labels; got {classes.tolist()}.")
        return classes

    def _validate_chunk(self, X, y, sample_weight, first: bool, classes=None):
        """partial_fit's counterpart of :meth:`_validate_training_data` (a chunk may hold one class)."""
        name = type(self).__name__
        if isinstance(self.class_weight, str) and self.class_weight == "balanced":
            raise ValueError(
                "class_weight='balanced' is not supported by partial_fit: a chunk does not know the class "
                "frequencies of the stream. Compute the weights with compute_class_weight('balanced', "
                "classes=classes, y=y_sample) on a representative sample of the labels and pass the resulting "
                "dict as class_weight."
            )
        classes = self._chunk_classes(classes, first)
        X, y = validate_data(self, X, y, reset=first, accept_sparse=False, dtype=[np.float64, np.float32])
        X = np.asarray(X, dtype=np.float64)
        unknown = set(_sorted_labels(y, "y").tolist()) - set(classes.tolist())
        if unknown:
            raise ValueError(
                f"y holds labels {sorted(unknown, key=str)} that are not among the classes {classes.tolist()} "
                f"{name} was started with; pass every label of the stream as classes on the first call."
            )
        if not first:
            self._check_same_network("partial_fit", "Call fit to build a new network.")
        sample_weight = self._positive_weights(sample_weight, X, name)
        y_enc = np.searchsorted(classes, y)
        weight = sample_weight
        if self.class_weight is not None:
            per_class = _unit_max(compute_class_weight(self.class_weight, classes=classes, y=y))
            weight = per_class[y_enc] if weight is None else weight * per_class[y_enc]
        if weight is not None and not np.any(weight > 0):
            raise ValueError(f"{name}: no sample of this chunk has a positive weight (sample_weight x class_weight).")
        return _Data(X, y_enc, weight), classes, sample_weight

    # ---------------------------------------------------------------- predict
    def decision_function(self, X):
        """Logits of the readout.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Raw inputs (the fitted input scaling is applied).

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_classes)
            For two classes, the logit of ``classes_[1]`` (positive means
            ``classes_[1]``); otherwise one column per class.
        """
        out = self._outputs(X)
        return out[:, 0] if out.shape[1] == 1 else out

    @available_if(_has_probabilities)
    def predict_proba(self, X):
        """Class probabilities (softmax of the logits; never NaN).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Raw inputs (the fitted input scaling is applied).

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Probability of every class, columns in the order of ``classes_``.
        """
        out = self._outputs(X)
        if out.shape[1] == 1:
            p1 = special.expit(out[:, 0])
            return np.column_stack([1.0 - p1, p1])
        return special.softmax(out, axis=1)

    @available_if(_has_probabilities)
    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba` (``-inf`` where a probability underflows to 0).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Raw inputs (the fitted input scaling is applied).

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Log-probability of every class, columns in the order of
            ``classes_``.
        """
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X):
        """Predicted class labels.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Raw inputs (the fitted input scaling is applied).

        Returns
        -------
        ndarray of shape (n_samples,)
            The class of largest logit, from ``classes_``.
        """
        out = self._outputs(X)
        idx = (out[:, 0] > 0).astype(int) if out.shape[1] == 1 else out.argmax(axis=1)
        return self.classes_[idx]

    def score(self, X, y, sample_weight=None):
        """Mean accuracy of :meth:`predict` on ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Raw inputs (the fitted input scaling is applied).
        y : array-like of shape (n_samples,)
            True labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of every sample (rescaled by a power of two first, so that
            weights up to the largest float64 do not overflow their sum).

        Returns
        -------
        float
            The (weighted) fraction of correctly classified samples.
        """
        if sample_weight is not None:
            sample_weight = _unit_max(_check_sample_weight(sample_weight, X, dtype=np.float64))
        return super().score(X, y, sample_weight=sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        return tags


class TorchRegressorBase(RegressorMixin, TorchEstimatorBase):
    """Base class of the torch regressors (not meant to be used directly).

    Targets are real, one column per output (``n_outputs_``), and the loss
    is half the squared error summed over the outputs.  Every column is
    standardised with its (weighted) training mean and standard deviation
    (``target_mean_``, ``target_scale_``) before training, and the outputs
    are mapped back.  For the readout this is the same minimiser as on the
    raw targets (the problem separates by column, and rescaling a column
    rescales its loss and its penalty alike); it makes the optimizers' step
    sizes and tolerances independent of the targets' units.
    """

    _loss: ClassVar[str] = "squared"
    # targets in units of their standard deviation: 0.1 overshoots, 0.005 is slow (see _learning_rate)
    _READOUT_LEARNING_RATE: ClassVar[float] = 0.01

    def _closed_form(self) -> bool:
        # the readout alone (frozen features), and no iterations asked for
        return self.optimizer == "auto" and not self.early_stopping and not self._features_trainable()

    def _validate_training_data(self, X, y, sample_weight, warm):
        """Validate ``X``, ``y`` (real, one or more columns) and the weights."""
        if warm:
            self._check_same_network("warm_start", "Set warm_start=False to build a new network.")
        return self._validate_targets(X, y, sample_weight, reset=not warm, min_samples=2)

    def _validate_chunk(self, X, y, sample_weight, first: bool, **options):
        """partial_fit's counterpart of :meth:`_validate_training_data` (a chunk may hold one sample)."""
        if not first:
            self._check_same_network("partial_fit", "Call fit to build a new network.")
        return self._validate_targets(X, y, sample_weight, reset=first, min_samples=1)

    def _validate_targets(self, X, y, sample_weight, *, reset: bool, min_samples: int):
        X, y = validate_data(
            self,
            X,
            y,
            reset=reset,
            accept_sparse=False,
            dtype=[np.float64, np.float32],
            ensure_min_samples=min_samples,
            multi_output=True,
            y_numeric=True,
        )
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        Y = y.reshape(len(y), -1)
        name = type(self).__name__
        if Y.shape[1] == 0:
            raise ValueError(f"{name}: y has no columns; it needs at least one output.")
        sample_weight = self._checked_weights(sample_weight, X, name)
        moments = Moments.of(Y, sample_weight)  # the weights on their own scale: chunks merge by it
        sample_weight = None if sample_weight is None else _unit_max(sample_weight)
        if not reset and Y.shape[1] != self.n_outputs_:
            raise ValueError(
                f"y has {Y.shape[1]} output(s) but {name} was fitted with {self.n_outputs_}; "
                "the readout keeps its outputs (set warm_start=False, or call fit to start afresh)."
            )
        return _Data(X, Y, sample_weight), (Y, y.ndim == 1, moments), sample_weight

    def _fit_targets(self, targets, sample_weight) -> None:
        Y, one_column, moments = targets
        self.n_outputs_ = int(Y.shape[1])
        self._y_1d = bool(one_column)
        self._target_moments = moments
        self.target_mean_ = self._target_moments.mean
        self.target_scale_ = self._target_moments.scale()

    def _continue_targets(self, targets) -> None:
        """Merge a chunk's targets into the running standardisation; rescale the readout to keep its predictions.

        The readout's outputs ``o`` predict ``o * target_scale_ +
        target_mean_``: with new moments ``(m', s')`` the readout becomes
        ``W s / s'`` and ``(b s + m - m') / s'``, which predicts the same.
        """
        moments = getattr(self, "_target_moments", None)
        if moments is None:  # pickled before the moments were kept: the scaling stays as it is
            return
        self._target_moments = moments.merge(targets[2])
        mean, scale = self._target_moments.mean, self._target_moments.scale()
        ratio = self.target_scale_ / scale
        if np.array_equal(mean, self.target_mean_) and np.all(ratio == 1.0):
            return
        readout = self.module_.readout
        with torch.no_grad():
            factor = torch.as_tensor(ratio, dtype=readout.weight.dtype, device=readout.weight.device)
            shift = torch.as_tensor((self.target_mean_ - mean) / scale, dtype=factor.dtype, device=factor.device)
            readout.weight.mul_(factor[:, None])
            readout.bias.mul_(factor).add_(shift)
        self.target_mean_, self.target_scale_ = mean, scale

    def _n_outputs(self) -> int:
        return self.n_outputs_

    def _targets(self, data: _Data, device) -> torch.Tensor:
        half = 0.5 * data.y - 0.5 * self.target_mean_  # (y - mean) / 2, which cannot overflow
        return torch.from_numpy(half / self.target_scale_ * 2.0).to(device)

    @available_if(partial_fit_available)
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, sample_weight=None):
        """Train on one chunk of data: one epoch of Adam or SGD over its rows.

        The first call (on an unfitted regressor) fits the input scaling
        and ``tau0_`` on its chunk and builds the network as :meth:`fit`
        does; later calls keep them and continue training, and so does a
        call after :meth:`fit` (a new ``fit`` starts afresh).  The target
        standardisation (``target_mean_``, ``target_scale_``) is a running
        one: the weighted mean and standard deviation of every target seen
        so far (by :meth:`fit` and every chunk), updated on each call, with
        the readout rescaled so that its predictions do not change.  The optimizer
        (``'auto'`` is Adam here; ``'lbfgs'`` has no ``partial_fit``) keeps
        its state from call to call.  With ``trainable='hidden'`` or
        ``'all'`` the hidden weights train too.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            One chunk of training data (dense).
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Its targets, with as many outputs as on the first call.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of every sample in the loss, and in the
            input and target scaling on the first call.  Rows of zero weight
            are dropped from the chunk, exactly as if absent.

        Returns
        -------
        object
            The regressor (``self``).

        Raises
        ------
        ValueError
            When the number of features or outputs changes or no sample has
            a positive weight.

        Notes
        -----
        The first chunk fixes the input scaling: make it representative of
        the stream (shuffle the rows first).  The target standardisation
        follows the stream, so a first chunk of constant targets (scale 1
        until the next chunk) does no harm.
        ``early_stopping``, ``max_epochs``, ``n_iter_no_change``,
        ``improvement_tol`` and ``warm_start`` do not apply: every call is
        one epoch over its chunk.
        """
        return self._partial_fit(X, y, sample_weight)

    # ---------------------------------------------------------------- predict
    def predict(self, X):
        """Predicted targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Raw inputs (the fitted input scaling is applied).

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_outputs)
            One column per output, in the shape of the training targets (1-D
            when ``y`` was 1-D).
        """
        with np.errstate(over="ignore"):  # halves first: no overflow short of predictions beyond float64
            out = (self._outputs(X) * (0.5 * self.target_scale_) + 0.5 * self.target_mean_) * 2.0
        if not np.all(np.isfinite(out)):
            raise ValueError(
                f"{type(self).__name__}'s predictions overflow float64: the targets it was fitted on (scale "
                f"{np.max(self.target_scale_):.3g}) are too close to the largest float64 value. Rescale the targets."
            )
        return out[:, 0] if self._y_1d else out

    def score(self, X, y, sample_weight=None):
        """Coefficient of determination R² of the predictions.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Raw inputs (the fitted input scaling is applied).
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            True targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of every sample.

        Returns
        -------
        float
            :func:`sklearn.metrics.r2_score` of :meth:`predict`, averaged
            uniformly over the outputs: 1 for a perfect fit, 0 for the
            constant mean, negative for worse.  Computed on the targets and
            predictions divided by a common power of two (and weights by
            another), so that targets beyond 1e154 (or below 1e-154) and
            weights up to the largest float64 give the same R² as in units.
        """
        from sklearn.metrics import r2_score

        pred = self.predict(X)
        y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
        if sample_weight is not None:  # weights up to the largest float64: their sums stay finite
            sample_weight = _unit_max(_check_sample_weight(sample_weight, y, dtype=np.float64))
        unit = max(float(power_of_two_scale(y)), float(power_of_two_scale(pred)))
        return float(r2_score(y / unit, pred / unit, sample_weight=sample_weight))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags
