"""Elementwise StableHLO ops, constants and iota (spec.md sections named after each op).

Each op maps to the `jax.lax` function that lowers to that very StableHLO op, so edge cases
(integer division by zero, shifts past the bit width, NaN propagation in maximum, float->int
converts saturating) behave as XLA runs the original module. Where `jax.lax` refuses what
StableHLO defines, the spec's formula is written out: Boolean add/multiply/maximum/minimum
(logical or/and), integer power, real/imag of a real operand, compare TOTALORDER and the
lexicographic order of complex numbers, convert of complex to i1.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from ....support.jaxinternals import x64_scope
from ..registry import Impl, OpView, lifts

Fn = Callable[..., Any]


def is_float(dtype: np.dtype) -> bool:
    """Real floating point, including bf16 and the ml_dtypes narrow floats (numpy kind 'V')."""
    return bool(jnp.issubdtype(dtype, jnp.floating))


def is_complex(dtype: np.dtype) -> bool:
    """complex<f32> or complex<f64>."""
    return bool(jnp.issubdtype(dtype, jnp.complexfloating))


def real_dtype(dtype: np.dtype) -> np.dtype:
    """The component type of a complex type (f32 for complex<f32>)."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.complex64 else np.dtype(np.float64)


def is_signed(dtype: np.dtype) -> bool:
    """Signed integer (i2...i64)."""
    return bool(jnp.issubdtype(dtype, jnp.signedinteger))


def is_unsigned(dtype: np.dtype) -> bool:
    """Unsigned integer (ui2...ui64); i1 is not one."""
    return bool(jnp.issubdtype(dtype, jnp.unsignedinteger))


def _complex_trig(x: Any, cosine: bool) -> Any:
    """Complex sine/cosine as XLA's CPU code computes them, from exp(±imag) (JAX's own
    formula is more accurate for a small imaginary part, 0.1% apart at 2 - 1e-5i in f32,
    and differs in the signs of zero parts):
    sin(a+bi) = sin a (e^b + e^-b)/2 + i cos a (e^b - e^-b)/2,
    cos(a+bi) = cos a (e^b + e^-b)/2 + i sin a (e^-b - e^b)/2."""
    a, b = lax.real(x), lax.imag(x)
    up, down = lax.exp(b), lax.exp(lax.neg(b))
    half = np.array(0.5, np.dtype(a.dtype))
    cosh = lax.mul(lax.add(up, down), half)
    if cosine:
        return lax.complex(
            lax.mul(lax.cos(a), cosh), lax.mul(lax.sin(a), lax.mul(lax.sub(down, up), half))
        )
    return lax.complex(
        lax.mul(lax.sin(a), cosh), lax.mul(lax.cos(a), lax.mul(lax.sub(up, down), half))
    )


def _sin(x: Any) -> Any:
    return _complex_trig(x, False) if is_complex(x.dtype) else lax.sin(x)


def _cos(x: Any) -> Any:
    return _complex_trig(x, True) if is_complex(x.dtype) else lax.cos(x)


def _cbrt(x: Any) -> Any:
    """spec.md#cbrt; of a complex number the principal cube root, exp(log(z) / 3), which
    lax.cbrt does not compute (it accepts floats only)."""
    if not is_complex(x.dtype):
        return lax.cbrt(x)
    return lax.exp(lax.div(lax.log(x), np.array(3, x.dtype)))


_UNARY: dict[str, Fn] = {
    "stablehlo.abs": lax.abs,
    "stablehlo.cbrt": _cbrt,
    "stablehlo.ceil": lax.ceil,
    "stablehlo.cosine": _cos,
    "stablehlo.count_leading_zeros": lax.clz,
    "stablehlo.exponential": lax.exp,
    "stablehlo.exponential_minus_one": lax.expm1,
    "stablehlo.floor": lax.floor,
    "stablehlo.is_finite": lax.is_finite,
    "stablehlo.log": lax.log,
    "stablehlo.log_plus_one": lax.log1p,
    "stablehlo.logistic": lax.logistic,
    "stablehlo.negate": lax.neg,
    "stablehlo.not": lax.bitwise_not,
    "stablehlo.popcnt": lax.population_count,
    "stablehlo.round_nearest_afz": lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
    "stablehlo.round_nearest_even": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
    "stablehlo.rsqrt": lax.rsqrt,
    "stablehlo.sign": lax.sign,
    "stablehlo.sine": _sin,
    "stablehlo.sqrt": lax.sqrt,
    "stablehlo.tan": lax.tan,
    "stablehlo.tanh": lax.tanh,
}

BINARY: dict[str, Fn] = {
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

#: On i1, StableHLO's arithmetic is Boolean algebra (spec.md#add, #multiply, #maximum, #minimum);
#: and/or/xor take Booleans as they are. No other binary op is defined on i1.
_BOOLEAN: dict[str, Fn] = {
    "stablehlo.add": lax.bitwise_or,
    "stablehlo.maximum": lax.bitwise_or,
    "stablehlo.multiply": lax.bitwise_and,
    "stablehlo.minimum": lax.bitwise_and,
    "stablehlo.and": lax.bitwise_and,
    "stablehlo.or": lax.bitwise_or,
    "stablehlo.xor": lax.bitwise_xor,
}


@lifts(*_UNARY)
def unary(view: OpView) -> Impl:
    """One-operand elementwise ops (spec.md#abs ... #tanh: each the lax op of the same name)."""
    fn = _UNARY[view.name]
    refused = _refuses(view.name, view.operand.dtype)
    if refused is not None:
        raise view.error(
            f"JAX's {view.name[10:]} does not take {view.operand.dtype.name} ({refused})",
            hint="No backend computes it: XLA refuses the same element type",
        )
    return lambda x: [fn(x)]


@functools.cache
def _refuses(name: str, dtype: np.dtype) -> str | None:
    """Why the lax function of unary op `name` refuses `dtype` (once per pair, at load), or
    None when it takes it: JAX checks dtypes when it traces, which would be at the first call."""
    try:
        with x64_scope():  # as the call evaluates it (evaluate.py)
            jax.eval_shape(_UNARY[name], jax.ShapeDtypeStruct((), dtype))
    except TypeError as e:
        return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    return None


@lifts("stablehlo.real", "stablehlo.imag")
def real_imag(view: OpView) -> Impl:
    """spec.md#real, #imag: of a real operand, the operand itself and zeros (lax refuses it)."""
    if is_complex(view.operand.dtype):
        part = lax.real if view.name == "stablehlo.real" else lax.imag
        return lambda x: [part(x)]
    if view.name == "stablehlo.real":
        return lambda x: [x]
    return lambda x: [lax.full_like(x, 0)]


def binary_fn(view: OpView, name: str, dtype: np.dtype) -> Fn:
    """The function computing StableHLO binary op `name` on operands of `dtype`.

    Shared with the chlo.broadcast_* ops, which apply the same functions after broadcasting.
    """
    if dtype == np.bool_:
        if name not in _BOOLEAN:
            raise view.error(f"{name.split('.')[-1]} is not defined on i1")
        return _BOOLEAN[name]
    if is_signed(dtype) or is_unsigned(dtype):
        if name == "stablehlo.power":
            return lambda x, y: integer_power(x, y, dtype)
        if name in ("stablehlo.divide", "stablehlo.remainder"):
            return lambda x, y: integer_division(x, y, dtype, name == "stablehlo.remainder")
    return BINARY[name]


def integer_division(x: Any, y: Any, dtype: np.dtype, remainder: bool) -> Any:
    """Integer divide/remainder with XLA's values where the spec is silent: x / 0 = -1 (all
    bits set), x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0.

    The division itself never sees those operands: XLA's compiler dies of SIGFPE when it
    constant-folds an integer division by zero (both backends crashed on it), and the lifted
    module's constants are constants to XLA.
    """
    zero = lax.eq(y, np.zeros((), dtype))
    bad = zero
    if is_signed(dtype):
        smallest = np.array(np.iinfo(dtype).min, dtype)
        overflow = lax.bitwise_and(lax.eq(x, smallest), lax.eq(y, np.array(-1, dtype)))
        bad = lax.bitwise_or(zero, overflow)
    safe = lax.select(bad, lax.full_like(y, 1), y)
    if remainder:
        out = lax.select(zero, x, lax.rem(x, safe))
        return out if not is_signed(dtype) else lax.select(overflow, lax.full_like(x, 0), out)
    out = lax.select(zero, lax.full_like(x, -1), lax.div(x, safe))
    return out if not is_signed(dtype) else lax.select(overflow, x, out)


@lifts(*BINARY)
def binary(view: OpView) -> Impl:
    """Two-operand elementwise ops (operands of one shape; spec.md#add etc.)."""
    fn = binary_fn(view, view.name, view.operand.dtype)
    return lambda x, y: [fn(x, y)]


def integer_power(x: Any, y: Any, dtype: np.dtype) -> Any:
    """spec.md#power on integers: exact exponentiation modulo 2^bits (by squaring, over every
    bit of the exponent); a negative exponent gives 1/x**|y| truncated toward zero, i.e. 0
    except for bases 1 and -1. `lax.pow` accepts no integer base, hence the formula."""
    bits = int(jnp.iinfo(dtype).bits)
    one = np.array(1, dtype)
    signed = is_signed(dtype)
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
    """spec.md#clamp: min(max(x, lo), hi); lo and hi may be scalars broadcast to x.

    Complex operands use lax.max/min, which order lexicographically as the spec says (XLA's
    own clamp compares real parts only); on i1, max/min are or/and.
    """
    dtype = view.result.dtype

    def full(b: Any, x: Any) -> Any:
        # A scalar bound is broadcast before the op: lax.clamp's own derivative with respect
        # to a scalar bound selects between a scalar and a full-shape value, and JAX refuses
        # that ("select cases must have the same shapes").
        return lax.broadcast_in_dim(b, x.shape, ()) if b.ndim < x.ndim else b

    if dtype == np.bool_ or is_complex(dtype):
        hi_of, lo_of = (
            (lax.bitwise_and, lax.bitwise_or) if dtype == np.bool_ else (lax.min, lax.max)
        )

        def spelled_out(lo: Any, x: Any, hi: Any) -> list[Any]:
            return [hi_of(lo_of(x, full(lo, x)), full(hi, x))]

        return spelled_out
    return lambda lo, x, hi: [lax.clamp(full(lo, x), x, full(hi, x))]


@lifts("stablehlo.select")
def select(view: OpView) -> Impl:
    """spec.md#select: a scalar predicate picks a whole operand."""
    return lambda p, t, f: [lax.select(p, t, f)]


_COMPARE: dict[str, Fn] = {
    "EQ": lax.eq,
    "NE": lax.ne,
    "LT": lax.lt,
    "LE": lax.le,
    "GT": lax.gt,
    "GE": lax.ge,
}


def total_order_key(x: Any) -> Any:
    """Signed integers ordered like IEEE-754 totalOrder on the floats `x` (-NaN < -inf < ...
    < -0 < +0 < ... < inf < NaN), as XLA implements compare_type TOTALORDER: equal keys are
    equal bit patterns, so -0 != +0 and NaNs compare by payload."""
    width = np.dtype(f"i{np.dtype(x.dtype).itemsize}")
    bits = lax.bitcast_convert_type(x, width)
    # Negative floats have the sign bit set; flipping their other bits reverses their order.
    mask = np.array(np.iinfo(width).max, width)
    return lax.select(lax.lt(bits, np.array(0, width)), lax.bitwise_xor(bits, mask), bits)


def _complex_order(direction: str) -> Fn:
    """spec.md#compare on complex: lexicographic on (real, imag), each part compared as floats."""
    strict = {"LT": lax.lt, "LE": lax.lt, "GT": lax.gt, "GE": lax.gt}[direction]
    last = _COMPARE[direction]

    def cmp(a: Any, b: Any) -> Any:
        ra, rb = lax.real(a), lax.real(b)
        tie = lax.bitwise_and(lax.eq(ra, rb), last(lax.imag(a), lax.imag(b)))
        return lax.bitwise_or(strict(ra, rb), tie)

    return cmp


def _default_compare_type(dtype: np.dtype) -> str:
    if is_signed(dtype):
        return "SIGNED"
    if is_unsigned(dtype) or dtype == np.bool_:
        return "UNSIGNED"
    return "FLOAT"


def compare_fn(view: OpView, direction: str, kind: str, dtype: np.dtype) -> Fn:
    """The function of compare `direction` with `compare_type` `kind` ('' when absent).

    Shared with chlo.broadcast_compare. Refuses a compare_type the element type does not
    admit (spec.md#compare C3), as XLA's verifier does.
    """
    if direction not in _COMPARE:
        raise view.error(f"unknown comparison_direction {direction}")
    default = _default_compare_type(dtype)
    kind = kind or default
    if kind == "NOTYPE":
        kind = default
    allowed = {default, "TOTALORDER"} if is_float(dtype) else {default}
    if kind not in allowed:
        raise view.error(
            f"compare_type {kind} does not apply to {np.dtype(dtype).name} operands "
            f"(expected {' or '.join(sorted(allowed))})",
            hint="The module is not valid StableHLO (spec.md#compare C3); export it again",
        )
    fn = _COMPARE[direction]
    if kind == "TOTALORDER":
        if ml_dtypes.finfo(dtype).bits != 8 * np.dtype(dtype).itemsize:
            raise view.error(f"TOTALORDER on the sub-byte float type {np.dtype(dtype).name}")
        return lambda a, b: fn(total_order_key(a), total_order_key(b))
    if is_complex(dtype) and direction not in ("EQ", "NE"):
        return _complex_order(direction)
    return fn


def compare_of(view: OpView) -> Fn:
    """compare_fn for the op's comparison_direction and compare_type attributes."""
    direction = view.get_enum("comparison_direction")
    return compare_fn(view, direction, view.get_enum("compare_type", ""), view.operand.dtype)


@lifts("stablehlo.compare")
def compare(view: OpView) -> Impl:
    """spec.md#compare: every direction; FLOAT, TOTALORDER, SIGNED, UNSIGNED; complex order."""
    fn = compare_of(view)
    return lambda a, b: [fn(a, b)]


@lifts("stablehlo.convert")
def convert(view: OpView) -> Impl:
    """spec.md#convert: to i1 is x != 0; from complex to a real type takes the real part
    (also for i1); everything else is lax.convert_element_type, i.e. the same convert (float
    -> int truncates and saturates, NaN -> 0, as XLA does where the spec says TBD)."""
    src, dst = view.operand.dtype, view.result.dtype
    if src == dst:
        return lambda x: [x]
    impl = _convert(src, dst)
    if dst == np.bool_:
        return lambda x: impl(x) if isinstance(x, jax.core.Tracer) else [_nonzero(x)]
    return lambda x: impl(_unfolded(x))


def _nonzero(x: Any) -> np.ndarray:
    """A constant converted to i1, exactly: XLA folds such a convert at compile time, where
    a denormal is nonzero (true), while its CPU code at run time flushes it to zero."""
    a = np.asarray(x)
    return np.asarray((a.real if a.dtype.kind == "c" else a) != 0)


def _unfolded(x: Any) -> Any:
    """`x`, staged if it is a constant: JAX folds convert_element_type of a 0-d numpy
    constant with numpy's cast (float -> int wraps instead of saturating, NaN -> INT_MIN), so
    a convert of a constant would not be XLA's convert. The barrier keeps it an XLA op."""
    if isinstance(x, jax.core.Tracer):
        return x
    return lax.optimization_barrier(x)


def _convert(src: np.dtype, dst: np.dtype) -> Fn:
    """The convert from `src` to `dst` (different types)."""
    if is_complex(src) and not is_complex(dst):
        part = real_dtype(src)
        if dst == np.bool_:
            return lambda x: [lax.ne(lax.real(x), np.zeros((), part))]
        return lambda x: [lax.convert_element_type(lax.real(x), dst)]
    if dst == np.bool_:
        return lambda x: [lax.ne(x, np.zeros((), src))]
    return lambda x: [lax.convert_element_type(x, dst)]


@lifts("stablehlo.bitcast_convert")
def bitcast_convert(view: OpView) -> Impl:
    """spec.md#bitcast_convert: reinterpret bits; a width change adds/removes the last dim."""
    src, dst = view.operand.dtype, view.result.dtype
    if src == dst:
        return lambda x: [x]
    if np.bool_ in (src, dst) or is_complex(src) or is_complex(dst):
        # i1 has no defined bit layout (XLA computes an array of another shape: the module
        # checks refuse it, stablehlo/contracts.py), and complex <-> complex of another width
        # would split (re, im) pairs.
        raise view.error(
            f"bitcast_convert from {src.name} to {dst.name} has no defined layout",
            hint="No backend computes it: reinterpret the bits as an integer type instead",
        )
    return lambda x: [lax.bitcast_convert_type(x, dst)]


@lifts("stablehlo.reduce_precision")
def reduce_precision(view: OpView) -> Impl:
    """spec.md#reduce_precision: round to a float format with fewer exponent/mantissa bits."""
    e, m = view.get_int("exponent_bits"), view.get_int("mantissa_bits")
    if e < 1 or m < 0:
        raise view.error(f"exponent_bits = {e}, mantissa_bits = {m} (spec: e >= 1, m >= 0)")
    return lambda x: [lax.reduce_precision(x, exponent_bits=e, mantissa_bits=m)]


@lifts("stablehlo.constant")
def constant(view: OpView) -> Impl:
    """spec.md#constant: the value, decoded once at load time."""
    return constant_impl(view.get_dense("value", view.result))


def constant_impl(value: np.ndarray) -> Impl:
    """The implementation of a constant op of value `value`.

    A splat (one element viewed at every position, attrs.dense) becomes a broadcast of its
    element, so neither this process nor XLA ever holds its `size` copies as a constant.
    """
    if value.size > 1 and not any(value.strides):
        element = np.array(value.reshape(-1)[0], dtype=value.dtype)
        shape = value.shape
        return lambda: [lax.broadcast(element, shape)]
    return lambda: [value]


@lifts("stablehlo.iota")
def iota(view: OpView) -> Impl:
    """spec.md#iota: indices along `iota_dimension`, converted to the element type."""
    t = view.result
    dim = view.get_int("iota_dimension")
    if not 0 <= dim < t.rank:
        raise view.error(f"iota_dimension {dim} is outside rank {t.rank}")
    if is_complex(t.dtype):
        part = real_dtype(t.dtype)
        return lambda: [lax.convert_element_type(lax.broadcasted_iota(part, t.shape, dim), t.dtype)]
    return lambda: [lax.broadcasted_iota(t.dtype, t.shape, dim)]
