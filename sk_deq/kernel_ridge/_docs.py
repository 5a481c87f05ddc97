"""The parameters and attributes both kernel ridge estimators document (numpydoc sections, formatted into their docstrings)."""

__all__ = ["ATTRIBUTES", "PARAMETERS"]

PARAMETERS = """activation : str, Activation or callable, default='relu'
        DEQ activation ``phi0``: a name from :data:`sk_deq.activations.ACTIVATIONS`
        (in any case, aliases included), an
        :class:`~sk_deq.activations.Activation` or a vectorised callable.
    sigma_a2 : float, default=0.2
        Variance of the recurrent weights, in (0, 1).
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        Which implicit kernel (as :class:`~sk_deq.ImplicitCKTransformer`'s).
    sigma_b2 : float, default=None
        Variance of the input weights; ``1 - sigma_a2`` when None.
    bias_variance : float, default=1.0
        A constant added to every kernel entry: the prior variance of a
        readout bias, which lets the model fit the targets' mean (see
        :ref:`kernel-bias`).
    input_scaling : {'global', 'none'}, default='global'
        ``'global'`` centres the features and divides by one factor so that
        the training samples have mean squared norm 1; ``'none'`` uses the
        inputs as given.
    alpha : float or array-like of shape (n_alphas,), default=1.0
        The ridge: ``(K + alpha I) C = Y``.  Several values are candidates:
        ``fit`` holds out ``validation_fraction`` of the samples, solves for
        each candidate on the rest (from the largest to the smallest, each
        solve started from the one before, one preconditioner for all, the
        kernel computed once) and scores it on the held-out samples, then
        fits all samples with the best (``alpha_``).
    solver : {'auto', 'cholesky', 'cg'}, default='auto'
        ``'cholesky'``: the stored kernel is factored in place (blocked, a
        tile at a time), exact to rounding; ``'cg'``: conjugate gradients
        with a randomly pivoted Cholesky preconditioner, stopped at ``tol``;
        ``'auto'``: Cholesky up to
        :data:`~sk_deq.kernel_ridge._plan.CHOLESKY_MAX_ROWS` samples,
        conjugate gradients above, and for a Dask array (on a cluster,
        where ``'cholesky'`` is refused).
    tol : float, default=1e-4
        Largest relative residual ``||Y - (K + alpha I) C|| / ||Y||`` of a
        target column (conjugate gradients; scikit-learn's
        :class:`~sklearn.linear_model.Ridge` stops its iterative solvers at
        the same ``1e-4``).  Test accuracies at ``1e-3``, ``1e-4`` and
        ``1e-6`` agree (see :ref:`bench-kernel-ridge-defaults`).  With the kernel
        stored in float32 a residual far under about ``1e-6`` cannot be
        resolved.
    max_iter : int, default=1000
        Most conjugate-gradient iterations (products with the stored kernel).
    preconditioner_rank : int, default=4000
        Columns of the randomly pivoted Cholesky factor of the kernel that
        preconditions the conjugate gradients (0: none; at most
        ``n_samples``).  Read from the stored kernel;
        ``n_samples x preconditioner_rank`` float64 in memory (counted by
        ``fit_plan_``).  A larger rank costs more to build (``n r^2``) and
        saves iterations (``n^2`` each): see :ref:`bench-kernel-ridge-defaults`.
    storage : {'auto', 'float64', 'float32'}, default='auto'
        Dtype of the stored training kernel (its lower triangle): float64,
        float32 (half the memory; entries rounded to ``u = 2**-24`` of their
        size, so that predictions agree with float64's to within
        ``u ||K||_2 / alpha`` relative), or ``'auto'``: float64 where the
        fit fits in the memory available (on a cluster: every worker's
        part, below its spilling threshold), else float32.  Each tile is
        computed in float64.
    validation_fraction : float, default=0.1
        Share of the samples held out to choose among several ``alpha``.
    kernel_tol : float, default=1e-12
        Tolerance of every kernel entry's fixed point.
    block_size : int, default=None
        Rows and columns of the kernel engine's blocks (by default from
        scikit-learn's ``working_memory``).
    n_jobs : int, default=None
        Threads of the kernel engine (None: all cores, as
        :class:`~sk_deq.ImplicitCKTransformer`'s ``n_jobs``).  On a
        cluster, the threads of every slab's task on its worker (None: one;
        the worker's threads compute several slabs at once).
    device : None, str or torch.device, default=None
        Where the kernel is computed, stored and solved
        (:func:`sk_deq.resolve_device`): None for numpy on the host; a
        torch device (``'cuda'``, or ``'cpu'`` for torch on the host) holds
        the stored kernel, the solver's vectors and the preconditioner
        there, in the device's memory (see :ref:`kernel-ridge-gpu`).
    random_state : int, RandomState instance or None, default=None
        Seed of the held-out split and of the preconditioner's pivots.
    verbose : int, default=0
        Print the fit's memory plan, then show the progress of the kernel's
        tiles and of every solve (residual and time left) on standard error."""

ATTRIBUTES = """dual_coef_ : ndarray of shape (n_samples,) or (n_samples, n_targets)
        The solution ``C``: predictions are ``K(X, X_fit_) @ dual_coef_``.
    alpha_ : float
        The ridge of the fit (the best candidate when ``alpha`` lists several).
    alpha_scores_ : ndarray of shape (n_alphas,)
        Held-out score of every candidate, in the order of ``alpha`` (only
        when it lists several): R² for the regressor, accuracy for the
        classifier, weighted by ``sample_weight``.
    validation_indices_ : ndarray of shape (n_validation,)
        The held-out samples of that choice, drawn at random with
        ``random_state`` (only when ``alpha`` lists several).
    solver_ : str
        The solver used, ``'cholesky'`` or ``'cg'``.
    n_iter_ : int
        Conjugate-gradient iterations of the final solve (1 for Cholesky:
        one direct solve).
    residual_ : float or None
        Largest relative residual of the final solve, recomputed from its
        definition (None for Cholesky, a direct solve).
    fit_plan_ : FitPlan or ClusterPlan
        The memory the fit needed, by part (``fit_plan_.describe()``), the
        storage dtype and the solver; on a cluster, the kernel's row slabs,
        the worker of each and the memory of the busiest worker and of the
        client.
    fit_time_ : dict
        Wall time in seconds of the fit's phases: ``'prepare'`` (validation,
        scaling, the per-sample preparation, the plan), ``'kernel'`` (the
        stored kernel), ``'alpha'`` (the candidates, when several) and
        ``'solve'`` (preconditioner and solve).
    X_fit_ : ndarray of shape (n_samples, n_features)
        Training samples after input scaling.
    input_mean_ : ndarray of shape (n_features,) or None
        Training mean subtracted by ``input_scaling='global'``.
    input_scale_ : float
        Global factor the centred inputs are divided by.
    tau0_ : float
        Data scale of the scaled training samples.
    coefficients_ : sk_deq.theory.DEQCoefficients
        The DEQ's coefficients at ``tau0_``.
    dual_method_ : str
        How the dual activation is evaluated (closed form or Hermite expansion).
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names."""
