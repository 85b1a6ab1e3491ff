"""What every backend provides: a traceable call over flat arrays in @main order."""

from __future__ import annotations

from typing import Protocol

import jax

from ..stablehlo import StableHLOModule


class Backend(Protocol):
    """Runs one parsed module; `call` must be traceable (usable inside jax.jit)."""

    name: str
    module: StableHLOModule

    def call(self, *args: jax.Array) -> tuple[jax.Array, ...]:
        """Run @main on arrays whose shapes and dtypes were already checked."""
        ...
