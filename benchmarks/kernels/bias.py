"""Kernel machines with the implicit kernels, with and without the readout bias variance, against scikit-learn's.

Cross-validated scores (``KFold(5, shuffle=True, random_state=0)``, its
stratified counterpart for digits) of the pipelines users build on the
implicit kernels, each at ``bias_variance=0`` (the kernel itself) and at the
default ``bias_variance=1`` (see the user guide, "The kernels' constant"):
kernel ridge regression with the CK and the NTK, an SVM, a Gaussian process
(amplitude tuned, with and without ``normalize_y``) and linear models on
Nyström features; beside them scikit-learn's RBF kernel ridge and ``Ridge``
at their defaults and tuned by grid search; and kernel ridge with the CK,
the feature kernel and the NTK at bias variances 0.1 to 100.  Only accuracy
and R² are measured: ``--repeats`` does not apply.

Usage::

    python -m benchmarks.kernels bias              # about a minute on two cores
    python -m benchmarks.kernels bias --json out.json
"""

from __future__ import annotations

import warnings

import numpy as np
from .._harness import finish, parser, text_table
from sklearn.datasets import load_diabetes, load_digits
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import Ridge, RidgeClassifier
from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from sklearn.svm import SVC

from sk_deq import ImplicitCKNystroem, ImplicitCKTransformer
from sk_deq.gaussian_process import ImplicitCKKernel


def _unit(X):
    return X / np.sqrt(X.shape[1])


def _pipelines(bias):
    """The kernel pipelines at one bias variance: ``{name: (data, estimator)}``."""
    gp = ConstantKernel(1.0, (1e-3, 1e6)) * ImplicitCKKernel(bias_variance=bias, sigma_a2_bounds="fixed")
    gp = gp + WhiteKernel()
    unit = FunctionTransformer(_unit)
    return {
        "kernel ridge, CK (diabetes, R2)": ("diabetes", make_pipeline(ImplicitCKTransformer(bias_variance=bias), KernelRidge(kernel="precomputed"))),
        "kernel ridge, NTK (diabetes, R2)": ("diabetes", make_pipeline(ImplicitCKTransformer(kernel="ntk", bias_variance=bias), KernelRidge(kernel="precomputed"))),
        "SVC, CK (digits, accuracy)": ("digits", make_pipeline(ImplicitCKTransformer(bias_variance=bias), SVC(kernel="precomputed"))),
        "GP, ConstantKernel * CK + WhiteKernel (diabetes, R2)": ("diabetes", make_pipeline(StandardScaler(), unit, GaussianProcessRegressor(gp))),
        "the same GP with normalize_y=True": ("diabetes", make_pipeline(StandardScaler(), unit, GaussianProcessRegressor(gp, normalize_y=True))),
        "Nystroem (100) + Ridge (diabetes, R2)": ("diabetes", make_pipeline(ImplicitCKNystroem(n_components=100, bias_variance=bias, random_state=0), Ridge())),
        "Nystroem (300) + RidgeClassifier (digits, accuracy)": ("digits", make_pipeline(ImplicitCKNystroem(n_components=300, bias_variance=bias, random_state=0), RidgeClassifier())),
    }  # fmt: skip


def _references():
    """scikit-learn's own regressors on the diabetes folds, at their defaults and tuned."""
    grid = {"kernelridge__gamma": [0.003, 0.01, 0.03, 0.1, 0.3], "kernelridge__alpha": [0.01, 0.1, 1.0, 10.0]}
    rbf = make_pipeline(StandardScaler(), KernelRidge(kernel="rbf"))
    return {
        "KernelRidge(kernel='rbf'), defaults": KernelRidge(kernel="rbf"),
        "RBF kernel ridge, tuned by grid search": GridSearchCV(rbf, grid, cv=3),
        "Ridge(), defaults": Ridge(),
        "Ridge, alpha tuned by grid search": GridSearchCV(Ridge(), {"alpha": np.logspace(-4, 2, 13)}, cv=3),
    }


def collect(quick=False, repeats=1):
    """Every pipeline's mean cross-validated score at bias variance 0 and 1, and the references' (``quick``: 3 folds)."""
    data = {"diabetes": load_diabetes(return_X_y=True), "digits": load_digits(return_X_y=True)}
    folds = 3 if quick else 5
    cv = {
        "diabetes": KFold(folds, shuffle=True, random_state=0),
        "digits": StratifiedKFold(folds, shuffle=True, random_state=0),
    }
    records = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the GP's bound warnings
        scores = {
            b: {n: cross_val_score(e, *data[d], cv=cv[d]).mean() for n, (d, e) in _pipelines(b).items()}
            for b in (0.0, 1.0)
        }
        for name in scores[0.0]:
            records.append(
                {"pipeline": name, "bias_variance_0": scores[0.0][name], "bias_variance_1": scores[1.0][name]}
            )
        references = [
            {"estimator": name, "r2": cross_val_score(est, *data["diabetes"], cv=cv["diabetes"]).mean()}
            for name, est in _references().items()
        ]
    sweep = [
        {"kernel": kernel, "bias_variance": bias, "r2": cross_val_score(
            make_pipeline(ImplicitCKTransformer(kernel=kernel, bias_variance=bias), KernelRidge(kernel="precomputed")),
            *data["diabetes"], cv=cv["diabetes"]).mean()}
        for kernel in ("ck", "feature", "ntk") for bias in (0.1, 1.0, 10.0, 100.0)
    ]  # fmt: skip
    return {
        "config": {"folds": folds},
        "records": records,
        "references": references,
        "sweep": sweep,
        "extra_tables": ["references", "sweep"],
    }


def table(result) -> str:
    """The records and the references as text tables."""
    head = [f"{'pipeline':<55} {'bias 0':>8} {'bias 1':>8}"]
    lines = text_table(head, result["records"], "{pipeline:<55} {bias_variance_0:8.3f} {bias_variance_1:8.3f}")
    refs = text_table(
        [f"{'scikit-learn on the diabetes folds':<55} {'R2':>8}"], result["references"], "{estimator:<55} {r2:8.3f}"
    )
    sweep = text_table(
        [f"{'kernel ridge (diabetes)':<40} {'bias_variance':>13} {'R2':>8}"],
        result["sweep"],
        "{kernel:<40} {bias_variance:13g} {r2:8.3f}",
    )
    return lines + "\n\n" + refs + "\n\n" + sweep


def main(argv=None):
    """Run :func:`collect`, print its tables, write its JSON with ``--json``; returns the result."""
    ap = parser(__doc__, name=__name__, quick="three folds", repeats=None)
    args = ap.parse_args(argv)
    if args.repeats is not None:
        ap.error("--repeats does not apply: only scores are measured, once")
    return finish(collect(args.quick), args, table)
