"""Where the equivalence ends: the study of steep targets and trained weights.

The equivalence of this package is one between random-feature models: a DEQ
whose weights ``A`` and ``B`` stay at their random initialisation and whose
readout alone is trained, and the shallow explicit network with the same
conjugate kernel (see :ref:`theory-matching`).  Nothing in it speaks for a DEQ
whose hidden weights are trained.  This study measures the boundary on a
regression task where trained networks and random features part ways: a steep
target along one direction of the input space,

    f(x) = tanh(k s),    s = sqrt(d) u^T x,

with inputs ``x ~ N(0, I_d / d)`` (so that ``E ||x||^2 = 1`` and ``s`` is
standard normal), a random unit direction ``u`` and sharpness ``k``.  The
contestants (``_boundary_models.BOUNDARY_MODELS``) are the readout-trained
DEQ, its matched explicit network (readout-trained), the DEQ with all weights
trained, and an explicit network with all weights trained whose width gives
it the trained DEQ's parameter count.  Errors are measured on lines through
the input distribution along ``u`` (see :func:`where_equivalence_ends`).  The
contestants are built in ``_boundary_models.py``; the result and its table
are in ``_boundary_result.py``, its figure in ``sk_deq/plotting/_boundary.py``.

``sk-deq boundary`` runs it (``--quick``: :data:`QUICK`, the small version
of ``examples/plot_where_equivalence_ends.py``); ``sk-deq boundary --out
DIR`` writes the JSON that the user guide's table and the example read
(kept as ``benchmarks/results/where_equivalence_ends.json``) and the figure.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from numbers import Integral, Real
from typing import Any

import numpy as np

from .._validation import check_bool
from ._boundary_models import (
    BOUNDARY_MODELS,
    analytic_param_counts,
    make_model,
    param_counts,
    select_alpha,
    solver_summary,
)
from ._boundary_result import BoundaryResult
from ._common import check_count, environment, progress_bar, torch_threads
from ._provenance import provenance

_OPTIMIZERS = ("lbfgs", "adam")
# Seed offset of the second readout-trained DEQ, whose distance to the first is the finite-width noise floor.
_REDRAW = 10_000


def _validate(sharpness, dims, seeds, models, explicit_layers, optimizer, sizes):
    def seq(value, name):
        if isinstance(value, (Real, str)):
            value = (value,)
        value = tuple(value)
        if not value:
            raise ValueError(f"{name} must hold at least one value.")
        if len(set(value)) != len(value):
            raise ValueError(f"{name} must be distinct, got {list(value)}.")
        return value

    sharpness = seq(sharpness, "sharpness")
    for k in sharpness:
        if isinstance(k, bool) or not isinstance(k, Real) or not (0 < k < math.inf):
            raise ValueError(f"sharpness values must be positive finite numbers, got {k!r}.")
    dims = seq(dims, "dims")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, Integral) or d < 1:
            raise ValueError(f"dims must be positive integers, got {d!r}.")
    seeds = seq(seeds, "seeds")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, Integral) or s < 0:
            raise ValueError(f"seeds must be non-negative integers, got {s!r}.")
    models = seq(models, "models")
    for m in models:
        if m not in BOUNDARY_MODELS:
            raise ValueError(f"unknown model {m!r}: use some of {', '.join(BOUNDARY_MODELS)}.")
    models = tuple(m for m in BOUNDARY_MODELS if m in models)
    if isinstance(explicit_layers, str):
        explicit_layers = (explicit_layers,)
    explicit_layers = tuple(explicit_layers)
    if not explicit_layers or not all(isinstance(a, str) for a in explicit_layers):
        raise ValueError(f"explicit_layers must name at least one activation, got {explicit_layers!r}.")
    from ..activations import get_activation

    for a in explicit_layers:
        get_activation(a)  # raises a ValueError naming the known activations
    if optimizer not in _OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(_OPTIMIZERS)}, got {optimizer!r}.")
    for name, (value, low) in sizes.items():
        check_count(value, name, low)
    return (
        tuple(float(k) for k in sharpness),
        tuple(int(d) for d in dims),
        tuple(int(s) for s in seeds),
        models,
        explicit_layers,
    )


def _problem(d, seed, n_train, n_grid, grid_radius, n_lines):
    """The direction, training inputs and test lines of one (d, seed); the target is applied later."""
    rng = np.random.default_rng([int(seed), int(d)])
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    X = rng.standard_normal((n_train, d)) / math.sqrt(d)
    # test lines: x = s u / sqrt(d) + w_j, with w_j ~ N(0, (I - u u^T) / d) (in the input distribution)
    W = rng.standard_normal((n_lines, d)) / math.sqrt(d)
    W -= np.outer(W @ u, u)
    s = np.linspace(-grid_radius, grid_radius, n_grid)
    X_test = (W[:, None, :] + s[None, :, None] * u[None, None, :] / math.sqrt(d)).reshape(-1, d)
    return u, X, X_test, s


def _fit_one(model, d, k, seed, data, opts, keep_profile, weight_seed=None):
    u, X, X_test, s_grid = data
    y = np.tanh(k * math.sqrt(d) * (X @ u))
    y_test = np.tanh(k * math.sqrt(d) * (X_test @ u))
    from ..nn.layers import DEQDivergenceError

    est = make_model(model, d, seed if weight_seed is None else weight_seed, opts)
    error = pred_test = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        try:
            est.fit(X, y)
            if model.endswith("_readout") and len(opts["alpha_readout"]) > 1:
                best = select_alpha(est, X, y, opts["alpha_readout"])
                if best != est.alpha:
                    est.set_params(alpha=best).fit(X, y)
        except DEQDivergenceError as exc:  # training moved the DEQ out of its contraction region
            error = f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - t0
        if error is None:
            pred_test = est.predict(X_test)
            pred_train = est.predict(X)
    if error is None:
        err = pred_test - y_test
        n_params, n_trainable = param_counts(est)
        metrics = {
            "linf": float(np.max(np.abs(err))),
            "l2": float(np.sqrt(np.mean(err**2))),
            "train_rmse": float(np.sqrt(np.mean((pred_train - y) ** 2))),
        }
    else:
        n_params, n_trainable = analytic_param_counts(model, d, opts)
        metrics = {"linf": None, "l2": None, "train_rmse": None}
    record = {
        "d": d,
        "sharpness": k,
        "seed": seed,
        "model": model,
        **metrics,
        "error": error,
        "baseline_l2": float(np.std(y_test)),
        "rms_to_deq_readout": None,
        "rms_redrawn_deq": None,
        "alpha": float(est.alpha),
        "fit_seconds": seconds,
        "n_hidden": int(est.n_hidden),
        "n_params": n_params,
        "n_trainable": n_trainable,
        "n_epochs": int(getattr(est, "n_iter_", 0)),
        "solver": solver_summary(getattr(est, "fixed_point_info_", None)) if error is None else None,
        "warnings": sorted({f"{type(w.message).__name__}: {w.message}" for w in caught}),
        "profile": [float(v) for v in pred_test[: len(s_grid)]] if keep_profile and error is None else None,
    }
    return record, pred_test


def where_equivalence_ends(
    sharpness=(1.0, 4.0, 16.0, 64.0),
    dims=(2, 8, 32),
    seeds=(0, 1, 2),
    *,
    n_train: int = 512,
    n_hidden: int = 32,
    n_hidden_readout: int = 1024,
    activation: str = "relu",
    sigma_a2: float = 0.2,
    explicit_layers=("relu", "relu"),
    alpha_readout=(1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2),
    alpha_trained: float = 1e-6,
    optimizer: str = "lbfgs",
    max_epochs: int = 300,
    learning_rate: float = 1e-2,
    improvement_tol: float = 1e-7,
    max_iter: int = 100,
    n_grid: int = 201,
    grid_radius: float = 2.0,
    n_lines: int = 4,
    models=BOUNDARY_MODELS,
    n_threads: int | None = 1,
    device: str = "cpu",
    dtype: str = "float32",
    progress: bool = False,
    stream=None,
) -> BoundaryResult:
    """Test errors of random-feature and fully trained DEQs and explicit nets on steep targets.

    For every input dimension ``d`` in ``dims`` and seed, draws a unit
    direction ``u``, ``n_train`` training inputs ``x ~ N(0, I_d / d)`` and
    ``n_lines`` test lines ``x = s u / sqrt(d) + w_j`` (``w_j ~ N(0, (I - u
    u^T) / d)``, so the lines run through the input distribution; ``s`` takes
    ``n_grid`` evenly spaced values in ``[-grid_radius, grid_radius]``).  For
    every sharpness ``k`` the target is ``tanh(k s)`` with ``s = sqrt(d)
    u^T x`` (standard normal on the training inputs): a smoothed step across
    the hyperplane ``u^T x = 0`` whose slope ``k`` grows.  Every model of
    ``models`` is fitted to the noiseless training targets and scored on the
    test lines: the L∞ error (largest absolute error) and the L2 error (root
    mean squared error; never above the L∞ error).  The data of one ``(d,
    seed)`` are shared by all sharpness values and models, and the seed also
    draws the networks' random weights.

    The models (:data:`BOUNDARY_MODELS`):

    - ``'deq_readout'``: :class:`~sk_deq.DEQRegressor`, random ``A`` and
      ``B``, readout solved in closed form; width ``n_hidden_readout``.
    - ``'matched_readout'``: :class:`~sk_deq.MatchedExplicitRegressor`
      (conjugate kernel matched), readout in closed form; width
      ``n_hidden_readout``.  The equivalence says these two agree.
    - ``'deq_all'``: :class:`~sk_deq.DEQRegressor` with
      ``trainable='all'`` (``A``, ``B`` and the readout, gradients by
      implicit differentiation); width ``n_hidden``, ``m^2 + m d + m + 1``
      parameters.
    - ``'explicit_all'``: :class:`~sk_deq.ExplicitRegressor` with
      ``explicit_layers`` and ``trainable='all'``, its width chosen by
      :func:`matched_width` so that its parameter count is the trained DEQ's
      (equal for two layers).

    Parameters
    ----------
    sharpness : sequence of float, default=(1, 4, 16, 64)
        Slopes ``k`` of the target at the step.
    dims : sequence of int, default=(2, 8, 32)
        Input dimensions ``d``.
    seeds : sequence of int, default=(0, 1, 2)
        One data draw and one weight draw per seed.
    n_train : int, default=512
        Training samples per ``(d, seed)``.
    n_hidden : int, default=32
        Width ``m`` of the fully trained DEQ.
    n_hidden_readout : int, default=1024
        Width of the readout-trained DEQ and matched network (the
        equivalence is a wide-network statement).
    activation : str, default='relu'
        The DEQs' activation (the matched network follows from it).
    sigma_a2 : float, default=0.2
        The DEQs' recurrent weight variance at initialisation.
    explicit_layers : sequence of str, default=('relu', 'relu')
        Activations of the fully trained explicit network.
    alpha_readout : float or sequence of float, default=(1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)
        Ridge penalty of the readout-trained models (``alpha`` of
        :class:`~sk_deq.DEQRegressor`), or candidates: then every
        readout-trained fit uses the candidate with the smallest
        leave-one-out error of the ridge readout on its training features
        (closed form, :class:`~sklearn.linear_model.RidgeCV`), so that random
        features are not handicapped by a penalty that suits another ``d``
        or ``k``.  The chosen value is recorded as ``alpha``; the selection
        is part of the fit time.
    alpha_trained : float, default=1e-6
        Readout penalty of the fully trained models (their hidden weights are
        not penalised).
    optimizer : {'lbfgs', 'adam'}, default='lbfgs'
        Optimizer of the fully trained models: full-batch L-BFGS (through the
        fixed point by implicit differentiation for the DEQ), or Adam with
        ``learning_rate``.
    max_epochs : int, default=300
        L-BFGS iterations (Adam epochs) of the fully trained models.
    learning_rate : float, default=1e-2
        Adam's step size (unused by L-BFGS).
    improvement_tol : float, default=1e-7
        Stopping tolerance of the fully trained models (gradient tolerance of
        L-BFGS); small, so that they train for ``max_epochs``.
    max_iter : int, default=100
        Fixed-point iteration budget of the DEQs.
    n_grid : int, default=201
        Points per test line.
    grid_radius : float, default=2.0
        The test lines cover ``s`` in ``[-grid_radius, grid_radius]``.
    n_lines : int, default=4
        Test lines per ``(d, seed)``.
    models : sequence of str, default=BOUNDARY_MODELS
        The models to fit (a subset of :data:`BOUNDARY_MODELS`).
    n_threads : int or None, default=1
        Torch intra-op threads and numpy's BLAS threads during the run
        (restored afterwards); None keeps the settings.  The networks are
        small: on a busy machine more threads slow the trained DEQ's fit
        down.
    device : str, default='cpu'
        Torch device of all estimators.
    dtype : {'float32', 'float64'}, default='float32'
        Precision of all estimators.
    progress : bool, default=False
        Show a one-line progress display on ``stream``.
    stream : file-like or None, default=None
        Where the progress display goes; None means ``sys.stderr``.

    Returns
    -------
    BoundaryResult
        Print it for a table; ``to_json`` for all numbers;
        :func:`sk_deq.plotting.plot_where_equivalence_ends` draws it.

    Raises
    ------
    ValueError
        For empty, repeated or non-positive sharpness values, dimensions or
        seeds, an unknown model, activation or optimizer, or a size below its
        minimum.
    TypeError
        If ``progress`` is not a bool.

    Examples
    --------
    >>> from sk_deq.experiments import where_equivalence_ends
    >>> res = where_equivalence_ends(
    ...     sharpness=[4], dims=[2], seeds=[0], n_train=64, n_hidden=8,
    ...     n_hidden_readout=64, max_epochs=5, n_grid=11, n_lines=1,
    ... )
    >>> [(r["model"], r["n_params"]) for r in res.summary()]
    [('deq_readout', 4289), ('matched_readout', 4289), ('deq_all', 89), ('explicit_all', 89)]
    >>> all(r["l2"] <= r["linf"] for r in res.records)
    True
    """
    check_bool(progress, "progress", "where_equivalence_ends")
    sharpness, dims, seeds, models, explicit_layers = _validate(
        sharpness,
        dims,
        seeds,
        models,
        explicit_layers,
        optimizer,
        {
            "n_train": (n_train, 10),
            "n_hidden": (n_hidden, 1),
            "n_hidden_readout": (n_hidden_readout, 1),
            "max_epochs": (max_epochs, 1),
            "max_iter": (max_iter, 1),
            "n_grid": (n_grid, 2),
            "n_lines": (n_lines, 1),
        },
    )
    if isinstance(grid_radius, bool) or not isinstance(grid_radius, Real) or not (0 < grid_radius < math.inf):
        raise ValueError(f"grid_radius must be a positive finite number, got {grid_radius!r}.")
    check_count(n_threads, "n_threads", allow_none=True)
    alphas = (alpha_readout,) if isinstance(alpha_readout, Real) else tuple(alpha_readout)
    if not alphas or not all(isinstance(a, Real) and not isinstance(a, bool) and 0 < a < math.inf for a in alphas):
        raise ValueError(f"alpha_readout must be a positive number or a sequence of them, got {alpha_readout!r}.")
    from ..activations import get_activation

    get_activation(activation)  # raises a ValueError naming the known activations
    opts = {
        "activation": activation,
        "sigma_a2": float(sigma_a2),
        "n_hidden": int(n_hidden),
        "n_hidden_readout": int(n_hidden_readout),
        "explicit_layers": explicit_layers,
        "alpha_readout": tuple(float(a) for a in alphas),
        "alpha_trained": float(alpha_trained),
        "optimizer": optimizer,
        "max_epochs": int(max_epochs),
        "learning_rate": float(learning_rate),
        "improvement_tol": float(improvement_tol),
        "max_iter": int(max_iter),
        "device": device,
        "dtype": dtype,
    }
    config = {
        "sharpness": list(sharpness),
        "dims": list(dims),
        "seeds": list(seeds),
        "models": list(models),
        "n_train": int(n_train),
        "n_grid": int(n_grid),
        "grid_radius": float(grid_radius),
        "n_lines": int(n_lines),
        **{k: (list(v) if isinstance(v, tuple) else v) for k, v in opts.items()},
    }
    return _run(config, opts, n_threads, progress, stream or sys.stderr)


def _run(config, opts, n_threads, progress, out) -> BoundaryResult:
    """Every fit of the checked ``config``, on ``n_threads`` torch and BLAS threads."""
    from threadpoolctl import threadpool_limits

    dims, seeds, sharpness, models = config["dims"], config["seeds"], config["sharpness"], config["models"]
    sizes = (config["n_train"], config["n_grid"], config["grid_radius"], config["n_lines"])
    # numpy's BLAS too: the readout's penalty selection works on 512 x 1024 matrices, where on a busy
    # machine more BLAS threads than one slow it down
    with torch_threads(n_threads) as threads, threadpool_limits(limits=n_threads):
        radius, n_grid = config["grid_radius"], config["n_grid"]
        result = BoundaryResult(
            config=config,
            environment=environment(threads),
            grid=[float(v) for v in np.linspace(-radius, radius, n_grid)],
            provenance=provenance(benchmark="sk-deq boundary"),
        )
        _warm_up(models, opts)  # also checks the estimators' settings before the long work
        ticker = progress_bar(len(dims) * len(seeds) * len(sharpness) * len(models), progress, out)
        try:
            for d in dims:
                for seed in seeds:
                    data = _problem(d, seed, *sizes)
                    for k in sharpness:
                        result.records.extend(_fit_cell(d, k, seed, data, opts, models, seed == seeds[0], ticker))
        finally:
            ticker.close("done")
    return result


def _fit_cell(d, k, seed, data, opts, models, keep_profile, ticker) -> list:
    """The records of every model at one (d, sharpness, seed), with their distances to the readout-trained DEQ."""
    records, ref = [], None
    for model in models:
        ticker.set_description(f"d={d} seed {seed} k={k:g}: {model}")
        rec, pred = _fit_one(model, d, k, seed, data, opts, keep_profile=keep_profile)
        if model == "deq_readout":
            ref = pred
            if "matched_readout" in models and pred is not None:
                # the finite-width noise floor: the same DEQ with other random weights
                ticker.set_description(f"d={d} seed {seed} k={k:g}: deq_readout, weights redrawn")
                _, pred2 = _fit_one(model, d, k, seed, data, opts, keep_profile=False, weight_seed=seed + _REDRAW)
                if pred2 is not None:
                    rec["rms_redrawn_deq"] = _rms(pred2 - pred)
        elif ref is not None and pred is not None:
            rec["rms_to_deq_readout"] = _rms(pred - ref)
        records.append(rec)
        ticker.update(refresh=False)
    return records


def _rms(diff) -> float:
    return float(np.sqrt(np.mean(diff**2)))


def _warm_up(models, opts):
    """Fit every model once on a few samples, untimed: imports and first calls stay out of the timings."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((24, 2)) / math.sqrt(2)
    y = np.tanh(X[:, 0])
    small = {**opts, "max_epochs": 2, "n_hidden": 4, "n_hidden_readout": 8}
    for model in models:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            make_model(model, 2, 0, small).fit(X, y)


#: The small version (``sk-deq boundary --quick``, the example's): two input dimensions, two seeds,
#: narrower networks and shorter training.
QUICK: dict[str, Any] = {
    "sharpness": (1.0, 8.0, 64.0),
    "dims": (2, 8),
    "seeds": (0, 1),
    "n_train": 256,
    "n_hidden": 16,
    "n_hidden_readout": 256,
    "max_epochs": 50,
    "n_grid": 101,
    "n_lines": 2,
}
