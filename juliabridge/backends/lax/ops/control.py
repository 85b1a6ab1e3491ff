"""Lift functions: control (to be written)."""
