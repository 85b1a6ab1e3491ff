"""MLIR types as the lax backend sees them: tensors (shape + numpy dtype), tuples and tokens.

Boundary types (what crosses @main) are juliabridge.support.dtypes' 15; inside a module Reactant and
JAX can also produce the narrow float and integer types ml_dtypes defines, so the lax backend
maps every element type that both ml_dtypes and the installed JAX can hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ...support import dtypes
from ...support.jaxinternals import ir

#: MLIR element type -> ml_dtypes attribute name, for types beyond the boundary's 15.
_NARROW = {
    "f8E4M3FN": "float8_e4m3fn",
    "f8E5M2": "float8_e5m2",
    "f8E4M3FNUZ": "float8_e4m3fnuz",
    "f8E5M2FNUZ": "float8_e5m2fnuz",
    "f8E4M3B11FNUZ": "float8_e4m3b11fnuz",
    "f8E3M4": "float8_e3m4",
    "f8E4M3": "float8_e4m3",
    "f8E8M0FNU": "float8_e8m0fnu",
    "f4E2M1FN": "float4_e2m1fn",
    "f6E2M3FN": "float6_e2m3fn",
    "f6E3M2FN": "float6_e3m2fn",
    "i4": "int4",
    "ui4": "uint4",
    "i2": "int2",
    "ui2": "uint2",
}


def _element_table() -> dict[str, np.dtype]:
    table = dict(dtypes.MLIR_TO_NUMPY)
    for mlir_name, attr in _NARROW.items():
        dt = getattr(ml_dtypes, attr, None)
        if dt is not None:
            table[mlir_name] = np.dtype(dt)
    return table


#: Every element type the lax backend can compute with, MLIR name -> numpy dtype.
ELEMENT_TYPES: dict[str, np.dtype] = _element_table()


@dataclass(frozen=True, slots=True)
class TensorType:
    """A statically shaped ranked tensor: MLIR shape and the numpy dtype of its elements."""

    shape: tuple[int, ...]
    dtype: np.dtype
    mlir: str

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def __str__(self) -> str:
        return self.mlir


@dataclass(frozen=True, slots=True)
class TupleType:
    """An MLIR tuple; its values are Python tuples at evaluation time."""

    elements: tuple[ValueType, ...]
    mlir: str

    def __str__(self) -> str:
        return self.mlir


@dataclass(frozen=True, slots=True)
class TokenType:
    """`!stablehlo.token`: ordering for side effects, a placeholder value here."""

    mlir: str = "!stablehlo.token"

    def __str__(self) -> str:
        return self.mlir


ValueType = TensorType | TupleType | TokenType


class TypeNotSupported(Exception):
    """Raised by `value_type` for a type the lax backend cannot represent (caller adds context)."""


def element_dtype(t: ir.Type) -> np.dtype:
    """The numpy dtype of an MLIR element type, or raise TypeNotSupported."""
    name = str(t)
    dt = ELEMENT_TYPES.get(name)
    if dt is None:
        raise TypeNotSupported(f"element type {name}")
    return dt


def value_type(t: ir.Type) -> ValueType:
    """Convert an MLIR value type; dynamic shapes, unranked tensors and quantized types refuse."""
    text = str(t)
    if isinstance(t, ir.RankedTensorType):
        if not t.has_static_shape:
            raise TypeNotSupported(f"dynamically shaped {text}")
        return TensorType(tuple(int(d) for d in t.shape), element_dtype(t.element_type), text)
    if isinstance(t, ir.TupleType):
        return TupleType(tuple(value_type(t.get_type(i)) for i in range(t.num_types)), text)
    if text == "!stablehlo.token":
        return TokenType()
    raise TypeNotSupported(text)
