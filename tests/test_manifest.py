"""Manifest validation, and the spec's worked example kept valid (spec and reader in step)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

import juliabridge
from juliabridge.bundle.manifest import parse_manifest

SPEC = Path(__file__).resolve().parents[1] / "docs" / "bundle-format.md"


def spec_example() -> dict[str, Any]:
    """The JSON manifest of docs/bundle-format.md §7, with real-looking hashes."""
    text = SPEC.read_text()
    block = re.search(r"```json\n(.*?)```", text, re.S)
    assert block, "docs/bundle-format.md lost its worked example"
    return json.loads(block.group(1).replace("<64 hex>", "0" * 64))


def spec_example_with_aliases() -> dict[str, Any]:
    """§7's example as a writer that sees the running statistics removed from @main writes it
    (spec §2: readers accept both forms): results 1 and 2 become aliases of arguments 5 and 6."""
    m = spec_example()
    stats = m["results"][1:]
    m["results"] = m["results"][:1]
    m["aliases"] = [{"path": r["paths"][0], "argument": 5 + i} for i, r in enumerate(stats)]
    return m


def test_both_forms_of_the_spec_example_are_valid_and_say_the_same() -> None:
    plain, aliased = parse_manifest(spec_example()), parse_manifest(spec_example_with_aliases())
    assert [r.paths[0] for r in plain.results[1:]] == [a.path for a in aliased.aliases]
    assert [(a.path, a.argument) for a in aliased.aliases] == [
        (("state", "layer_2", "running_mean"), 5),
        (("state", "layer_2", "running_var"), 6),
    ]


def test_spec_example_is_a_valid_manifest() -> None:
    m = parse_manifest(spec_example())
    assert [a.label for a in m.arguments][:3] == [
        "x",
        "params.layer_1.weight",
        "params.layer_1.bias",
    ]
    # Lux 1.31.4 returns test-mode running statistics as ordinary results (spec §3.5, §7).
    assert [r.paths for r in m.results] == [
        (("output",),),
        (("state", "layer_2", "running_mean"),),
        (("state", "layer_2", "running_var"),),
    ]
    assert m.aliases == () and all(r.echo_of is None for r in m.results)
    assert m.batch is not None and m.batch.samples_independent


def test_spec_documents_every_dtype() -> None:
    text = SPEC.read_text()
    for t in juliabridge.support.dtypes.MLIR_TO_NUMPY:
        assert t in text, t


def _mutated(change: Any) -> dict[str, Any]:
    m = copy.deepcopy(spec_example_with_aliases())
    change(m)
    return m


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda m: m.update(format="other"), "not a juliabridge bundle"),
        (lambda m: m.update(format_version="1"), "expected int"),
        (lambda m: m.update(format_version=0), "expected 1"),
        (lambda m: m.update(name="bad name!"), "name"),
        (lambda m: m.update(mode="eval"), "mode"),
        (lambda m: m["arguments"][0].update(index=3), "index is 3"),
        (lambda m: m["arguments"][0].update(index=True), "expected int"),
        (lambda m: m["arguments"][1].update(role="weight"), "role"),
        (lambda m: m["arguments"][1].update(dtype="f128"), "unknown element type"),
        (lambda m: m["arguments"][1].update(julia_shape=[2, 3]), "not shape"),
        (lambda m: m["arguments"][1].update(shape=[-1, 3], julia_shape=[3, -1]), r"shape\[0\]"),
        (lambda m: m["arguments"][1].pop("dataset"), "dataset"),
        (lambda m: m["arguments"][2].update(path=["layer_1", "weight"]), "paths must be unique"),
        (lambda m: m["arguments"][2].update(path=["layer_1", "weight", "x"]), "leaf"),
        (lambda m: m["arguments"][1].update(path=["layer_1", 0]), "1-based"),
        (lambda m: m["arguments"][2].update(dataset="/params/layer_1/weight"), "also used"),
        (lambda m: m["results"][0].update(paths=[]), "at least one"),
        (lambda m: m["results"][0].update(paths=[["y"]]), "starts with 'output'"),
        (lambda m: m["aliases"][0].update(argument=99), "argument"),
        (
            lambda m: m["aliases"][1].update(path=["state", "layer_2", "running_mean"]),
            "appears once",
        ),
        (lambda m: m["producer"].update(tool="someone"), "made_with_julia is true"),
        (lambda m: m["module"].update(sha256="abc"), "hex"),
        (lambda m: m.update(batch={"size": 0, "samples_independent": True}), "batch.size"),
        (lambda m: m.update(metadata=[1]), "metadata"),
        (
            lambda m: m["arguments"][1].update(path=["\ud800", "weight"]),
            r"^manifest.json: arguments\[1\]\.path\[0\]: '\\ud800' is not valid Unicode",
        ),
        (
            lambda m: m["arguments"][0].update(dataset="/examples/inputs/0"),
            r"^manifest.json: arguments\[0\]\.dataset: an input has no dataset \(its example "
            r"value, if any, is in examples.inputs\)$",
        ),
        (
            lambda m: m["arguments"][1].pop("blake3"),
            r"^manifest.json: arguments\[1\]: missing required key 'blake3'$",
        ),
        (
            lambda m: m["producer"].update(lux=None),
            "^manifest.json: producer.lux: expected the version string of a bundle made with Julia$",
        ),
        (
            lambda m: m["producer"].update(
                tool="other", made_with_julia=False, julia=None, lux=None
            ),
            "^manifest.json: producer.reactant: expected null for a bundle made without Julia, "
            "found '0.2.280'$",
        ),
    ],
)
def test_invalid_manifests(change: Any, needle: str) -> None:
    with pytest.raises(juliabridge.ManifestError, match=needle):
        parse_manifest(_mutated(change))


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/b", "..", ""])
def test_unsafe_file_names(name: str) -> None:
    with pytest.raises(juliabridge.UnsafeBundleError):
        parse_manifest(_mutated(lambda m: m["module"].update(file=name)))


def test_unknown_keys_are_ignored() -> None:
    m = parse_manifest(_mutated(lambda m: m.update(future_field={"x": 1})))
    assert m.name == "dense_bn"


def test_deeply_nested_json_is_refused(tmp_path: Path) -> None:
    from juliabridge.bundle.manifest import load_manifest

    p = tmp_path / "manifest.json"
    p.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(juliabridge.ManifestError):
        load_manifest(p)


def _static_value(value: Any) -> dict[str, Any]:
    return _mutated(lambda m: m["static_state"][0].update(value=value))


@pytest.mark.parametrize(
    "value", [None, True, False, 0.5, -1.0e300, -(2**63), 2**64 - 1, "", "x" * 4096, "Val"]
)
def test_static_state_values_are_json_scalars(value: Any) -> None:
    """Spec §3.11: null, a boolean, a number (integers in [-2^63, 2^64)), a string of at most
    4096 characters; read back as they are."""
    assert parse_manifest(_static_value(value)).static_state[0].value == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x" * 4097, "string longer than 4096 characters"),
        (2**64, f"integer {2**64} fits neither Int64 nor UInt64"),
        (-(2**63) - 1, f"integer {-(2**63) - 1} fits neither Int64 nor UInt64"),
        ([1], "expected a JSON scalar (null, boolean, number or string), found list"),
        ({"v": 1}, "expected a JSON scalar (null, boolean, number or string), found dict"),
    ],
)
def test_static_state_values_that_are_not_scalars_are_refused(value: Any, message: str) -> None:
    with pytest.raises(juliabridge.ManifestError) as e:
        parse_manifest(_static_value(value))
    assert str(e.value) == f"manifest.json: static_state[0].value: {message}"
