"""MLIR element types <-> numpy dtypes, and the x64 guard."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np

from ..errors import X64DisabledError

#: Every element type Reactant emits for Julia's number types, with its numpy dtype.
MLIR_TO_NUMPY: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i1": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "ui8": np.dtype(np.uint8),
    "ui16": np.dtype(np.uint16),
    "ui32": np.dtype(np.uint32),
    "ui64": np.dtype(np.uint64),
    "complex<f32>": np.dtype(np.complex64),
    "complex<f64>": np.dtype(np.complex128),
}

NUMPY_TO_MLIR: dict[np.dtype, str] = {v: k for k, v in MLIR_TO_NUMPY.items()}

#: Julia's names, for messages a Julia user recognises.
MLIR_TO_JULIA: dict[str, str] = {
    "f16": "Float16",
    "bf16": "BFloat16",
    "f32": "Float32",
    "f64": "Float64",
    "i1": "Bool",
    "i8": "Int8",
    "i16": "Int16",
    "i32": "Int32",
    "i64": "Int64",
    "ui8": "UInt8",
    "ui16": "UInt16",
    "ui32": "UInt32",
    "ui64": "UInt64",
    "complex<f32>": "ComplexF32",
    "complex<f64>": "ComplexF64",
}

SIXTY_FOUR_BIT = frozenset({"f64", "i64", "ui64", "complex<f64>"})


def is_known(mlir_type: str) -> bool:
    """True when `mlir_type` is an element type juliabridge can pass across the boundary."""
    return mlir_type in MLIR_TO_NUMPY


def to_numpy(mlir_type: str) -> np.dtype:
    """The numpy dtype of an MLIR element type such as ``"f32"`` or ``"complex<f64>"``."""
    return MLIR_TO_NUMPY[mlir_type]


def from_numpy(dtype: np.dtype | type) -> str | None:
    """The MLIR element type of a numpy dtype, or None when it has no counterpart."""
    return NUMPY_TO_MLIR.get(np.dtype(dtype))


def x64_enabled() -> bool:
    """Whether JAX currently keeps 64-bit values (``jax_enable_x64``)."""
    return bool(jax.config.read("jax_enable_x64"))


def require_x64(types: dict[str, str], what: str) -> None:
    """Raise X64DisabledError when any of `types` (name -> MLIR type) is 64-bit and x64 is off."""
    if x64_enabled():
        return
    wide = {name: t for name, t in types.items() if t in SIXTY_FOUR_BIT}
    if not wide:
        return
    listed = ", ".join(f"{name}: {t}" for name, t in list(wide.items())[:6])
    more = "" if len(wide) <= 6 else f" (and {len(wide) - 6} more)"
    raise X64DisabledError(
        f"{what} uses 64-bit element types ({listed}{more}) but jax_enable_x64 is off, "
        "so JAX would silently truncate them to 32 bits. Enable it before calling: "
        'jax.config.update("jax_enable_x64", True) or JAX_ENABLE_X64=1.'
    )
