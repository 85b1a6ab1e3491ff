"""Pinned: the lax backend's framework and its elementwise ops, against numpy and the spec.

Modules are written by hand (StableHLO spec semantics, expected values from numpy or listed
literally). The framework itself (registry, program, evaluation, attribute decoding, the
reverse-mode marker) is reached the way an op family reaches it: through a lift rule registered
for a test-only op name, loaded with trust=True.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import juliabridge
from juliabridge import TransformError, UnsupportedModuleError, UnsupportedOpError
from juliabridge.backends.lax import RULES
from juliabridge.backends.lax.differentiation import reverse_unavailable
from juliabridge.backends.lax.registry import TOKEN, OpView, Rule, lifts
from juliabridge.backends.lax.valtypes import TensorType

F = np.float32


def run(text: str, *args: Any, trust: bool = False, jit: bool = False) -> list[np.ndarray]:
    fn = juliabridge.load_mlir(text, backend="lax", trust=trust)
    out = (jax.jit(fn) if jit else fn)(*args)
    return [np.asarray(o) for o in out]


def const_module(body: str, mlir_type: str) -> str:
    return f"""module {{
  func.func @main() -> {mlir_type} {{
    %0 = stablehlo.constant {body} : {mlir_type}
    return %0 : {mlir_type}
  }}
}}"""


# --- constants (attrs.dense) --------------------------------------------------------------------

LITERALS = [
    ("dense<[1.5, -2.0, 3.25]>", "tensor<3xf32>", np.array([1.5, -2.0, 3.25], F)),
    ("dense<[1.5, -2.0, 3.25]>", "tensor<3xf16>", np.array([1.5, -2.0, 3.25], np.float16)),
    (
        "dense<[1.5, -2.0, 3.25]>",
        "tensor<3xbf16>",
        np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16),
    ),
    ("dense<[true, false, true]>", "tensor<3xi1>", np.array([True, False, True])),
    ("dense<[-128, 0, 127]>", "tensor<3xi8>", np.array([-128, 0, 127], np.int8)),
    ("dense<[-5, 0, 32767]>", "tensor<3xi16>", np.array([-5, 0, 32767], np.int16)),
    ("dense<[-7, 8, 2147483647]>", "tensor<3xi32>", np.array([-7, 8, 2147483647], np.int32)),
    ("dense<[0, 200, 255]>", "tensor<3xui8>", np.array([0, 200, 255], np.uint8)),
    ("dense<[0, 40000, 65535]>", "tensor<3xui16>", np.array([0, 40000, 65535], np.uint16)),
    (
        "dense<[0, 3000000000, 4294967295]>",
        "tensor<3xui32>",
        np.array([0, 3000000000, 4294967295], np.uint32),
    ),
    ("dense<7>", "tensor<2x2xi32>", np.full((2, 2), 7, np.int32)),
    ("dense<2.5>", "tensor<3xbf16>", np.full(3, 2.5, ml_dtypes.bfloat16)),
    ("dense<true>", "tensor<2xi1>", np.ones(2, bool)),
    ("dense<4.0>", "tensor<f32>", np.array(4.0, F)),
    (
        "dense<[(1.0, -2.0), (0.5, 3.0)]>",
        "tensor<2xcomplex<f32>>",
        np.array([1 - 2j, 0.5 + 3j], np.complex64),
    ),
    ("dense<(1.5, 2.5)>", "tensor<2xcomplex<f32>>", np.full(2, 1.5 + 2.5j, np.complex64)),
    (
        "dense<[0x7F800000, 0xFF800000, -0.0]>",
        "tensor<3xf32>",
        np.array([np.inf, -np.inf, -0.0], F),
    ),
    ("dense<[0x7C00, 0x3C00]>", "tensor<2xf16>", np.array([np.inf, 1.0], np.float16)),
    ("dense<[0x7F80, 0xBF80]>", "tensor<2xbf16>", np.array([np.inf, -1.0], ml_dtypes.bfloat16)),
    (
        "dense<[[1, 2, 3], [4, 5, 6]]>",
        "tensor<2x3xi8>",
        np.arange(1, 7, dtype=np.int8).reshape(2, 3),
    ),
    ("dense<[1.0e-3, 2.5E+2, 0.5]>", "tensor<3xf32>", np.array([1e-3, 250.0, 0.5], F)),
]


@pytest.mark.parametrize(("body", "mlir_type", "want"), LITERALS, ids=lambda v: str(v)[:24])
def test_literal_constants(body: str, mlir_type: str, want: np.ndarray) -> None:
    (got,) = run(const_module(body, mlir_type))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(
        np.atleast_1d(got).view(np.uint8), np.atleast_1d(want).view(np.uint8)
    )


def test_a_nan_bit_pattern_constant_keeps_its_payload() -> None:
    (got,) = run(const_module("dense<[0x7FC00001, 0xFFC00000]>", "tensor<2xf32>"))
    assert got.view(np.uint32).tolist() == [0x7FC00001, 0xFFC00000]


def _hex(a: np.ndarray) -> str:
    return '"0x' + a.tobytes().hex().upper() + '"'


@pytest.mark.parametrize(
    "want",
    [
        np.arange(12, dtype=F).reshape(3, 4) / 7,
        (np.arange(10) * 1000 - 3000).astype(np.int32),
        (np.arange(10) % 3 == 0),
        np.arange(6).astype(ml_dtypes.bfloat16),
        np.arange(6).astype(np.complex64) * (1 + 2j),
        np.arange(9, dtype=np.uint16) * 7000,
    ],
    ids=["f32", "i32", "i1", "bf16", "c64", "ui16"],
)
def test_hex_blob_constants(want: np.ndarray) -> None:
    shape = "x".join(map(str, want.shape))
    name = {
        np.dtype(F): "f32",
        np.dtype(np.int32): "i32",
        np.dtype(bool): "i1",
        np.dtype(ml_dtypes.bfloat16): "bf16",
        np.dtype(np.complex64): "complex<f32>",
        np.dtype(np.uint16): "ui16",
    }[want.dtype]
    raw = want.astype(np.uint8) if want.dtype == bool else want
    (got,) = run(const_module(f"dense<{_hex(raw)}>", f"tensor<{shape}x{name}>"))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(
        np.atleast_1d(got).view(np.uint8), np.atleast_1d(want).view(np.uint8)
    )


def test_a_hex_splat_fills_the_tensor() -> None:
    (got,) = run(const_module(f"dense<{_hex(np.array([2.5], F))}>", "tensor<2x3xf32>"))
    np.testing.assert_array_equal(got, np.full((2, 3), 2.5, F))


def test_dense_resource_constants_read_the_blob() -> None:
    values = np.array([1.0, -2.0, 0.25], F)
    blob = "0x04000000" + values.tobytes().hex().upper()  # 4-byte alignment header, then data
    text = (
        const_module("dense_resource<w0>", "tensor<3xf32>")
        + f'\n{{-#\n  dialect_resources: {{\n    builtin: {{\n      w0: "{blob}"\n    }}\n  }}\n#-}}\n'
    )
    (got,) = run(text)
    np.testing.assert_array_equal(got, values)


def test_large_constants_as_jax_prints_them() -> None:
    want = (np.arange(64, dtype=F) - 31.5) / 3
    text = str(jax.jit(lambda: jnp.asarray(want)).lower().as_text())
    (got,) = run(text)
    np.testing.assert_array_equal(got, want)


# --- iota ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("elem", ["i32", "f32", "ui8", "complex<f32>", "bf16"])
def test_iota(dim: int, elem: str) -> None:
    t = f"tensor<2x3x{elem}>"
    text = f"""module {{
  func.func @main() -> {t} {{
    %0 = stablehlo.iota dim = {dim} : {t}
    return %0 : {t}
  }}
}}"""
    (got,) = run(text)
    idx = np.indices((2, 3))[dim]
    dtype = {
        "i32": np.int32,
        "f32": F,
        "ui8": np.uint8,
        "i1": bool,
        "complex<f32>": np.complex64,
        "bf16": ml_dtypes.bfloat16,
    }[elem]
    want = (idx != 0) if elem == "i1" else idx.astype(dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


# --- compare ------------------------------------------------------------------------------------


def binary_module(op: str, elem: str, n: int, *, attrs: str = "", result: str | None = None) -> str:
    t = f"tensor<{n}x{elem}>"
    r = result or t
    return f"""module {{
  func.func @main(%a: {t}, %b: {t}) -> {r} {{
    %0 = {op} %a, %b{attrs} : ({t}, {t}) -> {r}
    return %0 : {r}
  }}
}}"""


def compare_module(direction: str, elem: str, n: int, kind: str = "") -> str:
    t = f"tensor<{n}x{elem}>"
    r = f"tensor<{n}xi1>"
    suffix = f", {kind}" if kind else ""
    return f"""module {{
  func.func @main(%a: {t}, %b: {t}) -> {r} {{
    %0 = stablehlo.compare {direction}, %a, %b{suffix} : ({t}, {t}) -> {r}
    return %0 : {r}
  }}
}}"""


PY_COMPARE = {
    "EQ": lambda a, b: a == b,
    "NE": lambda a, b: a != b,
    "LT": lambda a, b: a < b,
    "LE": lambda a, b: a <= b,
    "GT": lambda a, b: a > b,
    "GE": lambda a, b: a >= b,
}


@pytest.mark.parametrize("direction", list(PY_COMPARE))
@pytest.mark.parametrize("elem", ["i32", "f32", "ui8"])
def test_compare_directions(direction: str, elem: str) -> None:
    dtype = {"i32": np.int32, "f32": F, "ui8": np.uint8}[elem]
    a = np.array([0, 1, 2, 3, 200], dtype)
    b = np.array([1, 1, 1, 4, 100], dtype)
    (got,) = run(compare_module(direction, elem, 5), a, b)
    np.testing.assert_array_equal(got, PY_COMPARE[direction](a, b))


#: IEEE 754 totalOrder from smallest to largest (spec.md#compare, compare_type TOTALORDER).
TOTAL = np.array(
    [
        np.uint32(0xFFC00000).view(F),  # -NaN
        -np.inf,
        -1.5,
        np.uint32(0x80000001).view(F),  # the negative subnormal closest to 0
        -0.0,
        0.0,
        np.uint32(0x00000001).view(F),
        2.0,
        np.inf,
        np.uint32(0x7FC00000).view(F),  # +NaN
    ],
    F,
)


@pytest.mark.parametrize("direction", list(PY_COMPARE))
def test_total_order_compare(direction: str) -> None:
    n = len(TOTAL)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    a, b = TOTAL[i.ravel()], TOTAL[j.ravel()]
    (got,) = run(compare_module(direction, "f32", n * n, "TOTALORDER"), a, b)
    np.testing.assert_array_equal(got, PY_COMPARE[direction](i.ravel(), j.ravel()))


def test_float_compare_without_total_order_follows_ieee() -> None:
    a = np.array([np.nan, -0.0, 1.0], F)
    b = np.array([np.nan, 0.0, np.nan], F)
    (eq,) = run(compare_module("EQ", "f32", 3, "FLOAT"), a, b)
    np.testing.assert_array_equal(eq, [False, True, False])
    (lt,) = run(compare_module("LT", "f32", 3), a, b)
    np.testing.assert_array_equal(lt, [False, False, False])


def test_complex_compare() -> None:
    a = np.array([1 + 1j, 2 - 1j], np.complex64)
    b = np.array([1 + 1j, 2 + 1j], np.complex64)
    (eq,) = run(compare_module("EQ", "complex<f32>", 2), a, b)
    np.testing.assert_array_equal(eq, [True, False])
    (ne,) = run(compare_module("NE", "complex<f32>", 2), a, b)
    np.testing.assert_array_equal(ne, [False, True])
    # spec.md#compare: complex numbers order lexicographically on (real, imag).
    c = np.array([1 + 2j, 1 + 1j, 0 + 9j, 2 + 0j], np.complex64)
    d = np.array([1 + 1j, 1 + 1j, 1 + 0j, 2 + 0j], np.complex64)
    want = {
        "LT": [False, False, True, False],
        "LE": [False, True, True, True],
        "GT": [True, False, False, False],
        "GE": [True, True, False, True],
    }
    for direction, expected in want.items():
        (got,) = run(compare_module(direction, "complex<f32>", 4), c, d)
        np.testing.assert_array_equal(got, expected, err_msg=direction)


# --- arithmetic ---------------------------------------------------------------------------------


def _wrap(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def _spec_power(x: int, y: int, bits: int, signed: bool) -> int:
    if y < 0:  # exact 1 / x**|y| truncated toward zero
        return {1: 1, -1: -1 if y % 2 else 1}.get(x, 0)
    return _wrap(x**y, bits, signed)


@pytest.mark.parametrize(("elem", "dtype"), [("i32", np.int32), ("i8", np.int8), ("ui8", np.uint8)])
def test_integer_power(elem: str, dtype: Any) -> None:
    signed = np.dtype(dtype).kind == "i"
    bases = [0, 1, 2, 3, 5, 7, 10, 255] if not signed else [0, 1, -1, 2, -2, 3, -3, 7]
    exps = [0, 1, 2, 3, 5, 13, 31, 200] if not signed else [0, 1, 2, 3, 5, -1, -2, -3]
    pairs = [(x, y) for x in bases for y in exps]
    x = np.array([p[0] for p in pairs], dtype)
    y = np.array([p[1] for p in pairs], dtype)
    (got,) = run(binary_module("stablehlo.power", elem, len(pairs)), x, y)
    bits = np.dtype(dtype).itemsize * 8
    want = [_spec_power(int(a), int(b), bits, signed) for a, b in pairs]
    np.testing.assert_array_equal(got.astype(np.int64), want)


def _spec_divide(x: int, y: int, bits: int, signed: bool, remainder: bool) -> int:
    """Truncating integer division as C and the spec define it, with XLA's values where the
    spec is silent: x / 0 = -1 (all bits set), x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0.
    """
    if y == 0:
        return x if remainder else _wrap(-1, bits, signed)
    if signed and x == -(1 << (bits - 1)) and y == -1:
        return 0 if remainder else x
    q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)  # toward zero
    return x - q * y if remainder else q


@pytest.mark.parametrize("op", ["stablehlo.divide", "stablehlo.remainder"])
@pytest.mark.parametrize(
    ("elem", "dtype"), [("i32", np.int32), ("i8", np.int8), ("ui8", np.uint8), ("ui32", np.uint32)]
)
def test_integer_divide_and_remainder_at_zero_and_overflow(op: str, elem: str, dtype: Any) -> None:
    info = np.iinfo(dtype)
    signed = info.min < 0
    xs = (
        [0, 1, 7, -7, info.min, info.max, -1]
        if signed
        else [0, 1, 7, 200 % (info.max + 1), info.max]
    )
    ys = [0, 1, 2, -2, 3, -1, info.min] if signed else [0, 1, 2, 3, info.max]
    pairs = [(a, b) for a in xs for b in ys]
    x = np.array([p[0] for p in pairs], dtype)
    y = np.array([p[1] for p in pairs], dtype)
    remainder = op == "stablehlo.remainder"
    want = [_spec_divide(int(a), int(b), info.bits, signed, remainder) for a, b in pairs]
    for jit in (False, True):
        (got,) = run(binary_module(op, elem, len(pairs)), x, y, jit=jit)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.astype(np.int64), want, err_msg=f"{op} {elem}")


def test_float_power_and_other_binaries_match_numpy() -> None:
    a = np.array([0.5, 2.0, 9.0], F)
    b = np.array([2.0, -1.0, 0.5], F)
    for op, want in [
        ("stablehlo.power", a**b),
        ("stablehlo.add", a + b),
        ("stablehlo.subtract", a - b),
        ("stablehlo.multiply", a * b),
        ("stablehlo.divide", a / b),
        ("stablehlo.maximum", np.maximum(a, b)),
        ("stablehlo.minimum", np.minimum(a, b)),
        ("stablehlo.atan2", np.arctan2(a, b)),
        ("stablehlo.remainder", np.fmod(a, b)),
    ]:
        (got,) = run(binary_module(op, "f32", 3), a, b)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=op)


@pytest.mark.parametrize(
    ("op", "fn"),
    [
        ("stablehlo.add", np.logical_or),
        ("stablehlo.maximum", np.logical_or),
        ("stablehlo.multiply", np.logical_and),
        ("stablehlo.minimum", np.logical_and),
        ("stablehlo.and", np.logical_and),
        ("stablehlo.or", np.logical_or),
        ("stablehlo.xor", np.logical_xor),
    ],
)
def test_boolean_arithmetic_is_boolean_algebra(op: str, fn: Any) -> None:
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    (got,) = run(binary_module(op, "i1", 4), a, b)
    np.testing.assert_array_equal(got, fn(a, b))


def test_boolean_subtract_is_refused() -> None:
    # The StableHLO verifier already refuses it at parse time.
    a = np.array([True, False])
    with pytest.raises(juliabridge.JuliaBridgeError, match="subtract"):
        run(binary_module("stablehlo.subtract", "i1", 2), a, a)


def test_unary_ops_match_numpy() -> None:
    x = np.array([0.25, 1.5, 3.0], F)
    for op, want in [
        ("stablehlo.sine", np.sin(x)),
        ("stablehlo.exponential", np.exp(x)),
        ("stablehlo.log", np.log(x)),
        ("stablehlo.sqrt", np.sqrt(x)),
        ("stablehlo.negate", -x),
        ("stablehlo.tanh", np.tanh(x)),
        ("stablehlo.floor", np.floor(x)),
        ("stablehlo.round_nearest_afz", np.array([0.0, 2.0, 3.0], F)),
    ]:
        t = "tensor<3xf32>"
        text = f"""module {{
  func.func @main(%a: {t}) -> {t} {{
    %0 = {op} %a : {t}
    return %0 : {t}
  }}
}}"""
        (got,) = run(text, x)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=op)


def test_round_half_away_from_zero_and_to_even() -> None:
    x = np.array([-2.5, -0.5, 0.5, 1.5, 2.5], F)
    t = "tensor<5xf32>"
    for op, want in [
        ("stablehlo.round_nearest_afz", [-3.0, -1.0, 1.0, 2.0, 3.0]),
        ("stablehlo.round_nearest_even", [-2.0, -0.0, 0.0, 2.0, 2.0]),
    ]:
        text = f"module {{\n  func.func @main(%a: {t}) -> {t} {{\n    %0 = {op} %a : {t}\n    return %0 : {t}\n  }}\n}}"
        (got,) = run(text, x)
        np.testing.assert_array_equal(got, want)


def _unary(op: str, src: str, dst: str, attrs: str = "") -> str:
    return f"""module {{
  func.func @main(%a: {src}) -> {dst} {{
    %0 = {op} %a{attrs} : ({src}) -> {dst}
    return %0 : {dst}
  }}
}}"""


def test_convert() -> None:
    x = np.array([0.0, -0.0, 2.5, -3.7, np.nan], F)
    (to_bool,) = run(_unary("stablehlo.convert", "tensor<5xf32>", "tensor<5xi1>"), x)
    np.testing.assert_array_equal(to_bool, [False, False, True, True, True])
    (to_int,) = run(_unary("stablehlo.convert", "tensor<4xf32>", "tensor<4xi32>"), x[:4])
    np.testing.assert_array_equal(to_int, [0, 0, 2, -3])
    (same,) = run(_unary("stablehlo.convert", "tensor<5xf32>", "tensor<5xf32>"), x)
    np.testing.assert_array_equal(same.view(np.uint32), x.view(np.uint32))
    z = np.array([1.5 - 2j, -3 + 4j], np.complex64)
    (real,) = run(_unary("stablehlo.convert", "tensor<2xcomplex<f32>>", "tensor<2xf32>"), z)
    np.testing.assert_array_equal(real, [1.5, -3.0])
    k = np.array([0, 3, 0, -1], np.int32)
    (kb,) = run(_unary("stablehlo.convert", "tensor<4xi32>", "tensor<4xi1>"), k)
    np.testing.assert_array_equal(kb, [False, True, False, True])
    (bf,) = run(_unary("stablehlo.convert", "tensor<5xf32>", "tensor<5xbf16>"), x)
    np.testing.assert_array_equal(bf.view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_convert_from_complex_to_i1_tests_the_real_part() -> None:
    # spec.md#convert: complex -> real types take the real part, i1 included (x != 0)
    for elem, dtype in [("complex<f32>", np.complex64), ("complex<f64>", np.complex128)]:
        z = np.array([0 + 1j, 2 + 0j, 0j, -0.5 - 3j, complex(-0.0, 7)], dtype)
        with jax.enable_x64(dtype == np.complex128):
            (got,) = run(_unary("stablehlo.convert", f"tensor<5x{elem}>", "tensor<5xi1>"), z)
            np.testing.assert_array_equal(got, [False, True, False, True, False], err_msg=elem)
            (got,) = run(_unary("stablehlo.convert", f"tensor<5x{elem}>", "tensor<5xi32>"), z)
            np.testing.assert_array_equal(got, [0, 2, 0, 0, 0], err_msg=elem)


def test_narrow_float_types_inside_a_module() -> None:
    # f8E4M3FN never crosses @main, but a module may compute with it (valtypes' narrow table).
    x = np.array([0.3, -1.7, 100.0, 500.0], F)
    text = """module {
  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.convert %a : (tensor<4xf32>) -> tensor<4xf8E4M3FN>
    %1 = stablehlo.convert %0 : (tensor<4xf8E4M3FN>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}"""
    (got,) = run(text, x)
    want = x.astype(ml_dtypes.float8_e4m3fn).astype(F)
    np.testing.assert_array_equal(got, want)


def test_bitcast_convert() -> None:
    x = np.array([1.0, -2.5, np.inf], F)
    (bits,) = run(_unary("stablehlo.bitcast_convert", "tensor<3xf32>", "tensor<3xi32>"), x)
    np.testing.assert_array_equal(bits, x.view(np.int32))
    with pytest.raises(juliabridge.JuliaBridgeError):
        run(
            _unary("stablehlo.bitcast_convert", "tensor<3xi8>", "tensor<3xi1>"),
            np.zeros(3, np.int8),
        )


def test_reduce_precision_rounds_to_the_narrow_format() -> None:
    x = np.array([1.0 + 2.0**-12, 3.14159, 65504.0, 1e-3], F)
    text = _unary(
        "stablehlo.reduce_precision",
        "tensor<4xf32>",
        "tensor<4xf32>",
        ", format = e5m10",
    ).replace("(tensor<4xf32>) -> tensor<4xf32>", "tensor<4xf32>")
    (got,) = run(text, x)
    np.testing.assert_array_equal(got, x.astype(np.float16).astype(F))


def test_clamp_and_select() -> None:
    t = "tensor<4xf32>"
    text = f"""module {{
  func.func @main(%lo: tensor<f32>, %x: {t}, %hi: tensor<f32>, %p: tensor<4xi1>) -> ({t}, {t}) {{
    %0 = stablehlo.clamp %lo, %x, %hi : (tensor<f32>, {t}, tensor<f32>) -> {t}
    %1 = stablehlo.select %p, %x, %0 : tensor<4xi1>, {t}
    return %0, %1 : {t}, {t}
  }}
}}"""
    x = np.array([-5.0, 0.5, 2.0, 9.0], F)
    p = np.array([True, False, True, False])
    clamped, chosen = run(text, F(0.0), x, F(3.0), p)
    np.testing.assert_array_equal(clamped, np.clip(x, 0.0, 3.0))
    np.testing.assert_array_equal(chosen, np.where(p, x, np.clip(x, 0.0, 3.0)))


# --- calls --------------------------------------------------------------------------------------


def test_composite_runs_its_decomposition() -> None:
    text = """module {
  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.composite "my.double" %a {decomposition = @double} : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
  func.func private @double(%x: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.add %x, %x : tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""
    x = np.array([1.0, -3.0], F)
    np.testing.assert_array_equal(run(text, x)[0], 2 * x)
    np.testing.assert_array_equal(jax.grad(lambda v: run_traced(text, v))(x), [2.0, 2.0])


def run_traced(text: str, x: Any) -> Any:
    return jnp.sum(juliabridge.load_mlir(text, backend="lax")(x)[0])


def test_calls_with_several_results_and_shared_callees() -> None:
    text = """module {
  func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
    %0:2 = func.call @pair(%a, %b) : (tensor<2xf32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
    %1:2 = func.call @pair(%0#1, %0#0) : (tensor<2xf32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
    return %1#0, %1#1 : tensor<2xf32>, tensor<2xf32>
  }
  func.func private @pair(%x: tensor<2xf32>, %y: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
    %0 = stablehlo.subtract %x, %y : tensor<2xf32>
    %1 = stablehlo.multiply %x, %y : tensor<2xf32>
    return %0, %1 : tensor<2xf32>, tensor<2xf32>
  }
}"""
    a, b = np.array([3.0, 1.0], F), np.array([2.0, 5.0], F)
    d, p = a - b, a * b
    got = run(text, a, b, jit=True)
    np.testing.assert_array_equal(got[0], p - d)
    np.testing.assert_array_equal(got[1], p * d)


def test_a_call_whose_signature_does_not_match_the_callee_is_refused() -> None:
    text = """module {
  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
    %0 = "func.call"(%a) {callee = @f} : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
  func.func private @f(%x: tensor<2xf32>, %y: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}"""
    with pytest.raises((UnsupportedOpError, juliabridge.MLIRParseError)):
        juliabridge.load_mlir(text, backend="lax")


def test_a_call_of_a_declaration_without_body_is_refused() -> None:
    text = """module {
  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
    %0 = func.call @ext(%a) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
  func.func private @ext(%x: tensor<2xf32>) -> tensor<2xf32>
}"""
    with pytest.raises(UnsupportedModuleError, match="without a body"):
        juliabridge.load_mlir(text, backend="lax")


def test_a_module_without_main_is_refused() -> None:
    text = """module {
  func.func @other(%a: tensor<2xf32>) -> tensor<2xf32> {
    return %a : tensor<2xf32>
  }
}"""
    with pytest.raises(UnsupportedModuleError, match="main"):
        juliabridge.load_mlir(text, backend="lax")


def test_a_wide_call_graph_within_the_bound_lifts() -> None:
    # 2**10 inlined calls of a 1-op helper: far below the bound, so it lifts and evaluates.
    funcs = []
    for k in range(10):
        funcs.append(
            f"""  func.func private @f{k}(%a: tensor<f32>) -> tensor<f32> {{
    %0 = func.call @f{k + 1}(%a) : (tensor<f32>) -> tensor<f32>
    %1 = func.call @f{k + 1}(%0) : (tensor<f32>) -> tensor<f32>
    return %1 : tensor<f32>
  }}"""
        )
    funcs.append(
        """  func.func private @f10(%a: tensor<f32>) -> tensor<f32> {
    %c = stablehlo.constant dense<1.0> : tensor<f32>
    %0 = stablehlo.add %a, %c : tensor<f32>
    return %0 : tensor<f32>
  }"""
    )
    text = (
        "module {\n  func.func @main(%a: tensor<f32>) -> tensor<f32> {\n"
        "    %0 = func.call @f0(%a) : (tensor<f32>) -> tensor<f32>\n    return %0 : tensor<f32>\n  }\n"
        + "\n".join(funcs)
        + "\n}"
    )
    fn = juliabridge.load_mlir(text, backend="lax")
    assert float(jax.jit(fn)(F(0.5))[0]) == 0.5 + 2**10


# --- the framework through test-only ops ---------------------------------------------------------


@pytest.fixture
def rules() -> Iterator[dict[str, Rule]]:
    """Register test-only lift rules for the duration of one test."""
    added: dict[str, Rule] = {}
    yield added
    for name in added:
        RULES.pop(name, None)


def add_rule(rules: dict[str, Rule], name: str, lift: Any, *, regions: bool = False) -> None:
    assert name not in RULES
    RULES[name] = rules[name] = Rule(lift, regions)


def generic(op: str, attrs: str = "", t: str = "tensor<2xf32>", region: str = "") -> str:
    attr = f" {{{attrs}}}" if attrs else ""
    reg = f" ({region})" if region else ""
    return f"""module {{
  func.func @main(%a: {t}) -> {t} {{
    %0 = "{op}"(%a){reg}{attr} : ({t}) -> {t}
    return %0 : {t}
  }}
}}"""


def test_attribute_getters_decode_every_form(rules: dict[str, Rule]) -> None:
    seen: dict[str, Any] = {}

    def lift(view: OpView) -> Any:
        seen["i"] = view.get_int("i")
        seen["i64s"] = view.get_ints("i64s")
        seen["i32s"] = view.get_ints("i32s")
        seen["dense_ints"] = view.get_ints("dense_ints")
        seen["arr"] = view.get_ints("arr")
        seen["bools"] = view.get_bools("bools")
        seen["dense_bools"] = view.get_bools("dense_bools")
        seen["arr_bools"] = view.get_bools("arr_bools")
        seen["f"] = view.get_float("f")
        seen["s"] = view.get_str("s")
        seen["sym"] = view.get_symbol("sym")
        seen["e"] = view.get_enum("e")
        seen["es"] = view.get_enums("es")
        seen["missing"] = view.get_int("nope", 42)
        seen["has"] = (view.has("i"), view.has("nope"))
        seen["raw"] = str(view.raw("s"))
        seen["dense"] = view.get_dense("d")
        seen["types"] = (view.operand.shape, view.result.dtype, len(view.operand_types))
        return lambda x: [x]

    add_rule(rules, "jbtest.attrs", lift)
    attrs = (
        "i = 7 : i32, i64s = array<i64: 1, -2>, i32s = array<i32: 3>, "
        "dense_ints = dense<[4, 5]> : tensor<2xi64>, arr = [6 : i64, 8 : i32], "
        "bools = array<i1: true, false>, dense_bools = dense<[false, true]> : tensor<2xi1>, "
        'arr_bools = [true, false, true], f = 2.5 : f32, s = "hi", sym = @target, '
        "e = #stablehlo<comparison_direction GE>, "
        "es = [#stablehlo<precision HIGH>, #stablehlo<precision DEFAULT>], "
        "d = dense<[1.5, 2.5]> : tensor<2xf32>"
    )
    x = np.array([1.0, 2.0], F)
    np.testing.assert_array_equal(run(generic("jbtest.attrs", attrs), x, trust=True)[0], x)
    assert seen["i"] == 7
    assert seen["i64s"] == (1, -2) and seen["i32s"] == (3,)
    assert seen["dense_ints"] == (4, 5) and seen["arr"] == (6, 8)
    assert seen["bools"] == (True, False) and seen["dense_bools"] == (False, True)
    assert seen["arr_bools"] == (True, False, True)
    assert seen["f"] == 2.5 and seen["s"] == "hi" and seen["sym"] == "target"
    assert seen["e"] == "GE" and seen["es"] == ("HIGH", "DEFAULT")
    assert seen["missing"] == 42 and seen["has"] == (True, False)
    assert seen["raw"] == '"hi"'
    np.testing.assert_array_equal(seen["dense"], [1.5, 2.5])
    assert seen["types"] == ((2,), np.dtype(F), 1)


@pytest.mark.parametrize(
    ("attrs", "getter", "message"),
    [
        ("", "get_int", "attribute x is missing"),
        ('x = "seven"', "get_int", 'attribute x = "seven"'),
        ("x = 1.5 : f32", "get_ints", "expected integers"),
        ("x = 3 : i32", "get_bools", "expected booleans"),
        ("x = 3 : i32", "get_enum", "expected a stablehlo/chlo enum"),
        ("", "get_dense", "attribute x is missing"),
        ('x = "no"', "get_dense", "attribute x has type none"),
        (
            'x = "no"',
            "get_dense_as_f32",
            'attribute x: expected a dense elements attribute, got "no"',
        ),
    ],
)
def test_attribute_errors_name_op_attribute_and_line(
    rules: dict[str, Rule], attrs: str, getter: str, message: str
) -> None:
    def lift(view: OpView) -> Any:
        if getter == "get_dense_as_f32":
            view.get_dense("x", TensorType((2,), np.dtype(F), "tensor<2xf32>"))
        else:
            getattr(view, getter)("x")
        return lambda x: [x]

    add_rule(rules, "jbtest.bad", lift)
    with pytest.raises(UnsupportedOpError) as e:
        juliabridge.load_mlir(generic("jbtest.bad", attrs), backend="lax", trust=True)
    assert message in str(e.value)
    assert e.value.op == "jbtest.bad" and e.value.where == "line 3"
    assert "line 3" in str(e.value)
    assert str(e.value).endswith(
        "Load it with backend='xla' (or 'auto', which falls back to it), or report the op so "
        "the lax backend learns it."
    )


def test_a_lift_producing_the_wrong_type_is_caught_at_the_op(rules: dict[str, Rule]) -> None:
    add_rule(rules, "jbtest.wrong_dtype", lambda view: lambda x: [x.astype(jnp.int32)])
    add_rule(rules, "jbtest.wrong_shape", lambda view: lambda x: [jnp.concatenate([x, x])])
    add_rule(rules, "jbtest.two", lambda view: lambda x: [x, x])
    add_rule(rules, "jbtest.raises", lambda view: lambda x: [lax.add(x, jnp.ones(3))])
    x = np.ones(2, F)
    for op, message in [
        ("jbtest.wrong_dtype", "produced int32[2], not the declared tensor<2xf32>"),
        ("jbtest.wrong_shape", "produced float32[4], not the declared tensor<2xf32>"),
        ("jbtest.two", "produced 2 values for 1 results"),
        ("jbtest.raises", "could not be evaluated with JAX"),
    ]:
        fn = juliabridge.load_mlir(generic(op), backend="lax", trust=True)
        for call in (fn, jax.jit(fn)):
            with pytest.raises(UnsupportedOpError, match=re.escape(message)) as e:
                call(x)
            assert e.value.op == op and "line 3" in e.value.where


def test_region_callables_see_block_arguments_and_outer_values(rules: dict[str, Rule]) -> None:
    seen: dict[str, Any] = {}

    def lift(view: OpView) -> Any:
        seen["body_op"] = view.region_op(0)
        seen["outside"] = (view.region_op(1), view.region_op(5))

        def impl(regions: Any, x: Any) -> Any:
            (body,) = regions
            return body(x, x)

        return impl

    add_rule(rules, "jbtest.apply", lift, regions=True)
    t = "tensor<2xf32>"
    region = (
        "{\n    ^bb0(%p: " + t + ", %q: " + t + "):\n"
        "      %s = stablehlo.multiply %q, %p : " + t + "\n"
        '      "stablehlo.return"(%s) : (' + t + ") -> ()\n    }"
    )
    x = np.array([3.0, -2.0], F)
    np.testing.assert_array_equal(
        run(generic("jbtest.apply", region=region), x, trust=True)[0], x * x
    )
    assert seen["body_op"] == "stablehlo.multiply" and seen["outside"] == (None, None)
    # A body that is not a single op on its own arguments is not a monoid.
    region2 = (
        "{\n    ^bb0(%p: " + t + ", %q: " + t + "):\n"
        "      %s = stablehlo.multiply %p, %p : " + t + "\n"
        '      "stablehlo.return"(%s) : (' + t + ") -> ()\n    }"
    )
    run(generic("jbtest.apply", region=region2), x, trust=True)
    assert seen["body_op"] is None
    region3 = (
        "{\n    ^bb0(%p: " + t + ", %q: " + t + "):\n"
        "      %s = stablehlo.multiply %p, %q : " + t + "\n"
        "      %u = stablehlo.add %s, %q : " + t + "\n"
        '      "stablehlo.return"(%u) : (' + t + ") -> ()\n    }"
    )
    np.testing.assert_array_equal(
        run(generic("jbtest.apply", region=region3), x, trust=True)[0], x * x + x
    )
    assert seen["body_op"] is None
    # Two steps, the first over the arguments and returned: still not a single-op body.
    region5 = (
        "{\n    ^bb0(%p: " + t + ", %q: " + t + "):\n"
        "      %s = stablehlo.multiply %p, %q : " + t + "\n"
        "      %u = stablehlo.add %s, %q : " + t + "\n"
        '      "stablehlo.return"(%s) : (' + t + ") -> ()\n    }"
    )
    np.testing.assert_array_equal(
        run(generic("jbtest.apply", region=region5), x, trust=True)[0], x * x
    )
    assert seen["body_op"] is None
    # One op over the arguments whose result is not what the block returns.
    region6 = (
        "{\n    ^bb0(%p: " + t + ", %q: " + t + "):\n"
        "      %s = stablehlo.multiply %p, %q : " + t + "\n"
        '      "stablehlo.return"(%p) : (' + t + ") -> ()\n    }"
    )
    np.testing.assert_array_equal(run(generic("jbtest.apply", region=region6), x, trust=True)[0], x)
    assert seen["body_op"] is None
    # An outer value used inside the region (MLIR scoping).
    region4 = (
        "{\n    ^bb0(%p: " + t + ", %q: " + t + "):\n"
        "      %s = stablehlo.add %p, %a : " + t + "\n"
        '      "stablehlo.return"(%s) : (' + t + ") -> ()\n    }"
    )
    np.testing.assert_array_equal(
        run(generic("jbtest.apply", region=region4), x, trust=True)[0], 2 * x
    )
    assert seen["body_op"] is None


def test_a_region_called_with_the_wrong_arity_is_an_error(rules: dict[str, Rule]) -> None:
    add_rule(rules, "jbtest.apply1", lambda view: lambda regions, x: regions[0]([x]), regions=True)
    t = "tensor<2xf32>"
    region = (
        "{\n    ^bb0(%p: " + t + ", %q: " + t + "):\n"
        '      "stablehlo.return"(%p) : (' + t + ") -> ()\n    }"
    )
    with pytest.raises(UnsupportedOpError, match="2 arguments was called with 1") as e:
        run(generic("jbtest.apply1", region=region), np.ones(2, F), trust=True)
    assert e.value.op == "region"


def test_unsupported_types_are_refused_naming_the_op(rules: dict[str, Rule]) -> None:
    add_rule(rules, "jbtest.id", lambda view: lambda x: [x])
    text = """module {
  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
    %0 = "jbtest.id"(%a) : (tensor<2xf32>) -> tensor<?xf32>
    %1 = "jbtest.id"(%0) : (tensor<?xf32>) -> tensor<2xf32>
    return %1 : tensor<2xf32>
  }
}"""
    with pytest.raises(UnsupportedOpError, match="dynamically shaped") as e:
        juliabridge.load_mlir(text, backend="lax", trust=True)
    assert e.value.op == "jbtest.id" and e.value.where == "line 3"


def test_tuples_and_tokens_flow_through_steps(rules: dict[str, Rule]) -> None:
    seen: dict[str, Any] = {}

    def make_tuple(view: OpView) -> Any:
        seen["tuple"] = str(view.result_types[0])
        with pytest.raises(UnsupportedOpError, match="expected a tensor"):
            view.result  # noqa: B018
        return lambda x, tok: [(x, tok)]

    def token(view: OpView) -> Any:
        seen["token"] = str(view.result_types[0])
        return lambda: [TOKEN]

    def first(view: OpView) -> Any:
        return lambda t: [t[0] * 2]

    add_rule(rules, "jbtest.token", token)
    add_rule(rules, "jbtest.tuple", make_tuple)
    add_rule(rules, "jbtest.first", first)
    text = """module {
  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
    %t = "jbtest.token"() : () -> !stablehlo.token
    %0 = "jbtest.tuple"(%a, %t) : (tensor<2xf32>, !stablehlo.token) -> tuple<tensor<2xf32>, !stablehlo.token>
    %1 = "jbtest.first"(%0) : (tuple<tensor<2xf32>, !stablehlo.token>) -> tensor<2xf32>
    return %1 : tensor<2xf32>
  }
}"""
    x = np.array([1.0, 4.0], F)
    np.testing.assert_array_equal(run(text, x, trust=True)[0], 2 * x)
    assert seen == {
        "token": "!stablehlo.token",
        "tuple": "tuple<tensor<2xf32>, !stablehlo.token>",
    }
    assert repr(TOKEN) == "TOKEN"


def test_registering_one_op_twice_is_a_programming_error() -> None:
    with pytest.raises(RuntimeError, match=r"two lift functions for stablehlo\.add"):
        lifts("stablehlo.add")(lambda view: lambda x: [x])


# --- reverse mode refused by name ----------------------------------------------------------------


def test_reverse_unavailable_blocks_only_reverse_mode(rules: dict[str, Rule]) -> None:
    def lift(view: OpView) -> Any:
        where = view.where

        def impl(x: Any) -> Any:
            return reverse_unavailable(
                [lax.sin(x)], op=view.name, where=where, why="a test says so"
            )

        return impl

    add_rule(rules, "jbtest.forward_only", lift)
    fn = juliabridge.load_mlir(generic("jbtest.forward_only"), backend="lax", trust=True)
    x = np.array([0.3, 1.2], F)
    np.testing.assert_allclose(fn(x)[0], np.sin(x), rtol=1e-6)
    _, t = jax.jvp(lambda v: fn(v)[0], (x,), (np.ones(2, F),))
    np.testing.assert_allclose(t, np.cos(x), rtol=1e-6)
    np.testing.assert_allclose(
        jax.vmap(lambda v: fn(v)[0])(np.stack([x, 2 * x])), np.sin([x, 2 * x]), rtol=1e-6
    )
    np.testing.assert_allclose(jax.jacfwd(lambda v: fn(v)[0])(x), np.diag(np.cos(x)), rtol=1e-6)
    with pytest.raises(TransformError) as e:
        jax.grad(lambda v: jnp.sum(fn(v)[0]))(x)
    message = str(e.value)
    assert message.startswith("jbtest.forward_only at line 3: reverse-mode differentiation")
    assert message.endswith(
        "not available through this op: a test says so. Forward mode (jax.jvp, jax.jacfwd) "
        "works through it."
    )
    # Reverse mode through the primal output of a jvp is refused by name too.
    with pytest.raises(TransformError, match=r"jbtest\.forward_only at line 3"):
        jax.grad(lambda v: jnp.sum(jax.jvp(lambda u: fn(u)[0], (v,), (v,))[0]))(x)


def test_reverse_unavailable_leaves_integers_unmarked(rules: dict[str, Rule]) -> None:
    def lift(view: OpView) -> Any:
        return lambda x: reverse_unavailable([x], op=view.name, where=view.where, why="w")

    add_rule(rules, "jbtest.int_mark", lift)
    t = "tensor<2xi32>"
    fn = juliabridge.load_mlir(generic("jbtest.int_mark", t=t), backend="lax", trust=True)
    k = np.array([3, -4], np.int32)
    np.testing.assert_array_equal(fn(k)[0], k)
    assert jax.make_jaxpr(lambda v: fn(v)[0])(k).eqns == [] or all(
        "reverse_unavailable" not in str(e.primitive) for e in jax.make_jaxpr(fn)(k).eqns
    )


# --- more constant forms (attrs._from_bytes, resources) ------------------------------------------


def _resource_module(blob_bytes: bytes, mlir_type: str) -> str:
    blob = "0x04000000" + blob_bytes.hex().upper()
    return (
        const_module("dense_resource<r0>", mlir_type)
        + f'\n{{-#\n  dialect_resources: {{\n    builtin: {{\n      r0: "{blob}"\n    }}\n  }}\n#-}}\n'
    )


def test_resource_blobs_of_every_storage_kind() -> None:
    flags = np.array([1, 0, 1, 1], np.uint8)
    (got,) = run(_resource_module(flags.tobytes(), "tensor<4xi1>"))
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, [True, False, True, True])
    brain = np.array([1.5, -3.0, 0.125], ml_dtypes.bfloat16)
    (got,) = run(_resource_module(brain.tobytes(), "tensor<3xbf16>"))
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.view(np.uint16), brain.view(np.uint16))
    grid = np.arange(6, dtype=np.int16).reshape(2, 3) - 2
    (got,) = run(_resource_module(grid.tobytes(), "tensor<2x3xi16>"))
    np.testing.assert_array_equal(got, grid)


def test_a_one_element_blob_is_a_splat() -> None:
    (got,) = run(
        _resource_module(np.array([2.5], ml_dtypes.bfloat16).tobytes(), "tensor<2x3xbf16>")
    )
    assert got.shape == (2, 3) and got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.astype(F), np.full((2, 3), 2.5, F))
    (got,) = run(_resource_module(np.array([1], np.uint8).tobytes(), "tensor<3xi1>"))
    np.testing.assert_array_equal(got, [True, True, True])
    (got,) = run(_resource_module(np.array([0], np.uint8).tobytes(), "tensor<1xi1>"))
    np.testing.assert_array_equal(got, [False])
    (got,) = run(_resource_module(np.array([9], np.int32).tobytes(), "tensor<1xi32>"))
    np.testing.assert_array_equal(got, [9])
    (got,) = run(const_module('dense<"0x4040">', "tensor<2x2xbf16>"))
    np.testing.assert_array_equal(got.astype(F), np.full((2, 2), 3.0, F))


def test_a_blob_of_the_wrong_size_is_refused_naming_the_op() -> None:
    with pytest.raises(UnsupportedOpError, match="10 bytes cannot hold 3 elements") as e:
        run(_resource_module(bytes(10), "tensor<3xf32>"))
    assert e.value.op == "stablehlo.constant" and e.value.where == "line 3"
    text = const_module("dense_resource<missing>", "tensor<3xf32>")
    with pytest.raises(UnsupportedOpError, match="missing is not in the module"):
        run(text)


def test_element_type_names_for_messages() -> None:
    from juliabridge.backends.lax.attrs import element_type_name

    assert element_type_name(np.dtype(F)) == "f32"
    assert element_type_name(np.dtype(ml_dtypes.bfloat16)) == "bf16"
    assert element_type_name(np.dtype(np.uint16)) == "ui16"
    assert element_type_name(np.dtype("U3")) == "<U3"


def test_getters_return_the_default_only_when_the_attribute_is_absent(
    rules: dict[str, Rule],
) -> None:
    from juliabridge.support.jaxinternals import ir

    seen: dict[str, Any] = {}
    marker = object()

    def lift(view: OpView) -> Any:
        for getter in (
            "get_int",
            "get_ints",
            "get_bools",
            "get_float",
            "get_str",
            "get_enum",
            "get_enums",
        ):
            seen[getter] = getattr(view, getter)("absent", marker)
        seen["typed_absent"] = view.get_typed("absent", ir.IntegerAttr, marker)
        seen["typed"] = view.get_typed("i", ir.IntegerAttr)
        seen["present"] = view.get_ints("ints", marker)
        return lambda x: [x]

    add_rule(rules, "jbtest.defaults", lift)
    run(generic("jbtest.defaults", "i = 3 : i64, ints = array<i64: 4>"), np.ones(2, F), trust=True)
    for getter in (
        "get_int",
        "get_ints",
        "get_bools",
        "get_float",
        "get_str",
        "get_enum",
        "get_enums",
        "typed_absent",
    ):
        assert seen[getter] is marker, getter
    assert isinstance(seen["typed"], ir.IntegerAttr) and seen["typed"].value == 3
    assert seen["present"] == (4,)


def test_tuple_elements_reads_tuple_types(rules: dict[str, Rule]) -> None:
    from juliabridge.backends.lax.registry import tuple_elements

    seen: dict[str, Any] = {}

    def lift(view: OpView) -> Any:
        seen["elements"] = [str(t) for t in tuple_elements(view.operand_types[0])]
        with pytest.raises(TypeError, match="is not a tuple"):
            tuple_elements(view.result_types[0])
        return lambda t: [t[1]]

    add_rule(rules, "jbtest.second", lift)
    add_rule(rules, "jbtest.pack", lambda view: lambda x: [(x, x * 3)])
    text = """module {
  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
    %0 = "jbtest.pack"(%a) : (tensor<2xf32>) -> tuple<tensor<2xf32>, tensor<2xf32>>
    %1 = "jbtest.second"(%0) : (tuple<tensor<2xf32>, tensor<2xf32>>) -> tensor<2xf32>
    return %1 : tensor<2xf32>
  }
}"""
    x = np.array([1.0, 2.0], F)
    np.testing.assert_array_equal(run(text, x, trust=True)[0], 3 * x)
    assert seen["elements"] == ["tensor<2xf32>", "tensor<2xf32>"]


def _narrow_const(body: str, narrow: str, n: int, out: str = "f32") -> str:
    return f"""module {{
  func.func @main() -> tensor<{n}x{out}> {{
    %0 = stablehlo.constant {body} : tensor<{n}x{narrow}>
    %1 = stablehlo.convert %0 : (tensor<{n}x{narrow}>) -> tensor<{n}x{out}>
    return %1 : tensor<{n}x{out}>
  }}
}}"""


def test_narrow_type_literals_decode_from_text() -> None:
    # Types without a numpy buffer view go through the printed form (attrs._from_literal).
    (got,) = run(_narrow_const("dense<[1.0, -2.0, 0.5]>", "f8E4M3FN", 3))
    np.testing.assert_array_equal(got, [1.0, -2.0, 0.5])
    (got,) = run(_narrow_const("dense<[0x38, 0xC0]>", "f8E4M3FN", 2))  # bit patterns: 1, -2
    np.testing.assert_array_equal(got, [1.0, -2.0])
    (got,) = run(_narrow_const("dense<[1, -2, 7]>", "i4", 3, out="i32"))
    np.testing.assert_array_equal(got, [1, -2, 7])
    (got,) = run(_narrow_const("dense<[0x3FC0, 0xC040]>", "bf16", 2))
    np.testing.assert_array_equal(got, [1.5, -3.0])
    (got,) = run(_narrow_const("dense<-1.5>", "bf16", 3))
    np.testing.assert_array_equal(got, [-1.5, -1.5, -1.5])


def test_required_symbols_and_long_attributes_in_messages(rules: dict[str, Rule]) -> None:
    def missing_symbol(view: OpView) -> Any:
        view.get_symbol("callee")
        return lambda x: [x]

    add_rule(rules, "jbtest.sym", missing_symbol)
    with pytest.raises(UnsupportedOpError, match="attribute callee is missing"):
        juliabridge.load_mlir(generic("jbtest.sym"), backend="lax", trust=True)

    def long_int(view: OpView) -> Any:
        view.get_int("x")
        return lambda x: [x]

    add_rule(rules, "jbtest.long", long_int)
    text = "v" * 300
    with pytest.raises(UnsupportedOpError) as e:
        juliabridge.load_mlir(generic("jbtest.long", f'x = "{text}"'), backend="lax", trust=True)
    shown = '"' + text[:199]  # the attribute as MLIR prints it, cut at 200 characters
    assert f"attribute x = {shown}: " in str(e.value)


@pytest.mark.parametrize("narrow", ["bf16", "f8E4M3FN"])
def test_large_narrow_constants_printed_as_hex(narrow: str) -> None:
    # MLIR prints more than a handful of elements as one hex blob of little-endian bytes; types
    # without a numpy buffer view are decoded from that blob (attrs._from_bytes).
    dtype = {"bf16": ml_dtypes.bfloat16, "f8E4M3FN": ml_dtypes.float8_e4m3fn}[narrow]
    want = (np.arange(200) % 17 - 8).astype(dtype)
    text = _narrow_const(f"dense<{_hex(want)}>", narrow, 200)
    fn = juliabridge.load_mlir(text, backend="lax")
    assert '"0x' in fn.module.text  # the parsed module keeps the hex form
    (got,) = [np.asarray(o) for o in fn()]
    np.testing.assert_array_equal(got, want.astype(F))


def test_the_element_type_table_holds_the_narrow_types_ml_dtypes_defines() -> None:
    # ELEMENT_TYPES is built at import (attributed by mutmut to no test of its own), so the
    # builder is called again here; the names are MLIR's, the dtypes ml_dtypes'
    from juliabridge.backends.lax import valtypes

    table = valtypes._element_table()
    assert table == valtypes.ELEMENT_TYPES
    assert table["f8E4M3FN"] == np.dtype(ml_dtypes.float8_e4m3fn)
    assert table["f8E5M2"] == np.dtype(ml_dtypes.float8_e5m2)
    assert table["i4"] == np.dtype(ml_dtypes.int4) and table["ui4"] == np.dtype(ml_dtypes.uint4)
    assert table["bf16"] == np.dtype(ml_dtypes.bfloat16) and table["f32"] == np.dtype(F)
    assert table["i1"] == np.dtype(bool) and table["complex<f64>"] == np.dtype(np.complex128)
    assert np.dtype(np.float64) not in [table[k] for k in ("f8E4M3FN", "i4", "i2", "f4E2M1FN")]


def test_hex_bit_patterns_in_literals_of_types_without_a_buffer_view() -> None:
    # complex parts are bit patterns of the component type (f32 here), 1-byte floats' of a
    # byte: MLIR prints NaN and infinities so
    (got,) = run(
        const_module("dense<[(0x7F800000, 2.0), (1.0, 0xBF800000)]>", "tensor<2xcomplex<f32>>")
    )
    np.testing.assert_array_equal(got, np.array([complex(np.inf, 2.0), 1 - 1j], np.complex64))
    (got,) = run(_narrow_const("dense<[0x7F, 1.0, 0xB8]>", "f8E4M3FN", 3))  # NaN, 1, -1
    assert np.isnan(got[0]) and got[1:].tolist() == [1.0, -1.0]
    (got,) = run(_narrow_const("dense<[0x7C, 0xFC, 0x3C]>", "f8E5M2", 3))  # inf, -inf, 1
    assert got.tolist() == [np.inf, -np.inf, 1.0]


def test_dense_decodes_the_printed_form_too() -> None:
    # attrs.dense accepts the attribute's printed form (get_dense falls back to it where the
    # bindings cannot wrap the attribute)
    from juliabridge.backends.lax import attrs

    def tt(shape: tuple[int, ...], dtype: Any, mlir: str) -> TensorType:
        return TensorType(shape, np.dtype(dtype), mlir)

    got = attrs.dense("dense<[true, false, true]> : tensor<3xi1>", tt((3,), bool, "tensor<3xi1>"))
    assert got.dtype == np.bool_ and got.tolist() == [True, False, True]
    got = attrs.dense("dense<false> : tensor<2xi1>", tt((2,), bool, "tensor<2xi1>"))
    assert got.tolist() == [False, False]
    got = attrs.dense("dense<[-3, 0x10]> : tensor<2xi32>", tt((2,), np.int32, "tensor<2xi32>"))
    assert got.dtype == np.int32 and got.tolist() == [-3, 16]
    c128 = tt((1,), np.complex128, "tensor<1xcomplex<f64>>")
    got = attrs.dense("dense<(1.5, 0x4000000000000000)> : tensor<1xcomplex<f64>>", c128)
    assert got.tolist() == [1.5 + 2j]


def test_integer_and_boolean_arrays_decode_without_the_bindings_downcast() -> None:
    # an attribute the bindings hand over as a plain ir.Attribute decodes as its concrete kind
    from juliabridge.backends.lax import attrs
    from juliabridge.support.jaxinternals import ir, make_context

    with make_context():
        for text, want in [
            ("array<i64: 3, -1, 0>", (3, -1, 0)),
            ("array<i32: 7>", (7,)),
            ("dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>", (1, 2, 3, 4)),
            ("[5 : i64, -6 : i32]", (5, -6)),
        ]:
            plain = ir.Attribute(ir.Attribute.parse(text))
            assert type(plain) is ir.Attribute
            assert attrs.integers(plain) == want, text
        plain = ir.Attribute(ir.Attribute.parse("array<i1: true, false>"))
        assert attrs.bools(plain) == (True, False)
        with pytest.raises(attrs.AttributeError_, match='expected integers, got "x"'):
            attrs.integers(ir.Attribute(ir.Attribute.parse('"x"')))


def test_explicit_and_notype_compare_types_are_the_element_types_default() -> None:
    # spec.md#compare: NOTYPE (and no compare_type) mean the element type's own comparison
    a = np.array([-3, 5, 0, -1], np.int32)
    b = np.array([2, 5, -7, 3], np.int32)
    for kind in ("", "NOTYPE", "SIGNED"):
        (got,) = run(compare_module("LT", "i32", 4, kind), a, b)
        np.testing.assert_array_equal(got, a < b, err_msg=kind)
    u = np.array([250, 1, 128, 0], np.uint8)
    v = np.array([3, 200, 127, 0], np.uint8)
    for kind in ("NOTYPE", "UNSIGNED"):
        (got,) = run(compare_module("GT", "ui8", 4, kind), u, v)
        np.testing.assert_array_equal(got, u > v, err_msg=kind)
    x = np.array([-0.0, np.nan, 1.0, 2.0], F)
    y = np.array([0.0, np.nan, 2.0, 1.0], F)
    for kind in ("NOTYPE", "FLOAT"):
        (got,) = run(compare_module("EQ", "f32", 4, kind), x, y)
        np.testing.assert_array_equal(got, [True, False, False, False], err_msg=kind)


@pytest.mark.parametrize(
    ("elem", "kind", "expected"),
    [
        (
            "f32",
            "SIGNED",
            "compare_type SIGNED does not apply to float32 operands (expected FLOAT or TOTALORDER)",
        ),
        ("i32", "FLOAT", "compare_type FLOAT does not apply to int32 operands (expected SIGNED)"),
        (
            "ui8",
            "SIGNED",
            "compare_type SIGNED does not apply to uint8 operands (expected UNSIGNED)",
        ),
    ],
)
def test_a_compare_type_the_element_type_does_not_admit_is_refused(
    elem: str, kind: str, expected: str
) -> None:
    text = compare_module("LT", elem, 2, kind)
    try:
        juliabridge.load_mlir(text, backend="lax")
    except UnsupportedOpError as e:
        assert "stablehlo.compare" in str(e) and "line 3" in str(e)
        assert expected in str(e)
        assert "The module is not valid StableHLO (spec.md#compare C3); export it again" in str(e)
    except juliabridge.MLIRParseError:
        pytest.skip("MLIR's verifier refuses it first")
    else:
        pytest.fail("accepted")


def test_a_hex_blob_constant_of_rank_two_keeps_its_shape() -> None:
    # 200 elements: MLIR prints them as one hex blob, which bf16 is decoded from
    want = ((np.arange(200) % 13) - 6).astype(ml_dtypes.bfloat16).reshape(4, 50)
    text = f"""module {{
  func.func @main() -> tensor<4x50xf32> {{
    %0 = stablehlo.constant dense<{_hex(want)}> : tensor<4x50xbf16>
    %1 = stablehlo.convert %0 : (tensor<4x50xbf16>) -> tensor<4x50xf32>
    return %1 : tensor<4x50xf32>
  }}
}}"""
    fn = juliabridge.load_mlir(text, backend="lax")
    assert '"0x' in fn.module.text
    (got,) = [np.asarray(o) for o in fn()]
    np.testing.assert_array_equal(got, want.astype(F))


def test_a_quoted_dense_resource_name_reads_its_blob() -> None:
    values = np.array([3.0, -0.5], F)
    blob = "0x04000000" + values.tobytes().hex().upper()
    text = (
        const_module('dense_resource<"X.0-X">', "tensor<2xf32>")
        + f'\n{{-#\n  dialect_resources: {{\n    builtin: {{\n      "X.0-X": "{blob}"\n    }}\n  }}\n#-}}\n'
    )
    (got,) = run(text)
    np.testing.assert_array_equal(got, values)


def test_a_lift_producing_a_non_array_names_its_python_type(rules: dict[str, Rule]) -> None:
    add_rule(rules, "jbtest.python_float", lambda view: lambda x: [1.5])
    fn = juliabridge.load_mlir(generic("jbtest.python_float"), backend="lax", trust=True)
    with pytest.raises(UnsupportedOpError) as e:
        fn(np.ones(2, F))
    assert str(e.value).startswith(
        "jbtest.python_float at line 3 of <mlir text>: the lifted op produced float[], not the "
        "declared tensor<2xf32>"
    )


def test_opview_tensor_refuses_a_token_naming_the_value(rules: dict[str, Rule]) -> None:
    messages: list[str] = []

    def lift(view: OpView) -> Any:
        for args in [(view.operand_types[1],), (view.operand_types[1], "the flag")]:
            with pytest.raises(UnsupportedOpError) as e:
                view.tensor(*args)
            messages.append(str(e.value))
        assert view.tensor(view.operand_types[0]) is view.operand_types[0]
        return lambda x, tok: [x]

    add_rule(rules, "jbtest.token", lambda view: lambda: [TOKEN])
    add_rule(rules, "jbtest.takes_token", lift)
    text = """module {
  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
    %t = "jbtest.token"() : () -> !stablehlo.token
    %0 = "jbtest.takes_token"(%a, %t) : (tensor<2xf32>, !stablehlo.token) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""
    x = np.array([1.0, 4.0], F)
    np.testing.assert_array_equal(run(text, x, trust=True)[0], x)
    assert [m.split(". ")[0] for m in messages] == [
        "<mlir text>: jbtest.takes_token at line 4: value is !stablehlo.token, expected a tensor",
        "<mlir text>: jbtest.takes_token at line 4: the flag is !stablehlo.token, expected a tensor",
    ]


def test_a_jax_error_in_a_lift_is_named_with_its_first_line_cut_at_300(
    rules: dict[str, Rule],
) -> None:
    def lift(view: OpView) -> Any:
        def impl(x: Any) -> list[Any]:
            raise ValueError("y" * 400 + "\nsecond line")

        return impl

    add_rule(rules, "jbtest.long_error", lift)
    fn = juliabridge.load_mlir(generic("jbtest.long_error"), backend="lax", trust=True)
    with pytest.raises(UnsupportedOpError) as e:
        fn(np.ones(2, F))
    assert str(e.value) == (
        "jbtest.long_error at line 3 of <mlir text> could not be evaluated with JAX "
        f"(ValueError: {'y' * 300})"
    )


def test_an_op_from_another_file_is_named_by_file_and_line() -> None:
    text = generic("jbtest.not_lifted").replace(
        ": (tensor<2xf32>) -> tensor<2xf32>\n",
        ': (tensor<2xf32>) -> tensor<2xf32> loc("model.mlir":7:3)\n',
    )
    with pytest.raises(UnsupportedOpError) as e:
        juliabridge.load_mlir(text, backend="lax", trust=True)
    assert str(e.value).startswith(
        "<mlir text>: jbtest.not_lifted at model.mlir:7 is not an op the lax backend lifts."
    )
    assert e.value.where == "model.mlir:7"


def test_a_call_graph_past_the_inlining_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from juliabridge.backends.lax import program

    # the bound on inlined ops (2,000,000; lowered here so a small call graph crosses it)
    monkeypatch.setattr(program, "MAX_INLINED_OPS", 5)
    fan = """module {
  func.func @main(%a: tensor<f32>) -> tensor<f32> {
    %0 = func.call @f(%a) : (tensor<f32>) -> tensor<f32>
    %1 = func.call @f(%0) : (tensor<f32>) -> tensor<f32>
    return %1 : tensor<f32>
  }
  func.func private @f(%a: tensor<f32>) -> tensor<f32> {
    %0 = stablehlo.sine %a : tensor<f32>
    %1 = stablehlo.sine %0 : tensor<f32>
    %2 = stablehlo.sine %1 : tensor<f32>
    return %2 : tensor<f32>
  }
}"""
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(fan, backend="lax")
    assert str(e.value) == (
        "<mlir text>: @main expands to 6 ops once its func.call ops are inlined, more than the "
        "5 the lax backend traces; the call graph fans out far beyond any model Reactant emits"
    )


def test_a_region_argument_type_is_refused_naming_the_op_that_owns_the_region(
    rules: dict[str, Rule],
) -> None:
    add_rule(rules, "jbtest.with_region", lambda view: lambda regions, x: [x], regions=True)
    body = {
        "a block argument of a type the lax backend cannot represent": (
            "^bb0(%b: tensor<?xf32>):\n      stablehlo.return %b : tensor<?xf32>",
            "block argument 0 of jbtest.with_region at line 3 has type dynamically shaped "
            "tensor<?xf32>, which the lax backend cannot represent",
        ),
    }
    for what, (region, expected) in body.items():
        text = f"""module {{
  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {{
    %0 = "jbtest.with_region"(%a) ({{
    {region}
    }}) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }}
}}"""
        with pytest.raises(UnsupportedOpError) as e:
            juliabridge.load_mlir(text, backend="lax", trust=True)
        assert str(e.value).startswith(f"<mlir text>: {expected}"), what
        assert e.value.op == "jbtest.with_region" and e.value.where == "line 3", what


def test_integer_division_of_constants_by_zero_does_not_kill_the_process() -> None:
    # XLA's compiler dies of SIGFPE when it constant-folds an integer division or remainder by
    # zero; the lifted module's constants are constants to XLA, so the child process must
    # survive compiling them (it imports the same juliabridge tree as this process)
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = """
import jax, numpy as np, juliabridge
for op, want in (("stablehlo.remainder", [5, -7, 0]), ("stablehlo.divide", [-1, -1, -2147483648])):
    text = '''module {
  func.func @main() -> tensor<3xi32> {
    %a = stablehlo.constant dense<[5, -7, -2147483648]> : tensor<3xi32>
    %b = stablehlo.constant dense<[0, 0, -1]> : tensor<3xi32>
    %0 = OP %a, %b : tensor<3xi32>
    return %0 : tensor<3xi32>
  }
}'''.replace("OP", op)
    fn = juliabridge.load_mlir(text, backend="lax")
    assert np.asarray(jax.jit(fn)()[0]).tolist() == want, op
print("ok")
"""
    # lifting here too (without compiling) ties the test to the lift functions it exercises
    for op in ("stablehlo.remainder", "stablehlo.divide"):
        juliabridge.load_mlir(binary_module(op, "i32", 3), backend="lax")
    root = str(Path(juliabridge.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


# --- the xla/enzyme rewrite's inline integer-division guard (backends/lax/rewrite.py) ---------


def _trapping_main(module: Any, args: list[np.ndarray]) -> list[list[Any]]:
    """@main of `module` evaluated op by op in Python integers on a host whose division traps,
    as XLA's constant folder divides: x / 0 and INT_MIN / -1 raise ArithmeticError. It knows
    only the ops of a guarded division (constant, compare EQ, and, or, select, divide,
    remainder, return) and refuses any other."""
    from juliabridge.support.jaxinternals import ir

    with module.parsed.context:
        (main,) = (o.operation for o in module.parsed.body.operations)
        block = main.regions[0].blocks[0]
        env: dict[Any, list[Any]] = {
            a: np.asarray(v).tolist() for a, v in zip(block.arguments, args)
        }
        for op in (o.operation for o in block.operations):
            ins = [env[v] for v in op.operands]
            if op.name == "func.return":
                return ins
            t = ir.RankedTensorType(op.results[0].type)
            et = ir.IntegerType(t.element_type)
            bits, signed = et.width, not et.is_unsigned
            if op.name == "stablehlo.constant":
                attr = ir.DenseIntElementsAttr(op.attributes["value"])
                if attr.is_splat:
                    values = [int(ir.IntegerAttr(attr.get_splat_value()).value)] * t.shape[0]
                else:
                    values = [int(v) for v in np.asarray(attr)]
                out = [_wrap(v, bits, signed) for v in values]
            elif op.name == "stablehlo.compare":
                assert str(op.attributes["comparison_direction"]).endswith(" EQ>"), op
                out = [a == b for a, b in zip(*ins, strict=True)]
            elif op.name in ("stablehlo.and", "stablehlo.or"):
                out = [(all if op.name.endswith("and") else any)(p) for p in zip(*ins, strict=True)]
            elif op.name == "stablehlo.select":
                out = [a if p else b for p, a, b in zip(*ins, strict=True)]
            elif op.name in ("stablehlo.divide", "stablehlo.remainder"):
                out = []
                for x, y in zip(*ins, strict=True):
                    if y == 0 or (signed and x == -(1 << (bits - 1)) and y == -1):
                        raise ArithmeticError(f"{op.name} of {x} by {y} traps")
                    q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)  # toward zero
                    out.append(x - q * y if op.name.endswith("remainder") else q)
            else:
                raise AssertionError(f"a guarded division has no {op.name}")
            env[op.results[0]] = out
    raise AssertionError("@main has no return")


def _division_module(op: str, t: str, divisor: str | None) -> str:
    """@main(%a, %b) = %a `op` %b, or `op` by the constant `divisor` (dense<...> text)."""
    const = f"%b = stablehlo.constant {divisor} : {t}\n    " if divisor else ""
    arg = f", %b: {t}" if divisor is None else ""
    return f"""module {{
  func.func @main(%a: {t}{arg}) -> {t} {{
    {const}%0 = {op} %a, %b : {t}
    return %0 : {t}
  }}
}}"""


@pytest.mark.parametrize("op", ["stablehlo.divide", "stablehlo.remainder"])
@pytest.mark.parametrize(("elem", "dtype"), [("i8", np.int8), ("i32", np.int32), ("ui8", np.uint8)])
def test_xla_rewrite_guards_integer_division_so_nothing_divides_by_zero(
    op: str, elem: str, dtype: Any
) -> None:
    # XLA folds divisions of constants with the host's trapping instruction: the rewrite for
    # xla/enzyme leaves only divisions by a divisor free of 0 (and of -1 with INT_MIN) and still
    # gives the spec's values (_spec_divide), x / 0 and INT_MIN / -1 included.
    from juliabridge.backends.lax.rewrite import misread_by_xla, rewrite_through_lax
    from juliabridge.stablehlo import parse_module

    info = np.iinfo(dtype)
    signed = info.min < 0
    xs = [0, 7, -7, info.min, info.max] if signed else [0, 7, 200, info.max]
    ys = [0, -1, 2, -2, 1] if signed else [0, 2, 1, info.max]
    pairs = [(a, b) for a in xs for b in ys]
    x = np.array([p[0] for p in pairs], dtype)
    y = np.array([p[1] for p in pairs], dtype)
    rem = op.endswith("remainder")
    want = [_spec_divide(a, b, info.bits, signed, rem) for a, b in pairs]
    t = f"tensor<{len(pairs)}x{elem}>"
    direct = parse_module(_division_module(op, t, None))
    with pytest.raises(ArithmeticError):  # the evaluator traps where the host does
        _trapping_main(direct, [x, y])
    assert _trapping_main(rewrite_through_lax(direct, misread_by_xla), [x, y]) == [want]
    listed = parse_module(_division_module(op, t, f"dense<{[b for _, b in pairs]}>"))
    assert _trapping_main(rewrite_through_lax(listed, misread_by_xla), [x]) == [want]
    # the same values from XLA running the rewritten module (arguments are not folded)
    (got,) = juliabridge.load_mlir(_division_module(op, t, None), backend="xla")(x, y)
    np.testing.assert_array_equal(np.asarray(got).astype(np.int64), want)


@pytest.mark.parametrize(
    ("elem", "divisor", "guarded"),
    [("i32", 3, False), ("i32", 0, True), ("i32", -1, True), ("i32", -2, False),
     ("ui8", 255, False), ("ui8", 0, True)],
)  # fmt: skip
def test_xla_rewrite_guards_only_divisions_that_can_trap(
    elem: str, divisor: int, guarded: bool
) -> None:
    # A splat constant divisor other than 0 (and -1 when signed) cannot trap: the module is
    # handed on as it is; one that can is guarded (and then traps nowhere).
    from juliabridge.backends.lax.rewrite import misread_by_xla, rewrite_through_lax
    from juliabridge.stablehlo import parse_module

    t = f"tensor<3x{elem}>"
    module = parse_module(_division_module("stablehlo.divide", t, f"dense<{divisor}>"))
    out = rewrite_through_lax(module, misread_by_xla)
    assert (out is not module) == guarded
    if guarded:
        dtype = {"i32": np.int32, "ui8": np.uint8}[elem]
        x = np.array([5, 0, np.iinfo(dtype).min], dtype)
        signed = np.iinfo(dtype).min < 0
        want = [_spec_divide(int(a), _wrap(divisor, 8 * x.itemsize, signed), 8 * x.itemsize,
                             signed, False) for a in x]  # fmt: skip
        assert _trapping_main(out, [x]) == [want]


def test_the_lax_backend_leaves_derivatives_to_jax() -> None:
    # JAX differentiates the lifted program itself: asking the backend for a JVP or VJP of its
    # own is a TransformError saying so.
    from juliabridge.backends.lax import LaxBackend
    from juliabridge.stablehlo import parse_module

    backend = LaxBackend(parse_module(binary_module("stablehlo.add", "f32", 2)))
    assert backend.name == "lax" and backend.traceable
    for factory in (backend.jvp_function, backend.vjp_function):
        with pytest.raises(TransformError) as e:
            factory()
        assert str(e.value) == "the lax backend is differentiated by JAX directly"


def test_xla_rewrite_hands_on_two_result_ops_it_does_not_cover() -> None:
    # Only rng_bit_generator's two results are redrawn; a sort of two operands (a region op, which
    # could not be rewritten) and a two-value barrier of signed integers go to XLA as written.
    from juliabridge.backends.lax.rewrite import misread_by_xla, rewrite_through_lax
    from juliabridge.stablehlo import parse_module

    text = """module {
  func.func @main(%k: tensor<3xf32>, %v: tensor<3xi32>) -> (tensor<3xf32>, tensor<3xi32>) {
    %b:2 = stablehlo.optimization_barrier %k, %v : tensor<3xf32>, tensor<3xi32>
    %s:2 = "stablehlo.sort"(%b#0, %b#1) <{dimension = 0 : i64, is_stable = true}> ({
    ^bb0(%a: tensor<f32>, %c: tensor<f32>, %x: tensor<i32>, %y: tensor<i32>):
      %lt = stablehlo.compare LT, %a, %c : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) : (tensor<3xf32>, tensor<3xi32>) -> (tensor<3xf32>, tensor<3xi32>)
    return %s#0, %s#1 : tensor<3xf32>, tensor<3xi32>
  }
}"""
    module = parse_module(text)
    assert rewrite_through_lax(module, misread_by_xla) is module
    k, v = np.array([2.0, -1.0, 0.5], F), np.array([7, 8, 9], np.int32)
    keys, values = juliabridge.load_mlir(text, backend="xla")(k, v)
    np.testing.assert_array_equal(np.asarray(keys), np.sort(k))
    np.testing.assert_array_equal(np.asarray(values), v[np.argsort(k)])


def test_a_module_without_its_parse_is_lifted_from_its_text(rules: dict[str, Rule]) -> None:
    # A StableHLOModule whose `parsed` IR is absent (the field's default) is lifted from its
    # text, unregistered (trusted) ops included, and computes what the parsed one does.
    import dataclasses

    from juliabridge.backends.lax import LaxBackend
    from juliabridge.stablehlo import parse_module

    add_rule(rules, "jbtest.twice", lambda view: lambda x: [x * 2])
    module = parse_module(generic("jbtest.twice"), trust=True)
    bare = dataclasses.replace(module, parsed=None)
    (got,) = LaxBackend(bare, trust=True).call(jnp.array([1.5, -2.0], F))
    np.testing.assert_array_equal(np.asarray(got), np.array([3.0, -4.0], F))
