"""Argument types, defaults and checks of the ``sk-deq`` command (:mod:`sk_deq.cli`).

Every option's value is checked by its type here (an ``argparse`` error
naming the option); library messages are spelled as options by
:func:`_cli_spelling`.
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import re
import tempfile

from ..activations import ACTIVATION_NAMES
from ..experiments import DATASETS
from ..matching.families import FAMILIES, LAYER_KINDS, parse_family

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
    "device": "--device",
    "n_samples": "--n-samples",
    "n_splits": "--cv",
    "ratio": "--ratio",
    "exact_kernel": "--exact-kernel",
}
_ASSIGNMENT = re.compile(r"\b(" + "|".join(_OPTIONS) + r")=('[^']*'|\S+?)(?=[\s,;:)]|\.?$|\.\s)")
# Bare names that cannot be mistaken for words of a sentence.
_BARE = re.compile(r"\b(sigma_a2|sigma_b2|n_layers|n_hidden|n_draws|n_samples)\b")


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


def _seed(value: str) -> int:
    n = _integer(value, 0, "an integer in [0, 2**32 - 1]")
    if n > 2**32 - 1:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**32 - 1], got {value!r}")
    return n


# The defaults of the options are those of the library functions the commands
# call, read from their signatures: one source for them, shown by --help.


def _defaults(func) -> dict:
    """The default values of ``func``'s parameters, by name."""
    return {name: p.default for name, p in inspect.signature(func).parameters.items() if p.default is not p.empty}


def _arguments(args, func) -> dict:
    """The parsed options that set a parameter of ``func`` (``--n-hidden`` sets ``n_hidden``), by name."""
    return {name: getattr(args, name) for name in inspect.signature(func).parameters if hasattr(args, name)}


def _text(value) -> str:
    """A default as ``--help`` shows it: sequences comma-separated, floats in short form."""
    if isinstance(value, (tuple, list)):
        return ",".join(_text(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _option(parser, flag: str, defaults: dict, help: str, *, deferred: bool = False, **kwargs) -> None:
    """Add ``flag`` with the default of the parameter it sets (``--n-hidden`` sets ``n_hidden``), shown in its help.

    ``deferred``: the parsed value is None unless the option is given (so
    that a command can tell), and :func:`fill_deferred` sets the default.
    """
    dest = flag[2:].replace("-", "_")
    default = defaults[dest]
    if deferred:
        parser.set_defaults(_deferred={**(parser.get_default("_deferred") or {}), dest: default})
    parser.add_argument(
        flag, default=None if deferred else default, help=f"{help} (default: {_text(default)})", **kwargs
    )


def fill_deferred(args) -> set:
    """Give the deferred options that were not given their defaults; return the names of those that were given."""
    deferred = getattr(args, "_deferred", None) or {}
    given = {dest for dest in deferred if getattr(args, dest) is not None}
    for dest, default in deferred.items():
        if dest not in given:
            setattr(args, dest, default)
    return given


def reject_inapplicable(parser, options, why: str) -> None:
    """``parser.error`` (exit status 2) naming the ``options`` given where they do not apply; nothing if none."""
    if options:
        verb = "does" if len(options) == 1 else "do"
        parser.error(f"{', '.join(options)} {verb} not apply {why}")


def _add_threads_option(parser, defaults: dict) -> None:
    default = defaults["n_threads"] or 0  # None (torch's default) is spelled 0 here
    parser.add_argument(
        "--threads",
        type=_non_negative_int,
        default=default,
        help=f"torch threads; 1 keeps timings steady on a shared machine, 0 keeps torch's default (default: {default})",
    )


def _csv(value: str) -> tuple:
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {value!r}")
    repeated = sorted({v for v in items if items.count(v) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"{', '.join(repeated)} given more than once in {value!r}")
    return items


def _csv_activations(value: str) -> tuple:
    return tuple(_activation(item) for item in _csv(value))


_DATASET_NAMES = tuple(sorted(DATASETS))


def _csv_datasets(value: str) -> tuple:
    items = _csv(value)
    bad = [d for d in items if d not in _DATASET_NAMES and not d.endswith(".npz")]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown dataset {bad[0]!r}: use one of {', '.join(_DATASET_NAMES)}, or a FILE.npz of your own"
        )
    missing = [d for d in items if d.endswith(".npz") and not os.path.isfile(d)]
    if missing:
        raise argparse.ArgumentTypeError(f"no such file: {missing[0]!r}")
    return items


def _csv_widths(value: str) -> tuple:
    widths = tuple(_integer(item, 1, "comma-separated positive integers") for item in _csv(value))
    if len(set(widths)) < len(widths):  # 32 and 032
        raise argparse.ArgumentTypeError(f"a number is given more than once in {value!r}")
    return widths


def _device(value: str) -> str:
    """A ``--device`` the estimators accept (checked by their own rule, before any run)."""
    from .._runtime import resolve_device

    try:
        resolve_device(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(_cli_spelling(str(exc))) from None
    return value


def check_out_dir(out) -> str | None:
    """Check ``--out`` before a long run: why figures and JSON cannot be written there, or None if they can.

    Creates the directory (as writing would) and writes and removes a probe file in it.
    """
    if out is None:
        return None
    from ..plotting import require_matplotlib

    try:
        require_matplotlib()
    except ImportError as exc:
        return f"--out writes figures: {exc}"
    if os.path.exists(out) and not os.path.isdir(out):
        return f"--out must be a directory, got the file {out!r}"
    try:
        os.makedirs(out, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        return f"--out {out!r} is not a writable directory: {exc.strerror or exc}"
    return None


def write_outputs(out, json_name: str, write_json, figures, *, tight: bool = False) -> list:
    """Write a run's JSON (``write_json(path)``) and figures into the directory ``out``; return the paths.

    ``figures`` holds ``(file name, draw)`` pairs, ``draw()`` returning a
    matplotlib figure, saved as PNG at 120 dpi (cropped to its content when
    ``tight``) and closed.
    """
    from ..plotting import require_matplotlib

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


def _add_output_options(parser, files: str) -> None:
    """``--out DIR`` (which writes ``files``), ``--json`` and ``--no-progress``."""
    parser.add_argument("--out", default=None, metavar="DIR", help=f"also write {files} here (checked before the run)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    parser.add_argument("--no-progress", action="store_true", help="no progress display on stderr")


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
