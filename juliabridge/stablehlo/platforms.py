"""The platform a custom-call target names, for refusals that say where a kernel runs.

A target such as ``metal_matmul``, ``cublas_gemm``, ``hipsolver_getrf`` or ``tpu_custom_call``
calls compiled code for one platform: no StableHLO pass removes it, so advice to re-export
with Reactant's pipeline cannot help; what can is running the module on that platform, or
exporting the model again for the platform at hand.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

#: (pattern on the lower-cased target, platform as said to the user, JAX platform names that
#: run it). A word starts the pattern: "cu_" prefixes jaxlib's CUDA targets.
_KERNELS = (
    (re.compile(r"(?<![a-z])(?:metal|mps)"), "Apple Metal (mps)", frozenset({"metal"})),
    (
        re.compile(r"(?<![a-z])(?:cuda|cu(?:blas|dnn|solver|sparse|fft|_)|nccl|nvshmem|ptx)"),
        "CUDA (NVIDIA GPUs)",
        frozenset({"cuda", "gpu"}),
    ),
    (
        re.compile(r"(?<![a-z])(?:rocm|roc(?:blas|solver|prim|fft)|hip|miopen|rccl)"),
        "ROCm (AMD GPUs)",
        frozenset({"rocm", "gpu"}),
    ),
    (re.compile(r"(?<![a-z])tpu"), "TPU", frozenset({"tpu"})),
    (re.compile(r"(?<![a-z])gpu"), "a GPU (CUDA or ROCm)", frozenset({"cuda", "rocm", "gpu"})),
)


def kernel_platform(target: str) -> tuple[str, frozenset[str]] | None:
    """The platform `target` names (as said to the user, and JAX's names for it), or None."""
    low = target.lower()
    for pattern, said, names in _KERNELS:
        if pattern.search(low):
            return said, names
    return None


def platform_hint(targets: Sequence[str], sites: Mapping[str, str], current: str) -> str:
    """A sentence naming each target's platform and the way out, or "" where none is named."""
    named = [(t, p) for t in targets if (p := kernel_platform(t)) is not None]
    if not named:
        return ""
    parts = [
        f"{t}{f' ({sites[t]})' if sites.get(t) else ''} is a kernel for {said}"
        for t, (said, _) in named[:4]
    ]
    # Reactant's backend names (R src/Reactant.jl:401, set_default_backend(::String)).
    backend = {"cuda": "gpu", "rocm": "gpu"}.get(current, current)
    return (
        f"{'; '.join(parts)}: compiled code for that platform, not StableHLO, so no re-export "
        "pass removes it. Run the module with JAX on that platform (JAX's platform here is "
        f"{current}), or export the model again for this one (in Julia, "
        f'Reactant.set_default_backend("{backend}") before exporting)'
    )


def runs_here(target: str, current: str) -> bool:
    """Whether `target` names no platform, or names the one JAX runs on here."""
    found = kernel_platform(target)
    return found is None or current.lower() in found[1]


__all__ = ["kernel_platform", "platform_hint", "runs_here"]
