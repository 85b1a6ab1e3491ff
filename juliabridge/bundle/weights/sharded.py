"""Reading parts of datasets: the bytes of one shard (a box of indices) of each dataset.

`open_shards` wraps an open `WeightsReader`; `ShardReader.read` gives the arrays of the boxes
asked for, each decoded as a whole read would decode it, in one of three ways:

- **byte ranges** (no digest to check: a save_params file, ``verify_checksums=False``): a box of
  a row-major contiguous dataset is a set of equal-length runs of bytes; neighbouring runs whose
  gap is at most `GAP` bytes are read together (up to `SLAB` bytes per read, into a scratch
  buffer), a run longer than that is read straight into the result. So a shard reads its own
  bytes plus gaps of at most `GAP` bytes each, in at most ``(shard bytes + file bytes) / SLAB
  + 2 * (file bytes / GAP + 1)`` reads, and holds at most ``2 * SLAB`` bytes besides its result;
- **one verified pass** (the dataset has a digest, bundle formats 2 and 3): a digest covers the
  whole dataset, which no part can be checked against, so the dataset is streamed through the
  hasher in `SLAB`-byte blocks and every box's bytes are copied out of the blocks as they pass.
  The bytes handed out are the bytes hashed; memory stays the boxes plus one block, while every
  process reads the whole of each dataset it holds part of;
- **libhdf5's pieces** (datasets the pure-Python reader leaves to libhdf5: chunked or compressed
  storage, unusual files): libhdf5 (in its reader process) reads the whole dataset and sends it
  in pieces of up to 64 MiB, in order; each box keeps its part of each piece as it passes and the
  digest is checked over all of them, so memory stays the boxes plus one piece while every
  chunk is read and inflated.

A file with a whole-file sha256 (bundle format 1) is hashed first, in one bounded pass; the file
must then not change (size, times, inode) until the reading is over.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...errors import BundleError, CallArgumentError, ChecksumError
from ..files import safefile
from ..files.digest import new_hasher
from . import fastread, h5parse
from .encoding import accepted_stored, decode, stored_dtype
from .memory import check_memory
from .read import ReadRequest, WeightsReader, _changed
from .refusals import file_checksum_error, refusal, refusal_of_python_reader

__all__ = ["GAP", "SLAB", "Box", "ShardReader", "box_of", "open_shards", "runs_of"]

#: Bytes per read (and per hashed block), as in fastread.
SLAB = 1 << 22
#: Runs of one box closer than this are read together (the gap read and dropped).
GAP = 1 << 16
#: Runs computed at once (their start offsets are an int64 array of this length at most).
RUN_BATCH = 1 << 16

#: A box of indices: (start, stop) per axis, row-major (MLIR) order.
Box = tuple[tuple[int, int], ...]


def box_of(index: Sequence[Any], shape: tuple[int, ...], where: str) -> Box:
    """The box of a `jax.make_array_from_callback` index (slices, step 1) into `shape`.

    Raises:
        CallArgumentError: an index that is not one slice of step 1 per axis.
    """
    if len(index) != len(shape):
        raise CallArgumentError(
            f"{where}: a shard index of {len(index)} axes for an array of shape {list(shape)}; "
            "a sharding gives one slice per axis"
        )
    out = []
    for s, n in zip(index, shape, strict=True):
        if not isinstance(s, slice):
            raise CallArgumentError(f"{where}: a shard index holds {s!r}, expected slices")
        start, stop, step = s.indices(n)
        if step != 1:
            raise CallArgumentError(f"{where}: a shard index has step {step}; expected 1")
        out.append((start, max(start, stop)))
    return tuple(out)


@dataclass(frozen=True)
class _Runs:
    """The byte runs of a box of a row-major array: `count` runs of `length` bytes each,
    in increasing order; `starts(k0, k1)` are the offsets (from the dataset's first byte)
    of runs k0..k1-1."""

    length: int
    count: int
    base: int
    outer_lens: tuple[int, ...]
    outer_starts: tuple[int, ...]
    outer_strides: tuple[int, ...]

    def starts(self, k0: int, k1: int) -> np.ndarray:
        k = np.arange(k0, k1, dtype=np.int64)
        out = np.full(k.shape, self.base, dtype=np.int64)
        if self.outer_lens:
            for i, s0, st in zip(
                np.unravel_index(k, self.outer_lens),
                self.outer_starts,
                self.outer_strides,
                strict=True,
            ):
                out += (i + s0) * st
        return out


def runs_of(shape: tuple[int, ...], itemsize: int, box: Box) -> _Runs:
    """The byte runs of `box` in a row-major array of `shape` with `itemsize`-byte elements."""
    if any(b <= a for a, b in box):
        return _Runs(0, 0, 0, (), (), ())
    strides = [itemsize] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    # The innermost axis the box does not cover whole: runs span it and everything after.
    j = len(shape) - 1
    while j >= 0 and box[j] == (0, shape[j]):
        j -= 1
    if j < 0:
        return _Runs(int(np.prod(shape, dtype=np.int64)) * itemsize, 1, 0, (), (), ())
    a, b = box[j]
    length = (b - a) * strides[j]
    outer = box[:j]
    return _Runs(
        length,
        int(np.prod([hi - lo for lo, hi in outer], dtype=np.int64)) if outer else 1,
        a * strides[j],
        tuple(hi - lo for lo, hi in outer),
        tuple(lo for lo, _ in outer),
        tuple(strides[:j]),
    )


class _Target:
    """One box being filled: its result bytes as rows of one run each, and a cursor over its
    runs for the verified pass (which offers the dataset's bytes in order)."""

    def __init__(self, runs: _Runs, out: np.ndarray) -> None:
        self.runs = runs
        self.out = out
        self.rows = out.reshape(-1).view(np.uint8).reshape(runs.count, runs.length)
        self.cursor = 0

    def take(self, k0: int, starts: np.ndarray, at: int, block: np.ndarray) -> None:
        """Copy the parts of runs k0.. (at `starts`, all beginning before the block's end and
        ending after its start) that lie in `block`, which holds the bytes at `at`."""
        copy_runs(self.rows, k0, starts, self.runs.length, at, block)

    def offer(self, at: int, block: np.ndarray) -> None:
        """The verified pass: the dataset's bytes [at, at + len(block)), in order."""
        end = at + len(block)
        n = self.runs.length
        while self.cursor < self.runs.count:
            k0 = self.cursor
            starts = self.runs.starts(k0, min(k0 + RUN_BATCH, self.runs.count))
            m = int(np.searchsorted(starts, end, "left"))
            if m:
                self.take(k0, starts[:m], at, block)
            done = int(np.searchsorted(starts[:m] + n, end, "right"))
            self.cursor = k0 + done
            if done < len(starts):
                return


def copy_runs(
    rows: np.ndarray, k0: int, starts: np.ndarray, length: int, at: int, block: np.ndarray
) -> None:
    """rows[k0 + i] gets the part of run i (`length` bytes at `starts[i]`) inside `block`
    (the bytes at offset `at`); every run must overlap the block."""
    end = at + len(block)
    i, j = 0, len(starts)

    def part(r: int) -> None:
        lo, hi = max(int(starts[r]), at), min(int(starts[r]) + length, end)
        if lo < hi:
            s = int(starts[r])
            rows[k0 + r, lo - s : hi - s] = block[lo - at : hi - at]

    if j and (starts[0] < at or starts[0] + length > end):
        part(0)
        i = 1
    if j > i and starts[j - 1] + length > end:
        part(j - 1)
        j -= 1
    if i < j:
        # Whole runs inside the block: one gather over a (copy-free) window view.
        rows[k0 + i : k0 + j] = sliding_window_view(block, length)[starts[i:j] - at]


def _pread_into(fd: int, view: memoryview, offset: int) -> None:
    """Fill `view` from `offset` (the one place this module reads the file)."""
    got = 0
    while got < len(view):
        n = safefile.read_at(fd, view[got:], offset + got)
        if n <= 0:
            raise h5parse.Problem(
                "corrupt",
                f"the file ended while reading {len(view)} bytes at offset {offset} (truncated "
                "or changed while loading?)",
            )
        got += n


def read_box_ranges(fd: int, offset: int, target: _Target) -> None:
    """Fill `target` with the byte ranges of its box only (the dataset at file `offset`)."""
    runs, n = target.runs, target.runs.length
    if not runs.count or not n:
        return
    scratch: np.ndarray | None = None
    for k0 in range(0, runs.count, RUN_BATCH):
        starts = runs.starts(k0, min(k0 + RUN_BATCH, runs.count))
        # Groups: a new one where the gap to the previous run exceeds GAP or the group would
        # span more than SLAB bytes past its first run.
        gaps = np.diff(starts) - n
        seg = np.concatenate([[0], np.cumsum(gaps > GAP)])
        first = np.concatenate([[0], np.flatnonzero(np.diff(seg)) + 1])
        seg_start = starts[first][seg]
        gid = seg * (1 << 40) + (starts - seg_start) // SLAB
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(gid)) + 1, [len(starts)]])
        for g0, g1 in itertools.pairwise(bounds.tolist()):
            lo, hi = int(starts[g0]), int(starts[g1 - 1]) + n
            if g1 - g0 == 1:  # one run: straight into the result
                _pread_into(fd, memoryview(target.rows[k0 + g0]), offset + lo)  # type: ignore[arg-type]
                continue
            if scratch is None or len(scratch) < hi - lo:
                scratch = np.empty(hi - lo, np.uint8)
            block = scratch[: hi - lo]
            _pread_into(fd, memoryview(block), offset + lo)  # type: ignore[arg-type]
            target.take(k0 + int(g0), starts[g0:g1], lo, block)


def read_box_verified(
    fd: int, plan: h5parse.Plan, targets: Sequence[_Target], algorithm: str
) -> str:
    """Stream the whole dataset through `algorithm`'s hasher, filling every target from the
    same bytes; the hex digest (over little-endian bytes, as spec §4.1 defines it)."""
    h = new_hasher(algorithm)
    little = plan.stored.byteorder != ">"
    buf = np.empty(min(SLAB, max(plan.nbytes, 1)), np.uint8)
    for at in range(0, plan.nbytes, SLAB):
        block = buf[: min(SLAB, plan.nbytes - at)]
        if plan.compact is not None:
            block[:] = np.frombuffer(plan.compact, np.uint8, len(block), at)
        else:
            _pread_into(fd, memoryview(block), _offset(plan) + at)  # type: ignore[arg-type]
        if little:
            h.update(memoryview(block))  # type: ignore[arg-type]
        else:
            h.update(block.view(plan.stored).astype(plan.stored.newbyteorder("<")).tobytes())
        for t in targets:
            t.offer(at, block)
    return h.hexdigest()


def _offset(plan: h5parse.Plan) -> int:
    if plan.offset is None:
        raise h5parse.Problem(
            "corrupt", f"dataset {plan.name} has data but neither a file offset nor compact bytes"
        )
    return plan.offset


class ShardReader:
    """Reads boxes of the datasets of an open weights file (see the module's docstring).

    Args:
        reader: the open `WeightsReader` (its descriptor, metadata and whole-file digest).
    """

    def __init__(self, reader: WeightsReader) -> None:
        self.reader = reader
        self.path = reader.path
        self.meta = reader.metadata
        #: Whether the whole file was hashed first (format 1), so it must not change after.
        self.hashed_file = False
        if reader.file_sha256 is not None:
            try:
                got = fastread.sha256_fd(reader.fd, reader.size)
            except OSError as e:
                raise BundleError(f"{self.path}: cannot read the file ({e.strerror or e})") from e
            except h5parse.Problem as e:
                raise refusal(self.path, None, e.kind, str(e)) from e
            if got != reader.file_sha256:
                raise file_checksum_error(self.path, got, reader.file_sha256)
            self.hashed_file = True

    def plans(self, requests: Sequence[ReadRequest]) -> dict[str, h5parse.Plan | None]:
        """Every request checked against the file (shape, type, bounds, overlaps) before any
        data is read; None for a dataset the pure-Python reader leaves to libhdf5."""
        out: dict[str, h5parse.Plan | None] = {}
        if self.meta is None:
            return dict.fromkeys((r.dataset for r in requests), None)
        for r in requests:
            try:
                out[r.dataset] = self.meta.plan(
                    r.dataset, tuple(r.shape), accepted_stored(r.dtype), r.dtype
                )
            except h5parse.Unsupported:
                out[r.dataset] = None
            except h5parse.Problem as e:
                raise refusal_of_python_reader(self.path, r.where, e) from e
        items = [fastread.Item(r, p, None, "blake3") for r in requests if (p := out[r.dataset])]
        try:
            fastread.check_overlaps(items)
        except h5parse.Problem as e:
            raise refusal_of_python_reader(self.path, None, e) from e
        return out

    def read(
        self, r: ReadRequest, plan: h5parse.Plan | None, boxes: Sequence[Box]
    ) -> list[np.ndarray]:
        """The decoded arrays of `boxes` (row-major, MLIR order) of dataset `r`.

        Raises:
            BundleError: the file is corrupt, truncated or changed (refusals as a whole read's).
            ChecksumError: the dataset's digest differs from `r.digest`.
            SignatureMismatchError: stored values the dtype refuses (an i1 byte above 1).
        """
        where = f"{self.path}: {r.where} ({r.dataset})"
        if plan is None:
            return self._read_streamed(r, boxes, where)
        shapes = [tuple(b - a for a, b in box) for box in boxes]
        local = sum(int(np.prod(s, dtype=np.int64)) for s in shapes) * plan.stored.itemsize
        check_memory(local, self.path, r.where)
        outs = [fastread.aligned_empty(s, plan.stored) for s in shapes]
        targets = [
            _Target(runs_of(plan.shape, plan.stored.itemsize, box), out)
            for box, out in zip(boxes, outs, strict=True)
        ]
        try:
            if r.digest is not None and r.algorithm is not None:
                got = read_box_verified(self.reader.fd, plan, targets, r.algorithm)
                if got != r.digest:
                    raise ChecksumError(
                        f"{where}: the {r.algorithm} of its stored bytes is {got} but "
                        f"manifest.json records {r.digest}; the file was modified or corrupted. "
                        "Re-export the bundle, or pass verify_checksums=False if you changed "
                        "it on purpose."
                    )
            elif plan.compact is not None:
                block = np.frombuffer(plan.compact, np.uint8)
                for t in targets:
                    t.offer(0, block)
            else:
                for t in targets:
                    read_box_ranges(self.reader.fd, _offset(plan) if plan.nbytes else 0, t)
        except OSError as e:
            raise BundleError(f"{where}: cannot read the file ({e.strerror or e})") from e
        except h5parse.Problem as e:
            raise refusal_of_python_reader(self.path, r.where, e) from e
        decoded = []
        for out in outs:
            if plan.stored != plan.native:
                out = out.byteswap().view(plan.native)
            decoded.append(decode(out, r.dtype, where))
        return decoded

    def _read_streamed(self, r: ReadRequest, boxes: Sequence[Box], where: str) -> list[np.ndarray]:
        """Boxes of a dataset libhdf5 reads: its pieces stream past, each box keeps its part."""
        stored = stored_dtype(r.dtype)
        shapes = [tuple(b - a for a, b in box) for box in boxes]
        local = sum(int(np.prod(s, dtype=np.int64)) for s in shapes) * stored.itemsize
        check_memory(local, self.path, r.where)
        outs = [fastread.aligned_empty(s, stored) for s in shapes]
        targets = [
            _Target(runs_of(tuple(r.shape), stored.itemsize, box), out)
            for box, out in zip(boxes, outs, strict=True)
        ]

        def sink(at: int, data: memoryview) -> None:
            block = np.frombuffer(data, np.uint8)
            for t in targets:
                t.offer(at, block)

        self.reader.stream(r, sink)
        return [decode(out, r.dtype, where) for out in outs]

    def finish(self) -> None:
        """Refuse a file with a whole-file digest that changed while its parts were read."""
        if self.hashed_file and _changed(self.reader.stat, os.fstat(self.reader.fd)):
            raise ChecksumError(
                f"{self.path}: the file changed while it was loaded, so it cannot be "
                "verified; load it again once nothing writes to it"
            )


@contextmanager
def open_shards(reader: WeightsReader) -> Iterator[ShardReader]:
    """A `ShardReader` over `reader`, checking at the end that the file did not change."""
    shards = ShardReader(reader)
    yield shards
    shards.finish()
