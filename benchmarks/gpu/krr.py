"""Exact kernel ridge regression with the implicit CK on all of Fashion-MNIST on one GPU, against Nystroem on the CPU.

Fashion-MNIST's official split (60,000 training and 10,000 test images,
pixels over 255; :func:`sk_deq.datasets.fetch_fashion_mnist`, nothing
downloaded when the files are at hand), the DEQ's CK of
``ImplicitCKTransformer()`` at its defaults (ReLU, ``sigma_a2 = 0.2``, the
readout bias's variance added), +-1 one-hot targets, predicted class = the
largest output.  Two parts (``--only`` picks one):

``exact`` (on a GPU: ``device='cuda'``)
    the 60,000 x 60,000 float64 training kernel (28.8 GB) and the 10,000 x
    60,000 test kernel by the transformer's torch engine on the GPU, then on
    the GPU: ``alpha`` chosen from ``ALPHAS`` by 3-fold cross-validation on
    the first ``--cv-rows`` training rows (sub-blocks of the same kernel),
    and the whole system ``(K + alpha I) c = Y`` solved by a Cholesky
    factorisation.  The time of every step, and the test accuracy.
``nystroem`` (on the CPU, all its cores)
    ``ImplicitCKNystroem(n_components=...)`` fitted on the 60,000 training
    rows, then ``RidgeClassifier`` on its features with ``alpha`` chosen by
    the same 3-fold cross-validation on the training features (the
    landmarks chosen once, on all training rows).

Usage::

    python -m benchmarks.gpu krr --only exact --json krr_exact.json          # on a GPU
    python -m benchmarks.gpu krr --only nystroem --components 2000 5000 --json krr_nys.json
    python -m benchmarks.gpu krr --quick --device cpu   # 3,000 / 1,000 rows: a smoke run of both
"""

from __future__ import annotations

import json
import time

import numpy as np
from .._harness import finish, parser
from sklearn.linear_model import RidgeClassifier
from sklearn.model_selection import StratifiedKFold

from sk_deq import ImplicitCKNystroem, ImplicitCKTransformer
from sk_deq.datasets import fetch_fashion_mnist

ALPHAS = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0]
PARTS = ("exact", "nystroem")


def load(quick: bool):
    """Fashion-MNIST's official split, pixels over 255 (the first 3,000 / 1,000 rows with ``quick``)."""
    X_tr, y_tr = fetch_fashion_mnist(subset="train", return_X_y=True, download_if_missing=False)
    X_te, y_te = fetch_fashion_mnist(subset="test", return_X_y=True, download_if_missing=False)
    if quick:
        X_tr, y_tr, X_te, y_te = X_tr[:3000], y_tr[:3000], X_te[:1000], y_te[:1000]
    return X_tr / 255.0, y_tr, X_te / 255.0, y_te


def _one_hot(y, torch, device):
    Y = -torch.ones(len(y), 10, dtype=torch.float64, device=device)
    Y[torch.arange(len(y), device=device), torch.as_tensor(y, device=device)] = 1.0
    return Y


def _solve(K, Y, alpha, torch):
    """``(K + alpha I)^-1 Y`` by Cholesky; ``K`` is left as it was."""
    diagonal = K.diagonal().clone()
    K.diagonal().add_(alpha)
    try:
        L, info = torch.linalg.cholesky_ex(K)
    finally:
        K.diagonal().copy_(diagonal)
    if int(info) != 0:
        raise np.linalg.LinAlgError(f"K + {alpha} I is not positive definite (minor {int(info)})")
    return torch.cholesky_solve(Y, L)


def _cv_alpha(K, y, n_rows, torch, device) -> tuple[float, list]:
    """``alpha`` by 3-fold cross-validation on the first ``n_rows`` rows of the kernel ``K`` (a device tensor)."""
    y = np.asarray(y[:n_rows])
    Y = _one_hot(y, torch, device)
    yt = torch.as_tensor(y, device=device)
    scores = np.zeros(len(ALPHAS))
    for tr, va in StratifiedKFold(3, shuffle=True, random_state=0).split(np.zeros(n_rows), y):
        tr_t, va_t = torch.as_tensor(tr, device=device), torch.as_tensor(va, device=device)
        K_tr, K_va = K[tr_t][:, tr_t], K[va_t][:, tr_t]
        for i, alpha in enumerate(ALPHAS):
            pred = (K_va @ _solve(K_tr, Y[tr_t], alpha, torch)).argmax(1)
            scores[i] += float((pred == yt[va_t]).double().mean()) / 3
        del K_tr, K_va
    return ALPHAS[int(np.argmax(scores))], scores.tolist()


def exact(quick: bool, device: str, cv_rows: int, progress=print) -> dict:
    """The ``exact`` part; see the module docstring."""
    import torch

    X_tr, y_tr, X_te, y_te = load(quick)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    steps: dict[str, float] = {}

    def step(name, fn, *args):
        sync()
        t0 = time.perf_counter()
        out = fn(*args)
        sync()
        steps[name] = time.perf_counter() - t0
        progress(f"{name}: {steps[name]:.2f} s")
        return out

    t0 = time.perf_counter()
    ck = step("fit_s", ImplicitCKTransformer(device=device).fit, X_tr)
    K_np = step("train_kernel_s", ck.transform, X_tr)
    K = step("to_device_s", torch.from_numpy(K_np).to, device)
    del K_np
    alpha, cv_scores = step("cv_s", _cv_alpha, K, y_tr, min(cv_rows, len(y_tr)), torch, device)
    coef = step("solve_s", _solve, K, _one_hot(y_tr, torch, device), alpha, torch)
    del K
    K_te = step("test_kernel_s", ck.transform, X_te)
    pred = step("predict_s", lambda: (torch.from_numpy(K_te).to(device) @ coef).argmax(1).cpu().numpy())
    out = {
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else device,
        "n_train": len(y_tr),
        "n_test": len(y_te),
        "cv_rows": min(cv_rows, len(y_tr)),
        "alpha": alpha,
        "cv_accuracy_by_alpha": cv_scores,
        "accuracy": float((pred == y_te).mean()),
        "total_s": time.perf_counter() - t0,
        **steps,
    }
    if device.startswith("cuda"):
        out["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    progress(json.dumps(out))
    return out


def nystroem(quick: bool, components, progress=print) -> list[dict]:
    """The ``nystroem`` part; see the module docstring."""
    X_tr, y_tr, X_te, y_te = load(quick)
    records = []
    for m in components:
        t0 = time.perf_counter()
        nys = ImplicitCKNystroem(n_components=m, random_state=0).fit(X_tr)
        F_tr, F_te = nys.transform(X_tr), nys.transform(X_te)
        features_s = time.perf_counter() - t0
        scores = np.zeros(len(ALPHAS))
        for tr, va in StratifiedKFold(3, shuffle=True, random_state=0).split(F_tr, y_tr):
            for i, a in enumerate(ALPHAS):
                scores[i] += RidgeClassifier(alpha=a).fit(F_tr[tr], y_tr[tr]).score(F_tr[va], y_tr[va]) / 3
        alpha = ALPHAS[int(np.argmax(scores))]
        accuracy = float(RidgeClassifier(alpha=alpha).fit(F_tr, y_tr).score(F_te, y_te))
        rec = dict(n_components=m, n_train=len(y_tr), alpha=alpha, cv_accuracy_by_alpha=scores.tolist())
        rec.update(accuracy=accuracy, features_s=features_s, total_s=time.perf_counter() - t0)
        progress(json.dumps(rec))
        records.append(rec)
    return records


def collect(quick: bool = False, repeats: int = 1) -> dict:
    """``run_all``'s entry point: the exact part on CUDA (``{"cuda": null}`` without it); the Nystroem part is its own run."""
    import torch

    if not torch.cuda.is_available():
        return {"cuda": None, "reason": "torch.cuda.is_available() is False: no CUDA GPU on this machine"}
    return {"cuda": torch.version.cuda, "exact": exact(quick, "cuda", 1000 if quick else 20000)}


def main(argv=None) -> int:
    ap = parser(__doc__, name=__name__, quick="3,000 training and 1,000 test rows", repeats=None)
    ap.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--device", default="cuda", help="the exact part's device (default: cuda)")
    ap.add_argument("--cv-rows", type=int, default=20000, help="rows of the exact part's cross-validation")
    ap.add_argument("--components", type=int, nargs="+", default=[2000], help="the Nystroem part's n_components")
    args = ap.parse_args(argv)
    result: dict = {}
    if "exact" in args.only:
        result["exact"] = exact(args.quick, args.device, 1000 if args.quick else args.cv_rows)
    if "nystroem" in args.only:
        result["nystroem"] = nystroem(
            args.quick, [min(c, 1000) for c in args.components] if args.quick else args.components
        )
    finish(result, args, lambda r: json.dumps(r, indent=2))
    return 0
