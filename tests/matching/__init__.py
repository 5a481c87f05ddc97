"""Tests of sk_deq.matching."""
