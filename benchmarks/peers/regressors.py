"""The regressors against kernel ridge on the implicit CK and an MLP, by 5-fold cross-validation.

Data:

``diabetes``
    scikit-learn's ``load_diabetes`` (442 samples, 10 features).
``friedman1``
    ``make_friedman1(n_samples=2000, noise=1.0, random_state=0)`` (10
    features, 5 of them irrelevant).
``gmm``
    A Gaussian mixture of the paper's kind (``make_gaussian_mixture``, 3
    classes, ``n_features=400``, 1,500 samples, ``mean_norm=2``: the classes
    overlap, a DEQ classifies 85 % of them) with a real target: the class
    index plus Gaussian noise of standard deviation 0.25.  Here the question
    is the equivalence, not the best model: the DEQ, its matched network and
    a plain ReLU layer, each at its default ``alpha`` (no search), as
    regressors on the real target and as classifiers on the labels, on the
    same 2 x 5 stratified folds, with new weights on every fold
    (``fold_seed=0``).  The DEQ-vs-matched gap of the regressors (in R²) is
    set against that of the classifiers (in accuracy).

Contestants on ``diabetes`` and ``friedman1`` (ReLU, ``sigma_a2 = 0.2``,
width 1,024 for the networks), each with its penalty chosen by an inner
3-fold ``GridSearchCV`` on every outer training fold (nested
cross-validation, so no score is tuned on its own test fold):

``deq``, ``matched``, ``plain``
    ``DEQRegressor``, ``MatchedExplicitRegressor`` (CK matching) and
    ``ExplicitRegressor(("relu",))``; ``alpha`` in 1e-5 ... 1e-2.
``krr_ck``
    ``ImplicitCKTransformer`` (the exact implicit CK of the same DEQ) and
    ``KernelRidge(kernel="precomputed")``, on standardised targets
    (``TransformedTargetRegressor``: kernel ridge has no intercept);
    ``alpha`` in 1e-3 ... 10.
``mlp``
    ``StandardScaler`` + ``MLPRegressor`` (one hidden layer of 256, Adam,
    early stopping on 10 % of the training fold, ``max_iter=1000``), on
    standardised targets; ``alpha`` in 1e-4 ... 1.

Every contestant sees the same outer folds (``KFold(5, shuffle=True,
random_state=0)``) through :func:`sk_deq.model_selection.compare_estimators`,
which also gives the Nadeau–Bengio corrected t-test of every pair.  Scores
are R² (accuracy for the classifiers on ``gmm``).

Usage::

    python -m benchmarks.peers regressors             # the figures in the user guide
    python -m benchmarks.peers regressors --quick     # small data, width 128, 3 outer and 2 inner folds
    python -m benchmarks.peers regressors --json regression.json

Without ``--json`` a full run writes ``benchmarks/results/regression.json``
(the user guide's figures); ``--repeats`` is accepted and unused (the folds
are the repeats).
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from .._harness import parser, write_json
from sklearn.compose import TransformedTargetRegressor
from sklearn.datasets import load_diabetes, make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import GridSearchCV, KFold, RepeatedStratifiedKFold
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sk_deq import (
    DEQClassifier,
    DEQRegressor,
    ExplicitClassifier,
    ExplicitRegressor,
    ImplicitCKTransformer,
    MatchedExplicitClassifier,
    MatchedExplicitRegressor,
    make_gaussian_mixture,
)
from sk_deq.model_selection import compare_estimators

RESULTS = Path(__file__).resolve().parents[1] / "results"
NET_ALPHAS = [1e-5, 1e-4, 1e-3, 1e-2]


def _datasets(quick: bool) -> dict:
    X_d, y_d = load_diabetes(return_X_y=True)
    n_f = 400 if quick else 2000
    X_f, y_f = make_friedman1(n_samples=n_f, noise=1.0, random_state=0)
    return {"diabetes": (X_d, y_d), "friedman1": (X_f, y_f)}


def _mixture(quick: bool):
    n, p = (300, 100) if quick else (1500, 400)
    X, labels = make_gaussian_mixture(n, p, 3, mean_norm=2.0, random_state=0)
    y = labels + 0.25 * np.random.default_rng(0).standard_normal(n)
    return X, y, labels


def _contestants(width: int, inner: int) -> dict:
    def net(cls, *args):
        return GridSearchCV(cls(*args, n_hidden=width, random_state=0), {"alpha": NET_ALPHAS}, cv=inner)

    krr = TransformedTargetRegressor(
        make_pipeline(ImplicitCKTransformer("relu", 0.2), KernelRidge(kernel="precomputed")),
        transformer=StandardScaler(),
    )
    mlp = TransformedTargetRegressor(
        make_pipeline(
            StandardScaler(),
            MLPRegressor(hidden_layer_sizes=(256,), early_stopping=True, max_iter=1000, random_state=0),
        ),
        transformer=StandardScaler(),
    )
    return {
        "deq": net(DEQRegressor),
        "matched": net(MatchedExplicitRegressor),
        "plain": net(ExplicitRegressor, ("relu",)),
        "krr_ck": GridSearchCV(krr, {"regressor__kernelridge__alpha": [1e-3, 1e-2, 1e-1, 1.0, 10.0]}, cv=inner),
        "mlp": GridSearchCV(mlp, {"regressor__mlpregressor__alpha": [1e-4, 1e-2, 1.0]}, cv=inner),
    }


def _equivalence_models(width: int, task: str) -> dict:
    """DEQ, matched and plain network at their default penalties."""
    deq, matched, plain = (
        (DEQRegressor, MatchedExplicitRegressor, ExplicitRegressor)
        if task == "regressor"
        else (DEQClassifier, MatchedExplicitClassifier, ExplicitClassifier)
    )
    return {
        "deq": deq(n_hidden=width, random_state=0),
        "matched": matched(n_hidden=width, random_state=0),
        "plain": plain(("relu",), n_hidden=width, random_state=0),
    }


def _summary(result) -> dict:
    out = result.to_dict()
    deq_matched = result.test("deq", "matched")
    out["deq_vs_matched"] = {
        "difference": float(deq_matched.mean_difference),
        "p_value": float(deq_matched.pvalue),
    }
    return out


def collect(quick: bool = False, repeats: int = 1, parts=("cv", "gmm")) -> dict:
    """Nested cross-validation of every contestant on every data set.

    Parameters
    ----------
    quick : bool, default=False
        Small data, width 128, 3 outer and 2 inner folds.
    repeats : int, default=1
        Unused (the folds are the repeats); kept for ``run_all``.
    parts : sequence of {'cv', 'gmm'}, default=('cv', 'gmm')
        The nested cross-validation on ``diabetes`` and ``friedman1``, the
        equivalence runs on the mixture, or both.

    Returns
    -------
    dict
        ``config``; under ``data``, per data set, the
        :meth:`ComparisonResult.to_dict` of the regressors with the
        DEQ-vs-matched difference and p-value; under ``gmm``, the same for
        the equivalence runs of the regressors and the classifiers.
    """
    del repeats
    width, outer, inner = (128, 3, 2) if quick else (1024, 5, 3)
    torch.set_num_threads(1)
    out = {"config": {"quick": quick, "width": width, "outer_folds": outer, "inner_folds": inner}, "data": {}}
    for name, (X, y) in _datasets(quick).items() if "cv" in parts else ():
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # the MLP's inner fits at small alpha
            reg = compare_estimators(
                _contestants(width, inner), X, y, cv=KFold(outer, shuffle=True, random_state=0), scoring="r2"
            )
        print(f"== {name} ({time.perf_counter() - t0:.0f} s)\n{reg.format_table()}\n", file=sys.stderr)
        out["data"][name] = {"n_samples": int(X.shape[0]), "n_features": int(X.shape[1]), "regressors": _summary(reg)}
    if "gmm" not in parts:
        return out
    # the equivalence on the mixture: the same folds (stratified by class) for both tasks
    t0 = time.perf_counter()
    X, y, labels = _mixture(quick)
    folds = list(RepeatedStratifiedKFold(n_splits=outer, n_repeats=2, random_state=0).split(X, labels))
    entry = {"n_samples": int(X.shape[0]), "n_features": int(X.shape[1])}
    for task, target, scoring in (("regressors", y, "r2"), ("classifiers", labels, "accuracy")):
        res = compare_estimators(
            _equivalence_models(width, task[:-1]), X, target, cv=folds, scoring=scoring, fold_seed=0
        )
        entry[task] = _summary(res)
        print(f"== gmm {task} ({time.perf_counter() - t0:.0f} s)\n{res.format_table()}\n", file=sys.stderr)
    out["gmm"] = entry
    return out


def markdown(out: dict) -> str:
    """The user guide's tables: mean ± std over the outer folds, and the DEQ-vs-matched tests.

    Parameters
    ----------
    out : dict
        What :func:`collect` returned.

    Returns
    -------
    str
        A markdown table of the nested cross-validation and, when present, one
        of the mixture's equivalence test.
    """
    lines = ["| data | DEQ | matched | plain ReLU | KRR on implicit CK | MLP | DEQ − matched (p) |", "|---" * 7 + "|"]
    for name, entry in out["data"].items():
        res = entry["regressors"]
        cells = [_mean_std(res, model) for model in ("deq", "matched", "plain", "krr_ck", "mlp")]
        dm = res["deq_vs_matched"]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {dm['difference']:+.3f} (p = {dm['p_value']:.2f}) |")
    if "gmm" in out:
        lines += ["", "| mixture | DEQ | matched | plain ReLU | DEQ − matched (p) |", "|---" * 5 + "|"]
        for task in ("regressors", "classifiers"):
            res = out["gmm"][task]
            cells = [_mean_std(res, model) for model in ("deq", "matched", "plain")]
            dm = res["deq_vs_matched"]
            lines.append(f"| {task} | " + " | ".join(cells) + f" | {dm['difference']:+.3f} (p = {dm['p_value']:.2f}) |")
    return "\n".join(lines)


def _mean_std(res: dict, model: str) -> str:
    s = np.asarray(res["scores"][res["names"].index(model)])
    return f"{s.mean():.3f} ± {s.std(ddof=1):.3f}"


def main(argv=None) -> int:
    ap = parser(__doc__, name=__name__, quick="small data, width 128, 3 folds", repeats=1)
    ap.add_argument("--only", choices=["cv", "gmm"], default=None, help="run one part only")
    args = ap.parse_args(argv)
    out = collect(quick=args.quick, parts=(args.only,) if args.only else ("cv", "gmm"))
    print(markdown(out))
    path = args.json or (None if args.quick else RESULTS / "regression.json")
    if path:
        write_json(path, out, benchmark=__name__)
    return 0
