"""Tests of sk_deq.activations."""
