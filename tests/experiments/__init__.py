"""Tests of sk_deq.experiments."""
