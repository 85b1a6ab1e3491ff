"""The pure-Python HDF5 metadata reader (juliabridge/bundle/weights/h5parse.py) against libhdf5.

The independent reference is h5py (libhdf5): for files written every way h5py and libhdf5 can
write them (library format bounds, creation-order tracking as HDF5.jl uses it, compact and
dense link storage, deep B-trees, user blocks, every dtype, both byte orders, fixed and
variable-length `dtype` tags), the parser must find the same datasets at the same offsets with
the same shapes, types and tags. Then: what it refuses, what it hands to libhdf5, and that on
mutated files it only ever raises its two typed exceptions.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np
import pytest
from h5py import h5d, h5p
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from juliabridge.bundle.weights import _h5core, _worker, h5parse
from juliabridge.bundle.weights.lookup3 import lookup3

DTYPES = [
    "<i1", "<i2", "<i4", "<i8", "<u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", "<c8",
    "<c16", ">f4", ">i8", ">u2", ">c16", "?",
]  # fmt: skip


@contextmanager
def parsed(path: Path) -> Iterator[h5parse.H5Metadata]:
    fd = os.open(path, os.O_RDONLY)
    try:
        yield h5parse.open_metadata(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def libhdf5_view(path: Path) -> dict[str, tuple]:
    """(shape, dtype, tag, offset) of every dataset, as libhdf5 reports them."""
    out: dict[str, tuple] = {}
    with h5py.File(path, "r") as f:

        def visit(name: str, obj: object) -> None:
            if isinstance(obj, h5py.Dataset):
                tag = obj.attrs.get("dtype")
                if isinstance(tag, np.ndarray):
                    tag = tag.reshape(-1)[0]
                if isinstance(tag, bytes):
                    tag = tag.decode()
                offset = obj.id.get_offset() if obj.nbytes else None
                out["/" + name] = (obj.shape, obj.dtype.str, tag, offset)

        f.visititems(visit)
    return out


def parser_view(path: Path) -> dict[str, tuple]:
    with parsed(path) as m:
        out = {}
        for name in m.datasets:
            p = m.plan(name, None, None, None)
            out[name] = (p.shape, p.stored.str, p.tag, p.offset if p.nbytes else None)
        return out


def _fill(f: h5py.File, rng: np.random.Generator) -> None:
    for i, dt in enumerate(DTYPES):
        a = rng.random((2, 3)) > 0.5 if dt == "?" else (rng.standard_normal((2, 3)) * 9).astype(dt)
        f.create_dataset(f"/params/t{i}/w", data=a).attrs["dtype"] = f"tag{i}"
    f.create_dataset("/params/scalar", data=np.float32(3.5)).attrs["dtype"] = "f32"
    f.create_dataset("/params/empty", data=np.zeros((0, 4), np.float32)).attrs["dtype"] = "f32"
    f.create_dataset("/params/fixed", data=np.ones(4, np.float32)).attrs["dtype"] = np.bytes_("f32")
    f.create_dataset("/params/padded", data=np.ones(2)).attrs.create(
        "dtype", np.array(b"f64", dtype="S8")
    )
    f.create_dataset("/params/untagged", data=np.ones(2))


LIBVERS = ["earliest", "v108", "v110", "v112", "latest"]


@pytest.mark.parametrize("track_order", [False, True])
@pytest.mark.parametrize("libver", LIBVERS)
def test_parser_agrees_with_libhdf5_on_every_format_version(
    tmp_path: Path, libver: str, track_order: bool
) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", libver=(libver, "latest"), track_order=track_order) as f:
        _fill(f, np.random.default_rng(0))
    want = libhdf5_view(p)
    assert len(want) == len(DTYPES) + 5
    assert parser_view(p) == want


@pytest.mark.parametrize("n", [9, 60, 3000])
@pytest.mark.parametrize("track_order", [False, True])
def test_parser_agrees_on_large_groups(tmp_path: Path, n: int, track_order: bool) -> None:
    """Symbol-table B-trees with several levels; compact, dense, deep v2 B-tree link storage
    (creation order tracked, as JuliaBridge's HDF5.jl writer does)."""
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", track_order=track_order) as f:
        g = f.create_group("params", track_order=track_order)
        for i in range(n):
            g.create_dataset(f"w{i}", data=np.full(2, i, np.float32)).attrs["dtype"] = "f32"
    assert parser_view(p) == libhdf5_view(p)
    if track_order and n > 8:
        assert b"FRHP" in p.read_bytes()  # really the dense (fractal heap) storage


@pytest.mark.parametrize("pages", [0, 2])
def test_the_page_cache_is_bounded_and_reads_what_direct_reads_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pages: int
) -> None:
    """Metadata read through the page cache (even one of two pages, with pages evicted never
    and read again directly) gives exactly the blocks and datasets of one pread per block."""
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", track_order=True) as f:
        g = f.create_group("params", track_order=True)
        for i in range(300):
            g.create_dataset(f"w{i}", data=np.full(3, i, np.float32)).attrs["dtype"] = "f32"
    monkeypatch.setattr(h5parse, "PAGE", 0)  # every block its own pread
    with parsed(p) as m:
        direct = (m.parsed, parser_view(p))
        assert not m._pages
    monkeypatch.setattr(h5parse, "PAGE", 4096)
    monkeypatch.setattr(h5parse, "CACHE_PAGES", pages)
    with parsed(p) as m:
        assert (m.parsed, parser_view(p)) == direct
        assert len(m._pages) == pages  # the file has more pages of metadata than that
    assert direct[1] == libhdf5_view(p)


def test_parser_agrees_with_a_user_block_and_compact_layout(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", userblock_size=1024) as f:
        _fill(f, np.random.default_rng(1))
        sid = h5py.h5s.create_simple((4,))
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_layout(h5d.COMPACT)
        ds = h5py.Dataset(h5d.create(f.id, b"/params/c", h5py.h5t.NATIVE_FLOAT, sid, dcpl=dcpl))
        ds[...] = np.arange(4)
        ds.attrs["dtype"] = "f32"
    assert parser_view(p) == libhdf5_view(p)
    with parsed(p) as m:
        plan = m.plan("/params/c", (4,), ["<f4"], "f32")
        assert np.frombuffer(plan.compact or b"", "<f4").tolist() == [0, 1, 2, 3]


def test_data_offsets_hold_the_values_libhdf5_reads(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", track_order=True) as f:
        _fill(f, np.random.default_rng(2))
    raw = p.read_bytes()
    with h5py.File(p, "r") as f, parsed(p) as m:
        for name in m.datasets:
            plan = m.plan(name, None, None, None)
            if not plan.nbytes:
                continue
            assert plan.offset is not None
            got = np.frombuffer(raw, plan.stored, int(np.prod(plan.shape)), plan.offset)
            np.testing.assert_array_equal(got.reshape(plan.shape), f[name][()])


# --- refusals and hand-overs ------------------------------------------------------------


def _kind(path: Path) -> tuple[str, str]:
    try:
        with parsed(path) as m:
            for name in m.datasets:
                m.plan(name, None, None, None)
    except h5parse.Problem as e:
        return e.kind, str(e)
    except h5parse.Unsupported as e:
        return "unsupported", str(e)
    return "ok", ""


@pytest.mark.parametrize("track_order", [False, True])
def test_links_and_storage_that_reach_other_files_are_refused(
    tmp_path: Path, track_order: bool
) -> None:
    cases = {
        "soft": lambda f: f.__setitem__("/params/s", h5py.SoftLink("/params/a")),
        "external": lambda f: f.__setitem__("/params/e", h5py.ExternalLink("o.h5", "/x")),
        "storage": lambda f: f.create_dataset(
            "/params/x", shape=(4,), dtype="f4", external=[("raw.bin", 0, 16)]
        ),
        "virtual": lambda f: f.create_virtual_dataset("/params/v", _virtual_layout()),
    }
    needles = {
        "soft": "soft link",
        "external": "external link",
        "storage": "external raw files",
        "virtual": "virtual dataset",
    }
    for name, make in cases.items():
        p = tmp_path / f"{name}.h5"
        with h5py.File(p, "w", track_order=track_order) as f:
            f.create_dataset("/params/a", data=np.ones(3))
            make(f)
        kind, message = _kind(p)
        assert kind == "unsafe", (name, kind, message)
        assert needles[name] in message


def _virtual_layout() -> h5py.VirtualLayout:
    layout = h5py.VirtualLayout(shape=(4,), dtype="f4")
    layout[:] = h5py.VirtualSource("x.h5", "d", shape=(4,))
    return layout


def test_a_dataset_never_written_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("/params/a", shape=(4,), dtype="f4")
    kind, message = _kind(p)
    assert kind == "limit" and "fill values" in message


def test_structures_outside_the_subset_go_to_libhdf5(tmp_path: Path) -> None:
    chunked = tmp_path / "chunked.h5"
    with h5py.File(chunked, "w") as f:
        f.create_dataset("/params/a", data=np.arange(100.0), chunks=(10,), compression="gzip")
    assert _kind(chunked)[0] == "unsupported"
    dense_attrs = tmp_path / "attrs.h5"
    with h5py.File(dense_attrs, "w", track_order=True) as f:
        ds = f.create_dataset("/params/a", data=np.arange(10.0), track_order=True)
        for i in range(20):
            ds.attrs[f"a{i}"] = i
    assert _kind(dense_attrs)[0] == "unsupported"
    strings = tmp_path / "strings.h5"
    with h5py.File(strings, "w") as f:
        f.create_dataset("/params/s", data=np.array([b"ab", b"cd"]))
    assert _kind(strings)[0] == "unsupported"


def test_not_hdf5_and_truncated_files_are_corrupt(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    p.write_bytes(b"not an HDF5 file at all" * 10)
    assert _kind(p) == ("corrupt", "not a readable HDF5 file (no HDF5 signature)")
    good = tmp_path / "good.h5"
    with h5py.File(good, "w") as f:
        f.create_dataset("/params/a", data=np.ones(1000))
    p.write_bytes(good.read_bytes()[:3000])
    kind, message = _kind(p)
    assert kind == "corrupt" and "truncated" in message


def test_a_flipped_byte_in_a_checksummed_header_is_caught(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", libver="latest") as f:
        f.create_dataset("/params/a", data=np.ones(3, np.float32)).attrs["dtype"] = "f32"
    data = bytearray(p.read_bytes())
    at = data.rfind(b"OHDR") + 10
    data[at] ^= 0x01
    p.write_bytes(bytes(data))
    kind, message = _kind(p)
    assert kind == "corrupt" and "checksum" in message


def test_metadata_read_is_bounded_linearly_in_the_file_size(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", track_order=True) as f:
        g = f.create_group("params", track_order=True)
        for i in range(200):
            g.create_dataset(f"w{i}", data=np.ones(2, np.float32))
    with parsed(p) as m:
        assert m.read_bytes <= m.budget == h5parse.METADATA_FACTOR * p.stat().st_size + (1 << 20)
        # Each block is read once: well under the file's size.
        assert m.read_bytes < p.stat().st_size


def test_limits_agree_with_the_libhdf5_reader() -> None:
    for name in ("MAX_OBJECTS", "MAX_GROUP_DEPTH", "MAX_TAG_BYTES", "EXPANSION_FACTOR"):
        assert getattr(h5parse, name) == getattr(_h5core, name), name
    assert h5parse.expansion_budget(12345) == _h5core.expansion_budget(12345)
    assert _worker.HEAD.format == _h5core._HEAD.format  # the reader process's frame header


def test_lookup3_matches_the_published_test_vectors() -> None:
    # From lookup3.c's driver: hashlittle("", 0, 0) and "Four score and seven years ago".
    assert lookup3(b"") == 0xDEADBEEF
    assert lookup3(b"Four score and seven years ago") == 0x17770551
    assert lookup3(b"Four score and seven years ago", 1) == 0xCD628161


def _checksummed_blocks(raw: bytes) -> list[tuple[bytes, int]]:
    """(bytes covered, checksum libhdf5 stored) of the version-2 superblock and of the first
    chunk of every version-2 object header in `raw`, located by the format spec's fields."""
    assert raw[:8] == b"\x89HDF\r\n\x1a\n" and raw[8] in (2, 3)
    end = 12 + 4 * raw[9]  # signature, 4 one-byte fields, 4 addresses; then the checksum
    out = [(raw[:end], int.from_bytes(raw[end : end + 4], "little"))]
    at = raw.find(b"OHDR")
    while at >= 0:
        flags = raw[at + 5]
        pos = at + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        end = pos + width + int.from_bytes(raw[pos : pos + width], "little")
        out.append((raw[at:end], int.from_bytes(raw[end : end + 4], "little")))
        at = raw.find(b"OHDR", end)
    return out


def test_lookup3_matches_the_checksums_libhdf5_writes(tmp_path: Path) -> None:
    # Object headers of every length modulo lookup3's 12-byte blocks (four or five attributes
    # of 7 to 15 bytes on a dataset): the checksum libhdf5 stored after each header, and after
    # the superblock, is lookup3 of what precedes it.
    blocks: list[tuple[bytes, int]] = []
    for k, n in itertools.product((4, 5), range(7, 16)):
        p = tmp_path / f"{k}-{n}.h5"
        with h5py.File(p, "w", libver="latest") as f:
            d = f.create_dataset("d", data=np.zeros(2, np.float32), track_times=False)
            for j in range(k):
                d.attrs[f"a{j}"] = np.bytes_(b"x" * n)
        blocks += _checksummed_blocks(p.read_bytes())
    assert {len(b) % 12 for b, _ in blocks} == set(range(12))
    for data, stored in blocks:
        assert lookup3(data) == stored, len(data)


# --- mutated files: typed refusals only, never another exception or a hang ---------------


def _sample_files(tmp: Path) -> list[bytes]:
    out = []
    for libver, track in (("earliest", False), ("latest", True), ("earliest", True)):
        p = tmp / f"{libver}{track}.h5"
        with h5py.File(p, "w", libver=(libver, "latest"), track_order=track) as f:
            g = f.create_group("params", track_order=track)
            for i in range(12):
                ds = g.create_dataset(f"w{i}", data=np.full((2, 3), i, np.float32))
                ds.attrs["dtype"] = "f32"
        out.append(p.read_bytes())
    return out


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    return _sample_files(tmp_path_factory.mktemp("samples"))


@settings(
    max_examples=int(os.environ.get("JB_H5PARSE_EXAMPLES", "400")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    which=st.integers(0, 2),
    edits=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.binary(min_size=1, max_size=8)),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_files_end_in_typed_outcomes(
    tmp_path: Path, samples: list[bytes], which: int, edits: list[tuple[float, bytes]]
) -> None:
    data = bytearray(samples[which])
    for where, junk in edits:
        at = int(where * (len(data) - len(junk)))
        data[at : at + len(junk)] = junk
    p = tmp_path / "m.h5"
    p.write_bytes(bytes(data))
    fd = os.open(p, os.O_RDONLY)
    try:
        # The class itself, not open_metadata (whose last-resort net turns any other exception
        # into a hand-over to libhdf5): the parser's own checks must catch every mutation.
        m = h5parse.H5Metadata(fd, len(data))
        for name in m.datasets:
            m.plan(name, None, None, None)
        assert m.read_bytes <= m.budget
    except (h5parse.Problem, h5parse.Unsupported):
        pass
    finally:
        os.close(fd)
