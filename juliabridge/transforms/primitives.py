"""JAX primitives for imported modules, with rules for jit, grad, jvp and vmap.

`call_p` runs a module. Its JVP emits `jvp_p` (primals, tangents -> tangents), which is linear
in the tangents; the transpose of `jvp_p` is `vjp_p`. So reverse mode never evaluates `jvp_p`:
a backend with only a VJP (xla with a VJP module) still gets grad, and one with neither gets a
TransformError naming what is missing. All three batch by looping over the mapped axis with
lax.map, which is exact for any module (no assumption about what the module does per sample).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from .. import dtypes
from ..errors import TransformError
from ..jaxinternals import ad, batching, jax_mlir, make_primitive
from .call_target import CallTarget
from .sharding import unshard_leading_axis
from .typed_errors import typed


def _aval(spec: Any) -> jax.core.ShapedArray:
    return jax.core.ShapedArray(spec.shape, dtypes.to_numpy(spec.dtype))


# --- primal -----------------------------------------------------------------------------------

call_p = make_primitive("juliabridge_call")


def _call_abstract(*args: Any, target: CallTarget) -> list[jax.core.ShapedArray]:
    return [_aval(s) for s in target.out_specs]


def _impl(get_fn: Any, what: str | None, *args: Any, target: CallTarget) -> list[Any]:
    fn = typed(target.name, what, lambda: get_fn(target, True), capture=False)()
    return list(fn(*args))


def _lowering(get_fn: Any, what: str | None, ctx: Any, *args: Any, target: CallTarget) -> Any:
    def lower() -> Any:
        fn = get_fn(target, False)
        return jax_mlir.lower_fun(lambda *a: list(fn(*a)), multiple_results=True)(ctx, *args)

    return typed(target.name, what, lower)()


def _register(prim: Any, get_fn: Any, what: str | None) -> None:
    """impl (eager, jitted) and lowering (inlined into the caller's program) of `prim`.

    Both end in typed errors: the impl through CallTarget's Compiled entries, the lowering
    (where a backend such as enzyme-ad lowers its own ops, inside the caller's jit) through
    guard.typed, which also keeps what native code prints off the terminal. The rules are
    module-level functions (bound with partial), not closures made here at import time, so
    that a mutation tool maps them to the tests that run them.
    """
    prim.def_impl(functools.partial(_impl, get_fn, what))
    jax_mlir.register_lowering(prim, functools.partial(_lowering, get_fn, what))


call_p.def_abstract_eval(_call_abstract)
_register(call_p, lambda t, jitted: t.jit_primal if jitted else t.primal, None)

# --- forward mode -----------------------------------------------------------------------------

jvp_p = make_primitive("juliabridge_jvp")


def _jvp_abstract(*args: Any, target: CallTarget) -> list[jax.core.ShapedArray]:
    return [_aval(target.out_specs[k]) for k in target.diff_out]


jvp_p.def_abstract_eval(_jvp_abstract)
_register(jvp_p, lambda t, jitted: t.jit_jvp if jitted else t.jvp, "forward-mode derivative")


def _call_jvp(primals: Any, tangents: Any, *, target: CallTarget) -> tuple[list[Any], list[Any]]:
    outs = call_p.bind(*primals, target=target)
    diff_tangents = [
        ad.instantiate_zeros(tangents[i]) if type(tangents[i]) is ad.Zero else tangents[i]
        for i in target.diff_in
    ]
    out_tangents: list[Any] = [ad.Zero(_aval(s).to_tangent_aval()) for s in target.out_specs]
    if target.diff_out and target.diff_in:
        diff_out_tangents = jvp_p.bind(*primals, *diff_tangents, target=target)
        for k, t in zip(target.diff_out, diff_out_tangents):
            out_tangents[k] = t
    return outs, out_tangents


ad.primitive_jvps[call_p] = _call_jvp

# --- reverse mode -----------------------------------------------------------------------------

vjp_p = make_primitive("juliabridge_vjp")


def _vjp_abstract(*args: Any, target: CallTarget) -> list[jax.core.ShapedArray]:
    return [_aval(s) for s in target.in_specs]


vjp_p.def_abstract_eval(_vjp_abstract)
_register(vjp_p, lambda t, jitted: t.jit_vjp if jitted else t.vjp, "reverse-mode derivative")


def _jvp_transpose(cts: Any, *args: Any, target: CallTarget) -> list[Any]:
    n = len(target.in_specs)
    primals = args[:n]
    if any(ad.is_undefined_primal(p) for p in primals):
        raise TransformError(
            f"{target.name}: cannot transpose with respect to the primal inputs of a JVP "
            "(this would be a second-order derivative, which juliabridge does not provide)"
        )
    full_cts = []
    ct_iter = dict(zip(target.diff_out, cts))
    for k, spec in enumerate(target.out_specs):
        ct = ct_iter.get(k)
        if ct is None or type(ct) is ad.Zero:
            full_cts.append(jnp.zeros(spec.shape, dtypes.to_numpy(spec.dtype)))
        else:
            full_cts.append(ct)
    arg_cts = vjp_p.bind(*primals, *full_cts, target=target)
    return [None] * n + [arg_cts[i] for i in target.diff_in]


ad.primitive_transposes[jvp_p] = _jvp_transpose


def _no_second_order(primals: Any, tangents: Any, *, target: CallTarget) -> Any:
    raise TransformError(
        f"{target.name}: second-order derivatives (grad of grad, hessian, jvp of a VJP) are not "
        "available on the enzyme and xla backends; use backend='lax' (every order; "
        "backend='auto' picks it when every op lifts), differentiate once, or export the "
        "derivative you need from Julia as its own bundle"
    )


ad.primitive_jvps[jvp_p] = _no_second_order
ad.primitive_jvps[vjp_p] = _no_second_order

# --- vmap -------------------------------------------------------------------------------------


def _loop_batch(prim: Any, args: Any, dims: Any, **params: Any) -> tuple[list[Any], list[int]]:
    """Batch `prim` by mapping it over the batched axis with lax.map (a sequential loop).

    Every mapped argument shares the mapped size; lax.map checks that.
    """
    batched_idx = [i for i, d in enumerate(dims) if d is not None]
    moved = [unshard_leading_axis(jnp.moveaxis(args[i], dims[i], 0)) for i in batched_idx]

    def body(sliced: Any) -> Any:
        full = list(args)
        for i, s in zip(batched_idx, sliced):
            full[i] = s
        return tuple(prim.bind(*full, **params))

    outs = lax.map(body, tuple(moved))
    return list(outs), [0] * len(outs)


for _p in (call_p, jvp_p, vjp_p):
    batching.primitive_batchers[_p] = functools.partial(_loop_batch, _p)
