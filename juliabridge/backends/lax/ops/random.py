"""Lift functions: random (to be written)."""
