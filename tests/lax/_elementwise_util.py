"""Helpers shared by the lax tests of elementwise, CHLO and random ops: MLIR module text,
the three-oracle check, and numpy references written from the StableHLO spec."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from juliabridge.backends.lax.valtypes import ELEMENT_TYPES

from .oracles import assert_same, interpret, random_array, run_lax, run_xla

FLOATS = ("f16", "bf16", "f32", "f64")
SIGNED = ("i8", "i16", "i32", "i64")
UNSIGNED = ("ui8", "ui16", "ui32", "ui64")
INTS = SIGNED + UNSIGNED
COMPLEX = ("complex<f32>", "complex<f64>")
BOUNDARY = (*FLOATS, "i1", *INTS, *COMPLEX)
#: Narrow types that cannot cross @main: reached through a convert inside the module.
NARROW_FLOATS = (
    "f8E4M3FN",
    "f8E5M2",
    "f8E4M3FNUZ",
    "f8E5M2FNUZ",
    "f8E4M3B11FNUZ",
    "f8E3M4",
    "f8E4M3",
    "f8E8M0FNU",
    "f4E2M1FN",
)
#: (rtol, atol) per float type for ops with rounding (numpy computes in f64, XLA in f32+).
TOL = {
    "f16": (2e-3, 1e-4),
    "bf16": (1.6e-2, 1e-3),
    "f32": (1e-5, 1e-6),
    "f64": (1e-12, 1e-13),
    "complex<f32>": (1e-5, 1e-6),
    "complex<f64>": (1e-12, 1e-13),
}


def dt(t: str) -> np.dtype:
    """numpy dtype of an MLIR element type."""
    return ELEMENT_TYPES[t]


def module(ins: Sequence[str], body: Sequence[str], outs: Sequence[tuple[str, str]]) -> str:
    """@main(%a0: ins[0], ...) with `body` lines, returning the (value, type) pairs `outs`."""
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(ins))
    results = ", ".join(t for _, t in outs)
    lines = "\n".join(f"    {line}" for line in body)
    ret = ", ".join(v for v, _ in outs)
    return (
        f"module {{\n  func.func @main({args}) -> ({results}) {{\n{lines}\n"
        f"    return {ret} : {results}\n  }}\n}}"
    )


def check(
    text: str,
    args: Sequence[Any],
    expected: Sequence[Any] | None,
    names: Sequence[str],
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    interpreter: bool = True,
    xla: bool = True,
    eager: bool = False,
) -> list[np.ndarray]:
    """lax against XLA, the interpreter and `expected`, result by result; `eager` also
    compares the unjitted call with the jitted one (a second compilation, so only some tests
    ask for it)."""
    got = run_lax(text, args)
    assert len(got) == len(names)
    oracles: dict[str, Sequence[Any]] = {}
    if xla:
        oracles["xla"] = run_xla(text, args)
    if interpreter:
        oracles["the interpreter"] = interpret(text, args)
    if expected is not None:
        oracles["numpy"] = expected
    unjitted = run_lax(text, args, jit=False) if eager else None
    for k, name in enumerate(names):
        if unjitted is not None:
            assert_same([unjitted[k]], [got[k]], rtol=0, atol=0, what=f"{name}: eager vs jit")
        for oracle, want in oracles.items():
            assert_same([got[k]], [want[k]], rtol=rtol, atol=atol, what=f"{name}: lax vs {oracle}")
    return got


def bits(x: np.ndarray) -> np.ndarray:
    """The raw bit patterns (so -0.0 differs from +0.0 and NaN payloads count)."""
    x = np.asarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def specials(t: str, n: int = 24, seed: int = 0) -> np.ndarray:
    """`n` values of type `t`: random ones plus 0, -0, inf, -inf, NaN and extremes."""
    rng = np.random.default_rng(seed)
    x = random_array(rng, (n,), t)
    d = dt(t)
    if t in FLOATS:
        picks = [0.0, -0.0, np.inf, -np.inf, np.nan, 0.5, -0.5, 1.5, -2.5, 1e30, -1e-30, 3.0]
        with np.errstate(over="ignore"):
            x[: len(picks)] = np.array(picks).astype(d)
    elif t in INTS:
        info = np.iinfo(d)
        picks = [0, 1, -1, info.min, info.max, 2, -2, info.min + 1, 7]
        x[: len(picks)] = (
            np.array(picks, dtype=object).astype(d)
            if d.kind == "i"
            else [int(p) % (int(info.max) + 1) for p in picks]
        )
    return x


def cplx(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    """complex128 from parts, keeping signed zeros (re + 1j * im turns -0 into +0)."""
    out = np.empty(np.shape(re), np.complex128)
    out.real, out.imag = up(re), up(im)
    return out


def up(x: np.ndarray) -> np.ndarray:
    """To f64/complex128 for a numpy reference."""
    x = np.asarray(x)
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def wrap(values: list[int], d: np.dtype) -> np.ndarray:
    """Python ints reduced modulo 2^bits into `d` (two's complement for signed types)."""
    width = d.itemsize * 8
    return (
        np.array([v % (1 << width) for v in values], dtype=np.uint64)
        .astype(np.dtype(f"u{d.itemsize}"))
        .view(d)
    )


def int_ref(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer binary ops from the spec, with XLA's documented values where the spec is silent:
    x / 0 = -1 (all bits set), x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0; a shift by
    an amount that, read as unsigned, is at least the bit width gives 0 (left, logical) or the
    sign bit (arithmetic, which reads unsigned bits as two's complement too, as XLA does)."""
    d = a.dtype
    width = d.itemsize * 8
    xs, ys = a.tolist(), b.tolist()
    out: list[int] = []
    for x, y in zip(xs, ys):
        s = y % (1 << width)  # the shift amount as an unsigned number
        ux = x % (1 << width)
        if op == "divide":
            overflow = (x, y) == (-(1 << (width - 1)), -1)
            out.append(-1 if y == 0 else x if overflow else tdiv(x, y))
        elif op == "remainder":
            out.append(x if y == 0 else x - tdiv(x, y) * y)
        elif op == "shift_left":
            out.append(0 if s >= width else ux << s)
        elif op == "shift_right_logical":
            out.append(0 if s >= width else ux >> s)
        elif op == "shift_right_arithmetic":  # on the bits read as two's complement
            sx = ux - (1 << width) if ux >> (width - 1) else ux
            out.append((-1 if sx < 0 else 0) if s >= width else sx >> s)
        else:
            out.append(
                {
                    "add": x + y,
                    "subtract": x - y,
                    "multiply": x * y,
                    "maximum": max(x, y),
                    "minimum": min(x, y),
                    "and": x & y,
                    "or": x | y,
                    "xor": x ^ y,
                }[op]
            )
    return wrap(out, d)


def tdiv(x: int, y: int) -> int:
    """Integer division truncated toward zero, exactly."""
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


def total_order_key(v: Any) -> tuple[int, int, float]:
    """IEEE-754 totalOrder as a sort key: every negative (NaN included) below every positive;
    NaNs beyond the infinities, ordered by payload; -0 below +0."""
    v = np.asarray(v)
    neg = bool(np.signbit(v))
    s = -1 if neg else 1
    if np.isnan(v):
        payload = int(bits(v)) & ((1 << ml_dtypes.finfo(v.dtype).nmant) - 1)
        return (0 if neg else 1, s, s * payload)
    return (0 if neg else 1, 0, s * float(abs(v.astype(np.float64))))


def complex_parts(
    line: str, name: str, tt: str, pt: str, value: np.ndarray, part_dtype: np.dtype
) -> tuple[list[str], list[tuple[str, str]], list[str], list[np.ndarray]]:
    """Body lines, outputs, names and numpy references for an op whose complex result leaves
    @main as its real and imaginary parts (the interpreter's bindings cannot return complex
    values). `line` defines `%{name}`; `value` is the reference complex result."""
    body = [
        line,
        f"%re_{name} = stablehlo.real %{name} : ({tt}) -> {pt}",
        f"%im_{name} = stablehlo.imag %{name} : ({tt}) -> {pt}",
    ]
    outs = [(f"%re_{name}", pt), (f"%im_{name}", pt)]
    names = [f"real({name})", f"imag({name})"]
    want = [value.real.astype(part_dtype), value.imag.astype(part_dtype)]
    return body, outs, names, want
