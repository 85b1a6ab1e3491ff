"""Which ops and custom calls a loaded module may contain."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import UnsupportedModuleError
from ..jaxinternals import custom_call_allowlist
from .contracts import contract_targets

#: Dialects whose ops stock XLA compiles (spec §2), plus the one builtin op a module needs and
#: the func ops of a call graph (func.constant/call_indirect make function values, which XLA
#: has no notion of).
ALLOWED_DIALECTS = frozenset({"stablehlo", "chlo"})
ALLOWED_OPS = frozenset({"builtin.module", "func.func", "func.call", "func.return"})

#: Custom-call targets from jax.export's stable list that carry code of their own (a Mosaic,
#: Mosaic-GPU or Triton kernel in their backend_config, or a TensorFlow function): running them
#: would execute code shipped inside the bundle, so they are refused like any unknown target.
CODE_CARRYING_TARGETS = frozenset(
    {
        "tpu_custom_call",
        "mosaic_gpu",
        "mosaic_gpu_v2",
        "__gpu$xla.gpu.triton",
        "tf.call_tf_function",
    }
)
_CODE_CARRYING_WORDS = ("triton", "mosaic", "tpu_custom_call", "call_tf", "pallas")

_REEXPORT_HINT = (
    "Re-export the model with Reactant's full optimization pipeline "
    "(CompileOptions(optimization_passes=:all), as JuliaBridge.export_lux does), which lowers "
    "Enzyme-JAX ops to plain StableHLO"
)


def check_ops(ops: Iterable[str], *, trust: bool, where: str) -> None:
    """Refuse ops outside stablehlo/chlo/func unless `trust`; name the first offenders."""
    if trust:
        return
    bad = sorted(
        {op for op in ops if op not in ALLOWED_OPS and op.split(".", 1)[0] not in ALLOWED_DIALECTS}
    )
    if bad:
        raise UnsupportedModuleError(
            f"{where}: op(s) {', '.join(bad[:8])} are not StableHLO/CHLO ops or func.func/call/"
            f"return, so stock XLA cannot run them. {_REEXPORT_HINT}. Pass trust=True only if "
            "your jaxlib has these dialects registered."
        )


def carries_code(target: str) -> bool:
    """Whether a custom-call target runs a kernel or function shipped in the module itself."""
    low = target.lower()
    return target in CODE_CARRYING_TARGETS or any(w in low for w in _CODE_CARRYING_WORDS)


def allowed_custom_calls() -> frozenset[str]:
    """jax.export's stable targets that carry no code of their own and have a contract here."""
    return frozenset(
        t for t in custom_call_allowlist() if not carries_code(t) and t in contract_targets()
    )


def check_custom_calls(targets: Iterable[str], *, trust: bool, where: str) -> None:
    """Refuse custom-call targets outside jax.export's stable allowlist unless `trust`."""
    if trust:
        return
    allowed = allowed_custom_calls()
    bad = sorted(set(targets) - allowed)
    if bad:
        hint = _REEXPORT_HINT
        if any(carries_code(t) for t in bad):
            hint += (
                "; targets such as tpu_custom_call, mosaic_gpu* and Triton kernels run code "
                "carried inside the module, which juliabridge never does for an untrusted bundle"
            )
        stable = sorted(set(bad) & custom_call_allowlist() - {t for t in bad if carries_code(t)})
        if stable:
            hint += (
                f"; {', '.join(stable[:4])} {'is' if len(stable) == 1 else 'are'} on jax.export's "
                "stable list, but juliabridge has no operand/result contract for "
                f"{'it' if len(stable) == 1 else 'them'} (juliabridge/stablehlo/contracts.py), "
                "and an unchecked kernel call can corrupt memory"
            )
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
