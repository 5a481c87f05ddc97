"""Tests of sk_deq.datasets."""
