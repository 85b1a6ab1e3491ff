"""grad, vjp, jvp, vmap on imported modules: against pure JAX, finite differences and loops."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge.examples.paths import example_bundle_path
from tests.outside import reactant_fixture


def pure(x: jax.Array, w: jax.Array, k: jax.Array) -> tuple[jax.Array, ...]:
    """The reference semantics: 3 results from 3 arguments, one integer on each side."""
    h = jnp.tanh(x @ w) * k.astype(x.dtype)
    return h, jnp.sum(jnp.sin(h) * x[:, :1]), k * 2


@pytest.fixture(scope="module")
def f64_module() -> str:
    with jax.enable_x64(True):
        x = jax.ShapeDtypeStruct((3, 4), np.float64)
        w = jax.ShapeDtypeStruct((4, 2), np.float64)
        k = jax.ShapeDtypeStruct((), np.int64)
        return str(jax.jit(pure).lower(x, w, k).as_text())


def _args() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    return rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), np.array(3, np.int64)


def _loss(fn):  # type: ignore[no-untyped-def]
    def loss(x, w, k):  # type: ignore[no-untyped-def]
        h, s, _ = fn(x, w, k)
        return jnp.sum(h**2) + 3.0 * s

    return loss


def _finite_differences(loss, x, w, k, eps=1e-6):  # type: ignore[no-untyped-def]
    grads = []
    for which in (0, 1):
        base = [x, w]
        g = np.zeros_like(base[which])
        for idx in np.ndindex(g.shape):
            plus = [a.copy() for a in base]
            minus = [a.copy() for a in base]
            plus[which][idx] += eps
            minus[which][idx] -= eps
            g[idx] = (float(loss(*plus, k)) - float(loss(*minus, k))) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_grad_matches_pure_jax_and_finite_differences(
    f64_module: str, backend: str, mode: str
) -> None:
    with jax.enable_x64(True):
        fn = juliabridge.load_mlir(f64_module, backend=backend)
        x, w, k = _args()
        grad = jax.grad(_loss(fn), argnums=(0, 1))
        if mode == "jit":
            grad = jax.jit(grad)
        gx, gw = grad(x, w, k)
        rx, rw = jax.grad(_loss(pure), argnums=(0, 1))(x, w, k)
        np.testing.assert_allclose(gx, rx, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gw, rw, rtol=1e-12, atol=1e-12)
        fx, fw = _finite_differences(_loss(fn), x, w, k)
        np.testing.assert_allclose(gx, fx, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(gw, fw, rtol=1e-6, atol=1e-7)


def test_value_and_grad_and_vjp(f64_module: str, backend: str) -> None:
    with jax.enable_x64(True):
        fn = juliabridge.load_mlir(f64_module, backend=backend)
        x, w, k = _args()
        v, g = jax.value_and_grad(_loss(fn), argnums=1)(x, w, k)
        rv, rg = jax.value_and_grad(_loss(pure), argnums=1)(x, w, k)
        np.testing.assert_allclose(v, rv, rtol=1e-13)
        np.testing.assert_allclose(g, rg, rtol=1e-12, atol=1e-13)
        _, pull = jax.vjp(lambda x, w: fn(x, w, k)[:2], x, w)
        ct = (np.ones((3, 2)), np.float64(2.0))
        _, rpull = jax.vjp(lambda x, w: pure(x, w, k)[:2], x, w)
        for a, b in zip(pull(ct), rpull(ct), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_jvp_and_jacfwd_on_enzyme_match_pure_jax(f64_module: str) -> None:
    pytest.importorskip("enzyme_ad.jax", reason="forward mode needs enzyme-ad")
    with jax.enable_x64(True):
        fn = juliabridge.load_mlir(f64_module, backend="enzyme")
        x, w, k = _args()
        t = np.linspace(-1, 1, 12).reshape(3, 4)
        _, got = jax.jvp(lambda x: fn(x, w, k)[0], (x,), (t,))
        _, want = jax.jvp(lambda x: pure(x, w, k)[0], (x,), (t,))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
        jf = jax.jacfwd(lambda w: fn(x, w, k)[0])(w)
        np.testing.assert_allclose(jf, jax.jacfwd(lambda w: pure(x, w, k)[0])(w), atol=1e-12)
        jr = jax.jacrev(lambda w: fn(x, w, k)[0])(w)
        np.testing.assert_allclose(jr, jf, atol=1e-12)


def test_forward_mode_on_xla_is_a_clear_error(f64_module: str) -> None:
    with jax.enable_x64(True):
        fn = juliabridge.load_mlir(f64_module, backend="xla")
        x, w, k = _args()
        with pytest.raises(juliabridge.TransformError, match="forward mode"):
            jax.jvp(lambda x: fn(x, w, k)[0], (x,), (x,))


def test_second_order_lax_exact_others_a_clear_error(f64_module: str, backend: str) -> None:
    with jax.enable_x64(True):
        fn = juliabridge.load_mlir(f64_module, backend=backend)
        x, w, k = _args()
        if backend != "lax":
            with pytest.raises(juliabridge.TransformError):
                jax.hessian(lambda w: _loss(fn)(x, w, k))(w)
            return
        # On lax the module is JAX primitives: every order, both modes, like the pure function.
        h = jax.jit(jax.hessian(lambda w: _loss(fn)(x, w, k)))(w)
        want = jax.hessian(lambda w: _loss(pure)(x, w, k))(w)
        np.testing.assert_allclose(h, want, rtol=1e-12, atol=1e-12)
        gg = jax.grad(lambda w: jnp.sum(jax.grad(_loss(fn), argnums=1)(x, w, k) ** 2))(w)
        want_gg = jax.grad(lambda w: jnp.sum(jax.grad(_loss(pure), argnums=1)(x, w, k) ** 2))(w)
        np.testing.assert_allclose(gg, want_gg, rtol=1e-12, atol=1e-12)
        # Forward over reverse agrees with central differences of the gradient.
        g = jax.grad(_loss(fn), argnums=1)
        v = np.ones_like(w)
        eps = 1e-6
        fd = (np.asarray(g(x, w + eps * v, k)) - np.asarray(g(x, w - eps * v, k))) / (2 * eps)
        np.testing.assert_allclose(jax.jvp(lambda w: g(x, w, k), (w,), (v,))[1], fd, rtol=1e-6)


def test_vmap_over_inputs_and_parameters_equals_a_loop(f64_module: str, backend: str) -> None:
    with jax.enable_x64(True):
        fn = juliabridge.load_mlir(f64_module, backend=backend)
        x, w, k = _args()
        xs = np.stack([x * (i + 1) for i in range(4)])
        ws = np.stack([w - i for i in range(3)])
        got = jax.vmap(fn, in_axes=(0, None, None))(xs, w, k)
        for i in range(4):
            for a, b in zip(got, fn(xs[i], w, k), strict=True):
                # A loop (enzyme, xla) is exact; lax batches the dot, which may round the last bit.
                np.testing.assert_allclose(np.asarray(a)[i], np.asarray(b), rtol=1e-13, atol=1e-14)
        if backend == "lax":
            # Truly batched: no loop in the program.
            jaxpr = str(jax.make_jaxpr(jax.vmap(fn, in_axes=(0, None, None)))(xs, w, k))
            assert "while" not in jaxpr and "scan" not in jaxpr
        # An ensemble: vmap over parameters, under jit, with the axis not in front.
        got = jax.jit(jax.vmap(fn, in_axes=(None, 2, None)))(x, np.moveaxis(ws, 0, 2), k)
        for i in range(3):
            for a, b in zip(got, pure(x, ws[i], k), strict=True):
                np.testing.assert_allclose(np.asarray(a)[i], np.asarray(b), rtol=1e-13)
        # Per-example gradients.
        pg = jax.vmap(jax.grad(_loss(fn), argnums=1), in_axes=(0, None, None))(xs, w, k)
        for i in range(4):
            np.testing.assert_allclose(
                pg[i], jax.grad(_loss(pure), argnums=1)(xs[i], w, k), rtol=1e-12, atol=1e-13
            )


def test_enzyme_grad_with_more_results_than_arguments() -> None:
    # enzyme_ad's own VJP fails with IndexError on this real module (3 results, 2 arguments);
    # juliabridge pads @main with unused arguments so Enzyme's activity list is long enough.
    pytest.importorskip("enzyme_ad.jax", reason="needs enzyme-ad")
    path = reactant_fixture("dense_matvec_slices.mlir")
    fn = juliabridge.load_mlir(path, backend="enzyme")
    xla = juliabridge.load_mlir(path, backend="xla")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 2)).astype(np.float32)
    b = rng.standard_normal((2, 4)).astype(np.float32)

    def loss(f):  # type: ignore[no-untyped-def]
        return lambda a, b: jnp.sum(f(a, b)[0] ** 2) + jnp.sum(f(a, b)[2])

    ge = jax.grad(loss(fn), argnums=(0, 1))(a, b)
    gx = jax.grad(loss(xla), argnums=(0, 1))(a, b)
    # Reference: the module computes y = B' * A[:, 0:?] slices; check with finite differences.
    eps = 1e-2
    for which, g in ((0, ge[0]), (1, ge[1])):
        base = [a.astype(np.float64), b.astype(np.float64)]
        for idx in list(np.ndindex(base[which].shape))[:5]:
            plus = [v.copy() for v in base]
            minus = [v.copy() for v in base]
            plus[which][idx] += eps
            minus[which][idx] -= eps
            fd = (
                float(loss(fn)(*map(np.float32, plus))) - float(loss(fn)(*map(np.float32, minus)))
            ) / (2 * eps)
            assert abs(float(g[idx]) - fd) < 1e-2 * max(1.0, abs(fd))
    for p, q in zip(ge, gx, strict=True):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-5)


# --- LuxModel: batch sizes, layout, gradients through params ---------------------------------


@pytest.fixture(scope="module")
def lenet_path() -> Path:
    return example_bundle_path("lenet")


def _images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 1, 28, 28)).astype(np.float32)


@pytest.mark.parametrize("n", [1, 4, 13])
def test_any_batch_size_equals_per_sample_calls(lenet_path: Path, backend: str, n: int) -> None:
    model = juliabridge.import_lux(lenet_path, backend=backend)
    x = _images(n)
    y, _ = jax.jit(model.apply)(model.params, model.state, x)
    assert y.shape == (n, 10)
    for i in range(n):
        single = np.repeat(x[i : i + 1], 4, axis=0)  # the traced batch is 4
        want = np.asarray(model(single))[0]
        np.testing.assert_allclose(np.asarray(y)[i], want, rtol=1e-5, atol=1e-5)


def test_train_mode_batchnorm_refuses_another_batch_size(tmp_path: Path) -> None:
    from juliabridge.examples.luxmodels import build_bundle

    path = build_bundle("batchnorm_train", tmp_path / "bn.bundle", batch=6, seed=0)
    model = juliabridge.import_lux(path, backend="xla")
    x6 = np.ones((6, 3), np.float32)
    model.apply(model.params, model.state, x6)
    with pytest.raises(juliabridge.CallArgumentError, match="not independent"):
        model.apply(model.params, model.state, np.ones((7, 3), np.float32))


def test_julia_layout(lenet_path: Path, backend: str) -> None:
    mlir = juliabridge.import_lux(lenet_path, backend=backend)
    jl = juliabridge.import_lux(lenet_path, backend=backend, layout="julia")
    assert jl.params["layer_6"]["weight"].shape == (128, 256)  # Julia (out, in)
    assert mlir.params["layer_6"]["weight"].shape == (256, 128)
    x = _images(6)
    y_jl, _ = jax.jit(jl.apply)(jl.params, jl.state, x.T)  # Julia (28, 28, 1, 6)
    y, _ = mlir.apply(mlir.params, mlir.state, x)
    assert y_jl.shape == (10, 6)
    np.testing.assert_allclose(np.asarray(y_jl).T, np.asarray(y), rtol=1e-5, atol=1e-5)
    g_jl = jax.grad(lambda p: jnp.sum(jl.apply(p, jl.state, x.T)[0] ** 2))(jl.params)
    g = jax.grad(lambda p: jnp.sum(mlir.apply(p, mlir.state, x)[0] ** 2))(mlir.params)
    np.testing.assert_allclose(
        np.asarray(g_jl["layer_1"]["weight"]).T, g["layer_1"]["weight"], rtol=1e-4, atol=1e-5
    )


def test_param_gradients_match_the_pure_jax_model(lenet_path: Path, backend: str) -> None:
    from juliabridge.examples import luxmodels

    spec = luxmodels.lenet(batch=4, seed=0)
    model = juliabridge.import_lux(lenet_path, backend=backend)
    x = _images(4, seed=5)
    values = [a.value for a in spec.arguments]

    def ref_loss(flat_params):  # type: ignore[no-untyped-def]
        return jnp.sum(spec.main(x, *flat_params)[0] ** 2)

    ref = jax.grad(ref_loss)(values[1:])
    got = jax.jit(jax.grad(lambda p: jnp.sum(model.apply(p, model.state, x)[0] ** 2)))(model.params)
    params_args = [a for a in model.manifest.arguments if a.role == "parameter"]
    for a, r in zip(params_args, ref, strict=True):
        leaf = got
        for step in a.path:
            leaf = leaf[step]
        np.testing.assert_allclose(np.asarray(leaf), np.asarray(r), rtol=2e-4, atol=2e-4)


def test_shipped_vjp_module_gives_gradients_without_enzyme(
    lenet_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_e = juliabridge.import_lux(lenet_path, backend="xla")
    x = _images(4, seed=2)

    def loss(m, p):  # type: ignore[no-untyped-def]
        return jnp.sum(m.apply(p, m.state, x)[0] ** 2)

    want = jax.grad(lambda p: loss(model_e, p))(model_e.params)
    monkeypatch.setattr("juliabridge.backends.enzyme.availability.enzyme_available", lambda: False)
    model = juliabridge.import_lux(lenet_path, backend="xla")
    got = jax.grad(lambda p: loss(model, p))(model.params)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_xla_derives_its_vjp_through_lax_where_the_fallback_is_missing(
    monkeypatch: pytest.MonkeyPatch, f64_module: str
) -> None:
    monkeypatch.setattr("juliabridge.backends.enzyme.availability.enzyme_available", lambda: False)
    with jax.enable_x64(True):
        fn = juliabridge.load_mlir(f64_module, backend="xla")
        x, w, k = _args()
        got = jax.grad(_loss(fn), argnums=(0, 1))(x, w, k)
        want = jax.grad(_loss(pure), argnums=(0, 1))(x, w, k)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_no_vjp_source_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, f64_module: str) -> None:
    from juliabridge.errors import UnsupportedOpError

    def cannot_lift(*_: object, **__: object) -> None:
        raise UnsupportedOpError(
            "stablehlo.foo at line 3 is not lifted", op="stablehlo.foo", where="line 3"
        )

    monkeypatch.setattr("juliabridge.backends.enzyme.availability.enzyme_available", lambda: False)
    monkeypatch.setattr("juliabridge.backends.lax.LaxBackend.__init__", cannot_lift)
    with jax.enable_x64(True):
        fn = juliabridge.load_mlir(f64_module, backend="xla")
        x, w, k = _args()
        with pytest.raises(juliabridge.TransformError, match="juliabridge vjp") as e:
            jax.grad(_loss(fn))(x, w, k)
        assert "stablehlo.foo at line 3" in str(e.value)


def test_xla_takes_the_vjp_deriver_it_is_given_and_never_needs_enzyme(
    monkeypatch: pytest.MonkeyPatch, f64_module: str
) -> None:
    # backends/xla.py does not import Enzyme: a module lax cannot lift gets its VJP from the
    # deriver passed as derive_vjp= (here JAX's own VJP of `pure`, an independent reference),
    # and with no deriver given nor registered the error is the documented one.
    from juliabridge.backends import xla
    from juliabridge.errors import UnsupportedOpError
    from juliabridge.function import ImportedFunction
    from juliabridge.stablehlo import parse_module
    from juliabridge.transforms.derive import vjp_module_text

    def cannot_lift(*_: object, **__: object) -> None:
        raise UnsupportedOpError("stablehlo.foo does not lift", op="stablehlo.foo", where="l. 3")

    monkeypatch.setattr("juliabridge.backends.lax.LaxBackend.__init__", cannot_lift)
    calls: list[str] = []
    with jax.enable_x64(True):
        module = parse_module(f64_module)

        def derive(m: object, trust: bool) -> str:
            calls.append(getattr(m, "origin", "?"))
            return vjp_module_text(pure, module.arguments, module.results)

        fn = ImportedFunction(module, xla.XlaBackend(module, derive_vjp=derive))
        x, w, k = _args()
        got = jax.grad(_loss(fn), argnums=(0, 1))(x, w, k)
        want = jax.grad(_loss(pure), argnums=(0, 1))(x, w, k)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
        assert calls == [module.origin]
        monkeypatch.setattr(xla, "_fallback_vjp", None)  # as if backends/ registered none
        bare = ImportedFunction(module, xla.XlaBackend(module))
        with pytest.raises(juliabridge.TransformError, match="need a VJP module"):
            jax.grad(_loss(bare))(x, w, k)


def test_vjp_command_stores_a_working_vjp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("enzyme_ad.jax", reason="deriving a VJP module needs enzyme-ad")
    from juliabridge.cli import main
    from tests.bundle_factory import dense_bn_arrays, make_dense_bn

    path = make_dense_bn(tmp_path / "d.bundle")
    assert main(["vjp", str(path)]) == 0
    assert (path / "vjp.mlir").is_file()
    monkeypatch.setattr("juliabridge.backends.enzyme.availability.enzyme_available", lambda: False)
    model = juliabridge.import_lux(path, backend="xla")
    x = dense_bn_arrays()[0]
    g = jax.grad(lambda p: jnp.sum(model.apply(p, model.state, x)[0]))(model.params)
    # d/dbias of sum(y) for the BatchNorm bias is the batch size.
    np.testing.assert_allclose(np.asarray(g["layer_2"]["bias"]), [5.0, 5.0, 5.0], rtol=1e-6)
