"""Pinned: composed transforms of a bundle run through the call primitive (xla, enzyme backends).

The xla and enzyme backends run a module as juliabridge's own primitive, whose rules compose:
vmap loops the call, grad transposes its JVP into the VJP, and a second derivative is refused.
Each composition is checked on a small nonlinear bundle, y = tanh(x @ w) * s, against central
finite differences of the loaded model's own outputs (and lax, where every order lifts, as a
second opinion), not against the primitive's rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge import TransformError

from .conftest import require_backend
from .pinned_support import Arg, Res, Spec, lower, write

RNG = np.random.default_rng(11)
X = RNG.standard_normal((4, 2)).astype(np.float32)
W = (0.5 * RNG.standard_normal((2, 3))).astype(np.float32)
S = np.array([1.0, -2.0, 0.5], np.float32)
EPS = 1e-2
TOL = {"rtol": 2e-3, "atol": 2e-3}


def _forward(x: Any, w: Any, s: Any) -> Any:
    return jnp.tanh(x @ w) * s


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = Spec(
        name="tanh",
        mlir=lower(_forward, X, W, S),
        args=[
            Arg("input", [], X),
            Arg("parameter", ["layer", "weight"], W),
            Arg("parameter", ["layer", "scale"], S),
        ],
        results=[Res([["output"]], (4, 3), "f32")],
    )
    return write(tmp_path_factory.mktemp("ho") / "tanh.bundle", spec)


def _model(bundle: Path, backend: str) -> Any:
    require_backend(backend)
    return juliabridge.import_lux(bundle, backend=backend)


def _fd_jacobian(f: Any, x: np.ndarray) -> np.ndarray:
    """d f(x) / d x by central differences, shape f(x).shape + x.shape."""
    x = np.asarray(x, np.float32)
    out = np.asarray(f(x), np.float64)
    jac = np.zeros(out.shape + x.shape)
    for idx in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[idx] += EPS
        lo[idx] -= EPS
        diff = np.asarray(f(hi), np.float64) - np.asarray(f(lo), np.float64)
        jac[(Ellipsis, *idx)] = diff / (2 * EPS)
    return jac


def _loss(model: Any) -> Any:
    return lambda x: jnp.sum(jnp.asarray(model(x)) ** 2)


@pytest.mark.parametrize("backend", ["xla", "enzyme"])
def test_jacrev_matches_finite_differences(bundle: Path, backend: str) -> None:
    model = _model(bundle, backend)
    want = _fd_jacobian(model, X)
    np.testing.assert_allclose(jax.jacrev(model)(X), want, **TOL)
    np.testing.assert_allclose(jax.jit(jax.jacrev(model))(X), want, **TOL)


def test_jacfwd_matches_finite_differences_on_enzyme(bundle: Path) -> None:
    model = _model(bundle, "enzyme")
    np.testing.assert_allclose(jax.jacfwd(model)(X), _fd_jacobian(model, X), **TOL)


def test_jacfwd_on_xla_is_refused_as_forward_mode(bundle: Path) -> None:
    model = _model(bundle, "xla")
    with pytest.raises(TransformError, match="forward mode"):
        jax.jacfwd(model)(X)


@pytest.mark.parametrize("backend", ["xla", "enzyme"])
def test_vmap_of_grad_is_the_per_sample_gradient(bundle: Path, backend: str) -> None:
    # Each of 3 perturbed copies of x is one sample: the rule loops the call, grad inside.
    model = _model(bundle, backend)
    xs = X[None] + 0.1 * RNG.standard_normal((3, *X.shape)).astype(np.float32)
    got = jax.vmap(jax.grad(_loss(model)))(xs)
    for k in range(3):
        want = _fd_jacobian(lambda x: np.sum(np.asarray(model(x), np.float64) ** 2), xs[k])
        np.testing.assert_allclose(got[k], want, rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("backend", ["xla", "enzyme"])
def test_grad_of_vmap_sums_the_per_sample_gradients(bundle: Path, backend: str) -> None:
    model = _model(bundle, backend)
    xs = X[None] + 0.1 * RNG.standard_normal((3, *X.shape)).astype(np.float32)

    def total(xs: Any) -> Any:
        return jnp.sum(jax.vmap(model)(xs) ** 2)

    got = jax.grad(total)(xs)
    want = _fd_jacobian(lambda v: np.sum(np.asarray(model(v), np.float64) ** 2), xs[1])
    np.testing.assert_allclose(got[1], want, rtol=5e-3, atol=5e-3)
    for k in range(3):  # and each slice is that sample's own gradient
        np.testing.assert_allclose(got[k], jax.grad(_loss(model))(xs[k]), rtol=1e-5, atol=1e-6)


def test_vmap_of_jvp_and_jvp_of_vmap_agree_on_enzyme(bundle: Path) -> None:
    model = _model(bundle, "enzyme")
    xs = X[None] + 0.1 * RNG.standard_normal((2, *X.shape)).astype(np.float32)
    ts = RNG.standard_normal(xs.shape).astype(np.float32)
    _, a = jax.vmap(lambda x, t: jax.jvp(model, (x,), (t,)))(xs, ts)
    _, b = jax.jvp(jax.vmap(model), (xs,), (ts,))
    for k in range(2):
        want = np.einsum("ijkl,kl->ij", _fd_jacobian(model, xs[k]), ts[k])
        np.testing.assert_allclose(a[k], want, **TOL)
        np.testing.assert_allclose(b[k], want, **TOL)


@pytest.mark.parametrize(
    ("backend", "why"),
    [
        # xla has no forward mode at all: the outer jvp already needs the call's tangent
        ("xla", "forward mode (jax.jvp, jax.jacfwd) is not available on"),
        ("enzyme", "second-order derivatives (grad of grad, hessian, jvp of a VJP) are not"),
    ],
)
def test_jvp_of_vjp_is_refused_typed(bundle: Path, backend: str, why: str) -> None:
    # Forward over reverse (a Hessian-vector product) needs the VJP's own derivative.
    model = _model(bundle, backend)
    c = np.ones((4, 3), np.float32)

    def pullback(x: Any) -> Any:
        return jax.vjp(model, x)[1](c)[0]

    with pytest.raises(TransformError) as e:
        jax.jvp(pullback, (X,), (np.ones_like(X),))
    assert why in str(e.value)
    with pytest.raises(TransformError, match="second-order"):
        jax.grad(lambda x: jnp.sum(jax.grad(_loss(model))(x)))(X)


def test_jvp_of_vjp_on_lax_matches_finite_differences_of_the_xla_pullback(bundle: Path) -> None:
    # Where the call primitive refuses second order, lax (JAX's own rules) gives it; it must be
    # the derivative of the first-order pullback the primitive computes.
    lax_model, xla_model = _model(bundle, "lax"), _model(bundle, "xla")
    c = RNG.standard_normal((4, 3)).astype(np.float32)
    t = RNG.standard_normal(X.shape).astype(np.float32)

    def pullback(model: Any) -> Any:
        return lambda x: jax.vjp(model, x)[1](c)[0]

    hvp = jax.jvp(pullback(lax_model), (X,), (t,))[1]
    xla_pullback = jax.jit(pullback(xla_model))
    want = np.einsum("ijkl,kl->ij", _fd_jacobian(xla_pullback, X), t)
    np.testing.assert_allclose(hvp, want, **TOL)
