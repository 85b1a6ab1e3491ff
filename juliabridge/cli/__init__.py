"""The ``juliabridge`` command (``python -m juliabridge``): main, export, doctor."""

from .commands import main

__all__ = ["main"]
