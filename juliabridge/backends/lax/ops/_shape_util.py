"""Helpers for the shape ops: checks at lift time and the index formulas of the dynamic ops."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

_I64 = np.dtype(np.int64)


def take(x: Any, idx: Any, axis: int) -> Any:
    """x[..., idx, ...] along `axis` (a gather; out-of-range indices clamp, as gather does)."""
    rank = x.ndim
    dnums = lax.GatherDimensionNumbers(
        offset_dims=tuple(d for d in range(rank) if d != axis),
        collapsed_slice_dims=(axis,),
        start_index_map=(axis,),
    )
    sizes = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
    return lax.gather(x, idx[:, None], dnums, sizes, mode=lax.GatherScatterMode.CLIP)


def _component(v: Any, d: int) -> Any:
    """Entry `d` of a 1-D index tensor, as i64 (the paddings and strides may be any integer)."""
    return lax.convert_element_type(v[d], _I64)


def dynamic_pad(x: Any, value: Any, low: Any, interior: Any, out: Sequence[int]) -> Any:
    """spec.md#dynamic_pad's formula: result[r] = operand[o] where r = low + o * (interior + 1),
    else `value`; one gather per dim, then a mask of the positions no operand element reaches.

    `edge_padding_high` is implied by the static result shape and not needed.
    """
    fill = lax.broadcast(value, tuple(out))
    if 0 in x.shape:
        return fill
    y, keep = x, None
    for d, size in enumerate(out):
        t = lax.iota(_I64, size) - _component(low, d)
        step = _component(interior, d) + np.int64(1)
        q = lax.div(t, step)
        hit = (t >= 0) & (lax.rem(t, step) == 0) & (q < x.shape[d])
        y = take(y, q, d)
        hit = lax.broadcast_in_dim(hit, tuple(out), (d,))
        keep = hit if keep is None else keep & hit
    return lax.select(keep, y, fill) if keep is not None else y


def strided_take(x: Any, start: Any, strides: Any, out: Sequence[int]) -> Any:
    """operand[start + r * stride] per dim (real_dynamic_slice); indices past the operand are
    undefined there and clamp here."""
    if 0 in x.shape:
        return jnp.zeros(tuple(out), x.dtype)
    y = x
    for d, size in enumerate(out):
        idx = _component(start, d) + lax.iota(_I64, size) * _component(strides, d)
        y = take(y, idx, d)
    return y
