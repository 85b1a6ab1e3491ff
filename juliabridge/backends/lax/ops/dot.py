"""Lift functions: dot (to be written)."""
