"""Batch normalization on the lax backend: modules shaped like Lux's BatchNorm in train and
test mode, differentiated by JAX, against a pure-JAX BatchNorm written from the formula.

The reference interpreter aborts on batch_norm_*, so the oracles are XLA and numpy; the
derivative references are a pure-JAX BatchNorm (mean and biased variance over every dim but
the channel) and central finite differences.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import juliabridge
from juliabridge.backends.lax import RULES

from .oracles import check_module, run_lax, run_xla

# f64 arguments and results need x64 outside the module too (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("x64")


needs_transpose = pytest.mark.skipif(
    "stablehlo.transpose" not in RULES, reason="needs stablehlo.transpose (shape family)"
)

EPS = float(np.float32(1e-5))  # epsilon is an f32 attribute
MOMENTUM = 0.1
N, C, H, W = 2, 3, 5, 4
M = N * H * W  # elements per channel


def train_module(ty: str) -> str:
    """Lux `BatchNorm(3)` in training mode as Reactant emits it: the (N, C, H, W) input is
    transposed to Julia's (W, H, C, N) order, normalized with feature_index = 2, transposed
    back; the running statistics are updated with momentum (variance unbiased by m/(m-1));
    scale and bias come back unchanged (aliased)."""
    x4 = f"tensor<{N}x{C}x{H}x{W}x{ty}>"
    j4 = f"tensor<{W}x{H}x{C}x{N}x{ty}>"
    v = f"tensor<{C}x{ty}>"
    unbias = MOMENTUM * M / (M - 1)
    return f"""module @reactant_bn attributes {{mhlo.num_partitions = 1 : i64, mhlo.num_replicas = 1 : i64}} {{
  func.func @main(%arg0: {v} {{tf.aliasing_output = 3 : i32}}, %arg1: {v} {{tf.aliasing_output = 4 : i32}}, %arg2: {v}, %arg3: {v}, %arg4: {x4}) -> ({x4}, {v}, {v}, {v}, {v}) {{
    %cst = stablehlo.constant dense<{1 - MOMENTUM:.17e}> : {v}
    %cst_0 = stablehlo.constant dense<{MOMENTUM:.17e}> : {v}
    %cst_1 = stablehlo.constant dense<{unbias:.17e}> : {v}
    %0 = stablehlo.transpose %arg4, dims = [3, 2, 1, 0] : ({x4}) -> {j4}
    %output, %batch_mean, %batch_var = "stablehlo.batch_norm_training"(%0, %arg0, %arg1) <{{epsilon = 9.99999974E-6 : f32, feature_index = 2 : i64}}> : ({j4}, {v}, {v}) -> ({j4}, {v}, {v})
    %1 = stablehlo.transpose %output, dims = [3, 2, 1, 0] : ({j4}) -> {x4}
    %2 = stablehlo.multiply %cst, %arg2 : {v}
    %3 = stablehlo.multiply %cst_0, %batch_mean : {v}
    %4 = stablehlo.add %2, %3 : {v}
    %5 = stablehlo.multiply %cst, %arg3 : {v}
    %6 = stablehlo.multiply %cst_1, %batch_var : {v}
    %7 = stablehlo.add %5, %6 : {v}
    return %1, %4, %7, %arg0, %arg1 : {x4}, {v}, {v}, {v}, {v}
  }}
}}"""


def eval_mode_module(ty: str) -> str:
    """Lux `BatchNorm(3)` in test mode: batch_norm_inference with the running statistics."""
    x4 = f"tensor<{N}x{C}x{H}x{W}x{ty}>"
    j4 = f"tensor<{W}x{H}x{C}x{N}x{ty}>"
    v = f"tensor<{C}x{ty}>"
    return f"""module @reactant_bn_test attributes {{mhlo.num_partitions = 1 : i64, mhlo.num_replicas = 1 : i64}} {{
  func.func @main(%arg0: {v}, %arg1: {v}, %arg2: {v}, %arg3: {v}, %arg4: {x4}) -> {x4} {{
    %0 = stablehlo.transpose %arg4, dims = [3, 2, 1, 0] : ({x4}) -> {j4}
    %1 = "stablehlo.batch_norm_inference"(%0, %arg0, %arg1, %arg2, %arg3) <{{epsilon = 9.99999974E-6 : f32, feature_index = 2 : i64}}> : ({j4}, {v}, {v}, {v}, {v}) -> {j4}
    %2 = stablehlo.transpose %1, dims = [3, 2, 1, 0] : ({j4}) -> {x4}
    return %2 : {x4}
  }}
}}"""


# --- pure-JAX BatchNorm from the formula (NCHW, channel axis 1) ----------------------------


def jax_bn_train(scale: Any, bias: Any, rm: Any, rv: Any, x: Any) -> tuple[Any, ...]:
    axes = (0, 2, 3)
    mean = jnp.mean(x, axis=axes)
    var = jnp.mean((x - mean[None, :, None, None]) ** 2, axis=axes)
    inv = scale / jnp.sqrt(var + EPS)
    out = (x - mean[None, :, None, None]) * inv[None, :, None, None] + bias[None, :, None, None]
    new_rm = (1 - MOMENTUM) * rm + MOMENTUM * mean
    new_rv = (1 - MOMENTUM) * rv + (MOMENTUM * M / (M - 1)) * var
    return out, new_rm, new_rv, scale, bias


def jax_bn_test(scale: Any, bias: Any, rm: Any, rv: Any, x: Any) -> Any:
    b = lambda v: v[None, :, None, None]  # noqa: E731
    return (x - b(rm)) / jnp.sqrt(b(rv) + EPS) * b(scale) + b(bias)


def np_bn_train(*args: np.ndarray) -> list[np.ndarray]:
    """The pure-JAX formula evaluated in f64 on concrete values."""
    return [np.asarray(a) for a in jax_bn_train(*(a.astype(np.float64) for a in args))]


def inputs(dtype: Any, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.5, 1.5, C)
    bias = rng.standard_normal(C)
    rm = rng.standard_normal(C) * 0.1
    rv = rng.uniform(0.5, 2.0, C)
    x = rng.standard_normal((N, C, H, W)) * 2 + 0.5
    return [a.astype(dtype) for a in (scale, bias, rm, rv, x)]


def load(text: str) -> Callable[..., Any]:
    return juliabridge.load_mlir(text, backend="lax")


def rel_close(got: Any, want: Any, rtol: float = 1e-5) -> None:
    got, want = np.asarray(got), np.asarray(want)
    scale = max(float(np.max(np.abs(want))), 1e-30)
    err = float(np.max(np.abs(got - want))) / scale if want.size else 0.0
    assert err <= rtol, f"relative error {err:.3g} > {rtol}"


# --- forward ------------------------------------------------------------------------------


@needs_transpose
@pytest.mark.parametrize("ty,dtype,tol", [("f64", np.float64, 1e-12), ("f32", np.float32, 2e-5)])
def test_train_module_forward(ty: str, dtype: Any, tol: float) -> None:
    args = inputs(dtype)
    want = [w.astype(dtype) for w in np_bn_train(*args)]
    check_module(train_module(ty), args, rtol=tol, atol=tol, interpreter=False, expected=want)


@needs_transpose
@pytest.mark.parametrize("ty,dtype,tol", [("f64", np.float64, 1e-12), ("f32", np.float32, 2e-5)])
def test_test_module_forward(ty: str, dtype: Any, tol: float) -> None:
    args = inputs(dtype)
    want = np.asarray(jax_bn_test(*(a.astype(np.float64) for a in args))).astype(dtype)
    check_module(eval_mode_module(ty), args, rtol=tol, atol=tol, interpreter=False, expected=[want])


BN_OPS = """module {
  func.func @main(%x: tensor<4x3x2xTY>, %s: tensor<3xTY>, %o: tensor<3xTY>, %g: tensor<4x3x2xTY>) -> (tensor<4x3x2xTY>, tensor<3xTY>, tensor<3xTY>, tensor<4x3x2xTY>, tensor<4x3x2xTY>, tensor<3xTY>, tensor<3xTY>) {
    %out, %mean, %var = "stablehlo.batch_norm_training"(%x, %s, %o) {epsilon = 1.000000e-03 : f32, feature_index = 1 : i64} : (tensor<4x3x2xTY>, tensor<3xTY>, tensor<3xTY>) -> (tensor<4x3x2xTY>, tensor<3xTY>, tensor<3xTY>)
    %inf = "stablehlo.batch_norm_inference"(%x, %s, %o, %mean, %var) {epsilon = 1.000000e-03 : f32, feature_index = 1 : i64} : (tensor<4x3x2xTY>, tensor<3xTY>, tensor<3xTY>, tensor<3xTY>, tensor<3xTY>) -> tensor<4x3x2xTY>
    %gx, %gs, %go = "stablehlo.batch_norm_grad"(%x, %s, %mean, %var, %g) {epsilon = 1.000000e-03 : f32, feature_index = 1 : i64} : (tensor<4x3x2xTY>, tensor<3xTY>, tensor<3xTY>, tensor<3xTY>, tensor<4x3x2xTY>) -> (tensor<4x3x2xTY>, tensor<3xTY>, tensor<3xTY>)
    return %out, %mean, %var, %inf, %gx, %gs, %go : tensor<4x3x2xTY>, tensor<3xTY>, tensor<3xTY>, tensor<4x3x2xTY>, tensor<4x3x2xTY>, tensor<3xTY>, tensor<3xTY>
  }
}"""


def bn_ops_reference(x: np.ndarray, s: np.ndarray, o: np.ndarray, g: np.ndarray) -> list[Any]:
    """numpy: the three ops on (4, 3, 2) with feature_index 1; the gradient by jax.vjp of the
    pure training formula (batch_norm_grad is its analytic gradient)."""
    eps = float(np.float32(1e-3))
    x, s, o, g = (np.float64(a) for a in (x, s, o, g))
    mean = x.mean(axis=(0, 2))
    var = ((x - mean[None, :, None]) ** 2).mean(axis=(0, 2))
    out = (x - mean[None, :, None]) / np.sqrt(var[None, :, None] + eps) * s[None, :, None]
    out = out + o[None, :, None]

    def f(x: Any, s: Any, o: Any) -> Any:
        m = jnp.mean(x, axis=(0, 2))
        v = jnp.mean((x - m[None, :, None]) ** 2, axis=(0, 2))
        return (x - m[None, :, None]) / jnp.sqrt(v[None, :, None] + eps) * s[None, :, None] + o[
            None, :, None
        ]

    _, vjp = jax.vjp(f, x, s, o)
    gx, gs, go = (np.asarray(a) for a in vjp(g))
    return [out, mean, var, out, gx, gs, go]


@pytest.mark.parametrize(
    "ty,dtype,tol",
    [
        ("f64", np.float64, 1e-10),
        ("f32", np.float32, 3e-5),
        ("f16", np.float16, 3e-2),
        # Was refused as "not a float" (numpy kind "V"); values up to ~5: 2 bf16 ulp.
        ("bf16", ml_dtypes.bfloat16, 6e-2),
    ],
)
def test_the_three_ops_against_xla_and_numpy(ty: str, dtype: Any, tol: float) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 3, 2)) * 1.5 + 0.3).astype(dtype)
    s = rng.uniform(0.5, 1.5, 3).astype(dtype)
    o = rng.standard_normal(3).astype(dtype)
    g = rng.standard_normal((4, 3, 2)).astype(dtype)
    want = [w.astype(dtype) for w in bn_ops_reference(x, s, o, g)]
    check_module(
        BN_OPS.replace("TY", ty),
        [x, s, o, g],
        rtol=tol,
        atol=tol,
        interpreter=False,
        expected=want,
    )


def test_rank_one_and_feature_index_zero() -> None:
    text = """module {
  func.func @main(%x: tensor<5xf64>, %s: tensor<5xf64>, %o: tensor<5xf64>) -> (tensor<5xf64>, tensor<5xf64>, tensor<5xf64>) {
    %0:3 = "stablehlo.batch_norm_training"(%x, %s, %o) {epsilon = 0.0 : f32, feature_index = 0 : i64} : (tensor<5xf64>, tensor<5xf64>, tensor<5xf64>) -> (tensor<5xf64>, tensor<5xf64>, tensor<5xf64>)
    return %0#0, %0#1, %0#2 : tensor<5xf64>, tensor<5xf64>, tensor<5xf64>
  }
}"""
    # One element per feature: the mean is the element, the variance 0, so the output is
    # 0 / sqrt(0) = NaN everywhere, as the formula says.
    x = np.arange(5.0)
    nan = np.full(5, np.nan)
    check_module(
        text, [x, np.ones(5), np.zeros(5)], interpreter=False, expected=[nan, x, np.zeros(5)]
    )


def test_bf16_batch_norm_grad_is_computed_in_f32_as_xla_does() -> None:
    """A variance small against the data, ε = 0: the closed form's terms cancel, and in bf16
    arithmetic whole results came out wrong (3.90625 for -0.1426). XLA on the CPU runs bf16
    batch norm in f32 and rounds the results; so does lax, bit for bit here."""
    bf = ml_dtypes.bfloat16
    t2, t22 = "tensor<2xbf16>", "tensor<2x2xbf16>"
    text = f"""module {{
  func.func @main(%x: {t22}, %s: {t2}, %m: {t2}, %v: {t2}, %g: {t22}) -> ({t22}, {t2}, {t2}) {{
    %0:3 = "stablehlo.batch_norm_grad"(%x, %s, %m, %v, %g) <{{epsilon = 0.0 : f32, feature_index = 0 : i64}}> : ({t22}, {t2}, {t2}, {t2}, {t22}) -> ({t22}, {t2}, {t2})
    return %0#0, %0#1, %0#2 : {t22}, {t2}, {t2}
  }}
}}"""
    args = [
        np.array([[0.00125885, -0.00131989], [0.00640869, 0.00104523]], bf),
        np.array([1.71875, 1.8671875], bf),
        np.array([-3.0517578125e-05, 0.00372314453125], bf),
        np.array([1.6614794731140137e-06, 7.18235969543457e-06], bf),
        np.array([[1.3046875, 0.9453125], [-0.703125, -1.265625]], bf),
    ]
    # The spec's closed form in f64 from the bf16 values, rounded to bf16 once.
    w = [a.astype(np.float64) for a in args]
    x, scale, mean, var, dy = w
    inv = 1 / np.sqrt(var[:, None])
    xhat = (x - mean[:, None]) * inv
    gscale, goffset = (dy * xhat).sum(axis=1), dy.sum(axis=1)
    gx = scale[:, None] * inv / 2 * (2 * dy - goffset[:, None] - xhat * gscale[:, None])
    want = [gx.astype(bf), gscale.astype(bf), goffset.astype(bf)]
    got = check_module(text, args, rtol=0, atol=0, interpreter=False)  # lax == xla, exactly
    np.testing.assert_array_equal(
        got[0].astype(np.float64), [[-0.142578125, 0.142578125], [0.4453125, -1.0]]
    )
    for g, r in zip(got, want):  # each within one bf16 ulp (2⁻⁷ relative) of the formula
        g64, r64 = g.astype(np.float64), r.astype(np.float64)
        assert (np.abs(g64 - r64) <= np.abs(r64) * 2.0**-7).all(), (g64, r64)


def _bf16_module(op: str, shape: tuple[int, ...], eps: float) -> str:
    """`op` on a bf16 operand of `shape` with per-feature vectors, feature_index 0."""
    x = "tensor<" + "x".join(map(str, shape)) + "xbf16>"
    v = f"tensor<{shape[0]}xbf16>"
    ins, outs = {
        "batch_norm_training": ([x, v, v], [x, v, v]),
        "batch_norm_inference": ([x, v, v, v, v], [x]),
    }[op]
    names = ", ".join(f"%a{k}" for k in range(len(ins)))
    head = ", ".join(f"%a{k}: {t}" for k, t in enumerate(ins))
    res = ", ".join(f"%0#{k}" for k in range(len(outs)))
    return f"""module {{
  func.func @main({head}) -> ({", ".join(outs)}) {{
    %0:{len(outs)} = "stablehlo.{op}"({names}) <{{epsilon = {eps:.9e} : f32, feature_index = 0 : i64}}> : ({", ".join(ins)}) -> ({", ".join(outs)})
    return {res} : {", ".join(outs)}
  }}
}}"""


def test_bf16_batch_norm_constants_are_xlas_f32_ones() -> None:
    """The element count and epsilon of a bf16 batch norm are f32 constants in XLA's program
    (257 stays 257, where bf16 has only 256 and 258; epsilon is not rounded to bf16)."""
    bf = ml_dtypes.bfloat16
    train = _bf16_module("batch_norm_training", (1, 257), 0.0)
    args = [np.full((1, 257), 1.5, bf), np.ones(1, bf), np.zeros(1, bf)]
    got = run_lax(train, args)
    assert float(got[1][0]) == 1.5  # 385.5 / 257, not / 256 (1.5078125)
    assert float(run_xla(train, args)[1][0]) == 1.5
    # The spec's variance of equal values; XLA's expander (E[x²] − E[x]², row
    # batch-norm-expander-cancels) gives -5.2e-10 on jax 0.10.2 and 0 on 0.12.
    assert float(got[2][0]) == 0.0
    assert np.isnan(got[0].astype(np.float64)).all()  # 0 / sqrt(0 + 0)
    eps = 0.05829145759344101  # 1 / sqrt(eps): 4.15625 from the f32 value, 4.125 from bf16's
    one, zero = np.ones(1, bf), np.zeros(1, bf)
    (out,) = check_module(
        _bf16_module("batch_norm_inference", (1,), eps),
        [one, one, zero, zero, zero],
        rtol=0,
        atol=0,
        interpreter=False,
    )
    assert float(out[0]) == 4.15625


def test_bf16_batch_norm_runs_in_f32_and_other_floats_in_their_own_type() -> None:
    from .transform_checks import lax_fn

    bf = ml_dtypes.bfloat16
    for ty, dtype, want in (("bf16", bf, "f32"), ("f16", np.float16, "f16")):
        text = _bf16_module("batch_norm_training", (2, 3), 1e-3).replace("bf16", ty)
        args = [np.ones((2, 3), dtype), np.ones(2, dtype), np.zeros(2, dtype)]
        jaxpr = str(jax.make_jaxpr(lax_fn(text))(*args))
        assert f"{want}[2,3]" in jaxpr and "f64" not in jaxpr, jaxpr


# --- derivatives --------------------------------------------------------------------------


def train_loss(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A loss using the output AND the returned running statistics (which depend on the
    batch mean and variance)."""

    def loss(scale: Any, bias: Any, rm: Any, rv: Any, x: Any) -> Any:
        out, new_rm, new_rv, s_echo, b_echo = fn(scale, bias, rm, rv, x)
        w = jnp.arange(out.size, dtype=out.dtype).reshape(out.shape) / out.size
        return (
            jnp.sum(jnp.tanh(out) * w)
            + jnp.sum(new_rm**2 * jnp.array([1.0, -2.0, 3.0]))
            + jnp.sum(jnp.sin(new_rv))
            + 0.5 * jnp.sum(s_echo * b_echo)
        )

    return loss


ARGNUMS = (0, 1, 2, 3, 4)


@needs_transpose
def test_train_mode_grad_jvp_hvp_equal_pure_jax() -> None:
    args = inputs(np.float64)
    lifted, ref = train_loss(load(train_module("f64"))), train_loss(jax_bn_train)
    for got, want in zip(jax.grad(lifted, ARGNUMS)(*args), jax.grad(ref, ARGNUMS)(*args)):
        rel_close(got, want)
    rng = np.random.default_rng(5)
    tangents = [rng.standard_normal(a.shape) for a in args]
    _, tan_l = jax.jvp(load(train_module("f64")), args, tangents)
    _, tan_r = jax.jvp(jax_bn_train, args, tangents)
    for a, b in zip(tan_l, tan_r):
        rel_close(a, b)

    def hvp(loss: Callable[..., Any]) -> Any:
        return jax.jvp(lambda *a: jax.grad(loss, ARGNUMS)(*a), args, tangents)[1]

    for a, b in zip(hvp(lifted), hvp(ref)):
        rel_close(a, b)


@needs_transpose
def test_train_mode_gradient_includes_the_batch_statistics() -> None:
    # Only the batch statistics feed this loss: a rule ignoring their cotangents gives 0.
    fn = load(train_module("f64"))
    args = inputs(np.float64)

    def stats_only(x: Any) -> Any:
        _, new_rm, new_rv, _, _ = fn(*args[:4], x)
        return jnp.sum(new_rm * jnp.array([1.0, 2.0, -1.0])) + jnp.sum(new_rv**2)

    g = np.asarray(jax.grad(stats_only)(args[4]))
    eps = 1e-6
    x = args[4]
    for idx in [(0, 0, 0, 0), (1, 2, 4, 3), (0, 1, 2, 1)]:
        e = np.zeros_like(x)
        e[idx] = eps
        fd = (float(stats_only(x + e)) - float(stats_only(x - e))) / (2 * eps)
        np.testing.assert_allclose(g[idx], fd, rtol=1e-6)
    assert np.max(np.abs(g)) > 1e-3


@needs_transpose
def test_test_mode_grad_jvp_hvp_equal_pure_jax() -> None:
    args = inputs(np.float64, seed=3)
    lifted_fn = load(eval_mode_module("f64"))

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *a: jnp.sum(jnp.tanh(f(*a)) ** 2)

    lifted = wrap(lambda *a: lifted_fn(*a)[0])
    ref = wrap(jax_bn_test)
    for got, want in zip(jax.grad(lifted, ARGNUMS)(*args), jax.grad(ref, ARGNUMS)(*args)):
        rel_close(got, want)
    rng = np.random.default_rng(6)
    tangents = [rng.standard_normal(a.shape) for a in args]
    rel_close(
        jax.jvp(lambda *a: lifted_fn(*a)[0], args, tangents)[1],
        jax.jvp(jax_bn_test, args, tangents)[1],
    )
    hl = jax.jvp(lambda *a: jax.grad(lifted, ARGNUMS)(*a), args, tangents)[1]
    hr = jax.jvp(lambda *a: jax.grad(ref, ARGNUMS)(*a), args, tangents)[1]
    for a, b in zip(hl, hr):
        rel_close(a, b)


def test_batch_norm_grad_is_differentiable_again() -> None:
    # Second order through batch_norm_grad: JAX differentiates the closed form, which must
    # agree with the second derivative of the training formula.
    text = BN_OPS.replace("TY", "f64")
    fn = load(text)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3, 2))
    s, o, g = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3), rng.standard_normal((4, 3, 2))
    eps = float(np.float32(1e-3))

    def train_out(x: Any) -> Any:
        m = jnp.mean(x, axis=(0, 2))
        v = jnp.mean((x - m[None, :, None]) ** 2, axis=(0, 2))
        return (x - m[None, :, None]) / jnp.sqrt(v[None, :, None] + eps) * s[None, :, None]

    want = jax.grad(lambda x: jnp.sum(jax.vjp(train_out, x)[1](g)[0] ** 2))(x)
    got = jax.grad(lambda x: jnp.sum(fn(x, s, o, g)[4] ** 2))(x)
    rel_close(got, want, 1e-9)


@needs_transpose
def test_vmap_is_batched_and_per_sample() -> None:
    fn = load(eval_mode_module("f64"))
    args = inputs(np.float64)
    xs = np.stack([args[4], args[4] * 2, -args[4]])
    got = jax.vmap(lambda x: fn(*args[:4], x)[0])(xs)
    want = np.stack([np.asarray(jax_bn_test(*args[:4], x)) for x in xs])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    train = load(train_module("f64"))
    got_t = jax.vmap(lambda x: train(*args[:4], x)[1])(xs)  # running mean: per-sample stats
    want_t = np.stack([np.asarray(jax_bn_train(*args[:4], x)[1]) for x in xs])
    np.testing.assert_allclose(got_t, want_t, rtol=1e-12)
