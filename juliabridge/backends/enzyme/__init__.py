"""The `enzyme` backend: enzyme_ad.jax.hlo_call, made to work eagerly and on every dtype.

hlo_call inlines @main into the caller's XLA program (so XLA fuses across the boundary) and
differentiates it with Enzyme. Three of its limits are handled here, at load time:
- it refuses eager calls ("must be JIT'ed"), so eager calls go through a cached jax.jit
  (the juliabridge primitive's impl, transforms/primitives.py);
- its type table lacks f16, i16, ui8, ui16 and rejects i1, so @main is wrapped in a new @main
  that widens those at the boundary (exactly: every value of the narrow type is representable);
- its VJP indexes argument activities by result number and fails when @main has more results
  than arguments, so the wrapper pads @main with unused scalar arguments.

Derivatives of a module loaded without trust=True are derived by Enzyme in a separate process
(sandbox.py, whose child runs child.py: its passes crash on some valid modules) and run as
checked StableHLO through the xla backend; with trust=True they are derived in this process,
inlined by hlo_call. dumps.py removes the files enzyme-ad leaves behind.

This package is the whole Enzyme route: nothing below backends/ imports it, and the xla
backend reaches it only through the VJP fallback `backends/__init__.py` registers
(`derive_vjp_text`). It may import transforms/, stablehlo/, backends.lax and backends.xla.
"""

from __future__ import annotations

import re
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
from ...stablehlo import StableHLOModule, TensorSpec, parse_module
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
from . import sandbox
from .dumps import drop_enzyme_dumps

#: Element types hlo_call cannot take, and the type each crosses the boundary as.
BOUNDARY_TYPES = {"f16": "f32", "i16": "i32", "ui8": "ui32", "ui16": "ui32", "i1": "i8"}
_PAD = TensorSpec((), "f32")
_INNER = "__juliabridge_inner_main"
_MAIN_DECL = re.compile(r"func\.func (?:public )?@main\(")


def enzyme_available() -> bool:
    """Whether enzyme_ad's JAX integration imports here (CPython 3.11 wheels only)."""
    try:
        import enzyme_ad.jax  # noqa: F401
    except Exception:  # enzyme_ad can fail with ImportError or a jaxlib ABI error
        return False
    return True


def _outer(spec: TensorSpec) -> TensorSpec:
    return TensorSpec(spec.shape, BOUNDARY_TYPES.get(spec.dtype, spec.dtype))


def _wrapped_text(module: StableHLOModule) -> tuple[str, int]:
    """The module with a boundary-converting @main, and the number of padding arguments."""
    n_pad = max(0, len(module.results) - len(module.arguments))
    needs_cast = any(s.dtype in BOUNDARY_TYPES for s in module.arguments + module.results)
    if not needs_cast and n_pad == 0:
        return module.text, 0
    # module.text is our own print of the module, so it ends with the module's closing brace.
    body = module.text.rstrip()
    inner, found = _MAIN_DECL.subn(f"func.func private @{_INNER}(", body[:-1], count=1)
    if not body.endswith("}") or found != 1:
        raise UnsupportedModuleError(
            f"{module.origin}: could not locate @main in the printed module to wrap it"
        )
    outer_args = [_outer(s) for s in module.arguments] + [_PAD] * n_pad
    lines = []
    call_args = []
    for i, (spec, outer) in enumerate(zip(module.arguments, outer_args)):
        if spec == outer:
            call_args.append(f"%arg{i}")
            continue
        lines.append(f"    %c{i} = stablehlo.convert %arg{i} : ({outer}) -> {spec}")
        call_args.append(f"%c{i}")
    in_types = ", ".join(str(s) for s in module.arguments)
    res_types = ", ".join(str(s) for s in module.results)
    n_res = len(module.results)
    res = "%r" if n_res == 1 else f"%r:{n_res}"
    lines.append(
        f"    {res} = func.call @{_INNER}({', '.join(call_args)}) : ({in_types}) -> ({res_types})"
    )
    rets = []
    for k, spec in enumerate(module.results):
        ref = "%r" if n_res == 1 else f"%r#{k}"
        outer = _outer(spec)
        if spec == outer:
            rets.append(ref)
            continue
        lines.append(f"    %o{k} = stablehlo.convert {ref} : ({spec}) -> {outer}")
        rets.append(f"%o{k}")
    sig = ", ".join(f"%arg{i}: {s}" for i, s in enumerate(outer_args))
    outer_res = ", ".join(str(_outer(s)) for s in module.results)
    ret_line = f"    return {', '.join(rets)} : {outer_res}" if rets else "    return"
    wrapper = (
        f"  func.func @main({sig}) -> ({outer_res}) {{\n"
        + "\n".join(lines)
        + f"\n{ret_line}\n  }}\n"
    )
    return inner + wrapper + "}\n", n_pad


class EnzymeBackend:
    """Calls enzyme_ad.jax.hlo_call on the (boundary-wrapped) module inside a cached jit."""

    name = "enzyme"
    fallback_reason: str | None = None

    def __init__(self, module: StableHLOModule, *, trust: bool = False) -> None:
        if not enzyme_available():
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
        self.text, self.n_pad = _wrapped_text(self.enzyme_module)
        self._hlo_call = hlo_call

    def _traced(self, *args: jax.Array) -> tuple[jax.Array, ...]:
        outer = [
            jnp.asarray(a).astype(dtypes.to_numpy(_outer(s).dtype))
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
    if not enzyme_available():
        return None
    return EnzymeBackend(module, trust=trust).vjp_module_text()
