"""Tests of sk_deq.kernels."""
