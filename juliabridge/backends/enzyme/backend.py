"""The enzyme backend: hlo_call on the boundary-wrapped module inside a cached jit, and its
derivatives (in this process for trusted modules, else derived out of process by sandbox.py and
run as checked StableHLO through the xla backend)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import (
    BackendUnavailableError,
    JuliaBridgeError,
    TransformError,
    UnsupportedModuleError,
)
from ...stablehlo import StableHLOModule, parse_module
from ...stablehlo.contracts import check_platform
from ...stablehlo.policy import check_kernel_targets
from ...support import dtypes
from ...support.jaxinternals import current_platform, initialize_lapack
from ...transforms.derive import (
    jvp_from_primal,
    jvp_module_text,
    jvp_signature,
    vjp_from_primal,
    vjp_module_text,
    vjp_signature,
)
from ..lax.rewrite import before_enzyme, rewrite_through_lax
from ..xla import XlaBackend
from . import availability, sandbox
from .boundary import outer_spec, wrapped_text
from .dumps import drop_enzyme_dumps


class EnzymeBackend:
    """Calls enzyme_ad.jax.hlo_call on the (boundary-wrapped) module inside a cached jit."""

    name = "enzyme"
    fallback_reason: str | None = None

    def __init__(self, module: StableHLOModule, *, trust: bool = False) -> None:
        if not availability.enzyme_available():
            raise BackendUnavailableError(
                "backend='enzyme' needs enzyme-ad, which is not importable here (its wheels "
                "exist for CPython 3.11 on Linux x86_64/aarch64 and macOS arm64 only). Install "
                "it with `pip install 'juliabridge[enzyme]'` on such a Python, or use "
                "backend='lax' (every transformation) or backend='xla', which need no enzyme-ad."
            )
        from enzyme_ad.jax import hlo_call

        if not trust:
            # Enzyme and XLA call the kernels: targets admitted only because lax lifts them
            # are refused.
            check_kernel_targets(module)
            check_platform(module.custom_calls, current_platform(), module.origin)
        if any(t.startswith("lapack_") for t in module.custom_calls):
            initialize_lapack()  # else the kernels jump through null pointers (SIGSEGV)
        drop_enzyme_dumps()
        self.module = module
        self.trust = trust
        # Enzyme's batch_norm rules are wrong or missing (and abort on Lux's modules), and XLA
        # orders complex numbers against the spec: those ops reach them as calls of their
        # defining formulas, lowered by JAX (lax/rewrite.py).
        self.enzyme_module = rewrite_through_lax(module, before_enzyme, trust=trust)
        self.text, self.n_pad = wrapped_text(self.enzyme_module)
        self._hlo_call = hlo_call

    def _traced(self, *args: jax.Array) -> tuple[jax.Array, ...]:
        outer = [
            jnp.asarray(a).astype(dtypes.to_numpy(outer_spec(s).dtype))
            for a, s in zip(args, self.module.arguments)
        ]
        outer += [jnp.zeros((), np.float32)] * self.n_pad
        outs = self._hlo_call(*outer, source=self.text)
        return tuple(
            (o != 0) if s.dtype == "i1" else o.astype(dtypes.to_numpy(s.dtype))
            for o, s in zip(outs, self.module.results)
        )

    def call(self, *args: jax.Array) -> tuple[jax.Array, ...]:
        """Run @main (traceable; eager calls go through jax.jit in the primitive's impl)."""
        return self._traced(*args)

    def jvp_function(self) -> Callable[..., tuple[jax.Array, ...]]:
        """Forward mode through Enzyme: (*primals, *float tangents) -> float result tangents.

        Raises TransformError when Enzyme cannot derive it.
        """
        if self.trust:
            return jvp_from_primal(self._traced, self.module.arguments, self.module.results)
        return self._derived("jvp")

    def vjp_function(self) -> Callable[..., tuple[jax.Array, ...]]:
        """Reverse mode through Enzyme, in the bundle's VJP convention (spec §5).

        Raises TransformError when Enzyme cannot derive it.
        """
        if self.trust:
            return vjp_from_primal(self._traced, self.module.arguments, self.module.results)
        return self._derived("vjp")

    def derivative_text(self, mode: str) -> str:
        """The JVP ("jvp") or VJP ("vjp") lowered to plain StableHLO, derived in this process."""
        lower = jvp_module_text if mode == "jvp" else vjp_module_text
        return lower(self._traced, self.module.arguments, self.module.results)

    def vjp_module_text(self) -> str:
        """The VJP as plain StableHLO, to store in a bundle for machines without Enzyme.

        Derived in a separate process unless the module is trusted; raises TransformError.
        """
        if self.trust:
            return self.derivative_text("vjp")
        return sandbox.derive(self.module.text, "vjp", self.module.origin)

    def _derived(self, mode: str) -> Callable[..., tuple[jax.Array, ...]]:
        """The derivative derived out of process, checked like any module, run by XLA."""
        text = sandbox.derive(self.module.text, mode, self.module.origin)
        signature = (jvp_signature if mode == "jvp" else vjp_signature)(
            self.module.arguments, self.module.results
        )
        try:
            derived = parse_module(text)
            want_in, want_out = signature
            if list(derived.arguments) != want_in or list(derived.results) != want_out:
                raise UnsupportedModuleError(
                    f"its signature ({', '.join(map(str, derived.arguments))}) -> "
                    f"({', '.join(map(str, derived.results))}) is not the expected "
                    f"({', '.join(map(str, want_in))}) -> ({', '.join(map(str, want_out))})"
                )
            return XlaBackend(derived).call
        except JuliaBridgeError as e:
            raise TransformError(
                f"{self.module.origin}: the {sandbox.MODES[mode]} derivative Enzyme produced "
                f"cannot be run here: {e}"
            ) from e


def derive_vjp_text(module: StableHLOModule, trust: bool) -> str | None:
    """The VJP of `module` as StableHLO text derived with Enzyme (out of process unless
    `trust`), or None when enzyme-ad is not importable here.

    Raises TransformError when Enzyme cannot derive it.
    """
    if not availability.enzyme_available():
        return None
    return EnzymeBackend(module, trust=trust).vjp_module_text()
