"""CHLO ops (the `chlo` dialect of jaxlib's StableHLO; docs/generated/chlo.md there).

Each op maps to the `jax.lax` function of the same name. jax 0.10.2 lowers each to that CHLO op
(lax.erf -> chlo.erf, lax.top_k -> chlo.top_k ...), so XLA runs the same decomposition either
way; jax 0.12 lowers some to its own (lgamma, erfc, erf_inv, bessel_i1e; on the CPU of 0.12.1,
lgamma and digamma are calls of a jaxlib kernel), which agree with XLA's within the
differential tests' bounds except digamma at -0 (_digamma reads it as +0, as XLA does). The
broadcast_* ops broadcast their operands to the result shape first (numpy-style, or through
`broadcast_dimensions` for the lower-rank operand) and then apply the StableHLO op of the same
name, shared with elementwise.py. zeta, polygamma and next_after get the partial derivatives
JAX lacks where one exists, and a TransformError naming the op where none does.

Not lifted (program.py's UnsupportedOpError names them): chlo.scan (which has no StableHLO
decomposition, so XLA cannot run it either) and chlo._asin_acos_kernel (an internal step of
the asin/acos decompositions that frameworks never emit).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero
from jaxlib.mlir.dialects import chlo as chlo_dialect

from ....errors import TransformError
from ..registry import Impl, OpView, lifts
from .dot import precision_config
from .elementwise import (
    Fn,
    binary_fn,
    compare_of,
    constant_impl,
    is_complex,
    is_float,
    is_signed,
    is_unsigned,
)


@jax.custom_jvp
def _digamma(x: jax.Array) -> jax.Array:
    """lax.digamma with -0 read as +0, as XLA's chlo.digamma (what the xla backend runs) reads it
    on every jax: NaN at both zeros on jax 0.10.2, -inf on 0.12. jax 0.12.1 lowers lax.digamma
    to its own decomposition, not to chlo.digamma, and that gives +inf at -0 (the pole's other
    side); elsewhere the two agree (tests/lax/test_chlo.py)."""
    zero = lax.full_like(x, 0)
    return lax.digamma(lax.select(lax.eq(x, zero), zero, x))


@_digamma.defjvp
def _digamma_jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]) -> tuple[Any, Any]:
    # lax.digamma's own rule (d/dx digamma = polygamma(1, x)), kept through the select above,
    # which would otherwise give 0 at the zeros.
    (x,), (t,) = primals, tangents
    return _digamma(x), lax.mul(t, lax.polygamma(lax.full_like(x, 1), x))


_UNARY: dict[str, Fn] = {
    "chlo.acos": lax.acos,
    "chlo.acosh": lax.acosh,
    "chlo.asin": lax.asin,
    "chlo.asinh": lax.asinh,
    "chlo.atan": lax.atan,
    "chlo.atanh": lax.atanh,
    "chlo.bessel_i1e": lax.bessel_i1e,
    "chlo.cosh": lax.cosh,
    "chlo.digamma": _digamma,
    "chlo.erf": lax.erf,
    "chlo.erf_inv": lax.erf_inv,
    "chlo.erfc": lax.erfc,
    "chlo.lgamma": lax.lgamma,
    "chlo.sinh": lax.sinh,
    "chlo.square": lax.square,
    "chlo.tan": lax.tan,
}

#: The special functions are defined on real floats only.
_REAL_ONLY = frozenset(
    {"chlo.bessel_i1e", "chlo.digamma", "chlo.erf", "chlo.erf_inv", "chlo.erfc", "chlo.lgamma"}
)


def _float_operand(view: OpView) -> np.dtype:
    dtype = view.operand.dtype
    if not is_float(dtype):
        raise view.error(f"{view.name} takes floating-point operands, not {dtype.name}")
    return dtype


@lifts(*_UNARY)
def unary(view: OpView) -> Impl:
    """chlo.md#chloacos ... #chlotan: the lax function of the same name (same CHLO op)."""
    if view.name in _REAL_ONLY:
        _float_operand(view)
    fn = _UNARY[view.name]
    return lambda x: [fn(x)]


@lifts("chlo.conj")
def conj(view: OpView) -> Impl:
    """chlo.md#chloconj: (re, -im); a real operand is its own conjugate (lax.conj would make it
    complex)."""
    if is_complex(view.operand.dtype):
        return lambda x: [lax.conj(x)]
    return lambda x: [x]


@lifts("chlo.is_inf", "chlo.is_pos_inf", "chlo.is_neg_inf")
def is_inf(view: OpView) -> Impl:
    """chlo.md#chlois_inf etc.: x is +-inf / +inf / -inf (never, for types without infinity)."""
    dtype = _float_operand(view)
    with np.errstate(invalid="ignore", over="ignore"):
        inf = np.array(np.inf).astype(dtype)  # NaN for the f8 types that have no infinity
    if view.name == "chlo.is_inf":
        return lambda x: [lax.eq(lax.abs(x), inf)]
    target = inf if view.name == "chlo.is_pos_inf" else -inf
    return lambda x: [lax.eq(x, target)]


_BINARY: dict[str, Fn] = {
    "chlo.next_after": lax.nextafter,
    "chlo.polygamma": lax.polygamma,
    "chlo.zeta": lax.zeta,
}

#: Partial derivatives JAX lacks (None: none exists in closed form here). JAX defines zeta and
#: nextafter without any rule and refuses polygamma's order argument with a bare ValueError.
_PARTIALS: dict[str, tuple[Fn | None, Fn | None]] = {
    "chlo.next_after": (None, None),
    "chlo.polygamma": (None, lambda n, x: lax.polygamma(lax.add(n, lax.full_like(n, 1)), x)),
    "chlo.zeta": (
        None,
        lambda s, q: lax.neg(lax.mul(s, lax.zeta(lax.add(s, lax.full_like(s, 1)), q))),
    ),
}
_OPERAND_NAMES = {
    "chlo.next_after": ("x", "y"),
    "chlo.polygamma": ("n", "x"),
    "chlo.zeta": ("x", "q"),
}


def differentiable(view: OpView, name: str) -> Fn:
    """CHLO function `name` with the derivatives it has, and a TransformError naming the op
    and its line for the ones it has not (instead of JAX's bare NotImplementedError)."""
    fn = _BINARY[name]
    partials = _PARTIALS[name]

    @jax.custom_jvp
    def f(a: Any, b: Any) -> Any:
        return fn(a, b)

    def jvp(primals: tuple[Any, Any], tangents: tuple[Any, Any]) -> tuple[Any, Any]:
        out = fn(*primals)
        total = lax.full_like(out, 0)
        for k, (t, rule) in enumerate(zip(tangents, partials)):
            if isinstance(t, SymbolicZero):
                continue
            if rule is None:
                raise TransformError(
                    f"{view.name} at {view.where}: no derivative with respect to its operand "
                    f"{_OPERAND_NAMES[name][k]} is defined (JAX has none); differentiate with "
                    "respect to other inputs only, or stop the gradient there"
                )
            total = lax.add(total, lax.mul(rule(*primals), t))
        return out, total

    f.defjvp(jvp, symbolic_zeros=True)
    return f


@lifts(*_BINARY)
def special_binary(view: OpView) -> Impl:
    """chlo.md#chlonext_after, #chlopolygamma (n, x), #chlozeta (x, q): real floats."""
    _float_operand(view)
    fn = differentiable(view, view.name)
    return lambda x, y: [fn(x, y)]


@lifts("chlo.mulhi")
def mulhi(view: OpView) -> Impl:
    """chlo.md#chlomulhi: the high N bits of the 2N-bit product of two N-bit integers."""
    dtype = view.operand.dtype
    if not (is_signed(dtype) or is_unsigned(dtype)) or dtype.itemsize not in (1, 2, 4, 8):
        raise view.error(f"mulhi takes 8- to 64-bit integers, not {dtype.name}")
    if dtype.itemsize < 8:
        wide = np.dtype(f"{'i' if is_signed(dtype) else 'u'}{2 * dtype.itemsize}")
        shift = np.array(8 * dtype.itemsize, wide)

        def narrow(a: Any, b: Any) -> list[Any]:
            prod = lax.mul(lax.convert_element_type(a, wide), lax.convert_element_type(b, wide))
            return [lax.convert_element_type(lax.shift_right_arithmetic(prod, shift), dtype)]

        return narrow
    return lambda a, b: [_mulhi64(a, b, dtype)]


def _mulhi64(a: Any, b: Any, dtype: np.dtype) -> Any:
    """High 64 bits of a 128-bit product, from 32-bit halves (no 128-bit type to widen to)."""
    u64 = np.dtype(np.uint64)
    ua, ub = lax.bitcast_convert_type(a, u64), lax.bitcast_convert_type(b, u64)
    low, s32 = np.array(0xFFFFFFFF, u64), np.array(32, u64)
    a0, a1 = lax.bitwise_and(ua, low), lax.shift_right_logical(ua, s32)
    b0, b1 = lax.bitwise_and(ub, low), lax.shift_right_logical(ub, s32)
    p00, p01, p10, p11 = lax.mul(a0, b0), lax.mul(a0, b1), lax.mul(a1, b0), lax.mul(a1, b1)
    mid = lax.add(
        lax.add(lax.shift_right_logical(p00, s32), lax.bitwise_and(p01, low)),
        lax.bitwise_and(p10, low),
    )
    hi = lax.add(
        lax.add(p11, lax.shift_right_logical(p01, s32)),
        lax.add(lax.shift_right_logical(p10, s32), lax.shift_right_logical(mid, s32)),
    )
    if is_signed(dtype):
        # Two's complement: hi(a*b) = hi_unsigned(a, b) - (a < 0 ? b : 0) - (b < 0 ? a : 0).
        zero = np.zeros((), u64)
        neg_a, neg_b = lax.lt(a, np.zeros((), dtype)), lax.lt(b, np.zeros((), dtype))
        hi = lax.sub(hi, lax.select(neg_a, ub, lax.full_like(ub, zero)))
        hi = lax.sub(hi, lax.select(neg_b, ua, lax.full_like(ua, zero)))
    return lax.bitcast_convert_type(hi, dtype)


@lifts("chlo.top_k")
def top_k(view: OpView) -> Impl:
    """chlo.md#chlotop_k: the k largest along the last dimension, and their indices."""
    k = view.get_int("k")
    t = view.operand
    if t.rank == 0 or not 0 <= k <= t.shape[-1]:
        raise view.error(f"k = {k} for an operand of shape {list(t.shape)}")
    index_type = view.tensor(view.result_types[1], "the indices").dtype
    if not (is_signed(index_type) or is_unsigned(index_type)):
        raise view.error(f"indices of type {index_type.name}, expected an integer type")

    def impl(x: Any) -> list[Any]:
        values, indices = lax.top_k(x, k)
        return [values, lax.convert_element_type(indices, index_type)]

    return impl


@lifts("chlo.ragged_dot")
def ragged_dot(view: OpView) -> Impl:
    """chlo.md#chloragged_dot: a dot_general whose lhs ragged dimension is split into groups
    of `group_sizes` rows, each multiplied by its own rhs group (lax.ragged_dot_general)."""
    dn = view.get_typed("ragged_dot_dimension_numbers", chlo_dialect.RaggedDotDimensionNumbers)
    numbers = lax.RaggedDotDimensionNumbers(
        dot_dimension_numbers=(
            (tuple(dn.lhs_contracting_dimensions), tuple(dn.rhs_contracting_dimensions)),
            (tuple(dn.lhs_batching_dimensions), tuple(dn.rhs_batching_dimensions)),
        ),
        lhs_ragged_dimensions=tuple(dn.lhs_ragged_dimensions),
        rhs_group_dimensions=tuple(dn.rhs_group_dimensions),
    )
    precision = precision_config(view)  # (DEFAULT, DEFAULT) defers to JAX's setting, as dot's
    out = view.result.dtype

    def impl(lhs: Any, rhs: Any, group_sizes: Any) -> list[Any]:
        return [
            lax.ragged_dot_general(
                lhs,
                rhs,
                group_sizes,
                numbers,
                precision=precision,
                preferred_element_type=out,
            )
        ]

    return impl


@lifts("chlo.constant")
def constant(view: OpView) -> Impl:
    """chlo.md#chloconstant: as stablehlo.constant."""
    return constant_impl(view.get_dense("value", view.result))


_COMPLEX_NUMBER = re.compile(r"#complex\.number<:\w+\s+([^,>]+),\s*([^>]+)>")


@lifts("chlo.constant_like")
def constant_like(view: OpView) -> Impl:
    """chlo.md#chloconstant_like: a splat of the scalar `value` in the operand's shape."""
    t = view.result
    raw = str(view.raw("value"))
    m = _COMPLEX_NUMBER.search(raw)
    scalar: Any
    if m is not None:
        scalar = complex(float(m.group(1)), float(m.group(2)))
    elif t.dtype == np.bool_:
        scalar = raw.split(":")[0].strip() == "true"
    elif is_signed(t.dtype) or is_unsigned(t.dtype):
        scalar = view.get_int("value")
    else:
        scalar = view.get_float("value")
    make = constant_impl(np.broadcast_to(np.asarray(scalar).astype(t.dtype), t.shape))
    return lambda _: make()


# --- broadcasting binaries ----------------------------------------------------------------


def _dims_for(view: OpView, which: int, rank: int) -> tuple[int, ...]:
    """Result dimensions that operand `which` of rank `rank` maps to."""
    out_rank = view.result.rank
    explicit = view.get_ints("broadcast_dimensions", None)
    ranks = [view.tensor(t, f"operand {i}").rank for i, t in enumerate(view.operand_types)]
    small = 0 if ranks[0] <= ranks[1] else 1
    if explicit is not None and which == small:
        if len(explicit) != rank or len(set(explicit)) != rank:
            raise view.error(f"broadcast_dimensions {list(explicit)} for an operand of rank {rank}")
        if any(not 0 <= d < out_rank for d in explicit):
            raise view.error(f"broadcast_dimensions {list(explicit)} outside rank {out_rank}")
        return tuple(explicit)
    return tuple(range(out_rank - rank, out_rank))


def _to_result_shape(view: OpView, which: int, dims: Sequence[int]) -> Fn:
    """Broadcast operand `which` into the result shape along `dims` (size-1 dims expand)."""
    t = view.tensor(view.operand_types[which], f"operand {which}")
    shape = view.result.shape
    for i, d in enumerate(dims):
        if t.shape[i] not in (1, shape[d]):
            raise view.error(
                f"operand {which} of shape {list(t.shape)} does not broadcast to "
                f"{list(shape)} along dimensions {list(dims)}"
            )
    if t.shape == shape and list(dims) == list(range(len(shape))):
        return lambda x: x
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    increasing = tuple(dims[i] for i in order)
    perm = tuple(order)

    def expand(x: Any) -> Any:
        if perm != tuple(range(len(perm))):
            x = lax.transpose(x, perm)
        return lax.broadcast_in_dim(x, shape, increasing)

    return expand


def _broadcasts(view: OpView) -> list[Fn]:
    return [
        _to_result_shape(view, i, _dims_for(view, i, view.tensor(t).rank))
        for i, t in enumerate(view.operand_types)
    ]


#: chlo.broadcast_X applies stablehlo.X, or for these the CHLO function of the same name.
_BROADCAST_SPECIAL = {
    "chlo.broadcast_next_after": "chlo.next_after",
    "chlo.broadcast_polygamma": "chlo.polygamma",
    "chlo.broadcast_zeta": "chlo.zeta",
}
_BROADCAST_STABLEHLO = (
    "add",
    "and",
    "atan2",
    "complex",
    "divide",
    "maximum",
    "minimum",
    "multiply",
    "or",
    "power",
    "remainder",
    "shift_left",
    "shift_right_arithmetic",
    "shift_right_logical",
    "subtract",
    "xor",
)


@lifts(*(f"chlo.broadcast_{n}" for n in _BROADCAST_STABLEHLO), *_BROADCAST_SPECIAL)
def broadcast_binary(view: OpView) -> Impl:
    """chlo.md#chlobroadcast_add etc.: broadcast both operands, then the elementwise op."""
    dtype = view.operand.dtype
    if view.name in _BROADCAST_SPECIAL:
        if not is_float(dtype):
            raise view.error(f"{view.name} takes floating-point operands, not {dtype.name}")
        fn = differentiable(view, _BROADCAST_SPECIAL[view.name])
    else:
        fn = binary_fn(view, "stablehlo." + view.name[len("chlo.broadcast_") :], dtype)
    bx, by = _broadcasts(view)
    return lambda x, y: [fn(bx(x), by(y))]


@lifts("chlo.broadcast_compare")
def broadcast_compare(view: OpView) -> Impl:
    """chlo.md#chlobroadcast_compare: broadcast, then stablehlo.compare's semantics."""
    fn = compare_of(view)
    bx, by = _broadcasts(view)
    return lambda x, y: [fn(bx(x), by(y))]


@lifts("chlo.broadcast_select")
def broadcast_select(view: OpView) -> Impl:
    """chlo.md#chlobroadcast_select: numpy-style broadcasting of pred, on_true and on_false."""
    out_rank = view.result.rank
    fns = [
        _to_result_shape(view, i, tuple(range(out_rank - r, out_rank)))
        for i, r in enumerate(view.tensor(t).rank for t in view.operand_types)
    ]
    return lambda p, t, f: [lax.select(fns[0](p), fns[1](t), fns[2](f))]
