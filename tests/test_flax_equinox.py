"""juliabridge.flax and juliabridge.equinox: train a few steps, compare with model.apply + optax."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import juliabridge
from juliabridge.examples.luxmodels import build_bundle
from juliabridge.examples.paths import example_bundle_path

nnx = pytest.importorskip("flax.nnx", reason="juliabridge.flax needs flax (pip install flax)")
eqx = pytest.importorskip("equinox", reason="juliabridge.equinox needs equinox")

STEPS = 3
LR = 1e-3


def _data(model: juliabridge.LuxModel, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    a = next(a for a in model.manifest.arguments if a.role == "input")
    rng = np.random.default_rng(seed)
    return rng.standard_normal(a.shape).astype(np.float32), rng.integers(0, 10, a.shape[0])


def _loss(logits: jax.Array, labels: np.ndarray) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def _reference_training(model: juliabridge.LuxModel, x: np.ndarray, y: np.ndarray) -> list:
    """The same SGD steps written directly on model.apply (the independent expectation)."""
    tx = optax.sgd(LR)
    params, opt_state = model.params, tx.init(model.params)
    history = []
    for _ in range(STEPS):
        loss, g = jax.value_and_grad(lambda p: _loss(model.apply(p, model.state, x)[0], y))(params)
        upd, opt_state = tx.update(g, opt_state, params)
        params = optax.apply_updates(params, upd)
        history.append(float(loss))
    return [history, params]


def _max_diff(a: object, b: object) -> float:
    return max(
        float(jnp.max(jnp.abs(jnp.asarray(u) - jnp.asarray(v))))
        for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


@pytest.fixture(scope="module")
def lenet() -> juliabridge.LuxModel:
    return juliabridge.import_lux(example_bundle_path("lenet"))


def test_flax_module_trains_like_apply(lenet: juliabridge.LuxModel) -> None:
    from juliabridge.flax import LuxModule

    module = LuxModule(lenet)
    x, y = _data(lenet)
    assert isinstance(module.params["layer_1"]["weight"], nnx.Param)
    opt = nnx.Optimizer(module, optax.sgd(LR), wrt=nnx.Param)

    @nnx.jit
    def step(module, opt, x, y):  # type: ignore[no-untyped-def]
        loss, grads = nnx.value_and_grad(lambda m: _loss(m(x), y))(module)
        opt.update(module, grads)
        return loss

    losses = [float(step(module, opt, x, y)) for _ in range(STEPS)]
    want_losses, want_params = _reference_training(lenet, x, y)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    trained = nnx.state(module, nnx.Param)
    assert (
        _max_diff(jax.tree.map(lambda v: v, nnx.to_pure_dict(trained)["params"]), want_params)
        < 1e-5
    )
    assert losses[-1] < losses[0]


def test_flax_module_inside_a_larger_model(lenet: juliabridge.LuxModel) -> None:
    from juliabridge.flax import LuxModule

    class Classifier(nnx.Module):  # type: ignore[misc]
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.body = LuxModule(lenet)
            self.head = nnx.Linear(10, 3, rngs=rngs)

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.head(jax.nn.relu(self.body(x)))

    model = Classifier(nnx.Rngs(0))
    x, y = _data(lenet)
    y = y % 3
    grads = nnx.grad(lambda m: _loss(m(x), y))(model)
    g = nnx.to_pure_dict(grads)
    kernel = model.head.kernel.get_value()
    bias = model.head.bias.get_value()

    def pure(p: object, k: jax.Array, b: jax.Array) -> jax.Array:
        return _loss(jax.nn.relu(lenet.apply(p, lenet.state, x)[0]) @ k + b, y)

    want_p, want_k, _ = jax.grad(pure, argnums=(0, 1, 2))(lenet.params, kernel, bias)
    assert _max_diff(g["body"]["params"], want_p) < 1e-5
    assert _max_diff(g["head"]["kernel"], want_k) < 1e-5


def test_flax_state_follows_train_mode_batchnorm(tmp_path: Path) -> None:
    from juliabridge.flax import LuxModule, LuxState

    model = juliabridge.import_lux(
        build_bundle("batchnorm_train", tmp_path / "bn.bundle", batch=6, seed=0)
    )
    module = LuxModule(model)
    x = (
        np.random.default_rng(1)
        .standard_normal(next(a for a in model.manifest.arguments if a.role == "input").shape)
        .astype(np.float32)
    )
    _, want_state = model.apply(model.params, model.state, x)
    before = nnx.to_pure_dict(nnx.state(module, LuxState))
    module(x)
    after = nnx.to_pure_dict(nnx.state(module, LuxState))["state"]
    assert _max_diff(after, want_state) == 0.0
    assert _max_diff(before["state"], model.state) == 0.0
    assert _max_diff(after, model.state) > 0.0  # running statistics moved


def test_equinox_module_trains_like_apply(lenet: juliabridge.LuxModel) -> None:
    from juliabridge.equinox import LuxModule

    module = LuxModule(lenet)
    x, y = _data(lenet)
    tx = optax.sgd(LR)
    # Train the parameters only: the state is Lux state, not weights.
    trainable = jax.tree.map(lambda _: False, module)
    trainable = eqx.tree_at(
        lambda m: m.params, trainable, jax.tree.map(lambda _: True, module.params)
    )
    opt_state = tx.init(eqx.filter(module, trainable))

    @eqx.filter_jit
    def step(module, opt_state, x, y):  # type: ignore[no-untyped-def]
        diff, static = eqx.partition(module, trainable)
        loss, grads = eqx.filter_value_and_grad(lambda d: _loss(eqx.combine(d, static)(x), y))(diff)
        updates, opt_state = tx.update(grads, opt_state, diff)
        return eqx.apply_updates(module, updates), opt_state, loss

    losses = []
    for _ in range(STEPS):
        module, opt_state, loss = step(module, opt_state, x, y)
        losses.append(float(loss))
    want_losses, want_params = _reference_training(lenet, x, y)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    assert _max_diff(module.params, want_params) < 1e-5


def test_equinox_apply_returns_the_new_state(tmp_path: Path) -> None:
    from juliabridge.equinox import LuxModule

    model = juliabridge.import_lux(
        build_bundle("batchnorm_train", tmp_path / "bn.bundle", batch=6, seed=0)
    )
    module = LuxModule(model)
    x = (
        np.random.default_rng(2)
        .standard_normal(next(a for a in model.manifest.arguments if a.role == "input").shape)
        .astype(np.float32)
    )
    y, updated = module.apply(x)
    want_y, want_state = model.apply(model.params, model.state, x)
    assert _max_diff(y, want_y) == 0.0
    assert _max_diff(updated.state, want_state) == 0.0
    assert _max_diff(module.state, model.state) == 0.0  # immutable: the original is unchanged
    assert _max_diff(eqx.filter_jit(lambda m, x: m(x))(module, x), want_y) < 1e-6


def test_import_options_only_with_a_path(lenet: juliabridge.LuxModel) -> None:
    from juliabridge.equinox import LuxModule as EqxModule
    from juliabridge.flax import LuxModule as NnxModule

    for cls in (EqxModule, NnxModule):
        with pytest.raises(juliabridge.JuliaBridgeError, match="only apply when a bundle path"):
            cls(lenet, backend="xla")


# --- save_params on the wrappers (issue 29 item 7) -----------------------------------------------


def _assert_saved(path: Path, params: object, state: object) -> None:
    got_params, got_state = juliabridge.load_params(path)
    assert _max_diff(got_params, params) == 0.0
    if jax.tree.leaves(state):
        assert _max_diff(got_state, state) == 0.0


def test_save_params_takes_the_flax_module(lenet: juliabridge.LuxModel, tmp_path: Path) -> None:
    """Before: "params.: a LuxModule of numpy dtype object cannot be saved"."""
    from juliabridge.flax import LuxModule

    module = LuxModule(lenet)
    # Trained values, not the import's: the saved file must hold what the module holds now.
    module.params["layer_1"]["bias"].set_value(module.params["layer_1"]["bias"].get_value() + 1)
    out = juliabridge.save_params(module, tmp_path / "flax.h5")
    want = nnx.to_pure_dict(nnx.state(module.params))
    _assert_saved(out, want, lenet.state)
    np.testing.assert_array_equal(
        juliabridge.load_params(out)[0]["layer_1"]["bias"],
        np.asarray(lenet.params["layer_1"]["bias"]) + 1,
    )


def test_save_params_takes_the_equinox_module(lenet: juliabridge.LuxModel, tmp_path: Path) -> None:
    from juliabridge.equinox import LuxModule

    module = LuxModule(lenet)
    module = eqx.tree_at(
        lambda m: m.params["layer_1"]["bias"], module, module.params["layer_1"]["bias"] * 2
    )
    out = juliabridge.save_params(module, tmp_path / "eqx.h5")
    _assert_saved(out, module.params, module.state)
    np.testing.assert_array_equal(
        juliabridge.load_params(out)[0]["layer_1"]["bias"],
        np.asarray(lenet.params["layer_1"]["bias"]) * 2,
    )


def test_a_lux_model_is_one_leaf_so_nnx_modules_can_hold_it(lenet: juliabridge.LuxModel) -> None:
    """docs/transforms.md: a LuxModel is not a pytree, because nnx refuses a static attribute holding
    arrays; a user's module keeping the model itself works, and its trees are the pytrees."""

    class Holder(nnx.Module):  # type: ignore[misc]
        def __init__(self, model: juliabridge.LuxModel) -> None:
            self.model = model

    holder = Holder(lenet)
    assert jax.tree.leaves(lenet) == [lenet]
    assert not jax.tree.leaves(nnx.state(holder))  # static: nothing for nnx to train
    with pytest.raises(TypeError):
        jax.jit(lambda m, x: m(x))(lenet, _data(lenet)[0])
    assert len(jax.tree.leaves(lenet.params)) == 8
