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
integers).

JAX's primitive is not used with padding: it pads with -inf, so a window whose real elements
are -inf or NaN next to padding would send its source value to a padding position, which XLA
never does.
"""

from __future__ import annotations

import itertools
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
    """Static facts about the windows: which operand position each window offset reaches."""

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
        self.offsets = list(itertools.product(*(range(w) for w in window)))

    def _starts(self, d: int) -> np.ndarray:
        """Operand index of window offset 0 in dimension d, per window."""
        return np.arange(self.n[d]) * self.strides[d] - self.padding[d][0]

    def select(self, operand: Any, keep_current: Any) -> tuple[Any, Any]:
        """(offset index picked per window, whether the window has any real element).

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
        have = lax.ne(found[1], none)
        picked = jnp.zeros(self.n, np.int32)
        for d in range(rank):
            start = self._starts(d).reshape([-1 if e == d else 1 for e in range(rank)])
            offset = found[1 + d] - start.astype(np.int32)
            picked = picked * self.window[d] + offset
        return lax.select(have, picked, jnp.zeros(self.n, np.int32)), have

    def scatter(
        self,
        shape: tuple[int, ...],
        picks: tuple[Any, Any],
        source: Any,
        init: Any,
        kind: str,
    ) -> Any:
        """init everywhere, combined (by `kind`) with the source of each window at its pick.

        add is one scatter-add (JAX differentiates it with repeated indices). The other
        monoids scatter once per window offset: windows that picked the same offset reach
        distinct positions, and JAX differentiates scatter-multiply only with unique indices.
        """
        picked, have = picks
        rank = len(shape)
        table = np.asarray(self.offsets, np.int64).reshape(len(self.offsets), rank)
        starts = [
            self._starts(d).reshape([-1 if e == d else 1 for e in range(rank)]) for d in range(rank)
        ]
        # Windows with no real element, or not taking part, scatter nowhere: each to its own
        # position past the end (so indices stay unique) and mode="drop" discards it.
        past = [shape[d] + np.arange(self.n[d]).reshape(starts[d].shape) for d in range(rank)]
        base = broadcast_scalar(init, shape)
        if kind == "add":
            picks_at = tuple(
                jnp.where(have, jnp.take(table[:, d], picked) + starts[d], past[d])
                for d in range(rank)
            )
            return base.at[picks_at].add(source, mode="drop")
        wide = base.dtype == np.bool_  # or = max, and = min on uint8, which JAX scatters
        out, src = (base.astype(np.uint8), source.astype(np.uint8)) if wide else (base, source)
        for k in range(len(self.offsets)):
            mine = jnp.logical_and(have, picked == k)
            index = tuple(jnp.where(mine, table[k, d] + starts[d], past[d]) for d in range(rank))
            at = out.at[index]
            if kind == "mul":
                out = at.multiply(src, mode="drop", unique_indices=True)
            elif kind in ("max", "or"):
                out = at.max(src, mode="drop", unique_indices=True)
            else:
                out = at.min(src, mode="drop", unique_indices=True)
        return out.astype(np.bool_) if wide else out
