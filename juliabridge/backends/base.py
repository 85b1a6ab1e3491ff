"""What every backend provides: a traceable call over flat arrays in @main order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import jax

from ..stablehlo import StableHLOModule


class Backend(Protocol):
    """Runs one parsed module; `call` must be traceable (usable inside jax.jit)."""

    name: str
    module: StableHLOModule
    #: Why "auto" did not pick the lax backend for this module (None when it was not asked).
    fallback_reason: str | None

    def call(self, *args: jax.Array) -> tuple[jax.Array, ...]:
        """Run @main on arrays whose shapes and dtypes were already checked."""
        ...

    def jvp_function(self) -> Callable[..., tuple[jax.Array, ...]]:
        """(*primals, *float tangents) -> float result tangents, or raise TransformError."""
        ...

    def vjp_function(self) -> Callable[..., tuple[jax.Array, ...]]:
        """(*primals, *result cotangents) -> argument cotangents, or raise TransformError."""
        ...
