"""Where the equivalence ends: :func:`where_equivalence_ends`, its :class:`BoundaryResult` and its figure.

The equivalence of this package is one between random-feature models: a DEQ
whose weights ``A`` and ``B`` stay at their random initialisation and whose
readout alone is trained, and the shallow explicit network with the same
conjugate kernel (see :ref:`theory-matching`).  Nothing in it speaks for a DEQ
whose hidden weights are trained.  This experiment measures the boundary on a
regression task where trained networks and random features part ways: a steep
target along one direction of the input space,

    f(x) = tanh(k s),    s = sqrt(d) u^T x,

with inputs ``x ~ N(0, I_d / d)`` (so that ``E ||x||^2 = 1`` and ``s`` is
standard normal), a random unit direction ``u`` and sharpness ``k``.  The
contestants (:data:`BOUNDARY_MODELS`) are the readout-trained DEQ, its matched
explicit network (readout-trained), the DEQ with all weights trained, and an
explicit network with all weights trained whose width gives it the trained
DEQ's parameter count.  Errors are measured on lines through the input
distribution along ``u`` (see :func:`where_equivalence_ends`).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np

from ._common import _environment, _JSONResult, _steps, _torch_threads

# The contestants, in table order (documented in __init__).
BOUNDARY_MODELS = ("deq_readout", "matched_readout", "deq_all", "explicit_all")

_LABELS = {
    "deq_readout": "DEQ, readout",
    "matched_readout": "matched, readout",
    "deq_all": "DEQ, all weights",
    "explicit_all": "explicit, all weights",
}
_STYLES = {
    "deq_readout": {"color": "tab:blue", "marker": "o", "linestyle": "--"},
    "matched_readout": {"color": "tab:orange", "marker": "s", "linestyle": "--"},
    "deq_all": {"color": "tab:blue", "marker": "o", "linestyle": "-"},
    "explicit_all": {"color": "tab:red", "marker": "^", "linestyle": "-"},
}
_OPTIMIZERS = ("lbfgs", "adam")
# Seed offset of the second readout-trained DEQ, whose distance to the first is the finite-width noise floor.
_REDRAW = 10_000


def _mean_std(values):
    values = [float(v) for v in values]
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def deq_param_count(n_features: int, n_hidden: int) -> int:
    """Number of parameters of a DEQ with a one-output readout.

    ``A`` (``m x m``), ``B`` (``m x d``) and the readout (``m`` weights and a
    bias): ``m^2 + m d + m + 1``.

    Parameters
    ----------
    n_features : int
        Input dimension ``d``.
    n_hidden : int
        Width ``m``.

    Returns
    -------
    int
        The parameter count, trained or not.

    Examples
    --------
    >>> from sk_deq.experiments import deq_param_count
    >>> deq_param_count(8, 32)
    1313
    """
    d, m = int(n_features), int(n_hidden)
    return m * m + m * d + m + 1


def explicit_param_count(n_features: int, n_hidden: int, n_layers: int) -> int:
    """Number of parameters of an explicit network with a one-output readout.

    ``W_1`` (``w x d``), ``W_2 .. W_L`` (``w x w`` each) and the readout
    (``w`` weights and a bias); the layers have no biases.

    Parameters
    ----------
    n_features : int
        Input dimension ``d``.
    n_hidden : int
        Width ``w`` of every layer.
    n_layers : int
        Number of layers ``L``.

    Returns
    -------
    int
        ``w d + (L - 1) w^2 + w + 1``.

    Examples
    --------
    >>> from sk_deq.experiments import explicit_param_count
    >>> explicit_param_count(8, 32, 2)  # two layers of the DEQ's width: the DEQ's count
    1313
    """
    d, w, L = int(n_features), int(n_hidden), int(n_layers)
    return w * d + (L - 1) * w * w + w + 1


def matched_width(n_features: int, n_hidden: int, n_layers: int) -> int:
    """Width of an ``n_layers``-layer explicit network with about the DEQ's parameter count.

    Parameters
    ----------
    n_features : int
        Input dimension ``d``.
    n_hidden : int
        Width ``m`` of the DEQ.
    n_layers : int
        Number of layers of the explicit network.

    Returns
    -------
    int
        The width ``w >= 1`` whose :func:`explicit_param_count` is closest to
        :func:`deq_param_count` (the smaller one on a tie).  With two layers
        it is ``m`` and the counts are equal.

    Examples
    --------
    >>> from sk_deq.experiments import matched_width
    >>> matched_width(8, 32, 2), matched_width(8, 32, 1)
    (32, 146)
    """
    target = deq_param_count(n_features, n_hidden)
    d, L = int(n_features), int(n_layers)
    if L == 1:
        w = max(1, round((target - 1) / (d + 1)))
    else:  # the positive root of (L-1) w^2 + (d+1) w + 1 = target
        a, b = L - 1, d + 1
        w = max(1, round((-b + math.sqrt(b * b + 4 * a * (target - 1))) / (2 * a)))
    cands = [c for c in (w - 1, w, w + 1) if c >= 1]
    return min(cands, key=lambda c: (abs(explicit_param_count(d, c, L) - target), c))


# ---------------------------------------------------------------------------
# the result


@dataclass
class BoundaryResult(_JSONResult):
    """Outcome of :func:`where_equivalence_ends`.

    Every parameter is stored as an attribute of the same name.
    ``str(result)`` is :meth:`format_table`.

    Parameters
    ----------
    config : dict
        The arguments of the run (sharpness values, dimensions, seeds, sizes,
        training settings, the models).
    environment : dict
        Versions of Python, torch, numpy and scikit-learn, the machine and the
        number of torch threads.
    grid : list of float
        The positions ``s`` along the direction ``u`` where the errors are
        measured (the same on every test line).
    records : list of dict, default=[]
        One entry per fit: ``d``, ``sharpness``, ``seed``, ``model``,
        ``linf`` (largest absolute error on the test lines), ``l2`` (root
        mean squared error on them), ``train_rmse`` (these three None when
        the fit failed), ``error`` (None, or the message of the error that
        stopped the fit: a :class:`~sk_deq.nn.DEQDivergenceError` when
        training moved a DEQ's fixed-point map out of its contraction
        region), ``baseline_l2`` (root
        mean squared error of the best constant on the test lines),
        ``rms_to_deq_readout`` (root mean squared difference between this
        model's and the readout-trained DEQ's predictions on the test lines;
        None for the DEQ itself or without it), ``rms_redrawn_deq`` (for
        the readout-trained DEQ, when the matched network is in the run: the
        same difference between it and the same DEQ with other random
        weights, seed ``seed + 10000``, the finite-width noise floor of the
        comparison; else None), ``alpha`` (readout penalty), ``fit_seconds``,
        ``n_hidden`` (width), ``n_params`` (all parameters of the fitted
        torch module), ``n_trainable`` (those trained), ``n_epochs``,
        ``solver`` (DEQs: forward and, when trained, adjoint fixed-point
        diagnostics of the fit; else None), ``warnings`` (messages raised
        during fit and predict) and ``profile`` (predictions on the first
        test line, for the first seed; else None).
    """

    config: dict
    environment: dict
    grid: list
    records: list = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict) -> BoundaryResult:
        """Rebuild a result from :meth:`to_dict` (e.g. read back from JSON).

        Parameters
        ----------
        data : dict
            The output of :meth:`to_dict` (``summary`` is recomputed and
            ignored).

        Returns
        -------
        BoundaryResult
            The result with the same ``config``, ``environment``, ``grid``
            and ``records``.
        """
        return cls(
            config=dict(data["config"]),
            environment=dict(data["environment"]),
            grid=list(data["grid"]),
            records=list(data["records"]),
        )

    def summary(self) -> list:
        """Aggregate the seeds: one row per (d, sharpness, model).

        Returns
        -------
        list of dict
            In the order of ``config``: ``d``, ``sharpness``, ``model``,
            ``linf_mean``, ``linf_std``, ``l2_mean``, ``l2_std`` (sample
            standard deviations over the seeds, 0 for one seed), ``linf`` and
            ``l2`` (one per seed), ``train_rmse_mean``,
            ``rms_to_deq_readout_mean`` and ``rms_redrawn_deq_mean`` (NaN
            where not recorded),
            ``baseline_l2_mean``, ``fit_seconds_median``, ``n_hidden``,
            ``n_params``, ``n_trainable``, ``solver_converged`` (whether every
            fixed-point solve of every seed's fit reached its tolerance; None
            for explicit networks), ``n_seeds`` (fits that completed; the
            means are over them) and ``n_failed`` (fits that stopped with an
            error).
        """
        rows = []
        for d in self.config["dims"]:
            for k in self.config["sharpness"]:
                for model in self.config["models"]:
                    recs = sorted(
                        (r for r in self.records if r["d"] == d and r["sharpness"] == k and r["model"] == model),
                        key=lambda r: r["seed"],
                    )
                    if not recs:
                        continue
                    failed = [r for r in recs if r.get("error")]
                    recs = [r for r in recs if not r.get("error")]
                    linf_mean, linf_std = _mean_std(r["linf"] for r in recs)
                    l2_mean, l2_std = _mean_std(r["l2"] for r in recs)
                    gaps = [r["rms_to_deq_readout"] for r in recs if r["rms_to_deq_readout"] is not None]
                    redrawn = [r["rms_redrawn_deq"] for r in recs if r.get("rms_redrawn_deq") is not None]
                    solvers = [r["solver"] for r in recs if r["solver"]]
                    rows.append(
                        {
                            "d": d,
                            "sharpness": k,
                            "model": model,
                            "linf_mean": linf_mean,
                            "linf_std": linf_std,
                            "l2_mean": l2_mean,
                            "l2_std": l2_std,
                            "linf": [r["linf"] for r in recs],
                            "l2": [r["l2"] for r in recs],
                            "train_rmse_mean": _mean_std(r["train_rmse"] for r in recs)[0],
                            "rms_to_deq_readout_mean": _mean_std(gaps)[0],
                            "rms_redrawn_deq_mean": _mean_std(redrawn)[0],
                            "baseline_l2_mean": _mean_std(r["baseline_l2"] for r in recs or failed)[0],
                            "fit_seconds_median": (
                                statistics.median(r["fit_seconds"] for r in recs) if recs else math.nan
                            ),
                            "n_hidden": (recs or failed)[0]["n_hidden"],
                            "n_params": (recs or failed)[0]["n_params"],
                            "n_trainable": (recs or failed)[0]["n_trainable"],
                            "solver_converged": (all(s["converged"] for s in solvers) if solvers else None),
                            "n_seeds": len(recs),
                            "n_failed": len(failed),
                        }
                    )
        return rows

    def to_dict(self) -> dict:
        """All numbers of the run as a JSON-serialisable dict (``summary`` included).

        Returns
        -------
        dict
            ``config``, ``environment``, ``grid``, ``summary``
            (:meth:`summary`) and ``records``.
            :func:`plot_where_equivalence_ends` accepts it in place of the
            result, and :meth:`from_dict` turns it back into one.
        """
        return {
            "config": self.config,
            "environment": self.environment,
            "grid": self.grid,
            "summary": self.summary(),
            "records": self.records,
        }

    def format_table(self) -> str:
        """The results as a readable text table.

        Returns
        -------
        str
            The training settings; per input dimension the widths and
            parameter counts of the models, then one line per sharpness with
            every model's L∞ and L2 test error (mean ± standard deviation over
            the seeds), the constant predictor's L2 error and the root mean
            squared difference between the readout-trained DEQ's and the
            matched network's predictions, and between two draws of the
            readout-trained DEQ's random weights; then the fixed-point convergence
            of the DEQ fits and the distinct warnings.
        """
        cfg = self.config
        rows = self.summary()
        models = cfg["models"]
        n_seeds = len(cfg["seeds"])
        spread = f"mean ± std over {n_seeds} seeds" if n_seeds > 1 else "one seed"
        lines = [
            f"Steep target tanh(k s), s = sqrt(d) u^T x, x ~ N(0, I/d); {cfg['n_train']} training samples; "
            f"errors on {cfg['n_lines']} lines along u, s in [-{cfg['grid_radius']:g}, {cfg['grid_radius']:g}] "
            f"({cfg['n_grid']} points each); L∞ / L2, {spread}.",
            f"{cfg['activation']}-DEQ, sigma_a2={cfg['sigma_a2']:g}.  Readout-trained: width "
            f"{cfg['n_hidden_readout']}, closed-form ridge readout, alpha "
            + (
                f"{cfg['alpha_readout'][0]:g}"
                if len(cfg["alpha_readout"]) == 1
                else f"chosen by leave-one-out error from {', '.join(f'{a:g}' for a in cfg['alpha_readout'])}"
            )
            + ".  "
            f"All weights trained: {cfg['optimizer']}, {cfg['max_epochs']} "
            f"{'iterations' if cfg['optimizer'] == 'lbfgs' else 'epochs'}"
            + (f", learning rate {cfg['learning_rate']:g}" if cfg["optimizer"] != "lbfgs" else "")
            + f", alpha={cfg['alpha_trained']:g}; explicit layers {'-'.join(cfg['explicit_layers'])}.",
        ]
        width = 22
        for d in cfg["dims"]:
            block = [r for r in rows if r["d"] == d]
            if not block:
                continue
            lines.append("")
            sizes = []
            for model in models:
                r = next((x for x in block if x["model"] == model), None)
                if r is not None:
                    sizes.append(f"{_LABELS[model]} m={r['n_hidden']} ({r['n_trainable']:,} of {r['n_params']:,})")
            lines.append(f"d = {d}: width (trained of all parameters): " + "; ".join(sizes))
            head = (
                f"{'k':>5} | "
                + " ".join(f"{_LABELS[m]:>{width}}" for m in models)
                + " | constant | DEQ-matched | DEQ-DEQ'"
            )
            lines.append(head)
            lines.append("-" * len(head))
            for k in cfg["sharpness"]:
                cells = []
                base = math.nan
                for model in models:
                    r = next((x for x in block if x["model"] == model and x["sharpness"] == k), None)
                    if r is None:
                        cells.append(f"{'-':>{width}}")
                        continue
                    base = r["baseline_l2_mean"]
                    if not r["n_seeds"]:
                        cells.append("failed".rjust(width))
                        continue
                    mark = "*" if r["n_failed"] else ""
                    cells.append(f"{mark}{r['linf_mean']:.2f}±{r['linf_std']:.2f} / {r['l2_mean']:.3f}".rjust(width))
                gap = next(
                    (
                        x["rms_to_deq_readout_mean"]
                        for x in block
                        if x["model"] == "matched_readout" and x["sharpness"] == k
                    ),
                    math.nan,
                )
                floor = next(
                    (x["rms_redrawn_deq_mean"] for x in block if x["model"] == "deq_readout" and x["sharpness"] == k),
                    math.nan,
                )
                lines.append(f"{k:>5g} | " + " ".join(cells) + f" | {base:>8.3f} | {gap:>11.3f} | {floor:>8.3f}")
        if any(r["model"] == "matched_readout" and r["rms_to_deq_readout"] is not None for r in self.records):
            lines.append("")
            lines.append(
                "constant: L2 error of the best constant; DEQ-matched: root mean squared difference between the "
                "predictions of the readout-trained DEQ and of its matched network on the test lines (mean over seeds); "
                "DEQ-DEQ': the same between the readout-trained DEQ and the same DEQ with other random weights."
            )
        failed = [r for r in self.records if r.get("error")]
        if failed:
            lines.append(
                f"{len(failed)} fit(s) stopped with an error (marked * where other seeds completed; the means are "
                "over those): "
                + "; ".join(f"{r['model']} d={r['d']} k={r['sharpness']:g} seed {r['seed']}" for r in failed)
                + "."
            )
            lines.extend(f"  - {e}" for e in sorted({r["error"] for r in failed}))
        deq = [r for r in self.records if r["solver"]]
        if deq:
            bad = [r for r in deq if not r["solver"]["converged"]]
            trained = [r["solver"] for r in deq if "adjoint" in r["solver"]]
            text = (
                f"DEQ fixed points: {len(deq) - len(bad)} of {len(deq)} fits had every forward"
                + (" and adjoint" if trained else "")
                + " solve within tol"
            )
            if trained:
                text += (
                    f"; trained DEQs: mean {statistics.fmean(s['mean_iter'] for s in trained):.1f} forward, "
                    f"{statistics.fmean(s['adjoint']['mean_iter'] for s in trained):.1f} adjoint iterations "
                    "per sample"
                )
            lines.append(text + ".")
        warned = sorted({w for r in self.records for w in r["warnings"]})
        if warned:
            lines.append(f"{len(warned)} distinct warning(s) during the fits:")
            lines.extend(f"  - {w}" for w in warned)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format_table()


# ---------------------------------------------------------------------------
# running


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
        if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
            raise ValueError(f"{name} must be an integer of at least {low}, got {value!r}.")
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


def _make(model, d, seed, opts):
    from ..estimators import DEQRegressor, ExplicitRegressor, MatchedExplicitRegressor

    common = {"random_state": int(seed), "device": opts["device"], "dtype": opts["dtype"]}
    readout = {"n_hidden": opts["n_hidden_readout"], "alpha": opts["alpha_readout"][0], **common}
    trained = {
        "trainable": "all",
        "optimizer": opts["optimizer"],
        "max_epochs": opts["max_epochs"],
        "learning_rate": opts["learning_rate"],
        "alpha": opts["alpha_trained"],
        "improvement_tol": opts["improvement_tol"],
        **common,
    }
    act, sa2 = opts["activation"], opts["sigma_a2"]
    if model == "deq_readout":
        return DEQRegressor(act, sa2, max_iter=opts["max_iter"], **readout)
    if model == "matched_readout":
        return MatchedExplicitRegressor(act, sa2, kernel="ck", **readout)
    if model == "deq_all":
        return DEQRegressor(act, sa2, n_hidden=opts["n_hidden"], max_iter=opts["max_iter"], **trained)
    layers = opts["explicit_layers"]
    width = matched_width(d, opts["n_hidden"], len(layers))
    return ExplicitRegressor(layers, n_hidden=width, **trained)


def _counts(est):
    """All parameters of the fitted torch module, and those that training changed."""
    module = est.module_
    total = sum(p.numel() for p in module.parameters())
    hidden = sum(p.numel() for p in module.features.parameters() if p.requires_grad)
    readout = sum(p.numel() for p in module.readout.parameters())
    return int(total), int(hidden + readout)


def _analytic_counts(model, d, opts):
    """Parameter counts of a model whose fit failed (no module to count): all, and those trained."""
    if model == "deq_all":
        n = deq_param_count(d, opts["n_hidden"])
        return n, n
    if model == "explicit_all":
        L = len(opts["explicit_layers"])
        n = explicit_param_count(d, matched_width(d, opts["n_hidden"], L), L)
        return n, n
    m = opts["n_hidden_readout"]  # a readout-trained DEQ that diverged already at initialisation
    return (deq_param_count(d, m) if model == "deq_readout" else None), m + 1


def _solver_summary(info):
    if not info:
        return None
    out = {
        "converged": bool(info["converged"]),
        "mean_iter": float(info["mean_iter"]),
        "n_iter": int(info["n_iter"]),
        "rel_residual": float(info["rel_residual"]),
        "n_solves": int(info["n_solves"]),
    }
    adj = info.get("adjoint")
    if adj:
        out["adjoint"] = {
            "converged": bool(adj["converged"]),
            "mean_iter": float(adj["mean_iter"]),
            "n_iter": int(adj["n_iter"]),
            "rel_residual": float(adj["rel_residual"]),
        }
        out["converged"] = out["converged"] and out["adjoint"]["converged"]
    return out


def _select_alpha(est, X, y, alphas):
    """The readout penalty of ``alphas`` with the smallest leave-one-out error on ``est``'s training features.

    The readout of a fitted readout-trained regressor is ridge regression
    with penalty ``n_samples * alpha`` on its features (with an intercept;
    the target scaling does not change which penalty wins), so
    :class:`~sklearn.linear_model.RidgeCV`'s closed-form leave-one-out error
    on the features ranks the penalties without refitting the network.
    """
    from sklearn.linear_model import RidgeCV

    Z = est.features(X)
    # the n x n Gram matrix's eigendecomposition when there are fewer samples than features (what is
    # cheaper; the 'auto' mode took the SVD of the 512 x 1024 features, 20 times slower)
    mode = "eigen" if Z.shape[0] <= Z.shape[1] else "svd"
    cv = RidgeCV(alphas=[len(y) * a for a in alphas], gcv_mode=mode).fit(Z, y)
    return float(alphas[int(np.argmin(np.abs(np.asarray(alphas) * len(y) - cv.alpha_)))])


def _fit_one(model, d, k, seed, data, opts, keep_profile, weight_seed=None):
    u, X, X_test, s_grid = data
    y = np.tanh(k * math.sqrt(d) * (X @ u))
    y_test = np.tanh(k * math.sqrt(d) * (X_test @ u))
    from ..nn.deq import DEQDivergenceError

    est = _make(model, d, seed if weight_seed is None else weight_seed, opts)
    error = pred_test = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        try:
            est.fit(X, y)
            if model.endswith("_readout") and len(opts["alpha_readout"]) > 1:
                best = _select_alpha(est, X, y, opts["alpha_readout"])
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
        n_params, n_trainable = _counts(est)
        metrics = {
            "linf": float(np.max(np.abs(err))),
            "l2": float(np.sqrt(np.mean(err**2))),
            "train_rmse": float(np.sqrt(np.mean((pred_train - y) ** 2))),
        }
    else:
        n_params, n_trainable = _analytic_counts(model, d, opts)
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
        "solver": _solver_summary(getattr(est, "solver_info_", None)) if error is None else None,
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
        small: on a busy 2-core machine two threads made the trained DEQ's
        fit several times slower.
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
        :func:`plot_where_equivalence_ends` draws it.

    Raises
    ------
    ValueError
        For empty, repeated or non-positive sharpness values, dimensions or
        seeds, an unknown model, activation or optimizer, or a size below its
        minimum.

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
    if n_threads is not None and (isinstance(n_threads, bool) or not isinstance(n_threads, Integral) or n_threads < 1):
        raise ValueError(f"n_threads must be None or a positive integer, got {n_threads!r}.")
    alphas = (alpha_readout,) if isinstance(alpha_readout, Real) else tuple(alpha_readout)
    if not alphas or not all(isinstance(a, Real) and not isinstance(a, bool) and 0 < a < math.inf for a in alphas):
        raise ValueError(f"alpha_readout must be a positive number or a sequence of them, got {alpha_readout!r}.")
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
    from ..activations import get_activation

    get_activation(activation)  # raises a ValueError naming the known activations
    out = stream or sys.stderr
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
    from threadpoolctl import threadpool_limits

    # numpy's BLAS too: the readout's penalty selection works on 512 x 1024 matrices, where on a busy
    # 2-core machine two BLAS threads made it ten times slower than one
    with _torch_threads(n_threads) as threads, threadpool_limits(limits=n_threads):
        result = BoundaryResult(
            config=config,
            environment=_environment(threads),
            grid=[float(v) for v in np.linspace(-grid_radius, grid_radius, n_grid)],
        )
        _warm_up(models, opts)  # also checks the estimators' settings before the long work
        ticker = _steps(len(dims) * len(seeds) * len(sharpness) * len(models), progress, out)
        try:
            for d in dims:
                for seed in seeds:
                    data = _problem(d, seed, int(n_train), int(n_grid), float(grid_radius), int(n_lines))
                    for k in sharpness:
                        ref = None
                        for model in models:
                            ticker.set_description(f"d={d} seed {seed} k={k:g}: {model}")
                            rec, pred = _fit_one(model, d, k, seed, data, opts, keep_profile=seed == seeds[0])
                            if model == "deq_readout":
                                ref = pred
                                if "matched_readout" in models and pred is not None:
                                    # the finite-width noise floor: the same DEQ with other random weights
                                    ticker.set_description(f"d={d} seed {seed} k={k:g}: deq_readout, weights redrawn")
                                    _, pred2 = _fit_one(
                                        model, d, k, seed, data, opts, keep_profile=False, weight_seed=seed + _REDRAW
                                    )
                                    if pred2 is not None:
                                        rec["rms_redrawn_deq"] = float(np.sqrt(np.mean((pred2 - pred) ** 2)))
                            elif ref is not None and pred is not None:
                                rec["rms_to_deq_readout"] = float(np.sqrt(np.mean((pred - ref) ** 2)))
                            result.records.append(rec)
                            ticker.update(refresh=False)
        finally:
            ticker.close("done")
    return result


def _warm_up(models, opts):
    """Fit every model once on a few samples, untimed: imports and first calls stay out of the timings."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((24, 2)) / math.sqrt(2)
    y = np.tanh(X[:, 0])
    small = {**opts, "max_epochs": 2, "n_hidden": 4, "n_hidden_readout": 8}
    for model in models:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _make(model, 2, 0, small).fit(X, y)


# ---------------------------------------------------------------------------
# the figure


def _parts(result):
    if isinstance(result, BoundaryResult):
        return result.summary(), result.config, result.grid, result.records
    if isinstance(result, dict) and {"config", "grid", "records"} <= set(result):
        res = BoundaryResult.from_dict(result)
        return res.summary(), res.config, res.grid, res.records
    raise TypeError(
        f"result must be a BoundaryResult or its to_dict(), got {type(result).__name__}: "
        "use the output of sk_deq.experiments.where_equivalence_ends."
    )


def plot_where_equivalence_ends(result, *, show_profiles: bool = True, axes=None, title: str | None = None):
    """L∞ and L2 test error versus sharpness, one column per input dimension.

    Every panel shows the models of the run versus the sharpness ``k`` (log
    scales), the mean over the seeds with a bar of one standard deviation;
    dashed lines are the readout-trained models, solid lines the fully
    trained ones, and a grey line the best constant's L2 error.  With
    ``show_profiles`` a third row shows, at the largest sharpness, the target
    and every model's prediction along the first test line of the first seed.

    Parameters
    ----------
    result : BoundaryResult or dict
        From :func:`where_equivalence_ends`, or its ``to_dict()`` (e.g. read
        back from JSON).
    show_profiles : bool, default=True
        Add the row of profiles along ``u``.
    axes : array of matplotlib Axes, optional
        Axes to draw into, shape ``(n_rows, n_dims)`` with ``n_rows`` 3 if
        ``show_profiles`` else 2.  A new figure is made when None.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    TypeError
        If ``result`` is neither a :class:`BoundaryResult` nor its
        ``to_dict()``.
    ValueError
        If ``result`` holds no measurements.
    """
    from ..plotting import _panel_axes, require_matplotlib

    plt = require_matplotlib()
    rows, config, grid, records = _parts(result)
    dims = [d for d in config["dims"] if any(r["d"] == d for r in rows)]
    if not dims:
        raise ValueError("result holds no measurements to plot.")
    n_rows = 3 if show_profiles else 2
    fig, axes = _panel_axes(plt, axes, n_rows, len(dims), size=(3.7, 2.9), sharex=False)
    k_max = max(config["sharpness"])
    for j, d in enumerate(dims):
        block = [r for r in rows if r["d"] == d]
        for i, (metric, name) in enumerate((("linf", "L∞ error"), ("l2", "L2 error"))):
            ax = axes[i, j]
            for model in config["models"]:
                mr = sorted((r for r in block if r["model"] == model), key=lambda r: r["sharpness"])
                if not mr:
                    continue
                ax.errorbar(
                    [r["sharpness"] for r in mr],
                    [r[f"{metric}_mean"] for r in mr],
                    yerr=[r[f"{metric}_std"] for r in mr],
                    label=_LABELS[model],
                    capsize=3,
                    markersize=4,
                    **_STYLES[model],
                )
            if metric == "l2":
                base = sorted({(r["sharpness"], r["baseline_l2_mean"]) for r in block})
                ax.plot([b[0] for b in base], [b[1] for b in base], color="0.6", lw=1, label="best constant")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if i == 0:
                ax.set_title(f"d = {d}")
            if j == 0:
                ax.set_ylabel(f"test {name}")
            ax.set_xlabel("sharpness k")
        if show_profiles:
            ax = axes[2, j]
            s = np.asarray(grid)
            ax.plot(s, np.tanh(k_max * s), color="k", lw=1.5, label=f"target tanh({k_max:g} s)")
            first = config["seeds"][0]
            for model in config["models"]:
                rec = next(
                    (
                        r
                        for r in records
                        if r["d"] == d and r["sharpness"] == k_max and r["model"] == model and r["seed"] == first
                    ),
                    None,
                )
                if rec is None or rec["profile"] is None:
                    continue
                style = {k: v for k, v in _STYLES[model].items() if k != "marker"}
                ax.plot(s, rec["profile"], lw=1.2, label=_LABELS[model], **style)
            ax.set_xlabel("s = sqrt(d) u·x along a test line")
            if j == 0:
                ax.set_ylabel(f"prediction, k = {k_max:g}")
            ax.set_ylim(-1.6, 1.6)
            ax.grid(True, alpha=0.3)
    handles, labels = axes[1, 0].get_legend_handles_labels()
    if show_profiles:
        h2, l2 = axes[2, 0].get_legend_handles_labels()
        handles, labels = handles + h2[:1], labels + l2[:1]
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 6), fontsize="small")
    if title:
        fig.suptitle(title)
    return fig
