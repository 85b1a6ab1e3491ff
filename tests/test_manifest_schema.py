"""The published JSON Schema of manifest.json (docs/bundle-manifest.schema.json) against the
declarations it is generated from (juliabridge/bundle/manifest/schema.py) and the reader.

The schema is checked with the `jsonschema` package, an implementation independent of ours:
the manifests juliabridge ships, writes and documents are valid, and each broken manifest the
reader refuses for a structural reason is refused by the schema too.
"""

from __future__ import annotations

import copy
import importlib.machinery
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import juliabridge
from juliabridge.bundle.manifest import parse_manifest, schema, write_schema
from tests.bundle_factory import make_dense_bn, to_format1, to_format2
from tests.test_manifest import spec_example, spec_example_with_aliases

jsonschema = pytest.importorskip("jsonschema")

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "docs" / "bundle-manifest.schema.json"
EXAMPLES = sorted((REPO / "juliabridge" / "examples").glob("*.bundle/manifest.json"))


@pytest.fixture(scope="module")
def validator() -> Any:
    doc = json.loads(SHIPPED.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(doc)
    return jsonschema.Draft7Validator(doc)


def _errors(validator: Any, manifest: dict[str, Any]) -> list[str]:
    return [e.message for e in validator.iter_errors(manifest)]


def test_the_shipped_schema_is_the_one_the_declarations_generate() -> None:
    assert SHIPPED.read_text(encoding="utf-8") == schema.schema_text(), (
        "docs/bundle-manifest.schema.json and juliabridge/bundle/manifest/schema.py differ; regenerate: "
        "python -m juliabridge.bundle.manifest.write_schema > docs/bundle-manifest.schema.json"
    )


def test_the_command_prints_the_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "juliabridge.bundle.manifest.write_schema"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert out.stdout == schema.schema_text()
    assert out.stderr == ""


def test_write_schema_writes_the_shipped_schema(capsys: pytest.CaptureFixture[str]) -> None:
    write_schema.main()
    assert capsys.readouterr() == (SHIPPED.read_text(encoding="utf-8"), "")


def test_the_declarations_built_afresh_are_the_shipped_schema() -> None:
    """schema.py's declarations (MANIFEST and the nodes and helpers it is built from) run again
    here, inside the test, not only when juliabridge was first imported: they write the shipped
    schema and refuse empty state paths with their own messages."""
    loader = importlib.machinery.SourceFileLoader(schema.__name__, schema.__file__)
    fresh = {"__name__": schema.__name__, "__package__": schema.__package__}
    exec(loader.get_code(schema.__name__), fresh)
    assert fresh["schema_text"]() == SHIPPED.read_text(encoding="utf-8")
    manifest = fresh["MANIFEST"]
    good = spec_example()
    assert manifest.check(copy.deepcopy(good), "", 3) == schema.MANIFEST.check(good, "", 3)
    for change, where, why in (
        (
            lambda m: m["static_state"][0].update(path=[]),
            "static_state[0].path",
            "a state path names a leaf inside st, so it cannot be empty",
        ),
        (
            lambda m: m["empty"].update(params=[[]]),
            "empty.params[0]",
            "the root cannot be listed as an empty container",
        ),
    ):
        broken = copy.deepcopy(good)
        change(broken)
        with pytest.raises(juliabridge.ManifestError) as e:
            manifest.check(broken, "", 3)
        assert str(e.value) == f"manifest.json: {where}: {why}"


def test_the_schema_tells_the_versions_apart() -> None:
    doc = schema.json_schema()
    v1, v2 = doc["definitions"]["manifest_v1"], doc["definitions"]["manifest_v2"]
    assert "static_state" in v2["properties"] and "static_state" not in v1["properties"]
    assert v1["properties"]["format_version"] == {"const": 1}
    assert "sha256" in doc["definitions"]["weights_file_v1"]["required"]
    assert "sha256" not in doc["definitions"]["weights_file_v2"]["required"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_the_shipped_example_bundles_are_valid(validator: Any, path: Path) -> None:
    m = json.loads(path.read_text(encoding="utf-8"))
    assert _errors(validator, m) == []
    parse_manifest(m)


def test_there_is_an_example_bundle() -> None:
    assert EXAMPLES, "juliabridge/examples has no *.bundle"


def test_the_spec_example_is_valid(validator: Any) -> None:
    assert _errors(validator, spec_example()) == []


@pytest.mark.parametrize("version", [1, 2, 3])
def test_what_the_python_writer_writes_is_valid(
    validator: Any, tmp_path: Path, version: int
) -> None:
    bundle = make_dense_bn(tmp_path / "b.bundle", portable_artifact=version > 1)
    if version == 1:
        to_format1(bundle)
    if version == 2:
        to_format2(bundle)
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["format_version"] == version
    assert _errors(validator, m) == []


def _mutated(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    m = copy.deepcopy(spec_example_with_aliases())
    change(m)
    return m


def _drop_digest(m: dict[str, Any]) -> None:
    del m["arguments"][1]["blake3"]


def _v2_digest_as_blake3(m: dict[str, Any]) -> None:
    """A format-2 manifest whose datasets carry format 3's key instead of their sha256."""
    m["format_version"] = 2


def _examples(**change: Any) -> Callable[[dict[str, Any]], None]:
    def apply(m: dict[str, Any]) -> None:
        entry = {"dataset": "/examples/x", "blake3": "0" * 64}
        out = {"dataset": "/examples/y", "blake3": "1" * 64}
        m["examples"] = {
            "inputs": [{"argument": 0, **entry}],
            "outputs": [{"result": 0, **out}],
        } | change

    return apply


def _v1_without_weights_sha(m: dict[str, Any]) -> None:
    m["format_version"] = 1
    m["weights"].pop("sha256", None)


# Broken manifests whose fault is in one object: both the schema and the reader refuse them.
STRUCTURAL: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
    ("format", lambda m: m.update(format="other")),
    ("format_version type", lambda m: m.update(format_version="1")),
    ("format_version 0", lambda m: m.update(format_version=0)),
    ("name", lambda m: m.update(name="bad name!")),
    ("name with a trailing newline", lambda m: m.update(name="dense\n")),
    ("mode", lambda m: m.update(mode="eval")),
    ("index is a boolean", lambda m: m["arguments"][0].update(index=True)),
    ("role", lambda m: m["arguments"][1].update(role="weight")),
    ("dtype", lambda m: m["arguments"][1].update(dtype="f128")),
    ("negative dimension", lambda m: m["arguments"][1].update(shape=[-1, 3])),
    ("rank 65", lambda m: m["arguments"][1].update(shape=[1] * 65)),
    ("parameter without dataset", lambda m: m["arguments"][1].pop("dataset")),
    ("input with dataset", lambda m: m["arguments"][0].update(dataset="/x")),
    ("parameter without blake3", _drop_digest),
    ("format 2 parameter with blake3 instead of sha256", _v2_digest_as_blake3),
    ("parameter blake3 upper case", lambda m: m["arguments"][1].update(blake3="A" * 64)),
    ("empty parameter path", lambda m: m["arguments"][1].update(path=[])),
    ("path step 0", lambda m: m["arguments"][1].update(path=["layer_1", 0])),
    ("path step '..'", lambda m: m["arguments"][1].update(path=["layer_1", ".."])),
    ("path step with '/'", lambda m: m["arguments"][1].update(path=["a/b"])),
    ("path 65 deep", lambda m: m["arguments"][1].update(path=["a"] * 65)),
    ("relative dataset", lambda m: m["arguments"][1].update(dataset="params/w")),
    ("result without paths", lambda m: m["results"][0].update(paths=[])),
    ("output path", lambda m: m["results"][0].update(paths=[["y"]])),
    ("alias argument type", lambda m: m["aliases"][0].update(argument="5")),
    ("made_with_julia", lambda m: m["producer"].update(tool="someone")),
    ("julia version", lambda m: m["producer"].update(julia=None)),
    ("module sha256", lambda m: m["module"].update(sha256="abc")),
    ("module sha256 upper case", lambda m: m["module"].update(sha256="A" * 64)),
    ("file name with '/'", lambda m: m["module"].update(file="a/b")),
    ("file name '..'", lambda m: m["module"].update(file="..")),
    ("file name '~x'", lambda m: m["weights"].update(file="~x")),
    ("batch size 0", lambda m: m.update(batch={"size": 0, "samples_independent": True})),
    ("train mode with independent samples", lambda m: m.update(mode="train")),
    ("metadata", lambda m: m.update(metadata=[1])),
    ("format 1 weights without sha256", _v1_without_weights_sha),
    ("no reference output", _examples(outputs=[])),
    ("negative rtol", _examples(rtol=-1)),
    ("example dataset", _examples(inputs=[{"argument": 0, "dataset": "x", "blake3": "0" * 64}])),
    ("example without blake3", _examples(inputs=[{"argument": 0, "dataset": "/examples/x"}])),
    ("empty julia_type", lambda m: m["static_state"][0].update(julia_type="")),
    ("empty static path", lambda m: m["static_state"][0].update(path=[])),
    ("empty container at the root", lambda m: m.update(empty={"params": [[]]})),
    ("artifact version", lambda m: m["module"]["artifact"].update(target="1.17")),
    ("missing key", lambda m: m.pop("results")),
]


@pytest.mark.parametrize(("what", "change"), STRUCTURAL, ids=[w for w, _ in STRUCTURAL])
def test_structural_faults_are_refused_by_schema_and_reader(
    validator: Any, what: str, change: Callable[[dict[str, Any]], Any]
) -> None:
    m = _mutated(change)
    assert _errors(validator, m), f"the schema accepts a manifest with a bad {what}"
    with pytest.raises((juliabridge.ManifestError, juliabridge.UnsafeBundleError)):
        parse_manifest(m)


def test_the_example_mutation_starts_from_a_valid_manifest(validator: Any) -> None:
    m = _mutated(_examples())
    assert _errors(validator, m) == []
    assert parse_manifest(m).examples is not None


# Faults that relate one part of the manifest to another: JSON Schema cannot say them, the reader
# refuses them (module docstring of juliabridge/bundle/manifest/schema.py, docs/bundle-format.md).
RELATIONAL: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
    ("index out of order", lambda m: m["arguments"][0].update(index=3)),
    ("julia_shape not reversed", lambda m: m["arguments"][1].update(julia_shape=[2, 3])),
    ("duplicate path", lambda m: m["arguments"][2].update(path=["layer_1", "weight"])),
    ("shared dataset", lambda m: m["arguments"][2].update(dataset="/params/layer_1/weight")),
    ("alias argument out of range", lambda m: m["aliases"][0].update(argument=99)),
]


@pytest.mark.parametrize(("what", "change"), RELATIONAL, ids=[w for w, _ in RELATIONAL])
def test_relational_faults_are_the_readers(
    validator: Any, what: str, change: Callable[[dict[str, Any]], Any]
) -> None:
    m = _mutated(change)
    assert _errors(validator, m) == []
    with pytest.raises(juliabridge.ManifestError):
        parse_manifest(m)
