"""The `xla` backend: the module wrapped as a jax.export.Exported (no enzyme-ad needed)."""

from __future__ import annotations

import jax

from .. import dtypes
from ..errors import UnsupportedModuleError
from ..jaxinternals import build_exported, ir, make_context, serialize_portable
from ..stablehlo import StableHLOModule, TensorSpec


def _aval(spec: TensorSpec) -> jax.core.ShapedArray:
    return jax.core.ShapedArray(spec.shape, dtypes.to_numpy(spec.dtype))


class XlaBackend:
    """Serializes the module once at load time; calls go through Exported.call."""

    name = "xla"

    def __init__(self, module: StableHLOModule, *, trust: bool = False) -> None:
        self.module = module
        try:
            with make_context():
                bytecode = serialize_portable(ir.Module.parse(module.text))
        except (ir.MLIRError, ValueError, RuntimeError) as e:
            raise UnsupportedModuleError(
                f"{module.origin}: XLA's StableHLO serializer rejected the module: {str(e)[:2000]}"
            ) from e
        self.exported = build_exported(
            name="juliabridge_main",
            module_bytecode=bytecode,
            in_avals=[_aval(a) for a in module.arguments],
            out_avals=[_aval(r) for r in module.results],
            extra_custom_calls=module.custom_calls if trust else (),
        )

    def call(self, *args: jax.Array) -> tuple[jax.Array, ...]:
        """Run @main through Exported.call (eager or traced)."""
        return tuple(self.exported.call(*args))
