"""Decoding MLIR attributes into Python values, once, at lift time.

The MLIR Python bindings give typed access to most attributes, but not to the elements of dense
constants of every element type (bf16, complex and the f8 types have no buffer view), so dense
values fall back to the attribute's printed form, which MLIR writes either as a hex blob of the
raw little-endian bytes (more than a handful of elements) or as a literal list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from ...support.jaxinternals import ir
from .valtypes import ELEMENT_TYPES, TensorType


class AttributeError_(ValueError):
    """An attribute has a form the lax backend does not decode (the caller adds op and line)."""


def integer(attr: ir.Attribute) -> int:
    """An IntegerAttr (any width) as a Python int."""
    return int(ir.IntegerAttr(attr).value)


def integers(attr: ir.Attribute) -> tuple[int, ...]:
    """A DenseI64ArrayAttr, dense integer elements or an array of IntegerAttrs, flattened."""
    if isinstance(attr, ir.DenseI64ArrayAttr) or _isa(ir.DenseI64ArrayAttr, attr):
        return tuple(int(v) for v in ir.DenseI64ArrayAttr(attr))
    if _isa(ir.DenseI32ArrayAttr, attr):
        return tuple(int(v) for v in ir.DenseI32ArrayAttr(attr))
    if _isa(ir.DenseIntElementsAttr, attr):
        return tuple(int(v) for v in np.asarray(ir.DenseIntElementsAttr(attr)).ravel())
    if _isa(ir.ArrayAttr, attr):
        return tuple(integer(a) for a in ir.ArrayAttr(attr))
    raise AttributeError_(f"expected integers, got {attr}")


def bools(attr: ir.Attribute) -> tuple[bool, ...]:
    """A DenseBoolArrayAttr or dense i1 elements as Python bools."""
    if _isa(ir.DenseBoolArrayAttr, attr):
        return tuple(bool(v) for v in ir.DenseBoolArrayAttr(attr))
    if _isa(ir.DenseElementsAttr, attr):
        return tuple(bool(v) for v in np.asarray(ir.DenseElementsAttr(attr)).ravel())
    if _isa(ir.ArrayAttr, attr):
        return tuple(bool(ir.BoolAttr(a).value) for a in ir.ArrayAttr(attr))
    raise AttributeError_(f"expected booleans, got {attr}")


def floating(attr: ir.Attribute) -> float:
    """A FloatAttr as a Python float."""
    return float(ir.FloatAttr(attr).value)


def string(attr: ir.Attribute) -> str:
    """A StringAttr's value."""
    return str(ir.StringAttr(attr).value)


def symbol(attr: ir.Attribute) -> str:
    """A FlatSymbolRefAttr's name (without the @)."""
    return str(ir.FlatSymbolRefAttr(attr).value)


_ENUM = re.compile(r"#(?:stablehlo|chlo|mhlo)<\s*[A-Za-z_]+\s+([A-Za-z0-9_]+)\s*>")


def enum(attr: ir.Attribute) -> str:
    """The case name of a dialect enum attribute, e.g. `#stablehlo<comparison_direction LT>`."""
    m = _ENUM.fullmatch(str(attr).strip())
    if m is None:
        raise AttributeError_(f"expected a stablehlo/chlo enum attribute, got {attr}")
    return m.group(1)


def enums(attr: ir.Attribute) -> tuple[str, ...]:
    """An array of enum attributes (e.g. precision_config)."""
    return tuple(enum(a) for a in ir.ArrayAttr(attr))


def _isa(cls: type, attr: ir.Attribute) -> bool:
    check = getattr(cls, "isinstance", None)
    if check is not None:
        return bool(check(attr))
    try:
        cls(attr)
    except (ValueError, TypeError):
        return False
    return True


# --- dense elements ---------------------------------------------------------------------------

_DENSE = re.compile(r"\A\s*dense<(?P<body>.*)>\s*:\s*(?P<type>.+)\Z", re.S)
_RESOURCE = re.compile(r"\A\s*dense_resource<(?P<name>[^>]+)>\s*:\s*(?P<type>.+)\Z", re.S)
_TOKEN = re.compile(
    r"\(\s*(?P<re>[^,()]+?)\s*,\s*(?P<im>[^,()]+?)\s*\)"
    r"|(?P<word>true|false)"
    r"|(?P<num>[-+]?(?:0x[0-9A-Fa-f]+|inf|nan|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?))"
)
_BUFFER_KINDS = "biuf"
_HEX = re.compile(r"[0-9A-Fa-f]*")


def dense(
    attr: ir.Attribute | str, ttype: TensorType, resources: Mapping[str, bytes] | None = None
) -> np.ndarray:
    """The value of a dense elements attribute as a numpy array of `ttype`'s shape and dtype.

    `attr` may also be the attribute's printed form. `resources` maps `dense_resource` blob
    names to their bytes (from the module's resource section). Raises AttributeError_ for any
    other form.
    """
    want = ttype.dtype
    size = int(np.prod(ttype.shape, dtype=np.int64))
    if (
        not isinstance(attr, str)
        and want.kind in _BUFFER_KINDS
        and want.itemsize in (1, 2, 4, 8)
        and want.name in np.sctypeDict
    ):
        try:
            arr = np.asarray(ir.DenseElementsAttr(attr))
        except (ValueError, TypeError, RuntimeError):
            arr = None
        if arr is not None and arr.dtype == want and arr.size == size:
            return arr.reshape(ttype.shape)
    text = str(attr)
    m = _RESOURCE.match(text)
    if m is not None:
        blob = (resources or {}).get(m.group("name").strip().strip('"'))
        if blob is None:
            raise AttributeError_(f"dense_resource blob {m.group('name')} is not in the module")
        return _from_bytes(blob[4:], want, ttype.shape, size)  # 4-byte alignment header
    m = _DENSE.match(text)
    if m is None:
        raise AttributeError_(f"expected a dense elements attribute, got {text[:200]}")
    body = m.group("body").strip()
    if body.startswith('"0x') and body.endswith('"'):
        return _from_bytes(_hex_bytes(body[3:-1]), want, ttype.shape, size)
    return _from_literal(body, want, ttype.shape, size)


def _hex_bytes(digits: str) -> bytes:
    """The bytes a dense attribute's hex blob spells (two digits a byte, no blanks)."""
    if len(digits) % 2:
        raise AttributeError_(
            f"a dense hex blob of {len(digits)} digits: not an even number of hex digits"
        )
    if not _HEX.fullmatch(digits):
        raise AttributeError_(f"a dense hex blob that is not hex: {digits[:40]!r}")
    return bytes.fromhex(digits)


def _from_bytes(raw: bytes, want: np.dtype, shape: tuple[int, ...], size: int) -> np.ndarray:
    storage = np.dtype(np.uint8) if want == np.bool_ else want
    item = storage.itemsize
    if len(raw) == item and size != 1:
        # A splat blob: one element, viewed at every position (no copy per element).
        one = np.frombuffer(raw, storage)[:1]
        return np.broadcast_to(((one != 0) if want == np.bool_ else one).reshape(()), shape)
    if len(raw) != item * size:
        raise AttributeError_(
            f"a dense blob of {len(raw)} bytes cannot hold {size} elements of {want}"
        )
    arr = np.frombuffer(raw, storage).reshape(shape)
    return (arr != 0) if want == np.bool_ else arr.copy()


def _scalar(token: re.Match[str], want: np.dtype) -> object:
    if token.group("word"):
        return token.group("word") == "true"
    if token.group("re") is not None:
        re_, im = _real(token.group("re"), want), _real(token.group("im"), want)
        return complex(float(re_), float(im))  # type: ignore[arg-type]
    return _real(token.group("num"), want)


def _real(text: str, want: np.dtype) -> object:
    text = text.strip()
    # A complex element's parts are hex bit patterns of its component type (f32 in complex<f32>).
    base = np.dtype(f"f{want.itemsize // 2}") if want.kind == "c" else want
    if text.lower().lstrip("+-").startswith("0x"):
        bits = int(text, 16)
        if base.kind in "iub":
            return -bits if text.startswith("-") else bits
        # Hex in a float literal is the element's bit pattern (NaN payloads, infinities).
        comp = np.dtype(f"u{base.itemsize}") if base.itemsize in (1, 2, 4, 8) else np.uint8
        return np.array(bits, comp).view(base)[()] if base.itemsize in (1, 2, 4, 8) else bits
    if base.kind in "iub":
        return int(text)
    return float(text)


def _from_literal(body: str, want: np.dtype, shape: tuple[int, ...], size: int) -> np.ndarray:
    tokens = [_scalar(t, want) for t in _TOKEN.finditer(body)]
    if len(tokens) == 1 and size != 1:
        # A splat: decoded once in its own width and viewed at every position (a bf16, f8 or
        # i4 splat was a Python list of `size` elements: a 1 GB value took over 2 GB).
        return np.broadcast_to(_from_literal(body, want, (), 1), shape)
    if len(tokens) != size:
        raise AttributeError_(f"a dense literal with {len(tokens)} values for {size} elements")
    if want.kind in "iub":
        return np.array(tokens, dtype=object).astype(want).reshape(shape)
    if want.kind == "c":
        return np.array(tokens, dtype=want).reshape(shape)
    values = [np.asarray(t).astype(want) if isinstance(t, np.generic) else t for t in tokens]
    out = np.empty(size, want)
    for i, v in enumerate(values):
        out[i] = v
    return out.reshape(shape)


_RESOURCE_SECTION = re.compile(r"\{-#(?P<body>.*?)#-\}", re.S)
_BLOB = re.compile(r'(?P<name>[A-Za-z0-9_.$\-"]+)\s*:\s*"0x(?P<hex>[0-9A-Fa-f]*)"')


def resource_blobs(text: str) -> dict[str, bytes]:
    """The `dialect_resources` blobs of a printed module, by name (bytes include the header)."""
    out: dict[str, bytes] = {}
    for section in _RESOURCE_SECTION.finditer(text):
        for blob in _BLOB.finditer(section.group("body")):
            out[blob.group("name").strip('"')] = bytes.fromhex(blob.group("hex"))
    return out


def element_type_name(dtype: np.dtype) -> str:
    """The MLIR name of a numpy dtype the lax backend knows (for messages)."""
    for name, dt in ELEMENT_TYPES.items():
        if dt == dtype:
            return name
    return str(dtype)
