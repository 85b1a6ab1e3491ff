"""Model parallelism on 8 CPU devices: a Dense weight sharded over its output features.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python model_parallel_check.py TMP_DIR

Prints OK when outputs and gradients with sharded parameters equal the unsharded ones.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import juliabridge
from juliabridge.examples.luxmodels import build_bundle


def main(tmp: str) -> None:
    assert jax.device_count() == 8, jax.devices()
    model = juliabridge.import_lux(
        build_bundle("dense_chain", Path(tmp) / "d.bundle", batch=8, seed=0)
    )
    explicit = jax.make_mesh((8,), ("model",), axis_types=(AxisType.Explicit,))
    auto = jax.make_mesh((8,), ("model",), axis_types=(AxisType.Auto,))
    for mesh in (explicit, auto):
        check(model, mesh)
        check_sharded_load(model, mesh, Path(tmp) / "d.bundle")
    print("OK", model.backend)


def check(model, mesh) -> None:  # type: ignore[no-untyped-def]
    w = model.params["layer_1"]["weight"]  # MLIR (in, out) = (4, 16): shard the 16 outputs
    assert w.shape == (4, 16), w.shape
    sharded = jax.tree.map(lambda a: a, model.params)
    sharded["layer_1"]["weight"] = jax.device_put(w, NamedSharding(mesh, P(None, "model")))
    sharded["layer_1"]["bias"] = jax.device_put(
        model.params["layer_1"]["bias"], NamedSharding(mesh, P("model"))
    )
    assert len(sharded["layer_1"]["weight"].sharding.device_set) == 8
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)

    def loss(p):  # type: ignore[no-untyped-def]
        return jnp.sum(model.apply(p, model.state, x)[0] ** 2)

    # Reverse mode under Explicit axes needs the mesh in context (JAX's rule).
    with jax.set_mesh(mesh):
        y_sharded = jax.jit(lambda p: model.apply(p, model.state, x)[0])(sharded)
        g_sharded = jax.jit(jax.grad(loss))(sharded)
    y_plain = jax.jit(lambda p: model.apply(p, model.state, x)[0])(model.params)
    g_plain = jax.jit(jax.grad(loss))(model.params)
    np.testing.assert_allclose(np.asarray(y_sharded), np.asarray(y_plain), rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(g_sharded), jax.tree.leaves(g_plain), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    # Each gradient keeps its parameter's sharding.
    gw = g_sharded["layer_1"]["weight"]
    assert tuple(gw.sharding.spec) == (None, "model"), gw.sharding.spec


def check_sharded_load(model, mesh, bundle: Path) -> None:  # type: ignore[no-untyped-def]
    """docs/multihost.md's `shardings=` example, as written there."""

    def shardings(lux_path, shape, dtype):  # type: ignore[no-untyped-def]
        # Split a weight's output features where the mesh divides them; None: replicated.
        split = len(shape) == 2 and shape[1] % 8 == 0
        return NamedSharding(mesh, P(None, "model")) if split else None

    loaded = juliabridge.import_lux(bundle, shardings=shardings)
    w = loaded.params["layer_1"]["weight"]  # (4, 16): split; layer_2's (16, 3) is not
    assert tuple(w.sharding.spec) == (None, "model"), w.sharding
    assert len(w.sharding.device_set) == 8
    for a, b in zip(jax.tree.leaves(loaded.params), jax.tree.leaves(model.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    x = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)
    with jax.set_mesh(mesh):
        y = jax.jit(lambda p: loaded.apply(p, loaded.state, x)[0])(loaded.params)
    y_plain = model.apply(model.params, model.state, x)[0]
    np.testing.assert_allclose(np.asarray(y), np.asarray(y_plain), rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    main(sys.argv[1])
