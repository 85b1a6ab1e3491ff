"""Lift functions: reduction (to be written)."""
