"""Lift functions: indexing (to be written)."""
