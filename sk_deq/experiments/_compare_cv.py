"""The accuracy-versus-width experiment cross-validated: :func:`cross_validate_widths`.

The same three models as :func:`~sk_deq.experiments.compare_widths`, on
stratified folds through :func:`sk_deq.model_selection.compare_estimators`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO, Any

from .._validation import check_bool
from ._common import MODELS, _make, check_count, progress_bar, torch_threads
from ._compare import _MODEL_LABELS, _estimator_options, _load, _validate
from ._compare_result import p_text


def cross_validate_widths(
    datasets: Sequence[str | tuple] = ("digits",),
    activations: Sequence[str] = ("relu", "tanh"),
    widths: Sequence[int] = (256, 1024),
    *,
    cv: int = 5,
    sigma_a2: float = 0.2,
    n_samples: int | None = None,
    plain_depth: int = 1,
    n_threads: int | None = 1,
    device: str = "auto",
    dtype: str = "float32",
    trainable: str = "readout",
    estimator_params: dict | None = None,
    random_state: int = 0,
    n_jobs: int | None = None,
    progress: bool = False,
    verbose: int = 0,
    stream: IO[str] | None = None,
) -> list[dict]:
    """Cross-validate the DEQ, its matched network and a plain network at every width.

    The counterpart of :func:`compare_widths` on ``cv`` stratified folds
    instead of repeated random splits: for every data set, activation and
    width, :func:`sk_deq.model_selection.compare_estimators` fits the three
    models on the same folds (new weights on every fold, the same for the
    three: ``fold_seed=random_state``) and tests every pair with the
    corrected resampled t-test.

    Parameters
    ----------
    datasets : sequence of str or tuple, default=('digits',)
        As for :func:`compare_widths`; the folds are drawn from all of a data
        set's samples, its own test set included.
    activations : sequence of str, default=('relu', 'tanh')
        DEQ activations.
    widths : sequence of int, default=(256, 1024)
        Widths ``m``.
    cv : int, default=5
        Number of stratified folds (shuffled with ``random_state``).
    sigma_a2 : float, default=0.2
        The DEQ's recurrent weight variance.
    n_samples : int or None, default=None
        Size of a stratified subsample of every data set; None uses all.
    plain_depth : int, default=1
        Number of layers of the plain network.
    n_threads : int or None, default=1
        Torch intra-op threads during the run (restored afterwards).
    device : str, default='auto'
        Torch device of all estimators.
    dtype : {'float32', 'float64'}, default='float32'
        Precision of all estimators.
    trainable : {'readout', 'all'}, default='readout'
        What is trained, as for :func:`compare_widths`.
    estimator_params : dict or None, default=None
        Parameters set on all three estimators, as for :func:`compare_widths`.
    random_state : int, default=0
        Seed of the folds, of the subsample and of the weights.
    n_jobs : int or None, default=None
        Parallel (model, fold) fits (see
        :func:`~sk_deq.model_selection.compare_estimators`).
    progress : bool, default=False
        Show a one-line progress display (widths done, the one running,
        elapsed time and an estimate of the time left) on ``stream``.
    verbose : int, default=0
        ``1`` prints one line per width, with the mean accuracies and the
        DEQ-versus-matched p-value, as it finishes.
    stream : file-like or None, default=None
        Where progress and verbose lines go; None means ``sys.stderr``.

    Returns
    -------
    list of dict
        One entry per data set, activation and width: ``dataset``,
        ``activation``, ``width`` and ``result`` (a
        :class:`~sk_deq.model_selection.ComparisonResult` of the models
        ``deq``, ``matched`` and ``plain``, scored by accuracy).

    Examples
    --------
    >>> from sk_deq.experiments import cross_validate_widths
    >>> out = cross_validate_widths(["digits"], ["tanh"], [32], cv=3, n_samples=300)
    >>> out[0]["result"].names
    ['deq', 'matched', 'plain']
    >>> 0.0 <= out[0]["result"].test("deq", "matched").pvalue <= 1.0
    True
    """
    from sklearn.model_selection import StratifiedKFold

    from ..model_selection import compare_estimators

    check_bool(progress, "progress", "cross_validate_widths")
    check_count(cv, "cv", 2)
    datasets, names, activations, widths = _validate(
        datasets, activations, widths, 1, 0.2, n_samples, plain_depth, n_threads
    )
    opts: dict[str, Any] = {
        "sigma_a2": float(sigma_a2),
        "plain_depth": int(plain_depth),
        "estimator": _estimator_options(trainable, estimator_params, device, dtype),
    }
    folds = StratifiedKFold(int(cv), shuffle=True, random_state=random_state)
    out = []
    loaded, _ = _load(datasets, names, n_samples, 0.2, random_state)  # (the test fraction only sizes the info)
    stream = stream or sys.stderr
    ticker = progress_bar(len(names) * len(activations) * len(widths), progress, stream)
    with torch_threads(n_threads):
        try:
            for name, (X, y, _) in loaded.items():
                for activation in activations:
                    for width in widths:
                        ticker.set_description(f"{name} {activation} width {width}: {cv} folds x {len(MODELS)} models")
                        models = {m: _make(m, activation, width, random_state, opts) for m in MODELS}
                        result = compare_estimators(
                            models, X, y, cv=folds, scoring="accuracy", fold_seed=random_state, n_jobs=n_jobs
                        )
                        out.append({"dataset": name, "activation": activation, "width": int(width), "result": result})
                        ticker.update()
                        if verbose:
                            _report_cv_width(out[-1], stream, after_progress=progress)
        finally:
            ticker.close("done")
    return out


def _report_cv_width(run, out, *, after_progress: bool):
    """The verbose line of one cross-validated width: mean accuracy of every model, DEQ vs matched p-value."""
    result = run["result"]
    means = {name: row[~failed].mean() for name, row, failed in zip(result.names, result.scores, result.failed)}
    parts = [f"{_MODEL_LABELS[m]} {100 * means[m]:.2f}%" for m in MODELS]
    parts.append(f"DEQ vs matched p = {p_text(result.test('deq', 'matched').to_dict())}")
    if after_progress:
        out.write("\n")
    out.write(f"{run['dataset']} {run['activation']} width {run['width']}: " + ", ".join(parts) + "\n")
    out.flush()
