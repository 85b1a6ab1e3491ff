"""One test per error class: each bad input gets a typed error that names the thing."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import jax
import numpy as np
import pytest

import juliabridge
import juliabridge.errors as errors
from tests.bundle_factory import dense_bn_arrays, edit_manifest, make_dense_bn


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return make_dense_bn(tmp_path / "dense_bn.bundle")


def test_every_error_derives_from_the_root() -> None:
    classes = [
        c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, Exception)
    ]
    # The warnings (Exception subclasses too) have their own root, a UserWarning.
    warns = [c for c in classes if issubclass(c, Warning)]
    assert juliabridge.UntestedJaxWarning in warns
    for cls in warns:
        assert issubclass(cls, juliabridge.JuliaBridgeWarning), cls
        assert not issubclass(cls, juliabridge.JuliaBridgeError), cls
    assert issubclass(juliabridge.JuliaBridgeWarning, UserWarning)
    classes = [c for c in classes if c not in warns]
    assert len(classes) >= 15
    for cls in classes:
        assert issubclass(cls, juliabridge.JuliaBridgeError), cls


def test_missing_bundle_directory(tmp_path: Path) -> None:
    with pytest.raises(juliabridge.BundleError, match="no such bundle directory"):
        juliabridge.import_lux(tmp_path / "nope.bundle")


def test_file_instead_of_directory(tmp_path: Path) -> None:
    f = tmp_path / "model.mlir"
    f.write_text("module {}")
    with pytest.raises(juliabridge.BundleError, match="load_mlir"):
        juliabridge.import_lux(f)


def test_manifest_missing_key(bundle: Path) -> None:
    edit_manifest(bundle, lambda m: m["arguments"][1].pop("dtype"))
    with pytest.raises(juliabridge.ManifestError, match=r"arguments\[1\].*'dtype'"):
        juliabridge.import_lux(bundle)


def test_checksum_mismatch(bundle: Path) -> None:
    import h5py

    # Format 2 checks each dataset's digest (spec §4.1), so change a value, not the file.
    with h5py.File(bundle / "weights.h5", "r+") as f:
        f["/params/layer_1/weight"][0, 0] += 1
    with pytest.raises(juliabridge.ChecksumError, match=r"weights\.h5"):
        juliabridge.import_lux(bundle)
    # The explicit opt-out loads it, and the model records that checksums were skipped.
    model = juliabridge.import_lux(bundle, verify_checksums=False, backend="xla")
    assert model.metadata["checksums_verified"] is False


def test_newer_format_version(bundle: Path) -> None:
    edit_manifest(bundle, lambda m: m.update(format_version=4))
    with pytest.raises(juliabridge.BundleVersionError, match="upgrade juliabridge"):
        juliabridge.import_lux(bundle)


def test_file_outside_bundle(bundle: Path) -> None:
    edit_manifest(bundle, lambda m: m["weights"].update(file="../weights.h5"))
    with pytest.raises(juliabridge.UnsafeBundleError, match=r"\.\./weights\.h5"):
        juliabridge.import_lux(bundle)


def test_symlinked_file(bundle: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.h5"
    os.replace(bundle / "weights.h5", outside)
    os.symlink(outside, bundle / "weights.h5")
    with pytest.raises(juliabridge.UnsafeBundleError, match="symlink"):
        juliabridge.import_lux(bundle, verify_checksums=False)


def test_manifest_disagrees_with_mlir(bundle: Path) -> None:
    def change(m: dict) -> None:
        m["arguments"][1]["shape"] = [3, 2]
        m["arguments"][1]["julia_shape"] = [2, 3]

    edit_manifest(bundle, change)
    with pytest.raises(juliabridge.SignatureMismatchError, match=r"params\.layer_1\.weight"):
        juliabridge.import_lux(bundle)


def test_wrong_call_arguments_name_the_path(bundle: Path) -> None:
    model = juliabridge.import_lux(bundle, backend="xla")
    x = dense_bn_arrays()[0]
    with pytest.raises(
        juliabridge.CallArgumentError, match=r"x expects tensor<Nx2xf32>.*\[2, 5\].*reversed"
    ):
        model(x.T)
    with pytest.raises(juliabridge.CallArgumentError, match=r"x expects .*f64.*astype"):
        model(x.astype(np.float64))
    params = {
        "layer_1": model.params["layer_1"],
        "layer_2": {"scale": model.params["layer_2"]["scale"]},
    }
    with pytest.raises(juliabridge.CallArgumentError, match=r"params\.layer_2\.bias"):
        model.apply(params, model.state, x)
    with pytest.raises(juliabridge.CallArgumentError, match="takes 7 array"):
        model.fn(x)


def test_mlir_that_does_not_parse() -> None:
    with pytest.raises(juliabridge.MLIRParseError, match="does not parse"):
        juliabridge.load_mlir("module {\n func.func @main( {")


def test_missing_mlir_file(tmp_path: Path) -> None:
    with pytest.raises(juliabridge.MLIRParseError, match="cannot read"):
        juliabridge.load_mlir(tmp_path / "missing.mlir")


@pytest.mark.parametrize(
    ("body", "needle", "advice"),
    [
        ("%0 = enzymexla.gelu %arg0 : tensor<2xf32>", "enzymexla.gelu", "Re-export"),
        (
            '%0 = "enzymexla.gelu"(%arg0) : (tensor<2xf32>) -> tensor<2xf32>',
            "enzymexla.gelu",
            "Re-export",
        ),
        (
            "%0 = stablehlo.custom_call @enzymexla_lapack_sgetrf_(%arg0) : (tensor<2xf32>) -> tensor<2xf32>",
            "enzymexla_lapack_sgetrf_",
            "Re-export",
        ),
        # jaxlib converts mhlo itself: trust=True is the way out that works (issue 50).
        (
            '%0 = "mhlo.negate"(%arg0) : (tensor<2xf32>) -> tensor<2xf32>',
            "mhlo.negate",
            "with trust=True runs the module",
        ),
    ],
)
def test_unsupported_ops_fail_at_load_time(body: str, needle: str, advice: str) -> None:
    text = f"""module {{
  func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {{
    {body}
    return %0 : tensor<2xf32>
  }}
}}"""
    with pytest.raises(juliabridge.UnsupportedModuleError, match=needle) as info:
        juliabridge.load_mlir(text, backend="xla")
    assert advice in str(info.value)


def test_dynamic_shapes_are_refused() -> None:
    text = """module {
  func.func @main(%arg0: tensor<?xf32>) -> tensor<?xf32> {
    return %arg0 : tensor<?xf32>
  }
}"""
    with pytest.raises(juliabridge.UnsupportedModuleError, match="dynamic shape"):
        juliabridge.load_mlir(text)


def test_no_main() -> None:
    text = """module {
  func.func @forward(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    return %arg0 : tensor<2xf32>
  }
}"""
    with pytest.raises(juliabridge.UnsupportedModuleError, match=r"no func\.func @main"):
        juliabridge.load_mlir(text)


def test_x64_weights_refused_before_truncation(tmp_path: Path) -> None:
    from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
    from juliabridge.bundle.write.writer import write_bundle

    w = np.arange(3.0)
    with jax.enable_x64(True):
        text = jax.jit(lambda x, w: x * w).lower(w, w).as_text()
        path = write_bundle(
            tmp_path / "f64.bundle",
            BundleDescription(
                name="f64",
                mlir_text=text,
                arguments=[ArgumentSpec("input", [], w), ArgumentSpec("parameter", ["w"], w)],
                result_paths=[[["output"]]],
            ),
        )
    with jax.enable_x64(False), pytest.raises(juliabridge.X64DisabledError, match=r"params\.w"):
        juliabridge.import_lux(path)


def test_a_backend_whose_package_is_missing_is_unavailable_naming_xla(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("juliabridge.backends.enzyme.availability.enzyme_available", lambda: False)
    text = "module {\n func.func @main(%a: tensor<f32>) -> tensor<f32> {\n return %a : tensor<f32>\n }\n}"
    with pytest.raises(juliabridge.BackendUnavailableError, match="backend='xla'"):
        juliabridge.load_mlir(text, backend="enzyme")


def test_unknown_backend_name() -> None:
    with pytest.raises(juliabridge.JuliaBridgeError, match="unknown backend 'tpu'"):
        juliabridge.load_mlir("module {}", backend="tpu")
