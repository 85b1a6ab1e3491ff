"""Reading parts of datasets (bundle/weights/sharded.py, issue 54): boxes bit-identical to numpy
slices of the whole array for every element type and rank 0-4, by byte ranges and by the
verified pass; a box reads only its bytes (plus bounded gaps); chunked datasets, digests and
hostile files."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from juliabridge.bundle.files.digest import new_hasher
from juliabridge.bundle.weights import ReadRequest, _h5core, encode, open_weights, write_weights
from juliabridge.bundle.weights import sharded as sh
from juliabridge.errors import BundleError, ChecksumError
from juliabridge.support import dtypes

TYPES = list(dtypes.MLIR_TO_JULIA)


def _values(rng: np.random.Generator, shape: tuple[int, ...], tag: str) -> np.ndarray:
    want = dtypes.to_numpy(tag)
    if tag == "i1":
        return rng.integers(0, 2, shape).astype(bool)
    raw = rng.integers(0, 256, (*shape, want.itemsize), dtype=np.uint8)
    arr = raw.view(want).reshape(shape)
    if want.kind in "fc":  # NaN payloads are bits too, but keep values comparable
        arr = np.nan_to_num(arr, nan=1.5, posinf=2.5, neginf=-2.5)
    return np.array(arr, order="C", copy=True).reshape(shape)


def _blake3(arr: np.ndarray, tag: str) -> str:
    stored = np.ascontiguousarray(encode(arr, tag))
    h = new_hasher("blake3")
    h.update(stored.astype(stored.dtype.newbyteorder("<")).reshape(-1).view(np.uint8).tobytes())
    return h.hexdigest()


def _write(path: Path, arrays: dict[str, tuple[np.ndarray, str]]) -> Path:
    write_weights(path, arrays)
    return path


def _read(path: Path, request: ReadRequest, boxes: list[sh.Box]) -> list[np.ndarray]:
    with open_weights(path) as f, sh.open_shards(f) as shards:
        plan = shards.plans([request])[request.dataset]
        return shards.read(request, plan, boxes)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@st.composite
def _cases(draw: st.DrawFn) -> tuple[str, tuple[int, ...], list[sh.Box], bool, int]:
    tag = draw(st.sampled_from(TYPES))
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(st.integers(0 if rank else 1, 6)) for _ in range(rank))
    boxes = []
    for _ in range(draw(st.integers(1, 3))):
        box = []
        for n in shape:
            a = draw(st.integers(0, n))
            box.append((a, draw(st.integers(a, n))))
        boxes.append(tuple(box))
    return tag, shape, boxes, draw(st.booleans()), draw(st.integers(0, 2**31))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=_cases())
def test_boxes_equal_numpy_slices_bit_for_bit(tmp_path: Path, case: tuple) -> None:  # type: ignore[type-arg]
    tag, shape, boxes, verified, seed = case
    value = _values(np.random.default_rng(seed), shape, tag)
    path = _write(tmp_path / f"w{seed}.h5", {"/params/x": (value, tag)})
    digest = _blake3(value, tag) if verified else None
    req = ReadRequest("/params/x", shape, tag, "params.x", digest, "blake3" if verified else None)
    got = _read(path, req, boxes)
    for box, arr in zip(boxes, got, strict=True):
        want = value[tuple(slice(a, b) for a, b in box)]
        assert _same_bits(arr, want), (tag, shape, box, verified)


def test_small_blocks_and_batches_still_give_the_slices(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Blocks and run batches far smaller than the runs and boxes: every edge case of the copy
    # (runs straddling blocks, batches ending mid-block) is exercised.
    monkeypatch.setattr(sh, "SLAB", 40)
    monkeypatch.setattr(sh, "GAP", 24)
    monkeypatch.setattr(sh, "RUN_BATCH", 3)
    rng = np.random.default_rng(1)
    value = rng.standard_normal((7, 5, 6)).astype(np.float32)
    path = _write(tmp_path / "w.h5", {"/params/x": (value, "f32")})
    boxes: list[sh.Box] = [
        ((1, 6), (0, 5), (2, 5)),
        ((0, 7), (1, 4), (0, 6)),
        ((3, 4), (2, 3), (1, 2)),
    ]
    for digest in (None, _blake3(value, "f32")):
        req = ReadRequest("/params/x", value.shape, "f32", "params.x", digest, digest and "blake3")
        for box, arr in zip(boxes, _read(path, req, boxes), strict=True):
            assert _same_bits(arr, value[tuple(slice(a, b) for a, b in box)])


class _Counter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[int] = []
        real = sh._pread_into

        def counted(fd: int, view: memoryview, offset: int) -> None:
            self.calls.append(len(view))
            real(fd, view, offset)

        monkeypatch.setattr(sh, "_pread_into", counted)

    @property
    def total(self) -> int:
        return sum(self.calls)


@pytest.mark.parametrize(
    ("shape", "box", "most"),
    [
        # rows: one run, exactly the shard's bytes
        ((64, 4096), ((16, 48), (0, 4096)), 32 * 4096 * 4),
        # columns far apart (gap 256 KiB > GAP): one read per row, the shard's bytes only
        ((8, 65536), ((0, 8), (0, 16)), 8 * 16 * 4),
        # columns close together: runs read with their (small) gaps, never the whole file
        ((1024, 512), ((0, 1024), (0, 256)), 1024 * 512 * 4 - 256 * 4),
        # a 3-d inner block
        ((4, 64, 1024), ((1, 3), (8, 24), (0, 1024)), 2 * 16 * 1024 * 4 + 48 * 1024 * 4),
    ],
)
def test_a_box_reads_only_its_bytes_and_bounded_gaps(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shape: tuple[int, ...], box: sh.Box, most: int
) -> None:
    value = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    path = _write(tmp_path / "w.h5", {"/params/x": (value, "f32")})
    req = ReadRequest("/params/x", shape, "f32", "params.x")
    counter = _Counter(monkeypatch)
    [got] = _read(path, req, [box])
    assert _same_bits(got, value[tuple(slice(a, b) for a, b in box)])
    shard = got.nbytes
    assert shard <= counter.total <= most, (counter.total, shard, most)
    assert counter.total < value.nbytes
    # reads: at most shard / SLAB + file / GAP + 1
    assert len(counter.calls) <= shard // sh.SLAB + value.nbytes // sh.GAP + 1


def test_the_verified_pass_reads_the_dataset_once_for_all_boxes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    value = np.arange(256 * 1024, dtype=np.float32).reshape(256, 1024)
    path = _write(tmp_path / "w.h5", {"/params/x": (value, "f32")})
    req = ReadRequest("/params/x", value.shape, "f32", "params.x", _blake3(value, "f32"), "blake3")
    counter = _Counter(monkeypatch)
    boxes: list[sh.Box] = [((0, 128), (0, 512)), ((128, 256), (512, 1024))]
    got = _read(path, req, boxes)
    assert counter.total == value.nbytes  # hashed whole, once, whatever the boxes
    assert max(counter.calls) <= sh.SLAB
    for box, arr in zip(boxes, got, strict=True):
        assert _same_bits(arr, value[tuple(slice(a, b) for a, b in box)])


def test_a_changed_byte_fails_the_verified_pass(tmp_path: Path) -> None:
    value = np.arange(4096, dtype=np.float32).reshape(64, 64)
    path = _write(tmp_path / "w.h5", {"/params/x": (value, "f32")})
    digest = _blake3(value, "f32")
    with open_weights(path) as f:
        plan = f.metadata.plan("/params/x", None, None, None)  # type: ignore[union-attr]
    with open(path, "r+b") as fh:
        fh.seek(plan.offset + 4000)  # type: ignore[operator]
        b = fh.read(1)
        fh.seek(plan.offset + 4000)  # type: ignore[operator]
        fh.write(bytes([b[0] ^ 1]))
    req = ReadRequest("/params/x", value.shape, "f32", "params.x", digest, "blake3")
    with pytest.raises(ChecksumError, match=r"params\.x \(/params/x\): the blake3 of its stored"):
        _read(path, req, [((0, 8), (0, 64))])


def test_a_whole_file_digest_is_checked_first(tmp_path: Path) -> None:
    value = np.ones((4, 4), np.float32)
    path = _write(tmp_path / "w.h5", {"/params/x": (value, "f32")})
    with (
        open_weights(path, file_sha256="0" * 64) as f,
        pytest.raises(ChecksumError, match="sha256"),
    ):
        sh.ShardReader(f)


def _chunked(path: Path, value: np.ndarray, chunks: tuple[int, ...], **kw: object) -> Path:
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("params/x", data=value, chunks=chunks, **kw)  # type: ignore[arg-type]
        ds.attrs["dtype"] = "f32"
    return path


@pytest.mark.parametrize("worker", ["1", "0"])
@pytest.mark.parametrize("verified", [False, True])
def test_a_chunked_dataset_streams_past_the_boxes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, worker: str, verified: bool
) -> None:
    monkeypatch.setenv("JULIABRIDGE_HDF5_WORKER", worker)
    # 68 MiB in chunks: libhdf5 sends it in two pieces (64 MiB slabs), the boxes straddle them
    rows = (_h5core.SLAB_BYTES >> 12) + 256
    value = np.arange(rows * 1024, dtype=np.float32).reshape(rows, 1024)
    path = _chunked(tmp_path / "w.h5", value, (256, 512))
    digest = _blake3(value, "f32") if verified else None
    req = ReadRequest("/params/x", value.shape, "f32", "params.x", digest, digest and "blake3")
    boxes: list[sh.Box] = [((rows - 300, rows), (512, 1024)), ((0, 7), (0, 1024)), ((5, 6), (3, 4))]
    kept: list[int] = []
    real = sh.fastread.aligned_empty

    def counted(shape: tuple[int, ...], dtype: np.dtype, align: int = 64) -> np.ndarray:
        kept.append(int(np.prod(shape)) * np.dtype(dtype).itemsize)
        return real(shape, dtype, align)

    monkeypatch.setattr(sh.fastread, "aligned_empty", counted)
    got = _read(path, req, boxes)
    for box, arr in zip(boxes, got, strict=True):
        assert _same_bits(arr, value[tuple(slice(a, b) for a, b in box)])
    assert sum(kept) == sum(a.nbytes for a in got)  # the boxes only, never the whole dataset


def test_a_compressed_dataset_streams_past_the_boxes(tmp_path: Path) -> None:
    value = np.random.default_rng(3).standard_normal((64, 100)).astype(np.float32)
    path = _chunked(tmp_path / "w.h5", value, (16, 25), compression="gzip")
    req = ReadRequest("/params/x", value.shape, "f32", "params.x", _blake3(value, "f32"), "blake3")
    boxes: list[sh.Box] = [((0, 32), (0, 100)), ((10, 64), (50, 100))]
    for box, arr in zip(boxes, _read(path, req, boxes), strict=True):
        assert _same_bits(arr, value[tuple(slice(a, b) for a, b in box)])


def test_a_chunked_dataset_with_a_wrong_digest_is_refused(tmp_path: Path) -> None:
    value = np.arange(60, dtype=np.float32).reshape(6, 10)
    path = _chunked(tmp_path / "w.h5", value, (2, 5), compression="gzip")
    req = ReadRequest("/params/x", value.shape, "f32", "params.x", "0" * 64, "blake3")
    with pytest.raises(ChecksumError, match=r"params\.x \(/params/x\): the blake3"):
        _read(path, req, [((0, 3), (0, 10))])


def test_a_dataset_whose_offset_points_past_the_file_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    value = np.arange(1 << 10, dtype=np.float32)
    path = _write(tmp_path / "w.h5", {"/params/x": (value, "f32")})
    with open_weights(path) as f:
        plan = f.metadata.plan("/params/x", None, None, None)  # type: ignore[union-attr]
    assert plan.offset is not None
    data = bytearray(path.read_bytes())
    at = data.find(plan.offset.to_bytes(8, "little"), 0, plan.offset)
    assert at > 0  # the layout message's address of the data
    data[at : at + 8] = (len(data) * 4).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    req = ReadRequest("/params/x", value.shape, "f32", "params.x")
    counter = _Counter(monkeypatch)
    with pytest.raises(BundleError, match="lie past the end of the"):
        _read(path, req, [((0, 10),)])
    assert counter.calls == []  # refused before any data is read


def test_box_of_refuses_what_is_not_a_box() -> None:
    from juliabridge.errors import CallArgumentError

    assert sh.box_of((slice(None), slice(2, 4)), (3, 5), "p") == ((0, 3), (2, 4))
    with pytest.raises(CallArgumentError, match="step 2"):
        sh.box_of((slice(0, 4, 2),), (4,), "p")
    with pytest.raises(CallArgumentError, match="1 axes for an array of shape"):
        sh.box_of((slice(None),), (2, 2), "p")
