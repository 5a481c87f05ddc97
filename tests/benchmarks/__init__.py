"""The tests of the benchmarks, mirroring their groups: ``tests/benchmarks/test_<group>.py``."""
