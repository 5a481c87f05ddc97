"""Explicit estimators whose kernel matches a DEQ's: :class:`MatchedExplicitClassifier`, :class:`MatchedExplicitRegressor`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from numbers import Real

from sklearn.utils._param_validation import Interval

from .._validation import ActivationName, SortedStrOptions
from ._base import store_params
from ._classifier import TorchClassifierBase
from ._regressor import TorchRegressorBase
from ..activations import get_activation
from ..matching import MatchingError, match_explicit
from ..matching.families import _resolve_family
from ._explicit import ExplicitNetwork

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy as np
    import torch

    from ..activations import Activation

__all__ = ["MatchedExplicitClassifier", "MatchedExplicitRegressor", "MatchedLayers"]


class MatchedLayers(ExplicitNetwork):
    """The component of layers that match the kernel of the DEQ with ``activation`` and ``sigma_a2``."""

    # match_tol only accepts or rejects a match: it does not change the network
    params: ClassVar[tuple] = ("activation", "sigma_a2", "sigma_b2", "kernel", "family")
    constraints: ClassVar[dict] = {
        "activation": [ActivationName(), callable],
        "sigma_a2": [Interval(Real, 0, 1, closed="neither")],
        "sigma_b2": [Interval(Real, 0, math.inf, closed="neither"), None],
        "kernel": [SortedStrOptions({"ck", "ntk"})],
        "family": [str, list, tuple],
        "match_tol": [Interval(Real, 0, math.inf, closed="neither"), None],
    }

    def coefficients(self, est, tau0):
        # cached by match_explicit: a refit with the same configuration does not solve again
        act = get_activation(est.activation)
        try:
            est.match_ = match_explicit(
                act, est.sigma_a2, tau0, est.kernel, est.family, sigma_b2=est.sigma_b2, tol=est.match_tol
            )
        except MatchingError as exc:  # the advice in this estimator's parameters (match_tol, not tol)
            raise MatchingError(
                f"{type(est).__name__}: {exc.problem}",
                "Try family='auto' or another family (a kind repeated for a deeper stack, e.g. "
                "family='leaky_relux3'), the other kernel, or match_tol=None to accept the best fit.",
            ) from None
        return est.match_.explicit

    def layers_ahead(self, est):
        try:  # the fewest layers among the families the match may choose
            return min(len(kinds) for kinds in _resolve_family(est.family, None, get_activation(est.activation)))
        except ValueError:  # the match will raise it
            return 1

    def describe_layers(self, est):
        return f"the match of activation={est.activation!r}, sigma_a2={est.sigma_a2!r} is one {est.match_.family} layer"


class MatchedExplicitClassifier(TorchClassifierBase):
    """Shallow explicit network whose kernel matches a DEQ's, with a linear readout.

    At fit the data scale ``tau0_`` of the (scaled) training inputs is
    measured, :func:`sk_deq.match_explicit` finds the explicit activations
    whose conjugate kernel (``kernel='ck'``) or neural tangent kernel
    (``'ntk'``) equals that of the DEQ with ``activation`` and ``sigma_a2``
    (see :ref:`theory-matching`), and the network of :ref:`theory-explicit`
    is built from them.  With a ReLU DEQ this is two leaky-ReLU layers; with
    tanh one hard-tanh layer.

    Parameters
    ----------
    activation : str, Activation or callable, default='relu'
        The DEQ's activation.
    sigma_a2 : float, default=0.2
        The DEQ's recurrent weight variance, in ``(0, 1)``.
    sigma_b2 : float or None, default=None
        The DEQ's input weight variance; ``None`` is ``1 - sigma_a2``.  Below
        1e-4 it warns (see :ref:`input-scaling`).
    kernel : {'ck', 'ntk'}, default='ck'
        Which kernel to match.  The NTK match is with respect to the readout
        and ``W_2 .. W_L``; it is the relevant one with ``trainable='hidden'``.
    family : str or tuple of str, default='auto'
        Explicit family (see :data:`sk_deq.matching.FAMILIES`); ``'auto'``
        picks Ling et al.'s (2024) choice.
    match_tol : float or None, default=0.05
        Largest relative residual of the matching equations accepted; a worse
        fit is an error (:class:`sk_deq.MatchingError`).  ``None`` accepts the
        best fit.
    n_hidden : int, default=1024
        Width ``m`` of every layer.
    trainable : {'readout', 'hidden', 'all'}, default='readout'
        ``'readout'`` freezes every weight matrix (features are computed once);
        ``'hidden'`` trains ``W_2 .. W_L`` (the input layer stays frozen, the
        counterpart of a DEQ with frozen ``B``; an error for a one-layer
        network, which has no such weights); ``'all'`` trains every layer.
    input_scaling : {'global', 'none'}, default='global'
        ``'global'`` centres every feature with its training mean and divides
        by one factor so that the mean squared norm of the training samples is
        1 (``tau0_ = 1``, Ling et al.'s (2024) protocol, see :ref:`input-scaling`);
        ``'none'`` uses the inputs as given and measures ``tau0_``.
    readout : {'logistic', 'ridge'}, default='logistic'
        How the readout is fitted.  ``'logistic'``: the cross-entropy (plus
        ``alpha``), trained by ``solver``.  ``'ridge'``: least squares on
        ``-1 / 1`` one-hot targets (plus ``alpha``), solved in closed form on
        the cached features (one Gram matrix and one Cholesky solve, as
        :class:`~sklearn.linear_model.RidgeClassifier`); it needs
        ``trainable='readout'``, ``early_stopping=False`` and
        ``solver='auto'``, and there is no ``predict_proba`` or
        ``partial_fit``.  Its speed and accuracy
        against L-BFGS: see :ref:`readout-speed`.
    solver : {'auto', 'lbfgs', 'adam', 'sgd'}, default='auto'
        ``'auto'`` is full-batch L-BFGS when only the readout is trained (a
        convex problem on cached features) and Adam otherwise, and Adam in
        ``partial_fit`` (which ``'lbfgs'`` does not have).
    learning_rate_init : float or 'auto', default='auto'
        Step size of Adam and SGD.  ``'auto'`` is 0.1 for a readout trained
        alone (``partial_fit``, or ``solver='adam'``; it starts from zero
        and Adam moves each weight by about the step size per step) and
        1e-3 (MLPClassifier's) when hidden weights train.  On streams of
        shuffled digits the readout's 0.1 comes close to L-BFGS where 1e-3
        falls well short (see :ref:`incremental-learning`; the figures are
        on the :ref:`benchmarks page <bench-defaults>`).
    alpha : float, default=1e-5
        L2 penalty ``alpha/2 ||W||^2`` on the readout weights, added to the
        mean cross-entropy (so ``alpha = 1 / (C n_samples)`` in the terms of
        :class:`~sklearn.linear_model.LogisticRegression`).  The hidden
        weights (``A`` and ``B`` of a DEQ, ``W_l`` of an explicit network) are
        not penalised: their scale is what the theory fixes.  The default
        was chosen on validation splits of the digits and MNIST data, against
        1e-6, 1e-4 and 1e-3.
    class_weight : dict, 'balanced' or None, default=None
        Weights of the classes in the loss, as in
        :class:`~sklearn.linear_model.LogisticRegression`: ``{label:
        weight}`` (missing labels weigh 1), or ``'balanced'`` for weights
        ``n_samples / (n_classes * np.bincount(y))`` (with ``sample_weight``
        counted).  They multiply ``sample_weight`` in the loss; the input
        scaling uses ``sample_weight`` alone.
    batch_size : int or 'auto', default='auto'
        Minibatch size of Adam and SGD, ``min(200, n_samples)`` for ``'auto'``.
    max_iter : int, default=200
        Epochs of Adam / SGD, iterations of L-BFGS (as in
        :class:`~sklearn.neural_network.MLPClassifier`).
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the training data (stratified),
        stop when its loss (the weighted cross-entropy) stops improving and
        keep the parameters of its best epoch.  The loss rather than the
        accuracy: a small validation set's accuracy plateaus in steps of one
        sample long before the readout has converged.  ``partial_fit``
        ignores it, with a warning (MLPClassifier's raises).
    validation_fraction : float, default=0.1
        Size of the validation split.
    n_iter_no_change : int, default=10
        Patience (epochs) of the stopping rule.
    tol : float, default=1e-4
        Smallest decrease of the monitored loss (validation loss with early
        stopping, training loss without) counted as an improvement; also the
        gradient tolerance of L-BFGS.
    warm_start : bool, default=False
        Continue from the fitted network (same weights, input scaling and
        classes) instead of starting afresh.  Changing a parameter that
        defines the network (``n_hidden``, ``activation``, ``sigma_a2``,
        ``layers``, ``kernel``, ``family``, ``input_scaling``,
        ``trainable``) before such a fit, or before ``partial_fit``, is an
        error; the fixed-point settings, ``dtype`` and training parameters may
        change.
    dtype : {'float32', 'float64'}, default='float32'
        Precision of the network.  Either way a sample's outputs do not
        depend on the batch it comes in: batches go through the network in
        multiples of 16 rows (padded), so matrix products compute every row
        the same way, and the readout is float64.  In training, L-BFGS
        evaluates its loss on the cached features with float64 parameters
        and accumulation; the two matrix products per evaluation run in
        float64 below 2**20 feature entries (then weighted and repeated
        samples give the same fit) and in the features' dtype above, where
        they are bound by memory traffic (see :mod:`sk_deq.nn.readout`).
        On the CPU a sample's outputs do not depend on its batch, bitwise,
        in either dtype (see :ref:`batch-invariance`); on a GPU, whose
        libraries may choose kernels by more than the shape, they may differ
        in the last bits.
    device : None, str or torch.device, default='auto'
        ``'auto'`` uses CUDA when available, else the CPU; ``None`` and
        ``'cpu'`` the CPU; ``'cuda'`` or ``'cuda:N'`` that GPU.  The same
        values as every ``device`` of sk_deq (:func:`sk_deq.resolve_device`):
        anything else (``'mps'``: no float64), or a GPU this machine lacks,
        is a ``ValueError`` at ``fit`` and equally at ``predict``, also after
        ``set_params`` or unpickling (see :ref:`devices`).
    random_state : int, RandomState instance or None, default=None
        Seeds the weights, the validation split and the minibatch order.
    verbose : int, default=0
        ``1`` prints one line per epoch and progress bars for long feature
        computations; ``2`` also a progress bar per epoch.

    Attributes
    ----------
    match_ : MatchResult
        The matching result (family, parameters, residuals of M1-M4).
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    n_features_in_ : int
        Number of input features.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Input feature names, when ``X`` has string column names.
    input_mean_, input_scale_, tau0_
        Input scaling and the data scale of the scaled training inputs.
    layers_ : tuple of Activation
        The activations, first layer first.
    centers_ : tuple of float
        Centring constant of every layer at its input scale.
    explicit_coefficients_ : ExplicitCoefficients
        The network's kernel recursion at ``tau0_``
        (:func:`sk_deq.explicit_coefficients`): the input scale ``taus`` and
        centring constant ``centers`` of every layer, and the CK and NTK
        coefficients after the last one.
    module_ : torch.nn.Module
        The network: ``module_.features`` (a :class:`sk_deq.nn.ExplicitNet`)
        and ``module_.readout`` (a linear layer).
    fixed_point_info_ : None
        Present for symmetry with :class:`DEQClassifier`.
    history_, n_iter_, best_loss_, best_validation_score_, best_validation_loss_, fit_time_, device_
        As in :class:`DEQClassifier`.

    See Also
    --------
    DEQClassifier : The deep equilibrium classifier this network imitates.
    ExplicitClassifier : An explicit network with chosen (e.g. plain) activations.
    sk_deq.match_explicit : The matching solver.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sk_deq import MatchedExplicitClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = MatchedExplicitClassifier("relu", 0.2, n_hidden=256, random_state=0)
    >>> clf.fit(X[:1200], y[:1200]).match_.family
    'leaky_relu'
    >>> clf.score(X[1200:], y[1200:]) > 0.85
    True
    """

    _network = MatchedLayers()

    def __init__(
        self,
        activation: str | Activation | Callable[..., Any] = "relu",
        sigma_a2: float = 0.2,
        *,
        sigma_b2: float | None = None,
        kernel: Literal["ck", "ntk"] = "ck",
        family: str | Sequence[str] = "auto",
        match_tol: float | None = 0.05,
        n_hidden: int = 1024,
        trainable: Literal["readout", "hidden", "all"] = "readout",
        input_scaling: Literal["global", "none"] = "global",
        readout: Literal["logistic", "ridge"] = "logistic",
        solver: Literal["auto", "lbfgs", "adam", "sgd"] = "auto",
        learning_rate_init: float | Literal["auto"] = "auto",
        alpha: float = 1e-5,
        class_weight: dict[Any, float] | Literal["balanced"] | None = None,
        batch_size: int | Literal["auto"] = "auto",
        max_iter: int = 200,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 10,
        tol: float = 1e-4,
        warm_start: bool = False,
        dtype: Literal["float32", "float64"] = "float32",
        device: str | torch.device | None = "auto",
        random_state: int | np.random.RandomState | None = None,
        verbose: int = 0,
    ) -> None:
        store_params(self, locals())


class MatchedExplicitRegressor(TorchRegressorBase):
    """Shallow explicit network whose kernel matches a DEQ's, with a linear readout.

    At fit the data scale ``tau0_`` of the (scaled) training inputs is
    measured, :func:`sk_deq.match_explicit` finds the explicit activations
    whose conjugate kernel (``kernel='ck'``) or neural tangent kernel
    (``'ntk'``) equals that of the DEQ with ``activation`` and ``sigma_a2``
    (see :ref:`theory-matching`), and the network of :ref:`theory-explicit`
    is built from them.  With a ReLU DEQ this is two leaky-ReLU layers; with
    tanh one hard-tanh layer.

    Parameters
    ----------
    activation : str, Activation or callable, default='relu'
        The DEQ's activation.
    sigma_a2 : float, default=0.2
        The DEQ's recurrent weight variance, in ``(0, 1)``.
    sigma_b2 : float or None, default=None
        The DEQ's input weight variance; ``None`` is ``1 - sigma_a2``.  Below
        1e-4 it warns (see :ref:`input-scaling`).
    kernel : {'ck', 'ntk'}, default='ck'
        Which kernel to match.  The NTK match is with respect to the readout
        and ``W_2 .. W_L``; it is the relevant one with ``trainable='hidden'``.
    family : str or tuple of str, default='auto'
        Explicit family (see :data:`sk_deq.matching.FAMILIES`); ``'auto'``
        picks Ling et al.'s (2024) choice.
    match_tol : float or None, default=0.05
        Largest relative residual of the matching equations accepted; a worse
        fit is an error (:class:`sk_deq.MatchingError`).  ``None`` accepts the
        best fit.
    n_hidden : int, default=1024
        Width ``m`` of every layer.
    trainable : {'readout', 'hidden', 'all'}, default='readout'
        ``'readout'`` freezes every weight matrix (features are computed once);
        ``'hidden'`` trains ``W_2 .. W_L`` (the input layer stays frozen, the
        counterpart of a DEQ with frozen ``B``; an error for a one-layer
        network, which has no such weights); ``'all'`` trains every layer.
    input_scaling : {'global', 'none'}, default='global'
        ``'global'`` centres every feature with its training mean and divides
        by one factor so that the mean squared norm of the training samples is
        1 (``tau0_ = 1``, Ling et al.'s (2024) protocol, see :ref:`input-scaling`);
        ``'none'`` uses the inputs as given and measures ``tau0_``.
    solver : {'auto', 'lbfgs', 'adam', 'sgd'}, default='auto'
        ``'auto'`` solves for the readout in closed form when only the
        readout is trained (least squares, the exact minimiser: one Gram
        matrix and one Cholesky solve on the cached features; with
        ``early_stopping``, which needs iterations, full-batch L-BFGS
        instead), and is Adam when hidden weights are trained and in
        ``partial_fit`` (which ``'lbfgs'`` does not have).  ``'lbfgs'``
        reaches the same readout iteratively.
    learning_rate_init : float or 'auto', default='auto'
        Step size of Adam and SGD.  ``'auto'`` is 0.01 for a readout trained
        alone (``partial_fit``, or ``solver='adam'``; it starts from zero,
        on targets in units of their standard deviation) and 1e-3
        (MLPRegressor's) when hidden weights train.  On streams of shuffled
        diabetes 0.01 reaches the R² of ``fit``, where 1e-3, 0.1 and 0.005
        fall short (see :ref:`incremental-learning`; the figures are on the
        :ref:`benchmarks page <bench-defaults>`).
    alpha : float, default=1e-4
        L2 penalty ``alpha/2 ||W||^2`` on the readout weights, added to half
        the mean squared error of the standardised targets.  With the
        readout alone this is :class:`~sklearn.linear_model.Ridge` with
        penalty ``n_samples * alpha`` on the features and targets in units
        of their standard deviation.  The hidden weights are not penalised:
        their scale is what the theory fixes.  Tune it (e.g. with
        :class:`~sklearn.model_selection.GridSearchCV`): with more features
        than samples a small ``alpha`` interpolates the training targets.
        The default was chosen by 5-fold cross-validation of the three
        regressors (width 1024) on ``load_diabetes`` and ``make_friedman1``
        (2,000 samples) over 1e-6 ... 1e-1: 1e-4 was close to the best
        value on both, where smaller and larger penalties each lost on one
        (see :ref:`regression` and the :ref:`benchmarks page <bench-defaults>`).
    batch_size : int or 'auto', default='auto'
        Minibatch size of Adam and SGD, ``min(200, n_samples)`` for ``'auto'``.
    max_iter : int, default=200
        Epochs of Adam / SGD, iterations of L-BFGS (as in
        :class:`~sklearn.neural_network.MLPRegressor`).
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the training data (a random
        split), stop when its loss (the weighted squared error) stops
        improving and keep the parameters of its best epoch; the recorded
        validation score is R².  ``partial_fit`` ignores it, with a
        warning.
    validation_fraction : float, default=0.1
        Size of the validation split.
    n_iter_no_change : int, default=10
        Patience (epochs) of the stopping rule.
    tol : float, default=1e-4
        Smallest decrease of the monitored loss (validation loss with early
        stopping, training loss without) counted as an improvement; also the
        gradient tolerance of L-BFGS.
    warm_start : bool, default=False
        Continue from the fitted network (same weights, input and target
        scaling, and number of outputs) instead of starting afresh.
        Changing a parameter that defines the network (``n_hidden``,
        ``activation``, ``sigma_a2``, ``layers``, ``kernel``, ``family``,
        ``input_scaling``, ``trainable``) before such a fit, or before
        ``partial_fit``, is an error; the fixed-point settings, ``dtype`` and
        training parameters may change.
    dtype : {'float32', 'float64'}, default='float32'
        Precision of the network.  Either way a sample's outputs do not
        depend on the batch it comes in: batches go through the network in
        multiples of 16 rows (padded), so matrix products compute every row
        the same way, and the readout is float64.  In training, L-BFGS
        evaluates its loss on the cached features with float64 parameters
        and accumulation; the two matrix products per evaluation run in
        float64 below 2**20 feature entries (then weighted and repeated
        samples give the same fit) and in the features' dtype above, where
        they are bound by memory traffic (see :mod:`sk_deq.nn.readout`).
        On the CPU a sample's outputs do not depend on its batch, bitwise,
        in either dtype (see :ref:`batch-invariance`); on a GPU, whose
        libraries may choose kernels by more than the shape, they may differ
        in the last bits.
    device : None, str or torch.device, default='auto'
        ``'auto'`` uses CUDA when available, else the CPU; ``None`` and
        ``'cpu'`` the CPU; ``'cuda'`` or ``'cuda:N'`` that GPU.  The same
        values as every ``device`` of sk_deq (:func:`sk_deq.resolve_device`):
        anything else (``'mps'``: no float64), or a GPU this machine lacks,
        is a ``ValueError`` at ``fit`` and equally at ``predict``, also after
        ``set_params`` or unpickling (see :ref:`devices`).
    random_state : int, RandomState instance or None, default=None
        Seeds the weights, the validation split and the minibatch order.
    verbose : int, default=0
        ``1`` prints one line per epoch and progress bars for long feature
        computations; ``2`` also a progress bar per epoch.

    Attributes
    ----------
    match_ : MatchResult
        The matching result (family, parameters, residuals of M1-M4).
    n_outputs_ : int
        Number of outputs (columns of ``y``).
    target_mean_ : ndarray of shape (n_outputs,)
        Weighted training mean of every output, subtracted before training
        (after ``partial_fit``: of every target seen so far).
    target_scale_ : ndarray of shape (n_outputs,)
        Weighted training standard deviation of every output (1 for a
        constant one); the targets are divided by it before training
        (after ``partial_fit``: of every target seen so far).
    n_features_in_ : int
        Number of input features.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Input feature names, when ``X`` has string column names.
    input_mean_, input_scale_, tau0_
        Input scaling and the data scale of the scaled training inputs.
    layers_ : tuple of Activation
        The activations, first layer first.
    centers_ : tuple of float
        Centring constant of every layer at its input scale.
    explicit_coefficients_ : ExplicitCoefficients
        The network's kernel recursion at ``tau0_``
        (:func:`sk_deq.explicit_coefficients`): the input scale ``taus`` and
        centring constant ``centers`` of every layer, and the CK and NTK
        coefficients after the last one.
    module_ : torch.nn.Module
        The network: ``module_.features`` (a :class:`sk_deq.nn.ExplicitNet`)
        and ``module_.readout`` (a linear layer).
    fixed_point_info_ : None
        Present for symmetry with :class:`DEQRegressor`.
    history_, n_iter_, best_loss_, best_validation_score_, best_validation_loss_, fit_time_, device_
        As in :class:`DEQRegressor`.

    See Also
    --------
    DEQRegressor : The deep equilibrium regressor this network imitates.
    ExplicitRegressor : An explicit network with chosen (e.g. plain) activations.
    sk_deq.match_explicit : The matching solver.

    Examples
    --------
    >>> from sklearn.datasets import make_friedman1
    >>> from sk_deq import MatchedExplicitRegressor
    >>> X, y = make_friedman1(n_samples=1200, random_state=0)
    >>> reg = MatchedExplicitRegressor("relu", 0.2, n_hidden=256, random_state=0)
    >>> reg.fit(X[:1000], y[:1000]).match_.family
    'leaky_relu'
    >>> reg.score(X[1000:], y[1000:]) > 0.8
    True
    """

    _network = MatchedLayers()

    def __init__(
        self,
        activation: str | Activation | Callable[..., Any] = "relu",
        sigma_a2: float = 0.2,
        *,
        sigma_b2: float | None = None,
        kernel: Literal["ck", "ntk"] = "ck",
        family: str | Sequence[str] = "auto",
        match_tol: float | None = 0.05,
        n_hidden: int = 1024,
        trainable: Literal["readout", "hidden", "all"] = "readout",
        input_scaling: Literal["global", "none"] = "global",
        solver: Literal["auto", "lbfgs", "adam", "sgd"] = "auto",
        learning_rate_init: float | Literal["auto"] = "auto",
        alpha: float = 1e-4,
        batch_size: int | Literal["auto"] = "auto",
        max_iter: int = 200,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 10,
        tol: float = 1e-4,
        warm_start: bool = False,
        dtype: Literal["float32", "float64"] = "float32",
        device: str | torch.device | None = "auto",
        random_state: int | np.random.RandomState | None = None,
        verbose: int = 0,
    ) -> None:
        store_params(self, locals())
