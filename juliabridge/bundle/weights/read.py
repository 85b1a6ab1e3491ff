"""Reading a weights file: `open_weights` opens it once and `WeightsReader` checks every
requested dataset before reading any, by the pure-Python route (h5parse + fastread) or libhdf5
(a reader process, or this process)."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from ...errors import BundleError, ChecksumError, JuliaBridgeError
from ..files import safefile
from ..files.digest import ALGORITHMS, new_hasher
from . import _worker, fastread, h5parse
from ._worker import WORKER_ENV, use_worker
from .encoding import accepted_stored, decode, stored_dtype
from .inprocess import LocalReader
from .memory import check_memory
from .refusals import file_checksum_error, refusal, refusal_of_python_reader
from .route import FAST_ENV, use_fast_path

__all__ = ["ReadRequest", "WeightsReader", "open_weights"]


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
                raise refusal_of_python_reader(path, None, e) from e
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
        self._lib = LocalReader(self.path, self.fd)
        self.mode = "in-process"

    def _error(self, kind: str, message: str, where: str | None) -> JuliaBridgeError:
        return refusal(self.path, where, kind, message)

    def _verify_file_first(self) -> None:
        """Hash the whole file through the descriptor (for the libhdf5 route and refusals)."""
        if self.file_sha256 is None or self._file_verified:
            return
        try:
            got = fastread.sha256_fd(self.fd, self.size)
        except OSError as e:
            raise BundleError(f"{self.path}: cannot read the file ({e.strerror or e})") from e
        except h5parse.Problem as e:  # the file shrank while it was hashed
            raise refusal(self.path, None, e.kind, str(e)) from e
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

    @property
    def metadata(self) -> h5parse.H5Metadata | None:
        """The pure-Python reader's metadata of the file (None where libhdf5 reads it)."""
        return self._meta

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
            raise refusal_of_python_reader(self.path, r.where, e) from e
        check_memory(plan.nbytes, self.path, r.where)
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
            raise refusal_of_python_reader(self.path, where, e) from e

    def _check_digest(self, r: ReadRequest, raw: np.ndarray) -> None:
        if r.digest is None or r.algorithm is None:
            return
        h = new_hasher(r.algorithm)
        h.update(_little_endian_bytes(raw))
        got = h.hexdigest()
        if got != r.digest:
            raise _dataset_checksum_error(self.path, r, got)

    def _lib_read(
        self, r: ReadRequest, sink: Callable[[int, memoryview], None] | None = None
    ) -> np.ndarray:
        """`r` as stored, by libhdf5 (with `sink`: streamed to it, see `stream`)."""
        return self._lib.read(  # type: ignore[no-any-return]
            r.dataset,
            tuple(r.shape),
            accepted_stored(r.dtype),
            r.dtype,
            r.where,
            check_memory,
            sink=sink,
        )

    def _read_lib(
        self, requests: Sequence[ReadRequest]
    ) -> Iterator[tuple[ReadRequest, np.ndarray]]:
        before = os.fstat(self.fd)
        for r in requests:
            raw = self._lib_read(r)
            self._check_digest(r, raw)
            if self.file_sha256 is not None and _changed(before, os.fstat(self.fd)):
                raise ChecksumError(
                    f"{self.path}: the file changed while it was loaded, so it cannot be "
                    "verified; load it again once nothing writes to it"
                )
            yield r, decode(raw, r.dtype, f"{self.path}: {r.where} ({r.dataset})")

    def stream(self, r: ReadRequest, sink: Callable[[int, memoryview], None]) -> None:
        """Dataset `r` through libhdf5 without keeping it: its stored bytes (native byte
        order, row-major) go to ``sink(offset, bytes)`` in order, and its digest (when `r` has
        one) is checked after the last piece, so a caller keeps nothing it was given unless
        this returns. For sharded loading of datasets the Python reader does not read.

        Raises:
            ChecksumError: the dataset's digest differs, or the file changed meanwhile.
            BundleError: as `read`.
        """
        if self._lib is None:
            self.fallback = self.fallback or f"{r.dataset} is read by libhdf5"
            self._open_lib()
        before = os.fstat(self.fd)
        h = new_hasher(r.algorithm) if r.digest is not None and r.algorithm else None
        stored = stored_dtype(r.dtype)

        def take(at: int, data: memoryview) -> None:
            if h is not None:
                little = sys.byteorder == "little" or stored.itemsize == 1
                h.update(data if little else np.frombuffer(data, stored).byteswap().tobytes())
            sink(at, data)

        self._lib_read(r, take)
        if h is not None and h.hexdigest() != r.digest:
            raise _dataset_checksum_error(self.path, r, h.hexdigest())
        if self.file_sha256 is not None and _changed(before, os.fstat(self.fd)):
            raise ChecksumError(
                f"{self.path}: the file changed while it was loaded, so it cannot be "
                "verified; load it again once nothing writes to it"
            )

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
                raise refusal_of_python_reader(self.path, None, e) from e
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
