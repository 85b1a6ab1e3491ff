"""Which ops and custom calls a loaded module may contain.

The checks take what they check (op names, custom-call targets, a `KernelTargets`), never the
module class, so module.py imports this file and not the other way round."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from ..errors import UnsupportedModuleError
from ..support.jaxinternals import current_platform, custom_call_allowlist
from .contracts import contract_targets
from .lifted_custom_calls import lifted_targets
from .platforms import kernel_platform, platform_hint, runs_here


class KernelTargets(Protocol):
    """What `check_kernel_targets` reads of a module (StableHLOModule is one)."""

    @property
    def origin(self) -> str:
        """Where the module came from, for messages."""
        ...

    @property
    def custom_calls(self) -> tuple[str, ...]:
        """Its custom-call targets."""
        ...

    @property
    def custom_call_sites(self) -> Mapping[str, str]:
        """Target -> "line L" of its first call."""
        ...


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


#: Dialects whose ops jaxlib's serializer turns into StableHLO itself: only for these does
#: trust=True change the outcome (measured: ``mhlo.add`` runs on xla with trust=True; arith,
#: math, sdy and enzyme ops fail to serialize or parse either way).
SERIALIZABLE_DIALECTS = frozenset({"mhlo"})
_ENZYME_DIALECTS = ("enzyme", "enzymexla")


def is_allowed_op(op: str) -> bool:
    """Whether `op` is StableHLO, CHLO or one of the func ops a call graph needs."""
    return op in ALLOWED_OPS or op.split(".", 1)[0] in ALLOWED_DIALECTS


def _line(sites: Mapping[str, str], name: str) -> int:
    """The line number in ``sites[name]`` ("line L"), or a large one where it is unknown."""
    text = sites.get(name, "")
    return int(text[5:]) if text.startswith("line ") and text[5:].isdigit() else 1 << 62


def check_ops(
    ops: Iterable[str], *, trust: bool, where: str, sites: Mapping[str, str] | None = None
) -> None:
    """Refuse ops outside stablehlo/chlo/func unless `trust`; name every offender and the line
    of its first use (`sites`: op -> "line L").

    Raises:
        UnsupportedModuleError: listing each op (at most 32, with its line), a way out for its
            dialect (Enzyme's ops: Reactant's full pipeline lowers them), and trust=True only
            where it changes the outcome (mhlo ops, which jaxlib's serializer converts).
    """
    if trust:
        return
    lines = sites or {}
    bad = sorted({op for op in ops if not is_allowed_op(op)}, key=lambda op: (_line(lines, op), op))
    if not bad:
        return
    named = ", ".join(f"{op} ({lines[op]})" if lines.get(op) else op for op in bad[:32])
    more = f" and {len(bad) - 32} more" if len(bad) > 32 else ""
    dialects = {op.split(".", 1)[0] for op in bad}
    hints = []
    if dialects & set(_ENZYME_DIALECTS):
        hints.append(_REEXPORT_HINT)
    if dialects - set(_ENZYME_DIALECTS) - SERIALIZABLE_DIALECTS:
        hints.append(
            "Ops of other dialects must be lowered to StableHLO by the tool that wrote the "
            "module before juliabridge can run it"
        )
    if dialects <= SERIALIZABLE_DIALECTS:
        hints.append(
            "jaxlib converts mhlo ops to StableHLO itself, so backend='xla' with trust=True "
            "runs the module if you trust its source"
        )
    raise UnsupportedModuleError(
        f"{where}: op(s) {named}{more} are not StableHLO/CHLO ops or func.func/call/return, "
        f"so stock XLA cannot run them. {'. '.join(hints)}."
    )


def carries_code(target: str) -> bool:
    """Whether a custom-call target runs a kernel or function shipped in the module itself."""
    low = target.lower()
    return target in CODE_CARRYING_TARGETS or any(w in low for w in _CODE_CARRYING_WORDS)


def _stable_with_contract() -> frozenset[str]:
    """jax.export's stable targets that have an operand/result contract here."""
    return custom_call_allowlist() & contract_targets()


def allowed_custom_calls() -> frozenset[str]:
    """jax.export's stable targets that carry no code of their own and have a contract here."""
    return frozenset(t for t in _stable_with_contract() if not carries_code(t))


def admitted_lifted_targets() -> frozenset[str]:
    """Targets the lax backend lifts into JAX primitives, admitted at load
    (lifted_custom_calls.py)."""
    return frozenset(t for t in lifted_targets() if not carries_code(t))


def check_custom_calls(
    targets: Iterable[str],
    *,
    trust: bool,
    where: str,
    lifted: bool = True,
    sites: Mapping[str, str] | None = None,
) -> None:
    """Refuse custom-call targets outside jax.export's stable allowlist unless `trust`.

    With `lifted` (the load-time check) the targets the lax backend lifts are admitted too:
    they never reach a kernel on that backend. The backends that call the module's kernels
    (xla, enzyme) check again with ``lifted=False``. `sites` maps a target to the line of its
    first call, named in the error.

    Raises:
        UnsupportedModuleError naming the targets and the line of the first one's call (a
        policy refusal, exit code 17 in the CLI; the lax backend's own refusal of a target it
        does not lift, once admitted, is an UnsupportedOpError).
    """
    targets = set(targets)
    if trust or not targets:  # most modules have no custom call at all
        return
    # The rule of allowed_custom_calls and admitted_lifted_targets, with carries_code asked of
    # the module's few targets instead of every known one (the sets cost more than the check).
    admitted = _stable_with_contract() | (lifted_targets() if lifted else frozenset())
    bad = sorted(t for t in targets if carries_code(t) or t not in admitted)
    if bad:
        here = current_platform()
        line = (sites or {}).get(bad[0], "")
        at = f" (the first, {bad[0]}, at {line})" if line else ""
        # trust=True changes the outcome only for a target that could run on this platform.
        trusted = (
            " Pass trust=True to load anyway if you registered these targets yourself."
            if any(runs_here(t, here) for t in bad)
            else ""
        )
        raise UnsupportedModuleError(
            f"{where}: stablehlo.custom_call target(s) {', '.join(bad[:8])}{at} are not in the "
            f"allowlist of targets stock jaxlib registers. "
            f"{_custom_call_hint(bad, sites or {}, here)}.{trusted}"
        )


def _custom_call_hint(bad: list[str], sites: Mapping[str, str], here: str) -> str:
    """What to do about refused targets: the platform a kernel is for, where one is named;
    Reactant's full pipeline for the others (it lowers Enzyme-JAX's ops, not kernels)."""
    platform = platform_hint(bad, sites, here)
    hints = [platform] if platform else []
    if any(kernel_platform(t) is None for t in bad):
        hints.insert(0, _REEXPORT_HINT)
    hint = "; ".join(hints)
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
    liftable = sorted(set(bad) & admitted_lifted_targets())
    if liftable:
        hint += (
            f"; the lax backend lifts {', '.join(liftable[:4])} into JAX primitives, so "
            "backend='lax' (or 'auto') runs the module without calling the kernel"
        )
    if any(t.startswith("enzymexla") or t.startswith("xla_throw") for t in bad):
        hint += (
            "; enzymexla_* targets exist only inside Reactant/Enzyme-JAX runtimes, "
            "so they cannot run in stock jaxlib"
        )
    return hint


def check_kernel_targets(module: KernelTargets) -> None:
    """For a backend that calls the module's custom-call kernels (xla, enzyme): refuse the
    targets the load policy admitted only because the lax backend lifts them."""
    check_custom_calls(
        module.custom_calls,
        trust=False,
        where=module.origin,
        lifted=False,
        sites=module.custom_call_sites,
    )
