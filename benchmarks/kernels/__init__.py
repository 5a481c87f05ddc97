"""Benchmarks of the implicit kernels.

The exact kernels against GEMM, on one core and on all, in the user's call,
with the readout bias, in the torch engine, their Nystroem features, and
exact kernel ridge at full size, in one process and on a Dask cluster.

``python -m benchmarks.kernels MEMBER [options]`` runs one of :data:`MEMBERS`
(``MEMBER --help``: its options); ``run_all`` runs their ``collect``.
"""

from .._harness import run_member

#: The benchmarks of this group, one module each.
MEMBERS = ("exact", "cores", "user_call", "bias", "torch_engine", "nystroem", "ridge", "ridge_dask")


def main(argv=None) -> int:
    """Run the member named by the first argument with the rest as its options."""
    return run_member(__name__, MEMBERS, __doc__, argv)
