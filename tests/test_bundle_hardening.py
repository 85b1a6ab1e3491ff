"""Issue 11's bundle-side attack classes, one test (or more) per class (docs/reliability.md §1).

(2) a file far larger than the manifest declares is refused by size before anything is hashed;
(3) decompression is bounded as it inflates; (4) no escapes: `load_params` refuses symlinks,
the HDF5 reader process starts isolated, and honours a timeout set after it started; (6) what
is hashed is what is parsed: files swapped or rewritten during a load never load as verified;
(7) a dataset allocated but never written is refused.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from pathlib import Path

import h5py
import jax
import numpy as np
import pytest
from h5py import h5d, h5p, h5s, h5t

import juliabridge
from juliabridge.bundle import bundle as bundle_mod
from juliabridge.bundle import sources as sources_mod
from juliabridge.bundle import weights
from juliabridge.bundle.files import atomic
from juliabridge.bundle.files.checksum import sha256_file
from juliabridge.bundle.weights import _h5core, _worker, fastread, h5parse, write_weights
from tests.bundle_factory import dense_bn_arrays, edit_manifest, make_dense_bn, to_format1

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    # Format 1 (whole-file sha256): these tests exercise that path; digests are added per test.
    return to_format1(make_dense_bn(tmp_path / "dense_bn.bundle"))


def reseal(bundle: Path) -> None:
    """Make the manifest's checksums match the files again, as an attacker would."""

    def change(m: dict) -> None:
        m["module"]["sha256"] = sha256_file(bundle / m["module"]["file"])
        m["weights"]["sha256"] = sha256_file(bundle / m["weights"]["file"])

    edit_manifest(bundle, change)


def run_python(code: str, *, cwd: Path, env: dict[str, str], timeout: float = 120) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"child died with {proc.returncode}: {proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rewrite_weights(bundle: Path, replace: dict[str, object]) -> None:
    """Copy weights.h5 dataset by dataset, letting `replace[name](file, data)` write some."""
    src = bundle / "weights.h5"
    tmp = bundle / "new.h5"
    with h5py.File(src, "r") as old, h5py.File(tmp, "w") as new:
        names: list[str] = []
        old.visit(lambda n: names.append(n) if isinstance(old[n], h5py.Dataset) else None)
        for n in names:
            full = "/" + n
            data = old[n][()]
            if full in replace:
                replace[full](new, full, data)  # type: ignore[operator]
            else:
                new.create_dataset(full, data=data)
            new[full].attrs["dtype"] = old[n].attrs["dtype"]
    os.replace(tmp, src)
    reseal(bundle)


# --- (2) sizes before hashing --------------------------------------------------------------


def _forbid_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_hashing(*args: object, **kwargs: object) -> None:
        raise AssertionError("hashed before the size check")

    for name in ("sha256_fd", "read_whole_file", "read_parallel"):
        monkeypatch.setattr(fastread, name, no_hashing)
    monkeypatch.setattr(sources_mod.hashlib, "sha256", no_hashing)


def test_a_sparse_200_gib_weights_file_is_refused_by_size_before_hashing(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights_file = bundle / "weights.h5"
    try:
        os.truncate(weights_file, 200 << 30)  # a hole: 200 GiB that take no disk space
    except OSError as e:
        pytest.skip(f"this file system has no sparse files ({e})")

    _forbid_hashing(monkeypatch)
    with pytest.raises(juliabridge.BundleError) as info:
        juliabridge.import_lux(bundle, backend="xla")
    message = str(info.value)
    assert "weights.h5: the file is 214748364800 bytes" in message
    assert "padded, sparse or not this bundle's" in message


def test_the_size_is_checked_again_on_the_file_actually_opened(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file grown between open_bundle's check and the read is refused on its descriptor."""
    real = bundle_mod.safefile.open_regular

    def grow_then_open(path: Path, what: str, **kw: object) -> tuple[int, os.stat_result]:
        if path.name == "weights.h5":
            os.truncate(path, 200 << 30)
        return real(path, what, **kw)  # type: ignore[arg-type]

    b = juliabridge.bundle.open_bundle(bundle, defer_weights=True)
    monkeypatch.setattr(bundle_mod.safefile, "open_regular", grow_then_open)
    _forbid_hashing(monkeypatch)
    with pytest.raises(juliabridge.BundleError, match="sparse"):
        list(b.read_weights())


# --- (3) decompression bounded as it inflates ------------------------------------------------


def test_a_gzip_chunk_far_larger_than_its_dataset_is_refused_as_it_inflates(
    bundle: Path,
) -> None:
    """A 12-byte dataset whose one chunk inflates to 1 GiB: refused after inflating at most
    one piece past the chunk size, in the reader process, without a memory spike."""
    bomb = zlib.compress(bytes(1 << 30), 9)

    def write(new: h5py.File, name: str, data: np.ndarray) -> None:
        ds = new.create_dataset(name, data=data, chunks=data.shape, compression="gzip")
        ds.id.write_direct_chunk((0,) * data.ndim, bomb)

    rewrite_weights(bundle, {"/params/layer_1/bias": write})
    code = f"""
        import json, resource
        import juliabridge
        try:
            juliabridge.import_lux({str(bundle)!r}, backend="xla")
            out = {{"outcome": "ok"}}
        except juliabridge.JuliaBridgeError as e:
            out = {{"outcome": type(e).__name__, "message": str(e)}}
        out["children_peak_kib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(json.dumps(out))
    """
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = run_python(code, cwd=REPO, env=env)
    assert out["outcome"] == "BundleError", out
    assert "decompression bomb" in out["message"] and "params.layer_1.bias" in out["message"]
    assert out["children_peak_kib"] < 400_000, out  # the 1 GiB never materialised


def test_bounded_inflate_counts_output_as_it_goes() -> None:
    data = zlib.compress(bytes(10 << 20))
    _h5core._bounded_inflate(memoryview(data), 10 << 20, "x")  # exactly fits
    with pytest.raises(_h5core.Problem, match="decompression bomb"):
        _h5core._bounded_inflate(memoryview(data), (10 << 20) - 1, "x")
    with pytest.raises(_h5core.Problem, match="not valid deflate"):
        _h5core._bounded_inflate(memoryview(b"\x00garbage"), 100, "x")


# --- (4) escapes -------------------------------------------------------------------------------


def test_load_params_refuses_a_symlinked_weights_file(bundle: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.h5"
    write_weights(other, {"/params/secret": (np.arange(3, dtype=np.float32), "f32")})
    (bundle / "weights.h5").unlink()
    (bundle / "weights.h5").symlink_to(other)
    with pytest.raises(juliabridge.UnsafeBundleError, match="symlink"):
        juliabridge.load_params(bundle)
    link = tmp_path / "link.h5"
    link.symlink_to(other)
    with pytest.raises(juliabridge.UnsafeBundleError, match="symlink"):
        juliabridge.load_params(link)
    assert juliabridge.load_params(other)[0]["secret"].tolist() == [0, 1, 2]


def test_the_reader_process_runs_nothing_planted_in_cwd_bundle_or_pythonpath(
    bundle: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    # Each planted file records which process ran it: the caller itself runs PYTHONPATH's
    # sitecustomize (its own environment), the reader process must run none of them.
    payload = f"import sys; open({str(marker)!r}, 'a').write(repr(sys.argv) + '\\n')\n"
    planted = tmp_path / "planted"
    planted.mkdir()
    for where in (bundle, planted):
        for name in ("h5py.py", "numpy.py", "sitecustomize.py", "usercustomize.py"):
            (where / name).write_text(payload)
    code = f"""
        import sys
        sys.path[:] = [p for p in sys.path if p not in ("", {str(planted)!r})]
        import json
        import juliabridge
        from juliabridge.bundle import weights
        with weights.open_weights("weights.h5") as f:
            mode = f.mode
        params, _ = juliabridge.load_params(".")
        print(json.dumps({{"mode": mode, "leaves": sorted(params)}}))
    """
    env = dict(
        os.environ,
        PYTHONPATH=f"{REPO}{os.pathsep}{planted}",
        JULIABRIDGE_HDF5_FASTPATH="0",  # the libhdf5 reader process, every time
    )
    out = run_python(code, cwd=bundle, env=env)
    assert out == {"mode": "process", "leaves": ["layer_1", "layer_2"]}
    ran = marker.read_text() if marker.exists() else ""
    assert "_h5core" not in ran, ran


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID")
def test_the_reader_process_environment_and_working_directory_are_neutral(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv("HDF5_DRIVER", "family")
    monkeypatch.setenv("SECRET_TOKEN", "x")
    proc = _worker.new_process(Path("w.h5"))
    try:
        pid = proc.proc.pid
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        names = {e.split(b"=", 1)[0].decode() for e in environ if e}
        assert names <= set(_worker.KEEP_ENV) | {
            "OPENBLAS_NUM_THREADS",
            "OMP_NUM_THREADS",
            "MKL_NUM_THREADS",
            "HDF5_PLUGIN_PATH",
            "PYTHONDONTWRITEBYTECODE",
        }, names
        assert os.readlink(f"/proc/{pid}/cwd") == "/"
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[1] == b"-I"
    finally:
        proc.stop()


FAKE_READER = """
import json, struct, sys, time
HEAD = struct.Struct("<cQ")
out = sys.stdout.buffer
def send(obj):
    data = json.dumps(obj).encode()
    out.write(HEAD.pack(b"J", len(data)) + data); out.flush()
send({"ready": True})
lists = 0
while True:
    head = sys.stdin.buffer.read(HEAD.size)
    if len(head) < HEAD.size:
        break
    req = json.loads(sys.stdin.buffer.read(HEAD.unpack(head)[1]))
    if req["op"] == "list":
        lists += 1
        if lists > 1:
            time.sleep(3600)  # the second file makes "libhdf5" loop
        send({"ok": True, "datasets": []})
    else:
        send({"ok": True})
"""


def test_a_timeout_set_after_the_first_load_applies_to_the_reused_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "fake_reader.py"
    script.write_text(FAKE_READER)
    p = tmp_path / "w.h5"
    write_weights(p, {"/params/a": (np.ones(2, np.float32), "f32")})
    _worker.stop_idle()
    monkeypatch.setattr(_h5core, "__file__", str(script))
    monkeypatch.setenv(weights.FAST_ENV, "0")
    monkeypatch.delenv(weights.TIMEOUT_ENV, raising=False)
    assert juliabridge.load_params(p) == ({}, {})
    assert len(_worker.IDLE) == 1  # kept for the next file, started with the 60 s default
    monkeypatch.setenv(weights.TIMEOUT_ENV, "1")
    t = time.perf_counter()
    with pytest.raises(juliabridge.BundleError, match="made no progress for 1 s"):
        juliabridge.load_params(p)
    assert time.perf_counter() - t < 30
    _worker.stop_idle()


# --- (6) what is hashed is what is parsed -------------------------------------------------------


def _other_weights(bundle: Path, tmp_path: Path) -> Path:
    """A weights file for the same manifest with other values (a valid swap-in)."""
    other = tmp_path / "other.h5"
    arrays = dense_bn_arrays(seed=1)
    names = [
        "/params/layer_1/weight",
        "/params/layer_1/bias",
        "/params/layer_2/scale",
        "/params/layer_2/bias",
        "/state/layer_2/running_mean",
        "/state/layer_2/running_var",
    ]
    write_weights(other, {n: (a, "f32") for n, a in zip(names, arrays[1:], strict=True)})
    return other


def _is_original(model: juliabridge.LuxModel) -> bool:
    return bool(np.array_equal(np.asarray(model.params["layer_1"]["weight"]), dense_bn_arrays()[1]))


def test_a_file_swapped_after_it_was_opened_is_not_what_loads(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The swap lands between opening and parsing: parse and hash both see the opened file."""
    other = _other_weights(bundle, tmp_path)
    real = h5parse.open_metadata

    def swap_then_parse(fd: int, size: int) -> h5parse.H5Metadata:
        os.replace(other, bundle / "weights.h5")  # the name now names other values
        return real(fd, size)

    monkeypatch.setattr(h5parse, "open_metadata", swap_then_parse)
    model = juliabridge.import_lux(bundle, backend="xla")
    assert model.metadata["checksums_verified"] and _is_original(model)
    monkeypatch.undo()
    with pytest.raises(juliabridge.ChecksumError):  # and the swapped-in file is refused
        juliabridge.import_lux(bundle, backend="xla")


def test_a_module_swapped_after_it_was_opened_is_not_what_runs(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (bundle / "model.mlir").read_text()
    evil = text.replace("stablehlo.add", "stablehlo.multiply")
    assert evil != text
    real = bundle_mod.safefile.read_all

    def swap_then_read(fd: int, size: int, path: Path, what: str) -> bytes:
        if path.name == "model.mlir":
            (tmp_path / "evil.mlir").write_text(evil)
            os.replace(tmp_path / "evil.mlir", path)
        return real(fd, size, path, what)

    monkeypatch.setattr(bundle_mod.safefile, "read_all", swap_then_read)
    model = juliabridge.import_lux(bundle, backend="xla")
    clean = model.bundle.module.text
    assert clean.count("stablehlo.multiply") == text.count("stablehlo.multiply")
    arrays = dense_bn_arrays()
    from tests.bundle_factory import dense_bn_reference

    np.testing.assert_allclose(np.asarray(model(arrays[0])), dense_bn_reference(arrays), rtol=1e-5)


def test_metadata_rewritten_in_place_while_parsed_never_loads_as_verified(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In place, same inode: the parser sees an offset that points layer_1's bias at other
    bytes of the file, the original bytes are back before hashing, so the digest matches; the
    metadata parsed no longer equals the bytes hashed, and the load fails."""
    path = bundle / "weights.h5"
    with h5py.File(path, "r") as f:
        a = f["/params/layer_1/bias"].id.get_offset()
        b = f["/examples/outputs/0"].id.get_offset()
    original = path.read_bytes()
    needle = struct.pack("<QQ", a, 12)
    assert original.count(needle) == 1
    forged = original.replace(needle, struct.pack("<QQ", b, 12))
    real = h5parse.open_metadata

    def rewrite_while_parsing(fd: int, size: int) -> h5parse.H5Metadata:
        os.pwrite(fd_w, forged, 0)
        try:
            return real(fd, size)
        finally:
            os.pwrite(fd_w, original, 0)

    fd_w = os.open(path, os.O_WRONLY)
    try:
        monkeypatch.setattr(h5parse, "open_metadata", rewrite_while_parsing)
        with pytest.raises(juliabridge.ChecksumError, match="changed while it was loaded"):
            juliabridge.import_lux(bundle, backend="xla")
    finally:
        os.close(fd_w)
    monkeypatch.undo()
    assert _is_original(juliabridge.import_lux(bundle, backend="xla"))


def test_racing_swaps_never_load_the_other_file_as_verified(bundle: Path, tmp_path: Path) -> None:
    """Another process's view: a thread swaps weights.h5 and a look-alike with other values
    (renameat2 RENAME_EXCHANGE) as fast as it can while the bundle is loaded again and again.
    Each load returns the original values, verified, or fails with ChecksumError."""
    other = _other_weights(bundle, tmp_path)
    target = bundle / "weights.h5"
    if not atomic.exchange(other, target) or not atomic.exchange(other, target):
        pytest.skip("no renameat2(RENAME_EXCHANGE) here")
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        while not stop.is_set():
            atomic.exchange(other, target)
            swaps[0] += 1

    t = threading.Thread(target=swap, daemon=True)
    t.start()
    outcomes = {"original": 0, "refused": 0}
    try:
        for _ in range(40):
            try:
                model = juliabridge.import_lux(bundle, backend="xla")
            except juliabridge.ChecksumError:
                outcomes["refused"] += 1
                continue
            assert model.metadata["checksums_verified"] and _is_original(model)
            outcomes["original"] += 1
    finally:
        stop.set()
        t.join()
    assert swaps[0] > 40 and sum(outcomes.values()) == 40, (swaps, outcomes)


# --- (7) allocated but never written -------------------------------------------------------------


def _early(
    new: h5py.File, name: str, data: np.ndarray, *, fill: float, write: bool, chunked: bool
) -> None:
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_value(np.array(fill, data.dtype))
    if chunked:
        dcpl.set_chunk(data.shape)
    dsid = h5d.create(
        new.id, name.encode(), h5t.py_create(data.dtype), h5s.create_simple(data.shape), dcpl=dcpl
    )
    if write:
        h5py.Dataset(dsid)[...] = data


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("fill", [0.0, 7.5])
def test_an_allocated_but_never_written_dataset_is_refused(
    bundle: Path, chunked: bool, fill: float
) -> None:
    rewrite_weights(
        bundle,
        {
            "/params/layer_2/scale": lambda new, name, data: _early(
                new, name, data, fill=fill, write=False, chunked=chunked
            )
        },
    )
    with pytest.raises(juliabridge.BundleError, match="never written") as info:
        juliabridge.import_lux(bundle, backend="xla")
    assert "params.layer_2.scale" in str(info.value)


@pytest.mark.parametrize("chunked", [False, True])
def test_an_early_allocated_dataset_that_was_written_loads(bundle: Path, chunked: bool) -> None:
    rewrite_weights(
        bundle,
        {
            "/params/layer_2/scale": lambda new, name, data: _early(
                new, name, data, fill=0.0, write=True, chunked=chunked
            )
        },
    )
    model = juliabridge.import_lux(bundle, backend="xla")
    np.testing.assert_array_equal(
        np.asarray(model.params["layer_2"]["scale"]), dense_bn_arrays()[3]
    )
    assert isinstance(model.params["layer_2"]["scale"], jax.Array)
