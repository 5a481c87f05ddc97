"""The numpydoc pieces the estimators' docstrings share (training parameters, attributes)."""

# The last parameters of every estimator: precision, device, seeding, output.
_RUNTIME_DOC = """    dtype : {'float32', 'float64'}, default='float32'
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
"""

# The training parameters, in their signature order (regressors have no readout or class_weight).
_CLASSIFIER_TRAINING_DOC = (
    """    readout : {'logistic', 'ridge'}, default='logistic'
        How the readout is fitted.  ``'logistic'``: the cross-entropy (plus
        ``alpha``), trained by ``optimizer``.  ``'ridge'``: least squares on
        ``-1 / 1`` one-hot targets (plus ``alpha``), solved in closed form on
        the cached features (one Gram matrix and one Cholesky solve, as
        :class:`~sklearn.linear_model.RidgeClassifier`); it needs
        ``trainable='readout'`` and ``early_stopping=False``, and there is
        no ``predict_proba`` or ``partial_fit``.  Its speed and accuracy
        against L-BFGS: see :ref:`readout-speed`.
    optimizer : {'auto', 'lbfgs', 'adam', 'sgd'}, default='auto'
        ``'auto'`` is full-batch L-BFGS when only the readout is trained (a
        convex problem on cached features) and Adam otherwise, and Adam in
        ``partial_fit`` (which ``'lbfgs'`` does not have).
    learning_rate : float or 'auto', default='auto'
        Step size of Adam and SGD.  ``'auto'`` is 0.1 for a readout trained
        alone (``partial_fit``, or ``optimizer='adam'``; it starts from zero
        and Adam moves each weight by about the step size per step) and
        1e-3 (MLPClassifier's) when hidden weights train.  On streams of
        shuffled digits (chunks of 250, five passes) 0.1 reached 97.2-97.6%
        on average over five shuffles against 92-93% with 1e-3, and came
        within one accuracy point of L-BFGS on MNIST (see
        :ref:`incremental-learning`).
    alpha : float, default=1e-5
        L2 penalty ``alpha/2 ||W||^2`` on the readout weights, added to the
        mean cross-entropy (so ``alpha = 1 / (C n_samples)`` in the terms of
        :class:`~sklearn.linear_model.LogisticRegression`).  The hidden
        weights (``A`` and ``B`` of a DEQ, ``W_l`` of an explicit network) are
        not penalised: their scale is what the theory fixes.  The default
        was chosen on validation splits of the digits and MNIST data, where
        1e-5 did as well as or better than 1e-6, 1e-4 and 1e-3.
    class_weight : dict, 'balanced' or None, default=None
        Weights of the classes in the loss, as in
        :class:`~sklearn.linear_model.LogisticRegression`: ``{label:
        weight}`` (missing labels weigh 1), or ``'balanced'`` for weights
        ``n_samples / (n_classes * np.bincount(y))`` (with ``sample_weight``
        counted).  They multiply ``sample_weight`` in the loss; the input
        scaling uses ``sample_weight`` alone.
    batch_size : int or 'auto', default='auto'
        Minibatch size of Adam and SGD, ``min(200, n_samples)`` for ``'auto'``.
    max_epochs : int, default=200
        Epochs of Adam / SGD, iterations of L-BFGS.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the training data (stratified),
        stop when its loss (the weighted cross-entropy) stops improving and
        keep the parameters of its best epoch.  The loss rather than the
        accuracy: a small validation set's accuracy plateaus in steps of one
        sample long before the readout has converged.  ``partial_fit``
        ignores it (as MLPClassifier does).
    validation_fraction : float, default=0.1
        Size of the validation split.
    n_iter_no_change : int, default=10
        Patience (epochs) of the stopping rule.
    improvement_tol : float, default=1e-4
        Smallest decrease of the monitored loss (validation loss with early
        stopping, training loss without) counted as an improvement; also the
        gradient tolerance of L-BFGS.
    warm_start : bool, default=False
        Continue from the fitted network (same weights, input scaling and
        classes) instead of starting afresh.  Changing a parameter that
        defines the network (``n_hidden``, ``activation``, ``sigma_a2``,
        ``layers``, ``kernel``, ``family``, ``input_scaling``,
        ``trainable``) before such a fit, or before ``partial_fit``, is an
        error; solver settings, ``dtype`` and training parameters may change.
"""
    + _RUNTIME_DOC
)

_REGRESSOR_TRAINING_DOC = (
    """    optimizer : {'auto', 'lbfgs', 'adam', 'sgd'}, default='auto'
        ``'auto'`` solves for the readout in closed form when only the
        readout is trained (least squares, the exact minimiser: one Gram
        matrix and one Cholesky solve on the cached features; with
        ``early_stopping``, which needs iterations, full-batch L-BFGS
        instead), and is Adam when hidden weights are trained and in
        ``partial_fit`` (which ``'lbfgs'`` does not have).  ``'lbfgs'``
        reaches the same readout iteratively.
    learning_rate : float or 'auto', default='auto'
        Step size of Adam and SGD.  ``'auto'`` is 0.01 for a readout trained
        alone (``partial_fit``, or ``optimizer='adam'``; it starts from zero,
        on targets in units of their standard deviation) and 1e-3
        (MLPRegressor's) when hidden weights train.  On streams of shuffled
        diabetes (chunks of 50, five passes) 0.01 reached R² 0.53-0.54 on
        average over five shuffles, as ``fit``, against 0.22-0.26 with 1e-3
        and lower R² with 0.1 or 0.005 (see :ref:`incremental-learning`).
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
        (2,000 samples) over 1e-6 ... 1e-1: 1e-4 came within 0.03 R² of the
        best value on both, while 1e-5 lost 0.15 on diabetes and 1e-3 lost
        0.08 on friedman1 (see :ref:`regression`).
    batch_size : int or 'auto', default='auto'
        Minibatch size of Adam and SGD, ``min(200, n_samples)`` for ``'auto'``.
    max_epochs : int, default=200
        Epochs of Adam / SGD, iterations of L-BFGS.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the training data (a random
        split), stop when its loss (the weighted squared error) stops
        improving and keep the parameters of its best epoch; the recorded
        validation score is R².  ``partial_fit`` ignores it.
    validation_fraction : float, default=0.1
        Size of the validation split.
    n_iter_no_change : int, default=10
        Patience (epochs) of the stopping rule.
    improvement_tol : float, default=1e-4
        Smallest decrease of the monitored loss (validation loss with early
        stopping, training loss without) counted as an improvement; also the
        gradient tolerance of L-BFGS.
    warm_start : bool, default=False
        Continue from the fitted network (same weights, input and target
        scaling, and number of outputs) instead of starting afresh.
        Changing a parameter that defines the network (``n_hidden``,
        ``activation``, ``sigma_a2``, ``layers``, ``kernel``, ``family``,
        ``input_scaling``, ``trainable``) before such a fit, or before
        ``partial_fit``, is an error; solver settings, ``dtype`` and
        training parameters may change.
"""
    + _RUNTIME_DOC
)

_TRAINING = {"classifier": _CLASSIFIER_TRAINING_DOC, "regressor": _REGRESSOR_TRAINING_DOC}

# Attributes every estimator has, by task (the network's own attributes come first).
_TASK_ATTRS = {
    "classifier": """    classes_ : ndarray of shape (n_classes,)
        Class labels.
""",
    "regressor": """    n_outputs_ : int
        Number of outputs (columns of ``y``).
    target_mean_ : ndarray of shape (n_outputs,)
        Weighted training mean of every output, subtracted before training
        (after ``partial_fit``: of every target seen so far).
    target_scale_ : ndarray of shape (n_outputs,)
        Weighted training standard deviation of every output (1 for a
        constant one); the targets are divided by it before training
        (after ``partial_fit``: of every target seen so far).
""",
}
_SCORE = {"classifier": "accuracy", "regressor": "R²"}


def _history_attrs(task: str) -> str:
    score = _SCORE[task]
    return f"""    history_ : list of dict
        One entry per epoch: ``epoch``, ``train_loss``, ``valid_loss`` and
        ``valid_score`` (validation {score}; None without early stopping),
        ``best``, ``dur`` (seconds).
    n_iter_ : int
        Number of epochs run (over all warm-started fits; one per
        ``partial_fit`` call).
    best_loss_ : float
        Lowest training loss.
    best_validation_score_ : float or None
        Validation {score} of the kept parameters (with ``early_stopping``).
    best_validation_loss_ : float or None
        Their validation loss, the lowest seen (with ``early_stopping``).
    fit_time_ : float
        Seconds spent in the last fit (or ``partial_fit`` call) after
        validation.
    device_ : str
        Device of the last fit (``predict`` runs where ``device`` says now).
"""


_COMMON_ATTRS = """    n_features_in_ : int
        Number of input features.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Input feature names, when ``X`` has string column names.
"""


_DEQ_PARAMS_DOC = """    activation : str, Activation or callable, default='relu'
        ``phi0``: a name from :data:`sk_deq.activations.ACTIVATIONS` (in any
        case, aliases included), an :class:`~sk_deq.Activation`, or a
        vectorised callable.
    sigma_a2 : float, default=0.2
        Variance of the recurrent weights, in ``(0, 1)``; the input weights
        have variance ``1 - sigma_a2``.  The paper uses 0.2.
    n_hidden : int, default=1024
        Width ``m``.
    trainable : {'readout', 'hidden', 'all'}, default='readout'
        What is trained besides the readout: ``'readout'`` freezes ``A`` and
        ``B`` (the paper's setting; features are computed once); ``'hidden'``
        also trains ``A``; ``'all'`` trains ``A`` and ``B``.  Gradients through
        the fixed point come from implicit differentiation.
    solver : {'fixed_point', 'anderson'} or callable, default='fixed_point'
        Fixed-point solver for the forward and the adjoint (backward) solve,
        see :mod:`sk_deq.nn.solvers`.  The Jacobian of a random DEQ has its
        spectrum in a disk around zero (circular law), where no polynomial
        acceleration beats plain iteration: on MNIST at width 1024 plain
        iteration needs 9.3 steps per sample, Anderson 9.1 at a higher cost
        per step.  Once training (``trainable='hidden'`` or ``'all'``) pulls
        eigenvalues of ``A`` out of that disk, Anderson needs fewer steps per
        sample (measured 20 instead of 61 on digits), though a batch still
        waits for its slowest sample.
    max_iter : int, default=50
        Iteration budget of every fixed-point solve.
    tol : float, default=1e-4
        Per-sample relative residual ``||f(z) - z|| / ||f(z)||`` at which a
        solve stops.
    input_scaling : {'global', 'none'}, default='global'
        ``'global'`` centres every feature with its training mean and divides
        by one factor so that the mean squared norm of the training samples is
        1 (``tau0_ = 1``, the paper's protocol, see :ref:`input-scaling`);
        ``'none'`` uses the inputs as given and measures ``tau0_``.
"""

_DEQ_ATTRS_DOC = """    input_mean_ : ndarray of shape (`n_features_in_`,) or None
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
    solver_info_ : dict
        Fixed-point diagnostics of the fit: largest and mean number of
        iterations, largest relative residual, samples not converged.
"""


def _deq_doc(task: str, examples: str) -> str:
    kind = "classifier" if task == "classifier" else "regressor"
    output = (
        "the logits; the loss is cross-entropy"
        if task == "classifier"
        else ("the predictions; the loss is the squared error")
    )
    other = "Classifier" if task == "classifier" else "Regressor"
    mlp = "MLPClassifier" if task == "classifier" else "MLPRegressor"
    return f"""Deep equilibrium {kind}: a random-feature DEQ with a linear readout.

    The hidden features solve the fixed point (see :ref:`theory-deq`)::

        z* = (phi0(sqrt(sigma_a2) A z* + sqrt(sigma_b2) B x) - c) / sqrt(m)

    with ``A`` (m x m) and ``B`` (m x p) i.i.d. ``N(0, 1)``, ``sigma_b2 = 1 -
    sigma_a2`` and ``c = E_tau[phi0]`` the centring constant at the DEQ's
    pre-activation scale ``tau`` (from :func:`sk_deq.deq_ck_coefficients`).
    A linear readout on ``z*`` gives {output}.

    Parameters
    ----------
{_DEQ_PARAMS_DOC}{_TRAINING[task]}
    Attributes
    ----------
{_TASK_ATTRS[task]}{_COMMON_ATTRS}{_DEQ_ATTRS_DOC}{_history_attrs(task)}
    See Also
    --------
    MatchedExplicit{other} : The shallow explicit network with the same kernel.
    Explicit{other} : An explicit random-feature network with chosen activations.
    sklearn.neural_network.{mlp} : A trained multi-layer perceptron.

    Examples
    --------
{examples}"""


_EXPLICIT_PARAMS_DOC = """    n_hidden : int, default=1024
        Width ``m`` of every layer.
    trainable : {'readout', 'hidden', 'all'}, default='readout'
        ``'readout'`` freezes every weight matrix (features are computed once);
        ``'hidden'`` trains ``W_2 .. W_L`` (the input layer stays frozen, the
        counterpart of a DEQ with frozen ``B``; an error for a one-layer
        network, which has no such weights); ``'all'`` trains every layer.
    input_scaling : {'global', 'none'}, default='global'
        ``'global'`` centres every feature with its training mean and divides
        by one factor so that the mean squared norm of the training samples is
        1 (``tau0_ = 1``, see :ref:`input-scaling`); ``'none'`` uses the inputs
        as given and measures ``tau0_``.
"""


def _explicit_attrs(task: str) -> str:
    deq = "DEQClassifier" if task == "classifier" else "DEQRegressor"
    return f"""{_TASK_ATTRS[task]}{_COMMON_ATTRS}    input_mean_, input_scale_, tau0_
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
        ``module_.features`` (a :class:`sk_deq.nn.ExplicitNet`) and
        ``module_.readout``.
    solver_info_ : None
        Present for symmetry with :class:`{deq}`.
    history_, n_iter_, best_loss_, best_validation_score_, best_validation_loss_, fit_time_, device_
        As in :class:`{deq}`.
"""


def _explicit_doc(task: str, examples: str) -> str:
    other = "Classifier" if task == "classifier" else "Regressor"
    return f"""Explicit random-feature network with chosen activations and a linear readout.

    ``y_0 = x``, ``y_l = (sigma_l(W_l y_{{l-1}}) - c_l) / sqrt(m)`` with
    ``N(0, 1)`` weights and every activation centred at its input scale
    (see :ref:`theory-explicit`); a linear readout on ``y_L``.  With plain
    activations this is the unmatched baseline of
    :class:`MatchedExplicit{other}`.

    Parameters
    ----------
    layers : tuple of (str, Activation or callable), default=('relu',)
        One activation per layer, first layer first.
{_EXPLICIT_PARAMS_DOC}{_TRAINING[task]}
    Attributes
    ----------
{_explicit_attrs(task)}
    See Also
    --------
    MatchedExplicit{other} : Layers chosen so that the kernel matches a DEQ's.
    DEQ{other} : The deep equilibrium {task}.

    Examples
    --------
{examples}"""


def _matched_doc(task: str, examples: str) -> str:
    other = "Classifier" if task == "classifier" else "Regressor"
    return f"""Shallow explicit network whose kernel matches a DEQ's, with a linear readout.

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
    kernel : {{'ck', 'ntk'}}, default='ck'
        Which kernel to match.  The NTK match is with respect to the readout
        and ``W_2 .. W_L``; it is the relevant one with ``trainable='hidden'``.
    family : str or tuple of str, default='auto'
        Explicit family (see :data:`sk_deq.matching.FAMILIES`); ``'auto'``
        picks the paper's choice.
    match_tol : float or None, default=0.05
        Largest relative residual of the matching equations accepted; a worse
        fit is an error (:class:`sk_deq.MatchingError`).  ``None`` accepts the
        best fit.
{_EXPLICIT_PARAMS_DOC}{_TRAINING[task]}
    Attributes
    ----------
    match_ : MatchResult
        The matching result (family, parameters, residuals of M1-M4).
{_explicit_attrs(task)}
    See Also
    --------
    DEQ{other} : The deep equilibrium {task} this network imitates.
    Explicit{other} : An explicit network with chosen (e.g. plain) activations.
    sk_deq.match_explicit : The matching solver.

    Examples
    --------
{examples}"""
