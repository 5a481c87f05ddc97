"""The task of the torch classifiers: labels, class weights, the cross-entropy, probabilities."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.utils.multiclass import check_classification_targets, unique_labels
from sklearn.utils.class_weight import compute_class_weight
import torch
from scipy import special
from sklearn.base import ClassifierMixin

from .._dask import lazy_method
from .._validation import is_dask_collection
from .._validation import SortedStrOptions
from ._stream import partial_fit_available
from ._base import TorchEstimatorBase
from .._validation import check_class_weight, is_tensor, validate_samples
from .._scaling import power_of_two_scale, unit_max
from .._scoring import accuracy_of
from .._validation import available_if, checked_weights, fit_context
from ._base import Data

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["READOUTS", "TorchClassifierBase"]

#: How the readout is fitted: cross-entropy by an optimizer, or least squares in closed form.
READOUTS = ("logistic", "ridge")


def _has_probabilities(est) -> bool:
    """Probabilities come from the softmax of a cross-entropy readout; a ridge readout has none."""
    if getattr(est, "readout", "logistic") == "ridge":
        raise AttributeError(
            f"{type(est).__name__} with readout='ridge' has no predict_proba: its least-squares outputs are not "
            "probabilities (as with RidgeClassifier). Use decision_function, or readout='logistic'."
        )
    return True


def _scores_output(est):
    """What ``decision_function`` returns: one column for two classes, else one per class."""
    return (None if len(est.classes_) == 2 else len(est.classes_)), np.float64


def _proba_output(est):
    return len(est.classes_), np.float64


def _labels_output(est):
    return None, est.classes_.dtype


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

    _stratify: ClassVar[bool] = True

    def _optimizer(self, partial: bool = False) -> str:
        return "ridge" if self.readout == "ridge" else super()._optimizer(partial)

    def _check_ridge(self) -> None:
        """``readout='ridge'`` is a closed-form fit on frozen features: no optimizer, early stopping or hidden training."""
        if self.readout != "ridge":
            return
        name = type(self).__name__
        if self.solver != "auto":
            raise ValueError(
                f"{name}: readout='ridge' solves for the readout in closed form, without an optimizer; "
                f"solver={self.solver!r} chooses the optimizer of readout='logistic'. Leave solver='auto', or use "
                "readout='logistic'."
            )
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

    def _validate(self, X, y, sample_weight, *, reset: bool, partial: bool = False, classes=None):  # type: ignore[override]
        """Validate ``X``, ``y`` and the weights; encode the labels.

        Returns the training :class:`~sk_deq.estimators._base.Data` (weights:
        ``sample_weight`` times ``class_weight``, None when all equal), the
        sorted classes and the validated ``sample_weight`` (None when not
        given), which the input scaling uses.  A ``partial_fit`` chunk takes
        its classes from ``classes`` (first call) or ``classes_``, and may
        hold a single class and a single sample.
        """
        name = type(self).__name__
        if partial:
            self._check_chunk_options()
            classes = self._chunk_classes(classes, reset)
        else:
            self._check_ridge()
        X, y = validate_samples(
            self, X, y, reset=reset, accept_sparse=False, dtype=[np.float64, np.float32],
            ensure_min_samples=1 if partial else 2,
        )  # fmt: skip
        X = X if is_tensor(X) else np.asarray(X, dtype=np.float64)
        labels = sorted_labels(y, "y")
        sample_weight = unit_max(checked_weights(sample_weight, X, name))
        if partial:
            self._check_known(labels, classes)
        else:
            classes = self._check_fit_classes(labels, y, sample_weight, reset)
        y_enc = np.searchsorted(classes, y)
        weight = class_weighted(self.class_weight, classes, y, y_enc, sample_weight, name)
        if weight is not None and partial and not np.any(weight > 0):
            raise ValueError(f"{name}: no sample of this chunk has a positive weight (sample_weight x class_weight).")
        kept = classes[np.unique(y_enc if weight is None else y_enc[weight > 0])]
        if not partial and len(kept) < 2:
            raise ValueError(
                f"{name} needs samples of at least 2 classes with positive weight (sample_weight x "
                f"class_weight) to train; got {len(kept)} ({kept.tolist()}): check class_weight."
            )
        return Data(X, y_enc, weight), classes, sample_weight

    def _check_fit_classes(self, classes, y, sample_weight, reset: bool) -> np.ndarray:
        """The classes of a fit: at least two of positive weight, and those of the kept network on a warm start."""
        weighted = classes if sample_weight is None else np.unique(y[sample_weight > 0])
        if len(weighted) < 2:
            what = "" if sample_weight is None else " with positive sample_weight"
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes{what} to train; got 1 class "
                f"({weighted[0]!r})."
            )
        if not reset and not np.array_equal(classes, self.classes_):
            raise ValueError(
                "warm_start can only be used where `y` has the same classes as in the previous call "
                f"to fit. Previously got {self.classes_}, `y` has {classes}."
            )
        return classes

    def _fit_targets(self, targets, first: bool) -> int:
        if first:
            self.classes_ = targets
        return 1 if len(self.classes_) == 2 else len(self.classes_)

    def _targets(self, data: Data, device) -> torch.Tensor:
        return torch.from_numpy(np.asarray(data.y, dtype=np.int64)).to(device)

    @available_if(partial_fit_available)
    @fit_context(prefer_skip_nested_validation=True)
    def partial_fit(
        self,
        X: ArrayLike | torch.Tensor,
        y: ArrayLike,
        classes: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
    ) -> Self:
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
        X : array-like or torch.Tensor of shape (n_samples, n_features)
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
        ``early_stopping``, ``max_iter``, ``n_iter_no_change``,
        ``tol`` and ``warm_start`` do not apply (``early_stopping=True``
        warns): every call is one epoch over its chunk.  ``history_`` gains one entry per call (the
        chunk's mean training loss) and ``n_iter_`` counts them.  A pickled
        classifier keeps the optimizer's state and the minibatch order's
        random state: after loading, ``partial_fit`` continues as the
        original would.

        The readout starts from zero and Adam moves each weight by about
        the step size per step: ``learning_rate_init='auto'`` is 0.1 for the
        readout alone, which on shuffled digits streamed as below comes
        within about a point of ``fit`` where MLPClassifier's 1e-3 falls
        well short (see :ref:`incremental-learning`; the figures are on the
        :ref:`benchmarks page <bench-defaults>`).

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
        classes = sorted_labels(np.asarray(classes), "classes")
        if not first and not np.array_equal(classes, self.classes_):
            raise ValueError(
                f"classes={classes.tolist()} differs from the classes_ of the previous calls, "
                f"{self.classes_.tolist()}: partial_fit keeps the classes of its first call (or of fit)."
            )
        if len(classes) < 2:
            raise ValueError(f"classes must hold at least 2 labels; got {classes.tolist()}.")
        return classes

    def _check_chunk_options(self) -> None:
        if isinstance(self.class_weight, str) and self.class_weight == "balanced":
            raise ValueError(
                "class_weight='balanced' is not supported by partial_fit: a chunk does not know the class "
                "frequencies of the stream. Compute the weights with compute_class_weight('balanced', "
                "classes=classes, y=y_sample) on a representative sample of the labels and pass the resulting "
                "dict as class_weight."
            )

    def _check_known(self, labels, classes) -> None:
        unknown = set(labels.tolist()) - set(classes.tolist())
        if unknown:
            raise ValueError(
                f"y holds labels {sorted(unknown, key=str)} that are not among the classes {classes.tolist()} "
                f"{type(self).__name__} was started with; pass every label of the stream as classes on the first call."
            )

    # ---------------------------------------------------------------- predict
    def decision_function(self, X: ArrayLike | torch.Tensor) -> NDArray[np.float64]:
        """Logits of the readout.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples to score, unscaled as in ``fit``.  A Dask array gives a
            lazy Dask array, row block by row block.

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,) or (n_samples, n_classes)
            For two classes, the logit of ``classes_[1]`` (positive means
            ``classes_[1]``); otherwise one column per class.
        """
        if is_dask_collection(X):
            return lazy_method(X, self.decision_function, _scores_output)
        out = self._outputs(X)
        return out[:, 0] if out.shape[1] == 1 else out

    @available_if(_has_probabilities)
    def predict_proba(self, X: ArrayLike | torch.Tensor) -> NDArray[np.float64]:
        """Class probabilities (softmax of the logits; never NaN).

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples to classify (a Dask array: a lazy Dask array out).

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples, n_classes)
            Probability of every class, columns in the order of ``classes_``.
        """
        if is_dask_collection(X):
            return lazy_method(X, self.predict_proba, _proba_output)
        out = self._outputs(X)
        if out.shape[1] == 1:
            p1 = special.expit(out[:, 0])
            return np.column_stack([1.0 - p1, p1])
        return special.softmax(out, axis=1)

    @available_if(_has_probabilities)
    def predict_log_proba(self, X: ArrayLike | torch.Tensor) -> NDArray[np.float64]:
        """Logarithm of :meth:`predict_proba` (``-inf`` where a probability underflows to 0).

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples to classify, as for :meth:`predict_proba`.

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples, n_classes)
            Log-probability of every class, columns in the order of
            ``classes_``.
        """
        if is_dask_collection(X):
            return lazy_method(X, self.predict_log_proba, _proba_output)
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X: ArrayLike | torch.Tensor) -> np.ndarray:
        """Predicted class labels.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Samples to label (a Dask array: a lazy Dask array out).

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,)
            The class of largest logit, from ``classes_``.
        """
        if is_dask_collection(X):
            return lazy_method(X, self.predict, _labels_output)
        out = self._outputs(X)
        idx = (out[:, 0] > 0).astype(int) if out.shape[1] == 1 else out.argmax(axis=1)
        return self.classes_[idx]

    def score(self, X: ArrayLike | torch.Tensor, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """Mean accuracy of :meth:`predict` on ``(X, y)``.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask.array.Array of shape (n_samples, n_features)
            Raw inputs (the fitted input scaling is applied).  With Dask
            arrays (``X``, ``y`` or the weights) the predictions are compared
            block by block where they are computed; only sums come back.
        y : array-like or dask.array.Array of shape (n_samples,)
            True labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of every sample (rescaled by a power of two first, so that
            weights up to the largest float64 do not overflow their sum).

        Returns
        -------
        float
            The (weighted) fraction of correctly classified samples.
        """
        return accuracy_of(self, X, y, sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        return tags


def sorted_labels(labels: np.ndarray, name: str) -> np.ndarray:
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


def class_weighted(class_weight, classes, y, y_enc, sample_weight, owner: str = "class_weight"):
    """The training weights: ``sample_weight`` times the weight of every sample's class (None: all equal).

    ``class_weight`` as in :func:`sklearn.utils.class_weight.compute_class_weight`
    (``'balanced'`` counts ``sample_weight``; a class whose samples all weigh
    0 gets the weight 0, where scikit-learn divides by zero); both factors are
    below 2, so their product cannot overflow.  A dict's weights are checked
    first (:func:`~sk_deq._validation.check_class_weight`).
    """
    if class_weight is None:
        return sample_weight
    check_class_weight(class_weight, owner)
    _check_class_weight_labels(class_weight, classes)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_class = compute_class_weight(class_weight, classes=classes, y=y, sample_weight=sample_weight)
    per_class = np.where(np.isfinite(per_class), per_class, 0.0)
    per_class = per_class / power_of_two_scale(per_class)  # unit_max's scaling
    return per_class[y_enc] if sample_weight is None else sample_weight * per_class[y_enc]


def _check_class_weight_labels(class_weight, classes) -> None:
    """scikit-learn's rule for a ``class_weight`` dict, with a message naming the labels at fault.

    A dict that names labels ``y`` does not hold while it leaves classes of
    ``y`` out is an error, as in :func:`sklearn.utils.class_weight.compute_class_weight`
    (whose message names the classes left out, not the labels at fault); one
    that weighs every class of ``y`` may name more (a class missing from a
    cross-validation fold, say).
    """
    if not isinstance(class_weight, dict):
        return
    known = set(classes.tolist())
    unknown = [label for label in class_weight if label not in known]
    left_out = [c for c in classes.tolist() if c not in class_weight]
    if unknown and left_out:
        raise ValueError(
            f"class_weight names the label(s) {unknown!r}, which y does not hold (its classes are "
            f"{classes.tolist()!r}), and gives no weight to {left_out!r}: check the labels. A class_weight dict maps "
            "labels of y to weights; labels left out weigh 1, but a dict naming labels that y lacks must weigh "
            "every class of y (as in scikit-learn)."
        )
