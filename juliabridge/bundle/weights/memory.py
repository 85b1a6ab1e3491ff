"""The refusal of a dataset larger than this machine's memory (forged or oversized sizes)."""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import BundleError

__all__ = ["check_memory", "physical_memory"]


def physical_memory() -> int | None:
    """The bytes of physical memory of this machine (None where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(nbytes: int, path: Path, what: str) -> None:
    """Refuse `what` of `path` when its `nbytes` exceed the physical memory (if known)."""
    total = physical_memory()
    if total is not None and nbytes > total:
        raise BundleError(
            f"{path}: {what} needs {nbytes} bytes but this machine has {total} bytes of memory; "
            "the bundle is too large for it (or its sizes are forged)"
        )
