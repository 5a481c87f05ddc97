"""Tests of sk_deq.plotting."""
