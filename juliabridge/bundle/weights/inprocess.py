"""libhdf5 in this process (JULIABRIDGE_HDF5_WORKER=0): no protection, for files you trust."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .refusals import refusal

__all__ = ["LocalReader"]


class LocalReader:
    """libhdf5 in this process (JULIABRIDGE_HDF5_WORKER=0)."""

    def __init__(self, path: Path, fd: int) -> None:
        from . import _h5core

        self.path = path
        self._core = _h5core
        try:
            self._reader = _h5core.Reader(str(path), os.dup(fd))
        except _h5core.Problem as e:
            raise refusal(path, None, e.kind, str(e)) from e

    def read(
        self,
        dataset: str,
        shape: tuple[int, ...],
        accept: list[str],
        tag: str | None,
        where: str | None,
        check_memory: Any,
        sink: Any = None,
    ) -> np.ndarray:
        """As `WorkerReader.read` (with `sink`: the pieces in order, nothing kept)."""
        try:
            prep = self._reader.prepare(dataset, shape, accept, tag)
            if sink is not None:
                for at, piece in self._reader.pieces(prep):
                    flat = np.ascontiguousarray(piece).reshape(-1).view(np.uint8)
                    sink(at * prep.dtype.itemsize, memoryview(flat))  # type: ignore[arg-type]
                return np.empty(0, prep.dtype)
            check_memory(prep.nbytes, self.path, where or dataset)
            return self._reader.read(prep)
        except self._core.Problem as e:
            raise refusal(self.path, where, e.kind, str(e)) from e

    def list_datasets(self, groups: list[str]) -> list[dict[str, Any]]:
        try:
            return self._reader.listing(groups)
        except self._core.Problem as e:
            raise refusal(self.path, None, e.kind, str(e)) from e

    def close(self) -> None:
        self._reader.close()
