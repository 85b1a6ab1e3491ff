"""docs/exporting.md: every Python example runs, in order, in one namespace (issue 41)."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import numpy as np
import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "exporting.md"


def test_every_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("orbax.checkpoint", reason="the Orbax examples need orbax-checkpoint")
    pytest.importorskip("flax.nnx", reason="the NNX example needs flax")
    pytest.importorskip("equinox", reason="the Equinox example needs equinox")
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    ns: dict[str, object] = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{DOC.name} example {i + 1}", "exec"), ns)
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
