"""Lift functions: custom_call (to be written)."""
