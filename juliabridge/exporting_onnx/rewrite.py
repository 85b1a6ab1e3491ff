"""The jaxpr jax2onnx converts: the traced program evaluated again, eqn by eqn, with rewrites
that keep every value and give jax2onnx forms it converts faithfully.

- calls (``jit``, ``custom_jvp_call``, ``custom_vjp_call``, ``closed_call``) are inlined: the
  ONNX graph is forward-only, so the custom derivative rules have nothing to do there;
- the bodies of ``while``, ``cond`` and ``scan`` are evaluated the same way (re-bound with
  ``lax.while_loop`` / ``lax.switch`` / ``lax.scan``), so what follows holds inside loops too;
- a max or sum window (``reduce_window_max``/``reduce_window_sum``) whose window leaves some
  axes alone (size 1, stride 1, no padding, no dilation: the batch and channel axes of a
  pooling layer) reduces over those axes moved to the front and folded into one. jax2onnx
  pools every axis of the operand as a spatial one, and onnxruntime pools at most three, so
  LeNet's 4-D max-pool (window 1x1x2x2) would not run; folded it is a 3-D window 1x2x2 over
  (N*C, H, W) that does. The windows are the same, so the values are;
- a convolution in any layout (Reactant's, from Julia's WHCN arrays, has dimension numbers
  ``[b, f, 1, 0]x[0, 1, i, o]->[b, f, 1, 0]``; jax2onnx converts NCHW/OIHW/NCHW and a few
  others) is computed in the canonical layout (batch, feature, spatial 0, 1, ...) with its
  operands transposed to it and its result transposed back;
- the primitives of `faithful` take their faithful forms.

The bodies of other higher-order primitives (custom_vmap_call, ...) are left as they are; one
of `faithful`'s primitives there is refused by name (`unfaithful_in_bodies`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
from jax import lax
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

from ..backends.lax.evaluate import SCOPE_SEPARATOR
from ..errors import OnnxConversionError
from . import faithful

INLINED = frozenset(
    {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call"}
)
_FOLDABLE = frozenset({"reduce_window_max", "reduce_window_sum"})
#: Higher-order primitives whose bodies `evaluate` rewrites too.
_ENTERED = INLINED | {"while", "cond", "scan"}
#: onnxruntime's MaxPool/AveragePool/LpPool: at most three spatial axes.
_MAX_POOLED_AXES = 3


def _inner(eqn: Any) -> ClosedJaxpr | None:
    """The jaxpr an inlinable call eqn runs, or None."""
    if eqn.primitive.name not in INLINED:
        return None
    for key in ("jaxpr", "call_jaxpr"):
        inner = eqn.params.get(key)
        if isinstance(inner, ClosedJaxpr):
            return inner
        if isinstance(inner, Jaxpr):
            return ClosedJaxpr(inner, ())
    return None


def _fold_plan(params: dict[str, Any], rank: int) -> tuple[list[int], list[int]] | None:
    """(untouched axes, windowed axes) when folding the untouched ones lets the pool run."""
    untouched = [
        i
        for i in range(rank)
        if params["window_dimensions"][i] == 1
        and params["window_strides"][i] == 1
        and tuple(params["padding"][i]) == (0, 0)
        and params["base_dilation"][i] == 1
        and params["window_dilation"][i] == 1
    ]
    windowed = [i for i in range(rank) if i not in untouched]
    if rank <= _MAX_POOLED_AXES or len(untouched) < 2 or len(windowed) + 1 > _MAX_POOLED_AXES:
        return None
    return untouched, windowed


def _folded_window(eqn: Any, x: Any) -> Any:
    """The window of `eqn` on `x` with its untouched axes moved first and folded into one."""
    params = eqn.params
    plan = _fold_plan(params, x.ndim)
    if plan is None:
        return eqn.primitive.bind(x, **params)
    untouched, windowed = plan
    perm = untouched + windowed
    moved = lax.transpose(x, perm) if perm != sorted(perm) else x
    lead = [x.shape[i] for i in untouched]
    folded = lax.reshape(moved, (math.prod(lead), *(x.shape[i] for i in windowed)))

    def pick(key: str, fill: Any) -> tuple[Any, ...]:
        return (fill, *(params[key][i] for i in windowed))

    out = eqn.primitive.bind(
        folded,
        window_dimensions=pick("window_dimensions", 1),
        window_strides=pick("window_strides", 1),
        padding=pick("padding", (0, 0)),
        base_dilation=pick("base_dilation", 1),
        window_dilation=pick("window_dilation", 1),
    )
    out = lax.reshape(out, (*lead, *out.shape[1:]))
    inverse = [perm.index(i) for i in range(x.ndim)]
    return lax.transpose(out, inverse) if perm != sorted(perm) else out


def _canonical_conv(eqn: Any, lhs: Any, rhs: Any) -> Any:
    """The convolution of `eqn` computed in the layout (batch, feature, spatial...) for all
    three operands: lhs and rhs transposed to it, the result transposed back."""
    params = dict(eqn.params)
    dn = params["dimension_numbers"]
    canonical = tuple(range(lhs.ndim))
    specs = (tuple(dn.lhs_spec), tuple(dn.rhs_spec), tuple(dn.out_spec))
    if specs == (canonical,) * 3:
        return eqn.primitive.bind(lhs, rhs, **params)
    params["dimension_numbers"] = lax.ConvDimensionNumbers(canonical, canonical, canonical)
    lhs_spec, rhs_spec, out_spec = specs
    x, w = lax.transpose(lhs, lhs_spec), lax.transpose(rhs, rhs_spec)
    out = _conv3d_as_2d(x, w, params) if x.ndim == 5 else eqn.primitive.bind(x, w, **params)
    # out_spec[j] is the result's axis holding canonical axis j
    return lax.transpose(out, [out_spec.index(k) for k in range(out.ndim)])


def _conv3d_as_2d(x: Any, w: Any, params: dict[str, Any]) -> Any:
    """A canonical 3-D convolution (jax2onnx 0.17 converts 1-D and 2-D ones only) as the sum,
    over the kernel's first spatial axis, of 2-D convolutions of strided slices of the input,
    the output's first spatial axis folded into the batch."""
    strides, padding = params["window_strides"], params["padding"]
    lhs_dil, rhs_dil = params["lhs_dilation"], params["rhs_dilation"]
    if lhs_dil[0] != 1:
        raise OnnxConversionError(
            "a 3-D convolution with input dilation on its first spatial axis (a transposed "
            "3-D convolution) does not convert: jax2onnx converts 1-D and 2-D ones only; the "
            "model still runs in JAX (and exports with export_jax)",
            primitive="conv_general_dilated",
        )
    zero = lax.full((), 0, x.dtype)
    lo, hi = padding[0]
    x = lax.pad(x, zero, [(0, 0, 0), (0, 0, 0), (lo, hi, 0), (0, 0, 0), (0, 0, 0)])
    n, c, depth = x.shape[0], x.shape[1], x.shape[2]
    span = (w.shape[2] - 1) * rhs_dil[0] + 1
    out_depth = (depth - span) // strides[0] + 1
    total = None
    for k in range(w.shape[2]):
        start = k * rhs_dil[0]
        plane = lax.slice_in_dim(x, start, start + (out_depth - 1) * strides[0] + 1, strides[0], 2)
        plane = lax.reshape(lax.transpose(plane, (0, 2, 1, 3, 4)), (n * out_depth, c, *x.shape[3:]))
        y = lax.conv_general_dilated(
            plane,
            lax.index_in_dim(w, k, 2, keepdims=False),
            strides[1:],
            padding[1:],
            lhs_dil[1:],
            rhs_dil[1:],
            feature_group_count=params["feature_group_count"],
            precision=params["precision"],
            preferred_element_type=params["preferred_element_type"],
        )
        y = lax.transpose(lax.reshape(y, (n, out_depth, *y.shape[1:])), (0, 2, 1, 3, 4))
        total = y if total is None else lax.add(total, y)
    return total


def _while(eqn: Any, ins: list[Any]) -> list[Any]:
    p = eqn.params
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    cc, bc, init = ins[:nc], ins[nc : nc + nb], ins[nc + nb :]
    cond_jaxpr, body_jaxpr = p["cond_jaxpr"], p["body_jaxpr"]

    def cond(carry: Any) -> Any:
        return evaluate(cond_jaxpr, [*cc, *carry])[0]

    def body(carry: Any) -> Any:
        return tuple(evaluate(body_jaxpr, [*bc, *carry]))

    return list(lax.while_loop(cond, body, tuple(init)))


def _cond(eqn: Any, ins: list[Any]) -> list[Any]:
    def branch(closed: ClosedJaxpr) -> Any:
        return lambda *ops: tuple(evaluate(closed, ops))

    return list(lax.switch(ins[0], [branch(b) for b in eqn.params["branches"]], *ins[1:]))


def _scan(eqn: Any, ins: list[Any]) -> list[Any]:
    """The scan re-bound with its body rewritten (its parameters, which say how the
    operands split into consts, carry and xs, differ between jax versions, are kept)."""
    body = eqn.params["jaxpr"]
    rewritten = jax.make_jaxpr(lambda *a: evaluate(body, a))(*body.in_avals)
    return list(eqn.primitive.bind(*ins, **{**eqn.params, "jaxpr": rewritten}))


def apply(eqn: Any, ins: list[Any]) -> Any:
    """The value of one eqn of the program (not a call), rewritten as the module docstring
    says."""
    name = eqn.primitive.name
    if name == "while":
        return _while(eqn, ins)
    if name == "cond":
        return _cond(eqn, ins)
    if name == "scan":
        return _scan(eqn, ins)
    if name in _FOLDABLE:
        return _folded_window(eqn, ins[0])
    if name == "conv_general_dilated":
        return _canonical_conv(eqn, ins[0], ins[1])
    if faithful.needed(eqn):
        return faithful.rewrite(name, ins)
    return eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(eqn.params))


def evaluate(
    closed: ClosedJaxpr,
    args: Sequence[Any],
    on_step: Callable[[Any, list[Any], list[Any]], None] | None = None,
) -> list[Any]:
    """Evaluate `closed` on `args` with the rewrites of the module docstring; `on_step` sees
    each eqn with its inputs and outputs, in order (those of inlined calls, not the calls)."""
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, Literal) else env[v]

    jaxpr = closed.jaxpr
    for var, value in zip((*jaxpr.constvars, *jaxpr.invars), (*closed.consts, *args)):
        env[var] = value
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        inner = _inner(eqn)
        if inner is not None:
            outs = evaluate(inner, ins, on_step)
        else:
            outs = apply(eqn, ins)
            outs = list(outs) if eqn.primitive.multiple_results else [outs]
            if on_step is not None:
                on_step(eqn, ins, outs)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


# --- where a primitive came from --------------------------------------------------------------


def eqns(jaxpr: Jaxpr) -> Iterator[Any]:
    """Every eqn of `jaxpr` and of the jaxprs in its eqns' params, depth first."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in _subjaxprs(eqn):
            yield from eqns(sub)


def _subjaxprs(eqn: Any) -> Iterator[Jaxpr]:
    for value in eqn.params.values():
        for sub in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(sub, ClosedJaxpr):
                yield sub.jaxpr
            elif isinstance(sub, Jaxpr):
                yield sub


def scope_of(eqn: Any) -> str:
    """'OP at WHERE' of the module op whose lift emitted `eqn` (innermost), or ''."""
    scopes = [s for s in str(eqn.source_info.name_stack).split("/") if SCOPE_SEPARATOR in s]
    return scopes[-1].replace("\u2215", "/") if scopes else ""


def sources(closed: ClosedJaxpr, primitive: str) -> list[str]:
    """'OP at WHERE' of each module op whose lift emitted `primitive` (innermost scope), in
    order of first appearance; empty when the trace recorded none."""
    found: list[str] = []
    for eqn in eqns(closed.jaxpr):
        here = scope_of(eqn) if eqn.primitive.name == primitive else ""
        if here and here not in found:
            found.append(here)
    return found


def unfaithful_in_bodies(jaxpr: Jaxpr) -> Any | None:
    """The first eqn `faithful` rewrites inside a body `evaluate` does not enter
    (scan's, ...), whose ONNX form would compute something else; None if there is none."""
    for eqn in jaxpr.eqns:
        for sub in _subjaxprs(eqn):
            if eqn.primitive.name in _ENTERED:
                found = unfaithful_in_bodies(sub)
            else:
                found = next((e for e in eqns(sub) if faithful.needed(e)), None)
            if found is not None:
                return found
    return None
