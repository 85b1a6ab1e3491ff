"""Lift functions: normalization (to be written)."""
