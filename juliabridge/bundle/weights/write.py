"""Writing a weights file atomically, each array in its stored encoding (spec §4)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import JuliaBridgeError, SaveError
from ..files import atomic
from .encoding import encode

__all__ = ["write_weights"]


def write_weights(
    path: Path,
    arrays: Mapping[str, tuple[np.ndarray, str]],
    *,
    root_attrs: Mapping[str, Any] | None = None,
) -> None:
    """Write `{dataset: (array, mlir_dtype)}` atomically: a temp file, fsync, then rename.

    The temporary is ``.NAME.jbtmp~HOST~PID~RANDOM`` next to `path`; one left by a killed
    writer is removed by the next write to `path` (see juliabridge/bundle/files/atomic.py). Readers
    never see a partial file under `path`: it holds the old content or the new, nothing else.
    """
    import h5py  # only writing needs it in this process

    path = Path(path)
    if path.is_dir():
        raise SaveError(
            f"{path}: is a directory; pass the path of the file to write, e.g. "
            f"{path / 'finetuned.h5'}"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.clean_stale(path)
        tmp = atomic.temp_path(path)
        atomic.create_file(tmp)
    except OSError as e:
        raise SaveError(
            f"{path}: cannot create a file in {path.parent} ({e.strerror or e}); check that "
            "the directory exists and is writable"
        ) from e
    try:
        with h5py.File(tmp, "w") as f:
            for key, val in (root_attrs or {}).items():
                f.attrs[key] = val
            for name, (arr, mlir_dtype) in arrays.items():
                ds = f.create_dataset(name, data=encode(np.asarray(arr), mlir_dtype))
                ds.attrs["dtype"] = mlir_dtype
        atomic.fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and not isinstance(e, JuliaBridgeError):
            raise SaveError(
                f"{path}: writing the weights failed ({e}); the previous file, if any, is "
                "unchanged. Check free space and permissions"
            ) from e
        raise
    atomic.fsync_dir(path.parent)
