"""Pinned: the refusals of the libhdf5 route (docs/bundle-format.md §4), on that route.

The Python reader refuses most hostile files itself, and hands what it does not parse (chunked
or compressed datasets, unusual structures) to libhdf5, in its own reader process by default.
That hand-over is the route an attacker picks, so its own checks are pinned here with the
route forced: ``JULIABRIDGE_HDF5_FASTPATH=0`` sends every file to libhdf5, in its process
(``JULIABRIDGE_HDF5_WORKER=1``) or in this one (``=0``, as under mutmut); where a chunked
dataset sends the file there by itself, the default route is run as well. Each test builds one
hostile weights file with h5py and expects the typed error and its whole message.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import h5py
import numpy as np
import pytest

import juliabridge
from juliabridge import BundleError, UnsafeBundleError
from juliabridge.bundle.weights import _h5core, _worker, h5parse, open_weights
from juliabridge.bundle.weights.lookup3 import lookup3

from .pinned_support import Arg, dense_spec, lower, reseal, write
from .reader_here import serve_here

ROUTES = {
    # (JULIABRIDGE_HDF5_FASTPATH, JULIABRIDGE_HDF5_WORKER, reader mode expected)
    "forced-own-process": ("0", "1", "process"),
    "forced-this-process": ("0", "0", "in-process"),
    "chunked-own-process": ("1", "1", "process"),
    # the reader process's request loop run in a thread here (tests/reader_here.py), where
    # mutmut's mutants of it and of the parent side are live
    "forced-served-here": ("0", "1", "process"),
}
FORCED = ["forced-own-process", "forced-this-process", "forced-served-here"]
LIMIT_ADVICE = (
    "Re-export the bundle (JuliaBridge.export_lux and juliabridge.save_params write complete, "
    "inline datasets)"
)
UNSAFE_ADVICE = (
    "Refused because it could make the reader open other files; re-export the bundle with "
    "JuliaBridge.export_lux or juliabridge.save_params"
)


@pytest.fixture(autouse=True)
def _no_idle_reader() -> Iterator[None]:
    yield
    _worker.stop_idle()


def _route(monkeypatch: pytest.MonkeyPatch, route: str) -> str:
    fast, worker, mode = ROUTES[route]
    if route == "forced-served-here":
        serve_here(monkeypatch)
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", fast)
    monkeypatch.setenv("JULIABRIDGE_HDF5_WORKER", worker)
    return mode


def _bundle(tmp_path: Path, *, big: int = 0) -> Path:
    """The dense bundle; with `big`, a float32 state vector of that many elements as well."""
    spec, _ = dense_spec()
    if big:
        spec.args.append(Arg("state", ["big"], np.zeros(big, np.float32)))
        spec.mlir = lower(lambda x, w, b, s: x @ w + b, *[a.value for a in spec.args])
    return write(tmp_path / "b.bundle", spec)


def _rewrite(root: Path, name: str, make: Callable[[h5py.File, str], Any]) -> Path:
    """Replace dataset `name` by what `make` creates (keeping its dtype tag unless `make` sets
    one); reseal."""
    with h5py.File(root / "weights.h5", "a") as f:
        tag = f[name].attrs["dtype"]
        del f[name]
        made = make(f, name)
        if isinstance(made, h5py.Dataset) and "dtype" not in made.attrs:
            made.attrs["dtype"] = tag
    reseal(root)
    return root / "weights.h5"


def _clean_copy_mode(tmp_path: Path, mode: str, *, chunked: bool = True) -> None:
    """The route the test means is the one a well-formed file of its kind takes.

    With `chunked`, one dataset is gzip-chunked, which the default route hands to libhdf5.
    """
    root = _bundle(tmp_path / "clean")
    w = np.ones((2, 3), np.float32)
    if chunked:
        _rewrite(
            root,
            "/params/layer_1/weight",
            lambda f, n: f.create_dataset(n, data=w, chunks=(1, 3), compression="gzip"),
        )
    with open_weights(root / "weights.h5") as reader:
        got = reader.read_array("/params/layer_1/weight", (2, 3), "f32", "params.layer_1.weight")
        assert reader.mode == mode
    if chunked:
        np.testing.assert_array_equal(got, w)


def _refusal(root: Path, cls: type[Exception]) -> str:
    with pytest.raises(cls) as e:
        juliabridge.import_lux(root)
    assert type(e.value) is cls
    return str(e.value)


# --- links and storage that leave the file ----------------------------------------------------
# The default route refuses these in the Python reader, so only the forced routes reach libhdf5.


@pytest.mark.parametrize("route", FORCED)
@pytest.mark.parametrize(
    ("link", "what"),
    [
        (lambda: h5py.SoftLink("/params/layer_1/bias"), "an HDF5 soft link; weights files hold"),
        (
            lambda: h5py.ExternalLink("other.h5", "/params/layer_1/weight"),
            "an HDF5 external link, which would read another file; weights",
        ),
    ],
    ids=["soft", "external"],
)
def test_a_link_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str, link: Any, what: str
) -> None:
    mode = _route(monkeypatch, route)
    _clean_copy_mode(tmp_path, mode, chunked=False)
    root = _bundle(tmp_path)
    with h5py.File(root / "weights.h5", "a") as f:
        f["/params/extra"] = link()
    reseal(root)
    msg = _refusal(root, UnsafeBundleError)
    assert msg.startswith(f"{root / 'weights.h5'}: /params/extra is {what}")
    assert msg.endswith(UNSAFE_ADVICE)


def _retype_link(path: Path, name: bytes, kind: int) -> None:
    """Give the link `name` (a link message in a version-2 object header) link type `kind`;
    the header's lookup3 checksum is recomputed. h5py cannot write user-defined links."""
    raw = bytearray(path.read_bytes())
    at = raw.find(name)
    for j in range(at - 20, at):  # version 1, flags with 'type present', then the type
        flags = raw[j + 1]
        size = 3 + (8 if flags & 4 else 0) + (1 if flags & 0x10 else 0) + (1 << (flags & 3))
        if raw[j] == 1 and flags & 8 and j + size == at:
            raw[j + 2] = kind
            break
    else:
        raise AssertionError("link message not found")
    head = raw.rfind(b"OHDR", 0, at)
    flags = raw[head + 5]
    pos = head + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
    width = 1 << (flags & 3)
    end = pos + width + int.from_bytes(raw[pos : pos + width], "little")
    raw[end : end + 4] = lookup3(bytes(raw[head:end])).to_bytes(4, "little")
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("route", FORCED)
def test_a_user_defined_link_is_refused_naming_its_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    # libhdf5 resolves a user-defined link through whatever link class is registered
    _route(monkeypatch, route)
    root = _bundle(tmp_path)
    with h5py.File(root / "weights.h5", "a") as f:
        f.create_group("/params/ud", track_order=True)["zzlink"] = h5py.SoftLink("/params")
    _retype_link(root / "weights.h5", b"zzlink", 66)
    reseal(root)
    assert _refusal(root, UnsafeBundleError) == (
        f"{root / 'weights.h5'}: /params/ud/zzlink is a user-defined HDF5 link (type 66); weights "
        f"files hold plain groups and datasets only. {UNSAFE_ADVICE}"
    )


@pytest.mark.parametrize("route", FORCED)
def test_a_dataset_stored_in_an_external_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    mode = _route(monkeypatch, route)
    _clean_copy_mode(tmp_path, mode, chunked=False)
    root = _bundle(tmp_path)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(np.ones(3, np.float32).tobytes())
    _rewrite(
        root,
        "/params/layer_1/bias",
        lambda f, n: f.create_dataset(
            n, shape=(3,), dtype=np.float32, external=[(str(outside), 0, 12)]
        ),
    )
    msg = _refusal(root, UnsafeBundleError)
    assert msg == (
        f"{root / 'weights.h5'}: dataset /params/layer_1/bias keeps its data in external raw "
        f"files, which could be any file; weights files hold their data inline. {UNSAFE_ADVICE}"
    )


# --- chunked data: partly written, decompression bombs, forged chunk shapes --------------------


def _partly_written(f: h5py.File, name: str) -> h5py.Dataset:
    ds = f.create_dataset(name, shape=(2, 3), dtype=np.float32, chunks=(1, 3))
    ds[0] = [1.0, 2.0, 3.0]  # the second chunk is never written
    return ds


def _short_chunks(f: h5py.File, name: str) -> h5py.Dataset:
    # every chunk is stored, the second with 4 of its 12 bytes (raw chunk writes take any size)
    ds = f.create_dataset(name, shape=(2, 3), dtype=np.float32, chunks=(1, 3))
    ds.id.write_direct_chunk((0, 0), np.ones(3, np.float32).tobytes())
    ds.id.write_direct_chunk((1, 0), np.ones(1, np.float32).tobytes())
    return ds


def _one_gzip_chunk(n: int, stored: bytes) -> Callable[[h5py.File, str], h5py.Dataset]:
    """A maker of `n` float32 as one gzip chunk whose stored bytes are `stored`."""

    def make(f: h5py.File, name: str) -> h5py.Dataset:
        ds = f.create_dataset(name, shape=(n,), dtype=np.float32, chunks=(n,), compression="gzip")
        ds.id.write_direct_chunk((0,), stored, filter_mask=0)
        return ds

    return make


_FEW = zlib.compress(b"\x00" * 64)  # 4 MiB claimed from these: past deflate's ~1032:1
_BOMB = zlib.compress(np.arange(1 << 14, dtype=np.float32).tobytes(), 9)  # 64 KiB for 4 KiB
BOUNDS = {
    "partly-written": (
        0,
        "/params/layer_1/weight",
        _partly_written,
        "params.layer_1.weight: dataset /params/layer_1/weight has no data stored for some or "
        "all of its 24 bytes, so reading it would only produce HDF5 fill values; the file was "
        "not written completely (or claims an array it does not hold): 1 of its 2 chunks are "
        "stored",
    ),
    "short-chunks": (
        0,
        "/params/layer_1/weight",
        _short_chunks,
        "params.layer_1.weight: dataset /params/layer_1/weight has no data stored for some or "
        "all of its 24 bytes, so reading it would only produce HDF5 fill values; the file was "
        "not written completely (or claims an array it does not hold)",
    ),
    "past-deflate": (
        1 << 20,
        "/state/big",
        _one_gzip_chunk(1 << 20, _FEW),
        f"state.big: dataset /state/big would decompress {len(_FEW)} stored bytes into "
        f"{4 << 20}, more than the 1100:1 deflate can reach; the chunk sizes are forged or this "
        "is a decompression bomb",
    ),
    "chunk-inflates-past-its-size": (
        1024,
        "/state/big",
        _one_gzip_chunk(1024, _BOMB),
        "state.big: chunk 0 of dataset /state/big inflates to more than its 4096 bytes; this is "
        "a decompression bomb or a corrupt chunk",
    ),
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("case", list(BOUNDS))
def test_a_chunked_dataset_past_a_bound_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str, case: str
) -> None:
    big, name, make, message = BOUNDS[case]
    assert len(_BOMB) * 1100 > 4096  # the bomb passes the ratio check, so its inflation decides
    _clean_copy_mode(tmp_path, _route(monkeypatch, route))
    root = _bundle(tmp_path, big=big)
    _rewrite(root, name, make)
    assert _refusal(root, BundleError) == f"{root / 'weights.h5'}: {message}. {LIMIT_ADVICE}"


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_chunk_that_is_not_deflate_data_is_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    _clean_copy_mode(tmp_path, _route(monkeypatch, route))
    root = _bundle(tmp_path, big=1024)
    _rewrite(root, "/state/big", _one_gzip_chunk(1024, b"\xff" * 32))
    msg = _refusal(root, BundleError)
    assert msg.startswith(
        f"{root / 'weights.h5'}: state.big: chunk 0 of dataset /state/big is not valid deflate "
        "data (Error -3 while decompressing data: "
    )
    assert msg.endswith("The file is corrupt or truncated; download or export the bundle again")


@pytest.mark.parametrize("route", FORCED)
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_chunk_larger_than_its_dataset_needs_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str, compression: str | None
) -> None:
    # 3 floats (12 bytes) in 2 MiB chunks: more than 4 x 12 bytes + 1 MiB. The default route
    # refuses this in the Python reader already; the forced routes meet libhdf5's check.
    mode = _route(monkeypatch, route)
    _clean_copy_mode(tmp_path, mode)
    root = _bundle(tmp_path)
    b = np.ones(3, np.float32)
    _rewrite(
        root,
        "/params/layer_1/bias",
        lambda f, n: f.create_dataset(
            n, data=b, chunks=(1 << 19,), maxshape=(None,), compression=compression
        ),
    )
    assert _refusal(root, BundleError) == (
        f"{root / 'weights.h5'}: params.layer_1.bias: dataset /params/layer_1/bias is stored in "
        "chunks of 2097152 bytes for 12 bytes of data, more than 4 times its size plus 1 MiB; "
        "such a chunk is forged (a decompression bomb's), so it is not inflated. Write the "
        f"weights with chunks no larger than the dataset (or uncompressed). {LIMIT_ADVICE}"
    )


@pytest.mark.parametrize("route", FORCED)
def test_a_chunk_just_within_the_bound_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    # 4 x 12 bytes + 1 MiB is the largest chunk allowed: exactly that many bytes load.
    _route(monkeypatch, route)
    root = _bundle(tmp_path)
    b = np.array([1.0, 2.0, 3.0], np.float32)
    _rewrite(
        root,
        "/params/layer_1/bias",
        lambda f, n: f.create_dataset(
            n, data=b, chunks=((4 * 12 + (1 << 20)) // 4,), maxshape=(None,)
        ),
    )
    params, _ = juliabridge.load_params(root)
    np.testing.assert_array_equal(params["layer_1"]["bias"], b)


def _deflate_then_lzf(f: h5py.File, name: str) -> h5py.Dataset:
    from h5py import h5d, h5p, h5s, h5t, h5z

    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_chunk((3,))
    dcpl.set_deflate(4)
    dcpl.set_filter(32000, h5z.FLAG_OPTIONAL)  # lzf, after deflate
    dsid = h5d.create(f.id, name.encode(), h5t.NATIVE_FLOAT, h5s.create_simple((3,)), dcpl=dcpl)
    ds = h5py.Dataset(dsid)
    ds[...] = np.ones(3, np.float32)
    return ds


@pytest.mark.parametrize("route", list(ROUTES))
def test_two_compressing_filters_on_one_dataset_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    # Each inflation is bounded only one filter deep, so stacked compressors are refused.
    _clean_copy_mode(tmp_path, _route(monkeypatch, route))
    root = _bundle(tmp_path)
    _rewrite(root, "/params/layer_1/bias", _deflate_then_lzf)
    assert _refusal(root, BundleError) == (
        f"{root / 'weights.h5'}: params.layer_1.bias: dataset /params/layer_1/bias applies more "
        f"than one compressing filter. {LIMIT_ADVICE}"
    )


@pytest.mark.parametrize("route", list(ROUTES))
def test_gzip_with_fletcher32_reads_the_values_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    # The checksum filter follows deflate: its 4 bytes are cut before the bounded inflation.
    _clean_copy_mode(tmp_path, _route(monkeypatch, route))
    root = _bundle(tmp_path)
    w = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    _rewrite(
        root,
        "/params/layer_1/weight",
        lambda f, n: f.create_dataset(
            n, data=w, chunks=(1, 3), compression="gzip", fletcher32=True
        ),
    )
    params, _ = juliabridge.load_params(root)
    np.testing.assert_array_equal(params["layer_1"]["weight"], w)


@pytest.mark.parametrize("route", FORCED)
def test_every_link_is_checked_past_a_second_hard_link_to_a_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    # /params/a and /params/layer_1 are one group (its content checked once, at the first
    # name); the soft link listed after the second name in the same group must still be found.
    _route(monkeypatch, route)
    root = _bundle(tmp_path)
    with h5py.File(root / "weights.h5", "a") as f:
        f["/params/a"] = f["/params/layer_1"]
        f["/params/zz"] = h5py.SoftLink("/params/layer_1/bias")
    reseal(root)
    msg = _refusal(root, UnsafeBundleError)
    assert msg.startswith(f"{root / 'weights.h5'}: /params/zz is an HDF5 soft link")


def _early_never_written(f: h5py.File, name: str) -> h5py.Dataset:
    from h5py import h5d, h5p, h5s, h5t

    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_value(np.array(0.0, np.float32))
    space, kind = h5s.create_simple((3,)), h5t.py_create(np.dtype(np.float32))
    return h5py.Dataset(h5d.create(f.id, name.encode(), kind, space, dcpl=dcpl))


def _virtual(f: h5py.File, name: str) -> h5py.Dataset:
    layout = h5py.VirtualLayout(shape=(3,), dtype=np.float32)
    layout[:] = h5py.VirtualSource("elsewhere.h5", "b", shape=(3,))  # another file's data
    return f.create_virtual_dataset(name, layout)


def _tagged(value: Any) -> Callable[[h5py.File, str], h5py.Dataset]:
    def make(f: h5py.File, name: str) -> h5py.Dataset:
        ds = f.create_dataset(name, data=np.ones(3, np.float32))
        ds.attrs.create("dtype", value)
        return ds

    return make


MISMATCH_ADVICE = "The weights file does not belong to this manifest; re-export the bundle"
BIAS = "params.layer_1.bias: dataset /params/layer_1/bias"
UNWRITTEN = (
    f"{BIAS} has no data stored for some or all of its 12 bytes, so reading it would only "
    "produce HDF5 fill values; the file was not written completely (or claims an array it does "
    f"not hold). {LIMIT_ADVICE}"
)
CONTIGUOUS = {
    # contiguous storage never allocated (HDF5 late allocation, nothing written)
    "late-allocated": (
        lambda f, n: f.create_dataset(n, shape=(3,), dtype=np.float32),
        BundleError,
        UNWRITTEN,
    ),
    # allocated when created, holding nothing but its fill value
    "early-allocated": (
        _early_never_written,
        BundleError,
        f"{BIAS} was allocated when created (HDF5 early allocation) and holds nothing but its "
        "fill value: it was never written. Writers write every dataset's data (spec §4). "
        f"{LIMIT_ADVICE}",
    ),
    # the tag is at most 64 bytes: 64 is read (and compared), 65 refused unread
    "tag-64-bytes": (
        _tagged(np.bytes_(b"f" * 64)),
        juliabridge.SignatureMismatchError,
        f"{BIAS} is tagged dtype='{'f' * 64}', expected 'f32'. {MISMATCH_ADVICE}",
    ),
    "tag-65-bytes": (
        _tagged(np.bytes_(b"f" * 65)),
        juliabridge.SignatureMismatchError,
        "params.layer_1.bias: /params/layer_1/bias: attribute 'dtype' is 65 bytes long. "
        f"{MISMATCH_ADVICE}",
    ),
    "tag-of-two": (
        _tagged(np.array([b"f32", b"f32"])),
        juliabridge.SignatureMismatchError,
        "params.layer_1.bias: /params/layer_1/bias: attribute 'dtype' has shape (2,), expected "
        f"a string. {MISMATCH_ADVICE}",
    ),
    "virtual": (
        _virtual,
        UnsafeBundleError,
        "dataset /params/layer_1/bias is a virtual dataset, which could read other files; "
        f"weights files hold their data inline. {UNSAFE_ADVICE}",
    ),
    # nothing where the manifest names a dataset
    "missing": (
        lambda f, n: None,
        juliabridge.SignatureMismatchError,
        "params.layer_1.bias: the file has nothing at /params/layer_1/bias, expected a dataset "
        f"of shape [3]. {MISMATCH_ADVICE}",
    ),
    # a dataspace with no elements at all, where the manifest has three
    "null-dataspace": (
        lambda f, n: f.create_dataset(n, data=h5py.Empty("<f4")),
        juliabridge.SignatureMismatchError,
        "params.layer_1.bias: /params/layer_1/bias has an empty (null) dataspace, expected data of "
        f"shape [3]. {MISMATCH_ADVICE}",
    ),
    "stored-as-int32": (
        lambda f, n: f.create_dataset(n, data=np.ones(3, np.int32)),
        juliabridge.SignatureMismatchError,
        f"{BIAS} is stored as int32, expected float32 (for the manifest's dtype f32). "
        f"{MISMATCH_ADVICE}",
    ),
    "tag-not-utf8": (
        _tagged(np.bytes_(b"f\xff32")),
        juliabridge.SignatureMismatchError,
        f"{BIAS} is tagged dtype='f\ufffd32', expected 'f32'. {MISMATCH_ADVICE}",
    ),
}


@pytest.mark.parametrize("route", FORCED)
@pytest.mark.parametrize("case", list(CONTIGUOUS))
def test_a_contiguous_dataset_libhdf5_must_refuse_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str, case: str
) -> None:
    make, cls, message = CONTIGUOUS[case]
    _route(monkeypatch, route)
    root = _bundle(tmp_path)
    _rewrite(root, "/params/layer_1/bias", make)
    assert _refusal(root, cls) == f"{root / 'weights.h5'}: {message}"


@pytest.mark.parametrize("route", FORCED)
def test_a_weights_file_another_program_has_locked_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    # libhdf5 would take a shared lock on open and fail next to a writer's exclusive one;
    # the reader takes no lock (it reads a file the caller opened and checked).
    import fcntl

    _route(monkeypatch, route)
    root = _bundle(tmp_path)
    with open(root / "weights.h5", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        params, _ = juliabridge.load_params(root)
    assert params["layer_1"]["bias"].shape == (3,)


@pytest.mark.parametrize("route", FORCED)
def test_an_object_header_libhdf5_cannot_open_is_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    from h5py import h5o

    _route(monkeypatch, route)
    root = _bundle(tmp_path)
    with h5py.File(root / "weights.h5", "r") as f:
        at = h5o.get_info(f["/params/layer_1/bias"].id).addr
    raw = bytearray((root / "weights.h5").read_bytes())
    assert raw[at] == 1  # a version-1 object header
    raw[at] = 7
    (root / "weights.h5").write_bytes(bytes(raw))
    reseal(root)
    msg = _refusal(root, BundleError)
    assert msg.startswith(f"{root / 'weights.h5'}: the HDF5 structure is unreadable (")
    assert msg.endswith("The file is corrupt or truncated; download or export the bundle again")


# --- the reader's request loop and the parent's distrust of it ----------------------------------
# Run in a thread of this process (tests/reader_here.py): the same pipes, frames and descriptor
# socket as the reader process, with mutmut's mutants of both sides live.

WEIGHT = "/params/layer_1/weight"


def _read_weight(root: Path) -> np.ndarray:
    with open_weights(root / "weights.h5") as reader:
        assert reader.mode == "process"
        return reader.read_array(WEIGHT, (2, 3), "f32", "params.layer_1.weight")


def _vm_data() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:"))


@pytest.mark.parametrize("chunked", [True, False])
def test_the_reader_caps_its_heap_for_each_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunked: bool
) -> None:
    # _h5core._limit_memory: the heap size at start-up + 512 MiB, and during a read as well
    # two slabs and two chunks of the dataset (here all of it: 24 bytes; chunks of 12, or
    # none when it is contiguous).
    import resource

    _route(monkeypatch, "forced-served-here")
    harness = serve_here(monkeypatch)
    root = _bundle(tmp_path)
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    kw: dict[str, Any] = {"chunks": (1, 3), "compression": "gzip"} if chunked else {}
    _rewrite(root, WEIGHT, lambda f, n: f.create_dataset(n, data=w, **kw))
    before = _vm_data()
    np.testing.assert_array_equal(_read_weight(root), w)
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    assert [h for _, h in harness.limits] == [hard] * 3
    base, during, after = (s for s, _ in harness.limits)
    assert abs(base - (before + (512 << 20))) < 64 << 20
    assert (during - base, after) == (2 * 24 + (2 * 12 if chunked else 0), base)


def test_a_finite_hard_heap_limit_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    set_to: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1 << 40, 1 << 28))
    monkeypatch.setattr(resource, "setrlimit", lambda which, lim: set_to.append((which, lim)))
    monkeypatch.setattr(_h5core, "_BASE", [])
    _h5core._limit_memory(5)
    assert set_to == [(resource.RLIMIT_DATA, (1 << 28, 1 << 28))]  # below base + 512 MiB


def test_an_idle_reader_exits_after_idle_exit_seconds_and_a_busy_one_never(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]

    class Exited(Exception):
        pass

    def sleep(s: float) -> None:
        assert s == 5.0
        clock[0] += s
        if clock[0] > 2000:
            raise TimeoutError  # a busy reader: stop the loop here

    def exit_(code: int) -> None:
        raise Exited(code, clock[0])

    monkeypatch.setattr(_h5core.time, "sleep", sleep)
    monkeypatch.setattr(_h5core.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(_h5core.os, "_exit", exit_)
    with pytest.raises(Exited) as e:
        _h5core._retire_when_idle([1000.0])  # last answer at 1000
    assert e.value.args == (0, 1000.0 + _h5core.IDLE_EXIT + 5)  # the first check past 300 s
    clock[0] = 1000.0
    with pytest.raises(TimeoutError):
        _h5core._retire_when_idle([0.0])  # 0: a request in progress


def _frame(out: BinaryIO, kind: bytes, payload: bytes) -> None:
    out.write(struct.pack("<cQ", kind, len(payload)) + payload)
    out.flush()


def _say(out: BinaryIO, obj: Any) -> None:
    _frame(out, b"J", json.dumps(obj).encode())


Answer = Callable[[BinaryIO, BinaryIO, dict[str, Any]], object]


def _liar(read: Answer, opened: Any = None, listed: Any = None) -> Callable[..., None]:
    """A reader that opens anything (or answers `opened`), answers reads with `read` and
    listings with the frame `listed` (kind, body) if given."""

    def serve(inp: BinaryIO, out: BinaryIO, sock: Any) -> None:
        _say(out, {"ready": True})
        while len(head := inp.read(9)) == 9:
            req = json.loads(inp.read(struct.unpack("<cQ", head)[1]))
            if req.get("fd"):
                _, fds, _, _ = socket.recv_fds(sock, 1, 1)
                for fd in fds:
                    os.close(fd)
            if req["op"] == "read":
                read(inp, out, req)
            elif req["op"] == "open" and opened is not None:
                _say(out, opened)
            elif req["op"] == "list" and listed is not None:
                _frame(out, *listed)
            else:
                _say(out, {"ok": True, "size": 1})

    return serve


def _head(**changed: Any) -> dict[str, Any]:
    return {"ok": True, "dtype": "<f4", "shape": [2, 3], "nbytes": 24, **changed}


def _answers(*frames: tuple[bytes, Any]) -> Answer:
    def read(inp: BinaryIO, out: BinaryIO, req: dict[str, Any]) -> None:
        assert (req["dataset"], req["shape"], req["accept"], req["tag"]) == (
            WEIGHT,
            [2, 3],
            ["<f4"],
            "f32",
        )
        for kind, body in frames:
            _frame(out, kind, body if isinstance(body, bytes) else json.dumps(body).encode())

    return read


_DATA = np.arange(6, dtype=np.float32).tobytes()
LIES = {
    "another-dtype": _answers((b"J", _head(dtype="<f8", nbytes=48))),
    "not-a-dtype": _answers((b"J", _head(dtype="no such type"))),
    "another-shape": _answers((b"J", _head(shape=[3, 2]))),
    "another-size": _answers((b"J", _head(nbytes=28))),
    "data-first": _answers((b"D", _DATA)),
    "more-data": _answers((b"J", _head()), (b"D", _DATA + b"\0\0\0\0")),
    "done-early": _answers((b"J", _head()), (b"D", _DATA[:12]), (b"J", {"done": True})),
    "no-end": _answers((b"J", _head()), (b"D", _DATA), (b"J", {"ok": True})),
    "other-frame": _answers((b"J", _head()), (b"D", _DATA), (b"X", b"{}")),
    "not-json": _answers((b"J", b"{")),
    "json-list": _answers((b"J", [1])),
    "huge-frame": lambda i, o, r: o.write(struct.pack("<cQ", b"J", (1 << 30) + 1)) and o.flush(),
}


def _broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve: Any, act: Callable[[Path], Any]
) -> tuple[Path, str, Any]:
    """The weights file, the BundleError `act` meets with `serve` as the reader, the harness."""
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    harness = serve_here(monkeypatch, serve)
    root = _bundle(tmp_path)
    with pytest.raises(BundleError) as e:
        act(root)
    assert type(e.value) is BundleError
    return root / "weights.h5", str(e.value), harness


@pytest.mark.parametrize("lie", list(LIES))
def test_a_reader_that_breaks_the_protocol_is_stopped_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lie: str
) -> None:
    # Never trust the reader beyond what was asked for: a reply of another type, shape or size,
    # more data than asked or a broken frame ends it (as a kill: it may be compromised).
    path, msg, harness = _broken(tmp_path, monkeypatch, _liar(LIES[lie]), _read_weight)
    assert msg == (
        f"{path}: the HDF5 reader process was killed (SIGKILL: out of memory?) "
        f"while reading {WEIGHT}. The file is corrupt or crafted; download or export the bundle "
        "again."
    )
    assert harness.started[0].killed
    _open_and_close(_bundle(tmp_path / "next"))  # a new reader, not the broken one
    assert len(harness.started) == 2


def test_the_data_a_reader_sends_is_the_array_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    # in two frames, then the end
    answer = _answers((b"J", _head()), (b"D", _DATA[:8]), (b"D", _DATA[8:]), (b"J", {"done": True}))
    harness = serve_here(monkeypatch, _liar(answer))
    want = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(_read_weight(_bundle(tmp_path)), want)
    np.testing.assert_array_equal(_read_weight(_bundle(tmp_path / "next")), want)
    assert len(harness.started) == 1  # a reader that behaved serves the next file


def _open_and_close(root: Path) -> None:
    with open_weights(root / "weights.h5") as reader:
        assert reader.mode == "process"


@pytest.mark.parametrize("kind", ["limit", "internal"])
def test_a_refusal_while_streaming_is_typed_and_only_an_internal_error_retires_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    refusal = {"ok": False, "kind": kind, "message": "the refusal"}
    answer = _answers((b"J", _head()), (b"D", _DATA), (b"J", refusal))
    harness = serve_here(monkeypatch, _liar(answer))
    root = _bundle(tmp_path)
    with pytest.raises(BundleError) as e:
        _read_weight(root)
    assert str(e.value).startswith(f"{root / 'weights.h5'}: params.layer_1.weight: the refusal")
    _open_and_close(_bundle(tmp_path / "next"))
    assert not harness.started[0].killed
    assert len(harness.started) == 1 + (kind == "internal")


@pytest.mark.parametrize(
    ("kind", "cls"), [("unsafe", UnsafeBundleError), ("internal", BundleError)]
)
def test_a_file_refused_on_open_is_typed_and_only_an_internal_error_retires_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, cls: type[Exception]
) -> None:
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    opened = {"ok": False, "kind": kind, "message": "the refusal"}
    harness = serve_here(monkeypatch, _liar(_answers(), opened))
    root = _bundle(tmp_path)
    for _ in range(2):
        with pytest.raises(cls) as e:
            _open_and_close(root)
        assert type(e.value) is cls
        assert str(e.value).startswith(f"{root / 'weights.h5'}: the refusal")
    assert len(harness.started) == 1 + (kind == "internal")


def test_an_unexpected_failure_in_the_reader_is_reported_as_a_bug_and_retires_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real reader loop (in a thread): an exception no refusal foresaw, raised while it
    # answers a read, comes back as its own kind -- a bug to report, the reader not reused.
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    harness = serve_here(monkeypatch)
    answer = _h5core._Session.answer

    def failing(self: Any, req: dict[str, Any]) -> None:
        if req.get("op") == "read":
            raise RuntimeError("an unforeseen failure")
        answer(self, req)

    monkeypatch.setattr(_h5core._Session, "answer", failing)
    root = _bundle(tmp_path)
    with pytest.raises(BundleError) as e:
        _read_weight(root)
    assert type(e.value) is BundleError
    msg = str(e.value)
    assert msg.startswith(f"{root / 'weights.h5'}: params.layer_1.weight: ")
    assert "an unforeseen failure" in msg
    assert msg.endswith("This is a juliabridge bug; please report it together with the file")
    _open_and_close(_bundle(tmp_path / "next"))
    assert len(harness.started) == 2  # the reader that failed does not serve the next file


def test_a_reader_that_makes_no_progress_is_stopped_after_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JULIABRIDGE_HDF5_TIMEOUT", "0.3")
    hangs = _liar(lambda inp, out, req: inp.read(1))
    path, msg, harness = _broken(tmp_path, monkeypatch, hangs, _read_weight)
    assert msg == (
        f"{path}: libhdf5 made no progress for 0.3 s while reading {WEIGHT} (the "
        "file makes it loop), so the reader process was stopped. The file is corrupt or "
        "crafted; download or export the bundle again. (A disk so slow that one read needs "
        "more than 0.3 s can raise JULIABRIDGE_HDF5_TIMEOUT.)"
    )
    assert harness.started[0].killed


def test_a_reader_that_does_not_say_ready_is_named_with_the_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    def not_ready(inp: BinaryIO, out: BinaryIO, sock: Any) -> None:
        _say(out, {"ready": False})
        inp.read(1)  # until stopped

    path, msg, _ = _broken(tmp_path, monkeypatch, not_ready, _open_and_close)
    assert msg == (
        f"{path}: the HDF5 reader process was killed (SIGKILL: out of memory?) "
        "while starting the HDF5 reader process. The file is corrupt or crafted; download or "
        f"export the bundle again. Is h5py importable by `{sys.executable} -I` (isolated mode "
        "ignores PYTHONPATH)? Set JULIABRIDGE_HDF5_WORKER=0 to read HDF5 in this process instead."
    )


@pytest.mark.parametrize(
    ("value", "seconds"), [("0.25", 0.25), ("7", 7.0), ("0", 60.0), ("-1", 60.0), ("soon", 60.0)]
)
def test_the_reader_timeout_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, seconds: float
) -> None:
    monkeypatch.setenv("JULIABRIDGE_HDF5_TIMEOUT", value)
    assert _worker.timeout() == seconds


@pytest.mark.parametrize(
    ("value", "mode"),
    [(v, "in-process") for v in ("0", " Off ", "no", "false")]
    + [(v, "process") for v in ("1", "yes", "")],
)
def test_the_hdf5_worker_switch_reads_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, mode: str
) -> None:
    serve_here(monkeypatch)
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    monkeypatch.setenv("JULIABRIDGE_HDF5_WORKER", value)
    with open_weights(_bundle(tmp_path) / "weights.h5") as reader:
        assert reader.mode == mode


def test_the_reader_is_started_from_its_own_file_with_no_plugin_path_and_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from juliabridge.support import childproc

    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    harness = serve_here(monkeypatch)
    _open_and_close(_bundle(tmp_path))
    (start,) = harness.starts
    assert Path(start["entry"]) == Path(_h5core.__file__)
    assert start["memory"] == childproc.physical_memory()
    env = start["extra_env"]
    assert env["HDF5_PLUGIN_PATH"] == os.devnull  # no filter plugin is ever loaded
    assert {env[k] for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")} == {"1"}
    # the pipe the reader answers through holds 1 MiB (fewer wake-ups per weight read)
    import fcntl

    assert fcntl.fcntl(harness.started[0].stdout.fileno(), 1032) == 1 << 20  # F_GETPIPE_SZ


@pytest.mark.parametrize("module", ["replaced", "not imported"])
def test_the_reader_runs_the_h5core_module_in_use_or_else_the_one_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    # The file started is the imported module's (so a stand-in put in sys.modules is what
    # runs); before any import, the package's own _h5core.py.
    import sys
    import types

    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    harness = serve_here(monkeypatch)
    name = "juliabridge.bundle.weights._h5core"
    want = Path(_h5core.__file__)
    if module == "replaced":
        want = tmp_path / "stand_in_reader.py"
        stand_in = types.ModuleType(name)
        stand_in.__file__ = str(want)
        monkeypatch.setitem(sys.modules, name, stand_in)
    else:
        monkeypatch.delitem(sys.modules, name)
    _open_and_close(_bundle(tmp_path))
    (start,) = harness.starts
    assert Path(start["entry"]) == want


def test_a_pooled_reader_that_has_retired_is_replaced_for_the_next_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first reader serves one file, then ends without answering the next open (as one
    # that retired while idle): a fresh reader opens that file and reads it.
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    monkeypatch.setenv("JULIABRIDGE_HDF5_TIMEOUT", "5")  # a hang fails in seconds

    def retires(inp: BinaryIO, out: BinaryIO, sock: Any) -> None:
        _say(out, {"ready": True})
        opened = False
        while len(head := inp.read(9)) == 9:
            req = json.loads(inp.read(struct.unpack("<cQ", head)[1]))
            if req["op"] == "open" and opened:
                return
            if req["op"] == "open":
                opened = True
                for fd in socket.recv_fds(sock, 1, 1)[1]:
                    os.close(fd)
            _say(out, {"ok": True, "size": 1})

    starts: list[int] = []

    def first_retires(inp: BinaryIO, out: BinaryIO, sock: Any) -> None:
        starts.append(1)
        (retires if len(starts) == 1 else _h5core.serve)(inp, out, sock)

    harness = serve_here(monkeypatch, first_retires)
    _open_and_close(_bundle(tmp_path))
    root = _bundle(tmp_path / "next")
    with h5py.File(root / "weights.h5", "r") as f:
        stored = np.asarray(f[WEIGHT])
    np.testing.assert_array_equal(_read_weight(root), stored.reshape(2, 3))
    assert len(harness.started) == 2


@pytest.mark.parametrize("status", [1, -11])
def test_a_reader_that_ends_is_named_with_its_status_and_last_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    harness: Any = None

    def dies(inp: BinaryIO, out: BinaryIO, req: dict[str, Any]) -> None:
        stderr = harness.starts[-1]["stderr"]
        stderr.write(b"x" * 2000 + "libhdf5 said: boom \u00e9".encode() + b"\xff\n")
        stderr.flush()
        raise SystemExit(status)  # ends with this status (-11: SIGSEGV), its pipes closing

    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    harness = serve_here(monkeypatch, _liar(dies))
    root = _bundle(tmp_path)
    with pytest.raises(BundleError) as e:
        _read_weight(root)
    # its last 1,500 bytes (23 of them the line), a byte that is not UTF-8 replaced
    tail = "x" * 1477 + "libhdf5 said: boom \u00e9\ufffd"
    what = (
        f"the HDF5 reader process ended (status 1) while reading {WEIGHT}: {tail}"
        if status == 1
        else f"libhdf5 crashed (signal 11) while reading {WEIGHT}"
    )
    assert str(e.value) == (
        f"{root / 'weights.h5'}: {what}. The file is corrupt or crafted; download or export the "
        "bundle again."
    )


def test_a_dataset_larger_than_a_slab_streams_in_row_slabs_with_the_same_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reader sends a dataset in slabs of whole rows along axis 0 once it is larger than
    # SLAB_BYTES (64 MiB; 8 bytes here): a vector of 100 and a 2 x 3 matrix, row by row.
    _route(monkeypatch, "forced-served-here")
    monkeypatch.setattr(_h5core, "SLAB_BYTES", 8)
    root = _bundle(tmp_path, big=100)
    big = np.arange(100, dtype=np.float32) / 7
    w = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    with h5py.File(root / "weights.h5", "a") as f:
        f["/state/big"][...] = big
        f[WEIGHT][...] = w
    reseal(root)
    with open_weights(root / "weights.h5") as reader:
        got_big = reader.read_array("/state/big", (100,), "f32", "state.big")
    np.testing.assert_array_equal(got_big, big)
    np.testing.assert_array_equal(_read_weight(root), w)


@pytest.mark.parametrize("extra", [0, 1])
def test_the_python_reader_refuses_a_chunk_past_the_bound_before_libhdf5_sees_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: int
) -> None:
    # 4 x 12 bytes + 1 MiB is the largest chunk of 3 floats: one element more is refused by
    # the Python reader itself (no reader process started); the largest is handed to libhdf5.
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "1")
    harness = serve_here(monkeypatch)
    root = _bundle(tmp_path)
    b = np.array([1.0, 2.0, 3.0], np.float32)
    elements = (4 * 12 + (1 << 20)) // 4 + extra
    _rewrite(
        root,
        "/params/layer_1/bias",
        lambda f, n: f.create_dataset(n, data=b, chunks=(elements,), maxshape=(None,)),
    )
    if extra:
        assert _refusal(root, BundleError) == (
            f"{root / 'weights.h5'}: params.layer_1.bias: dataset /params/layer_1/bias is stored "
            f"in chunks of {4 * elements} bytes for 12 bytes of data, more than 4 times its size "
            "plus 1 MiB; such a chunk is forged (a decompression bomb's), so it is not inflated. "
            f"Write the weights with chunks no larger than the dataset (or uncompressed). "
            f"{LIMIT_ADVICE}"
        )
        assert harness.started == []
    else:
        params, _ = juliabridge.load_params(root)
        np.testing.assert_array_equal(params["layer_1"]["bias"], b)
        assert len(harness.started) == 1


def _wrong_fletcher32(f: h5py.File, name: str) -> h5py.Dataset:
    # deflate, then fletcher32: each chunk as libhdf5 stored it, its 4-byte checksum inverted
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    ds = f.create_dataset(name, data=w, chunks=(1, 3), compression="gzip", fletcher32=True)
    for row in range(2):
        mask, raw = ds.id.read_direct_chunk((row, 0))
        ds.id.write_direct_chunk((row, 0), raw[:-4] + bytes(b ^ 0xFF for b in raw[-4:]), mask)
    return ds


@pytest.mark.parametrize(
    ("route", "slab"), [(r, None) for r in ROUTES] + [("forced-served-here", 12)]
)
def test_a_chunk_whose_checksum_is_wrong_is_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str, slab: int | None
) -> None:
    # test_gzip_with_fletcher32_reads_the_values_written reads the same chunks unchanged
    _clean_copy_mode(tmp_path, _route(monkeypatch, route))
    if slab:
        monkeypatch.setattr(_h5core, "SLAB_BYTES", slab)  # one row per slab
    root = _bundle(tmp_path)
    _rewrite(root, WEIGHT, _wrong_fletcher32)
    assert _refusal(root, BundleError) == (
        f"{root / 'weights.h5'}: params.layer_1.weight: cannot read dataset {WEIGHT} (OSError: "
        "Can't synchronously read data (filter returned failure during read)). The file is "
        "corrupt or truncated; download or export the bundle again"
    )


@pytest.mark.parametrize("route", ["forced-this-process", "forced-served-here", "python"])
@pytest.mark.parametrize("spare", [0, -1])
def test_a_file_with_more_links_than_the_bound_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str, spare: int
) -> None:
    # The bound (2^20 links) lowered to the number of links in this file: exactly that many
    # are read, one fewer allowed is refused before any dataset is.
    if route == "python":  # the Python reader, which counts the same links
        monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "1")
        monkeypatch.setenv("JULIABRIDGE_HDF5_WORKER", "0")
    else:
        _route(monkeypatch, route)
    root = _bundle(tmp_path)
    with h5py.File(root / "weights.h5", "r") as f:
        names: list[str] = []
        f.visit(names.append)  # every link once (no group is linked twice here)
    for module in (_h5core, h5parse):
        monkeypatch.setattr(module, "MAX_OBJECTS", len(names) + spare)
    if spare == 0:
        juliabridge.load_params(root)
        return
    assert _refusal(root, BundleError) == (
        f"{root / 'weights.h5'}: more than {len(names) - 1} links; not a juliabridge weights file. "
        f"{LIMIT_ADVICE}"
    )


@pytest.mark.parametrize(
    "listed", [None, (b"X", b"{}")], ids=["without-its-datasets", "in-a-broken-frame"]
)
def test_a_listing_the_reader_garbles_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listed: Any
) -> None:
    def listing(root: Path) -> None:
        with open_weights(root / "weights.h5") as reader:
            reader.list_datasets(["params"])

    liar = _liar(_answers(), listed=listed)
    path, msg, harness = _broken(tmp_path, monkeypatch, liar, listing)
    assert msg == (
        f"{path}: the HDF5 reader process was killed (SIGKILL: out of memory?) while listing "
        "datasets. The file is corrupt or crafted; download or export the bundle again."
    )
    assert harness.started[0].killed


def test_a_read_that_exhausts_the_readers_capped_heap_is_refused_as_a_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a forged length inside libhdf5 meets the heap cap as a MemoryError in the reader
    def exhausted(self: Any, prep: Any) -> Any:
        raise MemoryError("a forged length")

    _route(monkeypatch, "forced-served-here")
    monkeypatch.setattr(_h5core.Reader, "pieces", exhausted)
    root = _bundle(tmp_path)
    assert _refusal(root, BundleError) == (
        f"{root / 'weights.h5'}: params.layer_1.weight: libhdf5 ran out of memory (a forged "
        f"length). {LIMIT_ADVICE}"
    )


def test_a_stopped_reader_leaves_no_watchdog_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    def watchdogs() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "juliabridge-hdf5-watchdog"}

    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    serve_here(monkeypatch)
    before = watchdogs()
    _open_and_close(_bundle(tmp_path))  # the reader goes back to the pool, watched
    (watchdog,) = watchdogs() - before
    _worker.stop_idle()
    watchdog.join(5)
    assert not watchdog.is_alive()


def test_at_most_two_idle_readers_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    harness = serve_here(monkeypatch)
    roots = [_bundle(tmp_path / str(i)) for i in range(3)]
    with contextlib.ExitStack() as stack:
        for root in roots:  # three files open at once: three readers
            stack.enter_context(open_weights(root / "weights.h5"))
    assert len(harness.started) == 3
    assert len(_worker.IDLE) == 2
    assert [p.poll() is None for p in harness.started].count(True) == 2  # the third stopped


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_filter_juliabridge_does_not_apply_is_refused_by_its_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    # scale-offset (HDF5 filter id 6) is built into libhdf5 but not among the filters
    # juliabridge applies itself: refused by id before any chunk is read.
    _clean_copy_mode(tmp_path, _route(monkeypatch, route))
    root = _bundle(tmp_path)
    b = np.arange(3, dtype=np.float32)
    _rewrite(
        root,
        "/params/layer_1/bias",
        lambda f, n: f.create_dataset(n, data=b, chunks=(3,), scaleoffset=2),
    )
    assert _refusal(root, BundleError) == (
        f"{root / 'weights.h5'}: params.layer_1.bias: dataset /params/layer_1/bias uses HDF5 "
        "filter(s) [6]; juliabridge applies only deflate, shuffle, fletcher32, lzf (no filter "
        f"plugins). Rewrite the file without them, e.g. `h5repack -f NONE in.h5 out.h5`. "
        f"{LIMIT_ADVICE}"
    )
