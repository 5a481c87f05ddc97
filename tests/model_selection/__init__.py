"""Tests of sk_deq.model_selection."""
