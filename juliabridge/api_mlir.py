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

    Args:
        source: path of a .mlir file, or the module text itself.
        backend: "auto" (default: "lax" when every op of the module lifts, else "enzyme" where
            enzyme-ad imports, else "xla"; `fn.fallback_reason` says why lax was not used),
            "lax" (the module as JAX primitives: every transformation), "enzyme"
            (enzyme-ad's hlo_call) or "xla" (a jax.export.Exported).
        trust: admit ops and custom-call targets outside the allowlist (for modules you made
            yourself; never for files from elsewhere).

    Returns:
        An ImportedFunction: ``fn(*arrays) -> tuple`` of the results, jittable and
        differentiable as the backend allows.

    Raises:
        MLIRParseError: the text does not parse, or the file cannot be read.
        UnsupportedModuleError: an op, type or custom call is refused (UnsupportedOpError, its
            subclass, names the op and line when backend="lax" cannot lift it).
        BackendUnavailableError: backend="enzyme" without enzyme-ad.
        JuliaBridgeError: an unknown backend name.
    """
    backend = resolve_backend_name(backend)  # a typo fails before any parsing work
    module = parse_module(source, trust=trust)
    return ImportedFunction(module, make_backend(module, backend, trust=trust))
