"""Which ops and custom calls a loaded module may contain."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import UnsupportedModuleError
from ..jaxinternals import custom_call_allowlist

#: Dialects whose ops stock XLA compiles. ``builtin`` only contributes the module op itself.
ALLOWED_DIALECTS = frozenset({"stablehlo", "chlo", "func", "builtin"})

_REEXPORT_HINT = (
    "Re-export the model with Reactant's full optimization pipeline "
    "(CompileOptions(optimization_passes=:all), as JuliaBridge.export_lux does), which lowers "
    "Enzyme-JAX ops to plain StableHLO"
)


def check_ops(ops: Iterable[str], *, trust: bool, where: str) -> None:
    """Refuse ops outside stablehlo/chlo/func unless `trust`; name the first offenders."""
    if trust:
        return
    bad = sorted({op for op in ops if op.split(".", 1)[0] not in ALLOWED_DIALECTS})
    if bad:
        raise UnsupportedModuleError(
            f"{where}: op(s) {', '.join(bad[:8])} are not StableHLO/CHLO/func ops, so stock "
            f"XLA cannot run them. {_REEXPORT_HINT}. Pass trust=True only if your jaxlib has "
            "these dialects registered."
        )


def check_custom_calls(targets: Iterable[str], *, trust: bool, where: str) -> None:
    """Refuse custom-call targets outside jax.export's stable allowlist unless `trust`."""
    if trust:
        return
    allowed = custom_call_allowlist()
    bad = sorted(set(targets) - allowed)
    if bad:
        hint = _REEXPORT_HINT
        if any(t.startswith("enzymexla") or t.startswith("xla_throw") for t in bad):
            hint += (
                "; enzymexla_* targets exist only inside Reactant/Enzyme-JAX runtimes, "
                "so they cannot run in stock jaxlib"
            )
        raise UnsupportedModuleError(
            f"{where}: stablehlo.custom_call target(s) {', '.join(bad[:8])} are not in the "
            f"allowlist of targets stock jaxlib registers. {hint}. Pass trust=True to load "
            "anyway if you registered these targets yourself."
        )
