"""The tests of sk_deq, mirroring the package: ``tests/<package>/test_<module>.py``."""
