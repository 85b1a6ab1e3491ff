"""Shape ops: reshape, transpose, broadcasts, concatenate, slice, pad, reverse, and the dynamic
shape ops whose result type is static (spec.md sections named after each op).

Attributes are not re-checked here: the MLIR verifier has checked them when the module was
parsed. Each static op maps to the `jax.lax` function that lowers to that very StableHLO op. The
dynamic ops take their shape or paddings as values; their result type is static here (the lax
backend refuses dynamic shapes), so an op whose shape operand only restates the result type
(dynamic_reshape, dynamic_broadcast_in_dim, dynamic_iota) becomes its static form, and one whose
values move data within a fixed shape (dynamic_pad, real_dynamic_slice) is computed from the
spec's index formula with gathers, which JAX differentiates and batches.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax import lax

from ..registry import Impl, OpView, lifts
from . import _shape_util, elementwise


@lifts("stablehlo.reshape", "stablehlo.dynamic_reshape")
def reshape(view: OpView) -> Impl:
    """spec.md#reshape (and #dynamic_reshape, whose output_shape equals the static result)."""
    shape = view.result.shape
    return lambda x, *_: [lax.reshape(x, shape)]


@lifts("stablehlo.transpose")
def transpose(view: OpView) -> Impl:
    """spec.md#transpose: result dim d is operand dim permutation[d]."""
    perm = view.get_ints("permutation")
    return lambda x: [lax.transpose(x, perm)]


@lifts("stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim")
def broadcast_in_dim(view: OpView) -> Impl:
    """spec.md#broadcast_in_dim (and #dynamic_broadcast_in_dim with a static result type);
    operand dim d goes to result dim broadcast_dimensions[d], size-1 dims expand."""
    dims = view.get_ints("broadcast_dimensions")
    shape = view.result.shape
    return lambda x, *_: [lax.broadcast_in_dim(x, shape, dims)]


@lifts("stablehlo.broadcast")
def broadcast(view: OpView) -> Impl:
    """The deprecated stablehlo.broadcast: new leading dims `broadcast_sizes`."""
    sizes = view.get_ints("broadcast_sizes")
    return lambda x: [lax.broadcast(x, sizes)]


@lifts("stablehlo.concatenate")
def concatenate(view: OpView) -> Impl:
    """spec.md#concatenate: operands joined along `dimension`, in order."""
    dim = view.get_int("dimension")
    return lambda *xs: [lax.concatenate(xs, dim)]


@lifts("stablehlo.slice")
def slice_(view: OpView) -> Impl:
    """spec.md#slice: start_indices to limit_indices (exclusive) with strides."""
    start = view.get_ints("start_indices")
    limit = view.get_ints("limit_indices")
    strides = view.get_ints("strides", (1,) * view.operand.rank)
    return lambda x: [lax.slice(x, start, limit, strides)]


@lifts("stablehlo.pad")
def pad(view: OpView) -> Impl:
    """spec.md#pad: interior padding first, then edge padding (negative edges remove)."""
    low = view.get_ints("edge_padding_low")
    high = view.get_ints("edge_padding_high")
    interior = view.get_ints("interior_padding")
    config = list(zip(low, high, interior))
    return lambda x, value: [lax.pad(x, value, config)]


@lifts("stablehlo.reverse")
def reverse(view: OpView) -> Impl:
    """spec.md#reverse: the `dimensions` listed are reversed."""
    dims = view.get_ints("dimensions")
    return lambda x: [lax.rev(x, dims)]


@lifts("stablehlo.get_dimension_size")
def get_dimension_size(view: OpView) -> Impl:
    """spec.md#get_dimension_size: the static size of `dimension`, as an si32 scalar."""
    dim = view.get_int("dimension")
    value = np.array(view.operand.shape[dim], view.result.dtype)
    return lambda x: [value]


@lifts("stablehlo.dynamic_iota")
def dynamic_iota(view: OpView) -> Impl:
    """spec.md#dynamic_iota: iota of the static result type (output_shape restates it)."""
    impl = elementwise.iota(view)
    return lambda _shape: impl()


@lifts("stablehlo.dynamic_pad")
def dynamic_pad(view: OpView) -> Impl:
    """spec.md#dynamic_pad: pad with paddings given as values; the result shape is static, but
    how much goes low, high and between elements is not, so the spec's formula is computed."""
    result = view.result

    def impl(x: Any, value: Any, low: Any, high: Any, interior: Any) -> list[Any]:
        return [_shape_util.dynamic_pad(x, value, low, interior, result.shape)]

    return impl


@lifts("stablehlo.real_dynamic_slice")
def real_dynamic_slice(view: OpView) -> Impl:
    """real_dynamic_slice (StablehloOps.td; not in spec.md): slice with start, limit and
    strides given as values; result[r] = operand[start + r * stride] in each dim."""
    result = view.result

    def impl(x: Any, start: Any, limit: Any, strides: Any) -> list[Any]:
        return [_shape_util.strided_take(x, start, strides, result.shape)]

    return impl
