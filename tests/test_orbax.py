"""Orbax checkpoints of an imported model's params and state (issue 41): restored values are
bit-identical, keep their dtypes and tree (empty dicts included), and run in `apply`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import juliabridge
from tests.bundle_factory import dense_bn_arrays, dense_bn_reference, make_dense_bn

ocp = pytest.importorskip(
    "orbax.checkpoint", reason="needs orbax-checkpoint (pip install 'juliabridge[orbax]')"
)


def _same(a: Any, b: Any) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


@pytest.mark.parametrize("layout", ["mlir", "julia"])
def test_params_and_state_round_trip(tmp_path: Path, layout: str) -> None:
    model = juliabridge.import_lux(make_dense_bn(tmp_path / "bn.bundle"), layout=layout)
    assert jax.tree.leaves(model.state)  # BatchNorm's running statistics
    saved = {"params": model.params, "state": model.state}
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "ckpt", saved)
    checkpointer.wait_until_finished()
    restored = checkpointer.restore(tmp_path / "ckpt")
    _same(restored, saved)
    arrays = dense_bn_arrays()
    x = arrays[0] if layout == "mlir" else arrays[0].T
    y, state = model.apply(restored["params"], restored["state"], x)
    want = dense_bn_reference(arrays)
    np.testing.assert_allclose(np.asarray(y), want if layout == "mlir" else want.T, rtol=1e-5)
    _same(state, saved["state"])
