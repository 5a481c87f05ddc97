"""The benchmarks of sk_deq (not part of the installed package): see ``benchmarks/README.md``.

Five groups, by what they measure: :mod:`benchmarks.kernels`,
:mod:`benchmarks.networks`, :mod:`benchmarks.gpu`, :mod:`benchmarks.scale`
and :mod:`benchmarks.peers`; ``python -m benchmarks.GROUP MEMBER [options]``
runs one benchmark, ``python benchmarks/run_all.py`` all of them.
"""
