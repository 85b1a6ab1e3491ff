"""The inputs npz of an ``export_to_enzymejax`` directory, read without pickle and within bounds.

Reactant writes it with NPZ.jl after reversing each array's dims (Reactant.jl
ext/ReactantNPZExt.jl:9-22), keys ``arr_1..arr_N`` (src/serialization/EnzymeJAX.jl:146-147).
Each member's .npy header is read and checked against the shape and dtype the .py and @main
agree on before a byte of data is read; object dtypes (pickles) are refused, every size is
bounded as for bundle weights, and exactly the declared bytes are read, so a forged header or
a compression bomb cannot make the reader allocate more than the arrays the module takes.
"""

from __future__ import annotations

import lzma
import os
import struct
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..bundle.manifest import MAX_TENSOR_BYTES
from ..bundle.weights import check_memory
from ..errors import BundleError, SignatureMismatchError, UnsafeBundleError
from ..stablehlo import TensorSpec
from ..support import dtypes
from .files import opened

#: Largest .npy header accepted (numpy's own default limit).
MAX_HEADER_BYTES = 10000
#: Central-directory bytes allowed per expected member (a record is 46 bytes plus a name such
#: as ``arr_12.npy`` and a small extra field), checked before zipfile parses the directory, so
#: a directory that lists millions of entries is refused by its size, not read.
CENTRAL_BYTES_PER_MEMBER = 256
#: Members beyond the expected ones that zipfile may still list (to name the stray one).
STRAY_MEMBERS = 16


#: What a corrupt member raises from inside zipfile's decompressors (bz2 raises OSError).
_DECOMPRESSION_ERRORS = (
    zipfile.BadZipFile,
    NotImplementedError,
    RuntimeError,
    zlib.error,
    lzma.LZMAError,
    EOFError,
    OSError,
    ValueError,
)


def _check_directory(fh: BinaryIO, path: Path, expected: int) -> None:
    """Refuse a central directory larger than `expected` members need, before parsing it.

    The end record is found exactly as zipfile finds it (its own reader), so the sizes checked
    are the ones zipfile would then read.
    """
    try:
        end = zipfile._EndRecData(fh)  # type: ignore[attr-defined]
    except (OSError, zipfile.BadZipFile, struct.error):
        end = None
    fh.seek(0)
    if not end:
        return  # not a zip: zipfile.ZipFile says so
    size = int(end[zipfile._ECD_SIZE])  # type: ignore[attr-defined]
    count = int(end[zipfile._ECD_ENTRIES_TOTAL])  # type: ignore[attr-defined]
    # A few members more are left to zipfile, whose listing names the stray member.
    slack = expected + STRAY_MEMBERS
    allowed = CENTRAL_BYTES_PER_MEMBER * slack
    if count > slack or size > allowed:
        raise BundleError(
            f"{path}: its central directory lists {count} entries in {size} bytes, but the "
            f"export has {expected} arguments (one arr_K.npy each, at most {allowed} bytes of "
            "directory); the npz is not the exporter's, refused before reading it"
        )


def _member_error(path: Path, key: str, message: str) -> BundleError:
    return BundleError(f"{path} ({key}.npy): {message}")


def _read_member(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, spec: TensorSpec, path: Path, key: str
) -> np.ndarray:
    want = dtypes.to_numpy(spec.dtype)
    with zf.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                    f, max_header_size=MAX_HEADER_BYTES
                )
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                    f, max_header_size=MAX_HEADER_BYTES
                )
            else:
                raise ValueError(f"unknown .npy version {version}")
        except (SyntaxError, *_DECOMPRESSION_ERRORS) as e:
            raise _member_error(path, key, f"not a readable .npy header ({e})") from e
        except (MemoryError, RecursionError) as e:
            # numpy evaluates the header's dict literal: a few KB of nested unary minus is a
            # MemoryError or RecursionError inside its parser.
            raise _member_error(
                path, key, f"not a readable .npy header (nested too deeply: {type(e).__name__})"
            ) from e
        if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
            raise UnsafeBundleError(
                f"{path} ({key}.npy): dtype {dtype} holds Python objects (a pickle) or records; "
                "juliabridge reads only plain numeric arrays and never unpickles"
            )
        shape = tuple(int(d) for d in shape)
        if shape != spec.shape or dtype.newbyteorder("=") != want.newbyteorder("="):
            raise _member_error(
                path,
                key,
                f"holds {dtype} {list(shape)} but the .py and @main say {spec} "
                f"({want}); the npz does not belong to this export",
            )
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes > MAX_TENSOR_BYTES:
            raise _member_error(path, key, f"declares {nbytes} bytes, over the 256 GiB limit")
        if info.file_size < nbytes:
            raise _member_error(
                path,
                key,
                f"its header declares {nbytes} bytes of data but the member holds only "
                f"{info.file_size} bytes; the npz is truncated or forged",
            )
        check_memory(nbytes, path, f"{key}.npy")
        data = f.read(nbytes)
        if len(data) != nbytes or f.read(1):
            raise _member_error(
                path, key, f"expected {nbytes} bytes of data after the header, found another size"
            )
    if dtype.kind == "b":
        # A Bool is one byte, 0 or 1 (as in bundle weights): another byte reads as True but
        # computes as False on XLA.
        raw = np.frombuffer(data, dtype=np.uint8)
        bad = np.flatnonzero(raw > 1)
        if bad.size:
            # SignatureMismatchError, as bundle weights (bundle/weights decode): both routes
            # judge a stored Bool byte alike.
            raise SignatureMismatchError(
                f"{path} ({key}.npy): Bool element {int(bad[0])} is stored as byte "
                f"{int(raw[bad[0]])}; a Bool is stored as 0 or 1, so the npz is corrupt or forged"
            )
    flat = np.frombuffer(data, dtype=dtype)
    arr = flat.reshape(shape, order="F" if fortran else "C")
    # Not np.ascontiguousarray: it makes a 0-d array (a scalar argument) 1-d.
    return arr.astype(want, order="C", copy=False)


def read_inputs(path: Path, keys: Sequence[str], specs: Sequence[TensorSpec]) -> list[np.ndarray]:
    """Read `keys` from the npz at `path`, each checked against its spec (MLIR shape, dtype).

    Raises:
        BundleError: not a zip of .npy members, a member missing, extra or disagreeing with
            its spec, or larger than the bounds.
        UnsafeBundleError: a symlink, not a regular file, or a member with an object dtype.
        SignatureMismatchError: a Bool stored as a byte other than 0 or 1 (as bundle weights).
    """
    with opened(path, "the inputs npz") as (fd, _), os.fdopen(os.dup(fd), "rb") as fh:
        _check_directory(fh, path, len(keys))
        try:
            zf = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise BundleError(f"{path}: not an npz (zip) file ({e})") from e
        with zf:
            members = {}
            wanted = set(keys)
            for info in zf.infolist():
                name = info.filename
                if not name.endswith(".npy") or name[:-4] not in wanted or name in members:
                    more = ", ..." if len(keys) > 4 else ""
                    raise BundleError(
                        f"{path}: unexpected member {name!r}; Reactant writes exactly "
                        f"{', '.join(k + '.npy' for k in keys[:4])}{more}"
                    )
                members[name] = info
            total = sum(
                int(np.prod(s.shape, dtype=np.int64)) * dtypes.to_numpy(s.dtype).itemsize
                for s in specs
            )
            check_memory(total, path, "the example inputs")
            out = []
            for key, spec in zip(keys, specs):
                found = members.get(key + ".npy")
                if found is None:
                    raise BundleError(f"{path}: no {key}.npy, which the .py's load_inputs reads")
                try:
                    out.append(_read_member(zf, found, spec, path, key))
                except _DECOMPRESSION_ERRORS as e:
                    raise _member_error(path, key, f"cannot be decompressed ({e})") from e
    return out


__all__ = ["MAX_HEADER_BYTES", "read_inputs"]
