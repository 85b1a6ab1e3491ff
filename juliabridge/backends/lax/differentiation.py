"""Marking values JAX can compute and push tangents through but not transpose.

Some StableHLO forms have exact JAX equivalents that JAX cannot reverse-differentiate: a
`while` loop that is not a counted loop, a reduction or scatter whose body is not one of the
monoids JAX knows, a sort with a comparator of its own. Forward mode works through them, so
they stay as they are; their floating results pass through `reverse_unavailable`, an identity
whose transpose raises a TransformError naming the op and its line. Reverse mode (grad, vjp,
jacrev, hessian) then fails with that message, at the op, instead of deep inside JAX.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from ...errors import TransformError
from ...support.jaxinternals import ad, batching, jax_mlir, make_primitive

_mark_p = make_primitive("juliabridge_reverse_unavailable")
_mark_p.def_impl(lambda *xs, message: list(xs))
_mark_p.def_abstract_eval(lambda *avals, message: list(avals))
jax_mlir.register_lowering(_mark_p, lambda ctx, *xs, message: list(xs))
batching.primitive_batchers[_mark_p] = lambda args, dims, message: (
    _mark_p.bind(*args, message=message),
    dims,
)


def _mark_jvp(primals: Sequence[Any], tangents: Sequence[Any], *, message: str) -> Any:
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    return _mark_p.bind(*primals, message=message), _mark_p.bind(*tangents, message=message)


def _mark_transpose(cts: Sequence[Any], *args: Any, message: str) -> Any:
    raise TransformError(message)


ad.primitive_jvps[_mark_p] = _mark_jvp
ad.primitive_transposes[_mark_p] = _mark_transpose


def reverse_unavailable(values: Sequence[Any], *, op: str, where: str, why: str) -> list[Any]:
    """`values` unchanged, with reverse-mode differentiation through them refused by name.

    `why` says which form JAX cannot transpose and what would make it work.
    """
    message = (
        f"{op} at {where}: reverse-mode differentiation (jax.grad, jax.vjp, jax.jacrev, "
        f"jax.hessian) is not available through this op: {why}. Forward mode (jax.jvp, "
        "jax.jacfwd) works through it."
    )
    out = list(values)
    idx = [i for i, v in enumerate(out) if jnp.issubdtype(v.dtype, jnp.inexact)]
    if idx:
        marked = _mark_p.bind(*[out[i] for i in idx], message=message)
        for i, m in zip(idx, marked):
            out[i] = m
    return out
