"""Lift functions: shape (to be written)."""
