"""numpy references for the reductions, written from spec.md (and XLA's documented order).

They loop over output elements, so they are only for the small shapes the tests use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Op = Callable[[Any, Any], Any]

OPS: dict[str, Op] = {
    "add": lambda a, b: a + b,
    "multiply": lambda a, b: a * b,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
}


def wide(x: np.ndarray) -> np.ndarray:
    """Floats in float64 (complex in complex128), integers and Booleans as they are."""
    x = np.asarray(x)
    if x.dtype.kind in "biu":
        return x
    if x.dtype.kind == "c":
        return x.astype(np.complex128)
    return x.astype(np.float64)


def reduce(op: str, x: np.ndarray, init: Any, dims: Sequence[int]) -> np.ndarray:
    """spec.md#reduce with the init applied once, first (one valid schedule)."""
    dtype = np.asarray(x).dtype
    xw = wide(x)
    keep = [d for d in range(xw.ndim) if d not in dims]
    moved = np.transpose(xw, keep + list(dims)).reshape([xw.shape[d] for d in keep] + [-1])
    out = np.empty(moved.shape[:-1], xw.dtype)
    fn = OPS[op]
    with np.errstate(over="ignore", invalid="ignore"):  # integers wrap, as in StableHLO
        for idx in np.ndindex(*out.shape):
            acc = wide(np.asarray(init, dtype))[()]
            for v in moved[idx]:
                acc = fn(acc, v)
            out[idx] = acc
    return out.astype(dtype)


def _dilate_pad(
    x: np.ndarray, fill: Any, padding: Sequence[tuple[int, int]], base: Sequence[int]
) -> np.ndarray:
    shape = [(s - 1) * b + 1 if s else 0 for s, b in zip(x.shape, base)]
    out = np.full(shape, fill, x.dtype)
    out[tuple(slice(None, None, b) for b in base)] = x
    for d, (lo, hi) in enumerate(padding):
        parts = []
        if lo > 0:
            parts.append(np.full([lo if e == d else s for e, s in enumerate(out.shape)], fill,
                                 out.dtype))  # fmt: skip
        parts.append(np.take(out, range(max(-lo, 0), out.shape[d] - max(-hi, 0)), axis=d))
        if hi > 0:
            parts.append(np.full([hi if e == d else s for e, s in enumerate(out.shape)], fill,
                                 out.dtype))  # fmt: skip
        out = np.concatenate(parts, axis=d)
    return out


def reduce_window(
    op: str,
    x: np.ndarray,
    init: Any,
    window: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    base: Sequence[int],
    wdil: Sequence[int],
    *,
    as_xla: bool = False,
) -> np.ndarray:
    """spec.md#reduce_window: pad and dilate with init, then reduce each window with init.

    `as_xla`: XLA's semantics instead, where padding and dilation holes take no part and the
    init is applied once per window (they differ for an init that is not the identity).
    """
    dtype = np.asarray(x).dtype
    init_w = wide(np.asarray(init, dtype))[()]
    fn = OPS[op]
    skip = object()
    padded = _dilate_pad(wide(x).astype(object), skip if as_xla else init_w, padding, base)
    spans = [(w - 1) * d + 1 for w, d in zip(window, wdil)]
    shape = [
        0 if p == 0 or s > p else (p - s) // st + 1
        for p, s, st in zip(padded.shape, spans, strides)
    ]
    out = np.empty(shape, wide(x).dtype)
    for idx in np.ndindex(*shape):
        sl = tuple(slice(i * st, i * st + s, d) for i, st, s, d in zip(idx, strides, spans, wdil))
        acc = init_w
        with np.errstate(over="ignore", invalid="ignore"):
            for v in padded[sl].ravel():
                if v is not skip:
                    acc = fn(acc, wide(x).dtype.type(v))
        out[idx] = acc
    return out.astype(dtype)


_SELECT = {
    "GE": lambda a, b: a >= b,
    "GT": lambda a, b: a > b,
    "LE": lambda a, b: a <= b,
    "LT": lambda a, b: a < b,
}


def select_and_scatter(
    select: str,
    scatter: str,
    operand: np.ndarray,
    source: np.ndarray,
    init: Any,
    window: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    outer: int | None = None,
) -> np.ndarray:
    """XLA's SelectAndScatter: per window, walk positions in row-major order skipping padding,
    keep the current pick while select(current, candidate); then combine sources into picks.

    `outer`: a dimension whose window offset varies slowest (the rest row-major), the order
    XLA's CPU expansion visits windows in for some padded geometries (observed, see
    tests/lax/test_reduction.py)."""
    dtype = operand.dtype
    out = np.full(operand.shape, wide(np.asarray(init, dtype))[()], wide(operand).dtype)
    x = wide(operand)
    sel, fn = _SELECT[select], OPS[scatter]
    for w in np.ndindex(*source.shape):
        best = None
        offsets = list(np.ndindex(*window))
        if outer is not None:
            offsets.sort(key=lambda o: o[outer])  # stable: row-major within
        for off in offsets:
            pos = tuple(i * st + o - lo for i, st, o, (lo, _) in zip(w, strides, off, padding))
            if not all(0 <= p < s for p, s in zip(pos, operand.shape)):
                continue
            if best is None or not sel(x[best], x[pos]):
                best = pos
        if best is not None:
            out[best] = fn(out[best], wide(source)[w])
    return out.astype(dtype)
