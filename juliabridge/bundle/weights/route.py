"""Which route reads a weights file: the pure-Python reader first unless it is turned off."""

from __future__ import annotations

import os

from . import fastread

__all__ = ["FAST_ENV", "use_fast_path"]

#: "0" sends every file to libhdf5 (in the reader process), skipping the Python reader.
FAST_ENV = "JULIABRIDGE_HDF5_FASTPATH"


def use_fast_path() -> bool:
    """Whether the pure-Python metadata reader is tried first (the default)."""
    off = os.environ.get(FAST_ENV, "1").strip().lower() in ("0", "false", "no", "off")
    return fastread.AVAILABLE and not off
