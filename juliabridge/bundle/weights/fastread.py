"""Reading datasets at memory speed: ``preadv`` into aligned buffers, hashed while read.

Given the dataset positions `h5parse` found, this module reads their bytes with plain
``os.preadv`` calls (no libhdf5) straight into 64-byte-aligned numpy buffers, which XLA's CPU
client adopts without a copy (``jax.device_put`` is zero-copy for them), and computes digests
over exactly the bytes placed in those buffers:

- **per dataset** (bundle format 3: each dataset's `blake3`; format 2: its `sha256`): datasets
  are read and hashed in parallel, one thread per core (``os.preadv``, ``blake3`` and
  ``hashlib`` release the GIL), each slab hashed right after it is read, while it is still in
  cache;
- **the whole file** (bundle format 1: ``weights.sha256``): one pass over the file in order,
  dataset bytes read straight into their buffers and the bytes between them (metadata, datasets
  not asked for) into scratch; a second thread reads ahead while the first hashes. The metadata
  the parser used must equal the bytes hashed at the same offsets, so a file changed after it
  was parsed cannot load as verified.

Nothing is handed out before its digest matched.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import queue
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..files import safefile
from ..files.digest import Hasher, new_hasher
from .h5parse import Plan, Problem

#: Bytes per read: large enough that syscalls do not matter, small enough to stay in cache
#: between the read and the hash.
SLAB = 1 << 20
#: Alignment XLA's CPU client needs to adopt a host buffer without copying it.
ALIGN = 64
#: Bytes of datasets in flight at once when streaming (the largest dataset always fits).
WINDOW = 256 << 20
#: Below this many bytes everything is read by the calling thread (threads cost more than they
#: save). Above it, a whole file is read ahead by a second thread while the first one hashes, in
#: slabs of PASS_SLAB (fewer hand-overs between the two), and datasets are read in parallel.
THREAD_ABOVE = 16 << 20
PASS_SLAB = 4 << 20

AVAILABLE = hasattr(os, "preadv") and hasattr(os, "pread")


class DigestMismatch(Exception):
    """A dataset's digest (or the file's sha256) differs from the expected one."""

    def __init__(self, key: Any, got: str) -> None:
        super().__init__(got)
        self.key = key
        self.got = got


class FileChanged(Exception):
    """Bytes hashed differ from the metadata parsed earlier at the same offset."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


@dataclass(frozen=True)
class Item:
    """One dataset to read: the caller's key, its plan and the digest it must have (hex, by
    `algorithm`; None reads it unchecked)."""

    key: Any
    plan: Plan
    digest: str | None = None
    algorithm: str = "blake3"


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype, align: int = ALIGN) -> np.ndarray:
    """An uninitialised array whose data start on an `align`-byte boundary."""
    dtype = np.dtype(dtype)
    n = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    raw = np.empty(n + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start : start + n].view(dtype).reshape(shape)


def aligned_arena(
    specs: Sequence[tuple[tuple[int, ...], np.dtype]], align: int = ALIGN
) -> list[np.ndarray]:
    """Uninitialised arrays of the given (shape, dtype), carved from one allocation, each
    starting on an `align`-byte boundary.

    One allocation instead of one per array: numpy asks the kernel for huge pages for
    allocations of 4 MiB and more, so filling it costs a few page faults where separate
    smaller arrays cost one per 4 KiB page. Every array keeps the whole allocation alive, so
    use it only for arrays that are read, kept and dropped together.
    """
    sizes = [np.dtype(dt).itemsize * int(np.prod(shape, dtype=np.int64)) for shape, dt in specs]
    starts = [0]
    for n in sizes:
        starts.append(starts[-1] + -(-n // align) * align)
    raw = aligned_empty((starts[-1],), np.dtype(np.uint8), align)
    return [
        raw[at : at + n].view(dt).reshape(shape)
        for (shape, dt), at, n in zip(specs, starts, sizes, strict=False)
    ]


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _little(dt: np.dtype) -> bool:
    """Whether the stored bytes of `dt` already are little-endian (what digests cover)."""
    return dt.byteorder in ("<", "|") or (dt.byteorder == "=" and sys.byteorder == "little")


def _offset(plan: Plan) -> int:
    """Where a contiguous dataset's bytes start; a plan with neither place is refused."""
    if plan.offset is None:
        raise Problem(
            "corrupt", f"dataset {plan.name} has data but neither a file offset nor compact bytes"
        )
    return plan.offset


def _pread_into(fd: int, view: memoryview, offset: int) -> None:
    got = 0
    while got < len(view):
        # Where preadv is missing, AVAILABLE is False and only sha256_fd (one thread) gets here.
        n = safefile.read_at(fd, view[got:], offset + got)
        if n <= 0:
            raise Problem(
                "corrupt",
                f"the file ended while reading {len(view)} bytes at offset {offset} (truncated "
                "or changed while loading?)",
            )
        got += n


def check_overlaps(items: Sequence[Item]) -> None:
    """Refuse datasets whose stored bytes overlap (a weights file stores each dataset once)."""
    spans = sorted(
        (i.plan.offset, i.plan.offset + i.plan.nbytes, i.plan.name)
        for i in items
        if i.plan.offset is not None and i.plan.nbytes
    )
    for (_, end, a), (start, _, b) in itertools.pairwise(spans):
        if start < end:
            raise Problem(
                "limit",
                f"datasets {a} and {b} share stored bytes; their storage entries overlap or "
                "are forged",
            )


def _finish(item: Item, arr: np.ndarray, digest: Hasher | None) -> np.ndarray:
    """Byte order to native, digest (over little-endian bytes) and the never-written check."""
    plan = item.plan
    if plan.stored != plan.native:
        arr.byteswap(inplace=True)
        arr = arr.view(plan.native)
    if digest is not None and not _little(plan.stored):
        little = np.ascontiguousarray(arr.astype(plan.native.newbyteorder("<")))
        digest.update(little.reshape(-1).view(np.uint8).data)
    if plan.early and plan.nbytes:
        _refuse_fill_only(plan, arr)
    return arr


def _refuse_fill_only(plan: Plan, arr: np.ndarray) -> None:
    """An early-allocated dataset that holds only its fill value was never written."""
    item = plan.native.itemsize
    fill = plan.fill if plan.fill is not None and len(plan.fill) == item else bytes(item)
    flat = arr.reshape(-1).view(np.uint8).reshape(-1, item)
    ref = np.frombuffer(fill, np.uint8)
    if plan.stored.byteorder == ">":
        ref = ref[::-1]
    if np.array_equal(flat, np.broadcast_to(ref, flat.shape)):
        raise Problem(
            "limit",
            f"dataset {plan.name} was allocated when created (HDF5 early allocation) and holds "
            "nothing but its fill value: it was never written. Writers write every dataset's "
            "data (spec §4)",
        )


def _one(fd: int, item: Item, into: np.ndarray | None = None) -> np.ndarray:
    try:
        return _read_one(fd, item, into)
    except Problem as e:
        e.key = item.key  # type: ignore[attr-defined]
        raise


def _read_one(fd: int, item: Item, into: np.ndarray | None) -> np.ndarray:
    """Read, byte-swap and verify one dataset into `into` (or a new aligned array)."""
    plan = item.plan
    arr = aligned_empty(plan.shape, plan.stored) if into is None else into
    digest = new_hasher(item.algorithm) if item.digest is not None else None
    if plan.nbytes:
        view = memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        raw = _little(plan.stored) and digest is not None
        if plan.compact is not None:
            view[:] = plan.compact
            if raw and digest is not None:
                digest.update(view)
        else:
            offset = _offset(plan)
            for start in range(0, plan.nbytes, SLAB):
                piece = view[start : start + SLAB]
                _pread_into(fd, piece, offset + start)
                if raw and digest is not None:
                    digest.update(piece)
    arr = _finish(item, arr, digest)
    if digest is not None and digest.hexdigest() != item.digest:
        raise DigestMismatch(item.key, digest.hexdigest())
    return arr


def read_parallel(
    fd: int, items: Sequence[Item], *, workers: int | None = None
) -> Iterator[tuple[Any, np.ndarray]]:
    """(key, array) for each item, as they complete; per-item digests verified when given.

    At most `WINDOW` bytes (or one dataset, if larger) are read ahead of the consumer, so a
    caller that moves each array elsewhere (a GPU) holds about that much host memory.
    """
    check_overlaps(items)
    todo = sorted(items, key=lambda i: -i.plan.nbytes)
    workers = workers or min(cores(), 8)
    total = sum(i.plan.nbytes for i in todo)
    if len(todo) <= 1 or workers == 1 or total <= THREAD_ABOVE:
        into: list[np.ndarray | None] = [None] * len(todo)
        if len(todo) > 1 and total <= THREAD_ABOVE:
            # Small enough to live in one allocation (aligned_arena) without holding more
            # than the streaming window.
            into = list(aligned_arena([(i.plan.shape, i.plan.stored) for i in todo]))
        for item, arr in zip(todo, into, strict=True):
            yield item.key, _one(fd, item, arr)
        return
    with ThreadPoolExecutor(min(workers, len(todo)), thread_name_prefix="juliabridge-read") as ex:
        pending: dict[Future[np.ndarray], Item] = {}
        in_flight = 0
        try:
            while todo or pending:
                while todo and (not pending or in_flight + todo[0].plan.nbytes <= WINDOW):
                    item = todo.pop(0)
                    pending[ex.submit(_one, fd, item)] = item
                    in_flight += item.plan.nbytes
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    item = pending.pop(fut)
                    in_flight -= item.plan.nbytes
                    yield item.key, fut.result()
        finally:
            for fut in pending:
                fut.cancel()


class _Shadow:
    """The metadata blocks the parser read, checked against the bytes of the hashing pass."""

    def __init__(self, parsed: Sequence[tuple[int, bytes]]) -> None:
        self.blocks = sorted((at, data) for at, data in parsed if data)
        self.starts = [at for at, _ in self.blocks]
        self.next = 0
        self.active: list[tuple[int, bytes]] = []

    def check(self, start: int, data: memoryview) -> None:
        end = start + len(data)
        while self.next < len(self.blocks) and self.blocks[self.next][0] < end:
            self.active.append(self.blocks[self.next])
            self.next += 1
        keep = []
        for at, block in self.active:
            lo, hi = max(at, start), min(at + len(block), end)
            if lo < hi and data[lo - start : hi - start] != block[lo - at : hi - at]:
                raise FileChanged(lo)
            if at + len(block) > end:
                keep.append((at, block))
        self.active = keep


def read_whole_file(
    fd: int,
    size: int,
    items: Sequence[Item],
    parsed: Sequence[tuple[int, bytes]],
    expected: str,
) -> list[tuple[Any, np.ndarray]]:
    """Every item's array, read in one in-order pass whose sha256 must equal `expected`.

    Raises DigestMismatch (key None) when the file's digest differs, FileChanged when a parsed
    metadata block differs from the bytes hashed at its offset.
    """
    check_overlaps(items)
    arrays: dict[int, np.ndarray] = {}
    segments: list[tuple[int, memoryview, int]] = []  # (offset, destination, length)
    for n, item in enumerate(items):
        arr = aligned_empty(item.plan.shape, item.plan.stored)
        arrays[n] = arr
        plan = item.plan
        if not plan.nbytes:
            continue
        view = memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        if plan.compact is not None:
            view[:] = plan.compact  # inside an object header, which the pass hashes
        else:
            segments.append((_offset(plan), view, plan.nbytes))
    segments.sort(key=lambda s: s[0])
    pieces: list[tuple[int, memoryview | None, int]] = []
    pos = 0
    for offset, dest, length in segments:
        if offset > pos:
            pieces.append((pos, None, offset - pos))
        pieces.append((offset, dest, length))
        pos = offset + length
    if pos < size:
        pieces.append((pos, None, size - pos))
    shadow = _Shadow(parsed)
    digest = hashlib.sha256()

    step = SLAB if size <= THREAD_ABOVE else PASS_SLAB

    def slabs() -> Iterator[tuple[int, memoryview]]:
        for offset, view, length in pieces:
            for start in range(0, length, step):
                n = min(step, length - start)
                dest = view[start : start + n] if view is not None else memoryview(bytearray(n))
                _pread_into(fd, dest, offset + start)
                yield offset + start, dest

    source = slabs() if size <= THREAD_ABOVE else _read_ahead(slabs())
    for at, data in source:
        digest.update(data)
        shadow.check(at, data)
    if digest.hexdigest() != expected:
        raise DigestMismatch(None, digest.hexdigest())
    out = []
    for n, item in enumerate(items):
        try:
            out.append((item.key, _finish(item, arrays[n], None)))
        except Problem as e:
            e.key = item.key  # type: ignore[attr-defined]
            raise
    return out


def _read_ahead(slabs: Iterator[tuple[int, memoryview]]) -> Iterator[tuple[int, memoryview]]:
    """`slabs`, produced by a second thread up to 8 slabs ahead of the consumer."""
    box: queue.Queue[tuple[int, memoryview] | BaseException | None] = queue.Queue(maxsize=8)
    stop = threading.Event()

    def produce() -> None:
        try:
            for slab in slabs:
                if stop.is_set():
                    return
                box.put(slab)
            box.put(None)
        except BaseException as e:  # handed to the consumer, which raises it
            box.put(e)

    reader = threading.Thread(target=produce, name="juliabridge-read", daemon=True)
    reader.start()
    try:
        while True:
            got = box.get()
            if got is None:
                return
            if isinstance(got, BaseException):
                raise got
            yield got
    finally:
        stop.set()
        while reader.is_alive():
            with contextlib.suppress(queue.Empty):
                box.get(timeout=0.05)
        reader.join()


def sha256_fd(fd: int, size: int, chunk: int = 1 << 22) -> str:
    """sha256 of the first `size` bytes of the open file `fd` (read with pread)."""
    h = hashlib.sha256()
    buf = bytearray(min(chunk, max(size, 1)))
    view = memoryview(buf)
    pos = 0
    while pos < size:
        n = min(len(buf), size - pos)
        _pread_into(fd, view[:n], pos)
        h.update(view[:n])
        pos += n
    return h.hexdigest()


__all__ = [
    "AVAILABLE",
    "DigestMismatch",
    "FileChanged",
    "Item",
    "aligned_arena",
    "aligned_empty",
    "read_parallel",
    "read_whole_file",
    "sha256_fd",
]
