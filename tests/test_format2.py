"""Bundle formats 2 and 3 (docs/bundle-format.md): each rule the spec adds, and the reader
keeping it. Format 3 is format 2 with BLAKE3 per-dataset digests (key `blake3`) in place of
sha256 ones (key `sha256`); both are read.

Manifest rules are checked on the spec's own worked example (§7) with one change each, so a
rule that is removed makes its case pass silently and the test fail. Loading is checked on a
Dense+BatchNorm bundle against an independent numpy reference, with the artifact and the text
made to disagree on purpose so the tests see which one was compiled.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import re
import stat
import struct
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import h5py
import jax
import ml_dtypes
import numpy as np
import pytest

import juliabridge
from juliabridge.bundle import open_bundle, parse_manifest
from juliabridge.bundle.files.checksum import sha256_file
from juliabridge.bundle.files.digest import canonical_bytes, dataset_digest
from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle
from juliabridge.stablehlo import artifact
from tests.bundle_factory import (
    dense_bn_arrays,
    dense_bn_reference,
    edit_manifest,
    make_dense_bn,
    to_format1,
    to_format2,
)
from tests.outside import (
    reactant_fixture_names,
    reactant_fixture_text,
    skip_without_reactant_fixtures,
)
from tests.reference.fixture_refs import FIXTURES
from tests.test_manifest import spec_example, spec_example_with_aliases

HEX = "ab" * 32


def _mutated(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    m = copy.deepcopy(spec_example_with_aliases())
    change(m)
    return m


def as_format1(m: dict[str, Any]) -> dict[str, Any]:
    """The spec example as format 1 would write it: whole-file hash, no format-2 keys."""
    m = copy.deepcopy(m)
    m["format_version"] = 1
    m["weights"]["sha256"] = HEX
    m["module"].pop("artifact", None)
    m.pop("static_state", None)
    for a in m["arguments"]:
        a.pop("blake3", None)
    return m


def as_format2(m: dict[str, Any]) -> dict[str, Any]:
    """The spec example as format 2 would write it: per-dataset sha256 under `sha256`."""
    m = copy.deepcopy(m)
    m["format_version"] = 2
    for a in m["arguments"]:
        if "blake3" in a:
            a["sha256"] = a.pop("blake3")
    return m


def _examples(m: dict[str, Any]) -> dict[str, Any]:
    m["examples"] = {
        "inputs": [{"argument": 0, "dataset": "/examples/inputs/0", "blake3": HEX}],
        "outputs": [{"result": 0, "dataset": "/examples/outputs/0", "blake3": HEX}],
    }
    return m["examples"]


def _set(obj: dict[str, Any], **kv: Any) -> None:
    obj.update(kv)


# --- the manifest ------------------------------------------------------------------------


def test_spec_example_is_format_3_with_its_new_fields() -> None:
    m = parse_manifest(spec_example())
    assert m.format_version == 3 and m.dataset_digest == "blake3"
    assert m.module.artifact is not None and m.module.artifact.target == "1.17.0"
    assert m.weights.sha256 is None
    assert [a.digest for a in m.arguments] == [None] + ["0" * 64] * 6
    assert [(leaf.path, leaf.value, leaf.julia_type) for leaf in m.static_state] == [
        (("layer_2", "training"), False, "Val{false}")
    ]
    assert [key for key, _ in m.files()] == ["module", "module.artifact", "weights"]


def test_format_1_is_still_read_and_ignores_format_2_keys() -> None:
    # A format-1 reader ignores unknown keys, so format-2 keys in a format-1 manifest mean nothing.
    m1 = as_format1(spec_example())
    m1["module"]["artifact"] = {"file": "x.mlirbc"}  # not even valid in format 2
    m1["arguments"][1]["sha256"] = "not hex"
    m1["arguments"][2]["blake3"] = "not hex"
    m1["static_state"] = "not a list"
    m = parse_manifest(m1)
    assert m.format_version == 1 and m.dataset_digest is None
    assert m.module.artifact is None and m.weights.sha256 == HEX
    assert m.arguments[1].digest is None and m.arguments[2].digest is None
    assert m.static_state == ()


def test_format_2_is_still_read_with_sha256_digests() -> None:
    m2 = as_format2(spec_example())
    m2["arguments"][1]["sha256"] = HEX
    m2["arguments"][2]["blake3"] = "not hex"  # not part of format 2: ignored
    m = parse_manifest(m2)
    assert m.format_version == 2 and m.dataset_digest == "sha256"
    assert [a.digest for a in m.arguments] == [None, HEX] + ["0" * 64] * 5


def test_format_2_needs_its_sha256_and_format_3_its_blake3() -> None:
    m2 = as_format2(spec_example())
    m2["arguments"][3].pop("sha256")
    m2["arguments"][3]["blake3"] = HEX
    with pytest.raises(
        juliabridge.ManifestError, match=r"arguments\[3\]: missing required key 'sha256'"
    ):
        parse_manifest(m2)
    m3 = spec_example()
    m3["arguments"][3]["sha256"] = m3["arguments"][3].pop("blake3")  # format 2's key
    with pytest.raises(
        juliabridge.ManifestError, match=r"arguments\[3\]: missing required key 'blake3'"
    ):
        parse_manifest(m3)
    m3 = spec_example()
    m3["arguments"][3]["sha256"] = "not hex"  # not part of format 3: ignored
    assert parse_manifest(m3).arguments[3].digest == "0" * 64


INVALID: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    # format_version
    ("version 0", lambda m: m.update(format_version=0), r"format_version: expected 1, 2 or 3"),
    # module.artifact (§2.1)
    (
        "artifact without target",
        lambda m: m["module"]["artifact"].pop("target"),
        r"module\.artifact: missing required key 'target'",
    ),
    (
        "artifact version syntax",
        lambda m: _set(m["module"]["artifact"], target="1.17"),
        r"module\.artifact\.target: expected a StableHLO version MAJOR\.MINOR\.PATCH",
    ),
    (
        "artifact leading zero",
        lambda m: _set(m["module"]["artifact"], stablehlo_version="1.022.0"),
        r"module\.artifact\.stablehlo_version",
    ),
    (
        "artifact target above writer",
        lambda m: _set(m["module"]["artifact"], target="1.23.0"),
        r"module\.artifact\.target: target 1\.23\.0 is newer than the writer's StableHLO 1\.22\.0",
    ),
    (
        "artifact sha",
        lambda m: _set(m["module"]["artifact"], sha256="ABC"),
        r"module\.artifact\.sha256: expected 64 lowercase hex digits",
    ),
    (
        "artifact is the text file",
        lambda m: _set(m["module"]["artifact"], file="model.mlir"),
        r"module\.artifact\.file: 'model\.mlir' is also module\.file",
    ),
    (
        "names differ only in case",
        lambda m: _set(m["module"]["artifact"], file="WEIGHTS.h5"),
        r"weights\.file: 'weights\.h5' is also module\.artifact\.file",
    ),
    (
        "artifact is the manifest",
        lambda m: _set(m["module"]["artifact"], file="manifest.json"),
        r"module\.artifact\.file: 'manifest\.json' is also the manifest",
    ),
    # per-dataset digests (§4.1)
    (
        "dataset without blake3",
        lambda m: m["arguments"][3].pop("blake3"),
        r"arguments\[3\]: missing required key 'blake3'",
    ),
    (
        "dataset blake3 not hex",
        lambda m: _set(m["arguments"][3], blake3="0" * 63),
        r"arguments\[3\]\.blake3: expected 64 lowercase hex digits",
    ),
    (
        "dataset blake3 upper case",
        lambda m: _set(m["arguments"][3], blake3="AB" * 32),
        r"arguments\[3\]\.blake3: expected 64 lowercase hex digits",
    ),
    (
        "example without blake3",
        lambda m: _examples(m)["outputs"][0].pop("blake3"),
        r"examples\.outputs\[0\]: missing required key 'blake3'",
    ),
    (
        "input with a dataset",
        lambda m: _set(m["arguments"][0], dataset="/x", blake3=HEX),
        r"arguments\[0\]\.dataset: an input has no dataset",
    ),
    # paths (§3.8)
    (
        "empty parameter path",
        lambda m: _set(m["arguments"][1], path=[]),
        r"arguments\[1\]\.path: a parameter path .* cannot be empty",
    ),
    (
        "step 0",
        lambda m: _set(m["arguments"][1], path=["layer_1", 0]),
        r"arguments\[1\]\.path\[1\]: integer path steps .* in \[1, 2147483648\], found 0",
    ),
    (
        # Issue 39: the schema admits 2^31, and the tree built a tuple that long (MemoryError).
        "step beyond the tree",
        lambda m: _set(m["arguments"][1], path=["layer_1", 2**31]),
        r"parameter: path \['layer_1', 2147483648\] has the position 2147483648 below "
        r"\['layer_1'\], but the parameter tree lists only \d+ paths",
    ),
    (
        "step above 2^31",
        lambda m: _set(m["arguments"][1], path=["layer_1", 2**31 + 1]),
        r"arguments\[1\]\.path\[1\]: .*found 2147483649",
    ),
    # echo_of (§3.4)
    (
        "echo out of range",
        lambda m: _set(m["results"][0], echo_of=7),
        r"results\[0\]\.echo_of: expected an integer in \[0, 6\], found 7",
    ),
    (
        "echo changes the shape",
        lambda m: _set(m["results"][0], echo_of=0),
        r"results\[0\]: echo_of argument 0 \(x, f32 \[5, 2\]\) but the result is f32 \[5, 3\]",
    ),
    (
        "echo changes the dtype",
        lambda m: _set(m["results"][0], echo_of=0, shape=[5, 2], dtype="f64"),
        r"results\[0\]: echo_of argument 0 .* result is f64",
    ),
    (
        "echo loses the batch axis",
        lambda m: _set(m["results"][0], echo_of=0, shape=[5, 2], batch_axis=None),
        r"results\[0\]\.batch_axis: expected 0",
    ),
    (
        "no path and no echo",
        lambda m: _set(m["results"][0], paths=[]),
        r"results\[0\]\.paths: a result needs at least one output path",
    ),
    # batch (§3.6)
    (
        "train mode, independent samples",
        lambda m: _set(m, mode="train"),
        r"batch\.samples_independent: expected false in train mode",
    ),
    # the returned state is the state tree (§3.5)
    (
        "state result beside the tree",
        lambda m: m["results"].append(
            {"index": 1, "paths": [["state", "layer_2", "extra"]], "dtype": "f32", "shape": [3]}
        ),
        r"results\[1\]\.paths\[0\]: \['state', 'layer_2', 'extra'\] is not the path of a state",
    ),
    (
        "state result of another shape",
        lambda m: (
            m["aliases"].pop(1),
            m["results"].append(
                {
                    "index": 1,
                    "paths": [["state", "layer_2", "running_var"]],
                    "dtype": "f32",
                    "shape": [4],
                }
            ),
        ),
        r"results\[1\]\.paths\[0\]: returns f32 \[4\] for state\.layer_2\.running_var",
    ),
    (
        "alias of another shape into the state",
        lambda m: _set(m["aliases"][1], argument=1),
        r"aliases\[1\]\.path: returns f32 \[2, 3\] for state\.layer_2\.running_var",
    ),
    (
        "alias of another dtype into the state",
        lambda m: (_set(m["arguments"][2], dtype="f64"), _set(m["aliases"][1], argument=2)),
        r"aliases\[1\]\.path: returns f64 \[3\] for state\.layer_2\.running_var",
    ),
    # producer (§3.2)
    (
        "JuliaBridge.jl without Julia",
        lambda m: _set(m["producer"], made_with_julia=False, julia=None, lux=None, reactant=None),
        r"producer\.made_with_julia: made_with_julia is false but tool is 'JuliaBridge\.jl'",
    ),
    (
        "made with Julia, no Julia version",
        lambda m: _set(m["producer"], julia=None),
        r"producer\.julia: expected the version string",
    ),
    (
        "made without Julia, with a Lux version",
        lambda m: _set(m["producer"], tool="py", made_with_julia=False, julia=None, reactant=None),
        r"producer\.lux: expected null for a bundle made without Julia",
    ),
    # examples (§3.7)
    (
        "example input is a parameter",
        lambda m: _examples(m)["inputs"].append(
            {"argument": 1, "dataset": "/examples/inputs/1", "blake3": HEX}
        ),
        r"examples\.inputs\[1\]\.argument: argument 1 is a parameter, expected an input",
    ),
    (
        "example misses an input",
        lambda m: _examples(m).update(inputs=[]),
        r"examples\.inputs: no value for input argument\(s\) \[0\]",
    ),
    (
        "example output twice",
        lambda m: _examples(m)["outputs"].append(
            {"result": 0, "dataset": "/examples/outputs/again", "blake3": HEX}
        ),
        r"examples\.outputs\[1\]\.result: result 0 is also given by examples\.outputs\[0\]",
    ),
    (
        "example without outputs",
        lambda m: _examples(m).update(outputs=[]),
        r"examples\.outputs: expected at least one reference output",
    ),
    (
        "example reuses a parameter's dataset",
        lambda m: _set(_examples(m)["outputs"][0], dataset="/params/layer_1/bias"),
        r"examples\.outputs\[0\]\.dataset: /params/layer_1/bias is also used by arguments\[2\]",
    ),
    (
        "negative rtol",
        lambda m: _examples(m).update(rtol=-1),
        r"examples\.rtol: expected a number in \[0, 1e6\)",
    ),
    # static_state (§3.11)
    (
        "static value is an object",
        lambda m: _set(m["static_state"][0], value={"x": 1}),
        r"static_state\[0\]\.value: expected a JSON scalar",
    ),
    (
        "static integer beyond UInt64",
        lambda m: _set(m["static_state"][0], value=2**64),
        r"static_state\[0\]\.value: integer .* fits neither Int64 nor UInt64",
    ),
    (
        "static value without value",
        lambda m: m["static_state"][0].pop("value"),
        r"static_state\[0\]: missing required key 'value'",
    ),
    (
        "static without julia_type",
        lambda m: _set(m["static_state"][0], julia_type=""),
        r"static_state\[0\]\.julia_type: expected a Julia type name",
    ),
    (
        "static at the root",
        lambda m: _set(m["static_state"][0], path=[]),
        r"static_state\[0\]\.path: .* cannot be empty",
    ),
    (
        "static leaf is a state argument",
        lambda m: _set(m["static_state"][0], path=["layer_2", "running_mean"]),
        r"static_state\[0\]\.path: \['layer_2', 'running_mean'\] is also a state argument",
    ),
    (
        "static leaf below a state argument",
        lambda m: _set(m["static_state"][0], path=["layer_2", "running_mean", "x"]),
        r"static_state\[0\]\.path: .* is below the state argument \['layer_2', 'running_mean'\]",
    ),
    (
        "static leaf above a state argument",
        lambda m: _set(m["static_state"][0], path=["layer_2"]),
        r"static_state\[0\]\.path: \['layer_2'\] is above the state argument",
    ),
    (
        "static leaf twice",
        lambda m: m["static_state"].append(copy.deepcopy(m["static_state"][0])),
        r"static_state: a path appears twice",
    ),
    (
        "static leaf inside an empty container",
        lambda m: _set(m["static_state"][0], path=["layer_1", "training"]),
        r"empty\.state: \['layer_1'\] is listed as an empty container but holds or is a leaf",
    ),
]


@pytest.mark.parametrize(
    ("change", "needle"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_format_3_rules(change: Callable[[dict[str, Any]], Any], needle: str) -> None:
    with pytest.raises(juliabridge.ManifestError, match=needle):
        parse_manifest(_mutated(change))


def test_unsafe_artifact_name() -> None:
    with pytest.raises(juliabridge.UnsafeBundleError, match=r"module\.artifact\.file"):
        parse_manifest(_mutated(lambda m: _set(m["module"]["artifact"], file="../x.mlirbc")))


def test_newer_format_is_refused_with_the_versions_read() -> None:
    with pytest.raises(juliabridge.BundleVersionError, match=r"newer than .* reads \(1, 2, 3\)"):
        parse_manifest(_mutated(lambda m: m.update(format_version=4)))


def test_format_1_keeps_its_own_requirements() -> None:
    m1 = as_format1(spec_example())
    m1["weights"].pop("sha256")
    with pytest.raises(juliabridge.ManifestError, match=r"weights: missing required key 'sha256'"):
        parse_manifest(m1)
    m1 = as_format1(spec_example())
    m1["results"][0].update(paths=[], echo_of=0, shape=[5, 2])
    with pytest.raises(juliabridge.ManifestError, match=r"results\[0\]\.paths: a result needs"):
        parse_manifest(m1)


def test_strictness_applies_to_format_1() -> None:
    m1 = as_format1(spec_example())
    m1["mode"] = "train"
    with pytest.raises(juliabridge.ManifestError, match="expected false in train mode"):
        parse_manifest(m1)


@pytest.mark.parametrize(
    ("dtypes_", "want"),
    [
        (["f32"], (1e-4, 1e-5)),
        (["f64", "f32"], (1e-4, 1e-5)),
        (["bf16", "f64"], (1e-2, 1e-3)),
        (["complex<f64>"], (1e-10, 1e-12)),
        (["i32", "i1"], (0.0, 0.0)),
    ],
)
def test_default_tolerances_follow_the_least_precise_output(
    dtypes_: list[str], want: tuple[float, float]
) -> None:
    def change(m: dict[str, Any]) -> None:
        m["results"] = [
            {"index": k, "paths": [["output", k + 1]], "dtype": d, "shape": []}
            for k, d in enumerate(dtypes_)
        ]
        m["examples"] = {
            "inputs": [{"argument": 0, "dataset": "/examples/inputs/0", "blake3": HEX}],
            "outputs": [
                {"result": k, "dataset": f"/examples/outputs/{k}", "blake3": HEX}
                for k in range(len(dtypes_))
            ],
        }

    ex = parse_manifest(_mutated(change)).examples
    assert ex is not None and (ex.rtol, ex.atol) == want


def test_bounded_steps_accept_the_bound() -> None:
    # The schema's bound is 2^31; a position is also at most the number of paths of its tree
    # (issue 39: the tree is built with a slot per position), so one input may be at 1 only.
    with pytest.raises(juliabridge.ManifestError, match=r"position 2147483648 .* lists only 1 "):
        parse_manifest(_mutated(lambda m: _set(m["arguments"][0], path=[2**31])))
    with pytest.raises(juliabridge.ManifestError, match=r"position 2 .* lists only 1 paths"):
        parse_manifest(_mutated(lambda m: _set(m["arguments"][0], path=[2])))
    m = parse_manifest(_mutated(lambda m: _set(m["arguments"][0], path=[1])))
    assert m.arguments[0].path == (1,)


def test_echo_may_have_no_path() -> None:
    def change(m: dict[str, Any]) -> None:
        m["results"].append(
            {
                "index": 1,
                "paths": [],
                "dtype": "f32",
                "shape": [5, 2],
                "batch_axis": 0,
                "echo_of": 0,
            }
        )

    r = parse_manifest(_mutated(change)).results[1]
    assert r.echo_of == 0 and r.paths == () and "argument 0 returned unchanged" in r.label


# --- dataset digests (§4.1) ----------------------------------------------------------------


def test_canonical_bytes_are_the_spec_encoding() -> None:
    # Written from the spec with struct, independently of numpy's memory layout.
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    assert bytes(canonical_bytes(a, "f32")) == struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    # Row-major order even for a transposed view, little-endian even for big-endian data.
    assert bytes(canonical_bytes(a.T, "f32")) == struct.pack("<6f", 1, 4, 2, 5, 3, 6)
    assert bytes(canonical_bytes(a.astype(">f4"), "f32")) == struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    bf = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    assert bytes(canonical_bytes(bf, "bf16")) == struct.pack("<2H", 0x3FC0, 0xC000)
    half = np.array([1.0], dtype=np.float16)
    assert bytes(canonical_bytes(half, "f16")) == struct.pack("<H", 0x3C00)
    assert bytes(canonical_bytes(np.array([True, False, True]), "i1")) == b"\x01\x00\x01"
    c = np.array([1 + 2j], dtype=np.complex128)
    assert bytes(canonical_bytes(c, "complex<f64>")) == struct.pack("<2d", 1, 2)
    assert bytes(canonical_bytes(np.int64(-2), "i64")) == struct.pack("<q", -2)
    empty = np.zeros((0, 3), np.float32)
    assert dataset_digest(empty, "f32") == blake3.blake3(b"").hexdigest()
    assert dataset_digest(empty, "f32", "sha256") == hashlib.sha256(b"").hexdigest()
    # BLAKE3's published digest of the empty input (BLAKE3-team/BLAKE3 test_vectors.json).
    assert dataset_digest(empty, "f32") == (
        "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    )
    a_bytes = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    assert dataset_digest(a, "f32") == blake3.blake3(a_bytes).hexdigest()
    assert dataset_digest(a.T.copy().T, "f32", "sha256") == hashlib.sha256(a_bytes).hexdigest()
    with pytest.raises(juliabridge.BundleError, match=r"unknown dataset digest algorithm 'md5'"):
        dataset_digest(a, "f32", "md5")


def test_digest_does_not_depend_on_hdf5_storage(tmp_path: Path) -> None:
    from juliabridge.bundle.weights import open_weights

    value = np.arange(64, dtype=np.float16).reshape(8, 8)
    with h5py.File(tmp_path / "w.h5", "w") as f:
        f.create_dataset("/plain", data=value.view(np.uint16)).attrs["dtype"] = "f16"
        f.create_dataset(
            "/chunked", data=value.view(np.uint16), chunks=(2, 4), compression="gzip", shuffle=True
        ).attrs["dtype"] = "f16"
        f.create_dataset("/native", data=value).attrs["dtype"] = "f16"  # IEEE half, §4
    with open_weights(tmp_path / "w.h5") as f:
        values = [
            f.read_array(name, (8, 8), "f16", name) for name in ("/plain", "/chunked", "/native")
        ]
    stored = value.view("<u2").tobytes()
    assert {dataset_digest(v, "f16") for v in values} == {blake3.blake3(stored).hexdigest()}
    assert {dataset_digest(v, "f16", "sha256") for v in values} == {
        hashlib.sha256(stored).hexdigest()
    }


# --- writing and loading -------------------------------------------------------------------


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return make_dense_bn(tmp_path / "dense_bn.bundle", portable_artifact=True)


def _doubled_text(bundle: Path) -> None:
    """Make the text module compute 2 * the output (same signature), and keep its sha256 right."""
    text = (bundle / "model.mlir").read_text()
    lines = text.splitlines()
    ret = next(i for i, line in enumerate(lines) if line.strip().startswith("return "))
    value, typ = lines[ret].strip()[len("return ") :].split(" : ")
    lines[ret : ret + 1] = [
        f"    %doubled = stablehlo.add {value}, {value} : {typ}",
        f"    return %doubled : {typ}",
    ]
    (bundle / "model.mlir").write_text("\n".join(lines) + "\n")
    edit_manifest(bundle, lambda m: m["module"].update(sha256=sha256_file(bundle / "model.mlir")))


def _newer_writer(bundle: Path) -> None:
    """Record a writer whose StableHLO is newer than this jaxlib's: the artifact is read first."""
    edit_manifest(bundle, lambda m: m["module"]["artifact"].update(stablehlo_version="99.0.0"))


def _broken_text(bundle: Path) -> None:
    """Make the text module a syntax error (for every jaxlib), and keep its sha256 right."""
    text = (bundle / "model.mlir").read_text().replace("return ", "return ,, ", 1)
    (bundle / "model.mlir").write_text(text)
    edit_manifest(bundle, lambda m: m["module"].update(sha256=sha256_file(bundle / "model.mlir")))


def _output(path: Path, **kw: Any) -> np.ndarray:
    model = juliabridge.import_lux(path, backend="xla", **kw)
    x = dense_bn_arrays()[0]
    return np.asarray(model(x))


def test_writer_writes_format_3(bundle: Path) -> None:
    raw = json.loads((bundle / "manifest.json").read_text())
    assert raw["format_version"] == 3
    assert "sha256" not in raw["weights"]
    art = raw["module"]["artifact"]
    assert art["file"] == "model.mlirbc" and art["target"] == artifact.ARTIFACT_TARGET
    assert art["stablehlo_version"] == artifact.installed_versions()[1]
    assert art["sha256"] == hashlib.sha256((bundle / "model.mlirbc").read_bytes()).hexdigest()
    # Digests of the stored data, read back with plain h5py (little-endian f32 here).
    with h5py.File(bundle / "weights.h5") as f:
        for a in raw["arguments"]:
            if "dataset" in a:
                stored = np.asarray(f[a["dataset"]][()], dtype="<f4").tobytes()
                assert a["blake3"] == blake3.blake3(stored).hexdigest(), a["dataset"]
                assert "sha256" not in a
        for e in raw["examples"]["inputs"] + raw["examples"]["outputs"]:
            stored = np.asarray(f[e["dataset"]][()], dtype="<f4").tobytes()
            assert e["blake3"] == blake3.blake3(stored).hexdigest(), e["dataset"]
            assert "sha256" not in e


def test_artifact_first_when_the_writer_is_newer(bundle: Path) -> None:
    # The text now disagrees with the artifact: the reference answer proves what was compiled.
    _doubled_text(bundle)
    _newer_writer(bundle)
    model = juliabridge.import_lux(bundle, backend="xla")
    assert model.bundle.module_source == "artifact"
    assert model.metadata["module_source"] == "artifact"
    note = model.bundle.module_source_note
    assert "model.mlirbc" in note and "written at StableHLO 99.0.0, newer than" in note
    np.testing.assert_allclose(
        np.asarray(model(dense_bn_arrays()[0])), dense_bn_reference(dense_bn_arrays()), rtol=1e-5
    )


def test_text_first_when_this_jaxlib_reads_the_writers_version(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written here, so at this jaxlib's version: the text is parsed in-process and no artifact
    # reader process starts (one that would crash is installed to prove it).
    _doubled_text(bundle)
    crash = tmp_path / "crash.py"
    crash.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.setattr(artifact, "_CHILD", crash)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = juliabridge.import_lux(bundle, backend="xla")
    assert model.bundle.module_source == "text" == model.metadata["module_source"]
    assert "read only if the text does not parse" in model.bundle.module_source_note
    np.testing.assert_allclose(
        np.asarray(model(dense_bn_arrays()[0])),
        2 * dense_bn_reference(dense_bn_arrays()),
        rtol=1e-5,
    )


def test_text_that_does_not_parse_falls_back_to_the_artifact(bundle: Path) -> None:
    _broken_text(bundle)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = open_bundle(bundle)
    assert b.module_source == "artifact"
    assert b.module_source_note.startswith("portable artifact model.mlirbc (VHLO target 1.17.0")
    assert b.module_source_note.endswith("the text model.mlir does not parse in this jaxlib")
    assert b.module.origin.endswith("model.mlirbc")
    np.testing.assert_allclose(_output(bundle), dense_bn_reference(dense_bn_arrays()), rtol=1e-5)
    # In-process for trusted bundles, with the same outcome.
    assert open_bundle(bundle, trust=True).module_source == "artifact"


def test_an_edited_unverified_text_is_never_replaced_by_the_artifact(bundle: Path) -> None:
    """Issue 29 item 9: with verify_checksums=False and a model.mlir edited into garbage, the
    import quietly loaded model.mlirbc, the module as exported, undoing the edit unseen."""
    text = (bundle / "model.mlir").read_text()
    (bundle / "model.mlir").write_text(text.replace("return ", "return ,, ", 1))  # sha not resealed
    with pytest.raises(juliabridge.MLIRParseError) as e:
        open_bundle(bundle, verify_checksums=False)
    assert str(e.value).endswith(
        "The text differs from the one exported (its sha256 is not the manifest's), so the "
        "portable artifact model.mlirbc, the module as exported, is not read in its place; fix "
        "the text, or restore it to use the artifact"
    )
    # An edit that parses is what runs, and inspect says the artifact is not its fallback.
    (bundle / "model.mlir").write_text(text)
    _doubled_text(bundle)
    edit_manifest(bundle, lambda m: m["module"].update(sha256="0" * 64))
    b = open_bundle(bundle, verify_checksums=False)
    assert b.module_source == "text"
    assert b.module_source_note.endswith(
        "the portable artifact model.mlirbc is not read in its place"
    )
    np.testing.assert_allclose(
        _output(bundle, verify_checksums=False),
        2 * dense_bn_reference(dense_bn_arrays()),
        rtol=1e-5,
    )
    # Restored: the unchanged text falls back as before.
    (bundle / "model.mlir").write_text(text)
    edit_manifest(bundle, lambda m: m["module"].update(sha256=sha256_file(bundle / "model.mlir")))
    _broken_text(bundle)
    assert open_bundle(bundle, verify_checksums=False).module_source == "artifact"


def test_an_edited_text_the_artifact_overrides_is_warned_about(bundle: Path) -> None:
    _newer_writer(bundle)
    (bundle / "model.mlir").write_text((bundle / "model.mlir").read_text() + "// edited\n")
    with pytest.warns(RuntimeWarning, match="changed since export, but this bundle's portable"):
        open_bundle(bundle, verify_checksums=False)


def test_text_and_artifact_both_unreadable_names_both(bundle: Path) -> None:
    _broken_text(bundle)
    (bundle / "model.mlirbc").write_bytes(b"ML\xefR not really bytecode")
    digest = sha256_file(bundle / "model.mlirbc")
    edit_manifest(bundle, lambda m: m["module"]["artifact"].update(sha256=digest))
    with pytest.raises(juliabridge.MLIRParseError) as info:
        open_bundle(bundle)
    msg = str(info.value)
    assert re.search(
        r"model\.mlir: the MLIR does not parse: .*its portable artifact could not be "
        r"read either: .*model\.mlirbc: not a readable StableHLO portable",
        msg,
    ), msg


def test_policy_failure_of_the_text_is_not_retried_on_the_artifact(bundle: Path) -> None:
    # Only a text this jaxlib cannot parse falls back: a module the policy refuses stays refused.
    text = (
        (bundle / "model.mlir")
        .read_text()
        .replace("return ", "stablehlo.custom_call @evil_kernel() : () -> ()\n    return ", 1)
    )
    (bundle / "model.mlir").write_text(text)
    edit_manifest(bundle, lambda m: m["module"].update(sha256=sha256_file(bundle / "model.mlir")))
    with pytest.raises(juliabridge.UnsupportedModuleError, match=r"model\.mlir: .*evil_kernel"):
        open_bundle(bundle)


def test_trusted_bundles_read_the_artifact_in_process(bundle: Path) -> None:
    _doubled_text(bundle)
    _newer_writer(bundle)
    want = dense_bn_reference(dense_bn_arrays())
    np.testing.assert_allclose(_output(bundle, trust=True), want, rtol=1e-5)
    assert open_bundle(bundle, trust=True).module_source == "artifact"


def test_unreadable_target_falls_back_to_the_text(bundle: Path) -> None:
    _doubled_text(bundle)
    edit_manifest(
        bundle,
        lambda m: m["module"]["artifact"].update(target="99.0.0", stablehlo_version="99.0.0"),
    )
    b = open_bundle(bundle)
    assert b.module_source == "text"
    assert "target 99.0.0 is newer than this jaxlib's StableHLO" in b.module_source_note
    np.testing.assert_allclose(
        _output(bundle), 2 * dense_bn_reference(dense_bn_arrays()), rtol=1e-5
    )


def test_artifact_that_does_not_deserialize_falls_back_with_a_warning(bundle: Path) -> None:
    _doubled_text(bundle)
    _newer_writer(bundle)
    (bundle / "model.mlirbc").write_bytes(b"ML\xefR not really bytecode")
    digest = sha256_file(bundle / "model.mlirbc")
    edit_manifest(bundle, lambda m: m["module"]["artifact"].update(sha256=digest))
    with pytest.warns(RuntimeWarning, match=r"model\.mlirbc: not a readable StableHLO portable"):
        b = open_bundle(bundle)
    assert b.module_source == "text" and "could not be read" in b.module_source_note
    assert b.module.origin == str(bundle / "model.mlir")  # messages name the file parsed


def test_a_tampered_text_beside_the_artifact_read_first_fails_verification(
    bundle: Path,
) -> None:
    # The text is not parsed when a newer writer's artifact is read first, but it is part of
    # the bundle: verification covers it like every other file.
    _newer_writer(bundle)
    (bundle / "model.mlir").write_text((bundle / "model.mlir").read_text() + "// edited\n")
    with pytest.raises(juliabridge.ChecksumError, match=r"model\.mlir: sha256 is [0-9a-f]{64} but"):
        open_bundle(bundle)


def test_the_vjp_module_is_read_after_a_module_whose_artifact_is_read_first(
    bundle: Path,
) -> None:
    from juliabridge.backends.vjp_text import derive_vjp_text
    from juliabridge.bundle.write.vjp_bundle import add_vjp

    add_vjp(bundle, derive=derive_vjp_text)
    _newer_writer(bundle)
    b = open_bundle(bundle)
    assert b.module_source == "artifact"
    assert b.vjp_source == "text"
    vjp = b.vjp_module()
    assert vjp is not None and vjp.origin == str(bundle / "vjp.mlir")


def test_a_format_1_bundle_says_it_has_no_artifact(tmp_path: Path) -> None:
    b = open_bundle(to_format1(make_dense_bn(tmp_path / "b.bundle")))
    assert b.module_source == "text"
    assert b.module_source_note == "format 1 bundles have no portable artifact"


def test_artifact_reader_crash_is_contained(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a crafted artifact does to a process (a segfault) happens in the child only.
    crash = tmp_path / "crash.py"
    crash.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.setattr(artifact, "_CHILD", crash)
    _newer_writer(bundle)
    with pytest.warns(RuntimeWarning, match=r"stopped before answering \(killed by signal 11"):
        b = open_bundle(bundle)
    assert b.module_source == "text"


def _nested_case_module(depth: int) -> str:
    """@main(tensor<i32>) -> tensor<f32> of `depth` nested stablehlo.case ops."""
    lines = ["func.func public @main(%arg0: tensor<i32>) -> tensor<f32> {"]
    for d in range(depth):
        lines.append(f'%r{d} = "stablehlo.case"(%arg0) ({{')
    lines.append("%c = stablehlo.constant dense<1.0> : tensor<f32>")
    lines.append("stablehlo.return %c : tensor<f32>")
    for d in reversed(range(depth)):
        lines.append("}) : (tensor<i32>) -> tensor<f32>")
        lines.append(f"stablehlo.return %r{d} : tensor<f32>" if d else "return %r0 : tensor<f32>")
    lines.append("}")
    return "\n".join(lines)


def test_artifact_text_gets_the_nesting_limit(bundle: Path) -> None:
    # Serialized from text the parser still takes; printed back it nests past the limit, and is
    # refused like a text module would be, not crashed on and not silently swapped for the text.
    deep = artifact.serialize(_nested_case_module(130)).data
    (bundle / "model.mlirbc").write_bytes(deep)
    _newer_writer(bundle)
    edit_manifest(
        bundle,
        lambda m: m["module"]["artifact"].update(sha256=sha256_file(bundle / "model.mlirbc")),
    )
    with pytest.raises(
        juliabridge.MLIRParseError, match=r"model\.mlirbc: brackets nest \d+ levels"
    ):
        open_bundle(bundle)


def test_artifact_gets_the_policy_and_signature_checks(bundle: Path) -> None:
    text = (
        "func.func public @main(%arg0: tensor<5x2xf32>) -> tensor<5x2xf32> {\n"
        "  %0 = stablehlo.custom_call @evil_kernel(%arg0) : (tensor<5x2xf32>) -> tensor<5x2xf32>\n"
        "  return %0 : tensor<5x2xf32>\n}\n"
    )
    (bundle / "model.mlirbc").write_bytes(artifact.serialize(text).data)
    _newer_writer(bundle)
    edit_manifest(
        bundle,
        lambda m: m["module"]["artifact"].update(sha256=sha256_file(bundle / "model.mlirbc")),
    )
    with pytest.raises(juliabridge.UnsupportedModuleError, match=r"model\.mlirbc: .*evil_kernel"):
        open_bundle(bundle)
    with pytest.raises(juliabridge.SignatureMismatchError, match=r"model\.mlirbc: @main has 1"):
        open_bundle(bundle, trust=True)


@pytest.mark.parametrize("which", ["model.mlirbc", "model.mlir"])
def test_both_forms_are_checksummed(bundle: Path, which: str) -> None:
    with open(bundle / which, "ab") as f:
        f.write(b"\n")
    with pytest.raises(juliabridge.ChecksumError, match=rf"{which}: sha256 is"):
        open_bundle(bundle)
    # Unchecked, the text (which still parses) is used, and the damaged artifact never read.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = open_bundle(bundle, verify_checksums=False)
    assert b.checksums_verified is False and b.module_source == "text"
    # Where the artifact comes first, the damaged one is not readable: the text, with a warning.
    _newer_writer(bundle)
    with pytest.warns(RuntimeWarning) if which == "model.mlirbc" else contextlib.nullcontext():
        assert open_bundle(bundle, verify_checksums=False).checksums_verified is False


@pytest.mark.parametrize("unreadable_target", [True, False])
def test_unused_artifact_is_checksummed_too(bundle: Path, unreadable_target: bool) -> None:
    # Not read at all (a target this jaxlib cannot read) or only kept as the text's fallback.
    if unreadable_target:
        edit_manifest(
            bundle,
            lambda m: m["module"]["artifact"].update(target="99.0.0", stablehlo_version="99.0.0"),
        )
    with open(bundle / "model.mlirbc", "ab") as f:
        f.write(b"x")
    with pytest.raises(juliabridge.ChecksumError, match=r"model\.mlirbc: sha256 is"):
        open_bundle(bundle)


@pytest.mark.parametrize("fmt", [3, 2])
def test_dataset_digests_are_verified_on_load(bundle: Path, fmt: int) -> None:
    algorithm = {3: "blake3", 2: "sha256"}[fmt]
    if fmt == 2:
        to_format2(bundle)
    np.testing.assert_allclose(
        _output(bundle), dense_bn_reference(dense_bn_arrays()), rtol=1e-5, atol=1e-6
    )
    assert juliabridge.verify(bundle, backend="xla").ok
    with h5py.File(bundle / "weights.h5", "r+") as f:
        f["/state/layer_2/running_var"][1] *= 2
    with pytest.raises(
        juliabridge.ChecksumError,
        match=rf"weights\.h5: state\.layer_2\.running_var .*the {algorithm} of its stored bytes is",
    ):
        juliabridge.import_lux(bundle, backend="xla")
    model = juliabridge.import_lux(bundle, backend="xla", verify_checksums=False)
    assert model.metadata["checksums_verified"] is False


def test_example_digests_are_verified(bundle: Path) -> None:
    with h5py.File(bundle / "weights.h5", "r+") as f:
        f["/examples/outputs/0"][0, 0] += 1
    with pytest.raises(juliabridge.ChecksumError, match=r"example output output \(/examples"):
        juliabridge.verify(bundle, backend="xla")


def test_dataset_without_dtype_attribute_is_refused(bundle: Path) -> None:
    with h5py.File(bundle / "weights.h5", "r+") as f:
        del f["/params/layer_1/bias"].attrs["dtype"]
    with pytest.raises(
        juliabridge.SignatureMismatchError, match=r"/params/layer_1/bias has no 'dtype' attribute"
    ):
        juliabridge.import_lux(bundle, backend="xla")


def test_other_files_in_the_directory_are_never_opened(bundle: Path) -> None:
    # A FIFO would block whoever opens it; a symlink may point anywhere.
    os.mkfifo(bundle / "stray.fifo")
    (bundle / "escape").symlink_to("/etc/passwd")
    (bundle / "model.mlir~").write_text("garbage")
    (bundle / "notes").mkdir()
    np.testing.assert_allclose(_output(bundle), dense_bn_reference(dense_bn_arrays()), rtol=1e-5)
    assert stat.S_ISFIFO(os.lstat(bundle / "stray.fifo").st_mode)


def test_static_state_is_exposed_not_passed(tmp_path: Path) -> None:
    path = _dense_bn_with(tmp_path, static_state=[(["layer_2", "training"], False, "Val{false}")])
    model = juliabridge.import_lux(path, backend="xla")
    assert model.metadata["static_state"] == [
        {"path": ("layer_2", "training"), "value": False, "julia_type": "Val{false}"}
    ]
    assert set(model.state["layer_2"]) == {"running_mean", "running_var"}
    _, new_state = model.apply(model.params, model.state, dense_bn_arrays()[0])
    assert jax.tree.structure(new_state) == jax.tree.structure(model.state)


def _dense_bn_with(tmp_path: Path, **kw: Any) -> Path:
    return make_dense_bn(tmp_path / "b.bundle", **({"portable_artifact": True} | kw))


def test_writer_without_artifact(tmp_path: Path) -> None:
    path = _dense_bn_with(tmp_path, portable_artifact=False)
    assert not (path / "model.mlirbc").exists()
    b = open_bundle(path)
    assert b.module_source == "text"
    assert b.module_source_note == "the bundle has no portable artifact of it"  # format 3
    assert b.module.origin == str(path / "model.mlir")  # messages name the file parsed


def test_writer_warns_when_the_module_has_no_artifact_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(text: str, **kw: Any) -> artifact.Serialized:
        raise juliabridge.UnsupportedModuleError("cannot serialize at 1.17.0")

    monkeypatch.setattr(artifact, "serialize", refuse)
    with pytest.warns(RuntimeWarning, match="no portable artifact written"):
        path = _dense_bn_with(tmp_path)
    assert "artifact" not in json.loads((path / "manifest.json").read_text())["module"]


def test_serialize_clamps_the_target_to_the_installed_version() -> None:
    current = artifact.installed_versions()[1]
    text = _nested_case_module(1)
    assert artifact.serialize(text, target="99.0.0").target == current
    assert artifact.serialize(text).target == artifact.ARTIFACT_TARGET


# --- echoed arguments: the real Reactant fixture (§3.4, §7) --------------------------------


@pytest.mark.parametrize("echo_paths", ["none", "in_output"])
def test_reactant_module_with_echoed_inputs(tmp_path: Path, echo_paths: str) -> None:
    # @main(a: 6x2, b: 2x4) -> (sum of matvecs: 4, a, b), the inputs returned through identity
    # transposes with tf.aliasing_output: honest only with echo_of.
    text = reactant_fixture_text("dense_matvec_slices.mlir")
    ref = FIXTURES["dense_matvec_slices.mlir"]
    a, b = ref.make_inputs(np.random.default_rng(0))
    if echo_paths == "none":
        paths: list[list[list[Any]]] = [[["output"]], [], []]
    else:
        paths = [[["output", 1]], [["output", 2]], []]
    path = write_bundle(
        tmp_path / "matvec.bundle",
        BundleDescription(
            name="dense_matvec_slices",
            mlir_text=text,
            arguments=[ArgumentSpec("input", [1], a), ArgumentSpec("parameter", ["weight"], b)],
            result_paths=paths,
            result_echoes=[None, 0, 1],
            example_outputs=ref.reference(a, b),
        ),
    )
    raw = json.loads((path / "manifest.json").read_text())
    assert [r.get("echo_of") for r in raw["results"]] == [None, 0, 1]
    model = juliabridge.import_lux(path, backend="xla")
    assert model.bundle.module_source == "text"  # written at this jaxlib's StableHLO
    want = ref.reference(a, b)
    y = model(a)
    if echo_paths == "none":
        np.testing.assert_allclose(np.asarray(y), want[0], rtol=ref.rtol, atol=ref.atol)
    else:
        np.testing.assert_allclose(np.asarray(y[0]), want[0], rtol=ref.rtol, atol=ref.atol)
        np.testing.assert_array_equal(np.asarray(y[1]), a)
    assert juliabridge.verify(path, backend="xla").ok
    # The same module described without echo_of cannot be loaded (format 1 had no way).
    raw["results"][2].pop("echo_of")
    (path / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(juliabridge.ManifestError, match=r"results\[2\]\.paths: a result needs"):
        open_bundle(path)


def test_artifacts_of_every_fixture_round_trip() -> None:
    # Each real Reactant module serializes at the spec's target and reads back to the same
    # signature and ops (through the child process, as a bundle would be read).
    from juliabridge.stablehlo import parse_module

    folder = skip_without_reactant_fixtures()
    names = reactant_fixture_names()
    modules = [parse_module(folder / n) for n in names]
    texts = artifact.deserialize(
        [artifact.serialize(m.text).data for m in modules], names, isolated=True
    )
    for name, m, text in zip(names, modules, texts, strict=True):
        assert isinstance(text, str), f"{name}: {text}"
        back = parse_module(text)
        assert (back.arguments, back.results, back.ops) == (m.arguments, m.results, m.ops), name


def test_artifact_child_imports_neither_jax_nor_juliabridge() -> None:
    # Its start-up cost is why it stays small: jaxlib's MLIR bindings only.
    child = Path(artifact.__file__).with_name("_artifact_child.py")
    data = artifact.serialize(_nested_case_module(1)).data
    done = subprocess.run(
        [sys.executable, "-P", "-X", "importtime", str(child)],
        input=len(data).to_bytes(8, "little") + data,
        capture_output=True,
        check=True,
    )
    assert done.stdout[:1] == b"T"
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.decode().splitlines()
        if line.startswith("import time:")
    }
    assert "jaxlib.mlir.dialects.stablehlo" in imported
    assert not {m for m in imported if m.split(".")[0] in ("jax", "juliabridge")}


def test_child_protocol_with_no_input_is_clean() -> None:
    child = Path(artifact.__file__).with_name("_artifact_child.py")
    done = subprocess.run([sys.executable, "-P", str(child)], input=b"", capture_output=True)
    assert done.returncode == 0 and done.stdout == b""


def test_deserialize_reports_each_artifact() -> None:
    good = artifact.serialize(_nested_case_module(1)).data
    texts = artifact.deserialize([good, b"junk", good], ["a", "b", "c"])
    assert isinstance(texts[0], str) and isinstance(texts[2], str)
    assert isinstance(texts[1], juliabridge.MLIRParseError) and str(texts[1]).startswith("b: ")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert artifact.deserialize([], []) == []


def test_bundle_written_by_another_jax_loads_here(tmp_path: Path) -> None:
    # The cross-version promise of §2.1. CI runs it with the other environment's interpreter;
    # here: JULIABRIDGE_OTHER_PYTHON=/path/to/python-with-jax-0.12 pytest -k another_jax
    other = os.environ.get("JULIABRIDGE_OTHER_PYTHON")
    if not other:
        pytest.skip("set JULIABRIDGE_OTHER_PYTHON to a Python with another jax release to run")
    repo = Path(__file__).resolve().parents[1]
    target = tmp_path / "other.bundle"
    code = (
        "import sys, jax; from pathlib import Path; "
        "from tests.bundle_factory import make_dense_bn; "
        f"make_dense_bn(Path({str(target)!r}), portable_artifact=True); print(jax.__version__)"
    )
    done = subprocess.run(
        [other, "-c", code],
        cwd=repo,
        env=dict(os.environ, PYTHONPATH=str(repo)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] != jax.__version__, "the other Python has the same jax"
    b = open_bundle(target)
    # A newer writer's bundle is read through its artifact, an older one's through its text.
    writer = json.loads((target / "manifest.json").read_text())["module"]["artifact"]
    newer = tuple(map(int, writer["stablehlo_version"].split("."))) > tuple(
        map(int, artifact.installed_versions()[1].split("."))
    )
    assert b.module_source == ("artifact" if newer else "text"), b.module_source_note
    np.testing.assert_allclose(_output(target), dense_bn_reference(dense_bn_arrays()), rtol=1e-5)
    assert juliabridge.verify(target, backend="xla").ok


def test_corrupted_artifacts_give_text_or_a_typed_error() -> None:
    # Flipped, dropped and inserted bytes: each comes back as text (then checked like any
    # module) or as an MLIRParseError, whatever the bytecode reader does with it.
    good = artifact.serialize(_nested_case_module(3)).data
    rng = np.random.default_rng(1)
    cases = []
    for k in range(24):
        b = bytearray(good)
        pos = int(rng.integers(len(b)))
        if k % 3 == 0:
            b[pos] = int(rng.integers(256))
        elif k % 3 == 1:
            del b[pos:]
        else:
            b[pos:pos] = bytes(rng.integers(0, 256, 4).tolist())
        cases.append(bytes(b))
    texts = artifact.deserialize(cases, [f"case {k}" for k in range(len(cases))])
    assert len(texts) == len(cases)
    for k, text in enumerate(texts):
        assert isinstance(text, str | juliabridge.MLIRParseError), k
        if isinstance(text, juliabridge.MLIRParseError):
            assert str(text).startswith(f"case {k}: ")
