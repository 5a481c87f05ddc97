"""Tests of sk_deq.cli."""
