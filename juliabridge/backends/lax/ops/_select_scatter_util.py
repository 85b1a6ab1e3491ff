"""select_and_scatter (spec.md#select_and_scatter) as JAX computations.

The max-pool gradient, the form Enzyme and JAX emit (select GE or LE, scatter add, no
padding), is JAX's own select_and_scatter_add primitive, reached through the public API as
the VJP of a max/min reduce_window; it lowers to the very same op and JAX differentiates it.

Everything else is computed as XLA's CPU compiler expands the op: a reduce_window over
(value, position) pairs picks one position per window, keeping the current pick unless
``select(current, candidate)`` is false, in the order XLA's reduce_window visits the window
(which decides ties, where the spec leaves the choice open); then the source values are
combined into the picked positions, starting from the init value, with the scatter body's
monoid. JAX differentiates that with respect to the source and the init (the picks are
integers). Nothing is enumerated per window offset: the reduce_window yields the picked
position itself, and the combination is one scatter (or, for multiply, a sort and a segmented
scan first), so the lift costs what XLA's own expansion costs whatever the window's size.

JAX's primitive is not used with padding: it pads with -inf, so a window whose real elements
are -inf or NaN next to padding would send its source value to a padding position, which XLA
never does.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import Impl, OpView
from ._reduction_util import broadcast_scalar, is_float

Pairs = tuple[tuple[int, int], ...]


def select_and_scatter_impl(
    view: OpView,
    *,
    select: str | None,
    scatter: str,
    window: tuple[int, ...],
    strides: tuple[int, ...],
    padding: Pairs,
    init_is_zero: bool,
    source_shape: tuple[int, ...],
) -> Impl:
    """The implementation of one select_and_scatter op (its attributes decoded by the caller).

    `select` is the select body's comparison ('GE', 'LE', 'GT', 'LT') when it is a plain
    compare of its two arguments, else None; `scatter` the scatter body's monoid kind.
    """
    dtype = view.tensor(view.operand_types[0]).dtype
    native = (
        select in ("GE", "LE")
        and scatter == "add"
        and is_float(dtype)
        and all(p == (0, 0) for p in padding)
    )
    if native:
        return _native(select == "GE", window, strides, init_is_zero)
    geometry = _Geometry(window, strides, padding, source_shape)

    def impl(regions: Any, operand: Any, source: Any, init: Any) -> list[Any]:
        if 0 in source_shape:
            return [broadcast_scalar(init, operand.shape)]
        picks = geometry.select(operand, lambda a, b: regions[0](a, b)[0])
        return [geometry.scatter(operand.shape, picks, source, init, scatter)]

    return impl


def _native(is_max: bool, window: tuple[int, ...], strides: tuple[int, ...], zero: bool) -> Impl:
    no_pad = ((0, 0),) * len(window)

    def impl(regions: Any, operand: Any, source: Any, init: Any) -> list[Any]:
        fill = np.array(-np.inf if is_max else np.inf).astype(operand.dtype)
        reducer = lax.max if is_max else lax.min

        def pool(x: Any) -> Any:
            return lax.reduce_window(x, fill, reducer, window, strides, no_pad)

        # The cotangent map of a max (min) pool is select_and_scatter_add with select GE (LE).
        out = jax.vjp(pool, operand)[1](source)[0]
        if not zero:
            out = lax.add(out, broadcast_scalar(init, out.shape))
        return [out]

    return impl


class _Geometry:
    """Static facts about the windows: where each window starts in the operand.

    Nothing here is sized by the window: the cost of the lift is that of XLA's own expansion
    (one reduce_window over the operand, then one scatter over the source), whatever the window
    dimensions, so a 12000 x 12000 window costs what XLA spends on it (issue 39).
    """

    def __init__(
        self,
        window: tuple[int, ...],
        strides: tuple[int, ...],
        padding: Pairs,
        source_shape: tuple[int, ...],
    ) -> None:
        self.window = window
        self.strides = strides
        self.padding = padding
        self.n = source_shape

    def select(self, operand: Any, keep_current: Any) -> tuple[tuple[Any, ...], Any]:
        """(operand position picked per window, one array per dimension; whether the window
        has any real element).

        The selection is XLA's own expansion of select_and_scatter (its CPU compiler rewrites
        every select_and_scatter so): a reduce_window over (value, position) pairs starting
        from (any, -1) that keeps the accumulated pair when ``select(acc, candidate)`` holds
        and it is a real element, or when the candidate is padding. Which element a tie picks
        then depends on the order XLA's reduce_window visits a window (seen on CPU: row-major,
        except that the last dimension with positive padding varies slowest), so the same
        reduce_window is emitted here and XLA visits it in that very order.
        """
        rank = len(self.window)
        shape = operand.shape
        iotas = [lax.broadcasted_iota(np.int32, shape, d) for d in range(rank)]
        none = np.array(-1, np.int32)

        def body(acc: Any, cand: Any) -> tuple[Any, ...]:
            real_acc, real_cand = lax.ne(acc[1], none), lax.ne(cand[1], none)
            kept = jnp.logical_and(keep_current(acc[0], cand[0]), real_acc)
            keep = jnp.logical_or(kept, jnp.logical_not(real_cand))
            return tuple(lax.select(keep, a, c) for a, c in zip(acc, cand))

        # Values at padding never decide (a padding candidate is never taken), so the value
        # init is a constant: a batched init operand then leaves this reduction unbatched.
        found = lax.reduce_window(
            (lax.stop_gradient(operand), *iotas),
            (np.zeros((), operand.dtype), *([none] * rank)),
            body,
            self.window,
            self.strides,
            self.padding,
        )
        return tuple(found[1:]), lax.ne(found[1], none)

    def scatter(
        self,
        shape: tuple[int, ...],
        picks: tuple[tuple[Any, ...], Any],
        source: Any,
        init: Any,
        kind: str,
    ) -> Any:
        """init everywhere, combined (by `kind`) with the source of each window at its pick.

        add, max and min (and or/and on i1, as max/min on uint8) are one scatter; JAX
        differentiates those with repeated indices. JAX differentiates scatter-multiply only
        with unique indices, so multiply first takes the product of the sources per picked
        position (a sort by position and a segmented scan), then scatters each product once.
        """
        found, have = picks
        rank = len(shape)
        # Windows with no real element scatter nowhere: to the position past the end of the
        # first dimension, which mode="drop" discards.
        at = tuple(jnp.where(have, found[d], shape[d] if d == 0 else 0) for d in range(rank))
        base = broadcast_scalar(init, shape)
        if kind == "add":
            return base.at[at].add(source, mode="drop")
        if kind == "mul":
            return _scatter_products(base, at, source)
        wide = base.dtype == np.bool_  # or = max, and = min on uint8, which JAX scatters
        out, src = (base.astype(np.uint8), source.astype(np.uint8)) if wide else (base, source)
        if kind in ("max", "or"):
            out = out.at[at].max(src, mode="drop")
        else:
            out = out.at[at].min(src, mode="drop")
        return out.astype(np.bool_) if wide else out


def _scatter_products(base: Any, at: tuple[Any, ...], source: Any) -> Any:
    """`base` multiplied, at each position, by the product of the sources picked there.

    The flat positions are sorted (the sources carried along), a segmented scan multiplies
    each run of equal positions, and the last element of each run is scattered with unique
    indices (every other element to its own place past the end, dropped): JAX differentiates
    every step. Cost: a sort and a scan over the source, whatever the window.
    """
    size = int(np.prod(base.shape, dtype=np.int64))
    n = int(np.prod(source.shape, dtype=np.int64))
    itype = np.int32 if size + n < 1 << 31 else np.int64
    flat = jnp.zeros(source.shape, itype)
    for d, dim in enumerate(base.shape):
        flat = flat * np.array(dim, itype) + at[d].astype(itype)
    # A dropped window (first index past the end) lands past the end here too.
    keys, values = lax.sort((flat.ravel(), source.ravel()), num_keys=1, is_stable=True)
    first = jnp.concatenate([jnp.ones((1,), bool), keys[1:] != keys[:-1]])
    last = jnp.concatenate([keys[1:] != keys[:-1], jnp.ones((1,), bool)])

    def combine(a: tuple[Any, Any], b: tuple[Any, Any]) -> tuple[Any, Any]:
        return jnp.logical_or(a[0], b[0]), jnp.where(b[0], b[1], a[1] * b[1])

    products = lax.associative_scan(combine, (first, values))[1]
    spare = np.arange(n, dtype=itype) + np.array(size, itype)
    index = jnp.where(jnp.logical_and(last, keys < size), keys, spare)
    out = base.ravel().at[index].multiply(products, mode="drop", unique_indices=True)
    return out.reshape(base.shape)
