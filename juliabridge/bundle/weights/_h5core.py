"""The only code that hands a bundle's HDF5 bytes to libhdf5: checks first, then plain reads.

libhdf5 is a large C library and a crafted or corrupt file can make it loop forever (seen while
fuzzing: a flipped byte in a variable-length string attribute) or, in older releases, crash.
So juliabridge runs this module in a separate process (``python -I _h5core.py SOCKET``, with
a scrubbed environment and a neutral working directory, spoken to over pipes by
``_worker.py``), where a hang is cut off by a timeout and a crash is reported as an error
instead of taking the caller down. The caller opens the file itself and hands the open file
descriptor over a Unix socket, so this process reads exactly the file the caller checked (no
second lookup by name). Most files never get here: ``h5parse.py`` reads their metadata in
the caller; this is for what it does not parse (chunked and compressed data, unusual
structures). The same functions also run in-process when the reader process is switched off
(``JULIABRIDGE_HDF5_WORKER=0``).

It imports only the standard library, numpy and h5py (no juliabridge, no jax), so the worker
starts in a fraction of a second. Refusals are `Problem`s carrying a kind that ``weights.py``
maps to juliabridge's exception classes:

- ``unsafe``: links, external raw storage or virtual datasets (they could read other files);
- ``mismatch``: a dataset's presence, shape or stored type differs from what the caller expects;
- ``corrupt``: libhdf5 cannot read the structure or the data;
- ``limit``: sizes that do not add up (data never written, so only HDF5 fill values, more
  stored bytes claimed than the file holds, compression beyond what deflate can reach, a
  chunk that inflates past its size).

Nothing is allocated for a dataset before its shape, type and stored size are checked, and no
deflate-compressed chunk reaches libhdf5's inflater before it was inflated here with a bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import sys
import threading
import time
import traceback
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import h5py
import numpy as np
from h5py import h5a, h5d, h5l, h5o, h5t

#: Links (groups, datasets, named types) a weights file may hold.
MAX_OBJECTS = 1 << 20
#: Group nesting depth; a manifest path has at most 64 steps, plus /params or /state.
MAX_GROUP_DEPTH = 80
#: Largest decompressed/stored ratio accepted for a compressed dataset. deflate cannot exceed
#: 1032:1, so a larger claim means forged chunk sizes or a decompression bomb.
MAX_EXPANSION = 1100
#: All datasets read from one file together may expand to at most this many times the file's
#: size plus EXPANSION_SLACK: compression is allowed, a decompression bomb is not.
EXPANSION_FACTOR = 16
EXPANSION_SLACK = 256 << 20
#: A chunk may hold at most this many times its dataset's bytes plus CHUNK_SLACK: a chunk
#: larger than its dataset needs is never useful, and it is what a one-chunk decompression bomb
#: claims so that its inflation passes the per-chunk bound (h5py picks chunks no larger than
#: the dataset; a small dataset may keep a chunk shape of a few KiB written for larger ones).
CHUNK_FACTOR = 4
CHUNK_SLACK = 1 << 20


def chunk_too_large(name: str, chunk_bytes: int, nbytes: int) -> str | None:
    """Why a chunk of `chunk_bytes` is refused for a dataset of `nbytes`, or None."""
    if chunk_bytes <= CHUNK_FACTOR * nbytes + CHUNK_SLACK:
        return None
    return (
        f"dataset {name} is stored in chunks of {chunk_bytes} bytes for {nbytes} bytes of "
        f"data, more than {CHUNK_FACTOR} times its size plus {CHUNK_SLACK >> 20} MiB; such a "
        "chunk is forged (a decompression bomb's), so it is not inflated. Write the weights "
        "with chunks no larger than the dataset (or uncompressed)"
    )


#: HDF5 filters this reader applies (all built into libhdf5/h5py, none loaded as a plugin).
FILTERS = {1: "deflate", 2: "shuffle", 3: "fletcher32", 32000: "lzf"}
COMPRESSING = frozenset({1, 32000})
#: Bytes per piece when streaming a dataset out of the worker.
SLAB_BYTES = 1 << 26
MAX_TAG_BYTES = 64


class Problem(Exception):
    """A refusal or read failure; `kind` is unsafe, mismatch, corrupt or limit."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _text(name: bytes | str) -> str:
    return name.decode("utf-8", "backslashreplace") if isinstance(name, bytes) else name


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:300]}"


@dataclass
class Prepared:
    """A dataset whose shape, type and storage were checked; nothing read yet."""

    name: str
    dataset: h5py.Dataset
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    tag: str | None
    chunk_bytes: int = 0
    early: bool = False


def _fd_path(fd: int) -> str | None:
    """A name under which libhdf5 opens the very file `fd` is open on (no lookup by path)."""
    for template in ("/proc/self/fd/{}", "/dev/fd/{}"):
        name = template.format(fd)
        if os.path.exists(name):
            return name
    return None


class Reader:
    """One weights file opened read-only; its structure is checked on open.

    `fd`, when given, is an open descriptor of the file (the caller's, passed over a socket):
    libhdf5 then reads that very file, whatever `path` names by now.
    """

    def __init__(self, path: str, fd: int | None = None) -> None:
        self.path = path
        self.fd = fd
        try:
            if fd is not None:
                self.size = os.fstat(fd).st_size
                name = _fd_path(fd)
                source: Any = name if name is not None else os.fdopen(fd, "rb", closefd=False)
            else:
                self.size = os.stat(path).st_size
                source = path
            self.file = h5py.File(source, "r", locking=False)
        except (OSError, ValueError, RuntimeError, TypeError) as e:
            if fd is not None:
                os.close(fd)
            raise Problem("corrupt", f"not a readable HDF5 file ({_short(e)})") from e
        self._storage: dict[str, int] = {}
        self._expanded: dict[str, int] = {}
        try:
            self.datasets = self._scan()
        except Problem:
            self.close()
            raise
        except Exception as e:
            self.close()
            raise Problem("corrupt", f"the HDF5 structure is unreadable ({_short(e)})") from e

    def close(self) -> None:
        """Close the file (idempotent) and the descriptor it was opened from."""
        with contextlib.suppress(Exception):  # closing a corrupt file may itself fail
            self.file.close()
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    # --- structure ---------------------------------------------------------------------------

    def _scan(self) -> list[str]:
        """Walk every link without recursion; refuse anything that could reach another file."""
        root = self.file.id
        info = h5o.get_info(root)
        seen = {(info.fileno, info.addr)}
        stack: list[tuple[Any, str, int]] = [(root, "", 0)]
        datasets: list[str] = []
        count = 0
        while stack:
            gid, prefix, depth = stack.pop()
            names: list[bytes] = []
            gid.links.iterate(names.append)
            for raw in names:
                count += 1
                if count > MAX_OBJECTS:
                    raise Problem(
                        "limit", f"more than {MAX_OBJECTS} links; not a juliabridge weights file"
                    )
                full = f"{prefix}/{_text(raw)}"
                kind = gid.links.get_info(raw).type
                if kind == h5l.TYPE_SOFT:
                    raise Problem(
                        "unsafe",
                        f"{full} is an HDF5 soft link; weights files hold plain groups and "
                        "datasets only",
                    )
                if kind == h5l.TYPE_EXTERNAL:
                    raise Problem(
                        "unsafe",
                        f"{full} is an HDF5 external link, which would read another file; "
                        "weights files hold plain groups and datasets only",
                    )
                if kind != h5l.TYPE_HARD:
                    raise Problem(
                        "unsafe",
                        f"{full} is a user-defined HDF5 link (type {kind}); weights files hold "
                        "plain groups and datasets only",
                    )
                oid = h5o.open(gid, raw)
                oinfo = h5o.get_info(oid)
                if oinfo.type == h5o.TYPE_GROUP:
                    key = (oinfo.fileno, oinfo.addr)
                    if key in seen:
                        continue  # a second hard link to a group: its content is checked once
                    seen.add(key)
                    if depth + 1 > MAX_GROUP_DEPTH:
                        raise Problem(
                            "limit", f"{full}: groups nest deeper than {MAX_GROUP_DEPTH} levels"
                        )
                    stack.append((oid, full, depth + 1))
                elif oinfo.type == h5o.TYPE_DATASET:
                    _check_storage_kind(oid, full)
                    datasets.append(full)
        return datasets

    # --- datasets ----------------------------------------------------------------------------

    def prepare(
        self, name: str, shape: tuple[int, ...] | None, accept: list[str] | None, tag: str | None
    ) -> Prepared:
        """Check dataset `name` against the expected shape and stored types; read nothing."""
        try:
            name.encode("utf-8")
            obj = self.file.get(name)
        except UnicodeError as e:
            raise Problem("mismatch", f"{name!r} is not a valid HDF5 path") from e
        except Exception as e:
            raise Problem("corrupt", f"cannot open {name} ({_short(e)})") from e
        want = "" if shape is None else f" of shape {list(shape)}"
        if not isinstance(obj, h5py.Dataset):
            found = "nothing" if obj is None else f"a {type(obj).__name__}"
            raise Problem("mismatch", f"the file has {found} at {name}, expected a dataset{want}")
        try:
            got_shape = obj.shape
        except Exception as e:
            raise Problem("corrupt", f"{name}: unreadable dataspace ({_short(e)})") from e
        if got_shape is None:
            raise Problem("mismatch", f"{name} has an empty (null) dataspace, expected data{want}")
        got_shape = tuple(int(d) for d in got_shape)
        if shape is not None and got_shape != tuple(shape):
            raise Problem(
                "mismatch",
                f"dataset {name} has shape {list(got_shape)}, expected {list(shape)} (MLIR "
                "order, i.e. Julia dims reversed)",
            )
        try:
            dt = obj.dtype
        except Exception as e:
            raise Problem(
                "mismatch", f"dataset {name} has an HDF5 type numpy cannot represent ({e})"
            ) from e
        wanted = _names(accept, tag)
        if dt.kind not in "biufc" or dt.fields is not None or dt.subdtype is not None:
            raise Problem("mismatch", f"dataset {name} is stored as {dt}, expected {wanted}")
        native = dt.newbyteorder("=")
        if accept is not None and native.str not in accept:
            raise Problem(
                "mismatch", f"dataset {name} is stored as {native.name}, expected {wanted}"
            )
        found_tag = _read_tag(obj, name)
        if tag is not None and found_tag is None:  # spec §4: every dataset carries it
            raise Problem("mismatch", f"dataset {name} has no 'dtype' attribute, expected {tag!r}")
        if tag is not None and found_tag != tag:
            raise Problem(
                "mismatch", f"dataset {name} is tagged dtype={found_tag!r}, expected {tag!r}"
            )
        nbytes = native.itemsize
        for d in got_shape:
            nbytes *= d
        chunk = self._check_storage(obj, name, nbytes)
        chunk_bytes = native.itemsize
        for c in chunk or ():
            chunk_bytes *= int(c)
        too_large = chunk_too_large(name, chunk_bytes, nbytes) if chunk else None
        if too_large:
            raise Problem("limit", too_large)
        try:
            dcpl = obj.id.get_create_plist()
            early = dcpl.get_layout() == h5d.COMPACT or (
                dcpl.get_alloc_time() == h5d.ALLOC_TIME_EARLY
            )
        except Exception as e:
            raise Problem("corrupt", f"{name}: unreadable storage layout ({_short(e)})") from e
        prep = Prepared(
            name, obj, got_shape, native, nbytes, found_tag, chunk_bytes if chunk else 0, early
        )
        if chunk and nbytes:
            self._check_inflation(prep)
        return prep

    def _check_inflation(self, prep: Prepared) -> None:
        """Inflate every deflate-compressed chunk with a bound before libhdf5 may inflate it.

        libhdf5's deflate filter grows its buffer until a chunk is fully inflated, however far
        past the chunk's size that is; here each chunk's output is counted as it inflates, in
        pieces of at most 1 MiB, and a chunk that would exceed its size is refused. (lzf is
        bounded by lzf's own ratio, the 1100:1 dataset ratio and this process's heap cap.)
        """
        dsid = prep.dataset.id
        try:
            dcpl = dsid.get_create_plist()
            codes = [int(dcpl.get_filter(i)[0]) for i in range(dcpl.get_nfilters())]
            if 1 not in codes:
                return
            if codes.count(1) > 1 or 32000 in codes:
                raise Problem(
                    "limit", f"dataset {prep.name} applies more than one compressing filter"
                )
            deflate_at = codes.index(1)
            after = codes[deflate_at + 1 :]  # applied after deflate when writing: undone first
            n = int(dsid.get_num_chunks())
        except Problem:
            raise
        except Exception as e:
            raise Problem("corrupt", f"{prep.name}: unreadable chunk index ({_short(e)})") from e
        for i in range(n):
            try:
                info = dsid.get_chunk_info(i)
                mask, raw = dsid.read_direct_chunk(info.chunk_offset)
            except Exception as e:
                raise Problem(
                    "corrupt", f"cannot read chunk {i} of {prep.name} ({_short(e)})"
                ) from e
            if mask & (1 << deflate_at):
                continue  # deflate skipped for this chunk: stored as is
            data = memoryview(raw)
            for code in reversed(after):
                if code == 3 and not mask & (1 << codes.index(3)):
                    data = data[:-4]  # fletcher32's checksum (libhdf5 verifies it later)
            _bounded_inflate(data, prep.chunk_bytes, f"chunk {i} of dataset {prep.name}")

    def _check_storage(self, obj: h5py.Dataset, name: str, nbytes: int) -> tuple[int, ...] | None:
        """Check layout, filters and stored size; return the chunk shape (None: not chunked)."""
        s = _storage_of(obj, name)
        _check_filters(s.codes, name)
        if nbytes == 0:
            return s.chunks
        _check_stored_bytes(s, obj, name, nbytes, self.size)
        self._account(name, s.storage, nbytes)
        return s.chunks

    def _account(self, name: str, storage: int, nbytes: int) -> None:
        """Add a dataset to the file's running totals: stored bytes within the file, expanded
        bytes within `expansion_budget`."""
        self._storage[name] = storage
        self._expanded[name] = nbytes
        total = sum(self._storage.values())
        if total > self.size:
            raise Problem(
                "limit",
                f"the datasets read so far claim {total} stored bytes but the file holds only "
                f"{self.size}; its storage entries overlap or are forged",
            )
        expanded = sum(self._expanded.values())
        if expanded > expansion_budget(self.size):
            raise Problem(
                "limit",
                f"the datasets read so far expand to {expanded} bytes from a {self.size}-byte "
                f"file, more than {EXPANSION_FACTOR} times its size plus "
                f"{EXPANSION_SLACK >> 20} MiB; juliabridge refuses such decompression ratios "
                "(write the weights uncompressed)",
            )

    def read(self, prep: Prepared) -> np.ndarray:
        """The whole dataset as one array of its (native byte order) stored type."""
        out = np.empty(prep.shape, prep.dtype)
        if prep.nbytes:
            try:
                prep.dataset.read_direct(out)
            except Exception as e:
                raise Problem("corrupt", f"cannot read dataset {prep.name} ({_short(e)})") from e
            if prep.early and is_fill(out, fill_value(prep)):
                raise Problem("limit", NEVER_WRITTEN.format(name=prep.name))
        return out

    def pieces(self, prep: Prepared) -> Iterator[tuple[int, np.ndarray]]:
        """(element offset, array) slabs along axis 0, each at most about SLAB_BYTES."""
        if prep.nbytes == 0:
            return
        shape = prep.shape
        try:
            if len(shape) == 0 or prep.nbytes <= SLAB_BYTES:
                buf = np.empty(shape, prep.dtype)
                prep.dataset.read_direct(buf)
                yield 0, buf
                return
            row = prep.nbytes // shape[0]
            step = max(1, SLAB_BYTES // max(row, 1))
            row_elems = row // prep.dtype.itemsize
            for i in range(0, shape[0], step):
                j = min(shape[0], i + step)
                buf = np.empty((j - i, *shape[1:]), prep.dtype)
                prep.dataset.read_direct(buf, source_sel=np.s_[i:j])
                yield i * row_elems, buf
        except Problem:
            raise
        except Exception as e:
            raise Problem("corrupt", f"cannot read dataset {prep.name} ({_short(e)})") from e

    def listing(self, groups: list[str]) -> list[dict[str, Any]]:
        """Shape, stored type and dtype tag of every dataset under `groups`, checked."""
        out = []
        for name in self.datasets:
            top = name.split("/", 2)[1] if name.count("/") >= 2 else None
            if top not in groups:
                continue
            prep = self.prepare(name, None, None, None)
            out.append(
                {
                    "name": name,
                    "shape": list(prep.shape),
                    "dtype": prep.dtype.str,
                    "tag": prep.tag,
                    "nbytes": prep.nbytes,
                }
            )
        return out


@dataclass(frozen=True)
class _Storage:
    """How libhdf5 says a dataset is stored (read once, before any of its data)."""

    layout: int
    #: Filter codes in pipeline order.
    codes: list[int]
    #: Bytes stored in the file.
    storage: int
    #: Where a contiguous dataset's bytes start (None otherwise).
    offset: int | None
    #: The chunk shape of a chunked dataset (None otherwise), and how many chunks are stored.
    chunks: tuple[int, ...] | None
    n_chunks: int


def _storage_of(obj: h5py.Dataset, name: str) -> _Storage:
    """The dataset's layout, filters and stored size; refuses external, virtual or unreadable
    storage."""
    try:
        dsid = obj.id
        dcpl = dsid.get_create_plist()
        _check_storage_kind(dsid, name)
        layout = dcpl.get_layout()
        return _Storage(
            layout,
            [int(dcpl.get_filter(i)[0]) for i in range(dcpl.get_nfilters())],
            int(dsid.get_storage_size()),
            dsid.get_offset() if layout == h5d.CONTIGUOUS else None,
            dcpl.get_chunk() if layout == h5d.CHUNKED else None,
            int(dsid.get_num_chunks()) if layout == h5d.CHUNKED else 0,
        )
    except Problem:
        raise
    except Exception as e:
        raise Problem("corrupt", f"{name}: unreadable storage layout ({_short(e)})") from e


def _check_filters(codes: list[int], name: str) -> None:
    """Refuse filters juliabridge does not apply itself (no plugins)."""
    unknown = [c for c in codes if c not in FILTERS]
    if unknown:
        raise Problem(
            "limit",
            f"dataset {name} uses HDF5 filter(s) {unknown}; juliabridge applies only "
            f"{', '.join(FILTERS.values())} (no filter plugins). Rewrite the file without "
            "them, e.g. `h5repack -f NONE in.h5 out.h5`",
        )


def _check_stored_bytes(
    s: _Storage, obj: h5py.Dataset, name: str, nbytes: int, file_size: int
) -> None:
    """The stored bytes can hold the dataset's `nbytes`: all of it written, inside the file,
    and (compressed) not beyond what deflate can expand."""
    unwritten = (
        f"dataset {name} has no data stored for some or all of its {nbytes} bytes, so "
        "reading it would only produce HDF5 fill values; the file was not written "
        "completely (or claims an array it does not hold)"
    )
    if s.layout == h5d.CONTIGUOUS:
        if s.offset is None or s.storage < nbytes:
            raise Problem("limit", unwritten)
        if s.offset + nbytes > file_size:
            raise Problem(
                "corrupt",
                f"dataset {name}: its {nbytes} bytes at offset {s.offset} lie past the end of "
                f"the {file_size}-byte file (truncated?)",
            )
    elif s.layout == h5d.COMPACT:
        if s.storage < nbytes:
            raise Problem("limit", unwritten)
    elif s.layout == h5d.CHUNKED:
        expected = 1
        for d, c in zip(obj.shape, s.chunks or ()):
            expected *= -(-int(d) // max(int(c), 1))
        if s.n_chunks < expected:
            raise Problem("limit", f"{unwritten}: {s.n_chunks} of its {expected} chunks are stored")
        if COMPRESSING.isdisjoint(s.codes):
            if s.storage < nbytes:
                raise Problem("limit", unwritten)
        elif nbytes > s.storage * MAX_EXPANSION:
            raise Problem(
                "limit",
                f"dataset {name} would decompress {s.storage} stored bytes into {nbytes}, more "
                f"than the {MAX_EXPANSION}:1 deflate can reach; the chunk sizes are forged or "
                "this is a decompression bomb",
            )
    else:
        raise Problem("mismatch", f"dataset {name} has an unknown storage layout ({s.layout})")


def _bounded_inflate(data: memoryview, limit: int, what: str) -> None:
    """Inflate `data` piecewise, refusing it as soon as more than `limit` bytes come out."""
    d = zlib.decompressobj()
    total = 0
    pending: bytes | memoryview = data
    try:
        while pending:
            out = d.decompress(pending, 1 << 20)
            total += len(out)
            if total > limit:
                raise Problem(
                    "limit",
                    f"{what} inflates to more than its {limit} bytes; this is a decompression "
                    "bomb or a corrupt chunk",
                )
            pending = d.unconsumed_tail
            if d.eof:
                break
    except zlib.error as e:
        raise Problem("corrupt", f"{what} is not valid deflate data ({e})") from e


def fill_value(prep: Prepared) -> np.ndarray:
    """The dataset's fill value as one element's bytes (zeros when none is set)."""
    fill = np.zeros((), prep.dtype)
    with contextlib.suppress(Exception):
        prep.dataset.id.get_create_plist().get_fill_value(fill)
    return fill.reshape(1).view(np.uint8)


def is_fill(piece: np.ndarray, fill: np.ndarray) -> bool:
    """Whether every element of `piece` has exactly the bytes `fill`."""
    flat = np.ascontiguousarray(piece).reshape(-1).view(np.uint8)
    if not flat.size:
        return True
    rows = flat.reshape(-1, fill.size)
    return bool(np.array_equal(rows, np.broadcast_to(fill, rows.shape)))


NEVER_WRITTEN = (
    "dataset {name} was allocated when created (HDF5 early allocation) and holds nothing but "
    "its fill value: it was never written. Writers write every dataset's data (spec §4)"
)


def expansion_budget(file_size: int) -> int:
    """Most bytes the datasets of a `file_size`-byte weights file may hold when read."""
    return file_size * EXPANSION_FACTOR + EXPANSION_SLACK


def _names(accept: list[str] | None, tag: str | None) -> str:
    if not accept:
        return "numbers"
    text = " or ".join(np.dtype(a).name for a in accept)
    return f"{text} (for the manifest's dtype {tag})" if tag else text


def _check_storage_kind(oid: Any, name: str) -> None:
    dcpl = oid.get_create_plist()
    if dcpl.get_layout() == h5d.VIRTUAL:
        raise Problem(
            "unsafe",
            f"dataset {name} is a virtual dataset, which could read other files; weights "
            "files hold their data inline",
        )
    if dcpl.get_external_count() > 0:
        raise Problem(
            "unsafe",
            f"dataset {name} keeps its data in external raw files, which could be any file; "
            "weights files hold their data inline",
        )


def _read_tag(obj: h5py.Dataset, name: str) -> str | None:
    """The dataset's `dtype` attribute, after checking it is one short string."""
    try:
        if not h5a.exists(obj.id, b"dtype"):
            return None
        aid = h5a.open(obj.id, b"dtype")
        if aid.shape not in ((), (1,)):
            raise Problem(
                "mismatch", f"{name}: attribute 'dtype' has shape {aid.shape}, expected a string"
            )
        atype = aid.get_type()
        if not isinstance(atype, h5t.TypeStringID):
            raise Problem("mismatch", f"{name}: attribute 'dtype' is not a string")
        if not atype.is_variable_str() and atype.get_size() > MAX_TAG_BYTES:
            raise Problem("mismatch", f"{name}: attribute 'dtype' is {atype.get_size()} bytes long")
        value = obj.attrs["dtype"]
    except Problem:
        raise
    except Exception as e:
        raise Problem("corrupt", f"{name}: unreadable attribute 'dtype' ({_short(e)})") from e
    if isinstance(value, np.ndarray):
        value = value.reshape(-1)[0] if value.size else ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value)[:MAX_TAG_BYTES]


# --- the worker process -----------------------------------------------------------------------
# Frames: one type byte (J = JSON, D = data), an 8-byte little-endian length, the payload.

_HEAD = struct.Struct("<cQ")


def send_frame(out: BinaryIO, kind: bytes, payload: bytes | memoryview) -> None:
    """Write one frame."""
    out.write(_HEAD.pack(kind, len(payload)))
    out.write(payload)


def send_json(out: BinaryIO, obj: dict[str, Any]) -> None:
    """Write one JSON frame and flush."""
    send_frame(out, b"J", json.dumps(obj).encode())
    out.flush()


def _read_exact(inp: BinaryIO, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = inp.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _data_size() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


_BASE: list[int] = []


def _limit_memory(extra: int) -> None:
    """Cap this worker's heap at its start-up size + 512 MiB + `extra`.

    A forged length inside libhdf5 (e.g. a 4 GiB variable-length string in a 6 KiB file) then
    fails at once instead of allocating and touching gigabytes.
    """
    if not _BASE:
        used = _data_size()
        if used is None:
            return
        _BASE.append(used)
    try:
        import resource

        soft = _BASE[0] + (1 << 29) + extra
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    except (ImportError, ValueError, OSError, AttributeError):
        pass


#: A worker kept for reuse exits after this many idle seconds.
IDLE_EXIT = 300.0


def _retire_when_idle(last: list[float]) -> None:
    while True:
        time.sleep(5.0)
        if last[0] and time.monotonic() - last[0] > IDLE_EXIT:
            os._exit(0)


def _receive_fd(sock: socket.socket | None) -> int:
    if sock is None:
        raise Problem("corrupt", "bad request: no socket to receive the file on")
    _, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise Problem("corrupt", "bad request: no file descriptor came with it")
    return fds[0]


def serve(inp: BinaryIO, out: BinaryIO, sock: socket.socket | None = None) -> None:
    """Answer requests until end of input (see _worker.py for the parent side)."""
    last = [time.monotonic()]
    threading.Thread(target=_retire_when_idle, args=(last,), daemon=True).start()
    _limit_memory(0)
    send_json(out, {"ready": True, "pid": os.getpid()})
    session = _Session(out, sock)
    while (req := _next_request(inp, last)) is not None:
        try:
            session.answer(req)
        except Problem as e:
            send_json(out, {"ok": False, "kind": e.kind, "message": str(e)})
        except MemoryError as e:
            send_json(
                out, {"ok": False, "kind": "limit", "message": f"libhdf5 ran out of memory ({e})"}
            )
        except Exception as e:
            send_json(
                out,
                {
                    "ok": False,
                    "kind": "internal",
                    "message": f"{_short(e)}\n{traceback.format_exc(limit=8)}",
                },
            )
        last[0] = time.monotonic()
    session.close()


def _next_request(inp: BinaryIO, last: list[float]) -> dict[str, Any] | None:
    """The next request's JSON, or None at end of input; marks the worker busy (`last`)."""
    head = _read_exact(inp, _HEAD.size)
    if head is None:
        return None
    last[0] = 0.0  # busy
    _, length = _HEAD.unpack(head)
    body = _read_exact(inp, length)
    if body is None:
        return None
    req: dict[str, Any] = json.loads(body)
    return req


class _Session:
    """The worker's one open weights file and the answers to the requests about it."""

    def __init__(self, out: BinaryIO, sock: socket.socket | None) -> None:
        self.out = out
        self.sock = sock
        self.reader: Reader | None = None

    def close(self) -> None:
        """Close the open file, if any."""
        if self.reader is not None:
            self.reader.close()
        self.reader = None

    def answer(self, req: dict[str, Any]) -> None:
        """Answer one request: open, close, read or list (a read or list needs an open file)."""
        op = req.get("op")
        if op == "open":
            self.close()
            fd = _receive_fd(self.sock) if req.get("fd") else None
            self.reader = Reader(str(req.get("path")), fd)
            send_json(self.out, {"ok": True, "size": self.reader.size})
        elif op == "close":
            self.close()
            send_json(self.out, {"ok": True})
        elif op == "read" and self.reader is not None:
            _send_dataset(self.reader, req, self.out)
        elif op == "list" and self.reader is not None:
            send_json(self.out, {"ok": True, "datasets": self.reader.listing(req["groups"])})
        else:
            send_json(self.out, {"ok": False, "kind": "corrupt", "message": f"bad request {op}"})


def _send_dataset(reader: Reader, req: dict[str, Any], out: BinaryIO) -> None:
    """Check the requested dataset, then send its header, its bytes in slabs and ``done``
    (memory bounded to two slabs and two chunks meanwhile)."""
    shape = req.get("shape")
    prep = reader.prepare(
        req["dataset"],
        None if shape is None else tuple(shape),
        req.get("accept"),
        req.get("tag"),
    )
    rows = prep.shape[0] if prep.shape and prep.shape[0] else 1
    slab = min(prep.nbytes, max(SLAB_BYTES, prep.nbytes // rows))
    _limit_memory(2 * slab + 2 * prep.chunk_bytes)
    try:  # the cap is this dataset's: a failed read must not leave it on the next request
        send_json(
            out,
            {
                "ok": True,
                "dtype": prep.dtype.str,
                "shape": list(prep.shape),
                "nbytes": prep.nbytes,
            },
        )
        fill = fill_value(prep) if prep.early else None
        only_fill = fill is not None
        for _, piece in reader.pieces(prep):
            only_fill = only_fill and fill is not None and is_fill(piece, fill)
            flat = np.ascontiguousarray(piece).reshape(-1).view(np.uint8)
            send_frame(out, b"D", memoryview(flat))  # type: ignore[arg-type]
    finally:
        _limit_memory(0)
    if only_fill and prep.nbytes:
        raise Problem("limit", NEVER_WRITTEN.format(name=prep.name))
    send_json(out, {"done": True})


if __name__ == "__main__":
    _out = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames may reach the protocol pipe
    _sock = None
    if len(sys.argv) > 1 and hasattr(socket, "recv_fds"):
        _sock = socket.socket(fileno=int(sys.argv[1]))
    serve(sys.stdin.buffer, _out, _sock)
