"""Backends that run a parsed StableHLO module from JAX, chosen by name."""

from __future__ import annotations

from ..errors import JuliaBridgeError
from ..stablehlo import StableHLOModule
from .base import Backend
from .enzyme import EnzymeBackend, enzyme_available
from .xla import XlaBackend

BACKENDS = ("auto", "enzyme", "xla")


def resolve_backend_name(name: str) -> str:
    """Map "auto" to "enzyme" where enzyme-ad imports, else "xla"; validate the name."""
    if name not in BACKENDS:
        raise JuliaBridgeError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    if name == "auto":
        return "enzyme" if enzyme_available() else "xla"
    return name


def make_backend(
    module: StableHLOModule,
    name: str = "auto",
    *,
    trust: bool = False,
    vjp_source: StableHLOModule | str | None = None,
) -> Backend:
    """Build the named backend for `module` (all load-time work happens here).

    `vjp_source` is a VJP module (spec §5) for the xla backend's gradients.
    """
    resolved = resolve_backend_name(name)
    if resolved == "enzyme":
        return EnzymeBackend(module, trust=trust)
    return XlaBackend(module, trust=trust, vjp_source=vjp_source)


__all__ = [
    "BACKENDS",
    "Backend",
    "EnzymeBackend",
    "XlaBackend",
    "make_backend",
    "resolve_backend_name",
]
