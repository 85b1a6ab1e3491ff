"""What docs/multihost.md says about reverse mode and optax under Explicit mesh axes, checked on
the jax this runs on (4 fake CPU devices, tests/test_multidevice.py). JAX's behaviour here moved
between releases, so each statement is pinned to the versions where it was measured and this
test fails when a new jax changes it, so the page can be updated."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import juliabridge
from juliabridge.examples import lenet_bundle

#: Under jax.jit without jax.set_mesh, optax's integer-label cross-entropy (a scatter whose
#: output sharding JAX infers or not): jax 0.10.2 and 0.12.1 accept it, 0.11 and 0.12.0.1 refuse
#: it with a ShardingTypeError asking for an out_sharding.
REFUSES_THE_SCATTER = (0, 11) <= jax.__version_info__ < (0, 12, 1)


@pytest.fixture(scope="module")
def setup() -> tuple[juliabridge.LuxModel, object, jax.Array, jax.Array, object]:
    model = juliabridge.import_lux(lenet_bundle())
    mesh = jax.make_mesh((4,), ("data",))  # Explicit axes: JAX's default
    rng = np.random.default_rng(0)
    xs = jax.device_put(
        rng.standard_normal((16, 1, 28, 28)).astype(np.float32), NamedSharding(mesh, P("data"))
    )
    ys = jax.device_put(np.arange(16) % 10, NamedSharding(mesh, P("data")))
    params = jax.device_put(model.params, NamedSharding(mesh, P()))
    return model, mesh, xs, ys, params


def _integer_loss(model: juliabridge.LuxModel, xs: jax.Array, ys: jax.Array):  # type: ignore[no-untyped-def]
    def loss(p):  # type: ignore[no-untyped-def]
        logits, _ = model.apply(p, model.state, xs)
        return optax.softmax_cross_entropy_with_integer_labels(logits, ys).mean()

    return loss


def _one_hot_loss(model: juliabridge.LuxModel, xs: jax.Array, ys: jax.Array):  # type: ignore[no-untyped-def]
    def loss(p):  # type: ignore[no-untyped-def]
        logits, _ = model.apply(p, model.state, xs)
        return optax.softmax_cross_entropy(logits, jax.nn.one_hot(ys, 10)).mean()

    return loss


@pytest.mark.multidevice(devices=4)
def test_eager_grad_wants_the_mesh_in_context(setup) -> None:  # type: ignore[no-untyped-def]
    model, mesh, xs, ys, params = setup
    loss = _one_hot_loss(model, xs, ys)
    with pytest.raises(ValueError, match="mesh"):
        jax.grad(loss)(params)
    with jax.set_mesh(mesh):
        g = jax.grad(loss)(params)
    assert jax.tree.structure(g) == jax.tree.structure(params)


@pytest.mark.multidevice(devices=4)
def test_integer_label_loss_under_jit(setup) -> None:  # type: ignore[no-untyped-def]
    model, mesh, xs, ys, params = setup
    with jax.set_mesh(mesh):  # with the mesh in context it works on every supported jax
        g_int = jax.jit(jax.grad(_integer_loss(model, xs, ys)))(params)
        g_hot = jax.jit(jax.grad(_one_hot_loss(model, xs, ys)))(params)
    for a, b in zip(jax.tree.leaves(g_int), jax.tree.leaves(g_hot), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    # Without it: what REFUSES_THE_SCATTER says of this jax; where accepted, the same gradients.
    step = jax.jit(jax.grad(_integer_loss(model, xs, ys)))
    if REFUSES_THE_SCATTER:
        with pytest.raises(Exception, match="out_sharding") as e:
            step(params)
        assert type(e.value).__name__ == "ShardingTypeError"
    else:
        g = step(params)
        for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_hot), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
        assert float(jnp.sum(jax.tree.leaves(g)[0] ** 2)) > 0.0
