"""Lift functions: chlo (to be written)."""
