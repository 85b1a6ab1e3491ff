"""reduce, reduce_window and select_and_scatter on the lax backend.

Each op is checked against XLA running the original module, the StableHLO reference
interpreter and a numpy reference written from the spec (tests/lax/reduction_reference.py);
derivatives against finite differences in float64; vmap for being batched.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import jax
import numpy as np
import pytest

import juliabridge
from juliabridge import TransformError, UnsupportedOpError
from juliabridge.backends.lax.registry import RULES
from juliabridge.backends.lax.valtypes import ELEMENT_TYPES
from tests.outside import reactant_fixture_text

from . import reduction_reference as ref
from .oracles import assert_same, check_module, random_array, run_lax, run_xla
from .transform_checks import check_batched, check_grad, check_hvp, check_jvp, lax_fn, x64

MINE = {"stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.select_and_scatter"}

IDENTITY = {
    ("add", "f"): "0.000000e+00",
    ("multiply", "f"): "1.000000e+00",
    ("maximum", "f"): "0xFF800000",
    ("minimum", "f"): "0x7F800000",
}


@pytest.fixture(autouse=True)
def _x64() -> Iterator[None]:
    with x64():
        yield


def _shape(shape: Sequence[int], t: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{t}>"


def reduce_text(
    op: str, shape: Sequence[int], t: str, dims: Sequence[int], init: str | None, rt: str = ""
) -> str:
    """A reduce of one operand; `init` a constant literal, or None for an init argument."""
    rt = rt or t
    out = _shape([s for d, s in enumerate(shape) if d not in dims], rt)
    x, s = _shape(shape, t), _shape((), t)
    args = f"%x: {x}" + ("" if init else f", %i: {s}")
    const = f"    %i = stablehlo.constant dense<{init}> : {s}\n" if init else ""
    body_t = _shape((), rt)
    dim_list = f"array<i64: {', '.join(map(str, dims))}>" if dims else "array<i64>"
    return f"""module {{
  func.func @main({args}) -> {out} {{
{const}    %r = "stablehlo.reduce"(%x, %i) ({{
    ^bb0(%a: {body_t}, %b: {body_t}):
      %s = stablehlo.{op} %a, %b : {body_t}
      stablehlo.return %s : {body_t}
    }}) {{dimensions = {dim_list}}} : ({x}, {s}) -> {out}
    return %r : {out}
  }}
}}"""


# --- reduce ------------------------------------------------------------------------------------

REDUCE_CASES = (
    [
        (op, t)
        for t in ("f32", "f64", "f16", "bf16", "i8", "i32", "i64", "ui8", "ui32", "i1")
        for op in ("add", "multiply", "maximum", "minimum")
    ]
    + [(op, t) for t in ("i32", "ui16", "i1") for op in ("and", "or", "xor")]
    + [
        ("add", "complex<f32>"),
        ("multiply", "complex<f64>"),
    ]
)


@pytest.mark.parametrize(("op", "t"), REDUCE_CASES)
def test_reduce_monoids_with_an_init_argument(op: str, t: str) -> None:
    rng = np.random.default_rng(0)
    shape, dims = (3, 4, 2), (0, 2)
    x = random_array(rng, shape, t)
    if op == "multiply" and t[0] in "fb":
        x = (1 + 0.1 * x.astype(np.float64)).astype(x.dtype)  # keep products in range
    init = random_array(rng, (), t)  # not the identity, so folding it in matters
    tol = {"f16": 1e-2, "bf16": 1e-1}.get(t, 1e-5)
    want = [ref.reduce(op, x, init, dims)]
    # The interpreter harness cannot pass complex tensors (eval_module's bindings refuse them).
    check_module(reduce_text(op, shape, t, dims, None), [x, init], rtol=tol, atol=tol,
                 expected=want, interpreter=not t.startswith("complex"))  # fmt: skip


@pytest.mark.parametrize(("op", "lit"), [(k[0], v) for k, v in IDENTITY.items()])
@pytest.mark.parametrize("t", ["f32", "f64"])
def test_reduce_with_the_identity_constant_is_the_monoid_primitive(
    op: str, lit: str, t: str
) -> None:
    if t == "f64":
        lit = {"0xFF800000": "0xFFF0000000000000", "0x7F800000": "0x7FF0000000000000"}.get(lit, lit)
    x = random_array(np.random.default_rng(1), (4, 5), t, special=True)
    text = reduce_text(op, (4, 5), t, (1,), lit)
    check_module(text, [x], expected=[ref.reduce(op, x, float(np.float64(_lit(lit, t))), (1,))])
    jaxpr = str(jax.make_jaxpr(lambda x: lax_fn(text)(x))(x))
    prim = {"add": "reduce_sum", "multiply": "reduce_prod", "maximum": "reduce_max",
            "minimum": "reduce_min"}[op]  # fmt: skip
    assert prim in jaxpr
    # The init is the identity, so nothing is folded in after the reduction.
    assert jaxpr.count(" add ") + jaxpr.count(" max ") + jaxpr.count(" min ") == 0


# Constant inits that are no identity but share something with one: xor's identity is 0 (not
# the integer maximum); and's is all bits set (-1 signed, the maximum unsigned); f8E4M3FN has
# no infinity, so max's identity is its lowest finite value (-448, not +448: test below); a
# complex identity must match in both parts (0+1j is not 0).
NEAR_IDENTITY = [
    ("xor", "i32", "2147483647", 2147483647),
    ("and", "i32", "2147483647", 2147483647),
    ("and", "ui16", "65534", 65534),
    ("add", "complex<f32>", "(0.000000e+00,1.000000e+00)", 1j),
    ("multiply", "complex<f64>", "(1.000000e+00,1.000000e+00)", 1 + 1j),
]


@pytest.mark.parametrize(("op", "t", "lit", "init"), NEAR_IDENTITY)
def test_reduce_with_a_constant_init_that_is_not_the_identity_folds_it(
    op: str, t: str, lit: str, init: complex
) -> None:
    x = random_array(np.random.default_rng(19), (3, 4), t)
    want = [ref.reduce(op, x, np.asarray(init).astype(x.dtype), (1,))]
    # The interpreter harness cannot pass complex tensors.
    check_module(reduce_text(op, (3, 4), t, (1,), lit), [x], rtol=1e-5, atol=1e-5,
                 expected=want, interpreter=not t.startswith("complex"))  # fmt: skip


def test_max_of_a_type_without_infinity_folds_its_largest_finite_init() -> None:
    # f8E4M3FN's largest finite value is 448; it beats every element, so every result is 448.
    # (Its max identity is the lowest finite value, -448.) f8 cannot cross the module boundary.
    text = """module {
  func.func @main(%x: tensor<3x4xf32>) -> tensor<3xf32> {
    %y = stablehlo.convert %x : (tensor<3x4xf32>) -> tensor<3x4xf8E4M3FN>
    %i = stablehlo.constant dense<4.480000e+02> : tensor<f8E4M3FN>
    %r = stablehlo.reduce(%y init: %i) applies stablehlo.maximum across dimensions = [1] : (tensor<3x4xf8E4M3FN>, tensor<f8E4M3FN>) -> tensor<3xf8E4M3FN>
    %o = stablehlo.convert %r : (tensor<3xf8E4M3FN>) -> tensor<3xf32>
    return %o : tensor<3xf32>
  }
}"""
    x = random_array(np.random.default_rng(21), (3, 4), "f32")
    assert_same(run_lax(text, [x]), [np.full(3, 448.0, np.float32)], rtol=0, atol=0,
                what="lax vs the spec")  # fmt: skip


def test_an_identity_init_seen_through_a_scalar_broadcast_is_not_folded() -> None:
    # jax-lowered modules put broadcast_in_dim/reshape between a scalar constant and the
    # reduce; the init is still known to be the identity, so the reduce is the bare primitive.
    text = """module {
  func.func @main(%x: tensor<4x5xf32>) -> tensor<4xf32> {
    %z = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %b = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<f32>
    %i = stablehlo.reshape %b : (tensor<f32>) -> tensor<f32>
    %r = stablehlo.reduce(%x init: %i) applies stablehlo.add across dimensions = [1] : (tensor<4x5xf32>, tensor<f32>) -> tensor<4xf32>
    return %r : tensor<4xf32>
  }
}"""
    x = random_array(np.random.default_rng(20), (4, 5), "f32")
    check_module(text, [x], expected=[x.sum(1)])
    jaxpr = str(jax.make_jaxpr(lambda x: lax_fn(text)(x))(x))
    assert "reduce_sum" in jaxpr and jaxpr.count(" add ") == 0


def _lit(lit: str, t: str) -> np.ndarray:
    if lit.startswith("0x"):
        bits = np.array(int(lit, 16), np.uint32 if t == "f32" else np.uint64)
        return bits.view(np.float32 if t == "f32" else np.float64)
    return np.array(float(lit))


def test_reduce_edge_shapes() -> None:
    rng = np.random.default_rng(2)
    init = np.float32(2.5)
    for shape, dims in [((0, 3), (0,)), ((3, 0), (1,)), ((2, 1, 3, 1, 2), (0, 2, 4))]:
        x = random_array(rng, shape, "f32")
        for op in ("add", "maximum"):
            check_module(reduce_text(op, shape, "f32", dims, None), [x, init],
                         expected=[ref.reduce(op, x, init, dims)])  # fmt: skip
    # Over no dimensions XLA returns the input and the interpreter applies the init once;
    # the spec allows both, and the lax backend follows XLA, which runs the module for real.
    for shape in [(), (3,)]:
        x = random_array(rng, shape, "f32")
        check_module(reduce_text("add", shape, "f32", (), None), [x, init], interpreter=False,
                     expected=[x])  # fmt: skip


def test_reduce_body_in_a_wider_type_converts_first() -> None:
    # (C6) is_promotable: a bf16 input reduced by an f32 body gives an f32 result. XLA's HLO
    # verifier refuses this module and the interpreter aborts on it, so numpy is the oracle.
    text = reduce_text("add", (4, 6), "bf16", (1,), None, rt="f32")
    x = random_array(np.random.default_rng(3), (4, 6), "bf16")
    init = np.asarray(1.5, ELEMENT_TYPES["bf16"])
    want = [ref.reduce("add", x.astype(np.float32), np.float32(init), (1,))]
    got = run_lax(text, [x, init])
    assert_same(got, want, rtol=1e-6, atol=1e-6, what="lax vs numpy")


VARIADIC = """module {
  func.func @main(%x: tensor<3x4xf32>, %y: tensor<3x4xi32>) -> (tensor<3xf32>, tensor<3xi32>) {
    %z = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %m = stablehlo.constant dense<-2147483648> : tensor<i32>
    %r:2 = stablehlo.reduce(%x init: %z), (%y init: %m) across dimensions = [1] : (tensor<3x4xf32>, tensor<3x4xi32>, tensor<f32>, tensor<i32>) -> (tensor<3xf32>, tensor<3xi32>)
     reducer(%a1: tensor<f32>, %b1: tensor<f32>) (%a2: tensor<i32>, %b2: tensor<i32>)  {
      %s = stablehlo.add %a1, %b1 : tensor<f32>
      %t = stablehlo.maximum %b2, %a2 : tensor<i32>
      stablehlo.return %s, %t : tensor<f32>, tensor<i32>
    }
    return %r#0, %r#1 : tensor<3xf32>, tensor<3xi32>
  }
}"""


def test_variadic_reduce_of_independent_monoids() -> None:
    rng = np.random.default_rng(4)
    x, y = random_array(rng, (3, 4), "f32"), random_array(rng, (3, 4), "i32")
    want = [x.sum(1), y.max(1)]
    check_module(VARIADIC, [x, y], expected=want)
    jaxpr = str(jax.make_jaxpr(lambda x, y: lax_fn(VARIADIC)(x, y))(x, y))
    assert "reduce_sum" in jaxpr and "reduce_max" in jaxpr


# Reactant's argmax (src/Ops.jl): values and an iota, one predicate a1 >= a2, init (-inf, -1).
ARGMAX = """module {
  func.func @main(%x: tensor<3x5xf64>) -> (tensor<3xf64>, tensor<3xi64>) {
    %iota = stablehlo.iota dim = 1 : tensor<3x5xi64>
    %ninf = stablehlo.constant dense<0xFFF0000000000000> : tensor<f64>
    %m1 = stablehlo.constant dense<-1> : tensor<i64>
    %r:2 = stablehlo.reduce(%x init: %ninf), (%iota init: %m1) across dimensions = [1] : (tensor<3x5xf64>, tensor<3x5xi64>, tensor<f64>, tensor<i64>) -> (tensor<3xf64>, tensor<3xi64>)
     reducer(%a1: tensor<f64>, %b1: tensor<f64>) (%a2: tensor<i64>, %b2: tensor<i64>)  {
      %c = stablehlo.compare GE, %a1, %b1 : (tensor<f64>, tensor<f64>) -> tensor<i1>
      %v = stablehlo.select %c, %a1, %b1 : tensor<i1>, tensor<f64>
      %i = stablehlo.select %c, %a2, %b2 : tensor<i1>, tensor<i64>
      stablehlo.return %v, %i : tensor<f64>, tensor<i64>
    }
    return %r#0, %r#1 : tensor<3xf64>, tensor<3xi64>
  }
}"""


def test_reactant_argmax_is_exact_and_differentiable() -> None:
    x = np.random.default_rng(5).standard_normal((3, 5))
    want = [x.max(1), x.argmax(1).astype(np.int64)]
    check_module(ARGMAX, [x], expected=want)
    fn = lax_fn(ARGMAX)
    check_jvp(fn, [x], [0])
    check_grad(fn, [x], [0])
    check_hvp(fn, [x], 0)
    g = jax.grad(lambda x: fn(x)[0].sum())(x)
    np.testing.assert_array_equal(np.asarray(g), np.eye(5)[x.argmax(1)])
    check_batched(fn, [np.stack([x, -x, 2 * x])], [0])


def test_reactant_argmax_ties_nan_and_all_minus_inf_match_xla() -> None:
    # Ties depend on XLA's reduction order; the lifted op is the same reduce, so it agrees.
    x = np.array([[1, 3, 3, 0, 3], [np.nan, 1, 2, np.nan, 0], [-np.inf] * 5], np.float64)
    got = run_lax(ARGMAX, [x])
    want = run_xla(ARGMAX, [x])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])
    # The all -inf row keeps the init pair or picks an element; either way its derivative
    # is that of a constant -inf or of the picked element, finite and no NaN.
    g = jax.grad(lambda x: lax_fn(ARGMAX)(x)[0][0])(x)
    assert np.isfinite(np.asarray(g)).all()


def test_argmax_whose_init_pair_no_element_beats_has_the_init_derivative() -> None:
    # Init (+inf, 5): 5 is one past the last position, a "none found" index. Every finite
    # element loses to +inf, so each row returns the init pair, a constant: derivative zero.
    text = ARGMAX.replace("0xFFF0000000000000", "0x7FF0000000000000").replace(
        "dense<-1> : tensor<i64>", "dense<5> : tensor<i64>"
    )
    x = np.random.default_rng(6).standard_normal((3, 5))
    check_module(text, [x], expected=[np.full(3, np.inf), np.full(3, 5, np.int64)])
    fn = lax_fn(text)
    _, tangent = jax.jvp(lambda x: fn(x)[0], (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(np.asarray(tangent), np.zeros(3))


def test_jax_argmax_body_is_exact_and_refuses_reverse_mode_by_name() -> None:
    # jnp.argmax's body uses two predicates (value, and value-or-lower-index), so the value
    # result is not the element at the index result: the generic reduce, marked.
    text = jax.jit(lambda x: jax.numpy.argmax(x, axis=1)).lower(np.ones((3, 4))).as_text()
    x = np.array([[1, 5, 5, 0], [2, 2, 2, 2], [0, -1, 3, 9]], np.float64)
    check_module(_drop_result_info(text), [x], expected=[x.argmax(1).astype(np.int64)])
    values = ARGMAX_TWO_PREDICATES
    fn = lax_fn(values)
    check_jvp(fn, [x + np.arange(12).reshape(3, 4) * 1e-3], [0])
    with pytest.raises(TransformError, match=r"stablehlo.reduce at line \d+.*reverse-mode"):
        jax.grad(lambda x: fn(x)[0].sum())(x)


def _drop_result_info(text: str) -> str:
    import re

    return re.sub(r"\s*\{jax\.result_info = \"[^\"]*\"\}", "", text)


ARGMAX_TWO_PREDICATES = """module {
  func.func @main(%x: tensor<3x4xf64>) -> (tensor<3xf64>, tensor<3xi32>) {
    %0 = stablehlo.iota dim = 1 : tensor<3x4xi32>
    %cst = stablehlo.constant dense<0xFFF0000000000000> : tensor<f64>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %1:2 = stablehlo.reduce(%x init: %cst), (%0 init: %c) across dimensions = [1] : (tensor<3x4xf64>, tensor<3x4xi32>, tensor<f64>, tensor<i32>) -> (tensor<3xf64>, tensor<3xi32>)
     reducer(%arg1: tensor<f64>, %arg3: tensor<f64>) (%arg2: tensor<i32>, %arg4: tensor<i32>)  {
      %2 = stablehlo.compare GT, %arg1, %arg3, FLOAT : (tensor<f64>, tensor<f64>) -> tensor<i1>
      %3 = stablehlo.compare NE, %arg1, %arg1, FLOAT : (tensor<f64>, tensor<f64>) -> tensor<i1>
      %4 = stablehlo.or %2, %3 : tensor<i1>
      %5 = stablehlo.compare EQ, %arg1, %arg3, FLOAT : (tensor<f64>, tensor<f64>) -> tensor<i1>
      %6 = stablehlo.compare LT, %arg2, %arg4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %7 = stablehlo.and %5, %6 : tensor<i1>
      %8 = stablehlo.or %4, %7 : tensor<i1>
      %9 = stablehlo.select %4, %arg1, %arg3 : tensor<i1>, tensor<f64>
      %10 = stablehlo.select %8, %arg2, %arg4 : tensor<i1>, tensor<i32>
      stablehlo.return %9, %10 : tensor<f64>, tensor<i32>
    }
    return %1#0, %1#1 : tensor<3xf64>, tensor<3xi32>
  }
}"""


@pytest.mark.parametrize("op", ["add", "maximum", "minimum", "multiply"])
def test_reduce_derivatives_match_finite_differences(op: str) -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4, 2)) + (2.0 if op == "multiply" else 0.0)
    init = np.float64(0.3)
    fn = lax_fn(reduce_text(op, (3, 4, 2), "f64", (0, 2), None))
    check_jvp(fn, [x, init], [0, 1])
    check_grad(fn, [x, init], [0, 1])
    check_hvp(fn, [x, init], 0)
    check_batched(fn, [np.stack([x, 2 * x]), init], [0, None])


def test_generic_reduce_body_is_exact_forward_and_named_in_reverse() -> None:
    # max written as select(a > b, a, b): the same values, but not a body JAX recognises.
    text = """module {
  func.func @main(%x: tensor<4x3xf64>) -> tensor<3xf64> {
    %i = stablehlo.constant dense<-1.000000e+03> : tensor<f64>
    %r = "stablehlo.reduce"(%x, %i) ({
    ^bb0(%a: tensor<f64>, %b: tensor<f64>):
      %c = "stablehlo.compare"(%a, %b) {comparison_direction = #stablehlo<comparison_direction GT>} : (tensor<f64>, tensor<f64>) -> tensor<i1>
      %s = "stablehlo.select"(%c, %a, %b) : (tensor<i1>, tensor<f64>, tensor<f64>) -> tensor<f64>
      "stablehlo.return"(%s) : (tensor<f64>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<4x3xf64>, tensor<f64>) -> tensor<3xf64>
    "func.return"(%r) : (tensor<3xf64>) -> ()
  }
}"""
    x = np.random.default_rng(7).standard_normal((4, 3))
    check_module(text, [x], expected=[x.max(0)])
    fn = lax_fn(text)
    check_jvp(fn, [x], [0])
    check_batched(fn, [np.stack([x, x + 1])], [0])
    with pytest.raises(TransformError, match=r"line 4.*not one of the monoids"):
        jax.grad(lambda x: fn(x)[0].sum())(x)


def _fold_body(t: str) -> str:
    """A reduce body that is no monoid: acc * x + x (the result depends on where init enters)."""
    return f"""^bb0(%a: tensor<{t}>, %b: tensor<{t}>):
      %m = stablehlo.multiply %a, %b : tensor<{t}>
      %s = stablehlo.add %m, %b : tensor<{t}>
      stablehlo.return %s : tensor<{t}>"""


def test_forward_derivative_of_a_generic_complex_reduce() -> None:
    # Body a*b + a + b = (a + 1)(b + 1) - 1 (no single monoid op): from init 0 the reduce is
    # prod(x + 1) - 1, and its derivative along t is sum_i t_i prod_{j != i} (x_j + 1).
    c = "complex<f64>"
    text = f"""module {{
  func.func @main(%x: tensor<3x{c}>) -> tensor<{c}> {{
    %z = stablehlo.constant dense<(0.000000e+00,0.000000e+00)> : tensor<{c}>
    %r = "stablehlo.reduce"(%x, %z) ({{
    ^bb0(%a: tensor<{c}>, %b: tensor<{c}>):
      %p = stablehlo.multiply %a, %b : tensor<{c}>
      %s = stablehlo.add %a, %b : tensor<{c}>
      %t = stablehlo.add %p, %s : tensor<{c}>
      stablehlo.return %t : tensor<{c}>
    }}) {{dimensions = array<i64: 0>}} : (tensor<3x{c}>, tensor<{c}>) -> tensor<{c}>
    return %r : tensor<{c}>
  }}
}}"""
    rng = np.random.default_rng(23)
    x = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    t = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    check_module(text, [x], interpreter=False, expected=[np.prod(x + 1) - 1], rtol=1e-12)
    _, tangent = jax.jvp(lambda x: lax_fn(text)(x)[0], (x,), (t,))
    want = sum(t[i] * np.prod(np.delete(x, i) + 1) for i in range(3))
    np.testing.assert_allclose(complex(tangent), want, rtol=1e-12)


def test_vmap_with_batched_init_of_a_non_monoid_reduce() -> None:
    # JAX's reduce batching rule refused batched init values (NotImplementedError); each
    # sample now runs the very reduce a per-sample call does. Reference: the sequential fold
    # acc = acc * x + x from the init (what XLA's CPU reduce computes here), per sample.
    text = f"""module {{
  func.func @main(%x: tensor<4x3xf64>, %i: tensor<f64>) -> tensor<3xf64> {{
    %r = "stablehlo.reduce"(%x, %i) ({{
    {_fold_body("f64")}
    }}) {{dimensions = array<i64: 0>}} : (tensor<4x3xf64>, tensor<f64>) -> tensor<3xf64>
    return %r : tensor<3xf64>
  }}
}}"""
    rng = np.random.default_rng(21)
    xs, inits = 0.5 * rng.standard_normal((3, 4, 3)), rng.standard_normal(3)
    fn = lax_fn(text)
    got = np.asarray(jax.jit(jax.vmap(lambda x, i: fn(x, i)[0]))(xs, inits))
    want = []
    for x, i in zip(xs, inits):
        acc = np.full(3, i)
        for row in x:
            acc = acc * row + row
        want.append(acc)
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-12)
    for k in range(3):
        assert_same([got[k]], run_xla(text, [xs[k], inits[k]]), rtol=1e-12, atol=1e-12,
                    what=f"sample {k} vs xla")  # fmt: skip
    # Unbatched init, batched operand: still JAX's batching, and forward mode under vmap.
    check_batched(fn, [xs, inits[0]], [0, None])
    tangents = jax.vmap(lambda x, i: jax.jvp(lambda i: fn(x, i)[0], (i,), (1.0,))[1])(xs, inits)
    for k in range(3):
        eps = 1e-6
        fd = (fn(xs[k], inits[k] + eps)[0] - fn(xs[k], inits[k] - eps)[0]) / (2 * eps)
        np.testing.assert_allclose(tangents[k], fd, rtol=1e-6)


def test_vmap_with_batched_init_of_complex_max_and_generic_window() -> None:
    c = "complex<f64>"
    text = f"""module {{
  func.func @main(%x: tensor<5x{c}>, %i: tensor<{c}>, %y: tensor<6xf64>, %j: tensor<f64>)
      -> (tensor<{c}>, tensor<3xf64>) {{
    %r = "stablehlo.reduce"(%x, %i) ({{
    ^bb0(%a: tensor<{c}>, %b: tensor<{c}>):
      %s = stablehlo.maximum %a, %b : tensor<{c}>
      stablehlo.return %s : tensor<{c}>
    }}) {{dimensions = array<i64: 0>}} : (tensor<5x{c}>, tensor<{c}>) -> tensor<{c}>
    %w = "stablehlo.reduce_window"(%y, %j) <{{window_dimensions = array<i64: 3>,
        window_strides = array<i64: 2>, padding = dense<[[1, 0]]> : tensor<1x2xi64>}}> ({{
    {_fold_body("f64")}
    }}) : (tensor<6xf64>, tensor<f64>) -> tensor<3xf64>
    return %r, %w : tensor<{c}>, tensor<3xf64>
  }}
}}"""
    rng = np.random.default_rng(22)
    xs = rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))
    xs[:, 1] = xs[:, 0].real + 1j * (xs[:, 0].imag + 1)  # real-part ties: the imag part decides
    inits = np.array([5 + 0j, -9 + 0j, xs[2, 0].real + 0j])
    ys, js = 0.5 * rng.standard_normal((3, 6)), rng.standard_normal(3)
    fn = lax_fn(text)
    got = jax.jit(jax.vmap(lambda *a: tuple(fn(*a))))(xs, inits, ys, js)
    for k in range(3):
        # spec.md#maximum on complex: lexicographic on (real, imag).
        best = max([inits[k], *xs[k]], key=lambda v: (v.real, v.imag))
        assert complex(got[0][k]) == best
        assert_same([got[1][k]], fn(xs[k], inits[k], ys[k], js[k])[1:], rtol=0, atol=0,
                    what=f"window sample {k}")  # fmt: skip
        assert_same([got[1][k]], run_xla(text, [xs[k], inits[k], ys[k], js[k]])[1:],
                    rtol=1e-12, atol=1e-12, what=f"window sample {k} vs xla")  # fmt: skip


# --- reduce_window -----------------------------------------------------------------------------


def window_text(
    op: str,
    shape: Sequence[int],
    t: str,
    geometry: dict[str, Sequence[int]],
    padding: Sequence[tuple[int, int]],
    init: str | None,
) -> str:
    """A reduce_window in the generic syntax Reactant prints; attributes left out default."""
    from .reduction_reference import reduce_window as _rw  # only for the output shape

    x = np.zeros(shape)
    window = geometry["window_dimensions"]
    out_shape = _rw("add", x, 0, window, geometry.get("window_strides", [1] * len(shape)),
                    padding, geometry.get("base_dilations", [1] * len(shape)),
                    geometry.get("window_dilations", [1] * len(shape))).shape  # fmt: skip
    xs, s, out = _shape(shape, t), _shape((), t), _shape(out_shape, t)
    attrs = [f"{k} = array<i64: {', '.join(map(str, v))}>" for k, v in sorted(geometry.items())]
    flat = ", ".join(f"[{lo}, {hi}]" for lo, hi in padding)
    attrs.append(f"padding = dense<[{flat}]> : tensor<{len(padding)}x2xi64>")
    args = f"%x: {xs}" + ("" if init else f", %i: {s}")
    const = f"    %i = stablehlo.constant dense<{init}> : {s}\n" if init else ""
    return f"""module {{
  func.func @main({args}) -> {out} {{
{const}    %r = "stablehlo.reduce_window"(%x, %i) <{{{", ".join(attrs)}}}> ({{
    ^bb0(%a: {s}, %b: {s}):
      %s = stablehlo.{op} %a, %b : {s}
      stablehlo.return %s : {s}
    }}) : ({xs}, {s}) -> {out}
    return %r : {out}
  }}
}}"""


GEOMETRIES = [
    # (shape, geometry, padding)
    ((4, 6), {"window_dimensions": [2, 2], "window_strides": [2, 2]}, [(0, 0), (0, 0)]),
    ((5, 7), {"window_dimensions": [3, 2], "window_strides": [2, 1]}, [(1, 1), (0, 2)]),
    ((5, 6), {"window_dimensions": [2, 3]}, [(-1, 0), (1, -2)]),
    ((3, 4), {"window_dimensions": [2, 2], "base_dilations": [2, 1]}, [(0, 1), (1, 0)]),
    ((6, 7), {"window_dimensions": [2, 2], "window_dilations": [2, 3]}, [(0, 0), (1, 1)]),
    ((1, 2, 5, 5), {"window_dimensions": [1, 1, 3, 3], "window_strides": [1, 1, 2, 2],
                    "base_dilations": [1, 1, 2, 1], "window_dilations": [1, 1, 1, 2]},
     [(0, 0), (0, 0), (2, 1), (1, 1)]),
    ((5,), {"window_dimensions": [5]}, [(4, 0)]),
]  # fmt: skip


def _window_ref(
    op: str, x: np.ndarray, init: object, case: tuple, as_xla: bool = False
) -> np.ndarray:
    shape, g, padding = case
    r = len(shape)
    return ref.reduce_window(op, x, init, g["window_dimensions"], g.get("window_strides", [1] * r),
                             padding, g.get("base_dilations", [1] * r),
                             g.get("window_dilations", [1] * r), as_xla=as_xla)  # fmt: skip


def _has_holes(case: tuple) -> bool:
    _, g, padding = case
    return any(p != (0, 0) for p in padding) or any(b != 1 for b in g.get("base_dilations", []))


WINDOW_CASES = [
    (case, op, t)
    for case in GEOMETRIES
    for op, t in [("add", "f32"), ("maximum", "f32"), ("multiply", "f32")]
] + [
    (case, op, t)
    for case in (GEOMETRIES[1], GEOMETRIES[3])  # padding; base dilation and padding
    for op, t in [("minimum", "f64"), ("add", "i32"), ("maximum", "i8"), ("maximum", "i1"),
                  ("minimum", "i1"), ("add", "f16"), ("and", "i32")]
]  # fmt: skip


@pytest.mark.parametrize(("case", "op", "t"), WINDOW_CASES,
                         ids=lambda v: str(v[0]) + str(sorted(v[1])) if isinstance(v, tuple) else v)  # fmt: skip
def test_reduce_window_with_an_init_argument(case: tuple, op: str, t: str) -> None:
    rng = np.random.default_rng(8)
    shape, g, padding = case
    x = random_array(rng, shape, t)
    init = random_array(rng, (), t)
    tol = 1e-2 if t == "f16" else 1e-5
    # XLA leaves padding and dilation holes out and applies the init once per window; the spec
    # (and the interpreter) fill them with the init. The lax backend computes what XLA does;
    # the two agree for idempotent bodies (maximum, minimum, and) and where there are no holes.
    agree = op in ("maximum", "minimum", "and") or not _has_holes(case)
    if agree:
        np.testing.assert_allclose(_window_ref(op, x, init, case, as_xla=True).astype(float),
                                   _window_ref(op, x, init, case).astype(float), rtol=tol)  # fmt: skip
    check_module(window_text(op, shape, t, g, padding, None), [x, init], rtol=tol, atol=tol,
                 interpreter=agree, expected=[_window_ref(op, x, init, case, as_xla=True)])  # fmt: skip


@pytest.mark.parametrize("case", GEOMETRIES, ids=lambda c: str(c[0]) + str(sorted(c[1])))
@pytest.mark.parametrize("op", ["add", "maximum", "minimum"])
def test_reduce_window_identity_init_and_derivatives(case: tuple, op: str) -> None:
    shape, g, padding = case
    lit = {"add": "0.0", "maximum": "0xFFF0000000000000", "minimum": "0x7FF0000000000000"}[op]
    text = window_text(op, shape, "f64", g, padding, lit)
    x = np.random.default_rng(9).standard_normal(shape)
    init = {"add": 0.0, "maximum": -np.inf, "minimum": np.inf}[op]
    check_module(text, [x], expected=[_window_ref(op, x, init, case)])
    if case is GEOMETRIES[0] or case is GEOMETRIES[-1] or op == "minimum":
        return  # the Lux/cumsum forms are covered below, minimum's rules are maximum's
    fn = lax_fn(text)
    jaxpr = str(jax.make_jaxpr(lambda x: fn(x))(x))
    assert {"add": "reduce_window_sum", "maximum": "reduce_window_max",
            "minimum": "reduce_window_min"}[op] in jaxpr  # fmt: skip
    # The init is the identity, so nothing is combined with the windows' results.
    assert jaxpr.count(" add ") + jaxpr.count(" max ") + jaxpr.count(" min ") == 0
    check_jvp(fn, [x], [0])
    check_batched(fn, [np.stack([x, -x])], [0])
    dilated = any(d != 1 for d in g.get("window_dilations", []))
    if op != "add" and dilated:
        with pytest.raises(TransformError, match="window dilation"):
            jax.grad(lambda x: fn(x)[0].sum())(x)
        return
    check_grad(fn, [x], [0])
    check_hvp(fn, [x], 0)


def test_reduce_window_non_identity_init_derivative_includes_the_init() -> None:
    case = GEOMETRIES[1]
    shape, g, padding = case
    fn = lax_fn(window_text("maximum", shape, "f64", g, padding, None))
    x = np.random.default_rng(10).standard_normal(shape)
    init = np.float64(0.1)  # beats some windows (and every padding element)
    check_jvp(fn, [x, init], [0, 1])
    check_grad(fn, [x, init], [0, 1])


def test_generic_window_body_refuses_reverse_mode_by_name() -> None:
    shape, g, padding = GEOMETRIES[1]
    fn = lax_fn(window_text("multiply", shape, "f64", g, padding, "1.0"))
    x = 1 + 0.1 * np.random.default_rng(11).standard_normal(shape)
    check_jvp(fn, [x], [0])
    with pytest.raises(TransformError, match=r"stablehlo\.reduce_window at line 4"):
        jax.grad(lambda x: fn(x)[0].sum())(x)


def test_cumsum_like_the_reactant_fixture() -> None:
    # The fixture's reduce_window (window 5, padding [[4, 0]], add) is a cumulative sum.
    shape, g, padding = GEOMETRIES[-1]
    x = np.arange(1.0, 6.0, dtype=np.float32)
    check_module(window_text("add", shape, "f32", g, padding, "0.000000e+00"), [x],
                 expected=[np.cumsum(x)])  # fmt: skip


def _needs_only_mine(text: str) -> None:
    """Skip (saying which) when the module needs ops of families not merged yet."""
    import re

    missing = sorted(
        set(re.findall(r"stablehlo\.[a-z_]+", text)) - set(RULES) - {"stablehlo.return"}
    )
    if missing:
        pytest.skip(f"ops of other families not lifted yet: {', '.join(missing)}")


def test_cumsum_fixture_module() -> None:
    text = reactant_fixture_text("cumsum_reduce_window.mlir")
    _needs_only_mine(text)
    x = np.random.default_rng(12).standard_normal((5, 7)).astype(np.float32)
    check_module(text, [x], expected=[np.cumsum(x, axis=0).T, x])


# --- select_and_scatter ------------------------------------------------------------------------


def sas_text(
    select: str,
    scatter: str,
    shape: Sequence[int],
    src: Sequence[int],
    t: str,
    window: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    init: str | None = None,
    swap: bool = False,
) -> str:
    xs, ss, s = _shape(shape, t), _shape(src, t), _shape((), t)
    flat = ", ".join(f"[{lo}, {hi}]" for lo, hi in padding)
    args = f"%x: {xs}, %src: {ss}" + ("" if init else f", %i: {s}")
    const = f"    %i = stablehlo.constant dense<{init}> : {s}\n" if init else ""
    a, b = ("%b", "%a") if swap else ("%a", "%b")
    return f"""module {{
  func.func @main({args}) -> {xs} {{
{const}    %r = "stablehlo.select_and_scatter"(%x, %src, %i) <{{padding = dense<[{flat}]> : tensor<{len(shape)}x2xi64>, window_dimensions = array<i64: {", ".join(map(str, window))}>, window_strides = array<i64: {", ".join(map(str, strides))}>}}> ({{
    ^bb0(%a: {s}, %b: {s}):
      %c = stablehlo.compare {select}, {a}, {b} : ({s}, {s}) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }}, {{
    ^bb0(%a: {s}, %b: {s}):
      %c = stablehlo.{scatter} %a, %b : {s}
      stablehlo.return %c : {s}
    }}) : ({xs}, {ss}, {s}) -> {xs}
    return %r : {xs}
  }}
}}"""


SAS_GEOMETRIES = [
    # operand shape, source shape, window, strides, padding
    ((4, 6), (2, 3), (2, 2), (2, 2), [(0, 0), (0, 0)]),
    ((1, 2, 5, 4), (1, 2, 2, 2), (1, 1, 3, 2), (1, 1, 2, 2), [(0, 0), (0, 0), (0, 0), (0, 0)]),
    ((5, 5), (3, 3), (3, 3), (2, 2), [(1, 1), (1, 1)]),
    ((4,), (3,), (2,), (2,), [(1, 1)]),
]

SPECIALS = np.array([[-np.inf, 2.0, 2.0, -np.inf, 1.0, np.nan], [3.0, 3.0, 3.0, 0.0, -0.0, 0.0]])


SAS_CASES = [(g, "GE") for g in SAS_GEOMETRIES] + [
    (g, s) for g in SAS_GEOMETRIES[1:3] for s in ("GT", "LE", "LT")
]


@pytest.mark.parametrize(("geometry", "select"), SAS_CASES,
                         ids=lambda v: str(v[0]) + str(v[4][-1]) if isinstance(v, tuple) else v)  # fmt: skip
def test_select_and_scatter_add(geometry: tuple, select: str) -> None:
    shape, src, window, strides, padding = geometry
    rng = np.random.default_rng(13)
    x = np.round(rng.standard_normal(shape), 0).astype(np.float32)  # many ties
    flat = x.reshape(-1)
    flat[: min(flat.size, SPECIALS.size)] = SPECIALS.reshape(-1)[: flat.size]
    s = rng.standard_normal(src).astype(np.float32)
    text = sas_text(select, "add", shape, src, "f32", window, strides, padding)
    zero = np.float32(0)
    want = ref.select_and_scatter(select, "add", x, s, zero, window, strides, padding)
    check_module(text, [x, s, zero], expected=[want])
    if all(p == (0, 0) for p in padding):
        return
    # A nonzero init: XLA gives init + sum of the sources scattered there (what the spec's
    # reduce says); the interpreter adds the init once more at picked positions. lax is XLA.
    init = np.float32(0.25)
    want = ref.select_and_scatter(select, "add", x, s, init, window, strides, padding)
    check_module(text, [x, s, init], expected=[want], interpreter=False)


def test_max_pool_gradient_is_jax_select_and_scatter_add() -> None:
    shape, src, window, strides, padding = SAS_GEOMETRIES[1]
    text = sas_text("GE", "add", shape, src, "f64", window, strides, padding, init="0.0")
    rng = np.random.default_rng(14)
    x, s = rng.standard_normal(shape), rng.standard_normal(src)
    fn = lax_fn(text)
    jaxpr = str(jax.make_jaxpr(lambda x, s: fn(x, s))(x, s))
    assert "select_and_scatter_add" in jaxpr and "select_prim=ge" in jaxpr
    check_module(text, [x, s], expected=[
        ref.select_and_scatter("GE", "add", x, s, 0.0, window, strides, padding)])  # fmt: skip
    check_jvp(fn, [x, s], [1])
    check_grad(fn, [x, s], [1])
    check_hvp(fn, [x, s], 1)
    check_batched(fn, [np.stack([x, -x]), np.stack([s, 2 * s])], [0, 0])


@pytest.mark.parametrize("select", ["LE", "GE", "LT", "GT"])
def test_swapped_compare_is_the_mirrored_select(select: str) -> None:
    # compare LE, %b, %a selects like GE, %a, %b: the max-pool gradient, written backwards
    # (and the strict compares like their mirrors, which take the exact selection).
    shape, src, window, strides, padding = SAS_GEOMETRIES[0]
    text = sas_text(select, "add", shape, src, "f32", window, strides, padding, swap=True)
    rng = np.random.default_rng(17)
    x = np.round(rng.standard_normal(shape)).astype(np.float32)
    s = rng.standard_normal(src).astype(np.float32)
    mirrored = {"LE": "GE", "GE": "LE", "LT": "GT", "GT": "LT"}[select]
    want = ref.select_and_scatter(mirrored, "add", x, s, 0.0, window, strides, padding)
    check_module(text, [x, s, np.float32(0)], expected=[want])
    if select in ("LE", "GE"):
        jaxpr = str(jax.make_jaxpr(lambda *a: lax_fn(text)(*a))(x, s, np.float32(0)))
        assert f"select_prim={mirrored.lower()}" in jaxpr


@pytest.mark.parametrize("select", ["GT", "LE"])
def test_padded_select_and_scatter_derivatives(select: str) -> None:
    shape, src, window, strides, padding = SAS_GEOMETRIES[2]
    text = sas_text(select, "add", shape, src, "f64", window, strides, padding, swap=True)
    rng = np.random.default_rng(15)
    x, s, init = rng.standard_normal(shape), rng.standard_normal(src), np.float64(0.5)
    mirrored = {"GT": "LT", "LE": "GE"}[select]  # compare(b, a) is the mirrored compare(a, b)
    check_module(text, [x, s, init], interpreter=False, expected=[  # nonzero init: see above
        ref.select_and_scatter(mirrored, "add", x, s, init, window, strides, padding)])  # fmt: skip
    fn = lax_fn(text)
    check_jvp(fn, [x, s, init], [1, 2])
    check_grad(fn, [x, s, init], [1, 2])
    check_hvp(fn, [x, s, init], 1)
    check_batched(fn, [np.stack([x, -x]), s, init], [0, None, None])


@pytest.mark.parametrize(("scatter", "t"), [("multiply", "f32"), ("maximum", "f32"),
                                            ("minimum", "i32"), ("add", "i32"), ("or", "i1")])  # fmt: skip
def test_select_and_scatter_other_scatter_bodies(scatter: str, t: str) -> None:
    shape, src, window, strides, padding = SAS_GEOMETRIES[2]
    rng = np.random.default_rng(16)
    x, s, init = random_array(rng, shape, t), random_array(rng, src, t), random_array(rng, (), t)
    select = "GE"
    want = ref.select_and_scatter(select, scatter, x, s, init, window, strides, padding)
    check_module(sas_text(select, scatter, shape, src, t, window, strides, padding), [x, s, init],
                 expected=[want], interpreter=scatter in ("maximum", "minimum"))  # fmt: skip


@pytest.mark.parametrize("scatter", ["multiply", "maximum"])
def test_select_and_scatter_other_scatter_bodies_differentiate(scatter: str) -> None:
    shape, src, window, strides, padding = SAS_GEOMETRIES[2]
    fn = lax_fn(sas_text("GE", scatter, shape, src, "f64", window, strides, padding))
    rng = np.random.default_rng(18)
    x, s, init = rng.standard_normal(shape), rng.standard_normal(src), np.float64(0.3)
    check_jvp(fn, [x, s, init], [1, 2])
    check_grad(fn, [x, s, init], [1, 2])
    check_hvp(fn, [x, s, init], 1)


#: Geometries of padded pools (operand, window, strides, padding, the dimension XLA's CPU
#: expansion visits slowest, or None where its order is not the plain rule below).
TIE_GEOMETRIES = [
    ((5, 6), (3, 3), (1, 1), [(1, 1), (0, 0)], 0),
    ((4, 3, 5), (2, 2, 3), (1, 1, 1), [(0, 0), (1, 0), (0, 0)], 1),
    ((2, 1, 4, 5), (1, 1, 2, 2), (1, 1, 2, 2), [(0, 0), (0, 0), (0, 1), (1, 0)], 3),
    ((4, 5), (2, 2), (1, 1), [(0, 0), (0, 1)], 1),
    ((1, 2, 5, 5), (1, 1, 3, 3), (1, 1, 1, 1), [(0, 0), (0, 0), (1, 1), (1, 1)], None),
    ((1, 2, 6, 6), (1, 1, 3, 3), (1, 1, 2, 2), [(0, 0), (0, 0), (1, 1), (1, 1)], None),
    ((5, 6), (3, 3), (1, 1), [(0, 0), (1, 1)], None),
]


@pytest.mark.parametrize("geometry", TIE_GEOMETRIES, ids=lambda g: f"{g[0]}{g[3]}")
@pytest.mark.parametrize("select", ["GE", "GT", "LE", "LT"])
def test_padded_select_and_scatter_ties_follow_xla(geometry: tuple, select: str) -> None:
    # The gradient of a padded max pool after a ReLU: many tied zeros per window. The spec
    # leaves the tie open; XLA's CPU compiler expands the op into a reduce_window over
    # (value, position) pairs, whose visiting order decides. Observed (jax 0.10.2 and 0.12, by
    # encoding the visiting order in an integer reduce_window and by one-hot sources): row-
    # major without padding, and with padding on one side of one dimension that dimension
    # varies slowest; two-sided padding of a minor dimension follows no rule found here, so
    # those geometries are checked against XLA alone (lax emits XLA's very expansion).
    shape, window, strides, padding, outer = geometry
    src = tuple((n + lo + hi - w) // st + 1 for n, w, st, (lo, hi) in
                zip(shape, window, strides, padding))  # fmt: skip
    text = sas_text(select, "add", shape, src, "f64", window, strides, padding)
    zero = np.float64(0)
    for seed in range(2):
        rng = np.random.default_rng(seed)
        x = np.maximum(np.round(rng.standard_normal(shape)), 0)
        s = rng.standard_normal(src)
        want = None
        if outer is not None:
            want = [ref.select_and_scatter(select, "add", x, s, zero, window, strides, padding,
                                           outer=outer)]  # fmt: skip
        check_module(text, [x, s, zero], interpreter=False, expected=want)


def test_select_and_scatter_unsupported_scatter_body_is_a_typed_error() -> None:
    shape, src, window, strides, padding = SAS_GEOMETRIES[0]
    text = sas_text("GE", "subtract", shape, src, "f32", window, strides, padding)
    with pytest.raises(UnsupportedOpError, match=r"select_and_scatter at line 3.*scatter body"):
        juliabridge.load_mlir(text, backend="lax")


def test_select_and_scatter_add_of_integers_without_padding() -> None:
    # The max-pool cotangent shortcut is for floats; integers (ties included) take the spec's
    # selection and sum like any other select_and_scatter.
    shape, src, window, strides, padding = SAS_GEOMETRIES[1]
    assert all(p == (0, 0) for p in padding)
    rng = np.random.default_rng(15)
    x = rng.integers(-3, 4, shape).astype(np.int32)
    s = rng.integers(-5, 6, src).astype(np.int32)
    text = sas_text("GE", "add", shape, src, "i32", window, strides, padding)
    zero = np.int32(0)
    want = ref.select_and_scatter("GE", "add", x, s, zero, window, strides, padding)
    check_module(text, [x, s, zero], expected=[want])
