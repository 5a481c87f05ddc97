"""Benchmarks on a CUDA GPU.

A fit's phases and speed-up, the GPU's busy share, exact kernel ridge on
all of Fashion-MNIST, a fit's profiler trace.  ``benchmarks/gpu_checks.sh``
runs ``load`` and ``krr`` (after the CUDA tests) on a machine with a GPU.

``python -m benchmarks.gpu MEMBER [options]`` runs one of :data:`MEMBERS`
(``MEMBER --help``: its options); ``run_all`` runs their ``collect``.
"""

from .._harness import run_member

#: The benchmarks of this group, one module each.
MEMBERS = ("fit", "load", "krr", "trace")


def main(argv=None) -> int:
    """Run the member named by the first argument with the rest as its options."""
    return run_member(__name__, MEMBERS, __doc__, argv)
