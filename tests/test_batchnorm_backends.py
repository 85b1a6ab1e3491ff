"""BatchNorm right on every backend: the Lux-shaped batch_norm modules of tests/lax/test_batchnorm
differentiate on enzyme and xla exactly as the pure-JAX formula does.

Before a module reaches Enzyme (the enzyme backend, or the xla backend deriving a VJP without
lax), its batch_norm_* ops are rewritten into calls of their lowered formulas
(juliabridge/backends/lax/rewrite.py): Enzyme ignores the batch statistics' cotangents, has no
rule for batch_norm_inference, and aborts the process on Lux's BatchNorm.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge.backends.lax.rewrite import ENZYME_UNSAFE_OPS, rewrite_through_lax
from juliabridge.stablehlo import parse_module
from tests.conftest import require_backend
from tests.lax.test_batchnorm import (
    ARGNUMS,
    eval_mode_module,
    inputs,
    jax_bn_test,
    jax_bn_train,
    rel_close,
    train_loss,
    train_module,
)

# f64 arguments and results need x64 outside the module too (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("x64")


def test_rewrite_removes_every_batch_norm_op() -> None:
    for text in (train_module("f64"), eval_mode_module("f32")):
        module = parse_module(text)
        assert module.ops & ENZYME_UNSAFE_OPS
        rewritten = rewrite_through_lax(module)
        assert not rewritten.ops & ENZYME_UNSAFE_OPS
        assert rewritten.arguments == module.arguments and rewritten.results == module.results


@pytest.mark.parametrize("backend", ["enzyme", "xla"])
def test_train_mode_gradient_with_batch_statistics(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_backend(backend)
    if backend == "xla":
        # Without lax, the xla backend's VJP comes from Enzyme: the rewrite must apply there too.
        from juliabridge.backends import lax as lax_pkg
        from juliabridge.errors import UnsupportedOpError

        real = lax_pkg.LaxBackend

        class WholeModuleDoesNotLift(real):  # type: ignore[misc, valid-type]
            # The rewrite lifts single-op modules (one batch_norm each); refuse only @main's.
            def __init__(self, module: Any, **kw: Any) -> None:
                if "batch_norm_training" in module.text and "stablehlo.add" in module.text:
                    raise UnsupportedOpError("simulated", op="x", where="y")
                super().__init__(module, **kw)

        require_backend("enzyme")
        monkeypatch.setattr(lax_pkg, "LaxBackend", WholeModuleDoesNotLift)
    args = inputs(np.float64)
    fn = juliabridge.load_mlir(train_module("f64"), backend=backend)
    got = jax.jit(jax.grad(train_loss(fn), ARGNUMS))(*args)
    want = jax.grad(train_loss(jax_bn_train), ARGNUMS)(*args)
    for g, w in zip(got, want, strict=True):
        rel_close(g, w)

    def stats_only(x: Any) -> Any:
        _, new_rm, new_rv, _, _ = fn(*args[:4], x)
        return jnp.sum(new_rm * jnp.array([1.0, 2.0, -1.0])) + jnp.sum(new_rv**2)

    def stats_ref(x: Any) -> Any:
        _, new_rm, new_rv, _, _ = jax_bn_train(*args[:4], x)
        return jnp.sum(new_rm * jnp.array([1.0, 2.0, -1.0])) + jnp.sum(new_rv**2)

    # Enzyme's own rule gives 0 here (it ignores the batch statistics' cotangents).
    g = jax.jit(jax.grad(stats_only))(args[4])
    assert float(jnp.max(jnp.abs(g))) > 1e-3
    rel_close(g, jax.grad(stats_ref)(args[4]))


def test_test_mode_on_enzyme_forward_and_reverse() -> None:
    require_backend("enzyme")
    args = inputs(np.float64, seed=3)
    fn = juliabridge.load_mlir(eval_mode_module("f64"), backend="enzyme")
    rel_close(jax.jit(fn)(*args)[0], jax_bn_test(*args))

    def loss(f: Any) -> Any:
        return lambda *a: jnp.sum(jnp.tanh(f(*a)) ** 2)

    got = jax.jit(jax.grad(loss(lambda *a: fn(*a)[0]), ARGNUMS))(*args)
    for g, w in zip(got, jax.grad(loss(jax_bn_test), ARGNUMS)(*args), strict=True):
        rel_close(g, w)
    rng = np.random.default_rng(7)
    tangents = tuple(rng.standard_normal(a.shape) for a in args)
    rel_close(
        jax.jit(lambda *a: jax.jvp(lambda *b: fn(*b)[0], a, tangents)[1])(*args),
        jax.jvp(jax_bn_test, tuple(args), tangents)[1],
    )
