"""Dense constants across their space (issue 38): every element type the lax backend holds,
written as MLIR's hex blob of raw little-endian bytes, full and splat, 0-d, empty, small and
large (MLIR prints more than 100 elements of a type without a numpy buffer view, bf16, complex,
the f8 types, i4..., back as a hex blob, which the lax backend then decodes from text), against
numpy reading the same bytes (np.frombuffer). Malformed blobs are typed refusals naming the blob.

Each module goes through the public loader (juliabridge.load_mlir, backend="lax"). Types that
cannot cross @main (the f8, f6, f4 and sub-byte integer types) leave it bit for bit where they
can (stablehlo.bitcast_convert to ui8) and converted exactly otherwise (to f32 or i32); the
f6 types are refused at load on every backend, so they are not here.

The last tests call attrs.dense on an attribute's printed form, the input it also takes where
the bindings cannot wrap an attribute: malformed blobs and integer literals at their type's ends.

The sizes are test_rule_space.py's (JULIABRIDGE_SPACE_EXAMPLES, default 20 per generated test).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import juliabridge
from juliabridge.errors import JuliaBridgeError, MLIRParseError

from .test_rule_space import SPACE

pytestmark = pytest.mark.usefixtures("x64")


@dataclass(frozen=True)
class Elem:
    """An MLIR element type, the numpy dtype of its elements and how a test reads it back."""

    mlir: str
    dtype: np.dtype
    bits: int  # significant bits of each stored byte group (sub-byte types: fewer than 8)
    out: str | None = None  # the boundary type it leaves @main as (None: itself)
    via: str = ""  # "bitcast_convert" or "convert" when `out` is set


def _boundary() -> list[Elem]:
    names = {
        "i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
        "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
        "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64,
        "complex<f32>": np.complex64, "complex<f64>": np.complex128,
    }  # fmt: skip
    return [Elem(k, np.dtype(v), 8) for k, v in names.items()]


def _narrow() -> list[Elem]:
    eight = {
        "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2", "f8E4M3FNUZ": "float8_e4m3fnuz",
        "f8E5M2FNUZ": "float8_e5m2fnuz", "f8E4M3B11FNUZ": "float8_e4m3b11fnuz",
        "f8E3M4": "float8_e3m4", "f8E4M3": "float8_e4m3", "f8E8M0FNU": "float8_e8m0fnu",
    }  # fmt: skip
    # not f6E2M3FN and f6E3M2FN: refused on every backend (stablehlo/elementtypes.py)
    sub = {
        "i4": ("int4", 4, "i32"), "ui4": ("uint4", 4, "i32"), "i2": ("int2", 2, "i32"),
        "ui2": ("uint2", 2, "i32"), "f4E2M1FN": ("float4_e2m1fn", 4, "f32"),
    }  # fmt: skip
    out = [
        Elem(k, np.dtype(getattr(ml_dtypes, v)), 8, "ui8", "bitcast_convert")
        for k, v in eight.items()
        if hasattr(ml_dtypes, v)
    ]
    out += [
        Elem(k, np.dtype(getattr(ml_dtypes, v)), bits, to, "convert")
        for k, (v, bits, to) in sub.items()
        if hasattr(ml_dtypes, v)
    ]
    return out


ELEMS = {e.mlir: e for e in _boundary() + _narrow()}
_OUT = {"ui8": np.dtype(np.uint8), "i32": np.dtype(np.int32), "f32": np.dtype(np.float32)}


def _tensor(shape: tuple[int, ...], mlir: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + mlir + ">"


def _module(blob: str, e: Elem, shape: tuple[int, ...]) -> str:
    t = _tensor(shape, e.mlir)
    if e.out is None:
        body, res = "", t
    else:
        res = _tensor(shape, e.out)
        body = f"    %1 = stablehlo.{e.via} %0 : ({t}) -> {res}\n"
    ret = "%1" if e.out else "%0"
    return (
        f"module {{\n  func.func @main() -> {res} {{\n"
        f'    %0 = stablehlo.constant dense<"0x{blob}"> : {t}\n{body}'
        f"    return {ret} : {res}\n  }}\n}}"
    )


def _raw(e: Elem, n: int, rng: np.random.Generator) -> bytes:
    """n elements' worth of bytes MLIR accepts for `e`: random, with sub-byte types and i1
    kept to their significant bits (MLIR stores one element per byte for them)."""
    if e.dtype == np.bool_:
        return rng.integers(0, 2, n, dtype=np.uint8).tobytes()
    raw = rng.integers(0, 256, n * e.dtype.itemsize, dtype=np.uint8)
    if e.bits < 8:
        raw &= (1 << e.bits) - 1
    return raw.tobytes()


def _reference(raw: bytes, e: Elem, shape: tuple[int, ...], splat: bool) -> np.ndarray:
    """What the constant holds, read by numpy from the same bytes (little-endian, as MLIR
    writes them), in the type it leaves @main as."""
    storage = np.dtype(np.uint8) if e.dtype == np.bool_ else e.dtype.newbyteorder("<")
    flat = np.frombuffer(raw, storage)
    if e.dtype == np.bool_:
        flat = flat != 0
    full = np.broadcast_to(flat[0], shape) if splat else flat.reshape(shape)
    if e.out is None:
        return np.asarray(full).astype(e.dtype)
    if e.via == "bitcast_convert":
        return np.array(full).view(np.uint8)  # one byte an element: the shape stays
    return np.asarray(full).astype(_OUT[e.out])


def _bits(a: np.ndarray) -> np.ndarray:
    """The bytes of `a` (NaN payloads and signed zeros included), one row per element."""
    a = np.ascontiguousarray(a)
    return a.reshape(-1).view(np.uint8).reshape(a.size, -1) if a.size else np.zeros((0, 1))


def _check(text: str, want: np.ndarray, what: str) -> None:
    (got,) = juliabridge.load_mlir(text, backend="lax")()
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    if want.dtype.kind == "f" and want.dtype.itemsize >= 4 and np.isnan(want).any():
        # a sub-byte or 8-bit float converted to f32: NaN is NaN, whatever its payload
        assert np.array_equal(np.isnan(got), np.isnan(want)), what
        got, want = np.where(np.isnan(got), 0, got), np.where(np.isnan(want), 0, want)
    np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=what)


#: Shapes: 0-d, empty, small (MLIR prints them back as a literal list) and large (more than
#: 100 elements: printed back as a hex blob).
SHAPES = [(), (0,), (3, 0), (1,), (5,), (2, 3), (101,), (7, 19), (2, 3, 20)]


@pytest.mark.parametrize("name", sorted(ELEMS))
def test_a_large_hex_constant_of_every_element_type_holds_numpy_s_reading_of_its_bytes(
    name: str,
) -> None:
    e = ELEMS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    shape = (3, 41)  # 123 elements: printed back as hex, decoded from the blob's bytes
    raw = _raw(e, 123, rng)
    _check(_module(raw.hex().upper(), e, shape), _reference(raw, e, shape, False), name)


@pytest.mark.parametrize("name", sorted(ELEMS))
def test_a_one_element_hex_blob_is_a_splat_of_every_shape(name: str) -> None:
    e = ELEMS[name]
    rng = np.random.default_rng(len(name))
    raw = _raw(e, 1, rng)
    for shape in [(), (4,), (2, 60)]:
        _check(_module(raw.hex(), e, shape), _reference(raw, e, shape, True), f"{name} {shape}")


@st.composite
def constants(draw: st.DrawFn) -> tuple[Elem, tuple[int, ...], bool, int]:
    e = ELEMS[draw(st.sampled_from(sorted(ELEMS)))]
    shape = draw(st.sampled_from(SHAPES))
    splat = draw(st.booleans()) and int(np.prod(shape)) > 1
    return e, shape, splat, draw(st.integers(0, 2**16))


@SPACE
@given(case=constants())
def test_hex_constants_of_any_type_shape_and_form_hold_their_bytes(case) -> None:
    e, shape, splat, seed = case
    n = 1 if splat else int(np.prod(shape))
    raw = _raw(e, n, np.random.default_rng(seed))
    blob = raw.hex().upper() if seed % 2 else raw.hex()  # MLIR reads either case
    _check(_module(blob, e, shape), _reference(raw, e, shape, splat), f"{e.mlir} {shape}")


@pytest.mark.parametrize(
    ("blob", "mlir", "problem"),
    [
        ("0000803", "tensor<2xbf16>", "hex"),  # odd length
        ("0000803G", "tensor<2xbf16>", "hex"),  # not a hex digit
        ("00 0080", "tensor<2xbf16>", "hex"),  # a blank inside
        ("000080", "tensor<2xbf16>", "hex data size is invalid"),  # 3 bytes for 2 elements
        ("0000803F0000", "tensor<2xf32>", "hex data size is invalid"),  # 6 bytes for 2
        ("00000000000000", "tensor<1xcomplex<f32>>", "hex data size is invalid"),
        ("0000", "tensor<3x150xf8E4M3FN>", "hex data size is invalid"),
    ],
)
def test_a_malformed_hex_blob_is_a_typed_parse_error_naming_it(
    blob: str, mlir: str, problem: str
) -> None:
    text = (
        f"module {{\n  func.func @main() -> {mlir} {{\n"
        f'    %0 = stablehlo.constant dense<"0x{blob}"> : {mlir}\n'
        f"    return %0 : {mlir}\n  }}\n}}"
    )
    with pytest.raises(MLIRParseError) as e:
        juliabridge.load_mlir(text, backend="lax")
    assert isinstance(e.value, JuliaBridgeError)
    assert problem in str(e.value) and "line 3" in str(e.value), str(e.value)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('"0x0000803"', "not an even number of hex digits"),
        ('"0x0000803G"', "not hex"),
        ('"0x000080"', "3 bytes cannot hold 2 elements"),
    ],
)
def test_the_printed_form_decoder_refuses_a_malformed_blob_by_name(body: str, problem) -> None:
    # attrs.dense decodes an attribute's printed form (where the bindings cannot wrap it):
    # a blob that is no hex or of the wrong size is its typed refusal, never a bare ValueError
    # from bytes.fromhex nor a wrong-sized array.
    from juliabridge.backends.lax import attrs
    from juliabridge.backends.lax.valtypes import TensorType

    t = TensorType((2,), np.dtype(ml_dtypes.bfloat16), "tensor<2xbf16>")
    with pytest.raises(attrs.AttributeError_, match=problem):
        attrs.dense(f"dense<{body}> : tensor<2xbf16>", t)


@pytest.mark.parametrize("name", ["i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64", "i1"])
def test_the_printed_form_decoder_reads_integer_literals_at_their_type_s_ends(name: str) -> None:
    # attrs.dense's printed-form input (used where the bindings cannot wrap an attribute):
    # a literal list mixing the type's minimum, maximum and small values decodes exactly (no
    # float detour for values past int64's maximum next to small ones)
    from juliabridge.backends.lax import attrs
    from juliabridge.backends.lax.valtypes import TensorType

    e = ELEMS[name]
    if e.dtype == np.bool_:
        values, words = [True, False, True], "true, false, true"
    else:
        info = np.iinfo(e.dtype)
        values = [int(info.max), 5, int(info.min), 0, int(info.max) - 1, 1]
        words = ", ".join(map(str, values))
    t = TensorType((len(values),), e.dtype, f"tensor<{len(values)}x{name}>")
    got = attrs.dense(f"dense<[{words}]> : {t}", t)
    want = np.array(values, dtype=object).astype(e.dtype)
    assert got.dtype == e.dtype and got.tolist() == want.tolist(), (name, got)
