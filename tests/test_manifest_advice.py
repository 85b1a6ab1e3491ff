"""A manifest refusal ends in a whole sentence whose advice fits the tool that wrote the bundle
(issue 29 item 8: every refusal ended "...or fix the entry named" and told every writer to use
JuliaBridge.export_lux)."""

from __future__ import annotations

from pathlib import Path

import pytest

import juliabridge
from tests.bundle_factory import edit_manifest, make_dense_bn


@pytest.mark.parametrize(
    ("tool", "advice"),
    [
        (
            "JuliaBridge.jl",
            "export the model again with JuliaBridge.export_lux and read or convert the "
            "directory it writes (juliabridge convert DIR --out NAME.bundle).",
        ),
        (
            "juliabridge-python",
            "write the bundle again with juliabridge.bundle.write.writer.write_bundle.",
        ),
        ("my-onnx-converter", "have the tool that wrote it ('my-onnx-converter') follow the spec."),
    ],
)
def test_the_advice_names_the_writer_and_ends_a_sentence(
    tool: str, advice: str, tmp_path: Path
) -> None:
    bundle = make_dense_bn(tmp_path / "b.bundle")

    def change(m: dict) -> None:  # type: ignore[type-arg]
        m["producer"]["tool"] = tool
        m["producer"]["made_with_julia"] = tool == "JuliaBridge.jl"
        if tool == "JuliaBridge.jl":
            m["producer"].update(julia="1.11.5", lux="1.0.0", reactant="0.2.0")
        m["name"] = ""  # an entry the rules refuse

    edit_manifest(bundle, change)
    with pytest.raises(juliabridge.ManifestError) as e:
        juliabridge.import_lux(bundle)
    text = str(e.value)
    assert text.endswith(
        "The manifest does not follow docs/bundle-format.md: fix the entry named above, or "
        + advice
    ), text
    assert text.startswith(f"{bundle / 'manifest.json'}: name")
