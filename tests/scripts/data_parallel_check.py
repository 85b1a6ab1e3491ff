"""Run by tests/test_parallel.py in a process with 8 fake CPU devices; prints JSON figures."""

from __future__ import annotations

import json
import sys

import jax
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import juliabridge
from juliabridge.examples.paths import example_bundle_path


def max_diff(a: object, b: object) -> float:
    return max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def main(backend: str) -> None:
    assert jax.device_count() == 8, jax.devices()
    model = juliabridge.import_lux(example_bundle_path("lenet"), backend=backend)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, 32)
    # Auto axes: with Explicit ones (the default on newer jax), optax's integer-label loss
    # needs an out_sharding for its scatter on jax 0.12.0.1, a matter between optax and jax.
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    out: dict[str, object] = {"devices": jax.device_count()}

    single = np.asarray(jax.jit(model.apply)(model.params, model.state, x)[0])
    # 1) plain jit with a batch-sharded input and replicated params
    xs = jax.device_put(x, NamedSharding(mesh, P("data")))
    ps = jax.device_put(model.params, NamedSharding(mesh, P()))
    y = jax.jit(model.apply)(ps, model.state, xs)[0]
    out["jit_sharded_max_diff"] = float(np.max(np.abs(np.asarray(y) - single)))
    # 2) data parallel: each device runs its own 4 samples
    dp = model.data_parallel(mesh, "data")
    y_dp, _ = dp(model.params, model.state, xs)
    out["dp_max_diff"] = float(np.max(np.abs(np.asarray(y_dp) - single)))
    out["dp_output_spec"] = str(y_dp.sharding.spec)

    # 3) a jitted training step (grad + optax), data parallel vs single device
    opt = optax.sgd(1e-3)

    def loss(apply, p, xb, yb):  # type: ignore[no-untyped-def]
        logits, _ = apply(p, model.state, xb)
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

    def make_step(apply):  # type: ignore[no-untyped-def]
        @jax.jit
        def step(p, s, xb, yb):  # type: ignore[no-untyped-def]
            v, g = jax.value_and_grad(lambda q: loss(apply, q, xb, yb))(p)
            upd, s = opt.update(g, s, p)
            return optax.apply_updates(p, upd), s, v

        return step

    p1, s1 = model.params, opt.init(model.params)
    p8, s8 = model.params, opt.init(model.params)
    step1, step8 = make_step(model.apply), make_step(dp)
    losses = []
    for _ in range(3):
        p1, s1, l1 = step1(p1, s1, x, labels)
        p8, s8, l8 = step8(p8, s8, xs, labels)
        losses.append((float(l1), float(l8)))
    out["train_losses"] = losses
    out["train_param_max_diff"] = max_diff(p1, p8)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
