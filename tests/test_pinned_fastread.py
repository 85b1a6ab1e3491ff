"""Pinned: the Python reader's data path (bundle/weights/fastread.py) on the files it reads.

Each test writes its weights file with h5py, reads it through ``open_weights`` on the default
(Python) route and compares with the values written, digests computed here with blake3/sha256
over the little-endian bytes (spec §4.1), or with the refusal spelt out.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import blake3
import h5py
import numpy as np
import pytest
from h5py import h5d, h5p, h5s, h5t

import juliabridge
from juliabridge.bundle.weights import ReadRequest, fastread, open_weights


@pytest.fixture(autouse=True)
def _python_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "1")
    monkeypatch.setenv("JULIABRIDGE_HDF5_WORKER", "0")  # whatever falls back stays here


def _digest(a: np.ndarray) -> str:
    return blake3.blake3(a.astype(a.dtype.newbyteorder("<")).tobytes()).hexdigest()


def _read(path: Path, *reqs: ReadRequest, file_sha256: str | None = None) -> list[np.ndarray]:
    with open_weights(path, file_sha256=file_sha256) as f:
        assert f.mode == "python"
        got = {r.dataset: a for r, a in f.read(list(reqs))}
    return [got[r.dataset] for r in reqs]


@pytest.mark.parametrize("order", ["<", ">"])
def test_one_dataset_with_its_digest_reads_its_values_in_either_byte_order(
    tmp_path: Path, order: str
) -> None:
    # 12 bytes: a digest over anything but those bytes, in little-endian order, differs
    a = np.array([1.5, -2.0, 3.25], np.dtype(order + "f4"))
    p = tmp_path / "w.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("/params/a", data=a).attrs["dtype"] = "f32"
    (got,) = _read(p, ReadRequest("/params/a", (3,), "f32", "a", _digest(a), "blake3"))
    np.testing.assert_array_equal(got, a)
    assert got.dtype == np.dtype("=f4")
    with pytest.raises(juliabridge.ChecksumError):
        _read(p, ReadRequest("/params/a", (3,), "f32", "a", _digest(a + 1), "blake3"))


def _early(f: h5py.File, name: str, dtype: np.dtype, fill: float) -> h5py.Dataset:
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_value(np.array(fill, dtype))
    space, kind = h5s.create_simple((3,)), h5t.py_create(dtype)
    f.require_group(name.rsplit("/", 1)[0])
    ds = h5py.Dataset(h5d.create(f.id, name.encode(), kind, space, dcpl=dcpl))
    ds.attrs["dtype"] = "f32"
    return ds


@pytest.mark.parametrize("order", ["<", ">"])
def test_an_early_allocated_dataset_holding_only_its_nonzero_fill_is_refused(
    tmp_path: Path, order: str
) -> None:
    dt = np.dtype(order + "f4")
    p = tmp_path / "w.h5"
    with h5py.File(p, "w") as f:
        _early(f, "/params/never", dt, 1.5)  # 1.5 is 00 00 c0 3f: no palindrome
        _early(f, "/params/written", dt, 1.5)[...] = [1.5, 1.5, 2.0]
    req = ReadRequest("/params/never", (3,), "f32", "never")
    with pytest.raises(juliabridge.BundleError) as e:
        _read(p, req)
    assert str(e.value) == (
        f"{p}: never (/params/never): dataset /params/never was allocated when created (HDF5 early allocation) "
        "and holds nothing but its fill value: it was never written. Writers write every "
        "dataset's data (spec §4). Re-export the bundle (JuliaBridge.export_lux and "
        "juliabridge.save_params write complete, inline datasets)"
    )
    (got,) = _read(p, ReadRequest("/params/written", (3,), "f32", "written"))
    np.testing.assert_array_equal(got, [1.5, 1.5, 2.0])


def test_datasets_whose_stored_bytes_overlap_are_refused_naming_both(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w") as f:
        for name in ("a", "b"):
            f.create_dataset(f"/params/{name}", data=np.ones(3, np.float32)).attrs["dtype"] = "f32"
        at = {n: int(f[f"/params/{n}"].id.get_offset()) for n in ("a", "b")}
    raw = p.read_bytes()
    where = raw.find(at["b"].to_bytes(8, "little"))  # b's address in its layout message
    assert where > 0 and raw.find(at["b"].to_bytes(8, "little"), where + 1) < 0
    p.write_bytes(raw[:where] + (at["a"] + 4).to_bytes(8, "little") + raw[where + 8 :])
    reqs = [ReadRequest(f"/params/{n}", (3,), "f32", n) for n in ("a", "b")]
    with pytest.raises(juliabridge.BundleError) as e:
        _read(p, *reqs)
    assert str(e.value).startswith(
        f"{p}: datasets /params/a and /params/b share stored bytes; their storage entries "
        "overlap or are forged. "
    )


@pytest.mark.parametrize("changed", [False, True])
def test_a_parsed_block_deep_in_a_long_stretch_is_checked_at_its_own_offset(
    tmp_path: Path, changed: bool
) -> None:
    # read_whole_file hashes a stretch longer than its read buffer in several reads; metadata
    # parsed inside its third read must be compared with the bytes at that very offset.
    data = np.random.default_rng(0).integers(0, 256, 3 * fastread.SLAB + 100, np.uint8).tobytes()
    p = tmp_path / "blob"
    p.write_bytes(data)
    at = 2 * fastread.SLAB + 5
    block = data[at : at + 16]
    parsed = [(10, data[10:20]), (at, bytes(16) if changed else block)]
    fd = os.open(p, os.O_RDONLY)
    try:
        if changed:
            with pytest.raises(fastread.FileChanged) as e:
                fastread.read_whole_file(
                    fd, len(data), [], parsed, hashlib.sha256(data).hexdigest()
                )
            assert e.value.offset == at
        else:
            assert (
                fastread.read_whole_file(
                    fd, len(data), [], parsed, hashlib.sha256(data).hexdigest()
                )
                == []
            )
    finally:
        os.close(fd)
