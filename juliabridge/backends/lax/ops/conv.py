"""Lift functions: conv (to be written)."""
