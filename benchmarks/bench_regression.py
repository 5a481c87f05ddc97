"""The regressors against kernel ridge on the implicit CK and an MLP, by 5-fold cross-validation.

Data:

``diabetes``
    scikit-learn's ``load_diabetes`` (442 samples, 10 features).
``friedman1``
    ``make_friedman1(n_samples=2000, noise=1.0, random_state=0)`` (10
    features, 5 of them irrelevant).
``gmm``
    The paper's Gaussian mixture (``make_gaussian_mixture``, 3 classes,
    ``n_features=400``, 1,500 samples) with a real target: the class index
    plus Gaussian noise of standard deviation 0.25.  The same data with the
    class labels is given to the classifiers, for the DEQ-vs-matched gap of
    each.

Contestants (ReLU, ``sigma_a2 = 0.2``, width 1,024 for the networks), each
with its penalty chosen by an inner 3-fold ``GridSearchCV`` on every outer
training fold (nested cross-validation, so no score is tuned on its own
test fold):

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

    python benchmarks/bench_regression.py             # the figures in the user guide
    python benchmarks/bench_regression.py --quick     # small data, two folds of three
    python benchmarks/bench_regression.py --json regression.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.compose import TransformedTargetRegressor
from sklearn.datasets import load_diabetes, make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sk_deq import (
    DEQClassifier,
    DEQRegressor,
    ExplicitRegressor,
    ImplicitCKTransformer,
    MatchedExplicitClassifier,
    MatchedExplicitRegressor,
    make_gaussian_mixture,
)
from sk_deq.model_selection import compare_estimators

RESULTS = Path(__file__).with_name("results")
NET_ALPHAS = [1e-5, 1e-4, 1e-3, 1e-2]


def _datasets(quick: bool) -> dict:
    X_d, y_d = load_diabetes(return_X_y=True)
    n_f = 400 if quick else 2000
    X_f, y_f = make_friedman1(n_samples=n_f, noise=1.0, random_state=0)
    n_g, p_g = (300, 100) if quick else (1500, 400)
    X_g, labels = make_gaussian_mixture(n_g, p_g, 3, random_state=0)
    y_g = labels + 0.25 * np.random.default_rng(0).standard_normal(n_g)
    return {
        "diabetes": (X_d, y_d, None),
        "friedman1": (X_f, y_f, None),
        "gmm": (X_g, y_g, labels),
    }


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


def _classifiers(width: int, inner: int) -> dict:
    def net(cls):
        return GridSearchCV(cls(n_hidden=width, random_state=0), {"alpha": NET_ALPHAS}, cv=inner)

    return {"deq": net(DEQClassifier), "matched": net(MatchedExplicitClassifier)}


def _summary(result) -> dict:
    out = result.to_dict()
    deq_matched = result.test("deq", "matched")
    out["deq_vs_matched"] = {
        "difference": float(deq_matched.mean_difference),
        "p_value": float(deq_matched.pvalue),
    }
    return out


def collect(quick: bool = False, repeats: int = 1) -> dict:
    """Nested cross-validation of every contestant on every data set.

    Parameters
    ----------
    quick : bool, default=False
        Small data, width 128, 3 outer and 2 inner folds.
    repeats : int, default=1
        Unused (the folds are the repeats); kept for ``run_all``.

    Returns
    -------
    dict
        ``config`` and, per data set, the :meth:`ComparisonResult.to_dict` of
        the regressors (and of the classifiers on ``gmm``) with the
        DEQ-vs-matched difference and p-value.
    """
    del repeats
    width, outer, inner = (128, 3, 2) if quick else (1024, 5, 3)
    torch.set_num_threads(1)
    out = {"config": {"quick": quick, "width": width, "outer_folds": outer, "inner_folds": inner}, "data": {}}
    for name, (X, y, labels) in _datasets(quick).items():
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # the MLP's inner fits at small alpha
            reg = compare_estimators(
                _contestants(width, inner), X, y, cv=KFold(outer, shuffle=True, random_state=0), scoring="r2"
            )
            entry = {"n_samples": int(X.shape[0]), "n_features": int(X.shape[1]), "regressors": _summary(reg)}
            print(f"== {name} ({time.perf_counter() - t0:.0f} s)\n{reg.format_table()}\n", file=sys.stderr)
            if labels is not None:
                clf = compare_estimators(
                    _classifiers(width, inner),
                    X,
                    labels,
                    cv=StratifiedKFold(outer, shuffle=True, random_state=0),
                    scoring="accuracy",
                )
                entry["classifiers"] = _summary(clf)
                print(f"{clf.format_table()}\n", file=sys.stderr)
        out["data"][name] = entry
    return out


def markdown(out: dict) -> str:
    """The user guide's tables: mean ± std over the outer folds, and the DEQ-vs-matched test.

    Parameters
    ----------
    out : dict
        What :func:`collect` returned.

    Returns
    -------
    str
        A markdown table.
    """
    lines = ["| data | DEQ | matched | plain ReLU | KRR on implicit CK | MLP | DEQ − matched (p) |", "|---" * 7 + "|"]
    for name, entry in out["data"].items():
        res = entry["regressors"]
        cells = []
        for model in ("deq", "matched", "plain", "krr_ck", "mlp"):
            i = res["names"].index(model)
            s = np.asarray(res["scores"][i])
            cells.append(f"{s.mean():.3f} ± {s.std(ddof=1):.3f}")
        dm = res["deq_vs_matched"]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {dm['difference']:+.3f} (p = {dm['p_value']:.2f}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small data, width 128, 3 folds")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    out = collect(quick=args.quick)
    print(markdown(out))
    path = args.json or (None if args.quick else RESULTS / "regression.json")
    if path:
        Path(path).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
