"""A sort that is XLA's sort with the module's own comparator.

`lax.sort` takes no comparator (its own orders NaNs last), so where a comparator is not a
strict weak order on every input, e.g. a plain float `compare LT` on data with NaN (NaN
compares false, and the result depends on the sorting algorithm), no sort built from JAX's
gives what XLA gives. This primitive lowers to `stablehlo.sort` with the comparator region
lowered as it is, so XLA runs the very op of the module. JAX transformations: forward mode
sorts a position iota along (which the comparator does not see) and permutes the tangents
with it, which reverse mode transposes (a gather); vmap sorts along the moved dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxlib.mlir.dialects import stablehlo as hlo

from ....support.jaxinternals import ad, batching, ir, jax_mlir, make_primitive

Less = Callable[..., Any]


def _abstract(*xs: Any, dimension: int, is_stable: bool, comparator: Any, compared: int) -> Any:
    return [jax.core.ShapedArray(x.shape, x.dtype) for x in xs]


def _lowering(
    ctx: Any, *xs: Any, dimension: int, is_stable: bool, comparator: Any, compared: int
) -> Any:
    op = hlo.SortOp(
        [x.type for x in xs],
        list(xs),
        dimension=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dimension),
        is_stable=ir.BoolAttr.get(is_stable),
    )
    scalars = [jax.core.ShapedArray((), a.dtype) for a in ctx.avals_in]
    scalar_types = [
        ir.RankedTensorType.get([], ir.RankedTensorType(x.type).element_type) for x in xs
    ]
    block = op.comparator.blocks.append(*[t for t in scalar_types for _ in (0, 1)])
    with ir.InsertionPoint(block):
        jaxpr, consts = comparator.jaxpr, comparator.consts

        def compare(*pairs: Any) -> Any:
            return jax.core.eval_jaxpr(jaxpr, consts, *pairs[: 2 * compared])[0]

        lowered = jax_mlir.lower_fun(compare, multiple_results=False)
        sub = ctx.replace(
            primitive=None,
            avals_in=[a for a in scalars for _ in (0, 1)],
            avals_out=[jax.core.ShapedArray((), np.bool_)],
        )
        out = lowered(sub, *block.arguments)
        hlo.return_(_flat(out))
    return list(op.results)


def _flat(v: Any) -> list[Any]:
    return [v] if isinstance(v, ir.Value) else [x for e in v for x in _flat(e)]


def _impl(*xs: Any, **params: Any) -> Any:
    return jax.jit(lambda *a: _sort_p.bind(*a, **params))(*xs)


def _jvp(primals: Sequence[Any], tangents: Sequence[Any], **params: Any) -> Any:
    dim = params["dimension"]
    x0 = primals[0]
    iota = lax.broadcasted_iota(np.int32, x0.shape, dim)
    *out, perm = _sort_p.bind(*primals, iota, **params)
    dots: list[Any] = []
    for t in tangents:
        if type(t) is ad.Zero:
            dots.append(t)  # a symbolic zero of the same type (sorting keeps shapes)
        else:
            dots.append(jnp.take_along_axis(t, perm, axis=dim))
    return out, dots


def _batch(args: Sequence[Any], dims: Sequence[Any], **params: Any) -> Any:
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    moved = [
        jnp.broadcast_to(a, (size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)
        for a, d in zip(args, dims)
    ]
    out = _sort_p.bind(*moved, **{**params, "dimension": params["dimension"] + 1})
    return out, [0] * len(out)


_sort_p = make_primitive("juliabridge_sort_with_comparator")
_sort_p.def_impl(_impl)
_sort_p.def_abstract_eval(_abstract)
jax_mlir.register_lowering(_sort_p, _lowering)
ad.primitive_jvps[_sort_p] = _jvp
batching.primitive_batchers[_sort_p] = _batch


def sort_with_comparator(xs: Sequence[Any], less: Less, dim: int, stable: bool) -> list[Any]:
    """`xs` sorted together along `dim` by XLA with `less(lhs0, rhs0, lhs1, rhs1, ...)`.

    The comparator is traced here, inside the module's 64-bit scope, so its constants keep
    their types when the lowering runs later (under the caller's jit, outside that scope).
    """
    scalars = [jax.ShapeDtypeStruct((), x.dtype) for x in xs for _ in (0, 1)]
    comparator = jax.make_jaxpr(lambda *pairs: less(*pairs))(*scalars)
    return list(
        _sort_p.bind(*xs, dimension=dim, is_stable=stable, comparator=comparator, compared=len(xs))
    )
