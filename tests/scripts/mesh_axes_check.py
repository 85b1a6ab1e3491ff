"""Run by tests/test_mesh_axes.py with 8 fake CPU devices; prints one JSON line of figures.

    python mesh_axes_check.py explicit|auto|mixed BACKEND

The shipped LeNet bundle (traced for 4 samples) is called on batches sharded over a mesh whose
axes have the given type, for batch sizes equal to, multiples of and not multiples of the
traced one, under jit, grad, vmap and shard_map. Every case records the largest difference
from the unsharded call, the output's PartitionSpec and the spec it should carry.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import juliabridge
from juliabridge.examples.paths import lenet_bundle

TYPES = {
    "explicit": (AxisType.Explicit, AxisType.Explicit),
    "auto": (AxisType.Auto, AxisType.Auto),
    # The batch axis Explicit, the other one Auto.
    "mixed": (AxisType.Explicit, AxisType.Auto),
}


def max_diff(a: Any, b: Any) -> float:
    return max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def spec(a: Any) -> list[Any]:
    """The output's PartitionSpec padded to its rank (JAX drops trailing Nones)."""
    s = list(a.sharding.spec)
    s += [None] * (a.ndim - len(s))
    return [list(e) if isinstance(e, tuple) else e for e in s]


def main(kind: str, backend: str) -> None:
    assert jax.device_count() == 8, jax.devices()
    model = juliabridge.import_lux(lenet_bundle(), backend=backend)
    types = TYPES[kind]
    rng = np.random.default_rng(0)
    cases: dict[str, dict[str, Any]] = {}

    def grads(p_sharded: Any, x_in: Any, x_ref: np.ndarray) -> float:
        """Largest gradient difference from the unsharded one, relative to its largest entry."""

        def loss(p: Any, xb: Any) -> Any:
            return (model.apply(p, model.state, xb)[0] ** 2).sum()

        got = jax.jit(jax.grad(loss))(p_sharded, x_in)
        want = jax.jit(jax.grad(loss))(model.params, x_ref)
        scale = max(float(np.max(np.abs(np.asarray(w)))) for w in jax.tree.leaves(want))
        return max_diff(got, want) / scale

    def case(name: str, mesh: Any, x: np.ndarray, batch: Any, *, grad: bool = True) -> None:
        """jit (and grad) of the model on `x` split over `batch` against the unsharded run."""
        want = np.asarray(jax.jit(model)(x))
        xs = jax.device_put(x, NamedSharding(mesh, P(batch)))
        with jax.set_mesh(mesh):
            ps = jax.device_put(model.params, NamedSharding(mesh, P()))
            y = jax.jit(lambda p, xb: model.apply(p, model.state, xb)[0])(ps, xs)
            figures = {
                "n": int(x.shape[0]),
                "max_diff": max_diff(y, want),
                "spec": spec(y),
                "want_spec": [list(batch) if isinstance(batch, tuple) else batch, None],
            }
            if grad:
                # Reverse mode under the mesh: JAX needs the mesh in context for it.
                figures["grad_rel_diff"] = grads(ps, xs, x)
        cases[name] = figures

    def x_of(n: int) -> np.ndarray:
        return rng.standard_normal((n, 1, 28, 28)).astype(np.float32)

    data = jax.make_mesh((8,), ("data",), axis_types=(types[0],))
    case("8_devices_n8_multiple", data, x_of(8), "data")
    case("8_devices_n16_multiple", data, x_of(16), "data", grad=False)
    grid = jax.make_mesh((4, 2), ("data", "model"), axis_types=types)
    case("4x2_n4_traced_size", grid, x_of(4), "data")
    case("4x2_n8_over_both_axes", grid, x_of(8), ("data", "model"), grad=False)
    small = jax.make_mesh((2, 4), ("data", "model"), axis_types=types)
    case("2x4_n6_not_a_multiple", small, x_of(6), "data")

    # vmap over a leading axis, the batch axis inside split over the mesh.
    xv = x_of(16).reshape(2, 8, 1, 28, 28)
    want_v = np.stack([np.asarray(jax.jit(model)(v)) for v in xv])
    with jax.set_mesh(data):
        yv = jax.jit(jax.vmap(model))(jax.device_put(xv, NamedSharding(data, P(None, "data"))))
    cases["vmap"] = {
        "max_diff": max_diff(yv, want_v),
        "spec": spec(yv),
        "want_spec": [None, "data", None],
    }

    # shard_map: each device calls the model on its own 2 samples (a batch of 16).
    x16 = x_of(16)
    want16 = np.asarray(jax.jit(model)(x16))
    with jax.set_mesh(data):
        local: Callable[..., Any] = lambda p, xb: model.apply(p, model.state, xb)[0]  # noqa: E731
        mapped = jax.shard_map(local, in_specs=(P(), P("data")), out_specs=P("data"))
        xs16 = jax.device_put(x16, NamedSharding(data, P("data")))
        ys = jax.jit(mapped)(model.params, xs16)
    cases["shard_map"] = {
        "max_diff": max_diff(ys, want16),
        "spec": spec(ys),
        "want_spec": ["data", None],
    }

    # data_parallel on this mesh, from arrays on other devices, and its misuses.
    first4 = jax.make_mesh((4,), ("data",), axis_types=(types[0],), devices=jax.devices()[:4])
    last4 = jax.make_mesh((4,), ("data",), axis_types=(types[0],), devices=jax.devices()[4:])
    dp = model.data_parallel(first4, "data")
    x8 = x16[:8]
    (y_dp, _) = dp(
        jax.device_put(model.params, NamedSharding(last4, P())),
        model.state,
        jax.device_put(x8, NamedSharding(last4, P("data"))),
    )
    cases["data_parallel_from_other_devices"] = {
        "max_diff": max_diff(y_dp, want16[:8]),
        "spec": spec(y_dp),
        "want_spec": ["data", None],
    }
    errors: dict[str, str] = {}

    def raised(name: str, f: Callable[[], Any]) -> None:
        try:
            f()
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {e}"
        else:
            errors[name] = "nothing raised"

    raised("dp_indivisible", lambda: dp(model.params, model.state, x16[:6]))
    raised("dp_indivisible_jit", lambda: jax.jit(dp)(model.params, model.state, x16[:6]))
    raised("dp_missing_axis", lambda: model.data_parallel(first4, "batch"))
    raised("dp_not_a_mesh", lambda: model.data_parallel(first4.devices, "data"))
    elsewhere = juliabridge.import_lux(lenet_bundle(), backend=backend)
    elsewhere.params = jax.device_put(model.params, NamedSharding(last4, P()))
    raised(
        "call_params_on_other_devices",
        lambda: elsewhere(jax.device_put(x8, NamedSharding(first4, P("data")))),
    )

    # Two optax steps of softmax cross-entropy, batch of 16 split over 8 devices.
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 16)]
    tx = optax.sgd(1e-2)

    def step(p: Any, s: Any, xb: Any, yb: Any) -> Any:
        def loss(q: Any) -> Any:
            logits, _ = model.apply(q, model.state, xb)
            return optax.softmax_cross_entropy(logits, yb).mean()

        value, g = jax.value_and_grad(loss)(p)
        upd, s = tx.update(g, s, p)
        return optax.apply_updates(p, upd), s, value

    step_j = jax.jit(step)
    p1, s1 = model.params, tx.init(model.params)
    single = []
    for _ in range(2):
        p1, s1, l1 = step_j(p1, s1, x16, labels)
        single.append(float(l1))
    losses = []
    with jax.set_mesh(data):
        rep = NamedSharding(data, P())
        pm = jax.device_put(model.params, rep)
        sm = jax.device_put(tx.init(model.params), rep)
        ym = jax.device_put(labels, NamedSharding(data, P("data")))
        for i in range(2):
            pm, sm, lm = step_j(pm, sm, xs16, ym)
            losses.append([single[i], float(lm)])
    print(
        json.dumps(
            {
                "devices": jax.device_count(),
                "backend": model.backend,
                "cases": cases,
                "errors": errors,
                "train_losses": losses,
                "train_param_max_diff": max_diff(pm, p1),
                "train_param_spec": spec(jax.tree.leaves(pm)[0]),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
