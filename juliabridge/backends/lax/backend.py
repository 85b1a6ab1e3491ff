"""The lax backend's entry: `lift` a module into a Program and `LaxBackend` that evaluates it."""

from __future__ import annotations

from collections.abc import Callable

import jax

from ...errors import TransformError
from ...stablehlo import StableHLOModule
from ...support.jaxinternals import ir, make_context, x64_scope
from . import ops  # noqa: F401  (registers every lift rule: ops/__init__.py, the one place)
from .attrs import resource_blobs
from .evaluate import run_function
from .program import Program

__all__ = ["LaxBackend", "lift"]


def lift(module: StableHLOModule) -> Program:
    """Lift `module` (raises UnsupportedOpError naming the first op that cannot be lifted)."""
    parsed = getattr(module, "parsed", None)
    if parsed is not None:
        with parsed.context:
            return Program(parsed, origin=module.origin, resources=resource_blobs(module.text))
    with make_context(allow_unregistered=True):
        parsed = ir.Module.parse(module.text)
        return Program(parsed, origin=module.origin, resources=resource_blobs(module.text))


class LaxBackend:
    """Evaluates the lifted module with JAX primitives; JAX's rules do the rest."""

    name = "lax"
    #: ImportedFunction calls `call` directly (no juliabridge primitive around it).
    traceable = True
    fallback_reason: str | None = None

    def __init__(self, module: StableHLOModule, *, trust: bool = False) -> None:
        self.module = module
        self.trust = trust
        self.program = lift(module)

    def call(self, *args: jax.Array) -> tuple[jax.Array, ...]:
        """Run @main on checked arguments; traceable by every JAX transformation."""
        with x64_scope():
            return tuple(run_function(self.program.main, args))

    def jvp_function(self) -> Callable[..., tuple[jax.Array, ...]]:
        """Not used: JAX differentiates `call` itself."""
        raise TransformError("the lax backend is differentiated by JAX directly")

    def vjp_function(self) -> Callable[..., tuple[jax.Array, ...]]:
        """Not used: JAX differentiates `call` itself."""
        raise TransformError("the lax backend is differentiated by JAX directly")
