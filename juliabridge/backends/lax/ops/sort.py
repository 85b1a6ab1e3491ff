"""Lift functions: sort (to be written)."""
