"""Benchmarks against other methods and libraries.

Classifiers (TorchDEQ's solvers, a per-sample loop, an MLP) and regressors
(kernel ridge, an MLP, nested cross-validation).

``python -m benchmarks.peers MEMBER [options]`` runs one of :data:`MEMBERS`
(``MEMBER --help``: its options); ``run_all`` runs their ``collect``.
"""

from .._harness import run_member

#: The benchmarks of this group, one module each.
MEMBERS = ("classifiers", "regressors")


def main(argv=None) -> int:
    """Run the member named by the first argument with the rest as its options."""
    return run_member(__name__, MEMBERS, __doc__, argv)
