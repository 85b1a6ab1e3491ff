"""docs/exporting.md: every Python example runs, in order, in one namespace (issue 41)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "exporting.md"


def run_examples(text: str, label: str, *, at_least: int) -> dict[str, Any]:
    """Run the ```python blocks of `text` in order in one namespace (in the current directory);
    returns the namespace."""
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= at_least
    ns: dict[str, Any] = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{DOC.name} {label} {i + 1}", "exec"), ns)
    return ns


def test_every_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("orbax.checkpoint", reason="the Orbax examples need orbax-checkpoint")
    pytest.importorskip("flax.nnx", reason="the NNX example needs flax")
    pytest.importorskip("equinox", reason="the Equinox example needs equinox")
    # The ONNX section's examples need the onnx extra: tests/test_export_onnx.py runs them.
    monkeypatch.chdir(tmp_path)
    ns = run_examples(DOC.read_text().split("\n## ONNX", 1)[0], "example", at_least=6)
    model = ns["model"]
    x = np.asarray(ns["x"])
    want = np.asarray(model(x))  # type: ignore[operator]
    # What the examples computed, against juliabridge's own call on the same input.
    np.testing.assert_array_equal(np.asarray(ns["y"]), want)
    np.testing.assert_allclose(np.asarray(ns["exported"].call(x)), want, rtol=1e-5, atol=1e-6)  # type: ignore[attr-defined]
    assert np.asarray(ns["logits"]).shape == (7, 10)
    assert np.asarray(ns["dx"]).shape == x.shape
    np.testing.assert_array_equal(np.asarray(ns["module"](x)), want)  # type: ignore[operator]
    np.testing.assert_array_equal(np.asarray(ns["eqx_module"](x)), want)  # type: ignore[operator]
    for a, b in zip(
        jax.tree.leaves(ns["restored"]),
        jax.tree.leaves(
            {"params": model.params, "state": model.state}  # type: ignore[attr-defined]
        ),
    ):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert (tmp_path / "lenet.jaxexport.json").is_file()
    assert (Path(str(ns["root"])) / "lenet_params.h5").is_file()
