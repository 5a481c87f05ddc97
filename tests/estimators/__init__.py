"""Tests of sk_deq.estimators."""
