"""One process of a 2-process jax.distributed run on localhost (4 CPU devices each).

    python tests/scripts/multiprocess_train.py PROCESS_ID PORT OUT_DIR [explicit|auto]

Both processes import the same bundle, build one global 8-device mesh (Explicit axes, JAX's
default, unless told "auto"), and run two jitted SGD
steps of the imported LeNet with the parameters replicated and a global batch of 32 sharded
over all 8 devices (each process feeds its own 16 samples). Process 0 writes the losses and the
trained parameters to OUT_DIR/result.npz; tests/test_distributed.py compares them with one
process on one device.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ["JAX_PLATFORMS"] = "cpu"

import jax
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

BATCH = 32
STEPS = 2
LR = 1e-3


def data() -> tuple[np.ndarray, np.ndarray]:
    """The global batch (the same in every process and in the single-device reference)."""
    rng = np.random.default_rng(0)
    return rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, BATCH)


def train(model, x, y):  # type: ignore[no-untyped-def]
    """STEPS jitted SGD steps of softmax cross-entropy on model.apply; (losses, params)."""
    tx = optax.sgd(LR)

    @jax.jit
    def step(p, s, xb, yb):  # type: ignore[no-untyped-def]
        def loss(q):  # type: ignore[no-untyped-def]
            logits, _ = model.apply(q, model.state, xb)
            # One-hot labels: the integer-label loss scatters, which Explicit axes refuse
            # without an out_sharding (a matter between optax and jax).
            return optax.softmax_cross_entropy(logits, jax.nn.one_hot(yb, 10)).mean()

        value, g = jax.value_and_grad(loss)(p)
        upd, s = tx.update(g, s, p)
        return optax.apply_updates(p, upd), s, value

    params, opt_state = model.params, tx.init(model.params)
    losses = []
    for _ in range(STEPS):
        params, opt_state, value = step(params, opt_state, x, y)
        losses.append(value)
    return losses, params


def main(process_id: int, port: int, out_dir: str, kind: str = "explicit") -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"localhost:{port}", num_processes=2, process_id=process_id
    )
    import juliabridge
    from juliabridge.examples.paths import example_bundle_path

    assert jax.device_count() == 8 and jax.local_device_count() == 4, jax.devices()
    model = juliabridge.import_lux(example_bundle_path("lenet"))
    if kind == "explicit":
        mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    else:
        mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
    x, y = data()
    local = slice(process_id * BATCH // 2, (process_id + 1) * BATCH // 2)
    xs = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), x[local])
    ys = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), y[local])
    replicated = NamedSharding(mesh, P())
    model.params = jax.device_put(model.params, replicated)
    model.state = jax.device_put(model.state, replicated)
    # The mesh in context: reverse mode under Explicit axes needs it (JAX's rule).
    with jax.set_mesh(mesh):
        losses, params = train(model, xs, ys)
    logits = jax.jit(model)(xs)
    spec = tuple(logits.sharding.spec) + (None,) * (logits.ndim - len(logits.sharding.spec))
    flat = {
        "/".join(str(k.key) for k in path): np.asarray(jax.device_get(v))
        for path, v in jax.tree_util.tree_flatten_with_path(params)[0]
    }
    if process_id == 0:
        np.savez(
            os.path.join(out_dir, "result.npz"),
            losses=np.array([float(v) for v in losses]),
            backend=np.array(model.backend),
            logits_spec=np.array([str(e) for e in spec]),
            logits=np.asarray(jax.device_get(logits.addressable_shards[0].data)),
            logits_shard_index=np.array(
                [sl.start or 0 for sl in logits.addressable_shards[0].index]
            ),
            **{f"p:{k}": v for k, v in flat.items()},
        )
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], *sys.argv[4:5])
