"""Shared by the reduction lift functions: monoid bodies, their identities, constant inits.

JAX differentiates reductions only in its monoid forms (reduce_sum, reduce_max, ...,
reduce_window_sum/max/min), which start from the monoid's identity. StableHLO reductions take
their init value as an operand, so a lift function recognises the body's monoid, and folds the
init in explicitly unless it can see at load time that the init is a constant equal to the
identity (Reactant's `constant dense<0xFF800000>` for max, `dense<0.0>` for add).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ....support.jaxinternals import ir
from .. import attrs
from ..program import Block
from ..registry import OpView
from ..valtypes import TypeNotSupported, value_type

#: Body ops that form a monoid with an identity, by kind.
MONOID_OPS: dict[str, str] = {
    "stablehlo.add": "add",
    "stablehlo.multiply": "mul",
    "stablehlo.maximum": "max",
    "stablehlo.minimum": "min",
    "stablehlo.and": "and",
    "stablehlo.or": "or",
    "stablehlo.xor": "xor",
}

#: On i1 StableHLO's arithmetic is Boolean algebra (spec.md#add, #multiply, #maximum, #minimum).
_ON_BOOL = {"add": "or", "mul": "and", "max": "or", "min": "and"}

#: How two partial results of each kind combine (used to fold an init value in).
COMBINE: dict[str, Callable[[Any, Any], Any]] = {
    "add": lax.add,
    "mul": lax.mul,
    "max": lax.max,
    "min": lax.min,
    "and": lax.bitwise_and,
    "or": lax.bitwise_or,
    "xor": lax.bitwise_xor,
}

#: Ops whose shape-only change of a scalar keeps its value (seen through to find a constant).
_TRANSPARENT = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.reshape"})


def is_float(dtype: np.dtype) -> bool:
    """Real floating point, including bf16 and the f8 types (numpy's kind 'V' for those)."""
    return bool(jnp.issubdtype(dtype, jnp.floating))


def is_int(dtype: np.dtype) -> bool:
    """Signed or unsigned integer of any width (not i1)."""
    return bool(jnp.issubdtype(dtype, jnp.integer))


def is_complex(dtype: np.dtype) -> bool:
    """complex64 or complex128."""
    return bool(jnp.issubdtype(dtype, jnp.complexfloating))


def monoid_kind(op_name: str | None, dtype: np.dtype) -> str | None:
    """The monoid a body op forms on `dtype` ('add', 'max', 'or', ...), or None."""
    kind = MONOID_OPS.get(op_name or "")
    if kind is None:
        return None
    if dtype == np.bool_:
        return _ON_BOOL.get(kind, kind)
    if kind in ("and", "or", "xor"):
        return kind if is_int(dtype) else None
    if is_complex(dtype):
        # maximum/minimum on complex compare lexicographically; JAX has no monoid form.
        return kind if kind in ("add", "mul") else None
    return kind


def identity(kind: str, dtype: np.dtype) -> np.ndarray:
    """The identity of monoid `kind` on `dtype` as a 0-d numpy array."""
    if dtype == np.bool_:
        return np.array(kind in ("and", "min"), np.bool_)
    if kind in ("add", "or", "xor"):
        return np.zeros((), dtype)
    if kind == "mul":
        return np.ones((), dtype)
    if kind == "and":
        return np.array(jnp.iinfo(dtype).max if jnp.iinfo(dtype).min == 0 else -1).astype(dtype)
    if is_int(dtype):
        info = jnp.iinfo(dtype)
        return np.array(info.min if kind == "max" else info.max).astype(dtype)
    if _has_inf(dtype):
        return np.array(-np.inf if kind == "max" else np.inf).astype(dtype)
    finfo = jnp.finfo(dtype)
    return np.array(finfo.min if kind == "max" else finfo.max).astype(dtype)


def _has_inf(dtype: np.dtype) -> bool:
    return bool(np.isinf(np.array(np.inf).astype(dtype).astype(np.float64)))


def is_identity(value: np.ndarray | None, kind: str, dtype: np.dtype) -> bool:
    """Whether a load-time constant equals the identity of `kind` (-0.0 counts for add)."""
    if value is None or value.shape != () or value.dtype != dtype:
        return False
    want = identity(kind, dtype)
    if dtype == np.bool_ or is_int(dtype):
        return bool(value == want)
    wide = np.complex128 if is_complex(dtype) else np.float64
    return bool(value.astype(wide) == want.astype(wide))


def constant_operand(view: OpView, i: int) -> np.ndarray | None:
    """Operand `i`'s value when it is a load-time constant scalar, else None.

    Looks through scalar broadcast_in_dim/reshape, which jax-lowered modules put between the
    constant and the reduction.
    """
    value: ir.Value = view.op.operands[i]
    for _ in range(8):
        owner = value.owner
        if isinstance(owner, ir.Block):
            return None
        op = owner.operation if hasattr(owner, "operation") else owner
        if op.name in _TRANSPARENT and len(op.operands) == 1:
            value = op.operands[0]
            continue
        if op.name != "stablehlo.constant":
            return None
        try:
            t = value_type(op.results[0].type)
            return attrs.dense(op.attributes["value"], t, view.program.resources)  # type: ignore[arg-type]
        except (TypeNotSupported, ValueError, TypeError, KeyError):
            return None
    return None


def defining_op(view: OpView, i: int) -> ir.Operation | None:
    """The op that defines operand `i` (None for a block argument)."""
    owner = view.op.operands[i].owner
    if isinstance(owner, ir.Block):
        return None
    return owner.operation if hasattr(owner, "operation") else owner


def independent_monoids(block: Block, n: int) -> list[str] | None:
    """Body op names when the body is ``return op_0(a_0, b_0), ..., op_n-1(a_n-1, b_n-1)``.

    Each result k combines only the k-th accumulator with the k-th element (in either order),
    i.e. a variadic reduce that is n independent monoid reductions.
    """
    if n == 1:
        name = block.single_op_over_args()
        return None if name is None else [name]
    if len(block.steps) != n or len(block.returns) != n or len(block.args) != 2 * n:
        return None
    by_result = {s.results[0]: s for s in block.steps if len(s.results) == 1 and not s.regions}
    names = []
    for k, slot in enumerate(block.returns):
        step = by_result.get(slot)
        if step is None or sorted(step.operands) != sorted((block.args[k], block.args[n + k])):
            return None
        names.append(step.name)
    return names


def padding_pairs(view: OpView, rank: int) -> tuple[tuple[int, int], ...]:
    """The `padding` attribute ([rank, 2] integers, default zeros) as (low, high) pairs."""
    flat = view.get_ints("padding", (0,) * (2 * rank))
    if len(flat) != 2 * rank:
        raise view.error(f"padding has {len(flat)} values, expected {rank} pairs")
    return tuple((flat[2 * d], flat[2 * d + 1]) for d in range(rank))


def ints_of_rank(view: OpView, name: str, rank: int, default: int | None) -> tuple[int, ...]:
    """An integer-array attribute with one entry per dimension (all `default` when absent)."""
    values = view.get_ints(name) if default is None else view.get_ints(name, (default,) * rank)
    if len(values) != rank:
        raise view.error(f"{name} has {len(values)} entries, expected {rank}")
    return tuple(values)


def broadcast_scalar(x: Any, shape: Sequence[int]) -> Any:
    """A 0-d value broadcast to `shape` (lax binary ops do not broadcast)."""
    return lax.broadcast_in_dim(x, tuple(shape), ())


Apply = Callable[[Sequence[Any], Sequence[Any], Callable[..., Any]], Sequence[Any]]


def generic_reduction(
    apply: Apply, body: Callable[..., Sequence[Any]], inexact: Sequence[bool], args: Sequence[Any]
) -> list[Any]:
    """`apply(operands, inits, computation)` (lax.reduce or lax.reduce_window) with `body` as
    the computation, and a forward-mode rule of our own.

    JAX's own JVP of a generic reduce fails when an operand is an integer (its zero tangent is
    symbolic). The rule here reduces each tangent alongside its primal in one reduce whose body
    is the JVP of `body`, so tangents follow exactly the schedule of the primals; that reduce is
    itself such a reduction, so every order of forward mode works.
    """
    n = len(inexact)

    @jax.custom_jvp
    def reduce_(*a: Any) -> tuple[Any, ...]:
        return per_sample_inits(apply, body, n, a)

    def jvp(primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
        fl = [k for k in range(n) if inexact[k]]
        m = len(fl)

        def spread(ts: Sequence[Any], like: Sequence[Any]) -> list[Any]:
            it = iter(ts)
            return [next(it) if inexact[k] else _zero_tangent(like[k]) for k in range(n)]

        def doubled(*a: Any) -> list[Any]:
            acc, acc_t, el, el_t = a[:n], a[n : n + m], a[n + m : 2 * n + m], a[2 * n + m :]
            out, dout = jax.jvp(
                lambda *p: tuple(body(*p)),
                (*acc, *el),
                (*spread(acc_t, acc), *spread(el_t, el)),
            )
            return [*out, *(dout[k] for k in fl)]

        ops = [*primals[:n], *(tangents[k] for k in fl)]
        inits = [*primals[n:], *(tangents[n + k] for k in fl)]
        res = generic_reduction(apply, doubled, [*inexact, *([True] * m)], [*ops, *inits])
        # The primal results come from a reduce of the primals alone, so that linearization
        # (jax.grad) sees them as known and reaches the op's reverse-mode refusal.
        outs = reduce_(*primals)
        return outs, tuple(spread(res[n:], outs))

    reduce_.defjvp(jvp)
    return list(reduce_(*args))


def per_sample_inits(
    apply: Apply, body: Callable[..., Sequence[Any]], n: int, args: Sequence[Any]
) -> tuple[Any, ...]:
    """`apply(args[:n], args[n:], body)`, batchable when the init values are batched.

    JAX batches a generic reduce or reduce_window only over its operands: an XLA reduction
    takes one scalar init per operand, so a batch of inits is no single reduction. Under
    jax.vmap with batched inits the samples therefore run one after another (`lax.map`), each
    the very reduction a per-sample call runs, since a body that is no monoid gives results
    that depend on where the init enters; with unbatched inits JAX's own batching applies.
    """

    def plain(*a: Any) -> tuple[Any, ...]:
        return tuple(apply(a[:n], a[n:], lambda x, y: tuple(body(*x, *y))))

    fn = jax.custom_batching.custom_vmap(plain)

    def rule(size: int, batched: Sequence[bool], *a: Any) -> tuple[Any, Any]:
        if not any(batched[n:]):
            axes = tuple(0 if b else None for b in batched)
            outs = jax.vmap(plain, in_axes=axes)(*a)
        else:
            full = tuple(x if b else jnp.broadcast_to(x, (size, *jnp.shape(x))) for x, b in
                         zip(a, batched))  # fmt: skip
            outs = lax.map(lambda xs: plain(*xs), full)
        return tuple(outs), tuple(True for _ in outs)

    fn.def_vmap(rule)
    return tuple(fn(*args))


def _zero_tangent(x: Any) -> Any:
    return np.zeros(np.shape(x), jax.dtypes.float0)
