"""numpy references for gather and scatter, written from spec.md's formulas element by element,
and the MLIR text of those ops for tests."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


def _ints(dims: Sequence[int]) -> list[int]:
    return [int(d) for d in dims]


@dataclass(frozen=True)
class GatherDims:
    offset_dims: Sequence[int]
    collapsed_slice_dims: Sequence[int]
    start_index_map: Sequence[int]
    index_vector_dim: int
    operand_batching_dims: Sequence[int] = ()
    start_indices_batching_dims: Sequence[int] = ()

    def attr(self) -> str:
        parts = [
            f"offset_dims = {_ints(self.offset_dims)}",
            f"collapsed_slice_dims = {_ints(self.collapsed_slice_dims)}",
        ]
        if self.operand_batching_dims:
            parts.append(f"operand_batching_dims = {_ints(self.operand_batching_dims)}")
            parts.append(f"start_indices_batching_dims = {_ints(self.start_indices_batching_dims)}")
        parts += [
            f"start_index_map = {_ints(self.start_index_map)}",
            f"index_vector_dim = {self.index_vector_dim}",
        ]
        return "#stablehlo.gather<" + ", ".join(parts) + ">"


def _start(idx: np.ndarray, batch_index: Sequence[int], ivd: int) -> list[int]:
    if ivd < idx.ndim:
        sel = (*batch_index[:ivd], slice(None), *batch_index[ivd:])
        return [int(v) for v in idx[sel]]
    return [int(idx[tuple(batch_index)])]


def np_gather(
    operand: np.ndarray,
    idx: np.ndarray,
    dn: GatherDims,
    sizes: Sequence[int],
    result_shape: Sequence[int],
) -> np.ndarray:
    """spec.md#gather, result element by result element."""
    out = np.zeros(result_shape, operand.dtype)
    batch_dims = [d for d in range(len(result_shape)) if d not in dn.offset_dims]
    rank = operand.ndim
    for ri in np.ndindex(*result_shape):
        batch_index = [ri[d] for d in batch_dims]
        start = _start(idx, batch_index, dn.index_vector_dim)
        full_start = [0] * rank
        for d_start, d_op in enumerate(dn.start_index_map):
            full_start[d_op] = min(max(start[d_start], 0), operand.shape[d_op] - sizes[d_op])
        full_batch = [0] * rank
        for d_op, d_start in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
            full_batch[d_op] = batch_index[d_start - (0 if d_start < dn.index_vector_dim else 1)]
        offsets = iter(ri[d] for d in dn.offset_dims)
        full_offset = [
            0 if d in dn.collapsed_slice_dims or d in dn.operand_batching_dims else next(offsets)
            for d in range(rank)
        ]
        out[ri] = operand[tuple(s + b + o for s, b, o in zip(full_start, full_batch, full_offset))]
    return out


def gather_module(
    op_t: str, idx_t: str, res_t: str, dn: GatherDims, sizes: Sequence[int], extra: str = ""
) -> str:
    attrs = f"dimension_numbers = {dn.attr()}, slice_sizes = array<i64: {', '.join(map(str, sizes))}>{extra}"
    return f"""module {{
  func.func @main(%a: {op_t}, %i: {idx_t}) -> {res_t} {{
    %0 = "stablehlo.gather"(%a, %i) <{{{attrs}}}> : ({op_t}, {idx_t}) -> {res_t}
    return %0 : {res_t}
  }}
}}"""


@dataclass(frozen=True)
class ScatterDims:
    update_window_dims: Sequence[int]
    inserted_window_dims: Sequence[int]
    scatter_dims_to_operand_dims: Sequence[int]
    index_vector_dim: int
    input_batching_dims: Sequence[int] = ()
    scatter_indices_batching_dims: Sequence[int] = ()

    def attr(self) -> str:
        parts = [
            f"update_window_dims = {_ints(self.update_window_dims)}",
            f"inserted_window_dims = {_ints(self.inserted_window_dims)}",
        ]
        if self.input_batching_dims:
            parts.append(f"input_batching_dims = {_ints(self.input_batching_dims)}")
            parts.append(
                f"scatter_indices_batching_dims = {_ints(self.scatter_indices_batching_dims)}"
            )
        parts += [
            f"scatter_dims_to_operand_dims = {_ints(self.scatter_dims_to_operand_dims)}",
            f"index_vector_dim = {self.index_vector_dim}",
        ]
        return "#stablehlo.scatter<" + ", ".join(parts) + ">"


def np_scatter(
    inputs: Sequence[np.ndarray],
    idx: np.ndarray,
    updates: Sequence[np.ndarray],
    dn: ScatterDims,
    combine: Callable[..., Sequence[object]],
) -> list[np.ndarray]:
    """spec.md#scatter with the row-major schedule: update elements one at a time, those whose
    result index is out of bounds skipped."""
    results = [np.array(x, copy=True) for x in inputs]
    shape, rank = inputs[0].shape, inputs[0].ndim
    ushape = updates[0].shape
    scatter_dims = [d for d in range(len(ushape)) if d not in dn.update_window_dims]
    for ui in np.ndindex(*ushape):
        usi = [ui[d] for d in scatter_dims]
        start = _start(idx, usi, dn.index_vector_dim)
        full_start = [0] * rank
        for d_start, d_in in enumerate(dn.scatter_dims_to_operand_dims):
            full_start[d_in] = start[d_start]
        full_batch = [0] * rank
        for d_in, d_start in zip(dn.input_batching_dims, dn.scatter_indices_batching_dims):
            full_batch[d_in] = usi[d_start - (0 if d_start < dn.index_vector_dim else 1)]
        windows = iter(ui[d] for d in dn.update_window_dims)
        full_window = [
            0 if d in dn.inserted_window_dims or d in dn.input_batching_dims else next(windows)
            for d in range(rank)
        ]
        ri = tuple(s + b + w for s, b, w in zip(full_start, full_batch, full_window))
        if all(0 <= r < n for r, n in zip(ri, shape)):
            new = combine(*[r[ri] for r in results], *[u[ui] for u in updates])
            for r, v in zip(results, new):
                r[ri] = v
    return results


def element(t: str) -> str:
    """The element type of a tensor type, "tensor<2x3xcomplex<f32>>" -> "complex<f32>"."""
    return re.sub(r"^(\d+x)*", "", t[len("tensor<") : -1])


@dataclass
class ScatterModule:
    """MLIR text of a scatter with `n` inputs of `in_t`, indices `idx_t`, updates `upd_t`."""

    in_t: Sequence[str]
    idx_t: str
    upd_t: Sequence[str]
    dn: ScatterDims
    body: str  # the region's ops and return, over %x0.. (inputs) and %y0.. (updates)
    extra: str = ""
    generic: bool = True
    elem: Sequence[str] = field(default_factory=list)

    def text(self) -> str:
        n = len(self.in_t)
        elem = self.elem or [element(t) for t in self.in_t]
        args = (
            [f"%a{k}: {t}" for k, t in enumerate(self.in_t)]
            + [f"%i: {self.idx_t}"]
            + [f"%u{k}: {t}" for k, t in enumerate(self.upd_t)]
        )
        bb = ", ".join(
            [f"%x{k}: tensor<{e}>" for k, e in enumerate(elem)]
            + [f"%y{k}: tensor<{e}>" for k, e in enumerate(elem)]
        )
        ins = ", ".join([f"%a{k}" for k in range(n)] + ["%i"] + [f"%u{k}" for k in range(n)])
        types = ", ".join([*self.in_t, self.idx_t, *self.upd_t])
        res = ", ".join(self.in_t)
        outs = ", ".join(f"%0#{k}" for k in range(n)) if n > 1 else "%0"
        lhs = f"%0:{n}" if n > 1 else "%0"
        return f"""module {{
  func.func @main({", ".join(args)}) -> ({res}) {{
    {lhs} = "stablehlo.scatter"({ins}) <{{scatter_dimension_numbers = {self.dn.attr()}{self.extra}}}> ({{
    ^bb0({bb}):
{self.body}
    }}) : ({types}) -> ({res})
    return {outs} : {res}
  }}
}}"""
