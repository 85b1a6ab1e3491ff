"""A pure-Python reader of HDF5 *metadata*: where each dataset's bytes lie, never the bytes.

libhdf5 is a large C library that a crafted file can make loop, allocate or crash (see
``_h5core.py``), which is why juliabridge runs it in a separate process. Parsing the metadata
of the files bundles actually hold does not need it: this module reads the superblock, object
headers, groups (symbol tables, compact and dense link storage), dataspaces, datatypes, the
``dtype`` attribute and contiguous/compact layouts with plain Python. Python code cannot
corrupt memory, every loop here is bounded (visited sets, link and message counts, a budget of
metadata bytes linear in the file's size), and every address is checked against the file, so
this runs in the caller's process without a sandbox. Data are then read by the caller with
``os.preadv`` straight into aligned buffers (``fastread.py``).

Anything outside that subset (chunked or filtered data, shared messages, committed datatypes,
dense attribute storage, nested fractal-heap indirect blocks, old layout messages, unusual
types) raises `Unsupported`, and the caller hands the file to the sandboxed libhdf5 reader
instead: nothing is guessed. Refusals (`Problem`) use the kinds of ``_h5core.Problem``:
``unsafe`` (links or storage that reach other files), ``mismatch`` (not what the manifest
says), ``limit`` (sizes that do not add up, data never written) and ``corrupt``.

The bytes of every metadata block parsed are kept (`H5Metadata.parsed`), so a reader that
hashes the whole file can check that what it hashed is what was parsed.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .lookup3 import lookup3

SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: Links (groups, datasets, named types) a weights file may hold.
MAX_OBJECTS = 1 << 20
#: Group nesting depth; a manifest path has at most 64 steps, plus /params or /state.
MAX_GROUP_DEPTH = 80
#: Messages and continuation blocks one object header may have.
MAX_MESSAGES = 1 << 16
MAX_CHUNKS = 1 << 12
MAX_TAG_BYTES = 64
#: Metadata this parser reads from one file: 4 x the file's size + 1 MiB (each block is read
#: once; the factor covers overlapping blocks), at most 256 MiB; past it libhdf5 takes over.
METADATA_FACTOR = 4
METADATA_SLACK = 1 << 20
METADATA_CAP = 256 << 20
#: Metadata blocks up to PAGE bytes are read through a cache of whole pages (at most
#: CACHE_PAGES of them): headers, heaps and B-tree nodes of a small file share a few pages, so
#: a few reads replace one system call per block (~100 for a bundle of a few arrays).
PAGE = 4096
CACHE_PAGES = 256
#: Largest global heap collection read for a variable-length `dtype` string.
MAX_GLOBAL_HEAP = 4 << 20
#: All datasets of one file together may expand to at most this many times the file's size
#: plus EXPANSION_SLACK (the same bound as ``_h5core``'s, which a test keeps equal).
EXPANSION_FACTOR = 16
EXPANSION_SLACK = 256 << 20


def expansion_budget(file_size: int) -> int:
    """Most bytes the datasets of a `file_size`-byte weights file may hold when read."""
    return file_size * EXPANSION_FACTOR + EXPANSION_SLACK


# Object header message types (docs: HDF5 File Format Specification, IV.A.2).
_NIL, _DATASPACE, _LINFO, _DATATYPE, _FILL_OLD, _FILL, _LINK, _EXTERNAL, _LAYOUT = range(9)
_BOGUS, _GINFO, _FILTERS, _ATTRIBUTE, _COMMENT, _MTIME_OLD, _SHMESG, _CONT, _STAB = range(9, 18)
_MTIME, _BTREEK, _DRVINFO, _AINFO, _REFCOUNT, _FSINFO = range(18, 24)
#: Messages that say nothing about where data lie or whether the file reaches elsewhere.
_IGNORED = frozenset({_NIL, _GINFO, _COMMENT, _MTIME_OLD, _MTIME, _REFCOUNT, _BOGUS})

# Datatype classes.
_FIXED, _FLOAT, _STRING, _BITFIELD, _COMPOUND, _ENUM, _VLEN = 0, 1, 3, 4, 6, 8, 9
# Fill value allocation times.
ALLOC_EARLY = 1

_IEEE = {  # size: (exponent location, exponent size, mantissa location, mantissa size, bias)
    2: (10, 5, 0, 10, 15),
    4: (23, 8, 0, 23, 127),
    8: (52, 11, 0, 52, 1023),
}


#: A chunk may hold at most CHUNK_FACTOR times its dataset's bytes plus CHUNK_SLACK (the same
#: rule as ``_h5core.chunk_too_large``, which runs where this module is not importable; a test
#: checks that the two agree).
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


class Unsupported(Exception):
    """A structure this reader does not parse; libhdf5 (sandboxed) reads the file instead."""


class Problem(Exception):
    """A refusal: `kind` is unsafe, mismatch, corrupt or limit (as in ``_h5core``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _corrupt(what: str) -> Problem:
    return Problem("corrupt", f"the HDF5 structure is unreadable ({what})")


def _uint(data: bytes | memoryview, pos: int, n: int) -> int:
    return int.from_bytes(data[pos : pos + n], "little")


def _need(value: int) -> int:
    """Bytes needed to store `value` (HDF5's "minimum number of bytes" fields)."""
    return max(1, (value.bit_length() + 7) // 8)


class _Cursor:
    """Little-endian fields of one metadata block; running off its end is `corrupt`."""

    __slots__ = ("data", "lsize", "osize", "pos", "what")

    def __init__(self, data: bytes, pos: int, osize: int, lsize: int, what: str) -> None:
        self.data, self.pos, self.osize, self.lsize, self.what = data, pos, osize, lsize, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _corrupt(f"{self.what} runs past its end")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def u8(self) -> int:
        return self.uint(1)

    def u16(self) -> int:
        return self.uint(2)

    def u32(self) -> int:
        return self.uint(4)

    def addr(self) -> int:
        return self.uint(self.osize)

    def length(self) -> int:
        return self.uint(self.lsize)


@dataclass
class Message:
    """One object header message: type, flags and body."""

    kind: int
    flags: int
    body: bytes


@dataclass
class Layout:
    """Where a dataset's bytes are: contiguous (file offset, allocated size) or compact."""

    kind: str  # "contiguous" | "compact" | "chunked" | "virtual"
    offset: int | None = None
    size: int = 0
    data: bytes | None = None
    chunk_bytes: int | None = None  # chunked: bytes of one chunk, where the message says


@dataclass
class DatasetInfo:
    """A dataset's header, decoded on demand."""

    name: str
    header: int
    messages: list[Message]
    layout: Layout
    _decoded: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """A dataset checked against the caller's expectations; nothing read yet.

    `stored` is the type as in the file (byte order included), `native` the same in this
    machine's byte order. Data are `nbytes` at file offset `offset` (contiguous) or `compact`.
    """

    name: str
    shape: tuple[int, ...]
    stored: np.dtype
    native: np.dtype
    nbytes: int
    tag: str | None
    offset: int | None
    compact: bytes | None
    early: bool
    fill: bytes | None


class H5Metadata:
    """The metadata of one HDF5 file, read through an open file descriptor.

    Raises `Unsupported` for structures outside this reader's subset and `Problem` for
    refusals; either is raised before any dataset's data is read.
    """

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.budget = min(METADATA_CAP, METADATA_FACTOR * size + METADATA_SLACK)
        self.read_bytes = 0
        #: (file offset, bytes) of every metadata block parsed.
        self.parsed: list[tuple[int, bytes]] = []
        self._objects: dict[int, list[Message]] = {}
        self._heaps: dict[int, bytes] = {}
        self._gheaps: dict[int, bytes] = {}
        self._pages: dict[int, bytes] = {}
        self._superblock()
        self.datasets: dict[str, DatasetInfo] = {}
        self.groups: set[str] = {"/"}
        self._walk()

    # --- raw access ------------------------------------------------------------------------

    def _read(self, offset: int, n: int, what: str) -> bytes:
        """`n` bytes at relative address `offset` (from the superblock's base address)."""
        at = self.base + offset
        if offset < 0 or n < 0 or at + n > self.size:
            raise _corrupt(f"{what} at address {offset} lies past the end of the file")
        self.read_bytes += n
        if self.read_bytes > self.budget:
            raise Unsupported(f"more than {self.budget} bytes of metadata")
        data = self._pread(at, n)
        if len(data) != n:
            raise _corrupt(f"{what}: the file is shorter than its size says")
        self.parsed.append((at, data))
        return data

    def _pread(self, at: int, n: int) -> bytes:
        """The file's bytes [at, at + n), shorter where the file ends first."""
        if n > PAGE or n == 0:
            return os.pread(self.fd, n, at)
        first, last = at // PAGE, (at + n - 1) // PAGE
        pages = []
        for p in range(first, last + 1):
            page = self._pages.get(p)
            if page is None:
                if len(self._pages) >= CACHE_PAGES:  # full: read no more than asked for
                    return os.pread(self.fd, n, at)
                page = self._pages[p] = os.pread(self.fd, PAGE, p * PAGE)
            pages.append(page)
            if len(page) < PAGE:
                break  # the file ends (or ended when the page was read) here
        joined = pages[0] if len(pages) == 1 else b"".join(pages)
        start = at - first * PAGE
        return joined[start : start + n]

    def _defined(self, addr: int) -> bool:
        return addr != self.undefined

    def _checked(self, data: bytes, what: str) -> None:
        """Verify the lookup3 checksum in the last 4 bytes of a version-2 metadata block."""
        if lookup3(memoryview(data)[:-4]) != struct.unpack_from("<I", data, len(data) - 4)[0]:
            raise _corrupt(f"the checksum of {what} does not match")

    # --- superblock --------------------------------------------------------------------------

    def _superblock(self) -> None:
        self.base = 0
        at = 0
        while True:  # signature at 0, 512, 1024, 2048, ... (after a user block)
            if at + 8 > self.size:
                raise Problem("corrupt", "not a readable HDF5 file (no HDF5 signature)")
            if os.pread(self.fd, 8, at) == SIGNATURE:
                break
            at = 512 if at == 0 else 2 * at
        head = os.pread(self.fd, 16, at)
        if len(head) < 16:
            raise _corrupt("truncated superblock")
        version = head[8]
        if version in (0, 1):
            osize, lsize = head[13], head[14]
        elif version in (2, 3):
            osize, lsize = head[9], head[10]
        else:
            raise Unsupported(f"superblock version {version}")
        if osize not in (4, 8) or lsize not in (4, 8):
            raise Unsupported(f"{osize}-byte addresses, {lsize}-byte lengths")
        self.osize, self.lsize = osize, lsize
        self.undefined = (1 << (8 * osize)) - 1
        self.base = at
        if version in (0, 1):
            fixed = 24 + (4 if version == 1 else 0)
            n = fixed + 4 * osize + (2 * osize + 24)
            data = self._read(0, n, "the superblock")
            c = self._cursor(data, fixed, "the superblock")
            base, _free, eof, _driver = c.addr(), c.addr(), c.addr(), c.addr()
            c.addr()  # root entry: link name offset
            root = c.addr()
        else:
            n = 12 + 4 * osize + 4
            data = self._read(0, n, "the superblock")
            self._checked(data, "the superblock")
            c = self._cursor(data, 12, "the superblock")
            base, _ext, eof, root = c.addr(), c.addr(), c.addr(), c.addr()
        if base != at:
            # The base address is where the superblock is in every file libhdf5 writes.
            raise Unsupported(f"base address {base} with the superblock at {at}")
        # libhdf5 stores the end-of-file address as an absolute offset (it compares it with
        # the file's size plus the base address when opening).
        if self._defined(eof) and eof > self.size:
            raise Problem(
                "corrupt",
                f"not a readable HDF5 file (truncated: it should hold {eof} bytes, it has "
                f"{self.size})",
            )
        self.root = root

    def _cursor(self, data: bytes, pos: int, what: str) -> _Cursor:
        return _Cursor(data, pos, self.osize, self.lsize, what)

    # --- object headers ------------------------------------------------------------------------

    def messages(self, addr: int) -> list[Message]:
        """The messages of the object header at `addr` (parsed once)."""
        cached = self._objects.get(addr)
        if cached is not None:
            return cached
        first = self._read(addr, 4, "an object header")
        out = self._header_v2(addr) if first == b"OHDR" else self._header_v1(addr, first)
        self._objects[addr] = out
        return out

    def _header_v1(self, addr: int, first: bytes) -> list[Message]:
        if first[0] != 1:
            raise _corrupt(f"object header at {addr} has version {first[0]}")
        prefix = self._read(addr, 16, "an object header")
        count = struct.unpack_from("<H", prefix, 2)[0]
        size = struct.unpack_from("<I", prefix, 8)[0]
        chunks = [(addr + 16, size)]
        out: list[Message] = []
        seen: set[int] = set()
        parsed = 0  # every message counts, NIL and continuations included
        while chunks:
            start, length = chunks.pop(0)
            if start in seen or len(seen) >= MAX_CHUNKS:
                raise _corrupt(f"object header at {addr} has a continuation loop")
            seen.add(start)
            data = self._read(start, length, "an object header")
            pos = 0
            while pos + 8 <= length and parsed < count:
                kind, n, flags = struct.unpack_from("<HHB", data, pos)
                if pos + 8 + n > length:
                    raise _corrupt(f"a message of the object header at {addr} runs past it")
                body = data[pos + 8 : pos + 8 + n]
                pos += 8 + n
                parsed += 1
                self._add(out, kind, flags, body, chunks, addr)
        return out

    def _header_v2(self, addr: int) -> list[Message]:
        head = self._read(addr, 6, "an object header")
        version, flags = head[4], head[5]
        if version != 2:
            raise _corrupt(f"object header at {addr} has version {version}")
        pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        size = _uint(self._read(addr + pos, width, "an object header"), 0, width)
        pos += width
        order = 2 if flags & 0x04 else 0
        out: list[Message] = []
        chunks: list[tuple[int, int]] = []
        data = self._read(addr, pos + size + 4, "an object header")
        self._checked(data, f"the object header at {addr}")
        self._messages_v2(data, pos, pos + size, order, out, chunks, addr)
        seen: set[int] = set()
        while chunks:
            start, length = chunks.pop(0)
            if start in seen or len(seen) >= MAX_CHUNKS:
                raise _corrupt(f"object header at {addr} has a continuation loop")
            seen.add(start)
            block = self._read(start, length, "an object header continuation")
            if length < 8 or block[:4] != b"OCHK":
                raise _corrupt(f"continuation block at {start} has no OCHK signature")
            self._checked(block, f"the continuation block at {start}")
            self._messages_v2(block, 4, length - 4, order, out, chunks, addr)
        return out

    def _messages_v2(
        self,
        data: bytes,
        pos: int,
        end: int,
        order: int,
        out: list[Message],
        chunks: list[tuple[int, int]],
        addr: int,
    ) -> None:
        head = 4 + order
        while pos + head <= end:
            kind, n, flags = struct.unpack_from("<BHB", data, pos)
            if pos + head + n > end:
                raise _corrupt(f"a message of the object header at {addr} runs past it")
            body = data[pos + head : pos + head + n]
            pos += head + n
            self._add(out, kind, flags, body, chunks, addr)

    def _add(
        self,
        out: list[Message],
        kind: int,
        flags: int,
        body: bytes,
        chunks: list[tuple[int, int]],
        addr: int,
    ) -> None:
        if len(out) >= MAX_MESSAGES:
            raise Problem("limit", f"object header at {addr} has more than {MAX_MESSAGES} messages")
        if kind == _CONT:
            c = self._cursor(body, 0, "a continuation message")
            chunks.append((c.addr(), c.length()))
            return
        if flags & 0x02:
            raise Unsupported("a shared object header message")
        if kind not in _IGNORED:
            out.append(Message(kind, flags, body))

    # --- structure ---------------------------------------------------------------------------

    def _walk(self) -> None:
        """Walk every link without recursion; refuse anything that could reach another file."""
        seen = {self.root}
        # Depth first, each group's links in libhdf5's iteration order, so datasets are listed
        # as h5py's visit lists them (Lux's order for files JuliaBridge wrote).
        stack: list[tuple[Iterator[tuple[str, int]], str, int]] = [
            (iter(self._links(self.root, "")), "", 0)
        ]
        count = 0
        while stack:
            links, prefix, depth = stack[-1]
            step = next(links, None)
            if step is None:
                stack.pop()
                continue
            name, target = step
            count += 1
            if count > MAX_OBJECTS:
                raise Problem(
                    "limit", f"more than {MAX_OBJECTS} links; not a juliabridge weights file"
                )
            full = f"{prefix}/{name}"
            msgs = self.messages(target)
            kinds = {m.kind for m in msgs}
            group = bool(kinds & {_STAB, _LINFO, _LINK})
            if group and _LAYOUT in kinds:
                raise Unsupported(f"{full} is both a group and a dataset")
            if group:
                if target in seen:
                    continue  # a second hard link to a group: its content is checked once
                seen.add(target)
                self.groups.add(full)
                if depth + 1 > MAX_GROUP_DEPTH:
                    raise Problem(
                        "limit", f"{full}: groups nest deeper than {MAX_GROUP_DEPTH} levels"
                    )
                stack.append((iter(self._links(target, full)), full, depth + 1))
            elif _LAYOUT in kinds:
                self.datasets[full] = self._dataset(full, target, msgs)

    def _links(self, addr: int, prefix: str) -> list[tuple[str, int]]:
        """(name, object header address) of each hard link in the group at `addr`, in
        creation order where the group tracks it, else by name (libhdf5's orders)."""
        msgs = self.messages(addr)
        stab = [m for m in msgs if m.kind == _STAB]
        linfo = [m for m in msgs if m.kind == _LINFO]
        if len(stab) + len(linfo) > 1:
            raise Unsupported(f"group {prefix or '/'} has several link indexes")
        if stab:
            return self._symbol_table(stab[0].body, prefix)
        out = [self._link(m.body, prefix) for m in msgs if m.kind == _LINK]
        tracked = False
        if linfo:
            c = self._cursor(linfo[0].body, 0, "a link info message")
            version, flags = c.u8(), c.u8()
            if version != 0:
                raise Unsupported(f"link info message version {version}")
            tracked = bool(flags & 1)
            if tracked:
                c.take(8)
            heap, names = c.addr(), c.addr()
            if self._defined(heap):
                if out:
                    raise Unsupported("a group with both compact and dense links")
                out = [self._link(obj, prefix) for obj in self._dense(heap, names, 5, 4)]
        out.sort(key=(lambda link: link[2]) if tracked else (lambda link: link[0].encode()))
        return [(name, target) for name, target, _ in out]

    def _symbol_table(self, body: bytes, prefix: str) -> list[tuple[str, int]]:
        c = self._cursor(body, 0, "a symbol table message")
        tree, heap = c.addr(), c.addr()
        names = self._local_heap(heap)
        out = []
        entry = 2 * self.osize + 24
        stack = [(tree, -1)]
        seen: set[int] = set()
        while stack:
            node, level = stack.pop()
            if node in seen:
                raise _corrupt(f"the group B-tree of {prefix or '/'} has a cycle")
            seen.add(node)
            if len(seen) > MAX_OBJECTS:
                raise Problem("limit", f"group {prefix or '/'} has more than {MAX_OBJECTS} nodes")
            head = self._read(node, 8 + 2 * self.osize, "a group B-tree node")
            if head[:4] != b"TREE" or head[4] != 0:
                raise _corrupt(f"group B-tree node at {node} has no TREE signature")
            this_level, used = head[5], struct.unpack_from("<H", head, 6)[0]
            if level >= 0 and this_level != level:
                raise _corrupt(f"group B-tree node at {node} is at the wrong level")
            step = self.lsize + self.osize
            body_ = self._read(
                node + 8 + 2 * self.osize, used * step + self.lsize, "a group B-tree node"
            )
            children = [_uint(body_, i * step + self.lsize, self.osize) for i in range(used)]
            if this_level > 0:
                stack.extend((child, this_level - 1) for child in reversed(children))
                continue
            for snod in children:
                sh = self._read(snod, 8, "a symbol table node")
                if sh[:4] != b"SNOD" or sh[4] != 1:
                    raise _corrupt(f"symbol table node at {snod} has no SNOD signature")
                nsyms = struct.unpack_from("<H", sh, 6)[0]
                data = self._read(snod + 8, nsyms * entry, "a symbol table node")
                for i in range(nsyms):
                    e = self._cursor(data, i * entry, "a symbol table entry")
                    name_at, target, cache = e.addr(), e.addr(), e.u32()
                    name = _text(_cstring(names, name_at, "a link name"))
                    if cache == 2:
                        raise Problem(
                            "unsafe",
                            f"{prefix}/{name} is an HDF5 soft link; weights files hold plain "
                            "groups and datasets only",
                        )
                    out.append((name, target))
        return out

    def _local_heap(self, addr: int) -> bytes:
        cached = self._heaps.get(addr)
        if cached is not None:
            return cached
        head = self._read(addr, 8 + 2 * self.lsize + self.osize, "a local heap")
        if head[:4] != b"HEAP" or head[4] != 0:
            raise _corrupt(f"local heap at {addr} has no HEAP signature")
        c = self._cursor(head, 8, "a local heap")
        size, _free, data_at = c.length(), c.length(), c.addr()
        data = self._read(data_at, size, "a local heap")
        self._heaps[addr] = data
        return data

    def _link(self, body: bytes, prefix: str) -> tuple[str, int, int]:
        """(name, object header address, creation order or 0) of a hard link message."""
        c = self._cursor(body, 0, "a link message")
        version, flags = c.u8(), c.u8()
        if version != 1:
            raise Unsupported(f"link message version {version}")
        kind = c.u8() if flags & 0x08 else 0
        order = c.uint(8) if flags & 0x04 else 0
        if flags & 0x10:
            c.u8()
        name = _text(c.take(c.uint(1 << (flags & 3))))
        full = f"{prefix}/{name}"
        if kind == 1:
            raise Problem(
                "unsafe",
                f"{full} is an HDF5 soft link; weights files hold plain groups and datasets only",
            )
        if kind == 64:
            raise Problem(
                "unsafe",
                f"{full} is an HDF5 external link, which would read another file; weights "
                "files hold plain groups and datasets only",
            )
        if kind != 0:
            raise Problem(
                "unsafe",
                f"{full} is a user-defined HDF5 link (type {kind}); weights files hold plain "
                "groups and datasets only",
            )
        return name, c.addr(), order

    # --- dense storage: fractal heap + version 2 B-tree ---------------------------------------

    def _dense(self, heap_addr: int, tree_addr: int, tree_type: int, id_at: int) -> list[bytes]:
        """The heap objects a v2 B-tree name index refers to (links or attributes)."""
        heap = _FractalHeap(self, heap_addr)
        records = self._btree2(tree_addr, tree_type)
        return [heap.get(r[id_at : id_at + heap.id_len]) for r in records]

    def _btree2(self, addr: int, want_type: int) -> list[bytes]:
        head = self._read(addr, 16 + self.osize + 2 + self.lsize + 4, "a v2 B-tree header")
        if head[:4] != b"BTHD" or head[4] != 0:
            raise _corrupt(f"v2 B-tree header at {addr} has no BTHD signature")
        self._checked(head, f"the v2 B-tree header at {addr}")
        c = self._cursor(head, 5, "a v2 B-tree header")
        kind, node_size, rec_size, depth = c.u8(), c.u32(), c.u16(), c.u16()
        c.take(2)
        root, root_n, total = c.addr(), c.u16(), c.length()
        if kind != want_type:
            raise _corrupt(f"v2 B-tree at {addr} has type {kind}, expected {want_type}")
        if rec_size == 0 or depth > 2:
            raise Unsupported(f"a v2 B-tree of depth {depth}")
        if total > MAX_OBJECTS:
            raise Problem("limit", f"a v2 B-tree with {total} records")
        if not self._defined(root):
            return []
        # Field widths of internal nodes (spec III.A.2, "Number of Records in Child Node").
        leaf_max = (node_size - 10) // rec_size
        widths = [(0, 0)]  # per level: (bytes of child record count, bytes of child total)
        node_max, cum = [leaf_max], [leaf_max]
        for level in range(1, depth + 1):
            nbytes = _need(node_max[level - 1])
            tbytes = _need(cum[level - 1]) if level > 1 else 0
            triplet = self.osize + nbytes + tbytes
            n = (node_size - 10 - triplet) // (rec_size + triplet)
            widths.append((nbytes, tbytes))
            node_max.append(n)
            cum.append((n + 1) * cum[level - 1] + n)
        out: list[bytes] = []
        stack = [(root, depth, root_n)]
        seen: set[int] = set()
        while stack:
            node, level, n = stack.pop()
            if node in seen:
                raise _corrupt(f"v2 B-tree at {addr} has a cycle")
            seen.add(node)
            if n > node_max[level] or len(out) + n > total:
                raise _corrupt(f"v2 B-tree node at {node} claims {n} records")
            nbytes, tbytes = widths[level]
            ptrs = (n + 1) * (self.osize + nbytes + tbytes) if level else 0
            data = self._read(node, 6 + n * rec_size + ptrs + 4, "a v2 B-tree node")
            sig = b"BTIN" if level else b"BTLF"
            if data[:4] != sig or data[5] != kind:
                raise _corrupt(f"v2 B-tree node at {node} has no {sig.decode()} signature")
            self._checked(data, f"the v2 B-tree node at {node}")
            recs = [data[6 + i * rec_size : 6 + (i + 1) * rec_size] for i in range(n)]
            if level == 0:
                out.extend(recs)
                continue
            out.extend(recs)
            pos = 6 + n * rec_size
            for _ in range(n + 1):
                child = _uint(data, pos, self.osize)
                count = _uint(data, pos + self.osize, nbytes)
                pos += self.osize + nbytes + tbytes
                stack.append((child, level - 1, count))
        if len(out) != total:
            raise _corrupt(f"v2 B-tree at {addr} holds {len(out)} records, its header says {total}")
        return out

    # --- datasets ----------------------------------------------------------------------------

    def _dataset(self, name: str, addr: int, msgs: list[Message]) -> DatasetInfo:
        layouts = [m for m in msgs if m.kind == _LAYOUT]
        if len(layouts) != 1:
            raise Unsupported(f"{name} has {len(layouts)} layout messages")
        layout = self._layout(layouts[0].body, name)
        if layout.kind == "virtual":
            raise Problem(
                "unsafe",
                f"dataset {name} is a virtual dataset, which could read other files; weights "
                "files hold their data inline",
            )
        if any(m.kind == _EXTERNAL for m in msgs):
            raise Problem(
                "unsafe",
                f"dataset {name} keeps its data in external raw files, which could be any "
                "file; weights files hold their data inline",
            )
        return DatasetInfo(name, addr, msgs, layout)

    def _layout(self, body: bytes, name: str) -> Layout:
        c = self._cursor(body, 0, f"the layout message of {name}")
        version = c.u8()
        if version not in (3, 4):
            raise Unsupported(f"layout message version {version}")
        cls = c.u8()
        if cls == 0:
            n = c.u16()
            return Layout("compact", size=n, data=c.take(n))
        if cls == 1:
            offset, size = c.addr(), c.length()
            return Layout("contiguous", offset=offset if self._defined(offset) else None, size=size)
        if cls == 2:
            return Layout("chunked", chunk_bytes=self._chunk_bytes(c, version))
        if cls == 3 and version == 4:
            return Layout("virtual")
        raise Unsupported(f"layout class {cls}")

    @staticmethod
    def _chunk_bytes(c: _Cursor, version: int) -> int | None:
        """Bytes of one chunk: the product of the chunk's dimensions, whose last entry is the
        element size (layout message versions 3 and 4); None where the fields are not there."""
        try:
            if version == 3:
                ndims = c.u8()
                c.addr()
                sizes = [c.u32() for _ in range(ndims)]
            else:
                c.u8()  # flags
                ndims = c.u8()
                width = c.u8()
                if not 1 <= width <= 8:
                    return None
                sizes = [c.uint(width) for _ in range(ndims)]
        except Problem:
            return None
        if not sizes:
            return None
        total = 1
        for n in sizes:
            total *= n
        return total

    def _one(self, info: DatasetInfo, kind: int, what: str) -> Message | None:
        found = [m for m in info.messages if m.kind == kind]
        if len(found) > 1:
            raise Unsupported(f"{info.name} has {len(found)} {what} messages")
        return found[0] if found else None

    def shape(self, info: DatasetInfo) -> tuple[int, ...] | None:
        """The dataspace's dimensions; () for a scalar, None for a null dataspace."""
        m = self._one(info, _DATASPACE, "dataspace")
        if m is None:
            raise _corrupt(f"{info.name} has no dataspace")
        return _dataspace(m.body, self.lsize, info.name)

    def dtype(self, info: DatasetInfo) -> np.dtype:
        """The stored numpy type (file byte order); `Unsupported` for anything but numbers."""
        m = self._one(info, _DATATYPE, "datatype")
        if m is None:
            raise _corrupt(f"{info.name} has no datatype")
        return _numeric_type(m.body, info.name)

    def fill(self, info: DatasetInfo) -> tuple[bool, bytes | None]:
        """(allocated early, fill value bytes or None for the default zeros)."""
        m = self._one(info, _FILL, "fill value")
        early = info.layout.kind == "compact"
        value = None
        if m is not None:
            c = self._cursor(m.body, 0, f"the fill value message of {info.name}")
            version = c.u8()
            if version in (1, 2):
                alloc, _write, defined = c.u8(), c.u8(), c.u8()
                if defined or version == 1:
                    n = c.u32()
                    value = c.take(n) if n else None
            elif version == 3:
                flags = c.u8()
                alloc = flags & 3
                if flags & 0x20:
                    value = c.take(c.u32())
            else:
                raise Unsupported(f"fill value message version {version}")
            early = early or alloc == ALLOC_EARLY
        else:
            old = self._one(info, _FILL_OLD, "old fill value")
            if old is not None and len(old.body) >= 4:
                n = struct.unpack_from("<I", old.body, 0)[0]
                value = old.body[4 : 4 + n] or None
        return early, value

    def tag(self, info: DatasetInfo) -> str | None:
        """The dataset's ``dtype`` attribute, after checking it is one short string."""
        if "tag" in info._decoded:
            return info._decoded["tag"]  # type: ignore[no-any-return]
        ainfo = self._one(info, _AINFO, "attribute info")
        if ainfo is not None:
            c = self._cursor(ainfo.body, 0, "an attribute info message")
            c.u8()
            if c.u8() & 1:
                c.take(2)
            if self._defined(c.addr()):
                raise Unsupported(f"{info.name} keeps its attributes in dense storage")
        found = None
        for m in info.messages:
            if m.kind != _ATTRIBUTE:
                continue
            attr = self._attribute(m.body, info.name)
            if attr is not None:
                if found is not None:
                    raise Unsupported(f"{info.name} has two 'dtype' attributes")
                found = attr
        info._decoded["tag"] = found
        return found

    def _attribute(self, body: bytes, name: str) -> str | None:
        """The value of attribute `dtype` if this message is it, else None."""
        c = self._cursor(body, 0, f"an attribute of {name}")
        version, flags = c.u8(), c.u8()
        if version not in (1, 2, 3):
            raise Unsupported(f"attribute message version {version}")
        if flags & 3:
            raise Unsupported("an attribute with a shared datatype or dataspace")
        nlen, tlen, slen = c.u16(), c.u16(), c.u16()
        if version == 3:
            c.u8()
        pad = (lambda n: (n + 7) & ~7) if version == 1 else (lambda n: n)
        raw = c.take(pad(nlen))[:nlen]
        if raw.rstrip(b"\0") != b"dtype":
            return None
        ttype = c.take(pad(tlen))[:tlen]
        space = _dataspace(c.take(pad(slen))[:slen], self.lsize, f"{name} attribute 'dtype'")
        if space not in ((), (1,)):
            raise Problem(
                "mismatch", f"{name}: attribute 'dtype' has shape {space}, expected a string"
            )
        cls = ttype[0] & 0x0F if ttype else -1
        size = _uint(ttype, 4, 4)
        value = c.take(len(body) - c.pos)
        if cls == _STRING:
            if size > MAX_TAG_BYTES:
                raise Problem("mismatch", f"{name}: attribute 'dtype' is {size} bytes long")
            if len(value) < size:
                raise _corrupt(f"attribute 'dtype' of {name} is truncated")
            text = value[:size].split(b"\0", 1)[0]
            if (ttype[1] & 0x0F) == 2:
                text = text.rstrip(b" ")
        elif cls == _VLEN and (ttype[1] & 0x0F) == 1:
            vc = self._cursor(value, 0, f"attribute 'dtype' of {name}")
            n, collection, index = vc.u32(), vc.addr(), vc.u32()
            stored = self._global(collection, index, name)
            if n > len(stored):
                raise _corrupt(
                    f"attribute 'dtype' of {name} claims {n} bytes but its heap object holds "
                    f"{len(stored)}"
                )
            if n > MAX_TAG_BYTES:
                raise Problem("mismatch", f"{name}: attribute 'dtype' is {n} bytes long")
            text = stored[:n]
        else:
            raise Problem("mismatch", f"{name}: attribute 'dtype' is not a string")
        return text.decode("utf-8", "replace")[:MAX_TAG_BYTES]

    def _global(self, addr: int, index: int, name: str) -> bytes:
        data = self._gheaps.get(addr)
        if data is None:
            head = self._read(addr, 8 + self.lsize, "a global heap")
            if head[:4] != b"GCOL" or head[4] != 1:
                raise _corrupt(f"global heap at {addr} has no GCOL signature")
            size = _uint(head, 8, self.lsize)
            if size > MAX_GLOBAL_HEAP:
                raise Unsupported(f"a {size}-byte global heap collection")
            data = self._read(addr, size, "a global heap")
            self._gheaps[addr] = data
        # The collection's header and each object's header (index, reference count, reserved,
        # size) are padded to a multiple of 8 bytes: 16 with 4- or 8-byte lengths.
        step = (8 + self.lsize + 7) & ~7
        pos = step
        while pos + step <= len(data):
            at, n = struct.unpack_from("<H", data, pos)[0], _uint(data, pos + 8, self.lsize)
            if at == 0:
                break
            start = pos + step
            if start + n > len(data):
                raise _corrupt(f"global heap object {at} at {addr} runs past its collection")
            if at == index:
                return data[start : start + n]
            pos = start + ((n + 7) & ~7)
        raise _corrupt(f"attribute 'dtype' of {name} refers to a missing global heap object")

    def plan(
        self, name: str, shape: tuple[int, ...] | None, accept: list[str] | None, tag: str | None
    ) -> Plan:
        """Check dataset `name` against the expected shape and stored types; read no data."""
        info = self.datasets.get(name if name.startswith("/") else "/" + name)
        want = "" if shape is None else f" of shape {list(shape)}"
        if info is None:
            found = "a group" if self._is_group(name) else "nothing"
            raise Problem("mismatch", f"the file has {found} at {name}, expected a dataset{want}")
        got = self.shape(info)
        if got is None:
            raise Problem("mismatch", f"{name} has an empty (null) dataspace, expected data{want}")
        if shape is not None and got != tuple(shape):
            raise Problem(
                "mismatch",
                f"dataset {name} has shape {list(got)}, expected {list(shape)} (MLIR order, "
                "i.e. Julia dims reversed)",
            )
        stored = self.dtype(info)
        native = stored.newbyteorder("=")
        if accept is not None and native.str not in accept:
            names = " or ".join(np.dtype(a).name for a in accept)
            wanted = f"{names} (for the manifest's dtype {tag})" if tag else names
            raise Problem(
                "mismatch", f"dataset {name} is stored as {native.name}, expected {wanted}"
            )
        found_tag = self.tag(info)
        if tag is not None and found_tag is None:  # spec §4: every dataset carries it
            raise Problem("mismatch", f"dataset {name} has no 'dtype' attribute, expected {tag!r}")
        if tag is not None and found_tag != tag:
            raise Problem(
                "mismatch", f"dataset {name} is tagged dtype={found_tag!r}, expected {tag!r}"
            )
        nbytes = native.itemsize * int(np.prod(got, dtype=object))
        layout = info.layout
        if layout.kind == "chunked":
            too_large = (
                chunk_too_large(name, layout.chunk_bytes, nbytes)
                if layout.chunk_bytes is not None
                else None
            )
            if too_large:  # refused here, before libhdf5's process sees the file
                raise Problem("limit", too_large)
            raise Unsupported(f"{name} is chunked")
        early, fill = self.fill(info)
        unwritten = (
            f"dataset {name} has no data stored for some or all of its {nbytes} bytes, so "
            "reading it would only produce HDF5 fill values; the file was not written "
            "completely (or claims an array it does not hold)"
        )
        if layout.kind == "compact":
            if nbytes and (layout.data is None or len(layout.data) < nbytes):
                raise Problem("limit", unwritten)
            data = (layout.data or b"")[:nbytes]
            return Plan(name, got, stored, native, nbytes, found_tag, None, data, early, fill)
        if nbytes and (layout.offset is None or layout.size < nbytes):
            raise Problem("limit", unwritten)
        offset = None if layout.offset is None else self.base + layout.offset
        if nbytes and offset is not None and offset + nbytes > self.size:
            raise Problem(
                "corrupt",
                f"dataset {name}: its {nbytes} bytes at offset {offset} lie past the end of the "
                f"{self.size}-byte file (truncated?)",
            )
        return Plan(name, got, stored, native, nbytes, found_tag, offset, None, early, fill)

    def _is_group(self, name: str) -> bool:
        return ("/" + name.strip("/")) in self.groups or name.strip("/") == ""

    def listing(self, groups: list[str]) -> list[dict[str, Any]]:
        """Shape, stored type and dtype tag of every dataset under `groups`, checked."""
        out = []
        for name in self.datasets:
            top = name.split("/", 2)[1] if name.count("/") >= 2 else None
            if top not in groups:
                continue
            p = self.plan(name, None, None, None)
            out.append(
                {
                    "name": name,
                    "shape": list(p.shape),
                    "dtype": p.native.str,
                    "tag": p.tag,
                    "nbytes": p.nbytes,
                }
            )
        return out


class _FractalHeap:
    """Managed objects of a fractal heap whose root is a direct block or one indirect block."""

    def __init__(self, f: H5Metadata, addr: int) -> None:
        o, ln = f.osize, f.lsize
        n = 4 + 1 + 2 + 2 + 1 + 4 + ln + o + ln + o + 8 * ln + 2 + 2 * ln + 2 + 2 + o + 2
        head = f._read(addr, n + 4, "a fractal heap header")
        if head[:4] != b"FRHP" or head[4] != 0:
            raise _corrupt(f"fractal heap at {addr} has no FRHP signature")
        c = f._cursor(head, 5, "a fractal heap header")
        self.id_len, filters, self.flags = c.u16(), c.u16(), c.u8()
        if filters:
            raise Unsupported("a filtered fractal heap")
        f._checked(head, f"the fractal heap header at {addr}")
        max_obj = c.u32()
        c.length()
        c.addr()
        c.length()
        c.addr()
        for _ in range(8):
            c.length()
        self.width, self.start, self.max_direct = c.u16(), c.length(), c.length()
        self.heap_bits = c.u16()
        c.u16()
        self.root, self.rows = c.addr(), c.u16()
        if not (_pow2(self.width) and _pow2(self.start) and _pow2(self.max_direct)):
            raise _corrupt(f"fractal heap at {addr} has a doubling table of bad sizes")
        if self.heap_bits > 64 or self.max_direct < self.start:
            raise _corrupt(f"fractal heap at {addr} has impossible sizes")
        self.f, self.addr = f, addr
        self.off_bytes = (self.heap_bits + 7) // 8
        self.len_bytes = _need(min(self.max_direct, max_obj))
        self.direct_rows = (self.max_direct.bit_length() - self.start.bit_length()) + 2
        self.dblock_head = 5 + o + self.off_bytes + (4 if self.flags & 2 else 0)
        self._blocks: dict[int, list[int]] = {}

    def get(self, heap_id: bytes) -> bytes:
        """The object a heap ID names."""
        if len(heap_id) != self.id_len or not heap_id:
            raise _corrupt("a fractal heap ID of the wrong length")
        first = heap_id[0]
        if first >> 6:
            raise Unsupported(f"fractal heap ID version {first >> 6}")
        kind = (first >> 4) & 3
        if kind == 2:  # tiny: the object is in the ID itself
            if self.id_len > 18:
                n = (((first & 0x0F) << 8) | heap_id[1]) + 1
                data = heap_id[2 : 2 + n]
            else:
                n = (first & 0x0F) + 1
                data = heap_id[1 : 1 + n]
            if len(data) != n:
                raise _corrupt("a tiny fractal heap object longer than its ID")
            return data
        if kind != 0:
            raise Unsupported("a huge fractal heap object")
        offset = _uint(heap_id, 1, self.off_bytes)
        length = _uint(heap_id, 1 + self.off_bytes, self.len_bytes)
        block, start, size = self._locate(offset)
        within = offset - start
        if within < self.dblock_head or within + length > size or length == 0:
            raise _corrupt(f"fractal heap object at offset {offset} lies outside its block")
        return self.f._read(block + within, length, "a fractal heap object")

    def _row_size(self, row: int) -> int:
        return self.start * (1 << max(0, row - 1))

    def _locate(self, offset: int) -> tuple[int, int, int]:
        """(address, heap offset, size) of the direct block holding heap offset `offset`."""
        if not self.f._defined(self.root):
            raise _corrupt("a fractal heap object in an empty heap")
        if self.rows == 0:
            return self.root, 0, self.start
        entries = self._indirect(self.root, self.rows)
        start = 0
        for row in range(self.rows):
            size = self._row_size(row)
            span = size * self.width
            if offset < start + span:
                if row >= self.direct_rows:
                    raise Unsupported("a fractal heap with nested indirect blocks")
                col = (offset - start) // size
                block = entries[row * self.width + col]
                if not self.f._defined(block):
                    raise _corrupt(f"fractal heap offset {offset} is in an unallocated block")
                return block, start + col * size, size
            start += span
        raise _corrupt(f"fractal heap offset {offset} lies past the heap")

    def _indirect(self, addr: int, rows: int) -> list[int]:
        cached = self._blocks.get(addr)
        if cached is not None:
            return cached
        f = self.f
        direct = min(rows, self.direct_rows) * self.width
        indirect = max(0, rows - self.direct_rows) * self.width
        n = 5 + f.osize + self.off_bytes + (direct + indirect) * f.osize + 4
        data = f._read(addr, n, "a fractal heap indirect block")
        if data[:4] != b"FHIB" or data[4] != 0:
            raise _corrupt(f"fractal heap indirect block at {addr} has no FHIB signature")
        f._checked(data, f"the fractal heap indirect block at {addr}")
        pos = 5 + f.osize + self.off_bytes
        out = [_uint(data, pos + i * f.osize, f.osize) for i in range(direct + indirect)]
        self._blocks[addr] = out
        return out


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _cstring(data: bytes, at: int, what: str) -> bytes:
    if not 0 <= at < len(data):
        raise _corrupt(f"{what} lies outside its heap")
    end = data.find(b"\0", at)
    if end < 0:
        raise _corrupt(f"{what} is not terminated")
    return data[at:end]


def _text(name: bytes) -> str:
    return name.decode("utf-8", "backslashreplace")


def _dataspace(body: bytes, lsize: int, what: str) -> tuple[int, ...] | None:
    if len(body) < 4:
        raise _corrupt(f"the dataspace of {what} is truncated")
    version, rank, _flags = body[0], body[1], body[2]
    if version == 1:
        pos, kind = 8, 1 if rank else 0
    elif version == 2:
        pos, kind = 4, body[3]
    else:
        raise Unsupported(f"dataspace version {version}")
    if kind == 2:
        return None
    if kind == 0:
        return ()
    if kind != 1 or rank > 64:
        raise _corrupt(f"the dataspace of {what} has type {kind} and rank {rank}")
    if pos + rank * lsize > len(body):
        raise _corrupt(f"the dataspace of {what} is truncated")
    return tuple(_uint(body, pos + i * lsize, lsize) for i in range(rank))


def _numeric_type(body: bytes, name: str) -> np.dtype:
    """numpy type of a numeric HDF5 datatype message, as h5py maps it (file byte order)."""
    if len(body) < 8:
        raise _corrupt(f"the datatype of {name} is truncated")
    cls, bits, size = body[0] & 0x0F, _uint(body, 1, 3), _uint(body, 4, 4)
    order = ">" if bits & 1 else "<"
    if cls in (_FIXED, _BITFIELD):
        if size not in (1, 2, 4, 8) or len(body) < 12:
            raise Unsupported(f"a {size}-byte integer type")
        offset, precision = struct.unpack_from("<HH", body, 8)
        if offset or precision != 8 * size:
            raise Unsupported("an integer type with padding bits")
        signed = cls == _FIXED and bits & 0x08
        return np.dtype(f"{order}{'i' if signed else 'u'}{size}")
    if cls == _FLOAT:
        if size not in _IEEE or len(body) < 20 or bits & 0x40:
            raise Unsupported(f"a {size}-byte float type")
        offset, precision, eloc, esize, mloc, msize, bias = struct.unpack_from("<HHBBBBI", body, 8)
        sign = (bits >> 8) & 0xFF
        if (
            offset
            or precision != 8 * size
            or (eloc, esize, mloc, msize, bias) != _IEEE[size]
            or sign != 8 * size - 1
            or (bits >> 4) & 3 != 2
        ):
            raise Unsupported("a non-IEEE float type")
        return np.dtype(f"{order}f{size}")
    if cls == _ENUM:
        return _bool_enum(body, bits, name)
    if cls == _COMPOUND:
        return _complex(body, bits, size, name)
    raise Unsupported(f"datatype class {cls}")


def _member_type(body: bytes, pos: int, name: str) -> tuple[np.dtype, int]:
    """(type, end position) of a datatype nested at `pos` (a member or a base type)."""
    if pos + 8 > len(body):
        raise _corrupt(f"the datatype of {name} is truncated")
    cls = body[pos] & 0x0F
    n = {_FIXED: 12, _FLOAT: 20, _BITFIELD: 12}.get(cls)
    if n is None:
        raise Unsupported(f"a nested datatype of class {cls}")
    return _numeric_type(body[pos : pos + n], name), pos + n


def _bool_enum(body: bytes, bits: int, name: str) -> np.dtype:
    """h5py's bool: an enum of int8 with members FALSE = 0 and TRUE = 1."""
    version = body[0] >> 4
    count = bits & 0xFFFF
    base, pos = _member_type(body, 8, name)
    if count != 2 or base.itemsize != 1:
        raise Unsupported("an enum type")
    names = []
    for _ in range(count):
        end = body.find(b"\0", pos)
        if end < 0:
            raise _corrupt(f"the enum type of {name} is truncated")
        names.append(body[pos:end])
        # Names are padded to a multiple of 8 bytes (counted from the name) before version 3.
        pos = pos + ((end - pos + 1 + 7) & ~7) if version < 3 else end + 1
    values = body[pos : pos + count]
    if names != [b"FALSE", b"TRUE"] or values != b"\x00\x01":
        raise Unsupported("an enum type other than bool")
    return np.dtype(np.bool_)


def _complex(body: bytes, bits: int, size: int, name: str) -> np.dtype:
    """h5py's complex: a compound of two IEEE floats named r and i."""
    version = body[0] >> 4
    count = bits & 0xFFFF
    if count != 2 or size not in (8, 16):
        raise Unsupported("a compound type")
    pos = 8
    members = []
    for _ in range(2):
        end = body.find(b"\0", pos)
        if end < 0:
            raise _corrupt(f"the compound type of {name} is truncated")
        mname = body[pos:end]
        if version < 3:
            pos = pos + ((end - pos + 1 + 7) & ~7)
            offset = _uint(body, pos, 4)
            pos += 4
            if version == 1:
                pos += 28  # dimensionality, reserved, permutation, reserved, 4 dimension sizes
        else:
            pos = end + 1
            width = _need(size)
            offset = _uint(body, pos, width)
            pos += width
        mtype, pos = _member_type(body, pos, name)
        members.append((mname, offset, mtype))
    half = size // 2
    (rn, ro, rt), (iname, io, it) = members
    if (
        (rn, ro, iname, io) != (b"r", 0, b"i", half)
        or rt != it
        or rt.kind != "f"
        or rt.itemsize != half
    ):
        raise Unsupported("a compound type other than complex")
    return np.dtype(f"{rt.str[0]}c{size}")


def open_metadata(fd: int, size: int) -> H5Metadata:
    """Parse the metadata of the file open as `fd` (`size` bytes); see `H5Metadata`."""
    try:
        return H5Metadata(fd, size)
    except (Unsupported, Problem):
        raise
    except OSError as e:
        raise Problem("corrupt", f"cannot read the file ({e.strerror or e})") from e
    except (ValueError, struct.error, IndexError, OverflowError, MemoryError) as e:
        # A field combination the checks above did not foresee: let libhdf5 decide.
        raise Unsupported(f"{type(e).__name__}: {e}") from e
