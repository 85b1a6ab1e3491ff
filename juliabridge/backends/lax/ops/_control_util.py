"""Helpers for the control-flow lifts: counted-loop recognition and carrying non-array values.

A `stablehlo.while` is a *counted* loop when its trip count is known at load time: one carried
0-d integer (the induction variable) starts at a constant, the condition is exactly
``compare DIR, iv, constant`` (either operand order) and the body returns ``iv + 1`` or
``iv - 1``. Reactant emits its loops this way (see sine_loop_while.mlir). Such a loop runs the
body a fixed number of times, so it can be a `lax.scan`, which JAX reverse-differentiates. The
counter wraps as its type does (spec.md#add): a loop walking away from its bound runs to the end
of the counter's range, wraps, and is counted too.

JAX control flow carries only pytrees of arrays; tokens have no array value, so they travel as
`None` (an empty pytree) and are restored from the MLIR types afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ....support.jaxinternals import ir
from .. import attrs
from ..registry import TOKEN
from ..valtypes import TensorType, TokenType, TupleType, ValueType

#: Longest trip count lifted to a scan; beyond it the loop stays a while loop (scan counters
#: are 32-bit, and a reverse pass would store that many residuals).
MAX_SCAN_TRIPS = 2**31 - 1

_FLIP = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}


def pack(values: Sequence[Any], types: Sequence[ValueType]) -> tuple[Any, ...]:
    """Values as a pytree JAX control flow can carry (tokens become None)."""
    out: list[Any] = []
    for v, t in zip(values, types):
        if isinstance(t, TokenType):
            out.append(None)
        elif isinstance(t, TupleType):
            out.append(pack(v, t.elements))
        else:
            out.append(v)
    return tuple(out)


def unpack(tree: Sequence[Any], types: Sequence[ValueType]) -> list[Any]:
    """Inverse of `pack`."""
    out: list[Any] = []
    for v, t in zip(tree, types):
        if isinstance(t, TokenType):
            out.append(TOKEN)
        elif isinstance(t, TupleType):
            out.append(tuple(unpack(v, t.elements)))
        else:
            out.append(v)
    return out


def tensor_positions(types: Sequence[ValueType]) -> list[int]:
    """Indices of the tensor-typed values (the ones that can carry derivatives)."""
    return [i for i, t in enumerate(types) if isinstance(t, TensorType)]


def _constant_int(value: ir.Value) -> int | None:
    """The integer a 0-d (or splat) `stablehlo.constant` holds, else None."""
    if isinstance(value, ir.BlockArgument):
        return None
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "stablehlo.constant":
        return None
    try:
        arr = np.asarray(ir.DenseIntElementsAttr(owner.attributes["value"]))
    except (ValueError, TypeError, KeyError):
        return None
    flat = arr.ravel()
    if flat.size == 0 or not np.all(flat == flat[0]):
        return None
    return int(flat[0])


def _arg_number(value: ir.Value, block: ir.Block) -> int | None:
    """k when `value` is argument k of `block`, else None."""
    if isinstance(value, ir.BlockArgument) and value.owner == block:
        return int(value.arg_number)
    return None


def _ops(block: ir.Block) -> list[ir.Operation]:
    return [o.operation for o in block.operations]


def _condition(op: ir.Operation) -> tuple[int, str, int, str] | None:
    """(carry index of iv, direction with iv on the left, bound, compare_type or "") for
    ``compare iv, c``."""
    block = op.regions[0].blocks[0]
    *pre, cmp, ret = _ops(block)
    if any(p.name != "stablehlo.constant" for p in pre) or cmp.name != "stablehlo.compare":
        return None
    if len(ret.operands) != 1 or ret.operands[0] != cmp.results[0]:
        return None
    try:
        direction = attrs.enum(cmp.attributes["comparison_direction"])
    except (KeyError, attrs.AttributeError_):
        return None
    lhs, rhs = cmp.operands
    k, bound = _arg_number(lhs, block), _constant_int(rhs)
    if k is None:
        k, bound = _arg_number(rhs, block), _constant_int(lhs)
        direction = _FLIP.get(direction, "")
    if k is None or bound is None or direction not in _FLIP:
        return None
    kind = ""
    if "compare_type" in cmp.attributes:
        try:
            kind = attrs.enum(cmp.attributes["compare_type"])
        except attrs.AttributeError_:
            return None
    return k, direction, bound, kind


def _step(op: ir.Operation, k: int) -> int | None:
    """+1 or -1 when the body returns ``iv + 1`` / ``iv - 1`` for carry k, else None."""
    block = op.regions[1].blocks[0]
    ret = _ops(block)[-1]
    value = ret.operands[k]
    if isinstance(value, ir.BlockArgument):
        return None
    add = value.owner
    if add.name not in ("stablehlo.add", "stablehlo.subtract") or len(add.operands) != 2:
        return None
    a, b = add.operands
    if _arg_number(a, block) == k:
        c = _constant_int(b)
    elif add.name == "stablehlo.add" and _arg_number(b, block) == k:
        c = _constant_int(a)
    else:
        return None
    if c is None:
        return None
    step = c if add.name == "stablehlo.add" else -c
    return step if step in (1, -1) else None


def _holds(i: int, direction: str, bound: int) -> bool:
    return {
        "LT": i < bound,
        "LE": i <= bound,
        "GT": i > bound,
        "GE": i >= bound,
        "EQ": i == bound,
        "NE": i != bound,
    }[direction]


def _trips(start: int, direction: str, bound: int, step: int, lo: int, hi: int) -> int | None:
    """How often the body runs (the counter wrapping at the end of its range if the loop
    walks away from its bound), or None when the loop never ends."""
    if not _holds(start, direction, bound):
        return 0
    if direction == "EQ":
        return 1
    up = {"LT": bound - start, "LE": None if bound == hi else bound - start + 1}
    down = {"GT": start - bound, "GE": None if bound == lo else start - bound + 1}
    if direction == "NE":
        # Stepping by 1 the counter visits every value of its type, wrapping at the end of
        # its range if it walks away from the bound, so it meets the bound after this many.
        return ((bound - start) * step) % (hi - lo + 1)
    table = up if step == 1 else down
    if direction in table:
        return table[direction]
    # Walking away from the bound (`iv < b` counting down, `iv > b` counting up): the counter
    # runs to the end of its range and wraps to the other end, where the compare fails, unless
    # an inclusive bound is that end (an endless loop). Counting these here keeps them off
    # XLA's while loop, whose simplifier in jaxlib 0.10 ran such an unsigned loop 0 times.
    if step == -1:
        return None if direction == "LE" and bound == hi else start - lo + 1
    return None if direction == "GE" and bound == lo else hi - start + 1


def counted_trips(op: ir.Operation, carry_types: Sequence[ValueType]) -> int | None:
    """The trip count of a counted `stablehlo.while` (module docstring), else None."""
    cond = _condition(op)
    if cond is None:
        return None
    k, direction, bound, kind = cond
    t = carry_types[k]
    if not isinstance(t, TensorType) or t.shape != () or t.dtype.kind not in "iu":
        return None
    if kind and kind != ("SIGNED" if t.dtype.kind == "i" else "UNSIGNED"):
        return None
    start = _constant_int(op.operands[k])
    step = _step(op, k)
    if start is None or step is None:
        return None
    info = np.iinfo(t.dtype)
    # jaxlib's bindings (0.10, 0.12) decode an unsigned constant as its unsigned value; the
    # modulo keeps the count right for bindings that decode it as signed.
    if t.dtype.kind == "u":
        width = 1 << (8 * t.dtype.itemsize)
        start, bound = start % width, bound % width
    n = _trips(start, direction, bound, step, int(info.min), int(info.max))
    if n is None or n > MAX_SCAN_TRIPS:
        return None
    return n
