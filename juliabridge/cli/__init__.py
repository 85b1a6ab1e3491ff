"""The ``juliabridge`` command (``python -m juliabridge``): main, export, doctor."""

from .main import main

__all__ = ["main"]
