"""Pinned: the safety checks a hostile bundle meets (docs/bundle-format.md §1, §3, §4, §6).

Each test hands `import_lux`/`load_mlir` a bundle or module that breaks exactly one rule, with
every other part (checksums included) made consistent, as an attacker would; the expectation is
the spec's, not the reader's code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import juliabridge
from juliabridge import (
    BundleError,
    ChecksumError,
    JuliaBridgeError,
    ManifestError,
    SignatureMismatchError,
    UnsafeBundleError,
    UnsupportedModuleError,
)

from .pinned_support import Arg, Res, Spec, dense_spec, edit, lower, manifest, reseal, write


def dense(tmp_path: Path, name: str = "d.bundle") -> Path:
    spec, _ = dense_spec()
    return write(tmp_path / name, spec)


def expected_output(root: Path, x: np.ndarray) -> np.ndarray:
    with h5py.File(root / "weights.h5") as f:
        w = f["/params/layer_1/weight"][()]
        b = f["/params/layer_1/bias"][()]
    return x @ w + b


def test_the_unmodified_bundle_loads_and_computes(tmp_path: Path) -> None:
    # The baseline every refusal below is measured against.
    root = dense(tmp_path)
    model = juliabridge.import_lux(root)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_allclose(model(x), expected_output(root, x), rtol=1e-6)


# --- checksums ---------------------------------------------------------------------------------


def test_a_changed_module_is_refused_by_its_own_checksum(tmp_path: Path) -> None:
    root = dense(tmp_path)
    p = root / "model.mlir"
    p.write_text(p.read_text() + "\n// changed after export\n")
    with pytest.raises(ChecksumError, match=r"model\.mlir"):
        juliabridge.import_lux(root)
    # Opting out loads it, and the model says so.
    model = juliabridge.import_lux(root, verify_checksums=False)
    assert model.metadata["checksums_verified"] is False


@pytest.mark.parametrize("which", ["module", "weights"])
def test_a_change_past_the_first_4_mib_is_detected(tmp_path: Path, which: str) -> None:
    spec, _ = dense_spec()
    if which == "module":
        spec.mlir += "\n// " + "a" * (5 << 20) + "\n"
    else:
        big = np.zeros(5 << 18, np.float32)  # 5 MiB of state after the parameters
        spec.args.append(Arg("state", ["big"], big))
        spec.mlir = lower(lambda x, w, b, s: x @ w + b, *[a.value for a in spec.args])
    root = write(tmp_path / "big.bundle", spec)
    name = {"module": "model.mlir", "weights": "weights.h5"}[which]
    p = root / name
    data = bytearray(p.read_bytes())
    assert len(data) > 5 << 20
    if which == "module":
        data[-3] = ord("b")  # still a comment: the module parses the same
    else:
        with h5py.File(p) as f:
            offset = f["/state/big"].id.get_offset()
        data[offset + (5 << 20) - 1] ^= 0x40  # the last element, past 4 MiB
    p.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match=name):
        juliabridge.import_lux(root)


# --- names and paths ---------------------------------------------------------------------------


@pytest.mark.parametrize("step", ["..", "."])
def test_dot_steps_in_a_parameter_path_are_refused(tmp_path: Path, step: str) -> None:
    root = dense(tmp_path)
    # The dataset keeps its real name: only the path step is wrong.
    edit(root, lambda m: m["arguments"][1].update(path=["layer_1", step]))
    with pytest.raises(ManifestError):
        juliabridge.import_lux(root)


@pytest.mark.parametrize("key", ["module", "weights"])
def test_a_backslash_in_a_file_name_is_refused_even_when_the_file_exists(
    tmp_path: Path, key: str
) -> None:
    root = dense(tmp_path)
    old = manifest(root)[key]["file"]
    new = "sub\\" + old
    (root / old).rename(root / new)  # a legal file name on POSIX, a path on Windows
    edit(root, lambda m: m[key].update(file=new))
    with pytest.raises((UnsafeBundleError, ManifestError)):
        juliabridge.import_lux(root)


# --- datasets ----------------------------------------------------------------------------------


def _rewrite(root: Path, name: str, make: Any) -> None:
    """Replace dataset `name` with what `make(file, name)` creates, keeping its dtype tag."""
    with h5py.File(root / "weights.h5", "a") as f:
        tag = f[name].attrs.get("dtype")
        del f[name]
        ds = make(f, name)
        if tag is not None and "dtype" not in ds.attrs:
            ds.attrs["dtype"] = tag
    reseal(root)


def test_a_dataset_of_the_same_rank_and_size_but_another_shape_is_refused(
    tmp_path: Path,
) -> None:
    root = dense(tmp_path)
    with h5py.File(root / "weights.h5") as f:
        w = f["/params/layer_1/weight"][()]
    _rewrite(root, "/params/layer_1/weight", lambda f, n: f.create_dataset(n, data=w.T.copy()))
    with pytest.raises(JuliaBridgeError, match="layer_1"):
        juliabridge.import_lux(root)


def _mask_spec() -> Spec:
    x = np.ones(3, np.float32)
    k = np.array([0, 1, 1], np.uint8)
    return Spec(
        name="mask",
        mlir=lower(lambda x, k: x * k.astype(np.float32), x, k),
        args=[Arg("input", [], x), Arg("parameter", ["mask"], k)],
        results=[Res([["output"]], (3,), "f32")],
    )


def test_the_mask_bundle_loads(tmp_path: Path) -> None:
    model = juliabridge.import_lux(write(tmp_path / "m.bundle", _mask_spec()))
    np.testing.assert_array_equal(np.asarray(model.params["mask"]), [0, 1, 1])


def test_a_dtype_tag_that_disagrees_with_the_manifest_is_refused(tmp_path: Path) -> None:
    # ui8 and i1 are both stored as uint8, so only the tag tells them apart.
    root = write(tmp_path / "m.bundle", _mask_spec())
    with h5py.File(root / "weights.h5", "a") as f:
        f["/params/mask"].attrs["dtype"] = "i1"
    reseal(root)
    with pytest.raises(JuliaBridgeError, match="mask"):
        juliabridge.import_lux(root)


def test_a_dataset_without_its_dtype_tag_is_refused(tmp_path: Path) -> None:
    root = write(tmp_path / "m.bundle", _mask_spec())
    with h5py.File(root / "weights.h5", "a") as f:
        del f["/params/mask"].attrs["dtype"]
    reseal(root)
    with pytest.raises(JuliaBridgeError, match="mask"):
        juliabridge.import_lux(root)


# Partly written chunked datasets and forged compressed chunks: tests/test_pinned_libhdf5.py
# (on the libhdf5 route, where they are checked).


def test_declared_state_sizes_count_against_the_file_size(tmp_path: Path) -> None:
    # 320 MiB of state declared in manifest and module, in a file of a few KiB: refused before
    # the weights file is opened, with the declared total in the message.
    spec, _ = dense_spec()
    root = write(tmp_path / "s.bundle", spec)
    n = 80 << 20
    text = lower(
        lambda x, w, b, s: x @ w + b,
        *[a.value for a in spec.args],
        np.zeros(0, np.float32).reshape(0),
    ).replace("tensor<0xf32>", f"tensor<{n}xf32>")

    def change(m: dict[str, Any]) -> None:
        m["arguments"].append(
            {
                "index": 3,
                "role": "state",
                "path": ["big"],
                "dtype": "f32",
                "shape": [n],
                "julia_shape": [n],
                "dataset": "/state/big",
            }
        )

    (root / "model.mlir").write_text(text)
    edit(root, change)
    declared = (2 * 3 + 3) * 4 + n * 4
    with pytest.raises(BundleError) as e:
        juliabridge.import_lux(root)
    assert str(declared) in str(e.value)


# --- indices and axes --------------------------------------------------------------------------


def _dense_bn_like(tmp_path: Path) -> Path:
    """Dense with a state vector returned unchanged as an alias."""
    spec, _ = dense_spec()
    s = np.arange(3, dtype=np.float32)
    spec.args.append(Arg("state", ["layer_1", "count"], s))
    spec.mlir = lower(lambda x, w, b, s: x @ w + b, *[a.value for a in spec.args])
    spec.aliases = [(["state", "layer_1", "count"], 3)]
    return write(tmp_path / "a.bundle", spec)


def test_an_alias_of_the_last_argument_is_accepted(tmp_path: Path) -> None:
    root = _dense_bn_like(tmp_path)
    model = juliabridge.import_lux(root)
    x = np.ones((4, 2), np.float32)
    _, st = model.apply(model.params, model.state, x)
    np.testing.assert_array_equal(st["layer_1"]["count"], [0, 1, 2])


@pytest.mark.parametrize("index", [4, -1, 100])
def test_an_alias_index_outside_the_arguments_is_refused(tmp_path: Path, index: int) -> None:
    root = _dense_bn_like(tmp_path)
    edit(root, lambda m: m["aliases"][0].update(argument=index))
    with pytest.raises(ManifestError):
        juliabridge.import_lux(root)


@pytest.mark.parametrize("where", ["argument", "result"])
@pytest.mark.parametrize("axis", [1, 2, -1])
def test_batch_axis_bounds(tmp_path: Path, where: str, axis: int) -> None:
    root = dense(tmp_path)

    def change(m: dict[str, Any]) -> None:
        entry = m["arguments"][0] if where == "argument" else m["results"][0]
        entry["batch_axis"] = axis
        if axis == 1:  # the last axis of a rank-2 value: legal, and then it is the batch size
            m["batch"]["size"] = entry["shape"][1]
            other = m["results"][0] if where == "argument" else m["arguments"][0]
            other.pop("batch_axis", None)

    edit(root, change)
    if axis == 1:
        juliabridge.import_lux(root)  # accepted
    else:
        with pytest.raises(ManifestError):
            juliabridge.import_lux(root)


# --- the module --------------------------------------------------------------------------------

PRIVATE_MAIN = """module {
  func.func private @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""


@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_a_private_main_is_refused(backend: str) -> None:
    with pytest.raises(UnsupportedModuleError, match="main"):
        juliabridge.load_mlir(PRIVATE_MAIN, backend=backend)
    # The same module with a public @main loads and runs.
    fn = juliabridge.load_mlir(PRIVATE_MAIN.replace("private ", ""), backend=backend)
    np.testing.assert_array_equal(fn(np.array([1.0, 2.0], np.float32))[0], [2.0, 4.0])


UNREGISTERED_ATTR = """module {
  func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.add %arg0, %arg0 {payload = #mystery.blob<"x">} : tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""


@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_unregistered_attribute_values_are_refused_unless_trusted(backend: str) -> None:
    with pytest.raises(UnsupportedModuleError):
        juliabridge.load_mlir(UNREGISTERED_ATTR, backend=backend)


def test_a_private_main_in_a_bundle_is_refused(tmp_path: Path) -> None:
    x = np.ones(2, np.float32)
    spec = Spec(
        name="p",
        mlir=PRIVATE_MAIN,
        args=[Arg("input", [], x)],
        results=[Res([["output"]], (2,), "f32")],
    )
    root = write(tmp_path / "p.bundle", spec)
    with pytest.raises(UnsupportedModuleError):
        juliabridge.import_lux(root)


# --- formats 2 and 3: per-dataset digests (spec §4.1) -------------------------------------------


def _canonical_digest(value: np.ndarray) -> str:
    """BLAKE3 (format 3) of the spec's canonical bytes, written from §4.1: row-major,
    little-endian, bf16/f16 as their uint16 bit patterns, Bool as one byte 0/1."""
    import blake3
    import ml_dtypes

    a = np.asarray(value)
    if a.dtype == np.bool_:
        data = bytes(int(v) for v in a.reshape(-1))
    elif a.dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        data = b"".join(int(v).to_bytes(2, "little") for v in a.view(np.uint16).reshape(-1))
    else:
        data = a.astype(a.dtype.newbyteorder("<")).tobytes(order="C")
    return blake3.blake3(data).hexdigest()


def _mixed_spec() -> Spec:
    import ml_dtypes

    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    h = np.array([[0.5, -1.5, 2.0], [65504.0, -0.0, 1e-3]], np.float16)
    b = np.array([1.0, -2.5, 3.0], ml_dtypes.bfloat16)
    k = np.array([True, False, True])

    def fn(x: Any, h: Any, b: Any, k: Any) -> Any:
        return x * h.astype(np.float32) + b.astype(np.float32) * k.astype(np.float32)

    return Spec(
        name="mixed",
        mlir=lower(fn, x, h, b, k),
        args=[
            Arg("input", [], x),
            Arg("parameter", ["h"], h),
            Arg("parameter", ["b"], b),
            Arg("parameter", ["k"], k),
        ],
        results=[Res([["output"]], (2, 3), "f32")],
        example_outputs={0: fn(x, h, b, k)},
    )


def test_upgrade_writes_the_canonical_digest_of_every_dataset(tmp_path: Path) -> None:
    from juliabridge.bundle.write.upgrade import upgrade_bundle

    spec = _mixed_spec()
    root = write(tmp_path / "x.bundle", spec)
    upgrade_bundle(root)
    m = manifest(root)
    assert m["format_version"] == 3
    got = {tuple(a["path"]): a.get("blake3") for a in m["arguments"]}
    for a in spec.args:
        if a.role != "input":
            assert got[tuple(a.path)] == _canonical_digest(a.value), a.path
    assert m["examples"]["inputs"][0]["blake3"] == _canonical_digest(spec.args[0].value)
    assert m["examples"]["outputs"][0]["blake3"] == _canonical_digest(spec.example_outputs[0])
    assert juliabridge.verify(root).ok


def test_a_changed_value_under_an_unchanged_digest_is_refused(tmp_path: Path) -> None:
    from juliabridge.bundle.write.upgrade import upgrade_bundle

    root = write(tmp_path / "x.bundle", _mixed_spec())
    upgrade_bundle(root)
    with h5py.File(root / "weights.h5", "a") as f:
        f["/params/k"][1] = 1  # one Bool flipped

    def drop_file_sha(m: dict[str, Any]) -> None:
        m["weights"].pop("sha256", None)  # optional in format 3: the datasets' digests remain

    edit(root, drop_file_sha, seal=False)
    with pytest.raises(ChecksumError, match=r"params\.k"):
        juliabridge.import_lux(root)
    model = juliabridge.import_lux(root, verify_checksums=False)
    np.testing.assert_array_equal(np.asarray(model.params["k"]), [True, True, True])


# --- files of a bundle: regular files only, never followed, never blocking (spec §1) -----------


@pytest.mark.parametrize("key", ["module", "weights"])
def test_a_symlinked_file_is_refused_with_the_hub_hint(tmp_path: Path, key: str) -> None:
    root = dense(tmp_path)
    name = manifest(root)[key]["file"]
    real = tmp_path / f"elsewhere-{name}"
    (root / name).rename(real)
    (root / name).symlink_to(real)
    with pytest.raises(UnsafeBundleError) as e:
        juliabridge.import_lux(root)
    msg = str(e.value)
    assert f"{name}" in msg and "is a symlink" in msg and "cp -rL SRC DST" in msg


def _special(path: Path, kind: str) -> Any:
    import os
    import socket

    if kind == "a directory":
        path.mkdir()
    elif kind == "a named pipe":
        os.mkfifo(path)
    elif kind == "a socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        return s
    return None


@pytest.mark.parametrize("kind", ["a directory", "a named pipe", "a socket"])
@pytest.mark.parametrize("key", ["module", "weights"])
def test_a_file_that_is_not_regular_is_refused_naming_what_it_is(
    tmp_path: Path, key: str, kind: str
) -> None:
    root = dense(tmp_path)
    name = manifest(root)[key]["file"]
    (root / name).unlink()
    keep = _special(root / name, kind)
    try:
        with pytest.raises(BundleError) as e:
            juliabridge.import_lux(root)
    finally:
        if keep is not None:
            keep.close()
    assert not isinstance(e.value, UnsafeBundleError)
    assert f"must be a regular file, found {kind}" in str(e.value)
    assert name in str(e.value)


@pytest.mark.parametrize("key", ["module", "weights"])
def test_a_missing_file_is_named(tmp_path: Path, key: str) -> None:
    root = dense(tmp_path)
    name = manifest(root)[key]["file"]
    (root / name).unlink()
    with pytest.raises(BundleError, match=f"{name}: the .* is missing"):
        juliabridge.import_lux(root)


def test_load_params_refuses_a_symlink_and_a_pipe(tmp_path: Path) -> None:
    import os

    root = dense(tmp_path)
    link = tmp_path / "w.h5"
    link.symlink_to(root / "weights.h5")
    with pytest.raises(UnsafeBundleError, match="symlink"):
        juliabridge.load_params(link)
    fifo = tmp_path / "p.h5"
    os.mkfifo(fifo)
    with pytest.raises(BundleError, match="must be a regular file, found a named pipe"):
        juliabridge.load_params(fifo)
    with pytest.raises(BundleError, match="no such file; pass a weights file"):
        juliabridge.load_params(tmp_path / "absent.h5")
    params, _ = juliabridge.load_params(root)  # a bundle directory: its weights.h5
    assert set(params["layer_1"]) == {"weight", "bias"}


@pytest.mark.skipif(not Path("/dev/null").is_char_device(), reason="needs /dev/null")
def test_a_device_is_refused_as_a_device() -> None:
    # /dev/null is a character device (POSIX): it reads as an empty file, and is no weights file.
    with pytest.raises(BundleError) as e:
        juliabridge.load_params(Path("/dev/null"))
    assert type(e.value) is BundleError
    assert str(e.value) == "/dev/null: the weights file must be a regular file, found a device"


def test_a_symlinked_weights_file_is_named_with_the_hub_hint(tmp_path: Path) -> None:
    root = dense(tmp_path)
    link = tmp_path / "w.h5"
    link.symlink_to(root / "weights.h5")
    with pytest.raises(UnsafeBundleError) as e:
        juliabridge.load_params(link)
    assert str(e.value) == (
        f"{link}: the weights file is a symlink; a bundle holds regular files only (symlinks "
        "could point anywhere). If this is a model-hub cache, copy it to a plain directory "
        "first (`cp -rL SRC DST`, or huggingface_hub's snapshot_download(..., local_dir=DST)), "
        "so that it holds regular files"
    )


def test_a_path_through_a_symlink_loop_is_refused_as_a_symlink(tmp_path: Path) -> None:
    # The kernel reports ELOOP for a looping directory on the way as for a symlinked file.
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    path = tmp_path / "loop" / "w.h5"
    with pytest.raises(UnsafeBundleError) as e:
        juliabridge.load_params(path)
    assert str(e.value).startswith(f"{path}: the weights file is a symlink; a bundle holds ")


@pytest.mark.parametrize("code", ["EACCES", "EIO"])
def test_a_weights_file_that_cannot_be_opened_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    # Permission denied (which root never sees) or an I/O error while opening: a BundleError
    # naming the file and the cause, not the symlink refusal.
    import errno

    root = dense(tmp_path)
    real = os.open
    number = getattr(errno, code)

    def refusing(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path).endswith("weights.h5"):
            raise OSError(number, os.strerror(number), os.fspath(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)
    with pytest.raises(BundleError) as e:
        juliabridge.load_params(root / "weights.h5")
    assert type(e.value) is BundleError
    assert str(e.value) == (
        f"{root / 'weights.h5'}: cannot open the weights file ({os.strerror(number)}); check its "
        "permissions"
    )


def _swap_once_opened(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, want: np.ndarray) -> None:
    """Once safefile.directory has opened a bundle directory, move it away and put a directory
    with another weights file (zeros for /params/layer_1/weight) in its place."""
    import contextlib

    from juliabridge.bundle.files import safefile

    real = safefile.directory

    @contextlib.contextmanager
    def then_swapped(path: Path) -> Any:
        with real(path) as fd:
            if fd is None:
                pytest.skip("the platform cannot open files relative to a directory")
            path.rename(tmp_path / "moved")
            path.mkdir()
            with h5py.File(path / "weights.h5", "w") as f:
                f.create_dataset("/params/layer_1/weight", data=np.zeros_like(want))
                f["/params/layer_1/weight"].attrs["dtype"] = "f32"
            yield fd

    monkeypatch.setattr(safefile, "directory", then_swapped)


def _first_weight(root: Path) -> np.ndarray:
    with h5py.File(root / "weights.h5") as f:
        return np.asarray(f["/params/layer_1/weight"][()])


def test_a_bundle_directory_swapped_after_it_was_opened_is_read_from_the_one_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Files are opened relative to the directory's own descriptor: a directory put in place of
    # the bundle's name once it is open (a race an attacker can win) is never read.
    root = dense(tmp_path)
    want = _first_weight(root)
    _swap_once_opened(monkeypatch, tmp_path, want)
    params, _ = juliabridge.load_params(root)
    np.testing.assert_array_equal(np.asarray(params["layer_1"]["weight"]), want)


@pytest.mark.parametrize("version", [1, 3])
def test_verifying_the_weights_reads_the_directory_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    # Format 1: the whole file's sha256 (one descriptor, no array read); format 3: each
    # dataset's digest. Either way the weights hashed are those of the directory opened.
    from juliabridge.bundle import open_bundle
    from tests.bundle_factory import make_dense_bn, to_format1

    root = make_dense_bn(tmp_path / "b.bundle")
    if version == 1:
        to_format1(root)
    bundle = open_bundle(root, defer_weights=True)
    _swap_once_opened(monkeypatch, tmp_path, _first_weight(root))
    bundle.verify_weights()  # no error: the moved directory's weights match the manifest
    assert not (root / "manifest.json").exists()  # the name now holds the swapped-in one


def test_the_module_is_read_from_the_bundle_directory_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # open_bundle reads model.mlir through the directory it opened: the directory swapped in
    # under the bundle's name (with no module at all) is not where the module comes from.
    from juliabridge.bundle import open_bundle

    root = dense(tmp_path)
    before = open_bundle(root, defer_weights=True).module.arguments
    _swap_once_opened(monkeypatch, tmp_path, _first_weight(root))
    bundle = open_bundle(root, defer_weights=True)
    assert not (root / "model.mlir").exists()
    assert bundle.module.arguments == before


def test_a_weights_file_removed_just_before_it_is_opened_is_named_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # import_lux checks the manifest's files first; one removed in between is missing.
    import contextlib

    from juliabridge.bundle.files import safefile

    root = dense(tmp_path)
    real = safefile.directory

    @contextlib.contextmanager
    def then_removed(path: Path) -> Any:
        with real(path) as fd:
            (path / "weights.h5").unlink(missing_ok=True)
            yield fd

    monkeypatch.setattr(safefile, "directory", then_removed)
    with pytest.raises(BundleError) as e:
        juliabridge.import_lux(root)
    assert type(e.value) is BundleError
    assert str(e.value) == f"{root / 'weights.h5'}: the weights file is missing"


@pytest.mark.parametrize("missing", [("preadv",), ("preadv", "readv")])
def test_files_read_the_same_where_the_platform_lacks_preadv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: tuple[str, ...]
) -> None:
    # Windows has neither os.preadv nor os.readv; the module text must still be read whole,
    # so the checksum (spec §1) matches and the model computes what the file says.
    import os

    from juliabridge.bundle.weights import fastread

    root = dense(tmp_path)
    for name in missing:
        monkeypatch.delattr(os, name, raising=False)
    monkeypatch.setattr(fastread, "AVAILABLE", False)  # as it is computed there at import
    model = juliabridge.import_lux(root)
    x = np.ones((4, 2), np.float32)
    np.testing.assert_allclose(np.asarray(model(x)), expected_output(root, x), rtol=1e-6)


@pytest.mark.skipif(not hasattr(os, "preadv"), reason="the platform lacks preadv")
def test_positioned_reads_leave_the_shared_descriptor_where_it_was(tmp_path: Path) -> None:
    # The Python reader reads datasets in parallel threads through one descriptor, so a read at
    # an offset must not go through (or move) the descriptor's own file position.
    from juliabridge.bundle.files import safefile

    path = tmp_path / "bytes"
    path.write_bytes(bytes(range(256)))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, 7, os.SEEK_SET)
        buf = bytearray(4)
        assert safefile.read_at(fd, memoryview(buf), 100) == 4
        assert bytes(buf) == bytes([100, 101, 102, 103])
        assert os.lseek(fd, 0, os.SEEK_CUR) == 7
        assert safefile.read_at(fd, memoryview(buf), 254) == 2  # the count, short at the end
        assert bytes(buf[:2]) == bytes([254, 255])
        assert safefile.read_at(fd, memoryview(buf), 256) == 0
    finally:
        os.close(fd)


def test_a_module_file_truncated_while_it_is_read_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The size is taken when the file is opened; a file that then shrinks (a racing writer)
    # must end in a BundleError naming it, not in a parse of half a module or a hang.
    import os

    from juliabridge.bundle.files import safefile

    root = dense(tmp_path)
    real = safefile.open_regular

    def open_then_truncate(path: Path, what: str, *, dir_fd: int | None = None) -> Any:
        fd, st = real(path, what, dir_fd=dir_fd)
        if path.name == "model.mlir":
            os.truncate(root / "model.mlir", st.st_size // 2)
        return fd, st

    monkeypatch.setattr(safefile, "open_regular", open_then_truncate)
    with pytest.raises(BundleError, match=r"model\.mlir: the module file became shorter"):
        juliabridge.import_lux(root)


# --- weights: both readers, their messages and the stored encodings (spec §4, §4.1) ------------
# JULIABRIDGE_HDF5_FASTPATH=0 sends a file to libhdf5 (in its reader process, or in this one
# with JULIABRIDGE_HDF5_WORKER=0); the Python reader is the default. Both must agree.


@pytest.fixture(params=[pytest.param("1", id="python-reader"), pytest.param("0", id="libhdf5")])
def fast(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The reader route: "1" the Python reader (the default), "0" libhdf5."""
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", request.param)
    return str(request.param)


def test_a_file_that_is_not_hdf5_is_refused_naming_it(tmp_path: Path, fast: str) -> None:
    root = dense(tmp_path)
    (root / "weights.h5").write_bytes(b"not an HDF5 file " * 16)
    reseal(root)
    with pytest.raises(BundleError) as e:
        juliabridge.import_lux(root)
    msg = str(e.value)
    assert type(e.value) is BundleError
    assert msg.startswith(f"{root / 'weights.h5'}: not a readable HDF5 file (")
    assert "The file is corrupt or truncated; download or export the bundle again" in msg
    if fast == "0":  # libhdf5's own words
        assert "file signature not found" in msg


def test_a_dataset_of_another_shape_is_a_signature_mismatch(tmp_path: Path, fast: str) -> None:
    from juliabridge import SignatureMismatchError

    root = dense(tmp_path)
    with h5py.File(root / "weights.h5") as f:
        w = f["/params/layer_1/weight"][()]
    _rewrite(root, "/params/layer_1/weight", lambda f, n: f.create_dataset(n, data=w.T.copy()))
    with pytest.raises(SignatureMismatchError) as e:
        juliabridge.import_lux(root)
    assert str(e.value) == (
        f"{root / 'weights.h5'}: params.layer_1.weight: dataset /params/layer_1/weight has shape "
        f"[{w.shape[1]}, {w.shape[0]}], expected [{w.shape[0]}, {w.shape[1]}] (MLIR order, i.e. "
        "Julia dims reversed). The weights file does not belong to this manifest; re-export the "
        "bundle"
    )


def test_the_python_reader_can_be_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from juliabridge.bundle.weights import open_weights, use_worker

    root = dense(tmp_path)
    with open_weights(root / "weights.h5") as reader:
        assert reader.mode == "python" and reader.fallback is None
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    with open_weights(root / "weights.h5") as reader:
        assert reader.fallback == "JULIABRIDGE_HDF5_FASTPATH=0"
        assert reader.mode == ("process" if use_worker() else "in-process")
        w = reader.read_array("/params/layer_1/weight", (2, 3), "f32", "params.layer_1.weight")
    with h5py.File(root / "weights.h5") as f:
        np.testing.assert_array_equal(w, f["/params/layer_1/weight"][()])


def _scalar_and_mask_spec() -> Spec:
    x = np.array([1.0, 2.0, 3.0], np.float32)
    s = np.array(2.5, np.float32)  # rank 0: an HDF5 scalar dataset
    k = np.array([True, False, True])

    def fn(x: Any, s: Any, k: Any) -> Any:
        return x * s * k.astype(np.float32)

    return Spec(
        name="scaled",
        mlir=lower(fn, x, s, k),
        args=[Arg("input", [], x), Arg("parameter", ["s"], s), Arg("parameter", ["k"], k)],
        results=[Res([["output"]], (3,), "f32")],
        example_outputs={0: fn(x, s, k)},
    )


def test_dataset_digests_without_a_file_digest_on_either_reader(tmp_path: Path, fast: str) -> None:
    import blake3

    from juliabridge.bundle.write.upgrade import upgrade_bundle

    root = write(tmp_path / "x.bundle", _scalar_and_mask_spec())
    upgrade_bundle(root)
    edit(root, lambda m: m["weights"].pop("sha256", None), seal=False)
    model = juliabridge.import_lux(root)  # no file digest: nothing to compare the file with
    assert float(model.params["s"]) == 2.5 and np.asarray(model.params["s"]).shape == ()
    np.testing.assert_array_equal(np.asarray(model.params["k"]), [True, False, True])
    recorded = {a["dataset"]: a["blake3"] for a in manifest(root)["arguments"] if "dataset" in a}
    with h5py.File(root / "weights.h5", "a") as f:
        f["/params/k"][1] = 1
        stored = f["/params/k"][()]
    got = blake3.blake3(stored.astype(np.uint8).tobytes()).hexdigest()
    with pytest.raises(ChecksumError) as e:
        juliabridge.import_lux(root)
    assert str(e.value) == (
        f"{root / 'weights.h5'}: params.k (/params/k): the blake3 of its stored bytes is {got} "
        f"but manifest.json records {recorded['/params/k']}; the file was modified or corrupted. "
        "Re-export the bundle, or pass verify_checksums=False if you changed it on purpose."
    )


@pytest.mark.parametrize("stored", [np.int8, np.bool_])
def test_bool_may_be_stored_as_int8_or_hdf5_bool(tmp_path: Path, stored: Any) -> None:
    # spec §4: i1 is one byte 0/1 (uint8), and readers accept int8 and HDF5's bool enum too
    root = write(tmp_path / "x.bundle", _scalar_and_mask_spec())
    k = np.array([1, 0, 1]).astype(stored)
    _rewrite(root, "/params/k", lambda f, n: f.create_dataset(n, data=k))
    model = juliabridge.import_lux(root)
    np.testing.assert_array_equal(np.asarray(model.params["k"]), [True, False, True])
    assert np.asarray(model.params["k"]).dtype == np.bool_


def test_upgrading_a_bundle_read_by_libhdf5_digests_every_dataset(tmp_path: Path) -> None:
    # A chunked dataset sends the file to libhdf5; the upgrade then reads every dataset through
    # that same reader, one after another.
    from juliabridge.bundle.write.upgrade import upgrade_bundle

    spec = _mixed_spec()
    root = write(tmp_path / "x.bundle", spec)
    h = np.asarray(spec.args[1].value).view(np.uint16)
    _rewrite(root, "/params/h", lambda f, n: f.create_dataset(n, data=h, chunks=(1, 3)))
    upgrade_bundle(root)
    got = {tuple(a["path"]): a.get("blake3") for a in manifest(root)["arguments"]}
    for a in spec.args[1:]:
        assert got[tuple(a.path)] == _canonical_digest(a.value), a.path
    assert juliabridge.verify(root).ok


def _as_format_2(m: dict[str, Any], root: Path) -> None:
    """Format 3's BLAKE3 dataset digests replaced by format 2's sha256 ones, computed here."""
    import hashlib

    m["format_version"] = 2
    with h5py.File(root / "weights.h5") as f:
        for a in m["arguments"]:
            if "dataset" in a:
                data = np.asarray(f[a["dataset"]][()])
                little = data.astype(data.dtype.newbyteorder("<")).tobytes()
                a.pop("blake3")
                a["sha256"] = hashlib.sha256(little).hexdigest()
        for e in m.get("examples", {}).get("outputs", []) + m.get("examples", {}).get("inputs", []):
            e["sha256"] = "0" * 64  # not read by import_lux
            e.pop("blake3")


@pytest.mark.parametrize("whole_file", [False, True], ids=["dataset digests", "and file sha256"])
def test_format_2_sha256_dataset_digests_are_checked_on_either_reader(
    tmp_path: Path, fast: str, whole_file: bool
) -> None:
    import hashlib

    from juliabridge.bundle.write.upgrade import upgrade_bundle

    root = write(tmp_path / "x.bundle", _scalar_and_mask_spec())
    upgrade_bundle(root)
    edit(root, lambda m: (_as_format_2(m, root), m["weights"].pop("sha256", None)), seal=False)
    if whole_file:
        edit(root, lambda m: None)  # records weights.sha256 over the unchanged file
    model = juliabridge.import_lux(root)
    assert model.manifest.format_version == 2
    np.testing.assert_array_equal(np.asarray(model.params["k"]), [True, False, True])
    recorded = {a["dataset"]: a["sha256"] for a in manifest(root)["arguments"] if "dataset" in a}
    with h5py.File(root / "weights.h5", "a") as f:
        f["/params/k"][1] = 1
        stored = f["/params/k"][()]
    if whole_file:  # the file's own sha256 still matches: only the dataset's digest can tell
        edit(root, lambda m: None)
    got = hashlib.sha256(stored.astype(np.uint8).tobytes()).hexdigest()
    with pytest.raises(ChecksumError) as e:
        juliabridge.import_lux(root)
    assert str(e.value) == (
        f"{root / 'weights.h5'}: params.k (/params/k): the sha256 of its stored bytes is {got} "
        f"but manifest.json records {recorded['/params/k']}; the file was modified or corrupted. "
        "Re-export the bundle, or pass verify_checksums=False if you changed it on purpose."
    )


def test_open_bundle_checks_dataset_digests_beside_a_whole_file_sha256(tmp_path: Path) -> None:
    # A format-3 manifest may also record weights.sha256 (spec §3.1); both are checked, so a
    # correct file hash does not stand in for wrong dataset digests.
    from juliabridge.bundle import open_bundle
    from juliabridge.bundle.write.upgrade import upgrade_bundle
    from juliabridge.cli import main

    root = write(tmp_path / "x.bundle", _scalar_and_mask_spec())
    upgrade_bundle(root)
    edit(root, lambda m: m["arguments"][2].update(blake3="0" * 64))  # seals weights.sha256
    assert manifest(root)["weights"]["sha256"]
    with pytest.raises(ChecksumError, match=r"params\.k \(/params/k\): the blake3 of its"):
        open_bundle(root)
    assert main(["inspect", str(root)]) == 12
    open_bundle(root, verify_checksums=False)


def test_an_i1_dataset_holding_another_byte_is_refused_and_not_upgraded(tmp_path: Path) -> None:
    # Bool is stored as 0 or 1 (spec §4): a 2 would read as True yet hash differently, so an
    # upgrade would record a digest the reader cannot match.
    from juliabridge.bundle.write.upgrade import upgrade_bundle

    root = write(tmp_path / "x.bundle", _scalar_and_mask_spec())
    _rewrite(
        root, "/params/k", lambda f, n: f.create_dataset(n, data=np.array([2, 0, 1], np.uint8))
    )
    edit(root, lambda m: None)
    before = (root / "manifest.json").read_bytes()
    message = (
        f"{root / 'weights.h5'}: params.k (/params/k): an i1 (Bool) dataset holds the byte 2; "
        "Bool is stored as 0 or 1 (docs/bundle-format.md §4). Export the bundle again"
    )
    with pytest.raises(SignatureMismatchError) as e:
        juliabridge.import_lux(root)
    assert str(e.value) == message
    with pytest.raises(SignatureMismatchError):
        upgrade_bundle(root)
    assert (root / "manifest.json").read_bytes() == before


def test_a_machine_without_the_memory_for_a_dataset_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from juliabridge.bundle.weights import memory

    root = dense(tmp_path)
    monkeypatch.setattr(memory, "physical_memory", lambda: 16)  # bytes
    with pytest.raises(BundleError) as e:
        juliabridge.import_lux(root)
    assert str(e.value) == (
        f"{root / 'weights.h5'}: params.layer_1.weight needs 24 bytes but this machine has 16 "
        "bytes of memory; the bundle is too large for it (or its sizes are forged)"
    )


def test_written_weights_keep_scalars_and_encode_halves_and_bools(tmp_path: Path) -> None:
    from juliabridge.bundle.weights import write_weights

    path = tmp_path / "new" / "dir" / "w.h5"  # missing directories are created
    write_weights(
        path,
        {
            "/s": (np.float32(2.5), "f32"),
            "/h": (np.array([1.5, -2.0], np.float16), "f16"),
            "/k": (np.array([True, False]), "i1"),
        },
    )
    with h5py.File(path) as f:
        assert f["/s"].shape == () and f["/s"][()] == 2.5
        assert f["/h"].dtype == np.uint16 and list(f["/h"][()]) == [0x3E00, 0xC000]
        assert f["/k"].dtype == np.uint8 and list(f["/k"][()]) == [1, 0]
        assert {n: f[n].attrs["dtype"] for n in f} == {"s": "f32", "h": "f16", "k": "i1"}


def test_a_failed_weights_write_says_why_and_leaves_nothing_behind(tmp_path: Path) -> None:
    from juliabridge import SaveError
    from juliabridge.bundle.weights import write_weights

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SaveError) as e:
        write_weights(blocker / "w.h5", {"/a": (np.ones(2, np.float32), "f32")})
    assert str(e.value) == (
        f"{blocker / 'w.h5'}: cannot create a file in {blocker} (File exists); check that "
        "the directory exists and is writable"
    )
    # A value that is not an array of its type fails as numpy says, not as a disk problem
    # ("check free space"), and neither the target nor a temporary is left.
    target = tmp_path / "w.h5"
    with pytest.raises(ValueError):
        write_weights(target, {"/a": (np.array(["one", "two"]), "f32")})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_dataset_allocated_but_never_written_is_refused_naming_it(tmp_path: Path) -> None:
    # HDF5 early allocation gives a dataset storage before any data is written; one that
    # holds only its fill value was never written (spec §4: writers write every dataset).
    from h5py import h5d, h5p, h5s, h5t

    root = dense(tmp_path)

    def never_written(f: h5py.File, name: str) -> Any:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_value(np.array(0.0, np.float32))
        space, kind = h5s.create_simple((3,)), h5t.py_create(np.dtype(np.float32))
        return h5py.Dataset(h5d.create(f.id, name.encode(), kind, space, dcpl=dcpl))

    _rewrite(root, "/params/layer_1/bias", never_written)
    with pytest.raises(BundleError) as e:
        juliabridge.import_lux(root)
    assert str(e.value).startswith(
        f"{root / 'weights.h5'}: params.layer_1.bias (/params/layer_1/bias): dataset "
        "/params/layer_1/bias was allocated when created (HDF5 early allocation) and holds "
        "nothing but its fill value: it was never written."
    )


def test_load_params_lists_and_reads_the_same_trees_with_libhdf5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = dense(tmp_path)
    params, state = juliabridge.load_params(root / "weights.h5")
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    params_lib, state_lib = juliabridge.load_params(root / "weights.h5")
    assert state == state_lib == {}
    with h5py.File(root / "weights.h5") as f:
        for name in ("weight", "bias"):
            want = f[f"/params/layer_1/{name}"][()]
            np.testing.assert_array_equal(np.asarray(params["layer_1"][name]), want)
            np.testing.assert_array_equal(np.asarray(params_lib["layer_1"][name]), want)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_a_module_file_read_in_short_pieces_loads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read may return fewer bytes than asked (POSIX; network filesystems do): one byte at a
    # time, the module text must still be read whole, so its checksum matches (spec §1).
    root = dense(tmp_path)
    module = str(root / "model.mlir")
    real = os.preadv
    short = []

    def one_byte(fd: int, buffers: Any, offset: int, *rest: Any) -> int:
        if os.readlink(f"/proc/self/fd/{fd}") == module:
            short.append(offset)
            return real(fd, [memoryview(buffers[0])[:1]], offset)
        return real(fd, buffers, offset, *rest)

    monkeypatch.setattr(os, "preadv", one_byte)
    model = juliabridge.import_lux(root)
    # Every byte of the module came through a one-byte read (else this tested nothing).
    assert len(short) >= os.path.getsize(module)
    x = np.ones((4, 2), np.float32)
    np.testing.assert_allclose(np.asarray(model(x)), expected_output(root, x), rtol=1e-6)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_a_failing_disk_under_the_module_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = dense(tmp_path)
    _on_reads_of(monkeypatch, root / "model.mlir", _eio)
    with pytest.raises(BundleError) as e:
        juliabridge.import_lux(root)
    assert type(e.value) is BundleError
    assert (
        str(e.value) == f"{root / 'model.mlir'}: cannot read the module file (Input/output error)"
    )


def _not_numbers(tmp_path: Path) -> Path:
    """A weights file whose /params/a holds strings (spec §4: datasets hold numbers)."""
    path = tmp_path / "strings.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("/params/a", data=np.array([b"abc"])).attrs["dtype"] = "f32"
    return path


@pytest.mark.parametrize("isolated", ["1", "0"], ids=["own-process", "this-process"])
def test_libhdf5_refusals_name_the_file_in_either_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated: str
) -> None:
    # JULIABRIDGE_HDF5_FASTPATH=0 sends every file to libhdf5: in a process of its own by
    # default, in this one with JULIABRIDGE_HDF5_WORKER=0. A refusal names the file either way.
    from juliabridge import SignatureMismatchError
    from juliabridge.bundle.weights import _worker, open_weights

    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    monkeypatch.setenv("JULIABRIDGE_HDF5_WORKER", isolated)
    try:
        root = dense(tmp_path)
        with open_weights(root / "weights.h5") as reader:
            assert reader.mode == ("process" if isolated == "1" else "in-process")
            assert reader.isolated is (isolated == "1")
        strings = _not_numbers(tmp_path)
        with pytest.raises(SignatureMismatchError) as e:
            juliabridge.load_params(strings)
        assert str(e.value) == (
            f"{strings}: dataset /params/a is stored as |S3, expected numbers. The weights file "
            "does not belong to this manifest; re-export the bundle"
        )
        (root / "weights.h5").write_bytes(b"not an HDF5 file " * 16)
        reseal(root)
        with pytest.raises(BundleError) as e2:
            juliabridge.import_lux(root)
        assert type(e2.value) is BundleError
        assert str(e2.value).startswith(
            f"{root / 'weights.h5'}: not a readable HDF5 file (OSError: Unable to synchronously "
            "open file (file signature not found)). The file is corrupt or truncated"
        )
    finally:
        _worker.stop_idle()


def test_a_listing_refused_by_the_python_reader_names_the_file(tmp_path: Path) -> None:
    from juliabridge import SignatureMismatchError

    strings = _not_numbers(tmp_path)
    with pytest.raises(SignatureMismatchError) as e:
        juliabridge.load_params(strings)
    assert str(e.value) == (
        f"{strings}: dataset /params/a is stored as |S3, expected numbers. The weights file "
        "does not belong to this manifest; re-export the bundle"
    )


def test_no_libhdf5_process_to_start_warns_at_the_caller_and_reads_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where no process can be started (no interpreter, process limit), libhdf5 runs in this
    # process instead, with a warning that points at the code that asked for the weights.
    import contextlib
    import sys
    import warnings

    from juliabridge.bundle.weights import _worker

    package = os.path.dirname(os.path.abspath(juliabridge.__file__)) + os.sep
    callers = []

    def cannot_start(*args: Any, **kwargs: Any) -> Any:
        # The first frame above the one starting the process that is neither juliabridge's
        # nor contextlib's: where the warning must point.
        frame = sys._getframe(1)
        while os.path.abspath(frame.f_code.co_filename).startswith(package) or (
            frame.f_code.co_filename == contextlib.__file__
        ):
            frame = frame.f_back  # type: ignore[assignment]
        callers.append((frame.f_code.co_filename, frame.f_lineno))
        raise OSError("Resource temporarily unavailable")

    root = dense(tmp_path)
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    monkeypatch.setenv("JULIABRIDGE_HDF5_WORKER", "1")
    monkeypatch.setattr(_worker, "WorkerReader", cannot_start)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        params, _ = juliabridge.load_params(root / "weights.h5")
    assert [w.category for w in caught] == [RuntimeWarning]
    assert [(w.filename, w.lineno) for w in caught] == callers
    if "MUTANT_UNDER_TEST" not in os.environ:  # under mutmut, its trampolines are frames too
        assert caught[0].filename == __file__
    assert str(caught[0].message) == (
        "juliabridge could not start its HDF5 reader process (Resource temporarily "
        f"unavailable); reading {root / 'weights.h5'} in this process instead (set "
        "JULIABRIDGE_HDF5_WORKER=0 to do so without this warning)"
    )
    with h5py.File(root / "weights.h5") as f:
        want = f["/params/layer_1/weight"][()]
    np.testing.assert_array_equal(np.asarray(params["layer_1"]["weight"]), want)


def test_a_weights_file_changed_under_its_recorded_digest_names_both_digests(
    tmp_path: Path,
) -> None:
    import hashlib

    root = dense(tmp_path)
    recorded = manifest(root)["weights"]["sha256"]
    with h5py.File(root / "weights.h5", "a") as f:
        f["/params/layer_1/bias"][0] += 1  # same structure, another value: only the digest sees it
    got = hashlib.sha256((root / "weights.h5").read_bytes()).hexdigest()
    with pytest.raises(ChecksumError) as e:
        juliabridge.import_lux(root)
    assert str(e.value) == (
        f"{root / 'weights.h5'}: sha256 is {got} but manifest.json records {recorded}; the file "
        "was modified or corrupted. Re-export the bundle, or pass verify_checksums=False if you "
        "changed it on purpose."
    )


def _on_reads_of(monkeypatch: pytest.MonkeyPatch, path: Path, trouble: Any) -> None:
    """Make os.preadv of a descriptor of `path` call `trouble(fd)` first (Linux: /proc)."""
    real = os.preadv

    def preadv(fd: int, buffers: Any, offset: int, *rest: Any) -> int:
        if os.readlink(f"/proc/self/fd/{fd}") == str(path):
            trouble(fd)
        return real(fd, buffers, offset, *rest)

    monkeypatch.setattr(os, "preadv", preadv)


def _eio(fd: int) -> None:
    import errno

    raise OSError(errno.EIO, os.strerror(errno.EIO))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_a_failing_disk_under_the_weights_is_a_bundle_error_on_either_reader(
    tmp_path: Path, fast: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # EIO while the weights are read: the Python reader reads and hashes in one pass, libhdf5's
    # route hashes the whole file first (spec §1); either way the file and the cause are named.
    root = dense(tmp_path)
    _on_reads_of(monkeypatch, root / "weights.h5", _eio)
    with pytest.raises(BundleError) as e:
        juliabridge.import_lux(root)
    assert type(e.value) is BundleError
    tail = "; check the disk" if fast == "1" else ""
    assert str(e.value) == f"{root / 'weights.h5'}: cannot read the file (Input/output error){tail}"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_a_weights_file_truncated_while_it_is_hashed_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # libhdf5's route hashes the whole file before it parses any of it; a racing writer that
    # truncates the file then leaves fewer bytes than were there when it was opened.
    root = dense(tmp_path)
    size = (root / "weights.h5").stat().st_size
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")
    _on_reads_of(monkeypatch, root / "weights.h5", lambda fd: os.truncate(root / "weights.h5", 0))
    with pytest.raises(BundleError) as e:
        juliabridge.import_lux(root)
    assert type(e.value) is BundleError
    assert str(e.value) == (
        f"{root / 'weights.h5'}: the file ended while reading {size} bytes at offset 0 (truncated "
        "or changed while loading?). The file is corrupt or truncated; download or export the "
        "bundle again"
    )


def test_a_dataset_never_written_is_refused_when_listed_on_either_reader(
    tmp_path: Path, fast: str
) -> None:
    # A contiguous dataset created without data has no storage at all (HDF5 late allocation):
    # load_params lists it, and refuses it before any read (spec §4: writers write every one).
    path = tmp_path / "late.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("/params/a", shape=(1000,), dtype=np.float32).attrs["dtype"] = "f32"
    with pytest.raises(BundleError) as e:
        juliabridge.load_params(path)
    assert type(e.value) is BundleError
    assert str(e.value) == (
        f"{path}: dataset /params/a has no data stored for some or all of its 4000 bytes, so "
        "reading it would only produce HDF5 fill values; the file was not written completely "
        "(or claims an array it does not hold). Re-export the bundle (JuliaBridge.export_lux and "
        "juliabridge.save_params write complete, inline datasets)"
    )


@pytest.mark.skipif(not Path("/proc/meminfo").is_file(), reason="needs /proc (Linux)")
def test_the_memory_datasets_are_checked_against_is_the_kernels_total() -> None:
    # The refusal of a dataset larger than the machine's memory compares with MemTotal.
    from juliabridge.bundle.weights import memory

    with open("/proc/meminfo") as f:
        line = next(x for x in f if x.startswith("MemTotal:"))
    assert line.split()[2] == "kB"
    assert memory.physical_memory() == int(line.split()[1]) * 1024


# --- manifest rules (spec §3), as the refusal names the entry that breaks one -----------------

# The bundles here name producer.tool "pinned-tests", neither JuliaBridge nor juliabridge's
# writer, so the advice is to have that tool follow the spec (not JuliaBridge.export_lux).
_ADVICE = (
    ". The manifest does not follow docs/bundle-format.md: fix the entry named above, or have "
    "the tool that wrote it ('pinned-tests') follow the spec."
)


def _examples_without_inputs(m: dict[str, Any]) -> None:
    ref = {"result": 0, "dataset": "/params/layer_1/bias"}
    m["examples"] = {"inputs": [], "outputs": [ref], "rtol": 1e-4, "atol": 1e-5}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda m: m.pop("name"),
            "top level: missing required key 'name'",
        ),
        (
            lambda m: m.pop("format_version"),  # read before the rest: it picks the schema
            "top level: missing required key 'format_version'",
        ),
        (
            lambda m: m.__setitem__("format_version", 0),
            "format_version: expected 1, 2 or 3, found 0",
        ),
        (
            lambda m: m["arguments"][1].__setitem__("index", 5),
            "arguments[1]: index is 5 but the entry is number 1; entries must be in @main order",
        ),
        (
            lambda m: m["results"][0].__setitem__("index", 3),
            "results[0]: index is 3 but the entry is number 0; entries must be in @main order",
        ),
        (
            lambda m: m["arguments"][2].__setitem__("dataset", "/params/layer_1/weight"),
            "arguments[2].dataset: /params/layer_1/weight is also used by arguments[1].dataset; "
            "each dataset holds one value",
        ),
        (
            lambda m: m.__setitem__("aliases", [{"path": ["output"], "argument": 1}]),
            "aliases[0].path: output path ['output'] is also given by results[0].paths[0]; each "
            "output path appears once",
        ),
        (
            _examples_without_inputs,
            "examples.inputs: no value for input argument(s) [0]; the examples give every input",
        ),
    ],
    ids=[
        "name",
        "no-version",
        "version",
        "argument-order",
        "result-order",
        "dataset",
        "alias",
        "examples",
    ],
)
def test_a_manifest_rule_broken_names_the_entry(tmp_path: Path, change: Any, message: str) -> None:
    root = edit(dense(tmp_path), change)
    with pytest.raises(ManifestError) as e:
        juliabridge.import_lux(root)
    assert str(e.value) == f"{root / 'manifest.json'}: {message}{_ADVICE}"


def test_a_newer_format_version_names_the_readable_ones(tmp_path: Path) -> None:
    from juliabridge import BundleVersionError

    root = edit(dense(tmp_path), lambda m: m.__setitem__("format_version", 9))
    with pytest.raises(BundleVersionError) as e:
        juliabridge.import_lux(root)
    assert str(e.value) == (
        f"{root / 'manifest.json'}: format_version 9 is newer than this juliabridge reads "
        "(1, 2, 3); upgrade juliabridge (pip install -U juliabridge)"
    )


# --- manifest rules checked on the decoded object (parse_manifest), each message whole ---------


def _dense_manifest(tmp_path: Path, version: int = 1) -> dict[str, Any]:
    """The dense bundle's manifest; version 2 adds what format 2 requires (spec §3)."""
    import json

    m: dict[str, Any] = json.loads((dense(tmp_path) / "manifest.json").read_text())
    if version == 2:
        m["format_version"] = 2
        m["weights"].pop("sha256")
        for a in m["arguments"]:
            if a.get("dataset"):
                a["sha256"] = "0" * 64
    return m


def _refusal(m: dict[str, Any]) -> str:
    from juliabridge.bundle.manifest import parse_manifest

    with pytest.raises(ManifestError) as e:
        parse_manifest(m)
    return str(e.value)


def _with_state(m: dict[str, Any]) -> dict[str, Any]:
    """Argument 2 (the bias, f32 [3]) made a state leaf at ["layer_1", "count"]."""
    m["arguments"][2].update(role="state", path=["layer_1", "count"], dataset="/state/count")
    return m


def _rule(where: str, message: str) -> str:
    # parse_manifest's own text: load_manifest adds the file's path and the advice.
    return f"manifest.json: {where}: {message}"


def test_a_leaf_that_is_also_a_container_is_named_with_its_child(tmp_path: Path) -> None:
    m = _dense_manifest(tmp_path)
    m["arguments"][2]["path"] = ["layer_1", "weight", "inner"]
    assert _refusal(m) == _rule(
        "parameter",
        "path ['layer_1', 'weight'] is a leaf but ['layer_1', 'weight', 'inner'] continues below "
        "it; a leaf cannot also be a container",
    )


def test_mixed_integer_and_name_steps_below_one_parent_are_refused(tmp_path: Path) -> None:
    m = _dense_manifest(tmp_path)
    m["arguments"][2]["path"] = ["layer_1", 1]
    assert _refusal(m) == _rule(
        "parameter",
        "below ['layer_1'] some path steps are integers and some are names; a Julia container "
        "is either a Tuple/Array (integer steps) or a NamedTuple, struct or Dict (names), never "
        "both",
    )


def test_a_returned_state_leaf_keeps_its_shape_and_dtype(tmp_path: Path) -> None:
    m = _with_state(_dense_manifest(tmp_path))
    m["results"].append(
        {"index": 1, "paths": [["state", "layer_1", "count"]], "dtype": "f32", "shape": [4]}
    )
    assert _refusal(m) == _rule(
        "results[1].paths[0]",
        "returns f32 [4] for state.layer_1.count, which is f32 [3]; a state leaf keeps its "
        "shape and dtype",
    )


def test_static_state_paths_are_parsed_and_checked(tmp_path: Path) -> None:
    from juliabridge.bundle.manifest import parse_manifest

    m = _with_state(_dense_manifest(tmp_path, version=2))
    leaf = {"path": ["layer_1", "rng"], "value": 3, "julia_type": "Int64"}
    m["static_state"] = [leaf]
    parsed = parse_manifest(m)
    assert [(s.path, s.value, s.julia_type) for s in parsed.static_state] == [
        (("layer_1", "rng"), 3, "Int64")
    ]
    m["static_state"] = [leaf, dict(leaf)]
    assert _refusal(m) == _rule(
        "static_state", "a path appears twice; each state leaf is listed once"
    )
    m["static_state"] = [dict(leaf, path=["layer_1"])]
    assert _refusal(m) == _rule(
        "static_state[0].path",
        "['layer_1'] is above the state argument(s) below it; a leaf cannot also be a container",
    )
    m["static_state"] = [dict(leaf, path=["layer_1", "count", "x"])]
    assert _refusal(m) == _rule(
        "static_state[0].path",
        "['layer_1', 'count', 'x'] is below the state argument ['layer_1', 'count']; a leaf "
        "cannot also be a container",
    )


def test_an_echo_of_an_argument_needs_one_and_the_only_one_may_be_echoed(tmp_path: Path) -> None:
    from juliabridge.bundle.manifest import parse_manifest

    m = _dense_manifest(tmp_path, version=2)  # echo_of is format 2's
    m["arguments"] = m["arguments"][:1]
    m["results"] = [dict(m["results"][0], shape=[4, 2], echo_of=0)]
    assert parse_manifest(m).results[0].echo_of == 0  # @main has one argument: index 0 is fine
    m["arguments"] = []
    m.pop("batch")
    assert _refusal(m) == _rule("results[0].echo_of", "refers to an argument but @main has none")


def test_aliases_and_examples_of_arguments_are_named_when_main_has_none(tmp_path: Path) -> None:
    m = _dense_manifest(tmp_path)
    m["arguments"] = []
    m.pop("batch")
    m["aliases"] = [{"path": ["output"], "argument": 0}]
    assert _refusal(m) == _rule("aliases[0]", "refers to an argument but @main has none")
    m["aliases"] = []
    m["examples"] = {
        "inputs": [{"argument": 0, "dataset": "/examples/x"}],
        "outputs": [{"result": 0, "dataset": "/examples/y"}],
    }
    assert _refusal(m) == _rule(
        "examples.inputs[0].argument", "refers to a argument but @main has none"
    )


def test_example_tolerances_given_are_kept_and_defaults_follow_the_dtypes(tmp_path: Path) -> None:
    from juliabridge.bundle.manifest import default_tolerances, parse_manifest

    m = _dense_manifest(tmp_path)
    m["examples"] = {
        "inputs": [{"argument": 0, "dataset": "/examples/x"}],
        "outputs": [{"result": 0, "dataset": "/examples/y"}],
        "rtol": 0.25,
        "atol": 0.125,
    }
    ex = parse_manifest(m).examples
    assert ex is not None and (ex.rtol, ex.atol) == (0.25, 0.125)
    m["examples"].update(rtol=None, atol=None)
    ex = parse_manifest(m).examples
    assert ex is not None and (ex.rtol, ex.atol) == (1e-4, 1e-5)  # an f32 output, spec §3.7
    assert default_tolerances(["f64"]) == (1e-10, 1e-12)
    assert default_tolerances(["complex<f64>", "i32"]) == (1e-10, 1e-12)
    assert default_tolerances(["i32", "i1"]) == (0.0, 0.0)
    assert default_tolerances(["f64", "bf16"]) == (1e-2, 1e-3)


def test_the_module_artifact_entry_is_parsed(tmp_path: Path) -> None:
    from juliabridge.bundle.manifest import parse_manifest

    m = _dense_manifest(tmp_path, version=2)
    art = {"file": "model.mlirbc", "sha256": "1" * 64, "stablehlo_version": "1.17.0"}
    m["module"]["artifact"] = dict(art, target="1.17.0")
    ref = parse_manifest(m).module.artifact
    assert ref is not None
    assert (ref.file, ref.sha256, ref.stablehlo_version, ref.target) == (
        "model.mlirbc",
        "1" * 64,
        "1.17.0",
        "1.17.0",
    )


def test_manifest_files_that_are_not_manifests_are_named(tmp_path: Path) -> None:
    from juliabridge.bundle.manifest import MAX_MANIFEST_BYTES

    root = dense(tmp_path)
    path = root / "manifest.json"
    text = path.read_text()
    path.write_text(text.replace('"batch_axis": 0', '"batch_axis": NaN', 1))
    with pytest.raises(ManifestError) as e:
        juliabridge.import_lux(root)
    assert str(e.value) == f"{path}: not strict JSON: NaN is not a JSON number"
    path.write_text(text + " " * MAX_MANIFEST_BYTES)
    with pytest.raises(ManifestError) as e:
        juliabridge.import_lux(root)
    assert str(e.value) == (
        f"{path}: larger than the 64 MiB manifest limit; a manifest describes arrays, it does "
        "not hold them, so this is not a juliabridge manifest"
    )


def test_dataset_digest_defaults_to_blake3_and_names_the_algorithms() -> None:
    # Format 3's digest (spec §4.1) is what writers record when no algorithm is named.
    import blake3

    from juliabridge.bundle.files.digest import dataset_digest

    value = np.array([[1.0, 2.0]], np.float32)
    assert dataset_digest(value, "f32") == blake3.blake3(value.tobytes()).hexdigest()
    with pytest.raises(BundleError) as e:
        dataset_digest(value, "f32", "sha1")
    assert str(e.value) == "unknown dataset digest algorithm 'sha1'; expected one of sha256, blake3"


def test_a_bundles_vjp_module_is_held_to_the_policy_unless_trusted(tmp_path: Path) -> None:
    # Bundle.vjp_module parses the stored VJP module only when asked; by default under the same
    # policy as the forward module (a custom call outside the allowlist is refused).
    from juliabridge.bundle import open_bundle
    from juliabridge.bundle.files.checksum import sha256_file
    from tests.bundle_factory import edit_manifest, make_dense_bn

    root = make_dense_bn(tmp_path / "b.bundle")
    (root / "vjp.mlir").write_text(
        "module @vjp {\n  func.func public @main(%arg0: tensor<3xf32>) -> tensor<3xf32> {\n"
        '    %0 = stablehlo.custom_call @tpu_custom_call(%arg0) {backend_config = "x"} : '
        "(tensor<3xf32>) -> tensor<3xf32>\n    return %0 : tensor<3xf32>\n  }\n}\n"
    )
    vjp = {"file": "vjp.mlir", "sha256": sha256_file(root / "vjp.mlir")}
    edit_manifest(root, lambda m: m.update(vjp=vjp))
    bundle = open_bundle(root)
    assert bundle.vjp_source == "text"
    with pytest.raises(juliabridge.UnsupportedModuleError, match="tpu_custom_call"):
        bundle.vjp_module()
    module = bundle.vjp_module(trust=True)
    assert module is not None and "tpu_custom_call" in module.custom_calls


def test_a_module_text_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    # Its digest recorded (so the checksum passes): the text is refused as text, naming it.
    from tests.bundle_factory import make_dense_bn

    root = make_dense_bn(tmp_path / "b.bundle", portable_artifact=False)
    (root / "model.mlir").write_bytes(b"module @m {\xff\xfe}")
    reseal(root)
    with pytest.raises(juliabridge.MLIRParseError) as e:
        juliabridge.import_lux(root)
    assert str(e.value).startswith(f"{root.resolve() / 'model.mlir'}: not UTF-8 text (")


def test_a_manifest_argument_of_another_type_is_refused_naming_both(tmp_path: Path) -> None:
    from tests.bundle_factory import edit_manifest, make_dense_bn

    root = make_dense_bn(tmp_path / "b.bundle", portable_artifact=False)
    edit_manifest(root, lambda m: m["arguments"][3].update(shape=[4], julia_shape=[4]))
    with pytest.raises(juliabridge.SignatureMismatchError) as e:
        juliabridge.import_lux(root)
    assert str(e.value) == (
        f"{root.resolve() / 'model.mlir'}: @main argument 3 (params.layer_2.scale) is "
        "tensor<3xf32> but the manifest says tensor<4xf32>; the manifest does not belong to "
        "this module. Export or download the bundle again"
    )


@pytest.mark.parametrize("fastpath", ["1", "0"])
def test_weights_read_without_verification_are_the_values_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fastpath: str
) -> None:
    # verify_checksums=False skips format 3's per-dataset digests: the read neither hashes
    # against a digest it was not given nor fails, on the Python reader's route and libhdf5's.
    from juliabridge.bundle import open_bundle
    from juliabridge.bundle.write.upgrade import upgrade_bundle

    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", fastpath)
    root = dense(tmp_path)
    upgrade_bundle(root)  # format 3: a blake3 digest per dataset
    got = {a.dataset: arr for a, arr in open_bundle(root, verify_checksums=False).read_weights()}
    with h5py.File(root / "weights.h5") as f:
        stored = {name: f[name][()] for name in got}
    assert set(got) == {"/params/layer_1/weight", "/params/layer_1/bias"}
    for name, arr in got.items():
        np.testing.assert_array_equal(np.asarray(arr), stored[name])


@pytest.mark.parametrize("over", [0, 1])
def test_a_weights_file_may_take_twice_its_named_datasets_plus_64_mib(
    tmp_path: Path, over: int
) -> None:
    # Spec (docs/bundle-format.md): at most 2 x the bytes of every dataset the manifest names
    # (parameters, states and examples) + 64 MiB; one byte more is refused before hashing.
    from juliabridge.bundle import open_bundle

    spec, fn = dense_spec()
    spec.example_outputs = {0: np.asarray(fn(*[a.value for a in spec.args]), np.float32)}
    root = write(tmp_path / "ex.bundle", spec)
    weights = root / "weights.h5"
    with h5py.File(weights) as f:
        named: list[int] = []
        f.visititems(lambda _, obj: named.append(obj.nbytes) if hasattr(obj, "nbytes") else None)
    assert len(named) == 4  # w, b, the example input and the example output
    limit = 2 * sum(named) + (64 << 20)
    try:
        os.truncate(weights, limit + over)  # a hole: no disk space
    except OSError as e:
        pytest.skip(f"this file system has no sparse files ({e})")
    if not over:
        open_bundle(root, verify_checksums=False)
        return
    with pytest.raises(BundleError) as e:
        open_bundle(root, verify_checksums=False)
    assert str(e.value) == (
        f"{weights}: the file is {limit + 1} bytes but the datasets manifest.json names take "
        f"{sum(named)} bytes; juliabridge accepts at most 2 times that plus 64 MiB (HDF5's own "
        "metadata is small), so the file is padded, sparse or not this bundle's. Export or "
        "download the bundle again"
    )


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("model.mlir", "; for a bare StableHLO module use juliabridge.load_mlir"),
        ("w.hdf5", "; this looks like a weights file: pass the bundle directory that holds it"),
        ("b.tar.gz", "; unpack the archive and pass the bundle directory inside it"),
        ("b.zip", "; unpack the archive and pass the bundle directory inside it"),
        ("notes.txt", "; pass the directory that holds manifest.json"),
    ],
)
def test_a_file_given_for_a_bundle_is_refused_with_what_to_pass(
    tmp_path: Path, name: str, hint: str
) -> None:
    from juliabridge.bundle import open_bundle

    path = tmp_path / name
    path.write_bytes(b"x")
    with pytest.raises(BundleError) as e:
        open_bundle(path)
    assert str(e.value) == (
        f"{path}: expected a bundle directory (holding manifest.json, the module and the "
        f"weights), found a file{hint}"
    )


def test_a_folder_without_a_manifest_is_not_a_bundle(tmp_path: Path) -> None:
    from juliabridge.bundle import open_bundle

    (tmp_path / "notes").mkdir()  # a folder, but no bundle inside it either
    with pytest.raises(BundleError) as e:
        open_bundle(tmp_path)
    assert str(e.value) == (
        f"{tmp_path}: no manifest.json in this directory, so it is not a juliabridge bundle "
        "(a bundle holds manifest.json, model.mlir and weights.h5)"
    )
