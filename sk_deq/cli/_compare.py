"""``sk-deq compare``: accuracy and time versus width, on random or fixed splits or cross-validated."""

from __future__ import annotations

import json
import time
from typing import Any

from ._args import (
    _add_output_options,
    _check_out,
    _finish,
    _report_written,
    _DATASET_NAMES,
    _add_threads_option,
    _csv_activations,
    _csv_datasets,
    _csv_widths,
    _defaults,
    _device,
    _integer,
    _open_unit,
    _option,
    _positive_float,
    _positive_int,
    _seed,
    _text,
    reject_inapplicable,
    write_outputs,
)
from ..experiments import EXACT_KERNEL_ALPHAS, EXACT_KERNELS, SGD_TRAINING, compare_widths, cross_validate_widths
from ..experiments._compare_result import cv_verdict


# A smoke run of compare_widths (the options given on the command line win).
_QUICK: dict[str, Any] = {"widths": (32, 128, 512), "n_samples": 1000, "repeats": 1}


def _add_compare_parser(sub) -> None:
    cd = _defaults(compare_widths)
    c = sub.add_parser(
        "compare",
        help="accuracy and time versus width of a DEQ, its matched explicit net and a plain net",
        description="For every data set, activation and width fit a DEQ (readout-trained, or trained end to end with "
        "--trainable all), the explicit network whose conjugate kernel matches it (two leaky-ReLU layers for ReLU, one hard-tanh layer for tanh) and a "
        "plain explicit network of the same width; print test accuracy, fit+predict time and the DEQ/matched "
        "time ratio. With --out, also write the figure (accuracy and time versus width) and a JSON of all numbers.",
    )
    c.add_argument(
        "--data",
        "--datasets",
        dest="datasets",
        type=_csv_datasets,
        default=cd["datasets"],
        help=f"comma-separated: {', '.join(_DATASET_NAMES)}, or FILE.npz of your own (arrays X, y and optionally "
        f"X_test, y_test) (default: {_text(cd['datasets'])})",
    )
    _option(c, "--activations", cd, "comma-separated DEQ activations", type=_csv_activations)
    _add_compare_sizes(c, cd)
    _option(c, "--sigma-a2", cd, "DEQ recurrent weight variance", type=_open_unit)
    _option(
        c,
        "--test-size",
        cd,
        "test fraction of every random split (a data set with a test set of its own keeps it)",
        type=_open_unit,
        deferred=True,
    )
    _option(c, "--plain-depth", cd, "layers of the plain explicit network", type=_positive_int)
    _add_training_options(c, cd)
    _add_exact_kernel_option(c)
    _add_threads_option(c, cd)
    _option(c, "--device", cd, "torch device: auto, cpu, cuda or cuda:N", type=_device)
    _option(c, "--random-state", cd, "base seed", type=_seed)
    c.add_argument(
        "--cv",
        type=lambda v: _integer(v, 2, "an integer of at least 2 folds"),
        default=None,
        metavar="K",
        help="cross-validate instead: K stratified folds per width through compare_estimators, one table of "
        "per-fold accuracies and corrected t-tests per data set, activation and width, and the same closing "
        "significance line (--repeats and --test-size do not apply; without --widths: 256,1024)",
    )
    _add_output_options(
        c,
        "compare_widths.png and compare_widths.json; with --cv, compare_cv.json and one paired-scores figure per "
        "table, compare_cv_DATASET_ACTIVATION_WIDTH.png",
    )
    c.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="also print one line per width as it finishes (with --cv, also every fold's scores in the tables)",
    )
    c.set_defaults(func=_cmd_compare, _parser=c, _divergence_advice=_divergence_advice)


# --epochs, --learning-rate and --batch-size: the estimator parameters they set
_TRAINING_OPTIONS = {"epochs": "max_iter", "learning_rate": "learning_rate_init", "batch_size": "batch_size"}


def _add_training_options(c, cd) -> None:
    """``--trainable`` and the SGD settings that apply with ``--trainable all``."""
    _option(
        c,
        "--trainable",
        cd,
        "readout: random weights frozen, readout fitted by L-BFGS (the theory's setting); all: every weight trained "
        "end to end with minibatch SGD (the paper's experiments)",
        choices=("readout", "all"),
    )
    sgd = SGD_TRAINING
    c.add_argument(
        "--epochs",
        type=_positive_int,
        default=None,
        help=f"SGD epochs with --trainable all (default: {sgd['max_iter']})",
    )
    c.add_argument(
        "--learning-rate",
        type=_positive_float,
        default=None,
        help=f"SGD step size with --trainable all (default: {_text(sgd['learning_rate_init'])})",
    )
    c.add_argument(
        "--batch-size",
        type=_positive_int,
        default=None,
        help=f"SGD batch size with --trainable all (default: {sgd['batch_size']})",
    )


def _training_params(args) -> dict | None:
    """The estimator parameters of ``--epochs``, ``--learning-rate`` and ``--batch-size`` (only with --trainable all)."""
    given = {opt: getattr(args, opt) for opt in _TRAINING_OPTIONS if getattr(args, opt) is not None}
    if args.trainable != "all":
        reject_inapplicable(
            args._parser,
            ["--" + o.replace("_", "-") for o in given],
            "without --trainable all (the readout is fitted by L-BFGS to convergence)",
        )
        return None
    return {_TRAINING_OPTIONS[opt]: value for opt, value in given.items()} or None


def _divergence_advice(args) -> str | None:
    """What to do when end-to-end training diverged, in options (None without ``--trainable all``)."""
    if args.trainable != "all":
        return None
    rate = SGD_TRAINING["learning_rate_init"] if args.learning_rate is None else args.learning_rate
    default = " (the default)" if args.learning_rate is None else ""
    return f"--learning-rate {rate:g}{default} is too large a step size for these data: pass a smaller --learning-rate"


def _add_exact_kernel_option(c) -> None:
    """``--exact-kernel [KERNEL]``: the entry of infinite width, exact kernel ridge with the DEQ's kernel."""
    alphas = ", ".join(f"{a:g}" for a in EXACT_KERNEL_ALPHAS)
    c.add_argument(
        "--exact-kernel",
        nargs="?",
        const="feature",
        default=None,
        choices=EXACT_KERNELS,
        metavar="KERNEL",
        help="also fit exact kernel ridge (ImplicitCKRidgeClassifier) with the DEQ's exact kernel, once per split "
        "and activation: the entry of infinite width, a line of the table and of the figure; KERNEL is feature "
        "(when given alone: the limit of the Gram matrix of the DEQ's features, which the readout sees), ck or ntk; "
        f"the ridge is chosen among {alphas} on a held-out tenth of the training samples",
    )


def _add_compare_sizes(c, cd) -> None:
    """``--widths``, ``--repeats``, ``--n-samples`` and ``--quick`` of ``compare``."""
    # --widths, --repeats and --n-samples: None leaves compare_widths' default (or --quick's)
    c.add_argument(
        "--widths",
        type=_csv_widths,
        default=None,
        help="comma-separated widths, e.g. 32,128,256,1024,4096 "
        f"(default: {_text(cd['widths'])}; --quick: {_text(_QUICK['widths'])})",
    )
    c.add_argument(
        "--repeats",
        type=_positive_int,
        default=None,
        help=f"repeats per width (default: {cd['repeats']}; --quick: {_QUICK['repeats']})",
    )
    c.add_argument(
        "--n-samples",
        type=_positive_int,
        default=None,
        help="stratified subsample of every data set "
        f"(default: {'all' if cd['n_samples'] is None else cd['n_samples']}; --quick: {_QUICK['n_samples']})",
    )
    repeats = "one repeat" if _QUICK["repeats"] == 1 else f"{_QUICK['repeats']} repeats"
    c.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run: widths {_text(_QUICK['widths'])}, {_QUICK['n_samples']} samples per data set, {repeats}",
    )


def _cmd_compare(args) -> int:
    if args.cv is not None:
        options = ["--repeats"] * (args.repeats is not None) + ["--test-size"] * ("test_size" in args._given)
        options += ["--exact-kernel"] * (args.exact_kernel is not None)
        reject_inapplicable(args._parser, options, "with --cv (every sample is tested once, in one of K folds)")
    _check_out(args)
    sizes = dict(_QUICK) if args.quick else {}
    given_sizes = {"widths": args.widths, "repeats": args.repeats, "n_samples": args.n_samples}
    sizes.update({k: v for k, v in given_sizes.items() if v is not None})
    if args.cv is not None:
        return _cmd_compare_cv(args, sizes)
    start = time.perf_counter()
    result = compare_widths(
        args.datasets,
        args.activations,
        test_size=args.test_size,
        exact_kernel=args.exact_kernel,
        **_run_options(args),
        **sizes,
    )
    elapsed = time.perf_counter() - start
    from ..plotting import plot_compare_widths

    figures = [("compare_widths.png", lambda: plot_compare_widths(result))]
    return _finish(
        args, result, f"{result.format_table()}\n\nTotal run time {elapsed:.1f}s.", "compare_widths.json", figures
    )


def _run_options(args) -> dict:
    """The options compare_widths and cross_validate_widths share, from the command line."""
    return {
        "sigma_a2": args.sigma_a2,
        "plain_depth": args.plain_depth,
        "n_threads": args.threads or None,
        "device": args.device,
        "trainable": args.trainable,
        "estimator_params": _training_params(args),
        "random_state": args.random_state,
        "progress": not args.no_progress,
        "verbose": args.verbose,
    }


def _cmd_compare_cv(args, sizes) -> int:
    """``sk-deq compare --cv K``: :func:`cross_validate_widths`, one comparison table per width."""
    start = time.perf_counter()
    runs = cross_validate_widths(
        args.datasets,
        args.activations,
        sizes.get("widths", (256, 1024)),
        cv=args.cv,
        n_samples=sizes.get("n_samples"),
        **_run_options(args),
    )
    elapsed = time.perf_counter() - start
    records = [{k: v for k, v in run.items() if k != "result"} | run["result"].to_dict() for run in runs]
    if args.json:
        print(json.dumps(records, indent=1))
    else:
        for run in runs:
            print(f"== {run['dataset']}, {run['activation']}-DEQ, width {run['width']}")
            print(run["result"].format_table(per_fold=args.verbose > 0))
            print()
        verdict = cv_verdict(runs)
        print(f"{verdict}\n" if verdict else "", end="")
        print(f"Total run time {elapsed:.1f}s.")
    if args.out is not None:
        from ..plotting import plot_paired_scores

        def write_json(path):
            with open(path, "w") as fh:
                json.dump(records, fh, indent=1)

        figures = [
            (
                f"compare_cv_{run['dataset']}_{run['activation']}_{run['width']}.png",
                lambda run=run: plot_paired_scores(
                    run["result"], title=f"{run['dataset']}, {run['activation']}-DEQ, width {run['width']}"
                ),
            )
            for run in runs
        ]
        _report_written(args, write_outputs(args.out, "compare_cv.json", write_json, figures))
    return 0
