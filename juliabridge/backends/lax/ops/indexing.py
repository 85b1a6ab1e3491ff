"""Indexing ops: dynamic_slice, dynamic_update_slice, gather, scatter, torch_index_select
(spec.md sections named after each op).

Out-of-bounds starts follow the spec: dynamic_slice, dynamic_update_slice and gather clamp the
start so the slice fits (JAX's `allow_negative_indices=False` keeps a negative start from
wrapping around numpy-style; gather's `clip` mode lowers to the bare stablehlo.gather and its
transpose clamps the same way, so gradients go where the values came from). Scatter skips out
of bounds update elements (see _indexing_util.ScatterPlan).

Scatter update computations that are add, multiply, maximum, minimum, and, or (on i1) or a
plain replacement become JAX's scatter primitives, which JAX differentiates and batches; any
other computation is applied element by element in a scan, exactly and differentiably.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ....errors import TransformError
from ..registry import Impl, OpView, lifts
from ._indexing_util import (
    GatherDims,
    IndexLayout,
    ScatterPlan,
    flag,
    scatter_in_order,
    scatter_plan,
)

_CLIP = lax.GatherScatterMode.CLIP


@lifts("stablehlo.dynamic_slice")
def dynamic_slice(view: OpView) -> Impl:
    """spec.md#dynamic_slice: start indices clamped to [0, dim - size] (negative ones too)."""
    sizes = view.get_ints("slice_sizes")
    return lambda x, *start: [
        lax.dynamic_slice(x, _arrays(start), sizes, allow_negative_indices=False)
    ]


@lifts("stablehlo.dynamic_update_slice")
def dynamic_update_slice(view: OpView) -> Impl:
    """spec.md#dynamic_update_slice: start indices clamped so the update fits."""
    return lambda x, update, *start: [
        lax.dynamic_update_slice(x, update, _arrays(start), allow_negative_indices=False)
    ]


def _arrays(start: tuple[Any, ...]) -> list[Any]:
    """Start indices as JAX arrays: JAX raises for a concrete numpy scalar index below 0 when
    negative indices are not wrapped, where the spec clamps it."""
    return [jnp.asarray(i) for i in start]


@lifts("stablehlo.gather")
def gather(view: OpView) -> Impl:
    """spec.md#gather, batching dims included; starts clamp so each slice fits."""
    dn = view.get_typed("dimension_numbers", GatherDims)
    layout = IndexLayout(int(dn.index_vector_dim), view.tensor(view.operand_types[1]).rank)
    dnums = lax.GatherDimensionNumbers(
        offset_dims=tuple(dn.offset_dims),
        collapsed_slice_dims=tuple(dn.collapsed_slice_dims),
        start_index_map=tuple(dn.start_index_map),
        operand_batching_dims=tuple(dn.operand_batching_dims),
        start_indices_batching_dims=layout.dims(dn.start_indices_batching_dims),
    )
    sizes = view.get_ints("slice_sizes")
    is_sorted = flag(view, "indices_are_sorted")
    return lambda x, idx: [
        lax.gather(x, layout.apply(idx), dnums, sizes, indices_are_sorted=is_sorted, mode=_CLIP)
    ]


@lifts("stablehlo.torch_index_select")
def torch_index_select(view: OpView) -> Impl:
    """torch_index_select (StablehloOps.td; deprecated, not in spec.md): the result is
    operand[:dim] + index[batch_dims:] + operand[dim+1:], the first batch_dims dims shared;
    a gather with batching dims (out-of-range indices clamp, as XLA does for this op)."""
    operand, index = view.operand, view.tensor(view.operand_types[1], "index")
    axis, batch = view.get_int("dim"), view.get_int("batch_dims")
    axis += operand.rank if axis < 0 else 0
    batch += index.rank if batch < 0 else 0
    if not 0 <= batch <= axis < operand.rank or batch > index.rank:
        raise view.error(f"dim {axis} and batch_dims {batch} do not fit {operand} and {index}")
    rest = index.rank - batch
    dnums = lax.GatherDimensionNumbers(
        offset_dims=(*range(batch, axis), *range(axis + rest, operand.rank - 1 + rest)),
        collapsed_slice_dims=(axis,),
        start_index_map=(axis,),
        operand_batching_dims=tuple(range(batch)),
        start_indices_batching_dims=tuple(range(batch)),
    )
    sizes = tuple(1 if d < batch or d == axis else n for d, n in enumerate(operand.shape))
    return lambda x, idx: [
        lax.gather(x, lax.expand_dims(idx, (index.rank,)), dnums, sizes, mode=_CLIP)
    ]


#: Update computations JAX has a scatter primitive for, by element kind ("b" is i1, where
#: StableHLO's add/multiply are or/and). None: no primitive (the in-order form is used).
_SCATTERS: dict[str, tuple[Callable[..., Any] | None, Callable[..., Any] | None]] = {
    # name: (numbers, i1)
    "replace": (lax.scatter, lax.scatter),
    "stablehlo.add": (lax.scatter_add, lax.scatter_max),
    "stablehlo.or": (None, lax.scatter_max),
    "stablehlo.maximum": (lax.scatter_max, lax.scatter_max),
    "stablehlo.multiply": (lax.scatter_mul, lax.scatter_min),
    "stablehlo.and": (None, lax.scatter_min),
    "stablehlo.minimum": (lax.scatter_min, lax.scatter_min),
}


def _combiners(view: OpView, n: int) -> list[str] | None:
    """Per result, how the update computation combines (input k, update k): 'replace',
    'keep', or the name of a binary op on exactly those two; None for anything else."""
    block = view.regions[0]
    if len(block.args) != 2 * n or len(block.returns) != n:
        return None
    made_by = {slot: step for step in block.steps for slot in step.results}
    out = []
    for k, ret in enumerate(block.returns):
        mine, theirs = block.args[k], block.args[n + k]
        if ret in (mine, theirs):
            out.append("keep" if ret == mine else "replace")
            continue
        step = made_by.get(ret)
        if step is None or step.regions or sorted(step.operands) != sorted((mine, theirs)):
            return None
        out.append(step.name)
    return out


def _primitive_scatters(view: OpView, n: int) -> list[Callable[..., Any] | None] | None:
    """The JAX scatter for each result ('keep' as None), or None if any has no primitive."""
    names = _combiners(view, n)
    if names is None:
        return None
    fns: list[Callable[..., Any] | None] = []
    for name, t in zip(names, view.result_types):
        if name == "keep":
            fns.append(None)
            continue
        pair = _SCATTERS.get(name)
        fn = None if pair is None else pair[view.tensor(t).dtype == np.bool_]
        if fn is None:
            return None
        fns.append(fn)
    return fns


@lifts("stablehlo.scatter", regions=True)
def scatter(view: OpView) -> Impl:
    """spec.md#scatter: several inputs and updates, batching dims, out-of-bounds update
    elements skipped; a recognised update computation becomes JAX's scatter primitive."""
    n = len(view.result_types)
    plan = scatter_plan(view, n)
    dtypes = [view.tensor(t).dtype for t in view.result_types]
    fns = _primitive_scatters(view, n)

    def impl(regions: Any, *args: Any) -> list[Any]:
        xs = [_to(x, dt) for x, dt in zip(args[:n], dtypes)]
        updates = [_to(u, dt) for u, dt in zip(args[n + 1 :], dtypes)]
        if fns is None:
            return scatter_in_order(plan, lambda *v: regions[0](*v), xs, args[n], updates)
        return [
            x if fn is None else _run(view, plan, fn, x, args[n], u)
            for fn, x, u in zip(fns, xs, updates)
        ]

    return impl


def _to(x: Any, dtype: np.dtype) -> Any:
    """Inputs converted to the update computation's element type (spec.md#scatter C23)."""
    return x if np.dtype(x.dtype) == dtype else lax.convert_element_type(x, dtype)


def _run(view: OpView, plan: ScatterPlan, fn: Callable[..., Any], x: Any, idx: Any, u: Any) -> Any:
    try:
        return plan.run(fn, x, idx, u)
    except NotImplementedError as e:
        # JAX differentiates scatter_mul only with unique_indices (jax/_src/lax/slicing.py).
        raise TransformError(
            f"{view.name} at {view.where}: JAX cannot differentiate this multiplying scatter "
            f"({e}); the module would need unique_indices = true"
        ) from e
