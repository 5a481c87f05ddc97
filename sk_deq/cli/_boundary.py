"""``sk-deq boundary``: the study of where the equivalence ends (steep targets, trained weights)."""

from __future__ import annotations

from typing import Any

from ._args import _add_output_options, _add_threads_option, _check_out, _defaults, _finish, _positive_int, _text
from ..experiments import where_equivalence_ends
from ..experiments._boundary import QUICK


def _add_boundary_parser(sub) -> None:
    bd = _defaults(where_equivalence_ends)
    b = sub.add_parser(
        "boundary",
        help="where the equivalence ends: readout-trained and fully trained DEQs and explicit nets on steep targets",
        description="Fit the readout-trained DEQ, its matched explicit network, a DEQ with all weights trained and an "
        "explicit network with as many parameters, all weights trained, to the steep target tanh(k sqrt(d) u.x) for "
        f"every sharpness k ({_text(bd['sharpness'])}) and input dimension d ({_text(bd['dims'])}); print their L-inf "
        "and L2 test errors along u (mean and std over the seeds) and how far the matched network's predictions are "
        "from the DEQ's. With --out, also write the figure and a JSON of all numbers.",
    )
    b.add_argument(
        "--quick",
        action="store_true",
        help=f"the small version: d = {_text(QUICK['dims'])}, k = {_text(QUICK['sharpness'])}, narrower networks and "
        "shorter training",
    )
    b.add_argument(
        "--repeats",
        type=_positive_int,
        default=None,
        help=f"seeds 0 .. N-1, one draw of the data and the weights each (default: {len(bd['seeds'])}; --quick: "
        f"{len(QUICK['seeds'])})",
    )
    _add_threads_option(b, bd)
    _add_output_options(b, "where_equivalence_ends.json and where_equivalence_ends.png")
    b.set_defaults(func=_cmd_boundary, _parser=b)


def _cmd_boundary(args) -> int:
    _check_out(args)
    options: dict[str, Any] = dict(QUICK) if args.quick else {}
    if args.repeats:
        options["seeds"] = tuple(range(args.repeats))
    result = where_equivalence_ends(
        **options, n_threads=args.threads or None, progress=not (args.no_progress or args.json)
    )
    from ..plotting import plot_where_equivalence_ends

    figures = [("where_equivalence_ends.png", lambda: plot_where_equivalence_ends(result))]
    return _finish(args, result, str(result), "where_equivalence_ends.json", figures)
