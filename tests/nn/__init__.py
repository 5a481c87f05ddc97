"""Tests of sk_deq.nn."""
