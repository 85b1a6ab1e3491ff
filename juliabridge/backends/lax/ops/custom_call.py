"""stablehlo.custom_call (spec.md#custom_call): the targets the lax backend knows, by name.

A custom call's meaning is its target's implementation, so only targets with a known
contract are lifted: the linear-algebra kernels JAX and Reactant emit (_linalg_targets.py) and
the single-device sharding annotations. Any other target is a typed error naming it.

A lifted target becomes JAX primitives that JAX lowers to calls it sizes itself, so the module's
own call never reaches a kernel: the load policy admits these targets without trust=True
(stablehlo/lifted_custom_calls.py), and each handler checks the call's operand/result contract here.
"""

from __future__ import annotations

from ....jaxinternals import ir
from ....stablehlo.lifted_custom_calls import register_lifted_targets
from ..registry import Impl, OpView, lifts
from ._custom_call_util import Call
from ._linalg_targets import TARGETS

#: Sharding annotations: on one device the value passes through unchanged.
_ANNOTATIONS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")


def _annotation(call: Call) -> Impl:
    """Sharding / SPMD*ShardShape: identity when the shard is the whole value (one device)."""
    call.expect_operands(1)
    if len(call.results) != 1 or call.results[0] != call.operands[0]:
        raise call.error(
            f"changes {call.operands[0]} into "
            f"{', '.join(map(str, call.results)) or 'nothing'}; that is a multi-device "
            "(sharded) program, which the lax backend does not partition",
            hint="Export the model for a single device from Reactant",
        )
    return lambda x: [x]


for _name in _ANNOTATIONS:
    TARGETS[_name] = _annotation
register_lifted_targets(TARGETS)


@lifts("stablehlo.custom_call")
def custom_call(view: OpView) -> Impl:
    """Dispatch on call_target_name; the handler checks the target's contract at load time."""
    target = view.get_str("call_target_name")
    handler = TARGETS.get(target)
    if handler is None:
        raise view.error(
            f"custom call target {target!r} is not one the lax backend knows (it lifts "
            f"{len(TARGETS)} linear-algebra and sharding targets)",
            hint="Load the module with backend='xla' if this jaxlib registers the target, "
            "or report it so the lax backend learns it",
        )
    if view.has("called_computations") and len(ir.ArrayAttr(view.raw("called_computations"))):
        raise view.error(f"custom call target {target!r} with called_computations")
    return handler(Call(view, target))
