"""HDF5 weights: the dtype encodings of docs/bundle-format.md §4, safe reading, atomic writing.

Reading takes one of two routes, chosen per file:

- **in this process, without libhdf5** (the default whenever it applies): ``h5parse`` reads
  the file's metadata in pure Python (bounded, it cannot crash or hang the caller) and
  ``fastread`` reads the datasets with ``preadv`` into aligned buffers, hashing them as they
  are read, in parallel;
- **libhdf5 in a sandboxed reader process** (``_worker`` / ``_h5core``) for files the Python
  reader does not parse (chunked or compressed data, unusual structures), or when
  ``JULIABRIDGE_HDF5_FASTPATH=0``; ``JULIABRIDGE_HDF5_WORKER=0`` runs libhdf5 in this process
  instead (no protection; for files you trust).

Either way the file is opened once, without following symlinks, and everything (metadata,
data, checksums) is read through that one descriptor.

weights/ owns the HDF5 routes: this module, h5parse and lookup3 (the pure-Python metadata
reader and its checksum), fastread (the preadv reads), _worker and _h5core (the libhdf5
reader process). It may import bundle/files/, errors, dtypes and childproc; it does not read
the manifest (callers pass what to check).
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import ml_dtypes
import numpy as np

from ... import dtypes
from ...errors import (
    BundleError,
    ChecksumError,
    JuliaBridgeError,
    SaveError,
    SignatureMismatchError,
    UnsafeBundleError,
)
from ..files import atomic, safefile
from ..files.digest import ALGORITHMS, new_hasher
from . import _worker, fastread, h5parse
from ._worker import DEFAULT_TIMEOUT, TIMEOUT_ENV, WORKER_ENV, use_worker

__all__ = [
    "DEFAULT_TIMEOUT",
    "FAST_ENV",
    "TIMEOUT_ENV",
    "WORKER_ENV",
    "ReadRequest",
    "WeightsReader",
    "accepted_stored",
    "decode",
    "encode",
    "open_weights",
    "stored_dtype",
    "use_fast_path",
    "use_worker",
    "write_weights",
]

#: "0" sends every file to libhdf5 (in the reader process), skipping the Python reader.
FAST_ENV = "JULIABRIDGE_HDF5_FASTPATH"

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


_ADVICE = {
    "unsafe": "Refused because it could make the reader open other files; "
    "re-export the bundle with JuliaBridge.export_lux or juliabridge.save_params",
    "mismatch": "The weights file does not belong to this manifest; re-export the bundle",
    "corrupt": "The file is corrupt or truncated; download or export the bundle again",
    "limit": "Re-export the bundle (JuliaBridge.export_lux and juliabridge.save_params write "
    "complete, inline datasets)",
    "internal": "This is a juliabridge bug; please report it together with the file",
}
_FAST_HINT = (
    f" (juliabridge's own HDF5 reader found this; if libhdf5 reads the file, please report it, "
    f"and set {FAST_ENV}=0 meanwhile)"
)


def _error(path: Path, where: str | None, kind: str, message: str) -> JuliaBridgeError:
    cls = {"unsafe": UnsafeBundleError, "mismatch": SignatureMismatchError}.get(kind, BundleError)
    lead = f"{path}: {where}: " if where else f"{path}: "
    return cls(f"{lead}{message.rstrip('.')}. {_ADVICE.get(kind, _ADVICE['corrupt'])}")


def _fast_error(path: Path, where: str | None, e: h5parse.Problem) -> JuliaBridgeError:
    err = _error(path, where, e.kind, str(e))
    if e.kind == "corrupt":
        return type(err)(f"{err}{_FAST_HINT}")
    return err


# Kept under their old names: tests and tools stop or inspect the pool through this module.
_timeout = _worker.timeout
_IDLE = _worker.IDLE
_stop_idle = _worker.stop_idle


def use_fast_path() -> bool:
    """Whether the pure-Python metadata reader is tried first (the default)."""
    off = os.environ.get(FAST_ENV, "1").strip().lower() in ("0", "false", "no", "off")
    return fastread.AVAILABLE and not off


@dataclass(frozen=True)
class ReadRequest:
    """One dataset to read: its name, the manifest's shape and dtype, a label for messages and
    the digest its stored bytes must have (hex, by `algorithm`, spec §4.1; None: not checked
    on its own)."""

    dataset: str
    shape: tuple[int, ...]
    dtype: str
    where: str
    digest: str | None = None
    #: The digest's algorithm, "blake3" (format 3) or "sha256" (format 2); required with it.
    algorithm: str | None = None

    def __post_init__(self) -> None:
        if self.digest is not None and self.algorithm not in ALGORITHMS:
            raise BundleError(
                f"{self.where} ({self.dataset}): a digest needs its algorithm, one of "
                f"{', '.join(ALGORITHMS)}; got {self.algorithm!r}"
            )


def _physical_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _check_memory(nbytes: int, path: Path, what: str) -> None:
    total = _physical_memory()
    if total is not None and nbytes > total:
        raise BundleError(
            f"{path}: {what} needs {nbytes} bytes but this machine has {total} bytes of memory; "
            "the bundle is too large for it (or its sizes are forged)"
        )


def file_checksum_error(path: Path, got: str, expected: str) -> ChecksumError:
    """The error for a file whose sha256 differs from the manifest's."""
    return ChecksumError(
        f"{path}: sha256 is {got} but manifest.json records {expected}; the file was modified "
        "or corrupted. Re-export the bundle, or pass verify_checksums=False if you changed it "
        "on purpose."
    )


def _dataset_checksum_error(path: Path, r: ReadRequest, got: str) -> ChecksumError:
    return ChecksumError(
        f"{path}: {r.where} ({r.dataset}): the {r.algorithm} of its stored bytes is {got} but "
        f"manifest.json records {r.digest}; the file was modified or corrupted. Re-export the "
        "bundle, or pass verify_checksums=False if you changed it on purpose."
    )


def _little_endian_bytes(raw: np.ndarray) -> memoryview:
    """The bytes a per-dataset digest covers: the stored values, little-endian, row-major."""
    arr = np.ascontiguousarray(raw)
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and np.little_endian is False):
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def _changed(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_size, a.st_mtime_ns, a.st_ctime_ns, a.st_ino) != (
        b.st_size,
        b.st_mtime_ns,
        b.st_ctime_ns,
        b.st_ino,
    )


def _outside_stacklevel(frame: FrameType) -> int:
    """The `stacklevel` that points a warning issued in `frame` at the first frame outside
    juliabridge (and contextlib, which `open_weights`' `with` passes through)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    skip = (package + os.sep, os.path.abspath(contextlib.__file__))
    level = 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(skip):
        frame = frame.f_back
        level += 1
    return level


class _LocalReader:
    """libhdf5 in this process (JULIABRIDGE_HDF5_WORKER=0)."""

    def __init__(self, path: Path, fd: int) -> None:
        from . import _h5core

        self.path = path
        self._core = _h5core
        try:
            self._reader = _h5core.Reader(str(path), os.dup(fd))
        except _h5core.Problem as e:
            raise _error(path, None, e.kind, str(e)) from e

    def read(
        self,
        dataset: str,
        shape: tuple[int, ...],
        accept: list[str],
        tag: str | None,
        where: str | None,
        check_memory: Any,
    ) -> np.ndarray:
        try:
            prep = self._reader.prepare(dataset, shape, accept, tag)
            check_memory(prep.nbytes, self.path, where or dataset)
            return self._reader.read(prep)
        except self._core.Problem as e:
            raise _error(self.path, where, e.kind, str(e)) from e

    def list_datasets(self, groups: list[str]) -> list[dict[str, Any]]:
        try:
            return self._reader.listing(groups)
        except self._core.Problem as e:
            raise _error(self.path, None, e.kind, str(e)) from e

    def close(self) -> None:
        self._reader.close()


class WeightsReader:
    """An open weights file; every dataset is checked before any of its data is read.

    `file_sha256`, when given, is the sha256 the whole file must have (bundle format 1): it is
    computed over the bytes read, in the same pass. A request's `sha256` is checked over
    that dataset's stored bytes as they are read.
    """

    def __init__(self, path: Path, fd: int, *, file_sha256: str | None = None) -> None:
        self.path = path
        self.fd = fd
        self.stat = os.fstat(fd)
        self.size = self.stat.st_size
        self.file_sha256 = file_sha256
        #: "python" (h5parse + preadv), "process" (libhdf5 sandboxed) or "in-process".
        self.mode = "python"
        #: Why the Python reader handed the file to libhdf5 (None when it did not).
        self.fallback: str | None = None
        self._meta: h5parse.H5Metadata | None = None
        self._lib: Any = None
        self._file_verified = False
        if use_fast_path():
            try:
                self._meta = h5parse.open_metadata(fd, self.size)
            except h5parse.Unsupported as e:
                self.fallback = str(e)
            except h5parse.Problem as e:
                self._verify_file_first()
                raise _fast_error(path, None, e) from e
        else:
            self.fallback = f"{FAST_ENV}=0"
        if self._meta is None:
            self._open_lib()

    @property
    def isolated(self) -> bool:
        """Whether libhdf5 (if used at all) runs outside this process."""
        return self.mode != "in-process"

    # --- the libhdf5 route -----------------------------------------------------------------

    def _open_lib(self) -> None:
        self._meta = None
        # Checksum first: a corrupt download should say so before libhdf5 parses it.
        self._verify_file_first()
        if use_worker():
            try:
                self._lib = _worker.WorkerReader(self.path, self.fd, self._error)
                self.mode = "process"
                return
            except OSError as e:  # no interpreter to start, too many processes, ...
                warnings.warn(
                    f"juliabridge could not start its HDF5 reader process ({e}); reading "
                    f"{self.path} in this process instead (set {WORKER_ENV}=0 to do so without "
                    "this warning)",
                    RuntimeWarning,
                    stacklevel=_outside_stacklevel(sys._getframe()),
                )
        self._lib = _LocalReader(self.path, self.fd)
        self.mode = "in-process"

    def _error(self, kind: str, message: str, where: str | None) -> JuliaBridgeError:
        return _error(self.path, where, kind, message)

    def _verify_file_first(self) -> None:
        """Hash the whole file through the descriptor (for the libhdf5 route and refusals)."""
        if self.file_sha256 is None or self._file_verified:
            return
        try:
            got = fastread.sha256_fd(self.fd, self.size)
        except OSError as e:
            raise BundleError(f"{self.path}: cannot read the file ({e.strerror or e})") from e
        except h5parse.Problem as e:  # the file shrank while it was hashed
            raise _error(self.path, None, e.kind, str(e)) from e
        if got != self.file_sha256:
            raise file_checksum_error(self.path, got, self.file_sha256)
        self._file_verified = True

    # --- reading ---------------------------------------------------------------------------

    def read(self, requests: Sequence[ReadRequest]) -> Iterator[tuple[ReadRequest, np.ndarray]]:
        """(request, decoded array) for every request, in no particular order.

        Every shape, type and storage check of every request runs before any data is read;
        digests are verified before an array is yielded (the whole-file digest before the
        first one).
        """
        if self._meta is not None:
            try:
                plans = [(r, self._plan(r)) for r in requests]
            except h5parse.Unsupported as e:
                self.fallback = str(e)
                self._open_lib()
            else:
                yield from self._read_fast(plans)
                return
        yield from self._read_lib(requests)

    def _metadata(self) -> h5parse.H5Metadata:
        if self._meta is None:
            raise BundleError(f"{self.path}: the HDF5 metadata was not read before the data")
        return self._meta

    def _plan(self, r: ReadRequest) -> h5parse.Plan:
        try:
            plan = self._metadata().plan(
                r.dataset, tuple(r.shape), accepted_stored(r.dtype), r.dtype
            )
        except h5parse.Problem as e:
            self._verify_file_first()
            raise _fast_error(self.path, r.where, e) from e
        _check_memory(plan.nbytes, self.path, r.where)
        return plan

    def _read_fast(
        self, plans: list[tuple[ReadRequest, h5parse.Plan]]
    ) -> Iterator[tuple[ReadRequest, np.ndarray]]:
        meta = self._metadata()
        items = [fastread.Item(r, p, r.digest, r.algorithm or "blake3") for r, p in plans]
        try:
            if self.file_sha256 is not None and not self._file_verified:
                got = fastread.read_whole_file(
                    self.fd, self.size, items, meta.parsed, self.file_sha256
                )
                self._file_verified = True
                results: Iterator[tuple[Any, np.ndarray]] = iter(got)
                for r, raw in results:
                    self._check_digest(r, raw)
                    yield r, decode(raw, r.dtype, f"{self.path}: {r.where} ({r.dataset})")
                return
            for r, raw in fastread.read_parallel(self.fd, items):
                yield r, decode(raw, r.dtype, f"{self.path}: {r.where} ({r.dataset})")
        except fastread.DigestMismatch as e:
            if e.key is None:  # the whole-file digest, compared only when there is one
                raise file_checksum_error(self.path, e.got, self.file_sha256 or "") from None
            raise _dataset_checksum_error(self.path, e.key, e.got) from None
        except fastread.FileChanged as e:
            raise ChecksumError(
                f"{self.path}: the file changed while it was loaded (its bytes at offset "
                f"{e.offset} differ from those parsed a moment earlier), so it cannot be "
                "verified; load it again once nothing writes to it"
            ) from None
        except OSError as e:  # e.g. EIO from a failing disk
            raise BundleError(
                f"{self.path}: cannot read the file ({e.strerror or e}); check the disk"
            ) from e
        except h5parse.Problem as e:
            key = getattr(e, "key", None)
            where = f"{key.where} ({key.dataset})" if isinstance(key, ReadRequest) else None
            raise _fast_error(self.path, where, e) from e

    def _check_digest(self, r: ReadRequest, raw: np.ndarray) -> None:
        if r.digest is None or r.algorithm is None:
            return
        h = new_hasher(r.algorithm)
        h.update(_little_endian_bytes(raw))
        got = h.hexdigest()
        if got != r.digest:
            raise _dataset_checksum_error(self.path, r, got)

    def _read_lib(
        self, requests: Sequence[ReadRequest]
    ) -> Iterator[tuple[ReadRequest, np.ndarray]]:
        before = os.fstat(self.fd)
        for r in requests:
            raw = self._lib.read(
                r.dataset,
                tuple(r.shape),
                accepted_stored(r.dtype),
                r.dtype,
                r.where,
                _check_memory,
            )
            self._check_digest(r, raw)
            if self.file_sha256 is not None and _changed(before, os.fstat(self.fd)):
                raise ChecksumError(
                    f"{self.path}: the file changed while it was loaded, so it cannot be "
                    "verified; load it again once nothing writes to it"
                )
            yield r, decode(raw, r.dtype, f"{self.path}: {r.where} ({r.dataset})")

    def read_array(
        self, dataset: str, shape: tuple[int, ...], mlir_dtype: str, where: str
    ) -> np.ndarray:
        """Dataset `dataset`, checked against `shape`/`mlir_dtype`, decoded (spec §4)."""
        for _, arr in self.read([ReadRequest(dataset, tuple(shape), mlir_dtype, where)]):
            return arr
        raise AssertionError("unreachable")

    def list_datasets(self, groups: list[str]) -> list[dict[str, Any]]:
        """name, shape, dtype (numpy str), tag and nbytes of every dataset under `groups`."""
        if self._meta is not None:
            try:
                return self._meta.listing(groups)
            except h5parse.Unsupported as e:
                self.fallback = str(e)
                self._open_lib()
            except h5parse.Problem as e:
                raise _fast_error(self.path, None, e) from e
        return self._lib.list_datasets(groups)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Release the reader process (if any); the descriptor belongs to whoever opened it."""
        if self._lib is not None:
            self._lib.close()
            self._lib = None


@contextmanager
def open_weights(
    path: Path,
    *,
    fd: int | None = None,
    file_sha256: str | None = None,
    what: str = "the weights file",
) -> Iterator[WeightsReader]:
    """Open a weights file (refusing symlinks) for `read`/`read_array` after refusing links and
    external/virtual storage inside it.

    `fd` is an already open descriptor of `path` (it stays open). The Python reader handles the
    metadata when it can; otherwise libhdf5 runs in a separate process unless
    JULIABRIDGE_HDF5_WORKER=0, so a file that makes it hang or crash ends in a BundleError
    instead of taking this process down.
    """
    path = Path(path)
    own = fd is None
    if fd is None:
        fd, _ = safefile.open_regular(path, what)
    try:
        reader = WeightsReader(path, fd, file_sha256=file_sha256)
        try:
            yield reader
        finally:
            reader.close()
    finally:
        if own:
            os.close(fd)


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
