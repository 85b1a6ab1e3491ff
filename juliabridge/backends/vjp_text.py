"""A module's VJP module text (spec §5), derived through the lax backend (JAX's own rules) when
every op lifts, else with Enzyme where enzyme-ad imports (in a separate process,
backends/enzyme/sandbox.py). `juliabridge vjp` hands it to the bundle writer."""

from __future__ import annotations

from ..errors import BackendUnavailableError, UnsupportedModuleError
from ..stablehlo import StableHLOModule
from ..support import progress
from ..transforms.derive import vjp_module_text
from .enzyme import EnzymeBackend, enzyme_available
from .lax import LaxBackend

__all__ = ["derive_vjp_text"]


def derive_vjp_text(module: StableHLOModule, where: str) -> tuple[str, str]:
    """The VJP module's text (spec §5) and how it was derived: "lax" or "Enzyme".

    Raises:
        BackendUnavailableError: the module does not lift onto lax and enzyme-ad is not
            importable here.
        TransformError: Enzyme cannot derive the VJP.
    """
    try:
        lifted = LaxBackend(module)
    except UnsupportedModuleError as e:
        why_not_lax = str(e)
    else:
        with progress.spinner(f"deriving the VJP module through lax: {where}"):
            return vjp_module_text(lifted.call, module.arguments, module.results), "lax"
    if not enzyme_available():
        raise BackendUnavailableError(
            f"{where}: the VJP module cannot be derived here: the lax backend cannot lift the "
            f"module ({why_not_lax}) and enzyme-ad is not importable (its wheels are for "
            "CPython 3.11: pip install 'juliabridge[enzyme]' there and run juliabridge vjp "
            "there)"
        )
    with progress.spinner(f"deriving the VJP module with Enzyme: {where}"):
        return EnzymeBackend(module).vjp_module_text(), "Enzyme"
