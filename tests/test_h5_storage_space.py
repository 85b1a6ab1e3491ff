"""The default HDF5 reader against datasets whose storage does not hold their data (issue 38).

A dataset's layout message says where its bytes are and how many are stored (contiguous:
an address and a size; compact: the bytes themselves). A file can claim an array larger than
its storage (a writer that died, a forged file): reading the claimed size would return fill
values or the bytes of whatever follows. The space: element types and byte orders, shapes,
both layouts, and a stored size short by one byte, by half, by all but one byte, exactly
enough or more than enough. The reference is the spec's rule itself: stored bytes fewer than
shape x item size are refused as a limit (never read), enough bytes read what libhdf5 reads.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
from h5py import h5d, h5p
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from juliabridge.bundle.weights import h5parse

DTYPES = ["<f4", "<f8", "<i2", ">f4", ">i8", "<u1"]


def _write(path: Path, dtype: str, shape: tuple[int, ...], compact: bool) -> np.ndarray:
    data = (np.arange(int(np.prod(shape))) + 1).astype(dtype).reshape(shape)
    with h5py.File(path, "w") as f:
        f.create_group("params")
        if compact:
            sid = h5py.h5s.create_simple(shape)
            dcpl = h5p.create(h5p.DATASET_CREATE)
            dcpl.set_layout(h5d.COMPACT)
            tid = h5py.h5t.py_create(np.dtype(dtype))
            ds = h5py.Dataset(h5d.create(f.id, b"/params/w", tid, sid, dcpl=dcpl))
            ds[...] = data
        else:
            f.create_dataset("/params/w", data=data)
        # a second dataset after it: what an over-long read would return
        f.create_dataset("/params/z", data=np.full(64, 7, "<u1"))
    return data


def _patch_stored_size(path: Path, data: np.ndarray, stored: int, compact: bool) -> None:
    nbytes = data.nbytes
    raw = bytearray(path.read_bytes())
    if compact:
        # layout message v3, class 0 (compact): size (2 bytes) then the bytes
        key = bytes([3, 0]) + nbytes.to_bytes(2, "little") + data.tobytes()
        at = raw.find(key)
        assert at >= 0 and raw.find(key, at + 1) < 0
        raw[at + 2 : at + 4] = stored.to_bytes(2, "little")
    else:
        with h5py.File(path, "r") as f:
            offset = f["/params/w"].id.get_offset()
        # layout message v3, class 1 (contiguous): address (8 bytes), size (8 bytes)
        key = bytes([3, 1]) + offset.to_bytes(8, "little") + nbytes.to_bytes(8, "little")
        at = raw.find(key)
        assert at >= 0 and raw.find(key, at + 1) < 0
        raw[at + 10 : at + 18] = stored.to_bytes(8, "little")
    path.write_bytes(bytes(raw))


def _plan(path: Path, shape: tuple[int, ...], dtype: str) -> h5parse.Plan:
    fd = os.open(path, os.O_RDONLY)
    try:
        m = h5parse.open_metadata(fd, os.fstat(fd).st_size)
        return m.plan("/params/w", shape, [np.dtype(dtype).newbyteorder("=").str], None)
    finally:
        os.close(fd)


@st.composite
def cases(draw: st.DrawFn) -> tuple:
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    compact = draw(st.booleans())
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    stored = draw(
        st.sampled_from([nbytes - 1, nbytes // 2, 1, nbytes, nbytes + 8 if not compact else nbytes])
    )
    return dtype, shape, compact, nbytes, max(stored, 0)


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
@given(case=cases())
def test_storage_smaller_than_the_data_is_refused_and_enough_is_read(tmp_path, case) -> None:
    dtype, shape, compact, nbytes, stored = case
    path = tmp_path / "w.h5"
    data = _write(path, dtype, shape, compact)
    _patch_stored_size(path, data, stored, compact)
    if stored < nbytes:
        with pytest.raises(h5parse.Problem) as e:
            _plan(path, shape, dtype)
        assert e.value.kind == "limit"
        assert f"no data stored for some or all of its {nbytes} bytes" in str(e.value)
        return
    plan = _plan(path, shape, dtype)
    assert plan.nbytes == nbytes
    raw = plan.compact if compact else path.read_bytes()[plan.offset : plan.offset + nbytes]
    got = np.frombuffer(raw, plan.stored).reshape(shape)
    np.testing.assert_array_equal(got, data)


@pytest.mark.parametrize("compact", [False, True])
def test_one_byte_short_is_refused(tmp_path: Path, compact: bool) -> None:
    path = tmp_path / "w.h5"
    _patch_stored_size(path, _write(path, "<f8", (3, 2), compact), 47, compact)
    with pytest.raises(h5parse.Problem, match="no data stored for some or all of its 48 bytes"):
        _plan(path, (3, 2), "<f8")


@pytest.mark.parametrize("extra", [1, 4096, 1 << 40])
def test_a_superblock_claiming_more_bytes_than_the_file_has_is_refused(
    tmp_path: Path, extra: int
) -> None:
    # The version-0 superblock (what h5py writes by default) holds the end-of-file address
    # at byte 40 (after the signature, versions, B-tree K values, flags, base and free-space
    # addresses); a file shorter than it claims is truncated, whatever its datasets say.
    path = tmp_path / "w.h5"
    _write(path, "<f4", (2, 3), False)
    raw = bytearray(path.read_bytes())
    assert raw[8] == 0 and int.from_bytes(raw[40:48], "little") == len(raw)
    raw[40:48] = (len(raw) + extra).to_bytes(8, "little")
    path.write_bytes(bytes(raw))
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(h5parse.Problem, match="truncated") as e:
            h5parse.open_metadata(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    assert e.value.kind == "corrupt"


@pytest.mark.parametrize("keep", [0, 1, 2000, 4095])
def test_a_dataset_running_past_the_end_of_the_file_is_refused(tmp_path: Path, keep: int) -> None:
    # The file is cut inside the last dataset's bytes and its superblock made to agree (so
    # only the dataset's own extent shows the loss): the data past the end are never read.
    path = tmp_path / "w.h5"
    with h5py.File(path, "w") as f:
        f.create_group("params")
        f.create_dataset("/params/w", data=np.arange(1024, dtype="<f4"))
    with h5py.File(path, "r") as f:
        offset = f["/params/w"].id.get_offset()
    raw = bytearray(path.read_bytes())
    assert offset + 4096 == len(raw)  # h5py writes the data last
    raw = raw[: offset + keep]
    raw[40:48] = len(raw).to_bytes(8, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(h5parse.Problem, match="lie past the end of the") as e:
        _plan(path, (1024,), "<f4")
    assert e.value.kind == "corrupt"
