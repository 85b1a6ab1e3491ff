"""The pure-Python HDF5 reader (juliabridge/bundle/weights/h5parse.py) on the structures that
only big groups, old-style files and forged fields reach.

Files are written by h5py (libhdf5, the reference for values); forged fields are byte patches
at offsets located from the HDF5 format specification's field layout (not through h5parse),
with the lookup3 checksum of a version-2 block recomputed. Each test states what the reader
must do: the values libhdf5 reads, or the typed refusal (its kind, and the dataset, node or
structure it names). Unsupported structures are handed to libhdf5 with the reason kept
(`H5File.fallback`), so that reason is stated too.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from h5py import h5d, h5p, h5s, h5t

from juliabridge.bundle.weights import h5parse
from juliabridge.bundle.weights.lookup3 import lookup3

from .test_loading_h5parse import _kind, libhdf5_view, parsed, parser_view
from .test_pinned_libhdf5 import _retype_link

# Field offsets in the fractal heap header and the v2 B-tree header (format spec III.G and
# III.A.2) for 8-byte addresses and lengths, which every file here has.
FRHP_ID_LEN, FRHP_FILTERS, FRHP_WIDTH, FRHP_END = 5, 7, 110, 142
BTHD_NODE_SIZE, BTHD_REC_SIZE, BTHD_DEPTH, BTHD_ROOT, BTHD_ROOT_N, BTHD_END = 6, 10, 12, 16, 24, 34


def _reseal(raw: bytearray, start: int, end: int) -> None:
    """Store lookup3 of raw[start:end] in the 4 bytes after it (a v2 block's checksum)."""
    raw[end : end + 4] = lookup3(bytes(raw[start:end])).to_bytes(4, "little")


def _patched(src: Path, dest: Path, edit: Callable[[bytearray], None]) -> Path:
    raw = bytearray(src.read_bytes())
    edit(raw)
    dest.write_bytes(bytes(raw))
    return dest


def _name_index(raw: bytes | bytearray) -> int:
    """Offset of the v2 B-tree header of type 5 (a group's link name index)."""
    at = raw.find(b"BTHD")
    while raw[at + 5] != 5:
        at = raw.find(b"BTHD", at + 4)
        assert at >= 0, "no link name index"
    return at


def _tracked_group(path: Path, n: int) -> Path:
    """/params with `n` tagged float32 datasets, creation order tracked (dense links past 8)."""
    with h5py.File(path, "w") as f:
        g = f.create_group("params", track_order=True)
        for i in range(n):
            g.create_dataset(f"w{i}", data=np.full(2, i, np.float32)).attrs["dtype"] = "f32"
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 200-link dense group (fractal heap with an indirect root, depth-1 v2 B-tree) and a
    600-link old-style group (local heap, v1 B-tree of several nodes), written once."""
    tmp = tmp_path_factory.mktemp("big")
    dense = _tracked_group(tmp / "dense.h5", 200)
    old = tmp / "old.h5"
    with h5py.File(old, "w", libver="earliest") as f:
        d = f.create_dataset("/params/a", data=np.float32([1, 2]))
        d.attrs["dtype"] = "f32"
        for i in range(600):
            f["params"][f"l{i}"] = d  # hard links: one object, 600 names
    return {"dense": dense, "old": old}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 links in dense storage: the fractal heap's root is a direct block, the name index a
    single leaf."""
    return _tracked_group(tmp_path_factory.mktemp("small") / "small.h5", 12)


# --- large groups -------------------------------------------------------------------------


def test_big_groups_of_both_kinds_agree_with_libhdf5(big: dict[str, Path]) -> None:
    raw = big["dense"].read_bytes()
    at = _name_index(raw)
    assert struct.unpack_from("<H", raw, at + BTHD_DEPTH)[0] == 1  # internal nodes read
    assert parser_view(big["dense"]) == libhdf5_view(big["dense"])
    # h5py visits an object once; its 601 names are the group's keys, all the one dataset.
    (one,) = libhdf5_view(big["old"]).values()
    with h5py.File(big["old"], "r") as f:
        names = ["/params/" + k for k in f["params"]]
    view = parser_view(big["old"])
    assert list(view) == names and len(names) == 601
    assert set(view.values()) == {one}
    with parsed(big["old"]) as m:
        assert m.read_bytes < big["old"].stat().st_size  # the one header is read once


def test_a_group_btree_past_the_node_bound_is_refused_naming_the_group(
    big: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old-style /params has more than one B-tree node; with the bound at one, the refusal
    is a limit naming the group (the root group, one node, passes)."""
    monkeypatch.setattr(h5parse, "MAX_OBJECTS", 1)
    assert _kind(big["old"]) == ("limit", "group /params has more than 1 nodes")


@pytest.mark.parametrize("tree", ["leaf root", "internal root"])
def test_a_btree_node_claiming_more_records_than_its_size_holds_is_named(
    tmp_path: Path, small: Path, big: dict[str, Path], tree: str
) -> None:
    """The header's node size is lowered until the root node's record count no longer fits
    (spec III.A.2: a leaf holds (size - 10) // record bytes; an internal node (size - 10 -
    p) // (record bytes + p), p the child pointer's bytes): the root is refused by name."""
    src = small if tree == "leaf root" else big["dense"]
    raw = bytearray(src.read_bytes())
    at = _name_index(raw)
    rec = struct.unpack_from("<H", raw, at + BTHD_REC_SIZE)[0]
    root = struct.unpack_from("<Q", raw, at + BTHD_ROOT)[0]
    n = struct.unpack_from("<H", raw, at + BTHD_ROOT_N)[0]
    # A leaf of `n` records needs 10 + n * rec bytes; an internal node's child pointers are an
    # address, a one-byte record count (leaves hold < 256 records) and no total (level 1).
    ptr = 0 if tree == "leaf root" else 8 + 1
    size = 10 + n * (rec + ptr) + ptr - 1  # one byte short of holding the root's records
    struct.pack_into("<I", raw, at + BTHD_NODE_SIZE, size)
    _reseal(raw, at, at + BTHD_END)
    p = tmp_path / "w.h5"
    p.write_bytes(bytes(raw))
    kind, message = _kind(p)
    assert (kind, message) == (
        "corrupt",
        f"the HDF5 structure is unreadable (v2 B-tree node at {root} claims {n} records)",
    )


def test_a_btree_node_whose_checksum_is_wrong_is_named(tmp_path: Path, small: Path) -> None:
    def flip(raw: bytearray) -> None:
        leaf = struct.unpack_from("<Q", raw, _name_index(raw) + BTHD_ROOT)[0]
        assert raw[leaf : leaf + 4] == b"BTLF"
        raw[leaf + 6] ^= 1  # the first record's name hash

    p = _patched(small, tmp_path / "w.h5", flip)
    leaf = struct.unpack_from("<Q", p.read_bytes(), _name_index(p.read_bytes()) + BTHD_ROOT)[0]
    assert _kind(p) == (
        "corrupt",
        f"the HDF5 structure is unreadable (the checksum of the v2 B-tree node at {leaf} does "
        "not match)",
    )


def _heap_edit(field: int, value: int, *, reseal: bool) -> Callable[[bytearray], None]:
    def edit(raw: bytearray) -> None:
        at = raw.find(b"FRHP")
        struct.pack_into("<H", raw, at + field, value)
        if reseal:
            _reseal(raw, at, at + FRHP_END)

    return edit


def test_a_fractal_heap_of_forged_sizes_is_refused(tmp_path: Path, small: Path) -> None:
    # Table width 3: the doubling table's widths must be powers of two.
    p = _patched(small, tmp_path / "width.h5", _heap_edit(FRHP_WIDTH, 3, reseal=True))
    at = p.read_bytes().find(b"FRHP")
    assert _kind(p) == (
        "corrupt",
        f"the HDF5 structure is unreadable (fractal heap at {at} has a doubling table of bad "
        "sizes)",
    )
    # Heap IDs of 8 bytes where the name index's records hold 7.
    p = _patched(small, tmp_path / "idlen.h5", _heap_edit(FRHP_ID_LEN, 8, reseal=True))
    assert _kind(p) == (
        "corrupt",
        "the HDF5 structure is unreadable (a fractal heap ID of the wrong length)",
    )
    # I/O filters on the heap: libhdf5's to read (no checksum: refused before it is checked).
    p = _patched(small, tmp_path / "filtered.h5", _heap_edit(FRHP_FILTERS, 12, reseal=False))
    assert _kind(p) == ("unsupported", "a filtered fractal heap")


def test_tiny_fractal_heap_objects_are_read_from_the_id(small: Path) -> None:
    """Spec III.G: a tiny object lies in its heap ID, after a one-byte length (IDs up to 18
    bytes) or a two-byte extended length (longer IDs)."""
    at = small.read_bytes().find(b"FRHP")
    with parsed(small) as m:
        heap = h5parse._FractalHeap(m, at)
        heap.id_len = 7
        assert heap.get(bytes([0x20 | 2]) + b"abc" + b"\0" * 3) == b"abc"
        heap.id_len = 20
        assert heap.get(bytes([0x20, 4]) + b"hello" + b"\0" * 13) == b"hello"
        with pytest.raises(h5parse.Problem, match="longer than its ID"):
            heap.get(bytes([0x20, 30]) + b"\0" * 18)


# --- object headers -------------------------------------------------------------------------


def test_a_version2_header_continued_in_another_block_is_read(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", libver="latest") as f:
        d = f.create_dataset("/params/a", data=np.arange(4.0))
        f.create_dataset("/params/b", data=np.arange(3.0))  # the header of a is not at the end
        for k in range(4):
            d.attrs[f"x{k}"] = np.bytes_(b"y" * 60)
        d.attrs["dtype"] = "f64"  # in the continuation block
    assert b"OCHK" in p.read_bytes()
    assert parser_view(p) == libhdf5_view(p)
    assert parser_view(p)["/params/a"][2] == "f64"


def _v1_message(raw: bytes | bytearray, header: int, kind: int) -> tuple[int, int]:
    """(offset, length) of the body of the first message `kind` in the first chunk of the
    version-1 object header at `header` (spec IV.A.1.a: 16-byte prefix, 8-byte message heads)."""
    assert raw[header] == 1
    pos, end = header + 16, header + 16 + struct.unpack_from("<I", raw, header + 8)[0]
    while pos < end:
        mkind, size = struct.unpack_from("<HH", raw, pos)
        if mkind == kind:
            return pos + 8, size
        pos += 8 + size
    raise AssertionError(f"no message {kind}")


def _old_file(path: Path, make: Callable[[h5py.File], object]) -> tuple[Path, int]:
    """A libver='earliest' file (version-1 headers, no checksums) and the header address of
    its dataset /params/x."""
    with h5py.File(path, "w", libver="earliest") as f:
        make(f)
        header = h5py.h5o.get_info(f["/params/x"].id).addr
    return path, header


def _retyped(
    path: Path, header: int, kind: int, edit: Callable[[bytearray, int, int], None]
) -> Path:
    raw = bytearray(path.read_bytes())
    at, size = _v1_message(raw, header, kind)
    edit(raw, at, size)
    path.write_bytes(bytes(raw))
    return path


def test_a_dataspace_of_more_dimensions_than_its_message_holds_is_corrupt(tmp_path: Path) -> None:
    p, header = _old_file(
        tmp_path / "w.h5", lambda f: f.create_dataset("/params/x", data=np.ones(4))
    )

    def rank(raw: bytearray, at: int, size: int) -> None:
        assert raw[at] == 1 and raw[at + 1] == 1  # version 1, rank 1
        raw[at + 1] = 3  # 8 + 3 * 8 bytes of dimensions needed; the message has fewer

    _retyped(p, header, 1, rank)
    assert _kind(p) == (
        "corrupt",
        "the HDF5 structure is unreadable (the dataspace of /params/x is truncated)",
    )


def test_float_and_compound_types_outside_the_subset(tmp_path: Path) -> None:
    p, header = _old_file(
        tmp_path / "f.h5", lambda f: f.create_dataset("/params/x", data=np.ones(4, "<f4"))
    )

    def precision(raw: bytearray, at: int, size: int) -> None:
        assert struct.unpack_from("<HH", raw, at + 8) == (0, 32)  # bit offset, precision
        struct.pack_into("<H", raw, at + 10, 31)

    _retyped(p, header, 3, precision)
    assert _kind(p) == ("unsupported", "a non-IEEE float type")

    p, header = _old_file(
        tmp_path / "c.h5", lambda f: f.create_dataset("/params/x", data=np.ones(4, "<c8"))
    )

    def names(raw: bytearray, at: int, size: int) -> None:
        assert raw[at] & 0x0F == 6  # compound
        raw[at + 8 : at + size] = b"A" * (size - 8)  # member names without their terminator

    _retyped(p, header, 3, names)
    assert _kind(p) == (
        "corrupt",
        "the HDF5 structure is unreadable (the compound type of /params/x is truncated)",
    )

    p = tmp_path / "e.h5"
    with h5py.File(p, "w") as f:
        enum = h5py.enum_dtype({"A": 0, "B": 1}, basetype="i1")
        f.create_dataset("/params/x", data=np.array([0, 1], "i1"), dtype=enum)
    assert _kind(p) == ("unsupported", "an enum type other than bool")


# --- fill values ------------------------------------------------------------------------------


@pytest.mark.parametrize("libver", ["earliest", "latest"])
@pytest.mark.parametrize("early", [False, True])
def test_fill_values_and_allocation_time_are_read(tmp_path: Path, libver: str, early: bool) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", libver=libver) as f:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_fill_value(np.array(1.5, "<f4"))
        dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY if early else h5d.ALLOC_TIME_LATE)
        f.create_group("params")
        dsid = h5d.create(f.id, b"/params/x", h5t.IEEE_F32LE, h5s.create_simple((3,)), dcpl=dcpl)
        h5py.Dataset(dsid)[...] = np.arange(3)
        plist = dsid.get_create_plist()
        want_fill = np.zeros((), "<f4")
        plist.get_fill_value(want_fill)
        want_early = plist.get_alloc_time() == h5d.ALLOC_TIME_EARLY
    with parsed(p) as m:
        plan = m.plan("/params/x", (3,), ["<f4"], None)
    assert plan.fill == want_fill.tobytes() == np.float32(1.5).tobytes()
    assert plan.early is want_early is early


def test_a_fill_value_only_in_the_old_message_is_read(tmp_path: Path) -> None:
    """Files from before the fill value message of type 5 carry the value in type 4 alone."""

    def make(f: h5py.File) -> object:
        return f.create_dataset("/params/x", shape=(2,), dtype="<f4", fillvalue=2.5, data=[1, 2])

    p, header = _old_file(tmp_path / "w.h5", make)

    def drop_new(raw: bytearray, at: int, size: int) -> None:
        struct.pack_into("<H", raw, at - 8, 0)  # type 5 -> NIL

    _retyped(p, header, 5, drop_new)
    with parsed(p) as m:
        assert m.plan("/params/x", (2,), ["<f4"], None).fill == np.float32(2.5).tobytes()
    with h5py.File(p, "r") as f:
        np.testing.assert_array_equal(f["/params/x"][()], [1, 2])  # still a valid file


# --- the dtype tag ----------------------------------------------------------------------------


def test_variable_length_tags_share_one_global_heap_read(tmp_path: Path) -> None:
    """h5py stores string attributes in a global heap collection shared by all of them: it is
    read once, so the metadata read stays well under the file's size."""
    p = tmp_path / "w.h5"
    with h5py.File(p, "w") as f:
        for i in range(20):
            f.create_dataset(f"/params/w{i}", data=np.full(2, i, np.float32)).attrs["dtype"] = "f32"
    assert parser_view(p) == libhdf5_view(p)
    with parsed(p) as m:
        assert all(m.tag(d) == "f32" for d in m.datasets.values())
        assert m.read_bytes < p.stat().st_size


def test_a_global_heap_past_the_bound_goes_to_libhdf5_naming_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("/params/w", data=np.ones(2, np.float32)).attrs["dtype"] = "f32"
    raw = p.read_bytes()
    at = raw.find(b"GCOL")
    size = struct.unpack_from("<Q", raw, at + 8)[0]  # spec III.E: collection size
    monkeypatch.setattr(h5parse, "MAX_GLOBAL_HEAP", size - 1)
    assert _kind(p) == ("unsupported", f"a {size}-byte global heap collection")


# --- links and plans --------------------------------------------------------------------------


def test_a_user_defined_link_is_unsafe(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", libver="latest") as f:
        f.create_dataset("/params/a", data=np.ones(3))
        f["/params/userlink"] = h5py.SoftLink("/params/a")
    _retype_link(p, b"userlink", 66)
    kind, message = _kind(p)
    assert kind == "unsafe"
    assert message.startswith("/params/userlink is a user-defined HDF5 link (type 66)")


def test_plans_and_listings_name_what_they_check(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("/params/i", data=np.arange(3, dtype="<i4")).attrs["dtype"] = "i32"
        f.create_dataset("/params/n", data=h5py.Empty("<f4"))
        f.create_dataset("/state/s", data=np.float64(2.0)).attrs["dtype"] = "f64"
    with parsed(p) as m:
        plan = m.plan("/params/i", (3,), ["<i4"], "i32")
        assert (plan.name, plan.shape, plan.tag) == ("/params/i", (3,), "i32")
        with pytest.raises(h5parse.Problem, match="stored as int32, expected float32 or float64"):
            m.plan("/params/i", (3,), ["<f4", "<f8"], "f32")
        with pytest.raises(h5parse.Problem) as e:
            m.plan("/params/n", (1,), ["<f4"], None)
        assert (e.value.kind, str(e.value)) == (
            "mismatch",
            "/params/n has an empty (null) dataspace, expected data of shape [1]",
        )
        for group in ("/params", "state/", "/"):
            with pytest.raises(h5parse.Problem, match="has a group at"):
                m.plan(group, None, None, None)
        with pytest.raises(h5parse.Problem, match="has nothing at /params/z"):
            m.plan("/params/z", None, None, None)
        assert m.listing(["state"]) == [
            {"name": "/state/s", "shape": [], "dtype": "<f8", "tag": "f64", "nbytes": 8}
        ]
        assert m.listing(["other"]) == []


def test_an_enum_type_without_its_base_type_is_corrupt(tmp_path: Path) -> None:
    """The datatype message of a bool dataset cut to its 8-byte head (the rest of its space
    made a NIL message): the base type the enum needs is missing."""
    p, header = _old_file(
        tmp_path / "w.h5", lambda f: f.create_dataset("/params/x", data=np.array([True, False]))
    )

    def cut(raw: bytearray, at: int, size: int) -> None:
        assert raw[at] & 0x0F == 8 and size >= 24  # enum
        struct.pack_into("<H", raw, at - 6, 8)  # this message: 8 bytes, then
        struct.pack_into("<HHB3x", raw, at + 8, 0, size - 16, 0)  # a NIL message

    _retyped(p, header, 3, cut)
    assert _kind(p) == (
        "corrupt",
        "the HDF5 structure is unreadable (the datatype of /params/x is truncated)",
    )


def test_a_group_btree_node_claiming_more_entries_than_the_file_holds_is_named(
    tmp_path: Path,
) -> None:
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", libver="earliest") as f:
        f.create_dataset("/params/a", data=np.ones(2))
    raw = bytearray(p.read_bytes())
    node = raw.find(b"TREE")  # the root group's B-tree (spec III.A.1): entries used at +6
    struct.pack_into("<H", raw, node + 6, 0xFFFF)
    p.write_bytes(bytes(raw))
    assert _kind(p) == (
        "corrupt",
        f"the HDF5 structure is unreadable (a group B-tree node at address {node + 24} lies "
        "past the end of the file)",
    )


def test_a_local_heap_two_groups_share_is_read_once(tmp_path: Path) -> None:
    """/state's symbol table message is made to name /params's B-tree and local heap: both
    groups list the same links, and the heap's bytes are read once."""
    p = tmp_path / "w.h5"
    with h5py.File(p, "w", libver="earliest") as f:
        f.create_dataset("/params/a", data=np.ones(2)).attrs["dtype"] = "f64"
        f.create_group("state")
        params, state = (h5py.h5o.get_info(f[g].id).addr for g in ("params", "state"))
    raw = bytearray(p.read_bytes())
    at, size = _v1_message(raw, params, 17)  # symbol table: B-tree and heap addresses
    to, _ = _v1_message(raw, state, 17)
    raw[to : to + size] = raw[at : at + size]
    heap = struct.unpack_from("<Q", raw, at + 8)[0]
    heap_data = struct.unpack_from("<Q", raw, heap + 24)[0]  # spec III.D: data segment address
    p.write_bytes(bytes(raw))
    with parsed(p) as m:
        assert list(m.datasets) == ["/params/a", "/state/a"]
        assert (
            m.plan("/state/a", (2,), ["<f8"], "f64").offset
            == m.plan("/params/a", None, None, None).offset
        )
        assert [at for at, _ in m.parsed].count(heap_data) == 1


def test_four_byte_addresses_and_lengths_are_read(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    fcpl = h5p.create(h5p.FILE_CREATE)
    fcpl.set_sizes(4, 4)
    with h5py.File(h5py.h5f.create(str(p).encode(), fcpl=fcpl)) as f:
        f.create_dataset("/params/a", data=np.arange(3.0)).attrs["dtype"] = "f64"
    assert parser_view(p) == libhdf5_view(p)


def test_a_compact_layout_claiming_more_bytes_than_its_message_is_corrupt(tmp_path: Path) -> None:
    def make(f: h5py.File) -> object:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_layout(h5d.COMPACT)
        f.create_group("params")
        sid = h5s.create_simple((4,))
        return h5d.create(f.id, b"/params/x", h5t.IEEE_F32LE, sid, dcpl=dcpl)

    p, header = _old_file(tmp_path / "w.h5", make)

    def grow(raw: bytearray, at: int, size: int) -> None:
        assert raw[at : at + 2] == b"\x03\x00"  # version 3, compact; then the data's size
        struct.pack_into("<H", raw, at + 2, size)  # more than the message holds after it

    _retyped(p, header, 8, grow)
    assert _kind(p) == (
        "corrupt",
        "the HDF5 structure is unreadable (the layout message of /params/x runs past its end)",
    )
