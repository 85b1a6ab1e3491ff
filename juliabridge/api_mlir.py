"""load_mlir: a bare Reactant module (path or text) as a JAX callable."""

from __future__ import annotations

import os

from .backends import make_backend, resolve_backend_name
from .function import ImportedFunction
from .stablehlo import parse_module


def load_mlir(
    source: str | os.PathLike[str], *, backend: str = "auto", trust: bool = False
) -> ImportedFunction:
    """Load a StableHLO module as Reactant prints it; call it with arrays in @main order.

    `backend` is "enzyme" (enzyme-ad's hlo_call), "xla" (a jax.export.Exported) or "auto"
    (enzyme where importable). `trust=True` admits ops and custom calls outside the allowlist.
    """
    backend = resolve_backend_name(backend)  # a typo fails before any parsing work
    module = parse_module(source, trust=trust)
    return ImportedFunction(module, make_backend(module, backend, trust=trust))
