"""Benchmarks of the networks (DEQ, matched, explicit).

The forward pass, the readout, the row blocks, the equivalence over widths,
training (``partial_fit``, early stopping), the weight draws, and torch's
threads on a busy core.

``python -m benchmarks.networks MEMBER [options]`` runs one of :data:`MEMBERS`
(``MEMBER --help``: its options); ``run_all`` runs their ``collect``.
"""

from .._harness import run_member

#: The benchmarks of this group, one module each.
MEMBERS = ("forward", "readout", "blocks", "equivalence", "partial_fit", "early_stopping", "weight_draws", "busy_core")


def main(argv=None) -> int:
    """Run the member named by the first argument with the rest as its options."""
    return run_member(__name__, MEMBERS, __doc__, argv)
