"""Elementwise StableHLO ops, constants and iota (spec.md sections named after each op).

Each op maps to the `jax.lax` function that lowers to that very StableHLO op, so edge cases
(integer division by zero, shifts past the bit width, NaN propagation in maximum) behave as
XLA runs the original module. Booleans are the exception: StableHLO defines add/multiply/
maximum/minimum on i1 as logical or/and, which `jax.lax` does not accept, so they are spelled out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from jax import lax

from ..registry import Impl, OpView, lifts

_UNARY: dict[str, Callable[[Any], Any]] = {
    "stablehlo.abs": lax.abs,
    "stablehlo.cbrt": lax.cbrt,
    "stablehlo.ceil": lax.ceil,
    "stablehlo.cosine": lax.cos,
    "stablehlo.count_leading_zeros": lax.clz,
    "stablehlo.exponential": lax.exp,
    "stablehlo.exponential_minus_one": lax.expm1,
    "stablehlo.floor": lax.floor,
    "stablehlo.imag": lax.imag,
    "stablehlo.is_finite": lax.is_finite,
    "stablehlo.log": lax.log,
    "stablehlo.log_plus_one": lax.log1p,
    "stablehlo.logistic": lax.logistic,
    "stablehlo.negate": lax.neg,
    "stablehlo.not": lax.bitwise_not,
    "stablehlo.popcnt": lax.population_count,
    "stablehlo.real": lax.real,
    "stablehlo.round_nearest_afz": lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
    "stablehlo.round_nearest_even": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
    "stablehlo.rsqrt": lax.rsqrt,
    "stablehlo.sign": lax.sign,
    "stablehlo.sine": lax.sin,
    "stablehlo.sqrt": lax.sqrt,
    "stablehlo.tan": lax.tan,
    "stablehlo.tanh": lax.tanh,
}

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "stablehlo.add": lax.add,
    "stablehlo.atan2": lax.atan2,
    "stablehlo.complex": lax.complex,
    "stablehlo.divide": lax.div,
    "stablehlo.maximum": lax.max,
    "stablehlo.minimum": lax.min,
    "stablehlo.multiply": lax.mul,
    "stablehlo.power": lax.pow,
    "stablehlo.remainder": lax.rem,
    "stablehlo.subtract": lax.sub,
    "stablehlo.and": lax.bitwise_and,
    "stablehlo.or": lax.bitwise_or,
    "stablehlo.xor": lax.bitwise_xor,
    "stablehlo.shift_left": lax.shift_left,
    "stablehlo.shift_right_arithmetic": lax.shift_right_arithmetic,
    "stablehlo.shift_right_logical": lax.shift_right_logical,
}

#: On i1, StableHLO's arithmetic is Boolean algebra (spec.md#add, #multiply, #maximum, #minimum).
_BOOLEAN: dict[str, Callable[[Any, Any], Any]] = {
    "stablehlo.add": lax.bitwise_or,
    "stablehlo.maximum": lax.bitwise_or,
    "stablehlo.multiply": lax.bitwise_and,
    "stablehlo.minimum": lax.bitwise_and,
}


@lifts(*_UNARY)
def unary(view: OpView) -> Impl:
    """One-operand elementwise ops."""
    fn = _UNARY[view.name]
    return lambda x: [fn(x)]


@lifts(*_BINARY)
def binary(view: OpView) -> Impl:
    """Two-operand elementwise ops (operands of one shape; spec.md#add etc.)."""
    fn = _BINARY[view.name]
    if view.operand.dtype == np.bool_ and view.name in _BOOLEAN:
        fn = _BOOLEAN[view.name]
    elif view.operand.dtype == np.bool_ and view.name == "stablehlo.subtract":
        raise view.error("subtract is not defined on i1")
    if view.name == "stablehlo.power" and view.operand.dtype.kind in "iu":
        return lambda x, y: [_integer_power(x, y, view.operand.dtype)]
    return lambda x, y: [fn(x, y)]


def _integer_power(x: Any, y: Any, dtype: np.dtype) -> Any:
    """spec.md#power on integers: repeated multiplication; negative exponents give 0 except
    for bases 1 and -1 (the result of exact division 1 / x**|y| truncated toward zero)."""
    bits = dtype.itemsize * 8
    one = np.array(1, dtype)
    signed = dtype.kind == "i"
    e = lax.abs(y) if signed else y

    def body(_: int, carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        acc, base, k = carry
        bit = lax.ne(lax.bitwise_and(k, one), np.array(0, dtype))
        acc = lax.select(bit, lax.mul(acc, base), acc)
        return acc, lax.mul(base, base), lax.shift_right_logical(k, one)

    acc, _, _ = lax.fori_loop(0, bits, body, (lax.full_like(x, 1), x, e))
    if not signed:
        return acc
    odd = lax.eq(lax.bitwise_and(e, one), one)
    minus_one = lax.select(odd, lax.full_like(x, -1), lax.full_like(x, 1))
    inv = lax.select(
        lax.eq(x, one),
        lax.full_like(x, 1),
        lax.select(lax.eq(x, np.array(-1, dtype)), minus_one, lax.full_like(x, 0)),
    )
    return lax.select(lax.lt(y, np.array(0, dtype)), inv, acc)


@lifts("stablehlo.clamp")
def clamp(view: OpView) -> Impl:
    """spec.md#clamp: min and max may be scalars broadcast to the operand."""
    return lambda lo, x, hi: [lax.clamp(lo, x, hi)]


@lifts("stablehlo.select")
def select(view: OpView) -> Impl:
    """spec.md#select: a scalar predicate picks a whole operand."""
    return lambda p, t, f: [lax.select(p, t, f)]


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "EQ": lax.eq,
    "NE": lax.ne,
    "LT": lax.lt,
    "LE": lax.le,
    "GT": lax.gt,
    "GE": lax.ge,
}


def total_order_key(x: Any) -> Any:
    """Signed integers ordered like IEEE totalOrder on the floats `x` (-NaN < -inf < ... <
    -0 < +0 < ... < inf < NaN), as spec.md#compare defines for compare_type TOTALORDER."""
    dtype = np.dtype(x.dtype)
    width = np.dtype(f"i{dtype.itemsize}")
    bits = lax.bitcast_convert_type(x, width)
    # Negative floats have the sign bit set; flipping their other bits reverses their order.
    mask = np.array(np.iinfo(width).max, width)
    return lax.select(lax.lt(bits, np.array(0, width)), lax.bitwise_xor(bits, mask), bits)


@lifts("stablehlo.compare")
def compare(view: OpView) -> Impl:
    """spec.md#compare, including compare_type TOTALORDER for floats."""
    direction = view.get_enum("comparison_direction")
    if direction not in _COMPARE:
        raise view.error(f"unknown comparison_direction {direction}")
    fn = _COMPARE[direction]
    kind = view.get_enum("compare_type", "")
    dtype = view.operand.dtype
    if kind == "TOTALORDER" and dtype.kind == "f":
        return lambda a, b: [fn(total_order_key(a), total_order_key(b))]
    if dtype.kind == "c" and direction not in ("EQ", "NE"):
        raise view.error(f"{direction} is not defined on complex numbers")
    return lambda a, b: [fn(a, b)]


@lifts("stablehlo.convert")
def convert(view: OpView) -> Impl:
    """spec.md#convert: to the result's element type (to i1: x != 0, from complex: real part)."""
    src, dst = view.operand.dtype, view.result.dtype
    if src == dst:
        return lambda x: [x]
    if dst == np.bool_:
        zero = np.zeros((), src)
        return lambda x: [lax.ne(x, zero)]
    if src.kind == "c" and dst.kind != "c":
        return lambda x: [lax.convert_element_type(lax.real(x), dst)]
    return lambda x: [lax.convert_element_type(x, dst)]


@lifts("stablehlo.bitcast_convert")
def bitcast_convert(view: OpView) -> Impl:
    """spec.md#bitcast_convert: reinterpret bits; a width change adds/removes the last dim."""
    dst = view.result.dtype
    src = view.operand.dtype
    if src == np.bool_ or dst == np.bool_:
        raise view.error("bitcast_convert to or from i1 has no defined bit layout")
    return lambda x: [lax.bitcast_convert_type(x, dst)]


@lifts("stablehlo.reduce_precision")
def reduce_precision(view: OpView) -> Impl:
    """spec.md#reduce_precision: round to a float format with fewer exponent/mantissa bits."""
    e, m = view.get_int("exponent_bits"), view.get_int("mantissa_bits")
    return lambda x: [lax.reduce_precision(x, exponent_bits=e, mantissa_bits=m)]


@lifts("stablehlo.constant")
def constant(view: OpView) -> Impl:
    """spec.md#constant: the value, decoded once at load time."""
    value = view.get_dense("value", view.result)
    return lambda: [value]


@lifts("stablehlo.iota")
def iota(view: OpView) -> Impl:
    """spec.md#iota: indices along `iota_dimension`, converted to the element type."""
    t = view.result
    dim = view.get_int("iota_dimension")
    if not 0 <= dim < max(t.rank, 1):
        raise view.error(f"iota_dimension {dim} is outside rank {t.rank}")
    if t.dtype == np.bool_:
        return lambda: [lax.ne(lax.broadcasted_iota(np.int8, t.shape, dim), np.int8(0))]
    if t.dtype.kind == "c":
        real = np.float32 if t.dtype == np.complex64 else np.float64
        return lambda: [lax.convert_element_type(lax.broadcasted_iota(real, t.shape, dim), t.dtype)]
    return lambda: [lax.broadcasted_iota(t.dtype, t.shape, dim)]
