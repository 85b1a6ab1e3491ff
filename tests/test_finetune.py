"""Fine-tuning the example LeNet with optax, then saving weights Julia's load_params reads."""

from __future__ import annotations

from pathlib import Path

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge.examples.paths import example_bundle_path

optax = pytest.importorskip("optax", reason="fine-tuning uses optax")


def _task(n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    # A learnable synthetic task: the label is which quadrant holds the bright square.
    rng = np.random.default_rng(4)
    x = 0.1 * rng.standard_normal((n, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 4, n)
    for i, q in enumerate(y):
        r, c = divmod(int(q), 2)
        x[i, 0, 14 * r : 14 * r + 8, 14 * c : 14 * c + 8] += 1.0
    return x, y


def test_finetune_lowers_the_loss_and_round_trips(tmp_path: Path, backend: str) -> None:
    model = juliabridge.import_lux(example_bundle_path("lenet"), backend=backend)
    x, y = _task()
    opt = optax.adam(1e-3)

    def loss_fn(p):  # type: ignore[no-untyped-def]
        logits, _ = model.apply(p, model.state, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def step(p, s):  # type: ignore[no-untyped-def]
        v, g = jax.value_and_grad(loss_fn)(p)
        upd, s = opt.update(g, s, p)
        return optax.apply_updates(p, upd), s, v

    params, state = model.params, opt.init(model.params)
    losses = []
    for _ in range(8):
        params, state, v = step(params, state)
        losses.append(float(v))
    assert losses[-1] < 0.7 * losses[0], losses

    out = juliabridge.save_params(params, tmp_path / "finetuned.h5", state=model.state)
    with h5py.File(out, "r") as f:
        assert f.attrs["format"] == "juliabridge.weights"
        assert int(f.attrs["format_version"]) == 1
        ds = f["params/layer_6/weight"]
        assert ds.shape == (256, 128)  # MLIR order = Julia (128, 256) reversed
        assert ds.attrs["dtype"] == "f32"
    loaded, _ = juliabridge.load_params(out)
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The loaded weights reproduce the fine-tuned model's loss.
    loaded = jax.tree.map(jnp.asarray, loaded)
    assert abs(float(loss_fn(loaded)) - float(loss_fn(params))) < 1e-5


def test_save_params_from_julia_layout_writes_mlir_order(tmp_path: Path) -> None:
    jl = juliabridge.import_lux(example_bundle_path("lenet"), backend="xla", layout="julia")
    out = juliabridge.save_params(jl, tmp_path / "w.h5")
    ref = juliabridge.import_lux(example_bundle_path("lenet"), backend="xla")
    loaded, _ = juliabridge.load_params(out)
    np.testing.assert_array_equal(
        loaded["layer_1"]["weight"], np.asarray(ref.params["layer_1"]["weight"])
    )
