"""Choosing a backend by name, and the one registration the backends need: the xla backend's
fallback VJP, derived by Enzyme where it is importable."""

from __future__ import annotations

from ..errors import JuliaBridgeError, UnsupportedModuleError
from ..stablehlo import StableHLOModule
from ..stablehlo.policy import check_kernel_targets
from . import deadline
from .base import Backend
from .enzyme import EnzymeBackend, derive_vjp_text, enzyme_available
from .lax import LaxBackend
from .xla import VjpSource, XlaBackend, set_fallback_vjp

# The xla backend never imports Enzyme: its VJP of a module lax cannot lift is derived by the
# function registered here (None where enzyme-ad is not importable: a clear TransformError).
set_fallback_vjp(derive_vjp_text)

BACKENDS = ("auto", "lax", "enzyme", "xla")


def resolve_backend_name(name: str) -> str:
    """Validate a backend name ("auto" stays "auto": it is resolved per module)."""
    if not isinstance(name, str) or name not in BACKENDS:
        raise JuliaBridgeError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    return name


def foreign_backend_name() -> str:
    """The backend "auto" falls back to when a module does not lift: enzyme where importable."""
    return "enzyme" if enzyme_available() else "xla"


def make_backend(
    module: StableHLOModule,
    name: str = "auto",
    *,
    trust: bool = False,
    vjp_source: VjpSource = None,
    compile_limit: float | None = None,
) -> Backend:
    """Build the named backend for `module` (all load-time work happens here).

    "auto" lifts the module onto the lax backend when every op lifts, and otherwise falls back
    to enzyme (where importable) or xla, recording why on the backend as `fallback_reason`.
    `vjp_source` is a VJP module (spec §5) for the xla backend's gradients, or a function
    returning one (called only when gradients are first needed). An untrusted module that
    could compile for long is compiled first in a child under `compile_limit` seconds
    (default $JULIABRIDGE_COMPILE_LIMIT or 300; 0: off; backends/deadline.py).

    Raises:
        ResourceLimitError: the untrusted module's compile ran past the compile limit.
        UnsupportedOpError: backend="lax" and an op does not lift.
        BackendUnavailableError: backend="enzyme" without enzyme-ad.
    """
    resolved = resolve_backend_name(name)
    limit = 0.0 if trust else deadline.compile_limit(compile_limit)
    reason = None
    if resolved in ("auto", "lax"):
        try:
            lax = LaxBackend(module, trust=trust)
        except UnsupportedModuleError as e:
            if resolved == "lax":
                raise
            reason = str(e)
        else:
            deadline.check_compile_time(module, "lax", limit)
            return lax
        resolved = foreign_backend_name()
    if reason is not None and not trust:
        try:
            check_kernel_targets(module)
        except UnsupportedModuleError as e:
            # A custom call only lax runs, in a module lax cannot lift for another reason:
            # the user needs both reasons.
            raise UnsupportedModuleError(
                f"{e} (backend='auto' tried the lax backend first: {reason})"
            ) from e
    backend: Backend
    if resolved == "enzyme":
        backend = EnzymeBackend(module, trust=trust)
    else:
        backend = XlaBackend(module, trust=trust, vjp_source=vjp_source)
    backend.fallback_reason = reason
    deadline.check_compile_time(module, resolved, limit)
    return backend


__all__ = ["BACKENDS", "foreign_backend_name", "make_backend", "resolve_backend_name"]
