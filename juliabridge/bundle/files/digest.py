"""Per-dataset digests (docs/bundle-format.md §4.1): BLAKE3 in format 3, sha256 in format 2.

A dataset's digest is taken over its *canonical bytes*: the elements in MLIR row-major order,
little-endian, 16-bit floats as their uint16 bit patterns, Bool as one byte 0/1 and complex
numbers as interleaved (re, im). It depends on the values only, not on how HDF5 stores them
(chunking, compression, a native half type), so a writer and a reader in any language agree.

Format 3 uses BLAKE3 because the digest is most of the cost of a verified load: on one core it
hashes about 3.5x faster than sha256 does with the CPU's SHA instructions, so reading and
hashing together stay within the time of a plain read and copy (docs/benchmarks.md, "Loading").
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

import blake3
import numpy as np

from ...errors import BundleError
from ...support import dtypes

#: The per-dataset digest algorithms (spec §4.1), by the key they have in the manifest.
ALGORITHMS = ("sha256", "blake3")


class Hasher(Protocol):
    """What hashlib's and blake3's incremental hashers share."""

    def update(self, data: Any, /) -> Any: ...

    def hexdigest(self) -> str: ...


def new_hasher(algorithm: str) -> Hasher:
    """A fresh incremental hasher of `algorithm` ("blake3" or "sha256").

    Both release the GIL while hashing a large buffer, so datasets may be hashed in threads.

    Raises:
        BundleError: `algorithm` is not one of ALGORITHMS.
    """
    if algorithm == "blake3":
        # One thread per hasher: callers already hash datasets in parallel.
        return blake3.blake3()
    if algorithm == "sha256":
        return hashlib.sha256()
    raise BundleError(
        f"unknown dataset digest algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}"
    )


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


def dataset_digest(value: np.ndarray, mlir_dtype: str, algorithm: str = "blake3") -> str:
    """Lowercase hex digest of `value`'s canonical bytes.

    Args:
        value: the decoded array (as the reader returns it, MLIR shape).
        mlir_dtype: its manifest dtype, e.g. ``"bf16"``.
        algorithm: ``"blake3"`` (format 3, what writers write) or ``"sha256"`` (format 2).

    Returns:
        64 lowercase hex digits.

    Raises:
        BundleError: `algorithm` is unknown.
    """
    h = new_hasher(algorithm)
    h.update(canonical_bytes(value, mlir_dtype))
    return h.hexdigest()
