"""The deep equilibrium estimators: :class:`DEQClassifier` and :class:`DEQRegressor`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval

from .._validation import ActivationName, SortedStrOptions
from ._base import store_params
from ._component import Network
from ._classifier import TorchClassifierBase
from ._regressor import TorchRegressorBase
from ..activations import get_activation
from ..nn.layers import DEQLayer
from ..nn.solvers import SOLVERS
from ..theory import deq_ck_coefficients

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import torch

    from ..activations import Activation

__all__ = ["DEQClassifier", "DEQNetwork", "DEQRegressor"]


class DEQNetwork(Network):
    """The DEQ's component: its parameters, its theory (the centring constant) and its layer."""

    params: ClassVar[tuple] = ("activation", "sigma_a2", "sigma_b2")
    constraints: ClassVar[dict] = {
        "activation": [ActivationName(), callable],
        "sigma_a2": [Interval(Real, 0, 1, closed="neither")],
        "sigma_b2": [Interval(Real, 0, math.inf, closed="neither"), None],
        "fixed_point_solver": [SortedStrOptions(set(SOLVERS)), callable],
        "fixed_point_max_iter": [Interval(Integral, 1, None, closed="left")],
        "fixed_point_tol": [Interval(Real, 0, math.inf, closed="neither")],
    }
    runtime_settings: ClassVar[dict] = {
        "solver": ("fixed_point_solver", None),
        "tol": ("fixed_point_tol", float),
        "backward_tol": ("fixed_point_tol", float),
        "max_iter": ("fixed_point_max_iter", int),
        "backward_max_iter": ("fixed_point_max_iter", int),
    }

    def prepare(self, est, tau0):
        act = get_activation(est.activation)
        est.deq_coefficients_ = deq_ck_coefficients(act, est.sigma_a2, tau0, sigma_b2=est.sigma_b2)
        est.center_ = float(est.deq_coefficients_.moments.mean)

    def weight_shapes(self, est, n_features):
        return [(int(est.n_hidden), int(est.n_hidden)), (int(est.n_hidden), int(n_features))]  # A and B

    def make_features(self, est, n_features, n_outputs, generator, dtype, device):
        m = int(est.n_hidden)
        est._check_network_fits(self.weight_shapes(est, n_features), n_features, n_outputs, device)
        return DEQLayer(
            n_features,
            m,
            get_activation(est.activation),
            float(est.sigma_a2),
            est.center_,
            sigma_b2=est.sigma_b2,
            solver=est.fixed_point_solver,
            tol=est.fixed_point_tol,
            max_iter=est.fixed_point_max_iter,
            train_a=est.trainable in ("hidden", "all"),
            train_b=est.trainable == "all",
            generator=generator,
            dtype=dtype,
            device=device,
        )


class DEQClassifier(TorchClassifierBase):
    """Deep equilibrium classifier: a random-feature DEQ with a linear readout.

    The hidden features solve the fixed point (see :ref:`theory-deq`)::

        z* = (phi0(sqrt(sigma_a2) A z* + sqrt(sigma_b2) B x) - c) / sqrt(m)

    with ``A`` (m x m) and ``B`` (m x p) i.i.d. ``N(0, 1)``, ``sigma_b2`` by
    default ``1 - sigma_a2``, and ``c = E_tau[phi0]`` the centring constant at the DEQ's
    pre-activation scale ``tau`` (from :func:`sk_deq.deq_ck_coefficients`).
    A linear readout on ``z*`` gives the logits; the loss is cross-entropy.

    Parameters
    ----------
    activation : str, Activation or callable, default='relu'
        ``phi0``: a name from :data:`sk_deq.activations.ACTIVATIONS` (in any
        case, aliases included), an :class:`~sk_deq.Activation`, or a
        vectorised callable.
    sigma_a2 : float, default=0.2
        Variance of the recurrent weights, in ``(0, 1)``.  Ling et al. (2024) use 0.2.
    n_hidden : int, default=1024
        Width ``m``.
    trainable : {'readout', 'hidden', 'all'}, default='readout'
        What is trained besides the readout: ``'readout'`` freezes ``A`` and
        ``B`` (Ling et al.'s (2024) setting; features are computed once); ``'hidden'``
        also trains ``A``; ``'all'`` trains ``A`` and ``B``.  Gradients through
        the fixed point come from implicit differentiation.
    sigma_b2 : float or None, default=None
        Variance of the input weights ``B``; ``None`` is ``1 - sigma_a2``
        (Ling et al.'s (2024) choice), so that the pre-activations keep the scale of
        the inputs.  Below 1e-4 it warns (see :ref:`input-scaling`).
    fixed_point_solver : {'iteration', 'anderson'} or callable, default='iteration'
        Fixed-point solver for the forward and the adjoint (backward) solve,
        see :mod:`sk_deq.nn.solvers`: plain iteration or Anderson
        acceleration.  The Jacobian of a random DEQ has its spectrum in a
        disk around zero (circular law), where no polynomial acceleration
        beats plain iteration; once training (``trainable='hidden'`` or
        ``'all'``) pulls eigenvalues of ``A`` out of that disk, Anderson needs
        fewer steps per sample (see :ref:`fixed-point-solvers`).  A callable
        is called as ``solver(f, z0, tol=fixed_point_tol,
        max_iter=fixed_point_max_iter)``, ``f`` the row-wise map and ``z0``
        the starting point of shape ``(batch, n_hidden)``, and must return
        ``(z, info)``: ``z`` a tensor of the shape of ``z0``, ``info`` a
        :class:`~sk_deq.nn.SolverInfo` (the contract of
        :mod:`sk_deq.nn.solvers`; anything else is an error naming it).
        Its convergence is judged by one evaluation of ``f`` at ``z``, not
        taken from ``info``.
    fixed_point_max_iter : int, default=50
        Iteration budget of every fixed-point solve.
    fixed_point_tol : float, default=1e-4
        Per-sample relative residual ``||f(z) - z|| / ||f(z)||`` at which a
        solve stops.
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
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    n_features_in_ : int
        Number of input features.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Input feature names, when ``X`` has string column names.
    input_mean_ : ndarray of shape (`n_features_in_`,) or None
        Mean subtracted from the inputs (``input_scaling='global'``).
    input_scale_ : float
        Factor the centred inputs are divided by.
    tau0_ : float
        Data scale of the scaled training inputs, ``sqrt(mean ||x||^2)``.
    deq_coefficients_ : DEQCoefficients
        The DEQ's ``tau`` and CK coefficients at ``tau0_``.
    center_ : float
        Centring constant ``E_tau[phi0]``.
    module_ : torch.nn.Module
        The network: ``module_.features`` (a :class:`sk_deq.nn.DEQLayer`) and
        ``module_.readout`` (a linear layer).
    fixed_point_info_ : dict
        Fixed-point diagnostics of the fit: largest and mean number of
        iterations, largest relative residual, samples not converged.
    history_ : list of dict
        One entry per epoch: ``epoch``, ``train_loss``, ``valid_loss`` and
        ``valid_score`` (validation accuracy; None without early stopping),
        ``best``, ``dur`` (seconds).
    n_iter_ : int
        Number of epochs run (over all warm-started fits; one per
        ``partial_fit`` call).
    best_loss_ : float
        Lowest training loss.
    best_validation_score_ : float or None
        Validation accuracy of the kept parameters (with ``early_stopping``).
    best_validation_loss_ : float or None
        Their validation loss, the lowest seen (with ``early_stopping``).
    fit_time_ : float
        Seconds spent in the last fit (or ``partial_fit`` call) after
        validation.
    device_ : str
        Device of the last fit (``predict`` runs where ``device`` says now).

    See Also
    --------
    MatchedExplicitClassifier : The shallow explicit network with the same kernel.
    ExplicitClassifier : An explicit random-feature network with chosen activations.
    sklearn.neural_network.MLPClassifier : A trained multi-layer perceptron.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sk_deq import DEQClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = DEQClassifier(n_hidden=256, random_state=0).fit(X[:1200], y[:1200])
    >>> clf.fixed_point_info_["converged"]
    True
    >>> clf.score(X[1200:], y[1200:]) > 0.85
    True
    """

    _network = DEQNetwork()

    def __init__(
        self,
        activation: str | Activation | Callable[..., Any] = "relu",
        sigma_a2: float = 0.2,
        *,
        n_hidden: int = 1024,
        trainable: Literal["readout", "hidden", "all"] = "readout",
        sigma_b2: float | None = None,
        fixed_point_solver: Literal["iteration", "anderson"] | Callable[..., Any] = "iteration",
        fixed_point_max_iter: int = 50,
        fixed_point_tol: float = 1e-4,
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


class DEQRegressor(TorchRegressorBase):
    """Deep equilibrium regressor: a random-feature DEQ with a linear readout.

    The hidden features solve the fixed point (see :ref:`theory-deq`)::

        z* = (phi0(sqrt(sigma_a2) A z* + sqrt(sigma_b2) B x) - c) / sqrt(m)

    with ``A`` (m x m) and ``B`` (m x p) i.i.d. ``N(0, 1)``, ``sigma_b2`` by
    default ``1 - sigma_a2``, and ``c = E_tau[phi0]`` the centring constant at the DEQ's
    pre-activation scale ``tau`` (from :func:`sk_deq.deq_ck_coefficients`).
    A linear readout on ``z*`` gives the predictions; the loss is the squared error.

    Parameters
    ----------
    activation : str, Activation or callable, default='relu'
        ``phi0``: a name from :data:`sk_deq.activations.ACTIVATIONS` (in any
        case, aliases included), an :class:`~sk_deq.Activation`, or a
        vectorised callable.
    sigma_a2 : float, default=0.2
        Variance of the recurrent weights, in ``(0, 1)``.  Ling et al. (2024) use 0.2.
    n_hidden : int, default=1024
        Width ``m``.
    trainable : {'readout', 'hidden', 'all'}, default='readout'
        What is trained besides the readout: ``'readout'`` freezes ``A`` and
        ``B`` (Ling et al.'s (2024) setting; features are computed once); ``'hidden'``
        also trains ``A``; ``'all'`` trains ``A`` and ``B``.  Gradients through
        the fixed point come from implicit differentiation.
    sigma_b2 : float or None, default=None
        Variance of the input weights ``B``; ``None`` is ``1 - sigma_a2``
        (Ling et al.'s (2024) choice), so that the pre-activations keep the scale of
        the inputs.  Below 1e-4 it warns (see :ref:`input-scaling`).
    fixed_point_solver : {'iteration', 'anderson'} or callable, default='iteration'
        Fixed-point solver for the forward and the adjoint (backward) solve,
        see :mod:`sk_deq.nn.solvers`: plain iteration or Anderson
        acceleration.  The Jacobian of a random DEQ has its spectrum in a
        disk around zero (circular law), where no polynomial acceleration
        beats plain iteration; once training (``trainable='hidden'`` or
        ``'all'``) pulls eigenvalues of ``A`` out of that disk, Anderson needs
        fewer steps per sample (see :ref:`fixed-point-solvers`).  A callable
        is called as ``solver(f, z0, tol=fixed_point_tol,
        max_iter=fixed_point_max_iter)``, ``f`` the row-wise map and ``z0``
        the starting point of shape ``(batch, n_hidden)``, and must return
        ``(z, info)``: ``z`` a tensor of the shape of ``z0``, ``info`` a
        :class:`~sk_deq.nn.SolverInfo` (the contract of
        :mod:`sk_deq.nn.solvers`; anything else is an error naming it).
        Its convergence is judged by one evaluation of ``f`` at ``z``, not
        taken from ``info``.
    fixed_point_max_iter : int, default=50
        Iteration budget of every fixed-point solve.
    fixed_point_tol : float, default=1e-4
        Per-sample relative residual ``||f(z) - z|| / ||f(z)||`` at which a
        solve stops.
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
    input_mean_ : ndarray of shape (`n_features_in_`,) or None
        Mean subtracted from the inputs (``input_scaling='global'``).
    input_scale_ : float
        Factor the centred inputs are divided by.
    tau0_ : float
        Data scale of the scaled training inputs, ``sqrt(mean ||x||^2)``.
    deq_coefficients_ : DEQCoefficients
        The DEQ's ``tau`` and CK coefficients at ``tau0_``.
    center_ : float
        Centring constant ``E_tau[phi0]``.
    module_ : torch.nn.Module
        The network: ``module_.features`` (a :class:`sk_deq.nn.DEQLayer`) and
        ``module_.readout`` (a linear layer).
    fixed_point_info_ : dict
        Fixed-point diagnostics of the fit: largest and mean number of
        iterations, largest relative residual, samples not converged.
    history_ : list of dict
        One entry per epoch: ``epoch``, ``train_loss``, ``valid_loss`` and
        ``valid_score`` (validation R²; None without early stopping),
        ``best``, ``dur`` (seconds).
    n_iter_ : int
        Number of epochs run (over all warm-started fits; one per
        ``partial_fit`` call).
    best_loss_ : float
        Lowest training loss.
    best_validation_score_ : float or None
        Validation R² of the kept parameters (with ``early_stopping``).
    best_validation_loss_ : float or None
        Their validation loss, the lowest seen (with ``early_stopping``).
    fit_time_ : float
        Seconds spent in the last fit (or ``partial_fit`` call) after
        validation.
    device_ : str
        Device of the last fit (``predict`` runs where ``device`` says now).

    See Also
    --------
    MatchedExplicitRegressor : The shallow explicit network with the same kernel.
    ExplicitRegressor : An explicit random-feature network with chosen activations.
    sklearn.neural_network.MLPRegressor : A trained multi-layer perceptron.

    Examples
    --------
    >>> from sklearn.datasets import make_friedman1
    >>> from sk_deq import DEQRegressor
    >>> X, y = make_friedman1(n_samples=1200, random_state=0)
    >>> reg = DEQRegressor(n_hidden=256, random_state=0).fit(X[:1000], y[:1000])
    >>> reg.fixed_point_info_["converged"]
    True
    >>> reg.score(X[1000:], y[1000:]) > 0.8
    True
    """

    _network = DEQNetwork()

    def __init__(
        self,
        activation: str | Activation | Callable[..., Any] = "relu",
        sigma_a2: float = 0.2,
        *,
        n_hidden: int = 1024,
        trainable: Literal["readout", "hidden", "all"] = "readout",
        sigma_b2: float | None = None,
        fixed_point_solver: Literal["iteration", "anderson"] | Callable[..., Any] = "iteration",
        fixed_point_max_iter: int = 50,
        fixed_point_tol: float = 1e-4,
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
