"""The error surface as a new user meets it: each mistake gets a typed error whose message names
the file, argument or op, says what was expected and what was found, and what to do."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest

import juliabridge
from juliabridge.bundle.files.checksum import sha256_file
from juliabridge.errors import SaveError
from tests.bundle_factory import dense_bn_arrays, edit_manifest, make_dense_bn


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return make_dense_bn(tmp_path / "dense_bn.bundle")


def actionable(message: str, *names: str) -> None:
    """The message names each of `names` and says what to do."""
    for name in names:
        assert name in message, f"{name!r} not in: {message}"
    verbs = (
        "pass",
        "use",
        "check",
        "export",
        "re-export",
        "download",
        "install",
        "cast",
        "call",
        "copy",
        "upgrade",
        "load",
        "did you mean",
        "set",
        "fix",
    )
    assert any(v in message.lower() for v in verbs), f"no advice in: {message}"


def test_wrong_bundle_path(tmp_path: Path) -> None:
    with pytest.raises(juliabridge.BundleError) as info:
        juliabridge.import_lux(tmp_path / "typo.bundle")
    actionable(str(info.value), "typo.bundle", "no such bundle directory")


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("model.mlir", "load_mlir"),
        ("weights.h5", "load_params"),
        ("model.zip", "unpack"),
        ("notes.txt", "expected a bundle directory"),
    ],
)
def test_a_file_instead_of_a_directory(tmp_path: Path, name: str, hint: str) -> None:
    f = tmp_path / name
    f.write_bytes(b"x")
    with pytest.raises(juliabridge.BundleError) as info:
        juliabridge.import_lux(f)
    assert "found a file" in str(info.value)
    actionable(str(info.value), name, hint)


def test_the_manifest_itself_is_accepted_as_the_path(bundle: Path) -> None:
    assert juliabridge.import_lux(bundle / "manifest.json", backend="xla").manifest.name


def test_the_parent_directory_suggests_the_bundle(bundle: Path) -> None:
    with pytest.raises(juliabridge.BundleError) as info:
        juliabridge.import_lux(bundle.parent)
    actionable(str(info.value), "no manifest.json", "did you mean", str(bundle))


def test_not_a_path_at_all() -> None:
    with pytest.raises(juliabridge.BundleError, match="got NoneType"):
        juliabridge.import_lux(None)  # type: ignore[arg-type]


def test_wrong_dtype(bundle: Path) -> None:
    model = juliabridge.import_lux(bundle, backend="xla")
    with pytest.raises(juliabridge.CallArgumentError) as info:
        model(dense_bn_arrays()[0].astype(np.float64))
    actionable(str(info.value), "x expects f32", "Float32", "got f64", "astype(np.float32)")


def test_wrong_feature_size_and_reversed_dims(bundle: Path) -> None:
    model = juliabridge.import_lux(bundle, backend="xla")
    with pytest.raises(juliabridge.CallArgumentError) as info:
        model(np.zeros((5, 3), np.float32))
    assert "tensor<Nx2xf32>" in str(info.value) and "[5, 3]" in str(info.value)
    with pytest.raises(juliabridge.CallArgumentError) as info:
        model(dense_bn_arrays()[0].T)
    actionable(str(info.value), "reversed", "x.T", "layout='julia'")


def test_wrong_batch_size_when_samples_are_not_independent(tmp_path: Path) -> None:
    from juliabridge.examples.luxmodels import build_bundle

    path = build_bundle("batchnorm_train", tmp_path / "bn.bundle", batch=6, seed=0)
    model = juliabridge.import_lux(path, backend="xla")
    with pytest.raises(juliabridge.CallArgumentError) as info:
        model.apply(model.params, model.state, np.ones((7, 3), np.float32))
    actionable(str(info.value), "batch size 6", "not independent", "7")


def test_other_batch_sizes_work_when_samples_are_independent(tmp_path: Path) -> None:
    from juliabridge.examples.luxmodels import build_bundle

    path = build_bundle("dense_chain", tmp_path / "d.bundle", batch=5, seed=0)
    model = juliabridge.import_lux(path, backend="xla")
    x = np.random.default_rng(0).standard_normal((7, *model.signature["arguments"][0]["shape"][1:]))
    y = np.asarray(model(x.astype(np.float32)))
    assert y.shape[0] == 7


def test_rebatching_never_drops_samples_silently(bundle: Path) -> None:
    """tests/bundle_factory's manifest records no batch_axis for its result."""
    model = juliabridge.import_lux(bundle, backend="xla")
    x = np.ones((7, 2), np.float32)
    try:
        y = np.asarray(model(x))
    except juliabridge.CallArgumentError:
        return  # refusing is fine too
    assert y.shape == (7, 3)


def test_the_backend_of_a_missing_package_is_named_with_the_way_out(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.12 has no enzyme-ad wheel: simulated by making it unimportable."""
    monkeypatch.setattr("juliabridge.backends.enzyme.availability.enzyme_available", lambda: False)
    with pytest.raises(juliabridge.BackendUnavailableError) as info:
        juliabridge.import_lux(bundle, backend="enzyme")
    actionable(str(info.value), "enzyme-ad", "CPython 3.11", "backend='xla'")
    # "auto" picks lax, and falls back to xla (not enzyme) where enzyme-ad is missing.
    monkeypatch.setattr("juliabridge.backends.select.enzyme_available", lambda: False)
    assert juliabridge.import_lux(bundle).fn.backend_name == "lax"
    from juliabridge.errors import UnsupportedOpError

    def cannot_lift(*_: object, **__: object) -> None:
        raise UnsupportedOpError("not lifted", op="stablehlo.foo", where="line 3")

    monkeypatch.setattr("juliabridge.backends.lax.LaxBackend.__init__", cannot_lift)
    model = juliabridge.import_lux(bundle)
    assert model.backend == "xla" and model.metadata["backend_fallback"] == "not lifted"


def test_julia_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    julia = pytest.importorskip("juliabridge.driver", reason="no Julia driver in this build")
    monkeypatch.setenv("PYTHON_JULIAPKG_EXE", str(tmp_path / "no-julia"))
    with pytest.raises(juliabridge.JuliaUnavailable) as info:
        julia.find_julia()
    actionable(str(info.value), "PYTHON_JULIAPKG_EXE", "no-julia")


def test_checksum_mismatch_says_both_ways_out(bundle: Path) -> None:
    # Format 3 checks each dataset's BLAKE3 (spec §4.1): a changed value is named.
    with h5py.File(bundle / "weights.h5", "r+") as f:
        f["/params/layer_1/bias"][0] += 1
    with pytest.raises(juliabridge.ChecksumError) as info:
        juliabridge.import_lux(bundle)
    actionable(
        str(info.value),
        "weights.h5",
        "/params/layer_1/bias",
        "the blake3 of its stored bytes",
        "Re-export",
        "verify_checksums=False",
    )


def test_whole_file_checksum_mismatch_says_both_ways_out(bundle: Path) -> None:
    # A weights.sha256 (required in format 1, optional in 2) is still verified when present.
    digest = sha256_file(bundle / "weights.h5")
    edit_manifest(bundle, lambda m: m["weights"].update(sha256=digest))
    with open(bundle / "weights.h5", "ab") as f:
        f.write(b"x")
    with pytest.raises(juliabridge.ChecksumError) as info:
        juliabridge.import_lux(bundle)
    actionable(str(info.value), "weights.h5", "sha256", "Re-export", "verify_checksums=False")


def test_manifest_errors_name_the_file_the_entry_and_the_fix(bundle: Path) -> None:
    edit_manifest(bundle, lambda m: m["arguments"][2].update(dtype="float32"))
    with pytest.raises(juliabridge.ManifestError) as info:
        juliabridge.import_lux(bundle)
    actionable(
        str(info.value), str(bundle / "manifest.json"), "arguments[2].dtype", "'float32'", "f32"
    )


def test_manifest_and_module_disagree(bundle: Path) -> None:
    def change(m: dict) -> None:
        m["arguments"][3].update(shape=[4], julia_shape=[4])

    edit_manifest(bundle, change)
    with pytest.raises(juliabridge.SignatureMismatchError) as info:
        juliabridge.import_lux(bundle)
    actionable(
        str(info.value), "model.mlir", "params.layer_2.scale", "tensor<3xf32>", "tensor<4xf32>"
    )


def test_weights_disagree_with_the_manifest(bundle: Path) -> None:
    import h5py

    from juliabridge.bundle.files.checksum import sha256_file

    with h5py.File(bundle / "weights.h5", "a") as f:
        del f["/params/layer_1/bias"]
        f["/params/layer_1/bias"] = np.zeros(3, np.float64)
    edit_manifest(bundle, lambda m: m["weights"].update(sha256=sha256_file(bundle / "weights.h5")))
    with pytest.raises(juliabridge.SignatureMismatchError) as info:
        juliabridge.import_lux(bundle, backend="xla")
    actionable(
        str(info.value), "weights.h5", "params.layer_1.bias", "float64", "float32", "re-export"
    )


def test_module_that_does_not_parse_points_at_the_line(bundle: Path) -> None:
    from juliabridge.bundle.files.checksum import sha256_file

    text = (bundle / "model.mlir").read_text().replace("stablehlo.sqrt", "stablehlo.sqrtt")
    (bundle / "model.mlir").write_text(text)
    edit_manifest(bundle, lambda m: m["module"].update(sha256=sha256_file(bundle / "model.mlir")))
    # The text is what is parsed only without a portable artifact (spec §2.1).
    edit_manifest(bundle, lambda m: m["module"].pop("artifact", None))
    with pytest.raises(juliabridge.MLIRParseError) as info:
        juliabridge.import_lux(bundle, backend="xla")
    actionable(str(info.value), "model.mlir", "line 13", "stablehlo.sqrtt")


def test_unsupported_op_names_the_op(tmp_path: Path) -> None:
    text = """module {
  func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    %0 = "mhlo.abs"(%arg0) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""
    with pytest.raises(juliabridge.UnsupportedModuleError) as info:
        juliabridge.load_mlir(text, backend="xla")
    actionable(str(info.value), "mhlo.abs", "trust=True")


def test_load_mlir_on_a_bundle_directory(bundle: Path) -> None:
    with pytest.raises(juliabridge.MLIRParseError) as info:
        juliabridge.load_mlir(bundle)
    actionable(str(info.value), "is a directory", "import_lux")


def test_save_params_to_a_directory(tmp_path: Path) -> None:
    with pytest.raises(SaveError) as info:
        juliabridge.save_params({"w": np.ones(2, np.float32)}, tmp_path)
    actionable(str(info.value), str(tmp_path), "is a directory", "finetuned.h5")


def test_save_params_creates_no_directory_and_replaces_no_file_unasked(tmp_path: Path) -> None:
    """Issue 29 item 7: a typo'd directory was created, and an existing file replaced."""
    w = {"w": np.ones(2, np.float32)}
    with pytest.raises(SaveError) as info:
        juliabridge.save_params(w, tmp_path / "typo" / "w.h5")
    assert str(info.value) == (
        f"{tmp_path / 'typo' / 'w.h5'}: the directory {tmp_path / 'typo'} does not exist; "
        "create it first (save_params creates no directories)"
    )
    assert not (tmp_path / "typo").exists()
    target = juliabridge.save_params(w, tmp_path / "w.h5")
    with pytest.raises(SaveError) as info:
        juliabridge.save_params({"w": np.zeros(2, np.float32)}, target)
    assert str(info.value) == f"{target}: already exists; pass overwrite=True to replace it"
    np.testing.assert_array_equal(juliabridge.load_params(target)[0]["w"], np.ones(2))
    juliabridge.save_params({"w": np.zeros(2, np.float32)}, target, overwrite=True)
    np.testing.assert_array_equal(juliabridge.load_params(target)[0]["w"], np.zeros(2))


def test_save_params_with_a_value_julia_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(juliabridge.CallArgumentError) as info:
        juliabridge.save_params({"layer": {"w": "text"}}, tmp_path / "w.h5")
    assert "params.layer.w" in str(info.value) and "Float32" in str(info.value)


def test_load_params_on_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(juliabridge.BundleError) as info:
        juliabridge.load_params(tmp_path / "nope.h5")
    actionable(str(info.value), "nope.h5", "no such file", "save_params")


@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_hub_cache_symlinks_get_a_way_out(bundle: Path, tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    os.replace(bundle / "weights.h5", blob)
    os.symlink(blob, bundle / "weights.h5")
    with pytest.raises(juliabridge.UnsafeBundleError) as info:
        juliabridge.import_lux(bundle)
    actionable(str(info.value), "weights.h5", "symlink", "cp -rL")


# --- every public entry point ends in a JuliaBridgeError ---------------------------------------


@pytest.mark.parametrize("transform", ["jvp", "jacfwd", "hessian"])
@pytest.mark.parametrize("jit", [False, True])
def test_forward_mode_through_max_pooling_is_a_transform_error(transform: str, jit: bool) -> None:
    """Before: a bare ValueError from enzyme-ad's pass pipeline, under jax.jit and eagerly."""
    from tests.conftest import require_backend

    require_backend("enzyme")
    import jax
    import jax.numpy as jnp

    from juliabridge.examples.paths import example_bundle_path

    model = juliabridge.import_lux(example_bundle_path("lenet"), backend="enzyme")
    x = np.random.default_rng(0).standard_normal((4, 1, 28, 28)).astype(np.float32)

    def f(x):  # type: ignore[no-untyped-def]
        return jnp.sum(model(x))

    fn = {
        "jvp": lambda x: jax.jvp(f, (x,), (x,))[1],
        "jacfwd": jax.jacfwd(f),
        "hessian": jax.hessian(f),
    }[transform]
    with pytest.raises(juliabridge.TransformError) as info:
        (jax.jit(fn) if jit else fn)(x)
    actionable(str(info.value), "lenet.bundle")


def test_hessian_on_xla_is_a_transform_error(bundle: Path) -> None:
    import jax
    import jax.numpy as jnp

    model = juliabridge.import_lux(bundle, backend="xla")
    x = dense_bn_arrays()[0]
    with pytest.raises(juliabridge.TransformError):
        jax.hessian(lambda x: jnp.sum(model(x)))(x)


def test_a_custom_call_this_platform_lacks_is_typed_everywhere(bundle: Path) -> None:
    """Before: verify() and the first call raised jaxlib's raw JaxRuntimeError."""
    from juliabridge.bundle.files.checksum import sha256_file
    from tests.bundle_factory import edit_manifest

    call = (
        "    %x:3 = stablehlo.custom_call @cusolver_getrf_ffi(%arg1) {mhlo.backend_config = {}} : "
        "(tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2xi32>, tensor<i32>)\n"
    )
    text = (bundle / "model.mlir").read_text().replace("    %0 =", call + "    %0 =", 1)
    (bundle / "model.mlir").write_text(text)
    edit_manifest(bundle, lambda m: m["module"].update(sha256=sha256_file(bundle / "model.mlir")))
    with pytest.raises(juliabridge.UnsupportedModuleError) as info:
        juliabridge.verify(bundle, backend="xla")
    actionable(str(info.value), "cusolver_getrf_ffi", "cuda")


def test_an_unregistered_target_of_a_trusted_module_fails_as_execution_error() -> None:
    text = """module {
  func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.custom_call @no_such_kernel(%arg0) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""
    fn = juliabridge.load_mlir(text, backend="xla", trust=True)
    with pytest.raises(juliabridge.ExecutionError) as info:
        fn(np.ones(2, np.float32))
    assert isinstance(info.value, RuntimeError)  # still catchable as before
    assert "no_such_kernel" in str(info.value)


def test_a_top_level_non_function_op_is_typed_on_every_backend(backend: str) -> None:
    """Before: AttributeError ('ConstantOp' object has no attribute 'sym_name') on enzyme."""
    text = """module {
  %c = stablehlo.constant dense<1.0> : tensor<2xf32>
  func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    return %arg0 : tensor<2xf32>
  }
}"""
    with pytest.raises(juliabridge.ModuleContractError) as info:
        juliabridge.load_mlir(text, backend=backend)
    actionable(str(info.value), "line 2", "stablehlo.constant", "Export")


@pytest.mark.parametrize("debug", [False, True])
def test_failed_in_process_derivations_are_quiet_and_leave_no_files(
    debug: bool,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """trust=True derives in this process; enzyme-ad then dumps the module to stderr and to
    /tmp/tmp*.mlir on failure. Both are suppressed unless JULIABRIDGE_DEBUG=1."""
    import glob
    import tempfile

    import jax
    import jax.numpy as jnp

    from juliabridge.examples.paths import example_bundle_path
    from tests.conftest import require_backend

    require_backend("enzyme")
    if debug:
        monkeypatch.setenv("JULIABRIDGE_DEBUG", "1")
    # a private temporary folder: tests running beside this one (pytest-xdist) dump there too
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dumps = os.path.join(tempfile.gettempdir(), "tmp*.mlir")
    before = set(glob.glob(dumps))
    model = juliabridge.import_lux(example_bundle_path("lenet"), backend="enzyme", trust=True)
    x = np.ones((4, 1, 28, 28), np.float32)
    capfd.readouterr()
    with pytest.raises(juliabridge.TransformError):
        jax.jit(lambda x: jax.jvp(lambda y: jnp.sum(model(y)), (x,), (x,))[1])(x)
    err = capfd.readouterr().err
    new = set(glob.glob(dumps)) - before
    if debug:  # the switch shows everything (and so proves the capture is what hides it)
        assert "reduce_window" in err and new
        for p in new:
            os.unlink(p)
    else:
        assert "reduce_window" not in err and "stablehlo" not in err, err[-2000:]
        assert not new
