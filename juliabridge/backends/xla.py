"""The `xla` backend: the module wrapped as a jax.export.Exported (no enzyme-ad needed).

Reverse mode comes from a VJP module (spec §5): one shipped in a bundle, or derived once through
the lax backend, or, where the module does not lift, by the fallback deriver the backend is given
(`derive_vjp=`) or the one registered with `set_fallback_vjp` (backends/select.py registers
Enzyme's, which answers None where enzyme-ad is not importable). Forward mode is not available
on this backend. This module never imports the enzyme backend.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from ..errors import TransformError, UnsupportedModuleError
from ..stablehlo import StableHLOModule, TensorSpec, parse_module
from ..stablehlo.contracts import check_platform
from ..stablehlo.policy import check_kernel_targets
from ..support import dtypes
from ..support.jaxinternals import (
    build_exported,
    current_platform,
    initialize_lapack,
    ir,
    make_context,
    serialize_portable,
)
from ..transforms.derive import vjp_module_text
from .lax.rewrite import misread_by_xla, rewrite_through_lax

VjpSource = StableHLOModule | str | Callable[[], StableHLOModule | None] | None
#: (module, trust) -> the VJP module's StableHLO text, or None when this deriver is unavailable.
VjpDeriver = Callable[[StableHLOModule, bool], str | None]

_fallback_vjp: VjpDeriver | None = None


def set_fallback_vjp(derive: VjpDeriver | None) -> None:
    """Register the deriver XlaBackend uses, when it was given none, for a VJP the lax backend
    cannot derive (backends/select.py registers Enzyme's).

    Args:
        derive: (module, trust) -> VJP module text or None (unavailable); None unregisters.
    """
    global _fallback_vjp
    _fallback_vjp = derive


def _aval(spec: TensorSpec) -> jax.core.ShapedArray:
    return jax.core.ShapedArray(spec.shape, dtypes.to_numpy(spec.dtype))


def expected_vjp_signature(
    module: StableHLOModule,
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """(arguments, results) a VJP module of `module` must have (spec §5)."""
    return module.arguments + module.results, module.arguments


class XlaBackend:
    """Serializes the module once at load time; calls go through Exported.call."""

    name = "xla"
    fallback_reason: str | None = None

    def __init__(
        self,
        module: StableHLOModule,
        *,
        trust: bool = False,
        vjp_source: VjpSource = None,
        derive_vjp: VjpDeriver | None = None,
    ) -> None:
        if not trust:
            # XLA calls the kernels: targets admitted only because lax lifts them are refused.
            check_kernel_targets(module)
            check_platform(module.custom_calls, current_platform(), module.origin)
        if module.text.rstrip().endswith("#-}") and "dense_resource<" in module.text:
            # MLIR prints a resource section last; XLA's converter refused its blobs at the
            # first call ("Only dense elements attr are supported"), an ExecutionError.
            raise UnsupportedModuleError(
                f"{module.origin}: the module holds dense_resource constants (blobs in its "
                "resource section), which XLA's converter does not read; load it with "
                "backend='lax', which decodes each blob once"
            )
        if "chlo.ragged_dot" in module.ops and current_platform() == "cpu":
            # XLA's CPU compiler has no ragged-dot kernel: an ExecutionError at the first call
            # ("HLO opcode `ragged-dot` is not supported by XLA:CPU ThunkEmitter") before.
            raise UnsupportedModuleError(
                f"{module.origin}: the module holds chlo.ragged_dot, which XLA's CPU compiler "
                "cannot compile; load it with backend='lax', which computes it as JAX does "
                "off TPU and GPU (one masked dot per group)"
            )
        if any(t.startswith("lapack_") for t in module.custom_calls):
            initialize_lapack()  # jaxlib fills the kernels' LAPACK pointers lazily
        self.module = module
        self.trust = trust
        self.vjp_source = vjp_source
        self.derive_vjp = derive_vjp
        # XLA orders complex numbers against the spec: those ops reach it as calls of their
        # defining formulas, lowered by JAX (lax/rewrite.py).
        compiled = rewrite_through_lax(module, misread_by_xla, trust=trust)
        try:
            with make_context():
                bytecode = serialize_portable(ir.Module.parse(compiled.text))
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

    def jvp_function(self) -> Callable[..., tuple[jax.Array, ...]]:
        """Not available: XLA cannot differentiate foreign StableHLO in forward mode."""
        raise TransformError(
            f"{self.module.origin}: forward mode (jax.jvp, jax.jacfwd) is not available on "
            "backend='xla', which differentiates only through a VJP module. Use backend='lax' "
            "(every transformation and order; backend='auto' picks it when every op lifts) or "
            "backend='enzyme' (needs enzyme-ad) for forward mode, or reverse mode (jax.grad, "
            "jax.vjp, jax.jacrev) here."
        )

    def _vjp_module(self) -> StableHLOModule:
        src = self.vjp_source
        if callable(src):
            src = src()
        if isinstance(src, StableHLOModule):
            return src
        if isinstance(src, str):
            return parse_module(src, trust=self.trust)
        from ..errors import UnsupportedModuleError
        from .lax import LaxBackend

        # Derived once: through the lax backend (JAX's own rules; right for batch_norm_*) when
        # the module lifts, else by the fallback deriver (Enzyme's, where enzyme-ad imports).
        try:
            lifted = LaxBackend(self.module, trust=self.trust)
        except UnsupportedModuleError as lax_error:
            why_not_lax = str(lax_error)
        else:
            text = vjp_module_text(lifted.call, self.module.arguments, self.module.results)
            return parse_module(text, trust=True)
        derive = self.derive_vjp or _fallback_vjp
        derived = derive(self.module, self.trust) if derive is not None else None
        if derived is None:
            raise TransformError(
                f"{self.module.origin}: gradients on backend='xla' need a VJP module and none "
                "is available: the bundle carries none, the lax backend cannot lift the module "
                f"({why_not_lax}), and enzyme-ad (which could derive one) is not importable. "
                "Run `juliabridge vjp BUNDLE` once on a machine with enzyme-ad (CPython 3.11)."
            )
        return parse_module(derived, trust=self.trust)

    def vjp_function(self) -> Callable[..., tuple[jax.Array, ...]]:
        """(*primals, *cotangents) -> cotangents, through the VJP module compiled by XLA."""
        vjp_module = self._vjp_module()
        want_in, want_out = expected_vjp_signature(self.module)
        if vjp_module.arguments != want_in or vjp_module.results != want_out:
            raise TransformError(
                f"{vjp_module.origin}: the VJP module's signature "
                f"({', '.join(map(str, vjp_module.arguments))}) -> "
                f"({', '.join(map(str, vjp_module.results))}) does not match the forward module "
                "(expected its arguments then one cotangent per result, returning one "
                "cotangent per argument; docs/bundle-format.md §5)"
            )
        return XlaBackend(vjp_module, trust=self.trust).call
