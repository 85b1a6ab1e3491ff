"""Checks of JAX transformations of lifted modules against independent references.

Derivatives are compared with central finite differences in float64 (jvp, grad and vjp as
directional derivatives, and Hessian-vector products as differences of gradients); vmap must be
JAX's own batching (no loop in the jaxpr beyond those of one sample) and equal the per-sample
results stacked. Complex values are paired with the real part of the bilinear product,
Re(sum(a * b)), the pairing JAX's gradients and transposes of complex values satisfy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import juliabridge

Fn = Callable[..., Sequence[Any]]


@contextmanager
def x64() -> Iterator[None]:
    """jax_enable_x64 on inside, restored after (f64 modules, f64 finite differences)."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def lax_fn(text: str) -> Fn:
    """The module's @main on the lax backend, as a function returning its results."""
    return juliabridge.load_mlir(text, backend="lax")


def _floats(outs: Sequence[Any]) -> list[Any]:
    """The results derivatives are checked on: real and complex floating ones."""
    return [o for o in outs if jnp.issubdtype(o.dtype, jnp.inexact)]


def pair(a: Any, b: Any) -> float:
    """Re(sum(a * b)): <grad, t> for real and complex values alike (no conjugation)."""
    return float(np.real(np.sum(np.asarray(a) * np.asarray(b))))


def direction(rng: np.random.Generator, like: Any) -> np.ndarray:
    """A random tangent or cotangent with the shape of `like` (an array or a ShapeDtypeStruct;
    complex where it is)."""
    shape = tuple(like.shape)
    t = rng.standard_normal(shape)
    if np.issubdtype(np.dtype(like.dtype), np.complexfloating):
        t = t + 1j * rng.standard_normal(shape)
    return t


def jitted_floats(fn: Fn) -> Callable[..., list[Any]]:
    """fn's float results, jitted (an unjitted lifted module runs op by op, each op compiled)."""
    return jax.jit(lambda *a: _floats(fn(*a)))


def scalar_loss(fn: Fn, weights_seed: int = 7) -> Callable[..., Any]:
    """sum_k <w_k, out_k> + |out_k|^2 / 4 over the float results, w_k fixed random (so no term
    cancels; the square gives linear ops a nonzero Hessian); infinite values (windows of
    padding only) are left out."""

    def loss(*args: Any) -> Any:
        total = 0.0
        for k, o in enumerate(_floats(fn(*args))):
            w = np.random.default_rng(weights_seed + k).standard_normal(o.shape)
            o = jnp.where(jnp.isfinite(o), o, 0)
            if jnp.iscomplexobj(o):  # a real loss of both parts
                v = np.random.default_rng(weights_seed + 100 + k).standard_normal(o.shape)
                total = total + jnp.sum(o.real * w + o.imag * v) + 0.25 * jnp.sum(jnp.abs(o) ** 2)
            else:
                total = total + jnp.sum(o * w) + 0.25 * jnp.sum(o * o)
        return total

    return loss


def _shift(args: Sequence[Any], wrt: Sequence[int], ts: Sequence[Any], eps: float) -> list[Any]:
    out = list(args)
    for i, t in zip(wrt, ts):
        out[i] = np.asarray(args[i]) + eps * np.asarray(t)
    return out


def check_jvp(
    fn: Fn, args: Sequence[Any], wrt: Sequence[int], *, eps: float = 1e-6, rtol: float = 1e-6
) -> None:
    """jax.jvp of every float result == central differences along a random direction."""
    rng = np.random.default_rng(1)
    ts = [direction(rng, np.asarray(args[i])) for i in wrt]

    def along(*xs: Any) -> list[Any]:
        full = list(args)
        for i, x in zip(wrt, xs):
            full[i] = x
        return _floats(fn(*full))

    primal, got = jax.jit(lambda p, t: jax.jvp(along, p, t))(
        [jnp.asarray(args[i]) for i in wrt], [jnp.asarray(t) for t in ts]
    )
    floats = jitted_floats(fn)
    hi = floats(*_shift(args, wrt, ts, eps))
    lo = floats(*_shift(args, wrt, ts, -eps))
    assert got, "no float results to differentiate"
    for p, g, h, low in zip(primal, got, hi, lo):
        # Where the value is infinite (a window of padding only) there is no derivative.
        finite = np.isfinite(np.asarray(p))
        with np.errstate(invalid="ignore"):  # inf - inf where there is no derivative
            want = (np.asarray(h) - np.asarray(low)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(g)[finite], want[finite], rtol=rtol, atol=rtol * 10)


def check_grad(
    fn: Fn, args: Sequence[Any], wrt: Sequence[int], *, eps: float = 1e-6, rtol: float = 1e-6
) -> None:
    """<jax.grad, t> == the central difference of the scalar loss along t."""
    loss = jax.jit(scalar_loss(fn))
    grads = jax.jit(jax.grad(loss, argnums=tuple(wrt)))(*[jnp.asarray(a) for a in args])
    rng = np.random.default_rng(2)
    ts = [direction(rng, np.asarray(args[i])) for i in wrt]
    got = sum(pair(g, t) for g, t in zip(grads, ts))
    want = float(loss(*_shift(args, wrt, ts, eps))) - float(loss(*_shift(args, wrt, ts, -eps)))
    want /= 2 * eps
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


def check_hvp(
    fn: Fn, args: Sequence[Any], wrt: int, *, eps: float = 1e-5, rtol: float = 1e-5
) -> None:
    """Forward-over-reverse Hessian-vector product == difference of gradients."""
    loss = scalar_loss(fn)
    t = np.random.default_rng(3).standard_normal(np.shape(args[wrt]))

    @jax.jit
    def grad_at(x: Any) -> Any:
        full = [jnp.asarray(a) for a in args]
        full[wrt] = x
        return jax.grad(loss, argnums=wrt)(*full)

    _, got = jax.jit(lambda x, t: jax.jvp(grad_at, (x,), (t,)))(jnp.asarray(args[wrt]), t)
    x = np.asarray(args[wrt])
    want = (np.asarray(grad_at(x + eps * t)) - np.asarray(grad_at(x - eps * t))) / (2 * eps)
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=rtol)


def check_vjp(
    fn: Fn, args: Sequence[Any], wrt: Sequence[int], *, eps: float = 1e-6, rtol: float = 1e-6
) -> None:
    """jax.vjp with random cotangents c: <vjp(c), t> == <c, central difference along t>."""
    rng = np.random.default_rng(4)

    def of(*xs: Any) -> list[Any]:
        full = [jnp.asarray(a) for a in args]
        for i, x in zip(wrt, xs):
            full[i] = x
        return _floats(fn(*full))

    primals = [jnp.asarray(args[i]) for i in wrt]
    outs = jax.eval_shape(of, *primals)
    assert outs, "no float results to differentiate"
    cts = [direction(rng, o) for o in outs]
    ts = [direction(rng, np.asarray(args[i])) for i in wrt]
    cotangents = jax.jit(lambda p, c: jax.vjp(of, *p)[1](c))(
        primals, [jnp.asarray(c, o.dtype) for c, o in zip(cts, outs)]
    )
    got = sum(pair(g, t) for g, t in zip(cotangents, ts))
    floats = jitted_floats(fn)
    hi = floats(*_shift(args, wrt, ts, eps))
    lo = floats(*_shift(args, wrt, ts, -eps))
    want = sum(
        pair(c, (np.asarray(h) - np.asarray(low)) / (2 * eps)) for c, h, low in zip(cts, hi, lo)
    )
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


def check_grad_of_grad(
    fn: Fn, args: Sequence[Any], wrt: int, *, eps: float = 1e-5, rtol: float = 1e-5
) -> None:
    """Reverse over reverse: grad_x <grad loss(x), t> (= H t) == difference of gradients."""
    loss = scalar_loss(fn)
    t = np.random.default_rng(5).standard_normal(np.shape(args[wrt]))

    def grad_at(x: Any) -> Any:
        full = [jnp.asarray(a) for a in args]
        full[wrt] = x
        return jax.grad(loss, argnums=wrt)(*full)

    got = jax.jit(jax.grad(lambda x: jnp.sum(grad_at(x) * t)))(jnp.asarray(args[wrt]))
    x = np.asarray(args[wrt])
    g = jax.jit(grad_at)
    want = (np.asarray(g(x + eps * t)) - np.asarray(g(x - eps * t))) / (2 * eps)
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=rtol)


_LOOP = re.compile(r"(?<![\w.])(?:while|scan)(?=[\[ ])")


def loops(jaxpr: str) -> int:
    """How many loops (while/scan equations) a printed jaxpr has."""
    return len(_LOOP.findall(jaxpr))


def check_batched(
    fn: Fn,
    batched: Sequence[Any],
    in_axes: Sequence[int | None],
    *,
    rtol: float = 1e-6,
    atol: float = 1e-6,
) -> None:
    """jax.vmap(fn) adds no loop to fn's own jaxpr (a counted while loop of the module stays
    one loop) and equals fn per sample, stacked."""
    vm = jax.vmap(lambda *a: tuple(fn(*a)), in_axes=tuple(in_axes))
    n = next(np.shape(a)[ax] for a, ax in zip(batched, in_axes) if ax is not None)

    def sample(i: int) -> list[Any]:
        return [a if ax is None else np.take(np.asarray(a), i, axis=ax) for a, ax in
                zip(batched, in_axes)]  # fmt: skip

    jaxpr = str(jax.make_jaxpr(vm)(*batched))
    own = loops(str(jax.make_jaxpr(lambda *a: tuple(fn(*a)))(*sample(0))))
    assert loops(jaxpr) <= own, f"vmap added a loop ({own} in one sample):\n{jaxpr[:2000]}"
    got = jax.jit(vm)(*batched)
    one = jax.jit(lambda *a: tuple(fn(*a)))
    for i in range(n):
        for g, w in zip(got, one(*sample(i))):
            np.testing.assert_allclose(np.asarray(g)[i], np.asarray(w), rtol=rtol, atol=atol)
