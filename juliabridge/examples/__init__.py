"""Example Lux models and bundles made in Python (no Julia), for docs and tests."""
