"""What a new user stumbled on in their first hour (issue 51, "Other stumbles"): x64 on the
command line, several inputs, Dict inputs, load_into and Flax on Reactant exports, path
suggestions, folders of exports, and the Dropout seed kept as UInt64. References are written
here from the arrays and trees themselves, not read back from the code under test."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

import juliabridge
from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle
from juliabridge.cli.commands import main
from juliabridge.examples import lenet_bundle
from juliabridge.support.exitcodes import OK

F64_MODULE = """module @m {
  func.func public @main(%arg0: tensor<3xf64>, %arg1: tensor<3xf64>) -> tensor<3xf64> {
    %0 = stablehlo.multiply %arg0, %arg1 : tensor<3xf64>
    return %0 : tensor<3xf64>
  }
}
"""


def _f64_bundle(path: Path, *, examples: bool = True) -> tuple[Path, np.ndarray, np.ndarray]:
    """y = x * w in Float64, with its example input and reference output written here."""
    x = np.array([1.0 + 2**-40, -2.0, 3.0])  # 2**-40 is lost in float32
    w = np.array([0.5, 1.0 / 3.0, 4.0])
    write_bundle(
        path,
        BundleDescription(
            name="f64",
            mlir_text=F64_MODULE,
            arguments=[
                ArgumentSpec("input", [], x),
                ArgumentSpec("parameter", ["layer_1", "weight"], w),
            ],
            result_paths=[[["output"]]],
            example_outputs=[x * w] if examples else None,
            portable_artifact=False,
        ),
    )
    return path, x, w


# --- x64 on the command line ------------------------------------------------------------


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_cli_turns_x64_on_for_a_64_bit_bundle_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Before: exit 9 (X64DisabledError) unless JAX_ENABLE_X64=1 was set by hand."""
    assert not jax.config.read("jax_enable_x64")
    bundle, _, _ = _f64_bundle(tmp_path / "f64.bundle")
    with pytest.raises(juliabridge.X64DisabledError):
        juliabridge.import_lux(bundle)  # the Python API still asks the caller
    assert main([command, str(bundle)]) == OK
    out, err = capsys.readouterr()
    assert "jax_enable_x64 is turned on for this command" in err
    assert "params.layer_1.weight: f64" in err
    if command == "verify":
        assert "OK" in out
    assert not jax.config.read("jax_enable_x64")  # restored: the process may go on


def test_cli_leaves_x64_alone_for_a_32_bit_bundle(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(lenet_bundle())]) == OK
    assert "jax_enable_x64" not in capsys.readouterr().err


def test_export_jax_of_a_64_bit_bundle_keeps_its_precision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle, x, w = _f64_bundle(tmp_path / "f64.bundle")
    out = tmp_path / "f64.jaxexport"
    assert main(["export-jax", str(bundle), "--out", str(out), "--batch", "none"]) == OK
    assert "jax_enable_x64 is turned on" in capsys.readouterr().err
    with jax.enable_x64(True):
        exported = jax.export.deserialize(bytearray(out.read_bytes()))
        (y,) = jax.tree.leaves(exported.call(x))
        assert np.asarray(y).dtype == np.float64
        np.testing.assert_array_equal(np.asarray(y), x * w)


# --- verify without reference outputs ---------------------------------------------------


def test_verify_without_reference_outputs_has_its_own_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: exit 10, which the exit-code table calls a malformed bundle."""
    bundle, _, _ = _f64_bundle(tmp_path / "noref.bundle", examples=False)
    with (
        pytest.raises(juliabridge.NoReferenceOutputsError, match="no reference outputs"),
        jax.enable_x64(True),
    ):
        juliabridge.verify(bundle)
    assert main(["verify", str(bundle)]) == 24
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("juliabridge verify: error: ")
    assert "no reference outputs to verify against" in err


# --- paths: did you mean, and folders of models -------------------------------------------


def test_the_names_nearby_knows_are_the_readers(tmp_path: Path) -> None:
    from juliabridge.bundle.files import nearby
    from juliabridge.bundle.manifest import MANIFEST_NAME
    from juliabridge.julia_export import DESCRIPTION_NAME

    assert nearby.BUNDLE_FILE == MANIFEST_NAME
    assert nearby.JULIA_EXPORT_FILE == DESCRIPTION_NAME


def test_a_mistyped_path_gets_the_near_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: "no such bundle directory" and nothing else."""
    shutil.copytree(lenet_bundle(), tmp_path / "lenet.bundle")
    (tmp_path / "unrelated").mkdir()
    with pytest.raises(juliabridge.BundleError) as info:
        juliabridge.import_lux(tmp_path / "lenet.bundel")
    message = str(info.value)
    assert message.endswith(f"; did you mean {tmp_path / 'lenet.bundle'}?"), message
    assert "unrelated" not in message
    with pytest.raises(juliabridge.BundleError, match=r"did you mean .*lenet\.bundle"):
        juliabridge.load_params(tmp_path / "lenet.bundl")
    assert main(["inspect", str(tmp_path / "lenet_bundle")]) == 10
    assert f"did you mean {tmp_path / 'lenet.bundle'}?" in capsys.readouterr().err
    # Nothing alike: no suggestion, the message as before.
    with pytest.raises(juliabridge.BundleError) as info:
        juliabridge.import_lux(tmp_path / "qqqqqqq")
    assert "did you mean" not in str(info.value)


def _folder_of_models(tmp_path: Path) -> Path:
    from juliabridge.examples import luxmodels
    from tests.test_reactant_export import write_lux_export

    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copytree(lenet_bundle(), folder / "a.bundle")
    shutil.copytree(lenet_bundle(), folder / "b.bundle")
    write_lux_export(folder / "exported", luxmodels.batchnorm_model(mode="test", batch=4))
    (folder / "notes").mkdir()
    return folder


def test_a_folder_of_models_lists_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: only "no manifest.json in this directory, so it is not a juliabridge bundle"."""
    folder = _folder_of_models(tmp_path)
    with pytest.raises(juliabridge.BundleError) as info:
        juliabridge.import_lux(folder)
    message = str(info.value)
    assert message.endswith(
        f"; it holds 3 models: {folder / 'a.bundle'} (bundle), {folder / 'b.bundle'} (bundle), "
        f"{folder / 'exported'} (Reactant export); pass one of them"
    ), message
    assert "notes" not in message
    assert main(["verify", str(folder)]) == 10
    assert "it holds 3 models" in capsys.readouterr().err
    # convert (the Reactant route) says the same of a folder, and suggests for a typo.
    out = str(tmp_path / "m.bundle")
    assert main(["convert", str(folder), "--out", out]) == 10
    assert "it holds 3 models" in capsys.readouterr().err
    assert main(["convert", str(folder / "exportd"), "--out", out]) == 10
    assert f"did you mean {folder / 'exported'}?" in capsys.readouterr().err


# --- how inputs are passed: tuples and Dicts ----------------------------------------------


def test_a_dict_argument_export_is_one_dict_input_and_messages_say_so(tmp_path: Path) -> None:
    """export_to_enzymejax(f, Dict("x" => x, "w" => w)): one traced argument at position 1,
    which import_lux reads as x of f(x, ps, st), so every leaf is an input and params is
    empty. Before: model(x) said "pass the same tree structure as model.inputs", an attribute
    that does not exist."""
    from tests.test_reactant_export_paths import _write

    rng = np.random.default_rng(51)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    d = _write(tmp_path / "exp", lambda x, w: (x * w, x, w), [([1, "x"], x), ([1, "w"], w)])
    model = juliabridge.import_lux(d)
    assert model.params == {} and model.state == {}
    assert [a["name"] for a in model.signature["arguments"]] == ["x.x", "x.w"]
    np.testing.assert_array_equal(np.asarray(model({"x": x, "w": w})), x * w)
    y, _ = model.apply(model.params, model.state, {"x": x, "w": w})
    np.testing.assert_array_equal(np.asarray(y), x * w)
    with pytest.raises(juliabridge.CallArgumentError) as info:
        model(x)
    message = str(info.value)
    assert "model.inputs" not in message and not hasattr(model, "inputs")
    assert message.endswith(
        "pass one dict keyed like Julia's x (a Dict or NamedTuple), {'x': ..., 'w': ...}: "
        "model(x) or model.apply(params, state, x)"
    ), message
    with pytest.raises(juliabridge.CallArgumentError, match="takes one dict keyed like"):
        model(x, w)
    # A missing params leaf still points at what exists: model.params.
    from juliabridge.lux.trees import lookup

    with pytest.raises(juliabridge.CallArgumentError, match=r"as model\.params$"):
        lookup({}, ("layer_1", "weight"), "params")


# --- Lux's UInt64 random seed (Dropout's st.rng) ------------------------------------------

SEED_TEST = """module @m {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>, %arg2: tensor<2xui64>) -> tensor<4xf32> {
    %0 = stablehlo.multiply %arg0, %arg1 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""
SEED_TRAIN = """module @m {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>, %arg2: tensor<2xui64>) -> (tensor<4xf32>, tensor<2xui64>) {
    %0 = stablehlo.multiply %arg0, %arg1 : tensor<4xf32>
    %1:2 = stablehlo.rng_bit_generator %arg2, algorithm = THREE_FRY : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)
    return %0, %1#0 : tensor<4xf32>, tensor<2xui64>
  }
}
"""
SEED = np.array([2**63 + 5, 2**40 + 7], np.uint64)  # bits above 32 that truncation would lose


def _dropout_bundle(path: Path, mode: str) -> Path:
    """Chain(Scale, Dropout): ps.layer_1.weight, st.layer_2.rng (Reactant's UInt64 seed). In
    test mode the seed comes back unchanged (an alias, Reactant drops it from @main's
    results); in train mode @main draws from it and returns the new seed."""
    x = np.arange(4, dtype=np.float32)
    w = np.full(4, 0.5, np.float32)
    test = mode == "test"
    return write_bundle(
        path,
        BundleDescription(
            name=f"dropout_{mode}",
            mlir_text=SEED_TEST if test else SEED_TRAIN,
            arguments=[
                ArgumentSpec("input", [], x),
                ArgumentSpec("parameter", ["layer_1", "weight"], w),
                ArgumentSpec("state", ["layer_2", "rng"], SEED),
            ],
            result_paths=[[["output"]]] if test else [[["output"]], [["state", "layer_2", "rng"]]],
            aliases=[(["state", "layer_2", "rng"], 2)] if test else (),
            mode=mode,
            portable_artifact=False,
        ),
    )


@pytest.mark.parametrize("mode", ["test", "train"])
def test_a_uint64_seed_says_what_it_is_and_what_to_do(tmp_path: Path, mode: str) -> None:
    """Before: the generic 64-bit message, which did not say that the ui64 leaf is Lux's own
    RNG seed, present even in test mode."""
    bundle = _dropout_bundle(tmp_path / f"{mode}.bundle", mode)
    with pytest.raises(juliabridge.X64DisabledError) as info:
        juliabridge.import_lux(bundle)
    message = str(info.value)
    assert "state leaf state.layer_2.rng (ui64[2]) is a random seed that Lux keeps as UInt64" in (
        message
    )
    says = {
        "test": "does not draw from it (test mode: it comes back unchanged",
        "train": "draws random numbers from it and returns a new seed (train mode)",
    }
    assert says[mode] in message
    assert 'jax.config.update("jax_enable_x64", True)' in message
    assert "JAX_ENABLE_X64=1" in message
    # What the message says to do works, and the seed keeps all 64 bits.
    with jax.enable_x64(True):
        model = juliabridge.import_lux(bundle)
        x = np.arange(4, dtype=np.float32)
        y, st = model.apply(model.params, model.state, x)
        np.testing.assert_array_equal(np.asarray(y), x * 0.5)
        seed = np.asarray(st["layer_2"]["rng"])
        assert seed.dtype == np.uint64
        if mode == "test":
            np.testing.assert_array_equal(seed, SEED)
        else:
            assert not np.array_equal(seed, SEED)  # a new seed, drawn by the module


def test_the_seed_message_lists_other_64_bit_arrays(tmp_path: Path) -> None:
    from juliabridge.bundle.manifest import ArgumentEntry
    from juliabridge.lux.x64 import require_x64_weights

    m = juliabridge.import_lux(lenet_bundle()).manifest

    def entry(i: int, role: str, path: tuple[str, ...], dtype: str) -> ArgumentEntry:
        return ArgumentEntry(i, role, path, dtype, (2,), (2,), f"d{i}")

    import dataclasses

    wide = dataclasses.replace(
        m,
        arguments=(
            entry(0, "parameter", ("w",), "f64"),
            entry(1, "state", ("rng",), "ui64"),
            entry(2, "state", ("count",), "i64"),
        ),
        results=(),
    )
    with pytest.raises(juliabridge.X64DisabledError) as info:
        require_x64_weights(wide, "m")
    text = str(info.value)
    assert "state.rng (ui64[2])" in text
    assert "other 64-bit arrays: params.w: f64, state.count: i64" in text
    plain = dataclasses.replace(m, arguments=(entry(0, "parameter", ("w",), "f64"),))
    with pytest.raises(juliabridge.X64DisabledError) as info:
        require_x64_weights(plain, "m")
    assert "random seed" not in str(info.value)
