"""Baseline schedulers, one per module."""
