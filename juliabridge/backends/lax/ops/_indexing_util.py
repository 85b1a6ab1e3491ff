"""Helpers for gather and scatter: dimension numbers in JAX's layout, the spec's per-element
out-of-bounds rule for scatter windows, and scatter with an arbitrary update computation.

JAX's gather and scatter always take the index vector in the last dim of the indices, so a
StableHLO `index_vector_dim` elsewhere (or equal to the rank: one index per position) is
moved there first; the batching dims of the indices are renumbered to match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jax import lax
from jaxlib.mlir.dialects import stablehlo as _stablehlo

from ....support.jaxinternals import ir
from ..registry import OpView

GatherDims = _stablehlo.GatherDimensionNumbers
ScatterDims = _stablehlo.ScatterDimensionNumbers
_I64 = np.dtype(np.int64)


def flag(view: OpView, name: str) -> bool:
    """A Boolean attribute (absent means false, as for indices_are_sorted and unique_indices)."""
    if not view.has(name):
        return False
    try:
        return bool(ir.BoolAttr(view.raw(name)).value)
    except (ValueError, TypeError) as e:
        raise view.error(f"attribute {name} = {view.raw(name)} is not a Boolean") from e


@dataclass(frozen=True)
class IndexLayout:
    """How to bring StableHLO indices into JAX's layout (index vector last)."""

    index_vector_dim: int
    rank: int

    def apply(self, idx: Any) -> Any:
        """The indices with the index vector as their last dim."""
        if self.index_vector_dim == self.rank:
            return lax.expand_dims(idx, (self.rank,))
        if self.index_vector_dim == self.rank - 1:
            return idx
        perm = [d for d in range(self.rank) if d != self.index_vector_dim]
        return lax.transpose(idx, (*perm, self.index_vector_dim))

    def dims(self, dims: Sequence[int]) -> tuple[int, ...]:
        """Index dims renumbered for the moved index vector."""
        return tuple(d - (d > self.index_vector_dim) for d in dims)


def window_sizes(
    operand_rank: int, update_shape: Sequence[int], dn: lax.ScatterDimensionNumbers
) -> list[int]:
    """The update window's extent along each operand dim (1 for inserted and batching dims)."""
    sizes, pos = [], 0
    for d in range(operand_rank):
        if d in dn.inserted_window_dims or d in dn.operand_batching_dims:
            sizes.append(1)
        else:
            sizes.append(int(update_shape[dn.update_window_dims[pos]]))
            pos += 1
    return sizes


def _as_i64(idx: Any, lo: int, hi: int) -> Any:
    """Indices as i64, clamped to [lo, hi] (wide enough that out-of-bounds stays out)."""
    dtype = np.dtype(idx.dtype)
    if dtype == np.uint64:
        idx = lax.min(idx, np.array(hi, dtype))
    idx = lax.convert_element_type(idx, _I64)
    return lax.clamp(np.int64(lo), idx, np.int64(hi))


@dataclass(frozen=True)
class ScatterPlan:
    """One StableHLO scatter as JAX scatters, with the spec's out-of-bounds rule.

    spec.md#scatter skips each update *element* whose result index is out of bounds; XLA skips
    a whole update window when any part of it is (checked on CPU: the interpreter and XLA
    differ on a window that overhangs the edge). Where a window can overhang — a scattered
    dim whose window is longer than 1 — the operand is padded by window - 1 on both sides
    and the indices shifted, so every window that touches the operand lands inside the
    padding, and the padding is sliced off afterwards: the spec's result, with XLA's
    whole-window rule left to drop only windows that miss the operand entirely.
    """

    layout: IndexLayout
    dnums: lax.ScatterDimensionNumbers
    pads: tuple[int, ...]  # per operand dim
    shape: tuple[int, ...]
    indices_are_sorted: bool
    unique_indices: bool

    def run(self, fn: Callable[..., Any], x: Any, idx: Any, upd: Any) -> Any:
        """`fn` (lax.scatter, scatter_add...) applied with this plan's layout and padding."""
        idx = self.layout.apply(idx)
        if any(self.pads):
            zero = lax.full((), 0, x.dtype)
            x = lax.pad(x, zero, [(p, p, 0) for p in self.pads])
            lo, hi = -max(self.pads) - 1, max(self.shape) + 1
            shift = np.array([self.pads[d] for d in self.dnums.scatter_dims_to_operand_dims])
            idx = _as_i64(idx, lo, hi) + shift
        out = fn(
            x,
            idx,
            upd,
            self.dnums,
            indices_are_sorted=self.indices_are_sorted,
            unique_indices=self.unique_indices,
            mode=lax.GatherScatterMode.FILL_OR_DROP,
        )
        if any(self.pads):
            out = lax.slice(out, self.pads, [p + n for p, n in zip(self.pads, self.shape)])
        return out


def scatter_plan(view: OpView, n: int) -> ScatterPlan:
    """The plan for a scatter with `n` inputs (operand types: inputs, indices, updates)."""
    dn = view.get_typed("scatter_dimension_numbers", ScatterDims)
    operand = view.tensor(view.operand_types[0], "input 0")
    indices = view.tensor(view.operand_types[n], "scatter_indices")
    update = view.tensor(view.operand_types[n + 1], "update 0")
    layout = IndexLayout(int(dn.index_vector_dim), indices.rank)
    dnums = lax.ScatterDimensionNumbers(
        update_window_dims=tuple(dn.update_window_dims),
        inserted_window_dims=tuple(dn.inserted_window_dims),
        scatter_dims_to_operand_dims=tuple(dn.scattered_dims_to_operand_dims),
        operand_batching_dims=tuple(dn.input_batching_dims),
        scatter_indices_batching_dims=layout.dims(dn.scatter_indices_batching_dims),
    )
    sizes = window_sizes(operand.rank, update.shape, dnums)
    pads = tuple(
        sizes[d] - 1 if d in dnums.scatter_dims_to_operand_dims and sizes[d] > 1 else 0
        for d in range(operand.rank)
    )
    return ScatterPlan(
        layout,
        dnums,
        pads,
        operand.shape,
        flag(view, "indices_are_sorted"),
        flag(view, "unique_indices"),
    )


def result_indices(plan: ScatterPlan, idx: Any, update_shape: Sequence[int]) -> tuple[Any, Any]:
    """spec.md#scatter's result_index of every update element, as i64 arrays of the updates'
    shape (one per operand dim), and whether it is in bounds."""
    dn, shape = plan.dnums, plan.shape
    # Clamped far enough out that a start index out of bounds stays out with any window offset.
    reach = max(shape, default=0) + max(update_shape, default=0) + 1
    idx = _as_i64(plan.layout.apply(idx), -reach, reach)
    rank = len(update_shape)
    scatter_dims = [d for d in range(rank) if d not in dn.update_window_dims]
    window_dims = iter(dn.update_window_dims)
    out, valid = [], None
    for d, size in enumerate(shape):
        pos = lax.full(tuple(update_shape), 0, _I64)
        if d in dn.scatter_dims_to_operand_dims:
            j = dn.scatter_dims_to_operand_dims.index(d)
            pos = lax.broadcast_in_dim(idx[..., j], tuple(update_shape), tuple(scatter_dims))
        if d in dn.operand_batching_dims:
            b = dn.scatter_indices_batching_dims[dn.operand_batching_dims.index(d)]
            pos = pos + lax.broadcasted_iota(_I64, tuple(update_shape), scatter_dims[b])
        elif d not in dn.inserted_window_dims:
            pos = pos + lax.broadcasted_iota(_I64, tuple(update_shape), next(window_dims))
        inside = (pos >= 0) & (pos < size)
        valid = inside if valid is None else valid & inside
        out.append(pos)
    if valid is None:  # a 0-d operand: every update lands on it
        valid = lax.full(tuple(update_shape), True, np.bool_)
    return tuple(out), valid


def scatter_in_order(
    plan: ScatterPlan,
    body: Callable[..., Sequence[Any]],
    xs: Sequence[Any],
    idx: Any,
    updates: Sequence[Any],
) -> list[Any]:
    """spec.md#scatter for any update computation: the update elements one at a time, in
    row-major order (the spec leaves the schedule to the implementation), each combining the
    current values at its result index with `body`; out-of-bounds elements change nothing.

    A scan with scalar steps: JAX differentiates it in both modes (each step only reads and
    writes one element of the carried operands, so its residuals are scalars) and batches it.
    """
    count = int(np.prod(updates[0].shape, dtype=np.int64))
    if count == 0 or 0 in plan.shape:  # nothing to update, or every update out of bounds
        return list(xs)
    where, valid = result_indices(plan, idx, updates[0].shape)
    where = [lax.reshape(w, (count,)) for w in where]
    valid = lax.reshape(valid, (count,))
    flat = [lax.reshape(u, (count,)) for u in updates]
    ones = (1,) * len(plan.shape)

    def step(e: Any, carry: tuple[Any, ...]) -> tuple[Any, ...]:
        at = [lax.clamp(np.int64(0), w[e], np.int64(n - 1)) for w, n in zip(where, plan.shape)]
        cur = [lax.reshape(lax.dynamic_slice(x, at, ones), ()) for x in carry]
        new = body(*cur, *[u[e] for u in flat])
        ok = valid[e]
        return tuple(
            lax.dynamic_update_slice(x, lax.reshape(lax.select(ok, v, c), ones), at)
            for x, v, c in zip(carry, new, cur)
        )

    return list(lax.fori_loop(0, count, step, tuple(xs)))
