"""Benchmarks of time and memory against the number of samples.

Every path from 1,000 to 100,000 rows, and fits (and predict's peak memory)
at large n.

``python -m benchmarks.scale MEMBER [options]`` runs one of :data:`MEMBERS`
(``MEMBER --help``: its options); ``run_all`` runs their ``collect``.
"""

from .._harness import run_member

#: The benchmarks of this group, one module each.
MEMBERS = ("sizes", "large_fit")


def main(argv=None) -> int:
    """Run the member named by the first argument with the rest as its options."""
    return run_member(__name__, MEMBERS, __doc__, argv)
