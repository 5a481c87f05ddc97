"""The contestants of the study of where the equivalence ends: how they are built, tuned and counted.

:func:`make_model` builds one of :data:`BOUNDARY_MODELS`;
:func:`deq_param_count`, :func:`explicit_param_count` and :func:`matched_width`
give the trained explicit network the trained DEQ's parameter count.  The
study itself is in ``_boundary.py``.
"""

from __future__ import annotations

import math

import numpy as np

#: The four contestants, in table order: the readout-trained DEQ and its matched network, the DEQ with
#: all weights trained and an explicit network with all weights trained.
BOUNDARY_MODELS = ("deq_readout", "matched_readout", "deq_all", "explicit_all")


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
    >>> from sk_deq.experiments._boundary_models import deq_param_count
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
    >>> from sk_deq.experiments._boundary_models import explicit_param_count
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
    >>> from sk_deq.experiments._boundary_models import matched_width
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
# running


def make_model(model, d, seed, opts):
    """The estimator of ``model`` (one of :data:`BOUNDARY_MODELS`) for inputs of dimension ``d``, seeded by ``seed``."""
    from sk_deq.estimators import DEQRegressor, ExplicitRegressor, MatchedExplicitRegressor

    common = {"random_state": int(seed), "device": opts["device"], "dtype": opts["dtype"]}
    readout = {"n_hidden": opts["n_hidden_readout"], "alpha": opts["alpha_readout"][0], **common}
    trained = {
        "trainable": "all",
        "solver": opts["optimizer"],
        "max_iter": opts["max_epochs"],
        "learning_rate_init": opts["learning_rate"],
        "alpha": opts["alpha_trained"],
        "tol": opts["improvement_tol"],
        **common,
    }
    act, sa2 = opts["activation"], opts["sigma_a2"]
    if model == "deq_readout":
        return DEQRegressor(act, sa2, fixed_point_max_iter=opts["max_iter"], **readout)
    if model == "matched_readout":
        return MatchedExplicitRegressor(act, sa2, kernel="ck", **readout)
    if model == "deq_all":
        return DEQRegressor(act, sa2, n_hidden=opts["n_hidden"], fixed_point_max_iter=opts["max_iter"], **trained)
    layers = opts["explicit_layers"]
    width = matched_width(d, opts["n_hidden"], len(layers))
    return ExplicitRegressor(layers, n_hidden=width, **trained)


def param_counts(est):
    """All parameters of the fitted torch module, and those that training changed."""
    module = est.module_
    total = sum(p.numel() for p in module.parameters())
    hidden = sum(p.numel() for p in module.features.parameters() if p.requires_grad)
    readout = sum(p.numel() for p in module.readout.parameters())
    return int(total), int(hidden + readout)


def analytic_param_counts(model, d, opts):
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


def solver_summary(info):
    """The fixed-point diagnostics of a DEQ's fit (and of its adjoint solves, when trained) as plain numbers."""
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


def select_alpha(est, X, y, alphas):
    """The readout penalty of ``alphas`` with the smallest leave-one-out error on ``est``'s training features.

    The readout of a fitted readout-trained regressor is ridge regression
    with penalty ``n_samples * alpha`` on its features (with an intercept;
    the target scaling does not change which penalty wins), so
    :class:`~sklearn.linear_model.RidgeCV`'s closed-form leave-one-out error
    on the features ranks the penalties without refitting the network.
    """
    from sklearn.linear_model import RidgeCV

    Z = est.features(X)
    # the n x n Gram matrix's eigendecomposition when there are fewer samples than features (the
    # cheaper one; the 'auto' mode takes the SVD of the 512 x 1024 features, much slower)
    mode = "eigen" if Z.shape[0] <= Z.shape[1] else "svd"
    cv = RidgeCV(alphas=[len(y) * a for a in alphas], gcv_mode=mode).fit(Z, y)
    return float(alphas[int(np.argmin(np.abs(np.asarray(alphas) * len(y) - cv.alpha_)))])
