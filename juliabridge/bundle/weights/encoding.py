"""The dtype encodings of docs/bundle-format.md §4: how each MLIR element type is stored in HDF5
and read back."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ...errors import SignatureMismatchError
from ...support import dtypes

__all__ = ["accepted_stored", "decode", "encode", "stored_dtype"]

# Types HDF5.jl cannot write portably travel as bit patterns / bytes (spec §4).
_ENCODED: dict[str, np.dtype] = {
    "bf16": np.dtype(np.uint16),
    "f16": np.dtype(np.uint16),
    "i1": np.dtype(np.uint8),
}


def stored_dtype(mlir_dtype: str) -> np.dtype:
    """The numpy dtype a dataset of `mlir_dtype` is stored with."""
    return _ENCODED.get(mlir_dtype, dtypes.to_numpy(mlir_dtype))


def encode(value: np.ndarray, mlir_dtype: str) -> np.ndarray:
    """Array as stored in HDF5: bit patterns for bf16/f16, 0/1 bytes for Bool."""
    arr = np.asarray(value, dtype=dtypes.to_numpy(mlir_dtype))
    # Not np.ascontiguousarray alone: it turns a 0-d array into shape (1,), and a rank-0 value
    # must stay an HDF5 scalar (spec §4).
    arr = np.ascontiguousarray(arr) if arr.ndim else arr.copy()
    if mlir_dtype in ("bf16", "f16"):
        return arr.view(np.uint16)
    if mlir_dtype == "i1":
        return arr.astype(np.uint8)
    return arr


def accepted_stored(mlir_dtype: str) -> list[str]:
    """Native numpy type strings a dataset of `mlir_dtype` may be stored as (spec §4)."""
    kinds = [stored_dtype(mlir_dtype)]
    if mlir_dtype == "f16":
        kinds.append(np.dtype(np.float16))
    if mlir_dtype == "i1":
        kinds += [np.dtype(np.int8), np.dtype(np.bool_)]
    return [k.str for k in kinds]


def decode(stored: np.ndarray, mlir_dtype: str, where: str) -> np.ndarray:
    """Inverse of `encode`; also accepts native IEEE half for f16 and bool/enum for i1."""
    want = dtypes.to_numpy(mlir_dtype)
    kind = stored.dtype
    if mlir_dtype == "bf16" and kind == np.uint16:
        return stored.view(ml_dtypes.bfloat16)
    if mlir_dtype == "f16" and kind in (np.uint16, np.float16):
        return stored.view(np.float16) if kind == np.uint16 else stored
    if mlir_dtype == "i1" and kind in (np.uint8, np.int8, np.bool_):
        raw = stored.view(np.uint8).reshape(-1)
        over = np.flatnonzero(raw > 1)
        if over.size:
            # Spec §4 stores Bool as 0 or 1; another byte would decode to True yet hash
            # (§4.1, over the stored bytes) differently from the True it reads as.
            bad = int(raw[over[0]])
            raise SignatureMismatchError(
                f"{where}: an i1 (Bool) dataset holds the byte {bad}; Bool is stored as 0 or 1 "
                "(docs/bundle-format.md §4). Export the bundle again"
            )
        return stored != 0
    if kind == want:
        return stored
    raise SignatureMismatchError(
        f"{where}: stored as {kind} but the manifest says {mlir_dtype} "
        f"(expected stored type {stored_dtype(mlir_dtype)}, see docs/bundle-format.md §4)"
    )
