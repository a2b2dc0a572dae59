"""Discrete-time cluster simulator."""
