"""Faithful forms of the primitives whose ONNX conversion computes something else.

jax2onnx maps each of these to the ONNX operator of the same name, which differs from
StableHLO's (and XLA's) values:

- ``round`` away from zero (StableHLO ``round_nearest_afz``): ONNX ``Round`` rounds half to
  even (0.5 -> 0, 2.5 -> 2);
- shifts on signed integers: ONNX ``BitShift`` takes unsigned integers only (onnxruntime
  refuses the graph), and a shift by the bit width or more is undefined there, where
  StableHLO gives 0 (or all sign bits, shifting right arithmetically);
- ``atan2``: jax2onnx composes it without the signs of zeros (atan2(-0, -0) = 0, not -pi);
- ``expm1`` and ``log1p``: computed as exp(x) - 1 and log(1 + x), which lose every digit for
  tiny x (1e-7 comes out 19% off in float32).

Each form here is written with lax primitives jax2onnx converts to ONNX operators that compute
exactly what they say (abs, floor, compare, select, casts, unsigned BitShift, exp, log, atan).
Integer power (a loop of multiplications and a shift) needs only the shift's form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

#: The primitives rewritten here (whatever their operands' type; see `rewrite`).
PRIMITIVES = frozenset(
    {
        "round",
        "shift_left",
        "shift_right_logical",
        "shift_right_arithmetic",
        "atan2",
        "expm1",
        "log1p",
    }
)


def _c(x: Any, value: float | int) -> Any:
    """`value` as a scalar of x's dtype, broadcast to x's shape."""
    return lax.full_like(x, value)


def _signbit(x: Any) -> Any:
    """x < 0, or x is -0 (1 / -0 = -inf)."""
    zero = _c(x, 0)
    minus_zero = lax.bitwise_and(lax.eq(x, zero), lax.lt(lax.div(_c(x, 1), x), zero))
    return lax.bitwise_or(lax.lt(x, zero), minus_zero)


def _sign_factor(x: Any) -> Any:
    """-1 where x's sign bit is set, else 1. A sign is put on a value by multiplying: where
    the value may be a zero, onnxruntime's Where (1.32, CPU) returns +0 for a -0 it picks
    from its true branch."""
    return lax.select(_signbit(x), _c(x, -1), _c(x, 1))


def round_half_away(x: Any) -> Any:
    """Round half away from zero. floor(|x|) and |x| - floor(|x|) are exact in floating
    point, so unlike floor(|x| + 0.5) (0.49999997 + 0.5 rounds up to 1 in float32) the
    half is compared exactly; the result has x's sign, a zero's too (-0.3 -> -0)."""
    a = lax.abs(x)
    f = lax.floor(a)
    m = lax.select(lax.ge(lax.sub(a, f), _c(x, 0.5)), lax.add(f, _c(x, 1)), f)
    return lax.mul(m, _sign_factor(x))


def _convert(x: Any, dtype: np.dtype) -> Any:
    """x as `dtype`, wrapping (two's complement) where it does not fit, as XLA's and
    onnxruntime's casts between integers do."""
    return x if np.dtype(x.dtype) == dtype else lax.convert_element_type(x, dtype)


def shift(name: str, x: Any, s: Any) -> Any:
    """StableHLO's shift `name` on integers of any signedness, through unsigned BitShifts by
    less than the bit width (spec.md#shift_left: a shift by the width or more gives 0, or
    all sign bits for shift_right_arithmetic). 8- and 16-bit operands are shifted as 32-bit
    ones (onnxruntime has no Where or Min for them), extended by zeros, or by their sign for
    shift_right_arithmetic, and truncated back: the bits past the width fall off as the spec
    says."""
    dtype = np.dtype(x.dtype)
    bits = np.iinfo(dtype).bits
    shape = max(np.shape(x), np.shape(s), key=len)  # lax takes a scalar for either operand
    x, s = (v if np.shape(v) == shape else lax.broadcast_in_dim(v, shape, ()) for v in (x, s))
    if bits < 32:
        signed_n, unsigned_n = np.dtype(f"int{bits}"), np.dtype(f"uint{bits}")
        amount = _convert(_convert(s, unsigned_n), np.dtype("uint32"))
        if name == "shift_right_arithmetic":
            wide = _convert(_convert(x, signed_n), np.dtype("int32"))
            amount = _convert(amount, np.dtype("int32"))
        else:
            wide = _convert(_convert(x, unsigned_n), np.dtype("uint32"))
        out = shift(name, wide, amount)
        narrow = signed_n if np.dtype(wide.dtype).kind == "i" else unsigned_n
        return _convert(_convert(out, narrow), dtype)
    # BitShift on the unsigned bits; every select on the signed ones (onnxruntime has no
    # Where for unsigned integers)
    u, i = np.dtype(f"uint{bits}"), np.dtype(f"int{bits}")
    xu, su = _convert(x, u), _convert(s, u)
    big = lax.ge(su, _c(su, bits))
    amount = _convert(lax.select(big, _c(x, bits - 1).astype(i), _convert(s, i)), u)
    if name == "shift_left":
        out = lax.select(big, _c(x, 0).astype(i), _convert(lax.shift_left(xu, amount), i))
    elif name == "shift_right_logical":
        logical = _convert(lax.shift_right_logical(xu, amount), i)
        out = lax.select(big, _c(x, 0).astype(i), logical)
    else:  # arithmetic: a set top bit is shifted in; by bits - 1 every bit is the sign
        negative = lax.lt(_convert(x, i), _c(x, 0).astype(i))
        flipped = lax.bitwise_not(lax.shift_right_logical(lax.bitwise_not(xu), amount))
        logical = lax.shift_right_logical(xu, amount)
        out = lax.select(negative, _convert(flipped, i), _convert(logical, i))
    return _convert(out, dtype)


def atan2(y: Any, x: Any) -> Any:
    """atan2 from atan(|y| / |x|) in [0, pi/2], reflected by the signs (of zeros too), with
    C's values where that quotient is 0/0 or inf/inf."""
    ax, ay = lax.abs(x), lax.abs(y)
    inf = _c(x, np.inf)
    base = lax.atan(lax.div(ay, ax))
    base = lax.select(lax.bitwise_and(lax.eq(ax, inf), lax.eq(ay, inf)), _c(x, np.pi / 4), base)
    zeros = lax.bitwise_and(lax.eq(ax, _c(x, 0)), lax.eq(ay, _c(x, 0)))
    base = lax.select(zeros, _c(x, 0), base)
    base = lax.select(_signbit(x), lax.sub(_c(x, np.pi), base), base)
    return lax.mul(base, _sign_factor(y))


def log1p(x: Any) -> Any:
    """log(u) * x / (u - 1) with u = 1 + x: the rounding of u cancels (Goldberg, "What every
    computer scientist should know about floating-point arithmetic", thm. 4)."""
    u = lax.add(_c(x, 1), x)
    d = lax.sub(u, _c(x, 1))
    out = lax.mul(lax.log(u), lax.div(x, d))
    out = lax.select(lax.ne(d, _c(x, 0)), out, x)
    return lax.select(lax.eq(u, _c(x, np.inf)), u, out)


def expm1(x: Any) -> Any:
    """(u - 1) * x / log(u) with u = exp(x): the same cancellation (Kahan's expm1)."""
    u = lax.exp(x)
    d = lax.sub(u, _c(x, 1))
    out = lax.mul(d, lax.div(x, lax.log(u)))
    out = lax.select(lax.eq(d, _c(x, -1)), d, out)
    out = lax.select(lax.ne(u, _c(x, 1)), out, x)
    return lax.select(lax.eq(u, _c(x, np.inf)), u, out)


def needed(eqn: Any) -> bool:
    """Whether `eqn`'s own conversion computes something else (round half to even, complex
    values and the other primitives convert faithfully)."""
    name = eqn.primitive.name
    if name not in PRIMITIVES:
        return False
    dtype = np.dtype(eqn.invars[0].aval.dtype)
    if name == "round":
        method = eqn.params.get("rounding_method")
        even = method is not None and int(method) == int(lax.RoundingMethod.TO_NEAREST_EVEN)
        return not even and jnp.issubdtype(dtype, jnp.floating)
    if name.startswith("shift_"):
        return dtype.kind in "iu"
    return jnp.issubdtype(dtype, jnp.floating)


def rewrite(name: str, ins: list[Any]) -> Any:
    """The faithful value of primitive `name` (one `needed` says) on `ins`."""
    forms: dict[str, Callable[[], Any]] = {
        "round": lambda: round_half_away(ins[0]),
        "atan2": lambda: atan2(ins[0], ins[1]),
        "expm1": lambda: expm1(ins[0]),
        "log1p": lambda: log1p(ins[0]),
    }
    return forms[name]() if name in forms else shift(name, ins[0], ins[1])


__all__ = [
    "PRIMITIVES", "atan2", "expm1", "log1p", "needed", "rewrite", "round_half_away", "shift",
]  # fmt: skip
