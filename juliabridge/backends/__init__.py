"""Backends that run a parsed StableHLO module from JAX, chosen by name (select.py).

Registration happens in two named places: the lax backend's lift rules in ``lax/ops/__init__.py``,
and the xla backend's fallback VJP (Enzyme's, where importable) in ``select.py``.
"""

from __future__ import annotations

from .base import Backend
from .enzyme import EnzymeBackend
from .lax import LaxBackend
from .select import BACKENDS, foreign_backend_name, make_backend, resolve_backend_name
from .xla import XlaBackend

__all__ = [
    "BACKENDS",
    "Backend",
    "EnzymeBackend",
    "LaxBackend",
    "XlaBackend",
    "foreign_backend_name",
    "make_backend",
    "resolve_backend_name",
]
