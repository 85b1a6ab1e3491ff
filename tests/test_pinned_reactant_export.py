"""Export directories without the ../shared fixtures: the npz read without pickle and within
bounds (reactant_export/npz.py), the directory's files (directory.py), the results' split and
its overrides (luxmap.py), import and conversion (luxmodel.py, convert.py) and the .py's
placements (sharding.py).

Modules are lowered here from numpy-checkable functions and directories written by
tests/reactant_export_writer.py; expected values are numpy's or written out.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import juliabridge
from juliabridge.errors import (
    BackendUnavailableError,
    BundleError,
    CallArgumentError,
    ManifestError,
    SignatureMismatchError,
    UnsafeBundleError,
    UnsupportedModuleError,
)
from juliabridge.examples import luxmodels
from juliabridge.lux.options import LoadOptions
from juliabridge.reactant_export import npz as npz_mod
from juliabridge.reactant_export.convert import convert_export
from juliabridge.reactant_export.directory import is_export_dir, open_export
from juliabridge.reactant_export.luxmodel import export_bundle, import_export_lux
from juliabridge.stablehlo import TensorSpec
from tests.pinned_support import lower
from tests.reactant_export_writer import ArgInfo, Export, write_export
from tests.test_reactant_export import write_lux_export

X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
W = np.array([0.5, -1.0, 2.0], np.float32)


def _scale(x: Any, w: Any) -> tuple[Any, ...]:
    # export_to_enzymejax's layout: the result, then every argument returned unchanged.
    return x * w, x, w


def _export(
    tmp: Path, fn: Any = _scale, values: tuple[np.ndarray, ...] = (X, W), **kw: Any
) -> Path:
    # f(x, ps) with ps a one-field struct: x is arg.1, ps's arrays arg.2.1, arg.3.1, ...
    paths = [[1]] + [[i + 1, 1] for i in range(1, len(values))]
    args = [
        ArgInfo(p, v, **kw.get("sharding", {}).get(i, {}))
        for i, (p, v) in enumerate(zip(paths, values))
    ]
    npz = kw.get("npz", True)
    write_export(tmp, Export(kw.get("name", "f"), lower(fn, *values), args, npz))
    return tmp


# --- npz ---------------------------------------------------------------------------------


def _npz(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _npy(arr: np.ndarray, version: tuple[int, int] | None = (1, 0)) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version)
    return buf.getvalue()


def _spec(a: np.ndarray) -> TensorSpec:
    tags = {"float32": "f32", "float64": "f64", "int64": "i64", "bool": "i1", "int8": "i8"}
    return TensorSpec(a.shape, tags[a.dtype.name])


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npz_values_every_header_version(tmp_path: Path, version: tuple[int, int]) -> None:
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    b = np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3))  # fortran_order: True
    c = np.array(True)
    path = _npz(
        tmp_path / "x.npz",
        {
            "arr_1.npy": _npy(a, version),
            "arr_2.npy": _npy(b, version),
            "arr_3.npy": _npy(c, version),
        },
    )
    got = npz_mod.read_inputs(path, ["arr_1", "arr_2", "arr_3"], [_spec(a), _spec(b), _spec(c)])
    for g, w in zip(got, (a, b, c)):
        assert g.dtype == w.dtype and g.shape == w.shape and g.flags.c_contiguous
        np.testing.assert_array_equal(g, w)


def test_npz_other_byte_order_read_as_native(tmp_path: Path) -> None:
    a = np.arange(4, dtype=">f4")
    path = _npz(tmp_path / "x.npz", {"arr_1.npy": _npy(a)})
    (got,) = npz_mod.read_inputs(path, ["arr_1"], [TensorSpec((4,), "f32")])
    assert got.dtype == np.dtype("float32")
    np.testing.assert_array_equal(got, [0, 1, 2, 3])


def test_npz_unknown_header_version(tmp_path: Path) -> None:
    data = bytearray(_npy(np.zeros(2, np.float32)))
    data[6:8] = b"\x04\x00"
    path = _npz(tmp_path / "x.npz", {"arr_1.npy": bytes(data)})
    with pytest.raises(
        BundleError,
        match=r"x\.npz \(arr_1\.npy\): not a readable \.npy header \(unknown \.npy version \(4, 0\)\)",
    ):
        npz_mod.read_inputs(path, ["arr_1"], [TensorSpec((2,), "f32")])


def test_npz_oversized_header(tmp_path: Path) -> None:
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }" + b" " * 20000 + b"\n"
    data = b"\x93NUMPY\x02\x00" + len(header).to_bytes(4, "little") + header + b"\0" * 8
    path = _npz(tmp_path / "x.npz", {"arr_1.npy": data})
    with pytest.raises(BundleError, match=r"\(arr_1\.npy\): not a readable \.npy header"):
        npz_mod.read_inputs(path, ["arr_1"], [TensorSpec((2,), "f32")])


@pytest.mark.parametrize("dtype", [np.dtype([("a", "<f4"), ("b", "<f4")]), np.dtype(object)])
def test_npz_records_and_objects_are_unsafe(tmp_path: Path, dtype: np.dtype) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (2,)}
    buf = bytearray(b"\x93NUMPY\x01\x00")
    h = repr(header).encode()
    h += b" " * (63 - (len(buf) + 2 + len(h)) % 64) + b"\n"
    buf += len(h).to_bytes(2, "little") + h + b"\0" * 16
    path = _npz(tmp_path / "x.npz", {"arr_1.npy": bytes(buf)})
    with pytest.raises(
        UnsafeBundleError,
        match=r"x\.npz \(arr_1\.npy\): dtype .* holds Python objects \(a pickle\) or records",
    ):
        npz_mod.read_inputs(path, ["arr_1"], [TensorSpec((2,), "f32")])


def test_npz_member_disagreeing_with_spec(tmp_path: Path) -> None:
    path = _npz(tmp_path / "x.npz", {"arr_1.npy": _npy(np.zeros((2, 4), np.float32))})
    with pytest.raises(
        BundleError,
        match=r"\(arr_1\.npy\): holds float32 \[2, 4\] but the \.py and @main say "
        r"tensor<2x3xf32> \(float32\); the npz does not belong to this export",
    ):
        npz_mod.read_inputs(path, ["arr_1"], [TensorSpec((2, 3), "f32")])
    path = _npz(tmp_path / "y.npz", {"arr_1.npy": _npy(np.zeros((2, 3), np.float64))})
    with pytest.raises(BundleError, match=r"holds float64 \[2, 3\]"):
        npz_mod.read_inputs(path, ["arr_1"], [TensorSpec((2, 3), "f32")])


def test_npz_member_with_too_little_or_too_much_data(tmp_path: Path) -> None:
    # A header declaring 400 bytes in a member of 136: refused before reading; 4 bytes short of
    # the declared size, or one byte over it, refused after reading exactly the declared size.
    big = _npy(np.arange(100, dtype=np.float32))
    path = _npz(tmp_path / "w.npz", {"arr_1.npy": big[:136]})
    with pytest.raises(
        BundleError,
        match=r"\(arr_1\.npy\): its header declares 400 bytes of data but the member holds only "
        r"136 bytes; the npz is truncated or forged",
    ):
        npz_mod.read_inputs(path, ["arr_1"], [TensorSpec((100,), "f32")])
    path = _npz(tmp_path / "v.npz", {"arr_1.npy": big[:-4]})
    with pytest.raises(BundleError, match=r"expected 400 bytes of data after the header, found"):
        npz_mod.read_inputs(path, ["arr_1"], [TensorSpec((100,), "f32")])
    full = _npy(np.arange(6, dtype=np.float32))
    path = _npz(tmp_path / "y.npz", {"arr_1.npy": full + b"\0"})
    with pytest.raises(
        BundleError,
        match=r"\(arr_1\.npy\): expected 24 bytes of data after the header, found another size",
    ):
        npz_mod.read_inputs(path, ["arr_1"], [TensorSpec((6,), "f32")])


def test_npz_over_the_array_limit(tmp_path: Path) -> None:
    # 2**36 float32 elements: 256 GiB exactly is allowed by the limit, one element more is not.
    header = {"descr": "<f4", "fortran_order": False, "shape": (1 << 36, 1)}
    buf = bytearray(b"\x93NUMPY\x01\x00")
    h = repr(header).encode()
    h += b" " * (63 - (len(buf) + 2 + len(h)) % 64) + b"\n"
    buf += len(h).to_bytes(2, "little") + h
    path = _npz(tmp_path / "x.npz", {"arr_1.npy": bytes(buf)})
    with pytest.raises(
        BundleError, match=r"declares 274877906944 bytes of data but the member holds"
    ):
        npz_mod._read_member(
            zipfile.ZipFile(path),
            zipfile.ZipFile(path).infolist()[0],
            TensorSpec((1 << 36, 1), "f32"),
            path,
            "arr_1",
        )
    header["shape"] = ((1 << 36) + 1, 1)
    h = repr(header).encode()
    h += b" " * (63 - (8 + 2 + len(h)) % 64) + b"\n"
    path = _npz(
        tmp_path / "y.npz", {"arr_1.npy": b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h}
    )
    with pytest.raises(
        BundleError, match=r"\(arr_1\.npy\): declares 274877906948 bytes, over the 256 GiB limit"
    ):
        npz_mod._read_member(
            zipfile.ZipFile(path),
            zipfile.ZipFile(path).infolist()[0],
            TensorSpec(((1 << 36) + 1, 1), "f32"),
            path,
            "arr_1",
        )


def test_npz_members_must_be_the_expected_ones(tmp_path: Path) -> None:
    one = _npy(np.zeros(2, np.float32))
    spec = TensorSpec((2,), "f32")
    path = _npz(tmp_path / "x.npz", {"arr_1.npy": one, "evil.txt": b"x"})
    with pytest.raises(
        BundleError,
        match=r"x\.npz: unexpected member 'evil\.txt'; Reactant writes exactly arr_1\.npy$",
    ):
        npz_mod.read_inputs(path, ["arr_1"], [spec])
    keys = [f"arr_{i}" for i in range(1, 7)]
    path = _npz(tmp_path / "y.npz", {"arr_9.npy": one})
    with pytest.raises(
        BundleError,
        match=r"unexpected member 'arr_9\.npy'; Reactant writes exactly arr_1\.npy, arr_2\.npy, arr_3\.npy, arr_4\.npy, \.\.\.$",
    ):
        npz_mod.read_inputs(path, keys, [spec] * 6)
    path = _npz(tmp_path / "z.npz", {"arr_1": one})
    with pytest.raises(BundleError, match=r"unexpected member 'arr_1'"):
        npz_mod.read_inputs(path, ["arr_1"], [spec])
    with zipfile.ZipFile(tmp_path / "d.npz", "w") as z:
        z.writestr("arr_1.npy", one)
        with pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr("arr_1.npy", one)
    with pytest.raises(BundleError, match=r"unexpected member 'arr_1\.npy'"):
        npz_mod.read_inputs(tmp_path / "d.npz", ["arr_1"], [spec])
    path = _npz(tmp_path / "m.npz", {"arr_1.npy": one})
    with pytest.raises(
        BundleError, match=r"m\.npz: no arr_2\.npy, which the \.py's load_inputs reads"
    ):
        npz_mod.read_inputs(path, ["arr_1", "arr_2"], [spec, spec])


def test_npz_file_itself(tmp_path: Path) -> None:
    spec = [TensorSpec((2,), "f32")]
    (tmp_path / "x.npz").write_bytes(b"not a zip")
    with pytest.raises(BundleError, match=r"x\.npz: not an npz \(zip\) file \("):
        npz_mod.read_inputs(tmp_path / "x.npz", ["arr_1"], spec)
    with pytest.raises(BundleError, match=r"no\.npz: the inputs npz is missing"):
        npz_mod.read_inputs(tmp_path / "no.npz", ["arr_1"], spec)
    (tmp_path / "dir.npz").mkdir()
    with pytest.raises(UnsafeBundleError, match=r"dir\.npz: is not a regular file"):
        npz_mod.read_inputs(tmp_path / "dir.npz", ["arr_1"], spec)
    real = _npz(tmp_path / "real.npz", {"arr_1.npy": _npy(np.zeros(2, np.float32))})
    os.symlink(real, tmp_path / "link.npz")
    with pytest.raises(
        UnsafeBundleError,
        match=r"link\.npz: is a symlink; an export.s files are read only as regular",
    ):
        npz_mod.read_inputs(tmp_path / "link.npz", ["arr_1"], spec)


def test_npz_total_bounded_by_the_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from juliabridge.bundle.weights import memory

    path = _npz(tmp_path / "x.npz", {"arr_1.npy": _npy(np.zeros(4, np.float32))})
    monkeypatch.setattr(memory, "physical_memory", lambda: 31)
    specs = [TensorSpec((4,), "f32"), TensorSpec((2,), "f64")]
    with pytest.raises(
        BundleError, match=r"x\.npz: the example inputs needs 32 bytes but this machine has 31"
    ):
        npz_mod.read_inputs(path, ["arr_1", "arr_2"], specs)


# --- the directory ----------------------------------------------------------------------------


def test_load_with_default_backend_and_labels(tmp_path: Path) -> None:
    fn = juliabridge.load_reactant_export(_export(tmp_path))
    assert fn.backend_name == "lax"
    y, x, w = fn(X, W)
    np.testing.assert_allclose(np.asarray(y), X * W)
    np.testing.assert_array_equal(np.asarray(x), X)
    np.testing.assert_array_equal(np.asarray(w), W)
    assert fn.arg_labels == ["arg.1", "arg.2.1"]
    ins = fn.example_inputs()
    np.testing.assert_array_equal(ins[0], X)
    np.testing.assert_array_equal(ins[1], W)
    meta = fn.metadata
    assert meta["producer"] == "Reactant.Serialization.export_to_enzymejax"
    assert (meta["function_name"], meta["script"], meta["module"], meta["inputs"]) == (
        "f",
        "f.py",
        "f_0.mlir",
        "f_0_inputs.npz",
    )
    assert meta["arguments"] == [
        {"path": "arg.1", "shape": [2, 3], "dtype": "f32"},
        {"path": "arg.2.1", "shape": [3], "dtype": "f32"},
    ]
    assert meta["meshes"] == {} and meta["shardings"] == {} and meta["backend"] == "lax"


def test_script_found_in_the_directory(tmp_path: Path) -> None:
    d = _export(tmp_path / "a")
    assert open_export(d / "f.py").script.function_name == "f"
    (d / ".hidden.py").write_text("")
    assert open_export(d).root == d
    (d / "g.py").write_text("")
    # A stray .py beside the export: the one with its {fn}_{id}.mlir beside it is the export's.
    assert open_export(d).script.path == d / "f.py"
    (d / "g_3.mlir").write_text("")
    with pytest.raises(
        BundleError,
        match=r"a: expected the one \.py that .* writes, found 2 \(f\.py, g\.py\); pass the path",
    ):
        open_export(d)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match=r"found 0 \(none\)"):
        open_export(tmp_path / "empty")
    with pytest.raises(BundleError, match=r"nothing: not a directory written by Reactant"):
        open_export(tmp_path / "nothing")


def test_module_file_missing_or_a_symlink(tmp_path: Path) -> None:
    d = _export(tmp_path / "a")
    (d / "f_0.mlir").rename(d / "elsewhere.mlir")
    with pytest.raises(
        BundleError, match=r"f_0\.mlir: the module is missing; the \.py f\.py reads it"
    ):
        open_export(d)
    os.symlink(d / "elsewhere.mlir", d / "f_0.mlir")
    with pytest.raises(UnsafeBundleError, match=r"f_0\.mlir: is a symlink"):
        open_export(d)


def test_npz_name_outside_the_directory(tmp_path: Path) -> None:
    d = _export(tmp_path)
    py = d / "f.py"
    py.write_text(py.read_text().replace('"f_0_inputs.npz"', '"/etc/passwd"'))
    with pytest.raises(
        UnsafeBundleError,
        match=r"names the inputs npz '/etc/passwd', which is not a plain file name",
    ):
        open_export(d)


def test_module_refused_unless_trusted(tmp_path: Path) -> None:
    # A custom call outside the allowlist: refused by default, admitted with trust=True.
    text = lower(_scale, X, W).replace(
        "return", "stablehlo.custom_call @evil_kernel() : () -> ()\n    return", 1
    )
    args = [ArgInfo([1], X), ArgInfo([2], W)]
    write_export(tmp_path, Export("f", text, args))
    with pytest.raises(UnsupportedModuleError, match="evil_kernel"):
        open_export(tmp_path)
    with pytest.raises(UnsupportedModuleError, match="evil_kernel"):
        export_bundle(tmp_path)
    assert open_export(tmp_path, trust=True).module.custom_calls == ("evil_kernel",)


def test_arguments_disagreeing_with_main(tmp_path: Path) -> None:
    d = _export(tmp_path)
    write_export(
        tmp_path / "b", Export("f", lower(lambda x: (x,), X), [ArgInfo([1], X), ArgInfo([2], W)])
    )
    with pytest.raises(
        SignatureMismatchError,
        match=r"f\.py: the \.py lists 2 arguments but @main of f_0\.mlir has 1",
    ):
        open_export(tmp_path / "b")
    py = d / "f.py"
    lines = py.read_text().splitlines(keepends=True)
    py.write_text("".join(s.replace("float32", "float64") if "arg2" in s else s for s in lines))
    with pytest.raises(
        SignatureMismatchError,
        match=r"f\.py:\d+: arg2 \(arg\.2\.1\) is tensor<3xf64> in the \.py but tensor<3xf32> in @main of f_0\.mlir",
    ):
        open_export(d)


def test_no_npz_variant(tmp_path: Path) -> None:
    fn = juliabridge.load_reactant_export(_export(tmp_path, npz=False))
    assert not fn.export.has_inputs and fn.metadata["inputs"] is None
    with pytest.raises(BundleError, match=r"f\.py: this export has no inputs npz"):
        fn.example_inputs()
    with pytest.raises(
        BundleError, match="export_data_as_npz=false, so there are no parameter values"
    ):
        juliabridge.import_lux(tmp_path)


def test_is_export_dir(tmp_path: Path) -> None:
    d = _export(tmp_path / "a")
    assert is_export_dir(d) and is_export_dir(d / "f.py") and is_export_dir(str(d))
    assert not is_export_dir(d / "nothing.py") and not is_export_dir(42)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.txt").write_text("")
    assert not is_export_dir(tmp_path / "b")
    (tmp_path / "b" / "manifest.json").write_text("{}")
    (tmp_path / "b" / "x.py").write_text("")
    assert not is_export_dir(tmp_path / "b")
    assert not is_export_dir("bad\0path")


# --- shardings ----------------------------------------------------------------------------


def _sharded(tmp: Path, sizes: tuple[int, ...], spec: tuple[Any, ...]) -> Any:
    names = tuple("xy"[: len(sizes)])
    sh = {0: {"sharding": ("m", sizes, names, spec)}}
    return juliabridge.load_reactant_export(_export(tmp, sharding=sh), backend="lax")


@pytest.mark.multidevice
def test_place_inputs_from_npz_and_given(tmp_path: Path) -> None:
    # Julia dims of X are (3, 2): spec (nothing, :x) puts mesh axis x on the row-major dim 0.
    n = min(2, jax.device_count())
    fn = _sharded(tmp_path, (n,), (None, "x"))
    assert fn.metadata["shardings"] == {
        "arg.1": {"type": "NamedSharding", "mesh": "mesh0", "spec": ["x", None]}
    }
    a, b = fn.place_inputs()
    assert a.sharding.spec == jax.sharding.PartitionSpec("x", None)
    assert len(a.sharding.device_set) == n and a.sharding.mesh.shape == {"x": n}
    np.testing.assert_array_equal(np.asarray(a), X)
    assert isinstance(b, jax.Array) and not isinstance(b.sharding, jax.sharding.NamedSharding)
    np.testing.assert_array_equal(np.asarray(b), W)
    a2, _ = fn.place_inputs([2 * X, W], devices=jax.devices()[:n])
    np.testing.assert_array_equal(np.asarray(a2), 2 * X)
    np.testing.assert_allclose(np.asarray(fn(a2, W)[0]), 2 * X * W)


def test_place_inputs_refusals(tmp_path: Path) -> None:
    fn = _sharded(tmp_path / "a", (1,), (None, "x"))
    with pytest.raises(CallArgumentError, match=r"f\.py: 2 arguments, got 1 arrays"):
        fn.place_inputs([X])
    with pytest.raises(
        CallArgumentError,
        match=r"arg1's PartitionSpec \('x', None\) has more entries than the array's 1 dims",
    ):
        fn.place_inputs([X[0], W])
    fn = _sharded(tmp_path / "b", (3, 1), ("x", None))
    with pytest.raises(
        CallArgumentError,
        match=r"f\.py: mesh0 needs 3 devices \(\{'y': 1, 'x': 3\}\), only 1 given",
    ):
        fn.place_inputs(devices=jax.devices()[:1])


@pytest.mark.multidevice(devices=2)
def test_place_inputs_spec_that_does_not_divide(tmp_path: Path) -> None:
    fn = _sharded(tmp_path, (2,), ("x", None))  # row-major dim 1 (size 3) over 2 devices
    with pytest.raises(CallArgumentError, match=r"arg1 cannot be placed with \(None, 'x'\)"):
        fn.place_inputs()


# --- Lux models: the results' split and its overrides -------------------------------------


def _train(tmp: Path) -> tuple[Path, luxmodels.LuxModelSpec]:
    spec = luxmodels.batchnorm_model(mode="train", batch=4)
    return write_lux_export(tmp, spec), spec


def test_overrides_checked_against_main(tmp_path: Path) -> None:
    d, spec = _train(tmp_path)
    state = [i for i, a in enumerate(spec.arguments) if a.role == "state"]
    param = next(i for i, a in enumerate(spec.arguments) if a.role == "parameter")
    m = len(juliabridge.load_reactant_export(d, backend="lax").export.module.results)
    with pytest.raises(
        ManifestError,
        match=rf"f?run_lux_model_0\.mlir: result {m} does not exist; @main has {m} results",
    ):
        juliabridge.import_lux(d, outputs=[m])
    with pytest.raises(ManifestError, match=r"result -1 does not exist"):
        juliabridge.import_lux(d, outputs=[0], state_results={-1: state[0]})
    with pytest.raises(ManifestError, match=r"a result is listed twice in outputs=/state_results="):
        juliabridge.import_lux(d, outputs=[0, 0])
    with pytest.raises(ManifestError, match=r"a result is listed twice"):
        juliabridge.import_lux(d, outputs=[0, 1], state_results={1: state[0]})
    with pytest.raises(
        ManifestError, match=rf"state_results maps result 1 to argument {param}, not a st leaf"
    ):
        juliabridge.import_lux(d, outputs=[0], state_results={1: param})
    with pytest.raises(ManifestError, match=r"maps result 1 to argument 99, not a st leaf"):
        juliabridge.import_lux(d, outputs=[0], state_results={1: 99})
    with pytest.raises(
        SignatureMismatchError,
        match=r"result 0 is tensor<.*> but .* is tensor<.*>; a state leaf keeps its shape",
    ):
        juliabridge.import_lux(d, outputs=[1], state_results={0: state[0]})
    with pytest.raises(
        ManifestError, match=r"results \[1, 2\] are neither in outputs=/state_results= nor echoes"
    ):
        juliabridge.import_lux(d, outputs=[0])
    model = juliabridge.import_lux(d, outputs=[0], state_results={1: state[0], 2: state[1]})
    assert model.manifest.mode == "train"


def test_positions_given_and_refused(tmp_path: Path) -> None:
    d, spec = _train(tmp_path)
    with pytest.raises(
        ManifestError,
        match=r"positions= takes three distinct positions \(x, ps, st\), got \(2, 3\)",
    ):
        juliabridge.import_lux(d, positions=(2, 3))
    with pytest.raises(ManifestError, match=r"got \(2, 3, 3\)"):
        juliabridge.import_lux(d, positions=(2, 3, 3))
    with pytest.raises(
        ManifestError, match=r"arguments at position\(s\) \[4\] are none of x=2, ps=3, st=5"
    ):
        juliabridge.import_lux(d, positions=(2, 3, 5))
    # The same export read with st and ps swapped: the roles follow the positions given.
    model = juliabridge.import_lux(d, positions=(2, 4, 3), outputs=[0, 1, 2])
    roles = [a.role for a in model.manifest.arguments]
    assert roles == ["input"] + [
        "state" if a.role == "parameter" else "parameter" if a.role == "state" else "input"
        for a in spec.arguments[1:]
    ]


def test_positions_other_than_the_manual(tmp_path: Path) -> None:
    args = [ArgInfo([1], X), ArgInfo([5, 1], W)]
    write_export(tmp_path, Export("f", lower(_scale, X, W), args))
    with pytest.raises(ManifestError, match=r"at traced positions \[1, 5\], not the Lux manual's"):
        juliabridge.import_lux(tmp_path)
    model = juliabridge.import_lux(tmp_path, positions=(1, 5, 7))
    assert [a.role for a in model.manifest.arguments] == ["input", "parameter"]
    np.testing.assert_allclose(np.asarray(model(X)), X * W)


def test_function_form_without_state_outputs_and_manifest(tmp_path: Path) -> None:
    # f(x, ps): arg.1 and arg.2; (x * w, x, w): the output, then the two echoes.
    model = import_export_lux(_export(tmp_path))
    assert model.backend == "lax" and model.manifest.mode == "test"
    np.testing.assert_allclose(np.asarray(model(X)), X * W)
    m = model.manifest
    assert [(a.role, a.path, a.dataset, a.julia_shape) for a in m.arguments] == [
        ("input", (), None, (3, 2)),
        ("parameter", (1,), "arr_2", (3,)),
    ]
    assert [(r.paths, r.echo_of) for r in m.results] == [((("output",),), None), ((), 0), ((), 1)]
    assert m.producer.note == "read from f.py by juliabridge.reactant_export; nothing in it was run"
    assert (m.producer.tool_version, m.producer.made_with_julia) == ("unknown", False)
    assert (m.module.file, m.weights.file) == ("f_0.mlir", "f_0_inputs.npz")
    assert m.metadata["reactant_export"]["function_name"] == "f"
    jl = import_export_lux(tmp_path, LoadOptions(layout="julia"))
    np.testing.assert_allclose(np.asarray(jl.params[0]), W)
    np.testing.assert_allclose(np.asarray(jl(X.T)), (X * W).T)


def test_two_outputs_and_batch_axis(tmp_path: Path) -> None:
    def two(x: Any, w: Any) -> tuple[Any, ...]:
        return x * w, (x + w).sum(axis=1), x, w

    model = juliabridge.import_lux(_export(tmp_path, fn=two), batch_axis=0)
    r = model.manifest.results
    assert [(p.paths, p.batch_axis) for p in r[:2]] == [
        ((("output", 1),), 0),
        ((("output", 2),), 0),
    ]
    assert model.manifest.batch is not None and model.manifest.batch.size == 2
    x5 = np.tile(X, (3, 1))[:5]
    y, s = model(x5)
    np.testing.assert_allclose(np.asarray(y), x5 * W, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(s), (x5 + W).sum(axis=1), rtol=1e-6)
    with pytest.raises(ManifestError, match=r"batch_axis=2: an input has no such axis"):
        juliabridge.import_lux(tmp_path, batch_axis=2)


def test_convert_keeps_metadata_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from juliabridge.cli.commands import main

    d = _export(tmp_path / "exp")
    out = convert_export(d, tmp_path / "m.bundle")
    model = juliabridge.import_lux(out, backend="lax")
    m = model.manifest
    assert m.metadata["reactant_export"]["module"] == "f_0.mlir"
    assert m.producer.tool == "Reactant.Serialization.export_to_enzymejax"
    assert m.producer.tool_version == "unknown"
    assert (
        m.producer.note.startswith("Converted by juliabridge ")
        and "(read as data, never run)" in m.producer.note
    )
    # the note tells a reader of the bundle why it holds no reference outputs
    assert m.producer.note.endswith(
        "Reactant's exporter records no outputs, so there are no reference outputs."
    )
    np.testing.assert_allclose(np.asarray(model(X)), X * W)
    np.testing.assert_array_equal(np.asarray(model.params[0]), W)
    with pytest.raises(BundleError, match="already exists; pass overwrite=True"):
        convert_export(d, out)
    assert convert_export(d, out, overwrite=True) == out
    capsys.readouterr()
    assert main(["inspect", str(d)]) == 0
    assert "module read from: text (f_0.mlir, named by f.py)" in capsys.readouterr().out


def test_backend_named_explicitly(tmp_path: Path) -> None:
    d = _export(tmp_path)
    with pytest.raises((BackendUnavailableError, ValueError, juliabridge.JuliaBridgeError)):
        juliabridge.load_reactant_export(d, backend="nope")
    assert juliabridge.load_reactant_export(d, backend="xla").backend_name == "xla"


def test_state_leaf_first_among_the_arguments(tmp_path: Path) -> None:
    # positions=(x=2, ps=3, st=1): argument 0 is the st leaf, which state_results may name.
    d = _export(tmp_path)
    model = juliabridge.import_lux(d, positions=(2, 3, 1), outputs=[0], state_results={1: 0})
    assert [a.role for a in model.manifest.arguments] == ["state", "input"]
    assert model.manifest.mode == "train"
    y, st = model.apply(model.params, model.state, W)
    np.testing.assert_allclose(np.asarray(y), X * W)
    # A bare st leaf is leaf 1 of the state (a bundle names every leaf by a non-empty path).
    np.testing.assert_array_equal(np.asarray(st[0]), X)


def test_trust_passed_on_to_the_xla_backend(tmp_path: Path) -> None:
    # An integer division may trap in XLA: the xla backend rewrites it through lax first,
    # with the export's trust setting.
    a = np.array([7, -9, 100], np.int32)
    b = np.array([2, 4, -7], np.int32)
    d = _export(tmp_path, fn=lambda a, b: (jax.lax.div(a, b), a, b), values=(a, b))
    fn = juliabridge.load_reactant_export(d, backend="xla")
    np.testing.assert_array_equal(np.asarray(fn(a, b)[0]), np.trunc(a / b).astype(np.int32))
    model = juliabridge.import_lux(d, backend="xla")
    np.testing.assert_array_equal(np.asarray(model(a)), np.trunc(a / b).astype(np.int32))


def test_npz_opened_without_following_links_or_leaking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # O_NOFOLLOW refuses a symlink at open; O_CLOEXEC keeps the descriptor out of any process
    # another thread starts meanwhile; O_NONBLOCK keeps a FIFO from blocking the open.
    from juliabridge.bundle.files import safefile

    path = _npz(tmp_path / "x.npz", {"arr_1.npy": _npy(np.zeros(2, np.float32))})
    flags: list[int] = []
    real = os.open

    def spy(p: Any, f: int, *a: Any, **kw: Any) -> int:
        flags.append(f)
        return real(p, f, *a, **kw)

    monkeypatch.setattr(safefile.os, "open", spy)
    npz_mod.read_inputs(path, ["arr_1"], [TensorSpec((2,), "f32")])
    assert flags and all(
        f & os.O_NOFOLLOW and f & os.O_CLOEXEC and f & os.O_NONBLOCK for f in flags
    )


def test_npz_member_failing_its_crc(tmp_path: Path) -> None:
    # A stored member whose last data byte changed: the header reads, the data's CRC-32 fails.
    path = _npz(tmp_path / "x.npz", {"arr_1.npy": _npy(np.arange(2000, dtype=np.float32))})
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("arr_1.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    raw[start + info.compress_size - 1] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(
        BundleError, match=r"x\.npz \(arr_1\.npy\): cannot be decompressed \(Bad CRC-32"
    ):
        npz_mod.read_inputs(path, ["arr_1"], [TensorSpec((2000,), "f32")])
