"""Per-dataset digests of format 2 (docs/bundle-format.md §4.1).

A dataset's digest is the sha256 of its *canonical bytes*: the elements in MLIR row-major order,
little-endian, 16-bit floats as their uint16 bit patterns, Bool as one byte 0/1 and complex
numbers as interleaved (re, im). It depends on the values only, not on how HDF5 stores them
(chunking, compression, a native half type), so a writer and a reader in any language agree.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .. import dtypes


def canonical_bytes(value: np.ndarray, mlir_dtype: str) -> memoryview:
    """The bytes the digest of `value` (of MLIR element type `mlir_dtype`) is taken over.

    No copy is made when `value` is already a C-contiguous little-endian array of that type.
    """
    arr = np.ascontiguousarray(value, dtype=dtypes.to_numpy(mlir_dtype))
    if mlir_dtype == "i1":
        # numpy stores bool as one byte 0/1, which is exactly the canonical form.
        arr = arr.view(np.uint8)
    elif mlir_dtype in ("bf16", "f16"):
        arr = arr.view(np.uint16)
    little = arr.dtype.newbyteorder("<")
    if arr.dtype != little:  # only on a big-endian machine or for a byte-swapped input
        arr = arr.astype(little)
    return arr.reshape(-1).data.cast("B")


def dataset_digest(value: np.ndarray, mlir_dtype: str) -> str:
    """Lowercase hex sha256 of `value`'s canonical bytes.

    Args:
        value: the decoded array (as the reader returns it, MLIR shape).
        mlir_dtype: its manifest dtype, e.g. ``"bf16"``.

    Returns:
        64 lowercase hex digits.
    """
    # hashlib releases the GIL on large buffers, so callers may hash datasets in threads.
    return hashlib.sha256(canonical_bytes(value, mlir_dtype)).hexdigest()
