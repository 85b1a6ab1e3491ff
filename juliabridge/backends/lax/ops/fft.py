"""Lift functions: fft (to be written)."""
