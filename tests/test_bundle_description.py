"""write_bundle(path, BundleDescription, overwrite=) (issue 42): the description is one frozen
record, checked against @main before anything is written; what it describes reads back."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import jax
import numpy as np
import pytest

import juliabridge
from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle
from juliabridge.errors import SignatureMismatchError

X = np.arange(6, dtype=np.float32).reshape(2, 3)
W = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
TEXT = jax.jit(lambda x, w: x * w).lower(X, W).as_text()


def _description(**changes: object) -> BundleDescription:
    d = BundleDescription(
        name="scale",
        mlir_text=TEXT,
        arguments=[ArgumentSpec("input", [], X, 0), ArgumentSpec("parameter", ["w"], W)],
        result_paths=[[["output"]]],
        batch={"size": 2, "samples_independent": True},
        result_batch_axes=[0],
        example_outputs=[X * W],
        portable_artifact=False,
    )
    return dataclasses.replace(d, **changes)


def test_write_bundle_takes_the_path_a_description_overwrite_and_trust() -> None:
    params = inspect.signature(write_bundle).parameters
    assert list(params) == ["path", "description", "overwrite", "trust"]
    assert params["overwrite"].kind is params["overwrite"].KEYWORD_ONLY
    assert params["trust"].kind is params["trust"].KEYWORD_ONLY
    with pytest.raises(dataclasses.FrozenInstanceError):
        _description().name = "other"  # type: ignore[misc]


def test_what_the_description_holds_reads_back(tmp_path: Path) -> None:
    path = write_bundle(tmp_path / "s.bundle", _description(metadata={"seed": 3}))
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["name"] == "scale" and manifest["metadata"] == {"seed": 3}
    assert manifest["producer"]["made_with_julia"] is False
    assert [a["role"] for a in manifest["arguments"]] == ["input", "parameter"]
    assert manifest["results"][0]["batch_axis"] == 0
    model = juliabridge.import_lux(path, backend="lax")
    np.testing.assert_array_equal(np.asarray(model.params["w"]), W)
    x = np.ones((5, 3), np.float32)  # another batch size: samples are independent
    np.testing.assert_allclose(np.asarray(model(x)), x * W, rtol=1e-6)
    assert juliabridge.verify(path, backend="lax").ok


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"arguments": [ArgumentSpec("input", [], X)]},
            "1 argument specs for a @main with 2 arguments",
        ),
        ({"result_paths": []}, "0 result path lists for a @main with 1 results"),
        (
            {"arguments": [ArgumentSpec("input", [], X), ArgumentSpec("parameter", ["w"], X)]},
            r"argument 1 \['w'\]: value is .*, @main wants",
        ),
        ({"example_outputs": {3: X}}, "example output for result 3, but @main has 1 results"),
        ({"result_echoes": [1]}, "result 0: echo_of=1, but @main does not return argument 1"),
    ],
)
def test_a_description_that_does_not_fit_main_writes_nothing(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    target = tmp_path / "s.bundle"
    with pytest.raises(SignatureMismatchError, match=message):
        write_bundle(target, _description(**changes))
    assert list(tmp_path.iterdir()) == []
