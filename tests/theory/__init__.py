"""Tests of sk_deq.theory."""
