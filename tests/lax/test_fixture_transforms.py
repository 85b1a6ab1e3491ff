"""Every JAX transformation of the real Reactant modules and the shipped LeNet bundle, on lax.

For each module in shared/fixtures/reactant (each skips with the reason when the directory is
missing) and for the LeNet example bundle loaded with `juliabridge.import_lux`:

- jit: lax equals XLA running the original module, the StableHLO reference interpreter (where
  it runs the module; see NO_INTERPRETER) and an independent numpy reference written from the
  op semantics (tests/reference/);
- grad, vjp and jvp equal central finite differences along random directions in float64;
- vmap over 3 samples equals the samples one by one and adds no loop to the jaxpr (a module's
  own counted while loop stays the one loop);
- second order (forward-over-reverse Hessian-vector products, reverse-over-reverse grad of grad,
  jax.hessian) equals finite differences of the gradient, on LeNet and the small modules.

Finite differences of an f32 module resolve a derivative to ~1e-3 at best, so derivatives are
checked on the module with its f32 tensor types promoted to f64 (the same ops and attributes,
`promote_f64`), and the real f32 module's own vjp is tied to that f64 one at f32 accuracy.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge.examples.paths import example_bundle_path
from juliabridge.stablehlo import parse_module
from tests.outside import (
    reactant_fixture,
    reactant_fixture_names,
    skip_without_reactant_fixtures,
)
from tests.reference import lux_numpy
from tests.reference.fixture_refs import FIXTURES

from .oracles import assert_same, check_module, random_array
from .transform_checks import (
    Fn,
    check_batched,
    check_grad,
    check_grad_of_grad,
    check_hvp,
    check_jvp,
    check_vjp,
    direction,
    lax_fn,
    pair,
    scalar_loss,
    x64,
)

NAMES = reactant_fixture_names()
#: The interpreter evaluates op by op in C++ loops: a 1024^3 dot_general takes hours; and it
#: returns complex results as attributes jaxlib's bindings cannot read back. XLA and the numpy
#: reference are the oracles there.
NO_INTERPRETER = {
    "gradient_dot_gather_iota.mlir": "a 1024x1024x1024 dot_general (hours in the interpreter)",
    "complex_scatter_fft_dot_symattr.mlir": "complex results (the bindings cannot read them)",
}
#: Modules small enough for second-order checks on every float argument.
SECOND_ORDER_MAX_ELEMENTS = 100_000
#: Arguments larger than this are shared (in_axes None) instead of stacked 3 times for vmap.
VMAP_MAX_ELEMENTS = 1_100_000


@pytest.fixture(autouse=True)
def _x64() -> Iterator[None]:
    with x64():
        yield


_PARAMS: list[str | None] = [*NAMES] or [None]


@pytest.fixture(params=_PARAMS, ids=NAMES or ["no-fixtures"])
def name(request: pytest.FixtureRequest) -> str:
    if request.param is None:
        skip_without_reactant_fixtures()
    return str(request.param)


# --- f32 -> f64 ---------------------------------------------------------------------------------

_F32_TYPE = re.compile(r"(?<=[<x])f32(?=>)")
_HEX_F32 = re.compile(r'dense<("?)0x([0-9A-Fa-f]+)\1>(\s*:\s*tensor<[^>]*?f32>)')


def _hex_to_f64(m: re.Match[str]) -> str:
    quote, digits, rest = m.groups()
    if quote:  # "0x...": the elements' bytes, little-endian
        raw = np.frombuffer(bytes.fromhex(digits), "<f4").astype("<f8").tobytes()
        return f'dense<"0x{raw.hex().upper()}">{rest}'
    # 0x... unquoted: one element's bit pattern, written as a number
    bits = np.array([int(digits, 16)], np.uint32).view(np.float32).astype(np.float64)
    return f"dense<0x{int(bits.view(np.uint64)[0]):016X}>{rest}"


def promote_f64(text: str) -> str:
    """`text` with every f32 tensor element type made f64 (hex f32 constants converted)."""
    return _F32_TYPE.sub("f64", _HEX_F32.sub(_hex_to_f64, text))


def widen(a: np.ndarray) -> np.ndarray:
    """f32 -> f64 and complex64 -> complex128; other arrays unchanged."""
    a = np.asarray(a)
    if a.dtype == np.float32:
        return a.astype(np.float64)
    if a.dtype == np.complex64:
        return a.astype(np.complex128)
    return a


def test_promote_f64_converts_types_and_hex_constants() -> None:
    text = promote_f64(
        "%c = stablehlo.constant dense<0xFF800000> : tensor<f32>\n"
        '%d = stablehlo.constant dense<"0x0000803F00000040"> : tensor<2xf32>\n'
        "%e = stablehlo.add %a, %b : tensor<4x10xf32> // tensor<2xi32>, complex<f32>"
    )
    assert "f32" not in text and "tensor<2xi32>" in text
    assert "dense<0xFFF0000000000000> : tensor<f64>" in text  # -inf
    assert 'dense<"0x000000000000F03F0000000000000040"> : tensor<2xf64>' in text  # 1, 2


# --- one fixture --------------------------------------------------------------------------------


class Fixture:
    """A real module: its text, lax functions (as is, and promoted to f64), inputs, oracles."""

    def __init__(self, name: str, seed: int = 0) -> None:
        self.name = name
        self.path = reactant_fixture(name)
        self.module = parse_module(self.path)
        self.text = self.module.text  # Reactant-only attributes removed (what XLA sees)
        self.ref = FIXTURES.get(name)
        self.fn = juliabridge.load_mlir(self.path, backend="lax")
        assert self.fn.backend_name == "lax"
        self.args = self.inputs(seed)
        self.wrt = tuple(
            i for i, a in enumerate(self.args) if np.issubdtype(np.asarray(a).dtype, np.inexact)
        )
        self.fn64: Fn = lax_fn(promote_f64(self.text)) if "f32" in self.text else self.fn
        self.args64 = [widen(a) for a in self.args]

    def inputs(self, seed: int) -> list[np.ndarray]:
        """The reference's inputs (its extra generators from seed 1 on, for other branches),
        or random arrays of @main's signature for a module without a numpy reference."""
        rng = np.random.default_rng(seed)
        if self.ref is not None:
            makers = (self.ref.make_inputs, *self.ref.extra_inputs)
            return makers[seed % len(makers)](rng)
        return [random_array(rng, a.shape, a.dtype) for a in self.module.arguments]

    @property
    def small(self) -> bool:
        return sum(np.size(a) for a in self.args) <= SECOND_ORDER_MAX_ELEMENTS

    @property
    def tolerances(self) -> dict[str, float]:
        return {"rtol": self.ref.rtol, "atol": self.ref.atol} if self.ref else {}


def test_jit_equals_xla_interpreter_and_reference(name: str) -> None:
    f = Fixture(name)
    expected = list(f.ref.reference(*f.args)) if f.ref else None
    got = check_module(
        f.text,
        f.args,
        interpreter=name not in NO_INTERPRETER,
        expected=expected,
        **f.tolerances,
    )
    # The file as Reactant wrote it (attributes and all) gives the very same values.
    assert_same(jax.jit(f.fn)(*f.args), got, rtol=0, atol=0, what=f"{name} file vs text")
    if f.ref is not None:
        for k in range(1, 1 + len(f.ref.extra_inputs)):
            args = f.inputs(k)
            assert_same(jax.jit(f.fn)(*args), f.ref.reference(*args), **f.tolerances,
                        what=f"{name} inputs {k}")  # fmt: skip


def test_grad_and_vjp_equal_finite_differences(name: str) -> None:
    f = Fixture(name)
    check_grad(f.fn64, f.args64, f.wrt)
    check_vjp(f.fn64, f.args64, f.wrt)
    if f.fn64 is not f.fn:
        check_f32_vjp_matches_f64(f.fn, f.fn64, f.args, f.wrt)


def test_jvp_equals_finite_differences(name: str) -> None:
    f = Fixture(name)
    check_jvp(f.fn64, f.args64, f.wrt)


def test_vmap_is_batched_and_equals_each_sample(name: str) -> None:
    f = Fixture(name)
    samples = [f.args, f.inputs(1), f.inputs(2)]
    stacked, axes = [], []
    for i, a in enumerate(f.args):
        batch = i in f.wrt and np.size(a) <= VMAP_MAX_ELEMENTS
        stacked.append(np.stack([s[i] for s in samples]) if batch else a)
        axes.append(0 if batch else None)
    assert any(ax == 0 for ax in axes), f"{name}: nothing to batch"
    check_batched(f.fn, stacked, axes, **f.tolerances)


def test_second_order_equals_finite_differences_of_the_gradient(name: str) -> None:
    f = Fixture(name)
    if not f.small:
        pytest.skip(f"{name}: {sum(np.size(a) for a in f.args)} input elements; second order "
                    f"is checked on modules of at most {SECOND_ORDER_MAX_ELEMENTS}")  # fmt: skip
    for i in f.wrt:
        check_hvp(f.fn64, f.args64, i)
        check_grad_of_grad(f.fn64, f.args64, i)


def test_hessian_of_the_dense_module() -> None:
    # jax.hessian (forward over reverse, every direction) of Lux-style Dense matvecs.
    f = Fixture(_require("dense_matvec_slices.mlir"))
    loss = scalar_loss(f.fn64)
    a, b = (jnp.asarray(x) for x in f.args64)
    h = jax.jit(jax.hessian(loss, argnums=(0, 1)))(a, b)
    rng = np.random.default_rng(11)
    ta, tb = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
    g = jax.jit(jax.grad(loss, argnums=(0, 1)))
    eps = 1e-5
    hi, lo = g(a + eps * ta, b + eps * tb), g(a - eps * ta, b - eps * tb)
    for k in range(2):
        got = np.tensordot(h[k][0], ta, axes=2) + np.tensordot(h[k][1], tb, axes=2)
        want = (np.asarray(hi[k]) - np.asarray(lo[k])) / (2 * eps)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # The loss is quadratic in the matvecs, so the Hessian in b is not zero: the check has teeth.
    assert float(np.abs(h[1][1]).max()) > 0.1


def _require(fixture: str) -> str:
    reactant_fixture(fixture)
    return fixture


def check_f32_vjp_matches_f64(fn: Fn, fn64: Fn, args: Sequence[Any], wrt: Sequence[int]) -> None:
    """The real module's vjp equals its f64 promotion's to f32 accuracy (same cotangents)."""

    def of(f: Fn, full: Sequence[Any]) -> Any:
        def g(*xs: Any) -> list[Any]:
            a = [jnp.asarray(v) for v in full]
            for i, x in zip(wrt, xs):
                a[i] = x
            return [o for o in f(*a) if jnp.issubdtype(o.dtype, jnp.inexact)]

        return g

    def pulled(f: Fn, full: Sequence[Any], cts: Sequence[np.ndarray]) -> Any:
        g = of(f, full)
        primals = [jnp.asarray(full[i]) for i in wrt]
        outs = jax.eval_shape(g, *primals)
        c = [jnp.asarray(c, o.dtype) for c, o in zip(cts, outs)]
        return jax.jit(lambda p, c: jax.vjp(g, *p)[1](c))(primals, c)

    outs = jax.eval_shape(of(fn, args), *[jnp.asarray(args[i]) for i in wrt])
    rng = np.random.default_rng(6)
    cts = [direction(rng, o) for o in outs]
    got = pulled(fn, args, cts)
    want = pulled(fn64, [widen(a) for a in args], cts)
    for i, g, w in zip(wrt, got, want):
        w = np.asarray(w)
        scale = max(float(np.abs(w).max()), 1.0)
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=f"argument {i}")  # fmt: skip


# --- the shipped LeNet bundle -----------------------------------------------------------------


class LeNet:
    """The example bundle through import_lux, and its module promoted to f64 for derivatives."""

    def __init__(self) -> None:
        root = example_bundle_path("lenet")
        self.model = juliabridge.import_lux(root, backend="lax")
        assert self.model.fn.backend_name == "lax"
        self.leaves, self.treedef = jax.tree.flatten(self.model.params)
        self.x = np.random.default_rng(5).standard_normal((4, 1, 28, 28)).astype(np.float32)
        params = self.model.bundle.manifest.arguments
        assert [a.role for a in params] == ["input"] + ["parameter"] * (len(params) - 1)
        by_path = {tuple(map(str, p)): v for p, v in _paths(self.model.params)}
        self.args = [self.x] + [np.asarray(by_path[tuple(map(str, a.path))]) for a in params[1:]]
        self.fn64 = lax_fn(promote_f64((root / "model.mlir").read_text()))
        self.args64 = [widen(a) for a in self.args]

    def apply(self, x: Any, *leaves: Any) -> list[Any]:
        """model.apply as a function of the input and the parameter leaves."""
        ps = jax.tree.unflatten(self.treedef, leaves)
        return [self.model.apply(ps, self.model.state, x)[0]]


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _paths(v, (*prefix, k))
    else:
        yield prefix, tree


@pytest.fixture(scope="module")
def lenet() -> LeNet:
    with x64():
        return LeNet()


def test_lenet_jit_equals_xla_and_the_numpy_reference(lenet: LeNet) -> None:
    m = lenet.model
    got = np.asarray(jax.jit(m.apply)(m.params, m.state, lenet.x)[0])
    xla = juliabridge.import_lux(example_bundle_path("lenet"), backend="xla")
    want_xla = np.asarray(xla.apply(xla.params, xla.state, lenet.x)[0])
    want, _ = lux_numpy.lenet(lenet.x, jax.tree.map(np.asarray, m.params), {})
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want_xla, rtol=1e-5, atol=1e-6 * scale)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)
    # The f64 promotion used for derivatives computes the same function.
    np.testing.assert_allclose(np.asarray(lenet.fn64(*lenet.args64)[0]), want, rtol=1e-5,
                               atol=1e-5 * scale)  # fmt: skip


def test_lenet_grad_vjp_and_jvp_equal_finite_differences(lenet: LeNet) -> None:
    wrt = tuple(range(len(lenet.args64)))
    check_grad(lenet.fn64, lenet.args64, wrt)
    check_vjp(lenet.fn64, lenet.args64, wrt)
    check_jvp(lenet.fn64, lenet.args64, wrt)


def test_lenet_gradient_through_import_lux_matches_f64(lenet: LeNet) -> None:
    # jax.grad of model.apply (f32, parameters as the pytree import_lux builds) equals the
    # gradient of the f64 module, parameter by parameter.
    m = lenet.model
    loss32 = scalar_loss(lambda x, ps: [m.apply(ps, m.state, x)[0]])
    gx, gps = jax.jit(jax.grad(loss32, argnums=(0, 1)))(lenet.x, m.params)
    want = jax.jit(jax.grad(scalar_loss(lenet.fn64), argnums=tuple(range(len(lenet.args64)))))(
        *lenet.args64
    )
    by_path = {tuple(map(str, p)): v for p, v in _paths(gps)}
    got = [gx] + [
        by_path[tuple(map(str, a.path))] for a in lenet.model.bundle.manifest.arguments[1:]
    ]
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-3,
                                   atol=1e-4 * float(np.abs(w).max()), err_msg=f"argument {k}")  # fmt: skip


def test_lenet_vmap_is_batched_over_inputs_and_parameter_sets(lenet: LeNet) -> None:
    rng = np.random.default_rng(8)
    xs = rng.standard_normal((3, *lenet.x.shape)).astype(np.float32)
    stacks = [
        np.stack([np.asarray(v) * s for s in (1.0, 0.5, -1.25)]).astype(np.float32)
        for v in lenet.leaves
    ]
    n = len(lenet.leaves)
    tol = {"rtol": 1e-5, "atol": 1e-5}
    check_batched(lenet.apply, [xs, *lenet.leaves], [0] + [None] * n, **tol)
    check_batched(lenet.apply, [lenet.x, *stacks], [None] + [0] * n, **tol)
    # The jaxpr of the batched model is the one-sample model's ops on a batch: one convolution
    # per layer, as many as without vmap.
    one = str(jax.make_jaxpr(lenet.apply)(lenet.x, *lenet.leaves))
    vm = str(jax.make_jaxpr(jax.vmap(lenet.apply, in_axes=(0,) + (None,) * n))(xs, *lenet.leaves))
    assert vm.count("conv_general_dilated[") == one.count("conv_general_dilated[") == 2


def test_lenet_second_order_equals_finite_differences_of_the_gradient(lenet: LeNet) -> None:
    # With respect to the image: through both convolutions, max-poolings and Dense layers.
    check_hvp(lenet.fn64, lenet.args64, 0)
    check_grad_of_grad(lenet.fn64, lenet.args64, 0)


def test_lenet_hessian_vector_product_through_import_lux(lenet: LeNet) -> None:
    # Forward over reverse through model.apply itself (f32) agrees with the f64 module.
    m = lenet.model
    t = np.random.default_rng(9).standard_normal(lenet.x.shape)
    loss32 = scalar_loss(lambda x: [m.apply(m.params, m.state, x)[0]])
    loss64 = scalar_loss(lenet.fn64)
    got = jax.jit(lambda x, t: jax.jvp(jax.grad(loss32), (x,), (t,))[1])(
        lenet.x, t.astype(np.float32)
    )
    rest = [jnp.asarray(a) for a in lenet.args64[1:]]
    want = jax.jit(lambda x, t: jax.jvp(jax.grad(lambda x: loss64(x, *rest)), (x,), (t,))[1])(
        jnp.asarray(lenet.args64[0]), t
    )
    w = np.asarray(want)
    assert float(np.abs(w).max()) > 0
    np.testing.assert_allclose(np.asarray(got), w, rtol=1e-3, atol=1e-4 * float(np.abs(w).max()))
    assert pair(got, t) == pytest.approx(pair(w, t), rel=1e-3)
