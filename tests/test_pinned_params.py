"""Pinned: params I/O and Lux trees (spec §3.8, §4), read back with h5py as Julia's HDF5.jl would.

`save_params` must write what `JuliaBridge.load_params` reads: 1-based tuple positions as
dataset names, state next to params, 16-bit floats as their uint16 bit patterns, every dataset
tagged; `load_params` must refuse what it cannot type; integer path steps must rebuild Julia's
tuples in order; and saving must never delete the temporary of a writer that is still running.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import jax
import ml_dtypes
import numpy as np
import pytest

import juliabridge
from juliabridge import BundleError, CallArgumentError

from .pinned_support import Arg, Res, Spec, lower, write


def _tuple_bundle(tmp_path: Path) -> Path:
    """y = x * layers[1].w + layers[2].w, with Lux paths (:layers, 1, :w) and (:layers, 2, :w)."""
    x = np.ones(3, np.float32)
    w1 = np.array([1.0, 2.0, 3.0], np.float32)
    w2 = np.array([10.0, 20.0, 30.0], np.float32)
    s = np.array([7.0, 8.0, 9.0], np.float32)
    spec = Spec(
        name="tup",
        mlir=lower(lambda x, a, b, s: (x * a + b, s + s), x, w1, w2, s),
        args=[
            Arg("input", [], x),
            Arg("parameter", ["layers", 1, "w"], w1),
            Arg("parameter", ["layers", 2, "w"], w2),
            Arg("state", ["layers", 2, "count"], s),
        ],
        results=[
            Res([["output"]], (3,), "f32"),
            Res([["state", "layers", 2, "count"]], (3,), "f32"),
        ],
        empty={"params": [["head"]], "state": [["layers", 1]]},
    )
    return write(tmp_path / "tup.bundle", spec)


def test_integer_steps_rebuild_julia_tuples_in_order(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_tuple_bundle(tmp_path))
    layers = model.params["layers"]
    assert isinstance(layers, tuple) and len(layers) == 2
    np.testing.assert_array_equal(layers[0]["w"], [1.0, 2.0, 3.0])  # Julia's layers[1]
    np.testing.assert_array_equal(layers[1]["w"], [10.0, 20.0, 30.0])
    assert model.params["head"] == {}  # an empty NamedTuple
    assert isinstance(model.state["layers"], tuple) and model.state["layers"][0] == {}
    np.testing.assert_array_equal(model.state["layers"][1]["count"], [7.0, 8.0, 9.0])
    x = np.array([1.0, 0.0, -1.0], np.float32)
    y, st = model.apply(model.params, model.state, x)
    np.testing.assert_array_equal(y, x * [1, 2, 3] + np.array([10, 20, 30]))
    np.testing.assert_array_equal(st["layers"][1]["count"], [14.0, 16.0, 18.0])
    assert st["layers"][0] == {}
    # A tree with the tuple elements swapped gives the swapped computation.
    swapped = {**model.params, "layers": (layers[1], layers[0])}
    y2, _ = model.apply(swapped, model.state, x)
    np.testing.assert_array_equal(y2, x * [10, 20, 30] + np.array([1, 2, 3]))


def test_a_tree_missing_a_tuple_element_names_the_path(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_tuple_bundle(tmp_path))
    short = {**model.params, "layers": (model.params["layers"][0],)}
    with pytest.raises(CallArgumentError, match=r"params\.layers"):
        model.apply(short, model.state, np.ones(3, np.float32))


def _datasets(path: Path) -> dict[str, tuple[np.ndarray, str]]:
    out: dict[str, tuple[np.ndarray, str]] = {}
    with h5py.File(path) as f:

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                out["/" + name] = (obj[()], obj.attrs["dtype"])

        f.visititems(visit)
    return out


def test_save_params_of_a_model_writes_1_based_tuples_and_the_state(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_tuple_bundle(tmp_path))
    out = juliabridge.save_params(model, tmp_path / "p.h5")
    ds = _datasets(out)
    tree = ds.pop("/juliabridge/tree")  # the trees' shape: positions stay positions
    assert json.loads(bytes(tree[0]))["params"]["leaves"] == [
        ["layers", 1, "w"],
        ["layers", 2, "w"],
    ]
    assert set(ds) == {"/params/layers/1/w", "/params/layers/2/w", "/state/layers/2/count"}
    np.testing.assert_array_equal(ds["/params/layers/1/w"][0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(ds["/state/layers/2/count"][0], [7.0, 8.0, 9.0])
    assert all(tag == "f32" for _, tag in ds.values())
    with h5py.File(out) as f:
        assert f.attrs["format"] == "juliabridge.weights"
        assert int(f.attrs["format_version"]) == 1
    # An explicit state replaces the model's.
    new_state = {"layers": ({}, {"count": np.zeros(3, np.float32)})}
    ds = _datasets(juliabridge.save_params(model, tmp_path / "q.h5", state=new_state))
    np.testing.assert_array_equal(ds["/state/layers/2/count"][0], np.zeros(3))


def test_save_then_load_params_round_trips(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_tuple_bundle(tmp_path))
    params, state = juliabridge.load_params(juliabridge.save_params(model, tmp_path / "p.h5"))
    # Positions come back as tuples, as in model.params (the file records which steps are).
    np.testing.assert_array_equal(params["layers"][0]["w"], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(state["layers"][1]["count"], [7.0, 8.0, 9.0])
    assert jax.tree.structure(params) == jax.tree.structure(model.params)
    # A bundle directory reads as its weights file, shaped by its manifest.
    params, _ = juliabridge.load_params(tmp_path / "tup.bundle")
    np.testing.assert_array_equal(params["layers"][1]["w"], [10.0, 20.0, 30.0])


def test_julia_layout_saves_in_the_files_mlir_order(tmp_path: Path) -> None:
    w = np.arange(6, dtype=np.float32).reshape(3, 2)  # Julia order of an MLIR (2, 3) array
    ds = _datasets(juliabridge.save_params({"w": w}, tmp_path / "j.h5", layout="julia"))
    np.testing.assert_array_equal(ds["/params/w"][0], w.T)
    with pytest.raises(CallArgumentError, match="layout"):
        juliabridge.save_params({"w": w}, tmp_path / "k.h5", layout="fortran")


def test_a_wrapped_model_saves_in_its_models_layout_unless_told(tmp_path: Path) -> None:
    from types import SimpleNamespace

    w = np.arange(6, dtype=np.float32).reshape(3, 2)  # Julia order of an MLIR (2, 3) array

    class Wrapped:  # what juliabridge.flax / juliabridge.equinox modules expose
        def __juliabridge_trees__(self) -> tuple[Any, Any, Any]:
            return {"w": w}, {}, SimpleNamespace(layout="julia")

    ds = _datasets(juliabridge.save_params(Wrapped(), tmp_path / "j.h5"))
    np.testing.assert_array_equal(ds["/params/w"][0], w.T)
    ds = _datasets(juliabridge.save_params(Wrapped(), tmp_path / "m.h5", layout="mlir"))
    np.testing.assert_array_equal(ds["/params/w"][0], w)


def test_16_bit_floats_and_bools_are_stored_as_bit_patterns(tmp_path: Path) -> None:
    bits = np.array([0x0000, 0x8000, 0x0001, 0x7E01, 0x3C00, 0xFBFF], np.uint16)  # 0, -0, tiny,
    half = bits.view(np.float16)  # a NaN with a payload, 1, the most negative finite
    brain = bits.view(ml_dtypes.bfloat16)
    flags = np.array([True, False, True])
    path = juliabridge.save_params({"h": half, "b": brain, "m": flags}, tmp_path / "bits.h5")
    with h5py.File(path) as f:
        for name, tag in (("h", "f16"), ("b", "bf16")):
            ds = f[f"/params/{name}"]
            assert ds.dtype == np.uint16 and ds.attrs["dtype"] == tag
            np.testing.assert_array_equal(ds[()], bits)
        assert f["/params/m"].dtype == np.uint8 and f["/params/m"].attrs["dtype"] == "i1"
        np.testing.assert_array_equal(f["/params/m"][()], [1, 0, 1])
    params, _ = juliabridge.load_params(path)
    assert params["h"].dtype == np.float16 and params["b"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(params["h"].view(np.uint16), bits)
    np.testing.assert_array_equal(params["b"].view(np.uint16), bits)
    np.testing.assert_array_equal(params["m"], flags)


def _tagged_file(path: Path, tag: Any) -> Path:
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("/params/w", data=np.ones(3, np.float32))
        if tag is not None:
            ds.attrs["dtype"] = tag
    return path


@pytest.mark.parametrize("tag", ["f128", "float32", "F32", "", None])
def test_load_params_refuses_datasets_it_cannot_type(tmp_path: Path, tag: Any) -> None:
    with pytest.raises(BundleError, match="/params/w"):
        juliabridge.load_params(_tagged_file(tmp_path / "t.h5", tag))


def test_load_params_reads_a_file_tagged_by_julia(tmp_path: Path) -> None:
    params, state = juliabridge.load_params(_tagged_file(tmp_path / "t.h5", "f32"))
    np.testing.assert_array_equal(params["w"], np.ones(3))
    assert state == {}


def test_load_params_refuses_what_is_not_a_weights_file(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no such file"):
        juliabridge.load_params(tmp_path / "missing.h5")
    with pytest.raises(BundleError):
        juliabridge.load_params(123)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["", "..", "a/b", 1.5])
def test_save_params_refuses_keys_that_cannot_name_a_dataset(tmp_path: Path, key: Any) -> None:
    with pytest.raises(CallArgumentError):
        juliabridge.save_params({key: np.ones(2, np.float32)}, tmp_path / "k.h5")


def test_save_params_refuses_arrays_without_a_julia_type(tmp_path: Path) -> None:
    with pytest.raises(CallArgumentError, match="cannot be saved"):
        juliabridge.save_params({"w": np.array(["a"])}, tmp_path / "s.h5")


# --- atomic writes next to other writers ---------------------------------------------------------


def _host() -> str:
    # The writer's host as the documented temporary name spells it (bundle/files/atomic.py).
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname() or "host")[:64]


def test_saving_keeps_the_temporary_of_a_live_writer_and_removes_a_dead_ones(
    tmp_path: Path,
) -> None:
    target = tmp_path / "finetuned.h5"
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        live = tmp_path / f".finetuned.h5.jbtmp~{_host()}~{writer.pid}~0badcafe"
        live.write_bytes(b"half-written by a running process")
        other_host = tmp_path / ".finetuned.h5.jbtmp~elsewhere~1~0badcafe"
        other_host.write_bytes(b"from another machine sharing the directory")
        juliabridge.save_params({"w": np.ones(2, np.float32)}, target)
        assert live.read_bytes() == b"half-written by a running process"
        assert other_host.exists()
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    # Now that writer is gone: the next save removes its leftover, and only that one.
    juliabridge.save_params({"w": np.zeros(2, np.float32)}, target, overwrite=True)
    assert not live.exists()
    assert other_host.exists()
    params, _ = juliabridge.load_params(target)
    np.testing.assert_array_equal(params["w"], [0.0, 0.0])


# --- what save_params accepts as a tree (Lux names, spec §3.8) -----------------------------------


@pytest.mark.parametrize("key", [".", "a\x00b", True, None, ("a",)])
def test_save_params_refuses_other_keys_that_are_not_lux_names(tmp_path: Path, key: Any) -> None:
    with pytest.raises(CallArgumentError) as e:
        juliabridge.save_params({"layer": {key: np.ones(2, np.float32)}}, tmp_path / "k.h5")
    assert str(e.value).startswith("params: key ")
    assert not (tmp_path / "k.h5").exists()


def test_state_keys_are_checked_and_named_too(tmp_path: Path) -> None:
    with pytest.raises(CallArgumentError, match=r"^state: key '\.\.' cannot name"):
        juliabridge.save_params({}, tmp_path / "k.h5", state={"..": np.ones(2, np.float32)})


def test_integer_keys_lists_and_empty_leaves(tmp_path: Path) -> None:
    # Integer dict keys are Julia tuple positions as written; lists are 1-based like tuples;
    # None (Lux's empty NamedTuple leaf) writes nothing.
    tree = {
        "a": {3: np.ones(1, np.float32)},
        "l": [np.zeros(1, np.float32), np.full(1, 2, np.float32)],
        "n": None,
    }
    ds = _datasets(juliabridge.save_params(tree, tmp_path / "t.h5"))
    assert set(ds) == {"/params/a/3", "/params/l/1", "/params/l/2", "/juliabridge/tree"}
    np.testing.assert_array_equal(ds["/params/l/2"][0], [2.0])


def test_a_non_path_argument_to_load_params_is_a_typed_error() -> None:
    with pytest.raises(BundleError, match=r"expected the path of a weights file .*got int"):
        juliabridge.load_params(123)  # type: ignore[arg-type]


def test_the_unsavable_array_message_names_the_path_and_type(tmp_path: Path) -> None:
    with pytest.raises(CallArgumentError) as e:
        juliabridge.save_params({"enc": ({"w": np.array(["a"])},)}, tmp_path / "s.h5")
    msg = str(e.value)
    assert msg.startswith("params.enc.1.w: a ndarray of numpy dtype <U1 cannot be saved")
    assert "Float32" in msg and "Bool" in msg  # the Julia element types it takes


def test_julia_layout_is_taken_from_the_model_and_can_be_overridden(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_tuple_bundle(tmp_path), layout="julia")
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    model.params["layers"][0]["w"] = w  # type: ignore[index]
    ds = _datasets(juliabridge.save_params(model, tmp_path / "j.h5"))
    np.testing.assert_array_equal(ds["/params/layers/1/w"][0], w.T)
    ds = _datasets(juliabridge.save_params(model, tmp_path / "m.h5", layout="mlir"))
    np.testing.assert_array_equal(ds["/params/layers/1/w"][0], w)


def test_load_params_keeps_the_files_order_not_the_alphabet(tmp_path: Path) -> None:
    # JuliaBridge writes datasets in Lux's field order, which the model's layers follow. The
    # first dataset of each group is large, so its read completes after the small ones'.
    path = tmp_path / "o.h5"
    big = np.ones(4 << 20, np.float32)
    with h5py.File(path, "w", track_order=True) as f:
        for group in ("/params", "/params/zeta", "/params/alpha", "/state", "/state/y", "/state/b"):
            f.create_group(group, track_order=True)
        for name, value in (
            ("/params/zeta/w", big),
            ("/params/alpha/w", big[:1]),
            ("/params/zeta/b", big[:1]),
            ("/state/y/c", big),
            ("/state/b/c", big[:1]),
        ):
            f.create_dataset(name, data=value)
            f[name].attrs["dtype"] = "f32"
    params, state = juliabridge.load_params(path)
    assert list(params) == ["zeta", "alpha"] and list(params["zeta"]) == ["w", "b"]
    assert list(state) == ["y", "b"]


def test_load_params_reads_the_file_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An attacker who replaces the file right after it was opened (and checked) must not get
    # the replacement read: everything is read through the descriptor opened first.
    from juliabridge.bundle.files import safefile

    good = juliabridge.save_params({"w": np.ones(2, np.float32)}, tmp_path / "w.h5")
    evil = juliabridge.save_params({"w": np.full(2, 666.0, np.float32)}, tmp_path / "e.h5")
    real = safefile.open_regular

    def open_then_swap(path: Path, what: str, *, dir_fd: int | None = None) -> Any:
        out = real(path, what, dir_fd=dir_fd)
        os.replace(evil, good)
        return out

    monkeypatch.setattr(safefile, "open_regular", open_then_swap)
    params, _ = juliabridge.load_params(good)
    np.testing.assert_array_equal(params["w"], [1.0, 1.0])


# --- load_params of a bundle directory verifies what its manifest records ------------------------


def test_load_params_of_a_bundle_verifies_its_dataset_digests(tmp_path: Path) -> None:
    from tests.bundle_factory import make_dense_bn

    bundle = make_dense_bn(tmp_path / "b.bundle")
    params, state = juliabridge.load_params(bundle)
    assert set(params) == {"layer_1", "layer_2"} and set(state["layer_2"]) == {
        "running_mean",
        "running_var",
    }
    with h5py.File(bundle / "weights.h5", "r+") as f:
        f["/params/layer_1/bias"][0] += 1
    with pytest.raises(
        juliabridge.ChecksumError,
        match=r"params\.layer_1\.bias \(/params/layer_1/bias\): the blake3",
    ):
        juliabridge.load_params(bundle)
    # The weights file itself, named directly, is read as a plain file: nothing to verify.
    assert juliabridge.load_params(bundle / "weights.h5")[0]["layer_1"]["bias"].shape == (3,)


def test_load_params_of_a_format_1_bundle_verifies_the_whole_file(tmp_path: Path) -> None:
    from tests.bundle_factory import make_dense_bn, to_format1

    bundle = to_format1(make_dense_bn(tmp_path / "b.bundle"))
    assert set(juliabridge.load_params(bundle)[0]) == {"layer_1", "layer_2"}
    with open(bundle / "weights.h5", "ab") as f:
        f.write(b"x")
    with pytest.raises(juliabridge.ChecksumError, match=r"weights\.h5: sha256 is"):
        juliabridge.load_params(bundle)


def test_load_params_of_a_bundle_refuses_a_dataset_its_manifest_does_not_name(
    tmp_path: Path,
) -> None:
    from tests.bundle_factory import make_dense_bn

    bundle = make_dense_bn(tmp_path / "b.bundle")
    with h5py.File(bundle / "weights.h5", "r+") as f:
        f.create_dataset("/params/planted", data=np.zeros(2, np.float32)).attrs["dtype"] = "f32"
    with pytest.raises(juliabridge.ChecksumError) as e:
        juliabridge.load_params(bundle)
    assert str(e.value).startswith(
        f"{bundle / 'weights.h5'}: dataset /params/planted is not among the datasets "
        "manifest.json names and the file has no sha256 there either, so it cannot be verified"
    )


def test_load_params_of_a_bundle_reads_the_weights_file_its_manifest_names(
    tmp_path: Path,
) -> None:
    from tests.bundle_factory import edit_manifest, make_dense_bn

    bundle = make_dense_bn(tmp_path / "b.bundle")
    (bundle / "weights.h5").rename(bundle / "w2.h5")
    edit_manifest(bundle, lambda m: m["weights"].update(file="w2.h5"))
    assert set(juliabridge.load_params(bundle)[0]) == {"layer_1", "layer_2"}
