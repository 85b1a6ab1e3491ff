"""HDF5 weights: the dtype encodings of docs/bundle-format.md §4, safe reading, atomic writing."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import ml_dtypes
import numpy as np

from .. import dtypes
from ..errors import BundleError, SignatureMismatchError, UnsafeBundleError

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
    arr = np.ascontiguousarray(value, dtype=dtypes.to_numpy(mlir_dtype))
    if mlir_dtype in ("bf16", "f16"):
        return arr.view(np.uint16)
    if mlir_dtype == "i1":
        return arr.astype(np.uint8)
    return arr


def decode(stored: np.ndarray, mlir_dtype: str, where: str) -> np.ndarray:
    """Inverse of `encode`; also accepts native IEEE half for f16 and bool/enum for i1."""
    want = dtypes.to_numpy(mlir_dtype)
    kind = stored.dtype
    if mlir_dtype == "bf16" and kind == np.uint16:
        return stored.view(ml_dtypes.bfloat16)
    if mlir_dtype == "f16" and kind in (np.uint16, np.float16):
        return stored.view(np.float16) if kind == np.uint16 else stored
    if mlir_dtype == "i1" and kind in (np.uint8, np.int8, np.bool_):
        return stored != 0
    if kind == want:
        return stored
    raise SignatureMismatchError(
        f"{where}: stored as {kind} but the manifest says {mlir_dtype} "
        f"(expected stored type {stored_dtype(mlir_dtype)}, see docs/bundle-format.md §4)"
    )


def _refuse_external(f: h5py.File, where: str) -> None:
    def check(name: str) -> None:
        link = f.get(name, getlink=True)
        if isinstance(link, (h5py.ExternalLink, h5py.SoftLink)):
            raise UnsafeBundleError(
                f"{where}: /{name} is an HDF5 {type(link).__name__}; bundles may only hold plain "
                "datasets and groups (external/soft links could read other files)"
            )
        obj = f.get(name)
        if isinstance(obj, h5py.Dataset) and (obj.is_virtual or obj.external):
            raise UnsafeBundleError(
                f"{where}: dataset /{name} uses {'virtual' if obj.is_virtual else 'external'} "
                "storage, which could read other files; bundles hold data inline"
            )

    # visit_links sees soft and external links too; plain visit() silently skips them.
    names: list[str] = []
    f.visit_links(names.append)
    for name in names:
        check(name)


@contextmanager
def open_weights(path: Path) -> Iterator[h5py.File]:
    """Open a weights file read-only after refusing links and external or virtual storage."""
    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError) as e:
        raise BundleError(
            f"{path}: not a readable HDF5 file ({e}); the bundle is corrupt or incomplete, "
            "re-export it"
        ) from e
    try:
        try:
            _refuse_external(f, str(path))
        except (OSError, RuntimeError, KeyError, ValueError) as e:
            raise BundleError(
                f"{path}: the HDF5 structure is unreadable ({e}); re-export it"
            ) from e
        yield f
    finally:
        f.close()


def read_array(
    f: h5py.File, dataset: str, shape: tuple[int, ...], mlir_dtype: str, where: str
) -> np.ndarray:
    """Read one dataset after checking its shape and stored type against the manifest."""
    obj = f.get(dataset)
    if not isinstance(obj, h5py.Dataset):
        found = "nothing" if obj is None else type(obj).__name__
        raise SignatureMismatchError(
            f"{where}: the weights file has {found} at {dataset}, expected a dataset of shape "
            f"{list(shape)} ({mlir_dtype})"
        )
    if tuple(obj.shape) != tuple(shape):
        raise SignatureMismatchError(
            f"{where}: dataset {dataset} has shape {list(obj.shape)}, the manifest says "
            f"{list(shape)} (MLIR order, i.e. Julia dims reversed)"
        )
    try:
        stored = obj.dtype
    except (TypeError, ValueError) as e:
        raise SignatureMismatchError(
            f"{where}: dataset {dataset} has an unsupported HDF5 type ({e})"
        ) from e
    if stored.kind not in "biufc" or stored.fields is not None:
        raise SignatureMismatchError(
            f"{where}: dataset {dataset} is stored as {stored}, expected {stored_dtype(mlir_dtype)}"
        )
    if "dtype" in obj.attrs:
        tag = obj.attrs["dtype"]
        tag = tag.decode() if isinstance(tag, bytes) else str(tag)
        if tag != mlir_dtype:
            raise SignatureMismatchError(
                f"{where}: dataset {dataset} is tagged dtype={tag!r} but the manifest says "
                f"{mlir_dtype!r}"
            )
    # Check the stored type against the manifest before reading any data.
    decode(np.empty((0,), stored), mlir_dtype, f"{where} ({dataset})")
    try:
        data = obj[()]
    except (OSError, ValueError, TypeError) as e:
        raise BundleError(
            f"{where}: cannot read dataset {dataset} ({e}); the file is corrupt"
        ) from e
    return decode(np.asarray(data), mlir_dtype, f"{where} ({dataset})")


def write_weights(
    path: Path,
    arrays: Mapping[str, tuple[np.ndarray, str]],
    *,
    root_attrs: Mapping[str, Any] | None = None,
) -> None:
    """Write `{dataset: (array, mlir_dtype)}` atomically: a temp file, fsync, then rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            for key, val in (root_attrs or {}).items():
                f.attrs[key] = val
            for name, (arr, mlir_dtype) in arrays.items():
                ds = f.create_dataset(name, data=encode(np.asarray(arr), mlir_dtype))
                ds.attrs["dtype"] = mlir_dtype
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
