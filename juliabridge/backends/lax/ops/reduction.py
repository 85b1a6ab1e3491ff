"""Reductions: reduce, reduce_window and select_and_scatter.

Bodies that are monoids (add, multiply, maximum, minimum, and, or, xor) become JAX's monoid
reductions, which JAX differentiates to any order; the init operand is folded in with the body
op (the spec lets the schedule place init values anywhere), unless it is a load-time constant
equal to the identity. Reactant's argmax (a variadic reduce selecting value and iota index with
one predicate) stays the very same reduce, with a derivative rule picking the tangent at the
selected index. Other bodies keep exact forward semantics through JAX's generic reduce, which
forward mode differentiates, and refuse reverse mode by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import attrs
from ..differentiation import reverse_unavailable
from ..registry import Impl, OpView, lifts
from ..valtypes import TensorType
from ._reduction_util import (
    COMBINE,
    broadcast_scalar,
    constant_operand,
    defining_op,
    generic_reduction,
    identity,
    independent_monoids,
    ints_of_rank,
    is_complex,
    is_float,
    is_identity,
    is_int,
    monoid_kind,
    padding_pairs,
    per_sample_inits,
)
from ._select_scatter_util import select_and_scatter_impl

_REDUCERS: dict[str, Callable[[Any, Sequence[int]], Any]] = {
    "add": lax.reduce_sum,
    "mul": lax.reduce_prod,
    "max": lax.reduce_max,
    "min": lax.reduce_min,
    "and": lax.reduce_and,
    "or": lax.reduce_or,
    "xor": lax.reduce_xor,
}

#: Window monoids JAX has differentiable primitives for; on i1, or/and are max/min.
_WINDOW_FN: dict[str, Callable[[Any, Any], Any]] = {"add": lax.add, "max": lax.max, "min": lax.min}
_WINDOW_ON_BOOL = {"or": "max", "and": "min"}

_GENERIC_WHY = (
    "its body is not one of the monoids (add, multiply, maximum, minimum, and, or, xor) "
    "JAX has reverse-mode rules for"
)


def _split(view: OpView) -> tuple[int, list[TensorType], list[TensorType]]:
    """(N, input types, result types) of a variadic reduction with N inputs and N inits."""
    n = len(view.operand_types) // 2
    if n == 0 or len(view.operand_types) != 2 * n or len(view.result_types) != n:
        raise view.error(
            f"expected N inputs, N init values and N results, got {len(view.operand_types)} "
            f"operands and {len(view.result_types)} results"
        )
    ins = [view.tensor(t, f"operand {i}") for i, t in enumerate(view.operand_types[:n])]
    outs = [view.tensor(t, f"result {i}") for i, t in enumerate(view.result_types)]
    return n, ins, outs


def _to(x: Any, dtype: np.dtype) -> Any:
    """spec.md#reduce's to_destination_type: inputs are converted to the body's element type."""
    return x if np.dtype(x.dtype) == dtype else lax.convert_element_type(x, dtype)


def _body_dtypes(view: OpView, n: int, ins: list[TensorType]) -> list[np.dtype]:
    types = view.regions[0].arg_types
    if len(types) != 2 * n:
        raise view.error(f"the body takes {len(types)} arguments, expected {2 * n}")
    return [view.tensor(t, "a body argument").dtype for t in types[:n]]


# --- reduce ------------------------------------------------------------------------------------


@lifts("stablehlo.reduce", regions=True)
def reduce(view: OpView) -> Impl:
    """spec.md#reduce: monoid bodies -> lax.reduce_sum/prod/max/min/and/or/xor (init folded in),
    argmax-style selection -> the same reduce with a selection derivative, else lax.reduce."""
    n, ins, outs = _split(view)
    dims = tuple(view.get_ints("dimensions"))
    if len(set(dims)) != len(dims) or any(not 0 <= d < ins[0].rank for d in dims):
        raise view.error(f"dimensions {list(dims)} are not distinct axes of rank {ins[0].rank}")
    dtypes = _body_dtypes(view, n, ins)
    names = independent_monoids(view.regions[0], n)
    kinds = [monoid_kind(nm, dt) for nm, dt in zip(names, dtypes)] if names else []
    if kinds and all(kinds):
        return _monoid_reduce(view, n, dims, dtypes, [k for k in kinds if k])
    iota_at = _argmax_iota(view, n, dims, ins, dtypes)
    if iota_at is not None:
        return _argmax_reduce(n, dims, ins, outs, iota_at)
    return _generic_reduce(view, n, dims, dtypes)


def _monoid_reduce(
    view: OpView, n: int, dims: tuple[int, ...], dtypes: list[np.dtype], kinds: list[str]
) -> Impl:
    fold = []
    for k in range(n):
        const = constant_operand(view, n + k)
        const = None if const is None else const.astype(dtypes[k])
        # Over no dimensions XLA returns the input untouched (the spec leaves the number of
        # init values in the schedule open; the reference interpreter applies one).
        fold.append(bool(dims) and not is_identity(const, kinds[k], dtypes[k]))

    def impl(regions: Any, *args: Any) -> list[Any]:
        out = []
        for k in range(n):
            r = _REDUCERS[kinds[k]](_to(args[k], dtypes[k]), dims)
            if fold[k]:
                r = COMBINE[kinds[k]](r, broadcast_scalar(_to(args[n + k], dtypes[k]), r.shape))
            out.append(r)
        return out

    return impl


def _lax_reduce(body: Any, n: int, dims: tuple[int, ...], args: Sequence[Any]) -> list[Any]:
    """JAX's generic reduce with the StableHLO body as its computation (lowers to the same op)."""

    def apply(ops: Sequence[Any], inits: Sequence[Any], comp: Any) -> Any:
        return lax.reduce(tuple(ops), tuple(inits), comp, dims)

    return list(per_sample_inits(apply, body, n, args))


def _generic_reduce(view: OpView, n: int, dims: tuple[int, ...], dtypes: list[np.dtype]) -> Impl:
    name, where = view.name, view.where
    inexact = [is_float(d) or is_complex(d) for d in dtypes]

    def apply(ops: Sequence[Any], inits: Sequence[Any], comp: Any) -> Any:
        return lax.reduce(tuple(ops), tuple(inits), comp, dims)

    def impl(regions: Any, *args: Any) -> list[Any]:
        converted = [_to(a, dtypes[i % n]) for i, a in enumerate(args)]
        out = generic_reduction(apply, regions[0], inexact, converted)
        return reverse_unavailable(out, op=name, where=where, why=_GENERIC_WHY)

    return impl


def _argmax_iota(
    view: OpView, n: int, dims: tuple[int, ...], ins: list[TensorType], dtypes: list[np.dtype]
) -> int | None:
    """Index of the iota operand when the reduce is a paired selection over one dimension.

    Paired selection: every result k is ``select(p, a_k, b_k)`` with one predicate p and one
    orientation, so each result pair stays an (element, position) pair of the same input
    position (Reactant's argmax in src/Ops.jl: ``ifelse(a1 >= a2, (a1, i1), (a2, i2))``).
    The iota operand along the reduced dimension then names the position each value came from.
    """
    block = view.regions[0]
    if n < 2 or len(dims) != 1 or any(i.dtype != d for i, d in zip(ins, dtypes)):
        return None
    by_result = {s.results[0]: s for s in block.steps if len(s.results) == 1}
    shared: tuple[int, bool] | None = None
    for k, slot in enumerate(block.returns):
        step = by_result.get(slot)
        if step is None or step.name != "stablehlo.select" or len(step.operands) != 3:
            return None
        pred, on_true, on_false = step.operands
        a, b = block.args[k], block.args[n + k]
        if (on_true, on_false) not in ((a, b), (b, a)):
            return None
        key = (pred, on_true == a)
        if shared is None:
            shared = key
        elif key != shared:
            return None
    for j in range(n):
        op = defining_op(view, j)
        if op is None or op.name != "stablehlo.iota" or not is_int(ins[j].dtype):
            continue
        if attrs.integer(op.attributes["iota_dimension"]) == dims[0]:
            return j
    return None


def _argmax_reduce(
    n: int, dims: tuple[int, ...], ins: list[TensorType], outs: list[TensorType], j: int
) -> Impl:
    d = dims[0]
    size = ins[0].shape[d]
    inexact = [is_float(t.dtype) or is_complex(t.dtype) for t in outs]

    def impl(regions: Any, *args: Any) -> list[Any]:
        body = regions[0]
        reduce_ = jax.custom_jvp(lambda *a: tuple(_lax_reduce(body, n, dims, a)))

        def jvp(primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
            out = reduce_(*primals)
            index = out[j].astype(np.int64)
            valid = jnp.logical_and(index >= 0, index < size)
            at = jnp.expand_dims(jnp.clip(index, 0, max(size - 1, 0)), d)
            dots: list[Any] = []
            for k in range(n):
                if not inexact[k]:
                    dots.append(np.zeros(outs[k].shape, jax.dtypes.float0))
                    continue
                picked = jnp.squeeze(jnp.take_along_axis(tangents[k], at, axis=d), d)
                init = broadcast_scalar(tangents[n + k], outs[k].shape)
                dots.append(lax.select(valid, picked, init))
            return out, tuple(dots)

        reduce_.defjvp(jvp)
        return list(reduce_(*args))

    return impl


# --- reduce_window -----------------------------------------------------------------------------


@lifts("stablehlo.reduce_window", regions=True)
def reduce_window(view: OpView) -> Impl:
    """spec.md#reduce_window: add/max/min bodies -> lax.reduce_window's monoid primitives,
    with the init combined once per window as XLA does; else the generic lax.reduce_window
    with the body as computation (the same op)."""
    n, ins, _ = _split(view)
    rank = ins[0].rank
    window = ints_of_rank(view, "window_dimensions", rank, None)
    strides = ints_of_rank(view, "window_strides", rank, 1)
    base = ints_of_rank(view, "base_dilations", rank, 1)
    wdil = ints_of_rank(view, "window_dilations", rank, 1)
    padding = padding_pairs(view, rank)
    if min((*window, *strides, *base, *wdil), default=1) < 1:
        raise view.error("window dimensions, strides and dilations must be positive")
    dtypes = _body_dtypes(view, n, ins)
    names = independent_monoids(view.regions[0], n)
    kinds = [_window_kind(nm, dt) for nm, dt in zip(names, dtypes)] if names else []
    if kinds and all(kinds):
        geometry = (window, strides, padding, base, wdil)
        parts = [
            _monoid_window(view, k, kind, dtypes[k], geometry)
            for k, kind in enumerate(kinds)
            if kind
        ]
        return lambda regions, *args: [p(args[k], args[n + k]) for k, p in enumerate(parts)]
    name, where = view.name, view.where
    inexact = [is_float(d) or is_complex(d) for d in dtypes]

    def apply(ops: Sequence[Any], inits: Sequence[Any], comp: Any) -> Any:
        return lax.reduce_window(
            tuple(ops), tuple(inits), comp, window, strides, padding, base, wdil
        )

    def impl(regions: Any, *args: Any) -> list[Any]:
        converted = [_to(a, dtypes[i % n]) for i, a in enumerate(args)]
        out = generic_reduction(apply, regions[0], inexact, converted)
        return reverse_unavailable(out, op=name, where=where, why=_GENERIC_WHY)

    return impl


def _window_kind(op_name: str | None, dtype: np.dtype) -> str | None:
    kind = monoid_kind(op_name, dtype)
    if kind is not None and dtype == np.bool_:
        kind = _WINDOW_ON_BOOL.get(kind)
    return kind if kind in _WINDOW_FN else None


def _monoid_window(
    view: OpView, k: int, kind: str, dtype: np.dtype, geometry: tuple[Any, ...]
) -> Callable[[Any, Any], Any]:
    window, strides, padding, base, wdil = geometry
    rank = len(window)
    fn, ident = _WINDOW_FN[kind], identity(kind, dtype)
    const = constant_operand(view, len(view.operand_types) // 2 + k)
    known = is_identity(None if const is None else const.astype(dtype), kind, dtype)
    # Padding and base-dilation holes hold the identity and the init is combined once per
    # window: what XLA computes. (The spec pads with the init value instead, and the reference
    # interpreter does; the two differ only for an add or multiply init that is no identity.)
    # JAX's own padding handles only non-negative pads without base dilation in every
    # derivative rule; anything else is an explicit lax.pad.
    direct = known and all(b == 1 for b in base) and all(lo >= 0 and hi >= 0 for lo, hi in padding)
    no_pad = ((0, 0),) * rank
    # JAX has no reverse rule for max/min windows with window dilation (select_and_gather).
    marked = kind != "add" and any(w != 1 for w in wdil)
    name, where = view.name, view.where

    def part(x: Any, init: Any) -> Any:
        x = _to(x, dtype)
        if direct:
            r = lax.reduce_window(x, ident, fn, window, strides, padding, None, wdil)
        else:
            xp = lax.pad(x, ident, [(lo, hi, b - 1) for (lo, hi), b in zip(padding, base)])
            r = lax.reduce_window(xp, ident, fn, window, strides, no_pad, None, wdil)
            if not known:
                r = COMBINE[kind](r, broadcast_scalar(_to(init, dtype), r.shape))
        if marked:
            why = "JAX has no reverse-mode rule for max/min windows with window dilation"
            r = reverse_unavailable([r], op=name, where=where, why=why)[0]
        return r

    return part


# --- select_and_scatter ------------------------------------------------------------------------


@lifts("stablehlo.select_and_scatter", regions=True)
def select_and_scatter(view: OpView) -> Impl:
    """spec.md#select_and_scatter: the max/min-pool gradient (select GE/LE, scatter add, no
    padding) is JAX's select_and_scatter_add; everything else an exact selection over the
    window positions in order followed by a scatter with the scatter body's monoid."""
    operand, source = view.tensor(view.operand_types[0]), view.tensor(view.operand_types[1])
    rank = operand.rank
    window = ints_of_rank(view, "window_dimensions", rank, None)
    strides = ints_of_rank(view, "window_strides", rank, 1)
    padding = padding_pairs(view, rank)
    if min((*window, *strides), default=1) < 1:
        raise view.error("window dimensions and strides must be positive")
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        raise view.error(f"negative padding {[list(p) for p in padding]} is not defined here")
    body = view.regions[1].single_op_over_args()
    scatter = monoid_kind(body, operand.dtype)
    if scatter is None or (scatter in ("and", "or", "xor") and operand.dtype != np.bool_):
        raise view.error(
            f"a scatter body of {body} on {attrs.element_type_name(operand.dtype)} has no JAX "
            "scatter form",
            hint="Load it with backend='xla', which runs the original op",
        )
    init = constant_operand(view, 2)
    return select_and_scatter_impl(
        view,
        select=_compare_of(view),
        scatter=scatter,
        window=window,
        strides=strides,
        padding=padding,
        init_is_zero=is_identity(None if init is None else init, "add", operand.dtype),
        source_shape=source.shape,
    )


def _compare_of(view: OpView) -> str | None:
    """'GE'/'LE'/'GT'/'LT' when the select body is ``return compare DIR, arg0, arg1`` on floats
    (with arguments swapped, the mirrored direction), else None."""
    block = view.regions[0]
    if block.single_op_over_args() != "stablehlo.compare":
        return None
    op = next(iter(view.op.regions[0].blocks[0].operations)).operation
    try:
        direction = attrs.enum(op.attributes["comparison_direction"])
        kind = attrs.enum(op.attributes["compare_type"]) if "compare_type" in op.attributes else ""
    except (attrs.AttributeError_, KeyError):
        return None
    if kind == "TOTALORDER" or direction not in ("GE", "LE", "GT", "LT"):
        return None
    if block.steps[0].operands != block.args:
        direction = {"GE": "LE", "LE": "GE", "GT": "LT", "LT": "GT"}[direction]
    return str(direction)
