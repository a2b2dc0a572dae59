"""Shipped data files (see PROVENANCE.md)."""
