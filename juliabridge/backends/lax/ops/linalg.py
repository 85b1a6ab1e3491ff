"""Lift functions: linalg (to be written)."""
