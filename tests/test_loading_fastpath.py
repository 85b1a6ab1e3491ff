"""Loading without libhdf5: aligned reads hashed while read, per-dataset and whole-file digests.

References: the numpy arrays that were written (and h5py's reading of the same files), and
hashlib over the stored little-endian bytes computed here independently.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import blake3
import h5py
import jax
import ml_dtypes
import numpy as np
import pytest

import juliabridge
from juliabridge.bundle import weights
from juliabridge.bundle.weights import ReadRequest, _worker, fastread, open_weights, write_weights
from tests.bundle_factory import dense_bn_arrays, dense_bn_reference, make_dense_bn, to_format1


def stored_digest(arr: np.ndarray) -> str:
    """BLAKE3 of an array's stored bytes, little-endian, row-major (bundle format 3)."""
    a = np.ascontiguousarray(arr)
    return blake3.blake3(a.astype(a.dtype.newbyteorder("<")).tobytes()).hexdigest()


def add_dataset_digests(bundle: Path, *, wrong: str | None = None) -> None:
    """Make the (format-1) bundle format 3: every dataset gets its `blake3` (the one named
    `wrong` a bad one) and the whole-file digest goes, so only the per-dataset ones count."""
    m = json.loads((bundle / "manifest.json").read_text())
    m["format_version"] = 3
    del m["weights"]["sha256"]
    with h5py.File(bundle / "weights.h5", "r") as f:
        entries = [a for a in m["arguments"] if a.get("dataset")]
        entries += m["examples"]["inputs"] + m["examples"]["outputs"]
        for a in entries:
            a["blake3"] = stored_digest(f[a["dataset"]][()])
            if a["dataset"] == wrong:
                a["blake3"] = "0" * 64
    (bundle / "manifest.json").write_text(json.dumps(m))


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    # Format 1 (whole-file sha256): these tests exercise that path; digests are added per test.
    return to_format1(make_dense_bn(tmp_path / "dense_bn.bundle"))


@pytest.fixture
def no_reader_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything starts the libhdf5 reader process."""
    _worker.stop_idle()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the HDF5 reader process was started")

    monkeypatch.setattr(_worker, "WorkerProcess", refuse)


def _check_dense_bn(model: juliabridge.LuxModel) -> None:
    arrays = dense_bn_arrays()
    x = arrays[0]
    np.testing.assert_allclose(np.asarray(model(x)), dense_bn_reference(arrays), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(model.params["layer_1"]["weight"]), arrays[1])
    np.testing.assert_array_equal(np.asarray(model.state["layer_2"]["running_var"]), arrays[6])


def test_import_reads_without_a_process_and_verifies_the_file(
    bundle: Path, no_reader_process: None
) -> None:
    model = juliabridge.import_lux(bundle, backend="xla")
    assert model.metadata["checksums_verified"] is True
    _check_dense_bn(model)


def test_whole_file_digest_covers_bytes_no_dataset_uses(bundle: Path) -> None:
    """Format 1: a changed byte anywhere (here inside the example output) is caught."""
    with h5py.File(bundle / "weights.h5", "r") as f:
        at = f["/examples/outputs/0"].id.get_offset()
    data = bytearray((bundle / "weights.h5").read_bytes())
    data[at] ^= 0x40
    (bundle / "weights.h5").write_bytes(bytes(data))
    with pytest.raises(juliabridge.ChecksumError, match=r"weights\.h5: sha256 is"):
        juliabridge.import_lux(bundle, backend="xla")
    model = juliabridge.import_lux(bundle, backend="xla", verify_checksums=False)
    assert model.metadata["checksums_verified"] is False
    _check_dense_bn(model)


def test_per_dataset_digests_replace_the_file_digest(bundle: Path, no_reader_process: None) -> None:
    add_dataset_digests(bundle)  # format 2 may omit the file digest: every dataset has its own
    m = json.loads((bundle / "manifest.json").read_text())
    _check_dense_bn(juliabridge.import_lux(bundle, backend="xla"))
    # When a file digest is recorded as well, it is verified too (spec §8).
    m["weights"]["sha256"] = "f" * 64
    (bundle / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(juliabridge.ChecksumError, match="f" * 64):
        juliabridge.import_lux(bundle, backend="xla")


def test_a_wrong_dataset_digest_names_the_dataset(bundle: Path) -> None:
    add_dataset_digests(bundle, wrong="/params/layer_2/scale")
    with pytest.raises(juliabridge.ChecksumError) as info:
        juliabridge.import_lux(bundle, backend="xla")
    message = str(info.value)
    assert "params.layer_2.scale (/params/layer_2/scale)" in message
    assert "0" * 64 in message and "verify_checksums=False" in message


def test_a_changed_data_byte_fails_its_dataset_digest(bundle: Path) -> None:
    add_dataset_digests(bundle)
    with h5py.File(bundle / "weights.h5", "r") as f:
        at = f["/state/layer_2/running_mean"].id.get_offset() + 5
    data = bytearray((bundle / "weights.h5").read_bytes())
    data[at] ^= 0x01
    (bundle / "weights.h5").write_bytes(bytes(data))
    with pytest.raises(juliabridge.ChecksumError, match=r"state\.layer_2\.running_mean"):
        juliabridge.import_lux(bundle, backend="xla")


ALL = {
    "f32": np.float32,
    "f64": np.float64,
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "i1": np.bool_,
    "i8": np.int8,
    "i32": np.int32,
    "ui64": np.uint64,
    "complex<f32>": np.complex64,
    "complex<f64>": np.complex128,
}


def _arrays(seed: int = 0) -> dict[str, tuple[np.ndarray, str]]:
    rng = np.random.default_rng(seed)
    out = {}
    for n, (tag, t) in enumerate(ALL.items()):
        shape = (3, 5) if n % 2 else (7,)
        if t is np.bool_:
            a = rng.random(shape) > 0.5
        elif np.issubdtype(t, np.complexfloating):
            a = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(t)
        else:
            a = (rng.standard_normal(shape) * 50).astype(t)
        out[f"/params/{tag.replace('<', '_').replace('>', '')}"] = (a, tag)
    out["/state/scalar"] = (np.array(2.5, np.float32), "f32")
    out["/state/empty"] = (np.zeros((0, 3), np.float32), "f32")
    return out


def _requests(arrays: dict[str, tuple[np.ndarray, str]], digests: bool) -> list[ReadRequest]:
    reqs = []
    for name, (a, tag) in arrays.items():
        stored = weights.encode(a, tag)
        reqs.append(
            ReadRequest(
                name, a.shape, tag, name, stored_digest(stored) if digests else None, "blake3"
            )
        )
    return reqs


@pytest.mark.parametrize("digests", [False, True])
def test_every_dtype_reads_back_exactly_and_aligned(
    tmp_path: Path, digests: bool, no_reader_process: None
) -> None:
    arrays = _arrays()
    p = tmp_path / "w.h5"
    write_weights(p, arrays)
    with open_weights(p) as f:
        got = dict(f.read(_requests(arrays, digests)))
        assert f.mode == "python"
    assert len(got) == len(arrays)
    for r, arr in got.items():
        want, tag = arrays[r.dataset]
        assert arr.dtype == np.dtype(ALL.get(tag, np.float32)), r.dataset
        np.testing.assert_array_equal(arr, want)
        if arr.size and arr.dtype != np.bool_:  # i1 is decoded (!= 0) into a new array
            assert arr.ctypes.data % fastread.ALIGN == 0
            if jax.dtypes.canonicalize_dtype(arr.dtype) == arr.dtype:  # 64-bit: x64 is off
                assert jax.device_put(arr).unsafe_buffer_pointer() == arr.ctypes.data


def test_whole_file_digest_over_files_of_every_layout(
    tmp_path: Path, no_reader_process: None
) -> None:
    """Big-endian data, creation-order tracking (HDF5.jl), latest format: one pass, exact."""
    arrays = {"/params/a": np.arange(12, dtype=">f4").reshape(3, 4), "/params/b": np.arange(5)}
    for kw in ({"libver": "latest"}, {"track_order": True}, {}):
        p = tmp_path / f"w{len(kw)}{list(kw)}.h5"
        with h5py.File(p, "w", **kw) as f:
            for name, a in arrays.items():
                f.create_dataset(name, data=a).attrs["dtype"] = (
                    "f32" if a.dtype.kind == "f" else "i64"
                )
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        reqs = [
            ReadRequest(
                "/params/a", (3, 4), "f32", "a", stored_digest(arrays["/params/a"]), "blake3"
            ),
            ReadRequest("/params/b", (5,), "i64", "b"),
        ]
        with open_weights(p, file_sha256=digest) as f:
            got = {r.dataset: a for r, a in f.read(reqs)}
        np.testing.assert_array_equal(got["/params/a"], arrays["/params/a"])
        assert got["/params/a"].dtype == np.dtype("=f4")
        np.testing.assert_array_equal(got["/params/b"], arrays["/params/b"])
        with open_weights(p, file_sha256="0" * 64) as f, pytest.raises(juliabridge.ChecksumError):
            list(f.read(reqs))


def test_compressed_files_go_to_the_reader_process_and_keep_digests(tmp_path: Path) -> None:
    p = tmp_path / "w.h5"
    a = np.arange(1000, dtype=np.float32)
    with h5py.File(p, "w") as f:
        f.create_dataset("/params/a", data=a, chunks=(100,), compression="gzip", shuffle=True)
        f["/params/a"].attrs["dtype"] = "f32"
    good = ReadRequest("/params/a", (1000,), "f32", "params.a", stored_digest(a), "blake3")
    with open_weights(p) as f:
        ((_, got),) = f.read([good])
        assert f.mode == "process" and f.fallback is not None and "chunked" in f.fallback
    np.testing.assert_array_equal(got, a)
    bad = ReadRequest("/params/a", (1000,), "f32", "params.a", "1" * 64, "blake3")
    with open_weights(p) as f, pytest.raises(juliabridge.ChecksumError, match=r"params\.a"):
        list(f.read([bad]))


def test_a_digest_needs_its_algorithm() -> None:
    with pytest.raises(juliabridge.BundleError, match=r"a digest needs its algorithm"):
        ReadRequest("/params/a", (3,), "f32", "params.a", "0" * 64)
    with pytest.raises(juliabridge.BundleError, match=r"got 'md5'"):
        ReadRequest("/params/a", (3,), "f32", "params.a", "0" * 64, "md5")
    assert ReadRequest("/params/a", (3,), "f32", "params.a").algorithm is None


def test_streaming_keeps_a_bounded_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a 1-byte window, one dataset at a time is read ahead of the consumer."""
    arrays = {f"/params/w{i}": (np.full(1000, i, np.float32), "f32") for i in range(12)}
    p = tmp_path / "w.h5"
    write_weights(p, arrays)
    active, peak = [0], [0]
    lock = threading.Lock()
    real = fastread._one

    def counted(fd: int, item: fastread.Item) -> np.ndarray:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            return real(fd, item)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(fastread, "_one", counted)
    monkeypatch.setattr(fastread, "THREAD_ABOVE", 0)  # threads even for these small datasets
    monkeypatch.setattr(fastread, "WINDOW", 1)
    with open_weights(p) as f:
        got = dict(f.read(_requests(arrays, digests=True)))
    assert peak[0] == 1
    for r, arr in got.items():
        np.testing.assert_array_equal(arr, arrays[r.dataset][0])
    monkeypatch.setattr(fastread, "WINDOW", 1 << 30)
    peak[0] = 0
    with open_weights(p) as f:
        list(f.read(_requests(arrays, digests=True)))
    assert peak[0] >= 1  # in parallel when the window allows (as many as cores)


def test_load_params_keeps_the_file_order(tmp_path: Path, no_reader_process: None) -> None:
    params = {f"layer_{i}": {"weight": np.full((2, 2), i, np.float32)} for i in (3, 1, 2, 10)}
    state = {"layer_1": {"running_mean": np.arange(3.0)}}
    p = tmp_path / "ft.h5"
    juliabridge.save_params(params, p, state=state)
    got_params, got_state = juliabridge.load_params(p)
    assert sorted(got_params) == sorted(params)
    for k in params:
        np.testing.assert_array_equal(got_params[k]["weight"], params[k]["weight"])
    np.testing.assert_array_equal(got_state["layer_1"]["running_mean"], np.arange(3.0))
    assert list(got_params) == list(params)  # the tree record keeps the saved tree's order
    with h5py.File(p, "r+") as f:  # a file JuliaBridge wrote has no record: the file's order
        del f["juliabridge"]
        file_order = list(f["params"])
    assert file_order != list(params)
    assert list(juliabridge.load_params(p)[0]) == file_order


def test_in_process_libhdf5_and_the_python_reader_agree(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = juliabridge.import_lux(bundle, backend="xla")
    monkeypatch.setenv(weights.FAST_ENV, "0")
    monkeypatch.setenv(weights.WORKER_ENV, "0")
    slow = juliabridge.import_lux(bundle, backend="xla")
    for a, b in zip(jax.tree.leaves(fast.params), jax.tree.leaves(slow.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_julia_layout_still_transposes(bundle: Path) -> None:
    model = juliabridge.import_lux(bundle, backend="xla", layout="julia")
    np.testing.assert_array_equal(
        np.asarray(model.params["layer_1"]["weight"]), dense_bn_arrays()[1].T
    )


def test_trees_keep_the_manifest_order_whatever_order_reads_finish(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = fastread.read_parallel

    def reversed_completion(fd: int, items: list, **kw: object):  # type: ignore[no-untyped-def]
        return reversed(list(real(fd, items, **kw)))  # type: ignore[arg-type]

    add_dataset_digests(bundle)  # the parallel route
    monkeypatch.setattr(fastread, "read_parallel", reversed_completion)
    model = juliabridge.import_lux(bundle, backend="xla")
    assert list(model.params) == ["layer_1", "layer_2"]
    assert list(model.params["layer_1"]) == ["weight", "bias"]
    assert list(model.params["layer_2"]) == ["scale", "bias"]
    assert list(model.state["layer_2"]) == ["running_mean", "running_var"]


def test_arena_arrays_are_aligned_disjoint_and_of_the_asked_shapes() -> None:
    specs = [
        ((3, 5), np.dtype("<f4")),
        ((0,), np.dtype("<f8")),
        ((7,), np.dtype("u1")),
        ((2, 2), np.dtype("<c16")),
        ((1,), np.dtype(">i2")),
    ]
    arrays = fastread.aligned_arena(specs)
    assert [(a.shape, a.dtype) for a in arrays] == specs
    for i, a in enumerate(arrays):
        assert a.ctypes.data % fastread.ALIGN == 0
        a[...] = i + 1
    for i, a in enumerate(arrays):  # no array's bytes overlap another's
        assert (a == i + 1).all()

    def root(a: np.ndarray) -> np.ndarray:
        while isinstance(a.base, np.ndarray):
            a = a.base
        return a

    assert len({id(root(a)) for a in arrays}) == 1  # one allocation, viewed five times
