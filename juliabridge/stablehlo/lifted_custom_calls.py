"""Custom-call targets a backend re-expresses as JAX primitives instead of calling a kernel.

The lax backend lifts some custom calls (the LAPACK/cuSOLVER/hipSOLVER linear-algebra targets
and the sharding annotations of ops/custom_call.py) into `jax.lax.linalg` and friends, after
checking the call against the target's contract (operand and result shapes, element types,
layouts, attributes). No kernel ever sees the module's buffers then: JAX lowers its own
primitives to calls it sized itself. So for the lax backend such a target is an ordinary op,
and the load policy admits it (policy.check_custom_calls) even when jax.export's allowlist or
juliabridge's kernel contracts (contracts.py) do not list it. The backends that do hand the
module's custom calls to XLA (xla, enzyme) refuse those targets again unless trusted.

The lax backend registers its targets here when it is imported (juliabridge imports it).
"""

from __future__ import annotations

from collections.abc import Iterable

_LIFTED: set[str] = set()


def register_lifted_targets(names: Iterable[str]) -> None:
    """Record targets a backend lifts into JAX primitives (the policy still refuses any that
    carries code of its own)."""
    _LIFTED.update(names)


def lifted_targets() -> frozenset[str]:
    """Every target registered by register_lifted_targets."""
    return frozenset(_LIFTED)
