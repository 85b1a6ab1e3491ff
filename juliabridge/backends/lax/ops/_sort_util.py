"""Helpers for sort: recognising lexicographic LT/GT comparators, deciding where `lax.sort`
may claim them, and sorting by keys with `lax.sort`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ....support.jaxinternals import ir
from .. import attrs
from ..registry import OpView
from ..valtypes import value_type
from .elementwise import total_order_key


@dataclass(frozen=True)
class Key:
    """Operand `operand` compared with LT (ascending) or GT (descending), TOTALORDER or not."""

    operand: int
    descending: bool
    total: bool


def _arg(value: ir.Value, args: list[ir.Value]) -> int | None:
    """The block argument index of `value`, or None."""
    for i, a in enumerate(args):
        if a == value:
            return i
    return None


def _op(value: ir.Value) -> ir.Operation | None:
    """The op that defines `value` inside the comparator, or None for a block argument."""
    if isinstance(value, ir.BlockArgument):
        return None
    return ir.OpResult(value).owner.operation


def _compare(op: ir.Operation | None, args: list[ir.Value]) -> tuple[str, int, int, bool] | None:
    """(direction, key operand, lhs-is-rhs-flag, total) for `compare DIR, argA, argB` on the two
    arguments of one operand; None for anything else."""
    if op is None or op.name != "stablehlo.compare" or len(op.operands) != 2:
        return None
    lhs, rhs = (_arg(v, args) for v in op.operands)
    if lhs is None or rhs is None or lhs // 2 != rhs // 2 or lhs == rhs:
        return None
    direction = attrs.enum(op.attributes["comparison_direction"])
    kind = attrs.enum(op.attributes["compare_type"]) if "compare_type" in op.attributes else ""
    if kind == "TOTALORDER" and not jnp.issubdtype(_dtype(op.operands[0]), jnp.floating):
        return None  # TOTALORDER means a float key here; anything else takes the network
    return direction, lhs // 2, int(lhs % 2 == 1), kind == "TOTALORDER"


def _dtype(value: ir.Value) -> np.dtype:
    return value_type(value.type).dtype  # type: ignore[union-attr]


def _single(op: ir.Operation | None, args: list[ir.Value]) -> Key | None:
    found = _compare(op, args)
    if found is None or found[0] not in ("LT", "GT"):
        return None
    direction, k, swapped, total = found
    return Key(k, (direction == "GT") != bool(swapped), total)


def _keys(value: ir.Value, args: list[ir.Value], depth: int = 0) -> list[Key] | None:
    """The keys of `value` if it is LT/GT on one operand, or `or(P, and(EQ, REST))` (either
    operand order) with P on one operand, EQ its equality and REST the later keys."""
    op = _op(value)
    key = _single(op, args)
    if key is not None:
        return [key]
    if op is None or op.name != "stablehlo.or" or depth > 64:
        return None
    for first, second in ((0, 1), (1, 0)):
        head = _single(_op(op.operands[first]), args)
        tie = _op(op.operands[second])
        if head is None or tie is None or tie.name != "stablehlo.and":
            continue
        for eq_at, rest_at in ((0, 1), (1, 0)):
            eq = _compare(_op(tie.operands[eq_at]), args)
            if eq is None or eq[0] != "EQ" or eq[1] != head.operand or eq[3] != head.total:
                continue
            rest = _keys(tie.operands[rest_at], args, depth + 1)
            if rest is not None and head.operand not in [r.operand for r in rest]:
                return [head, *rest]
    return None


def comparator_keys(view: OpView) -> list[Key] | None:
    """The lexicographic keys the comparator sorts by, or None when it is something else."""
    block = view.op.regions[0].blocks[0]
    args = list(block.arguments)
    ops = list(block.operations)
    if not ops or len(ops[-1].operands) != 1:
        return None
    return _keys(ops[-1].operands[0], args)


def claimable(view: OpView, keys: Sequence[Key]) -> bool:
    """Whether `lax.sort` by `keys` is the comparator's order on every input: integer and i1
    keys, and float keys under TOTALORDER (a strict weak order either way). A plain float or
    complex compare is none on NaN, where XLA's result depends on its sorting algorithm."""
    for k in keys:
        dtype = view.tensor(view.operand_types[k.operand]).dtype
        if jnp.issubdtype(dtype, jnp.inexact) and not k.total:
            return False
    return True


def _key_values(x: Any, key: Key) -> Any:
    """Values whose ascending order (JAX's: -0 ties +0, NaNs last) is the key's order."""
    if key.total:
        x = total_order_key(x)
    if not key.descending:
        return x
    # Reversing keeps ties tied (a stable sort keeps their order): ~x for integers and i1,
    # -x for floats (JAX already ties -0 with +0) and complex numbers (lexicographic order).
    return lax.neg(x) if jnp.issubdtype(x.dtype, jnp.inexact) else lax.bitwise_not(x)


def sort_by_keys(xs: Sequence[Any], keys: Sequence[Key], dim: int, stable: bool) -> list[Any]:
    """`lax.sort` on transformed key copies in front of the operands, then the operands."""
    plain = all(not k.descending and not k.total for k in keys)
    if plain and [k.operand for k in keys] == list(range(len(keys))):
        return list(lax.sort(tuple(xs), dimension=dim, is_stable=stable, num_keys=len(keys)))
    front = [_key_values(xs[k.operand], k) for k in keys]
    out = lax.sort((*front, *xs), dimension=dim, is_stable=stable, num_keys=len(keys))
    return list(out[len(keys) :])
