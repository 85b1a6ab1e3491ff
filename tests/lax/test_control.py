"""Control flow on the lax backend: while (counted -> scan, generic -> while_loop), if, case,
map, optimization_barrier, tuples, tokens, and the ops that are refused.

Every module runs against XLA and the StableHLO reference interpreter (check_module) and a
numpy reference; derivatives against central finite differences in f64.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge import ModuleContractError, TransformError, UnsupportedOpError
from juliabridge.backends.lax import RULES
from tests.outside import reactant_fixture_text

from .oracles import check_module

# f64 arguments and results need x64 outside the module too (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("x64")


def needs(*ops: str) -> pytest.MarkDecorator:
    """Skip, naming them, while ops from other families are not registered yet."""
    missing = [o for o in ops if o not in RULES]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (other family)")


def lax_fn(text: str) -> Callable[..., Any]:
    return juliabridge.load_mlir(text, backend="lax")


def primitives(fn: Callable[..., Any], *args: Any) -> set[str]:
    """Names of every primitive in the jaxpr of `fn`, nested jaxprs included."""
    names: set[str] = set()

    def walk(jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            names.add(eqn.primitive.name)
            for p in eqn.params.values():
                for sub in p if isinstance(p, tuple | list) else [p]:
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return names


def finite_difference_grad(f: Callable[[np.ndarray], float], x: np.ndarray) -> np.ndarray:
    eps = 1e-6
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


# --- while --------------------------------------------------------------------------------

COUNTED = """module {
  func.func @main(%x: tensor<3xf64>, %y: tensor<3xf64>) -> (tensor<3xf64>, tensor<i64>) {
    %c0 = stablehlo.constant dense<0> : tensor<i64>
    %c1 = stablehlo.constant dense<1> : tensor<i64>
    %c5 = stablehlo.constant dense<5> : tensor<i64>
    %0:2 = stablehlo.while(%i = %c0, %a = %x) : tensor<i64>, tensor<3xf64> attributes {enzyme.disable_mincut}
    cond {
      %1 = stablehlo.compare  LT, %i, %c5 : (tensor<i64>, tensor<i64>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %1 = stablehlo.add %i, %c1 : tensor<i64>
      %2 = stablehlo.sine %a : tensor<3xf64>
      %3 = stablehlo.multiply %2, %y : tensor<3xf64>
      %4 = stablehlo.convert %i : (tensor<i64>) -> tensor<f64>
      %5 = stablehlo.broadcast_in_dim %4, dims = [] : (tensor<f64>) -> tensor<3xf64>
      %6 = stablehlo.add %3, %5 : tensor<3xf64>
      stablehlo.return %1, %6 : tensor<i64>, tensor<3xf64>
    }
    return %0#1, %0#0 : tensor<3xf64>, tensor<i64>
  }
}"""

# The same loop without broadcast_in_dim (another family's op): the induction variable is
# used through a 0-d multiply instead.
COUNTED_OWN = COUNTED.replace(
    """      %4 = stablehlo.convert %i : (tensor<i64>) -> tensor<f64>
      %5 = stablehlo.broadcast_in_dim %4, dims = [] : (tensor<f64>) -> tensor<3xf64>
      %6 = stablehlo.add %3, %5 : tensor<3xf64>
      stablehlo.return %1, %6 : tensor<i64>, tensor<3xf64>""",
    """      stablehlo.return %1, %3 : tensor<i64>, tensor<3xf64>""",
)


def counted_reference(x: np.ndarray, y: np.ndarray, *, with_index: bool) -> np.ndarray:
    a = x.copy()
    for i in range(5):
        a = np.sin(a) * y + (i if with_index else 0.0)
    return a


X = np.array([0.1, 0.5, 1.0])
Y = np.array([1.5, 0.9, 1.1])


def test_counted_loop_reading_outer_values_against_oracles() -> None:
    want = counted_reference(X, Y, with_index=False)
    check_module(COUNTED_OWN, [X, Y], expected=[want, np.int64(5)])


@needs("stablehlo.broadcast_in_dim")
def test_counted_loop_using_its_induction_variable() -> None:
    want = counted_reference(X, Y, with_index=True)
    check_module(COUNTED, [X, Y], expected=[want, np.int64(5)])


def test_counted_loop_becomes_a_scan_and_reverse_differentiates() -> None:
    fn = lax_fn(COUNTED_OWN)
    prims = primitives(fn, X, Y)
    assert "scan" in prims and "while" not in prims, prims
    loss = lambda x, y: jnp.sum(fn(x, y)[0] ** 2)  # noqa: E731
    gx, gy = jax.grad(loss, argnums=(0, 1))(X, Y)
    ref = lambda x, y: float(np.sum(counted_reference(x, y, with_index=False) ** 2))  # noqa: E731
    np.testing.assert_allclose(gx, finite_difference_grad(lambda x: ref(x, Y), X), rtol=1e-6)
    np.testing.assert_allclose(gy, finite_difference_grad(lambda y: ref(X, y), Y), rtol=1e-6)
    # jvp against a directional finite difference, and a Hessian-vector product.
    v = np.array([1.0, -0.5, 2.0])
    _, tangent = jax.jvp(lambda x: fn(x, Y)[0], (X,), (v,))
    f = lambda x: counted_reference(x, Y, with_index=False)  # noqa: E731
    np.testing.assert_allclose(tangent, (f(X + 1e-6 * v) - f(X - 1e-6 * v)) / 2e-6, rtol=1e-6)
    hvp = jax.jvp(jax.grad(lambda x: loss(x, Y)), (X,), (np.ones(3),))[1]
    fd = jax.grad(lambda x: loss(x, Y))(X + 1e-5) - jax.grad(lambda x: loss(x, Y))(X - 1e-5)
    np.testing.assert_allclose(hvp, fd / 2e-5, rtol=1e-5)


def test_counted_loop_vmap_is_batched() -> None:
    fn = lax_fn(COUNTED_OWN)
    xs = np.stack([X, X * 2, X - 1, -X])
    got = jax.vmap(lambda x: fn(x, Y)[0])(xs)
    want = np.stack([counted_reference(x, Y, with_index=False) for x in xs])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    prims = primitives(jax.vmap(lambda x: fn(x, Y)[0]), xs)
    assert "while" not in prims


def loop_module(
    ty: str, start: int, direction: str, bound: int, step: str, *, iv_first: bool = True
) -> str:
    """A loop counting iterations in a second carry; `step` is '+1' or '-1'."""
    cmp = "%i, %cb" if iv_first else "%cb, %i"
    op = "add" if step == "+1" else "subtract"
    return f"""module {{
  func.func @main(%x: tensor<f32>) -> (tensor<{ty}>, tensor<f32>) {{
    %cs = stablehlo.constant dense<{start}> : tensor<{ty}>
    %cb = stablehlo.constant dense<{bound}> : tensor<{ty}>
    %c1 = stablehlo.constant dense<1> : tensor<{ty}>
    %h = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %0:2 = stablehlo.while(%i = %cs, %a = %x) : tensor<{ty}>, tensor<f32>
    cond {{
      %1 = stablehlo.compare  {direction}, {cmp} : (tensor<{ty}>, tensor<{ty}>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    }} do {{
      %1 = stablehlo.{op} %i, %c1 : tensor<{ty}>
      %2 = stablehlo.add %a, %h : tensor<f32>
      stablehlo.return %1, %2 : tensor<{ty}>, tensor<f32>
    }}
    return %0#0, %0#1 : tensor<{ty}>, tensor<f32>
  }}
}}"""


def simulate(dtype: Any, start: int, direction: str, bound: int, step: int, flip: bool) -> int:
    ops = {
        "LT": np.less,
        "LE": np.less_equal,
        "GT": np.greater,
        "GE": np.greater_equal,
        "EQ": np.equal,
        "NE": np.not_equal,
    }
    i, n = dtype(start), 0
    b = dtype(bound)
    with np.errstate(over="ignore"):
        while ops[direction](b, i) if flip else ops[direction](i, b):
            i = dtype(i + dtype(1)) if step == 1 else dtype(i - dtype(1))
            n += 1
            assert n < 1000, "test loop does not terminate"
    return n


LOOPS = [
    # (type, start, direction, bound, step, iv_first, counted)
    ("i64", 0, "LT", 10, "+1", True, True),
    ("i32", 3, "LT", 3, "+1", True, True),  # zero trips
    ("i32", 7, "LT", 2, "+1", True, True),  # zero trips, start past the bound
    ("i64", -4, "LE", 3, "+1", True, True),
    ("i32", 0, "NE", 6, "+1", True, True),
    ("i64", 2, "GT", 0, "+1", False, True),  # 0 > i  <=>  i < 0: false at once
    ("i64", 0, "GT", 5, "+1", False, True),  # 5 > i  <=>  i < 5
    ("i32", 9, "GT", 4, "-1", True, True),
    ("i32", 9, "GE", 4, "-1", True, True),
    ("i64", 4, "EQ", 4, "+1", True, True),
    ("ui32", 0, "LT", 7, "+1", True, True),
    ("ui8", 250, "LT", 255, "+1", True, True),
    ("i8", -128, "LT", 127, "+1", True, True),
]


@pytest.mark.parametrize("ty,start,direction,bound,step,iv_first,counted", LOOPS)
def test_counted_loop_forms(
    ty: str, start: int, direction: str, bound: int, step: str, iv_first: bool, counted: bool
) -> None:
    text = loop_module(ty, start, direction, bound, step, iv_first=iv_first)
    dtype = {"i64": np.int64, "i32": np.int32, "ui32": np.uint32, "ui8": np.uint8, "i8": np.int8}[
        ty
    ]
    n = simulate(dtype, start, direction, bound, 1 if step == "+1" else -1, not iv_first)
    final = dtype(start + n) if step == "+1" else dtype(start - n)
    x = np.float32(0.25)
    check_module(text, [x], expected=[np.array(final, dtype), np.float32(0.25 + 0.5 * n)])
    prims = primitives(lax_fn(text), x)
    assert ("scan" in prims) == counted and ("while" in prims) != counted, prims


CARRY_TYPES = """module {
  func.func @main(%b: tensor<2xbf16>, %h: tensor<f16>, %p: tensor<3xi1>, %u: tensor<ui64>) -> (tensor<2xbf16>, tensor<f16>, tensor<3xi1>, tensor<ui64>) {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %0:5 = stablehlo.while(%i = %c0, %x = %b, %y = %h, %z = %p, %w = %u) : tensor<i32>, tensor<2xbf16>, tensor<f16>, tensor<3xi1>, tensor<ui64>
    cond {
      %1 = stablehlo.compare  LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %1 = stablehlo.add %i, %c1 : tensor<i32>
      %2 = stablehlo.add %x, %x : tensor<2xbf16>
      %3 = stablehlo.multiply %y, %y : tensor<f16>
      %4 = stablehlo.not %z : tensor<3xi1>
      %5 = stablehlo.multiply %w, %w : tensor<ui64>
      stablehlo.return %1, %2, %3, %4, %5 : tensor<i32>, tensor<2xbf16>, tensor<f16>, tensor<3xi1>, tensor<ui64>
    }
    return %0#1, %0#2, %0#3, %0#4 : tensor<2xbf16>, tensor<f16>, tensor<3xi1>, tensor<ui64>
  }
}"""


def test_counted_loop_carrying_every_kind_of_element() -> None:
    import ml_dtypes

    b = np.array([1.5, -0.25], ml_dtypes.bfloat16)
    h = np.float16(1.25)
    p = np.array([True, False, True])
    u = np.uint64(2**20 + 3)  # wraps around 2**64 on the third squaring
    want = [
        (b.astype(np.float32) * 8).astype(ml_dtypes.bfloat16),
        np.float16(np.float16(np.float16(h * h) ** 2) ** 2),
        ~p,
        np.uint64(pow(2**20 + 3, 8, 2**64)),
    ]
    check_module(CARRY_TYPES, [b, h, p, u], expected=want, rtol=1e-3, atol=1e-3)
    assert "scan" in primitives(lax_fn(CARRY_TYPES), b, h, p, u)


def counted_c(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    a = x.copy()
    for _ in range(5):
        a = np.sin(a) * y
    return a


def test_counted_loop_carrying_complex_values() -> None:
    text = COUNTED_OWN.replace("tensor<3xf64>", "tensor<3xcomplex<f64>>")
    x = X + 0.1j * Y
    y = Y - 0.2j
    # The reference interpreter's binding cannot pass complex tensors: XLA and numpy.
    check_module(text, [x, y], expected=[counted_c(x, y), np.int64(5)], interpreter=False)
    fn = lax_fn(text)

    def loss(p: Any) -> Any:  # a real parameter through a complex loop
        return jnp.sum(jnp.abs(fn(p + 0.1j * Y, y)[0]) ** 2)

    ref = lambda p: float(np.sum(np.abs(counted_c(p + 0.1j * Y, y)) ** 2))  # noqa: E731
    np.testing.assert_allclose(jax.grad(loss)(X), finite_difference_grad(ref, X), rtol=1e-6)


GENERIC_BOUND = """module {
  func.func @main(%x: tensor<3xf32>, %n: tensor<i32>) -> (tensor<3xf32>, tensor<i32>) {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %0:2 = "stablehlo.while"(%c0, %x) ({
    ^bb0(%i: tensor<i32>, %a: tensor<3xf32>):
      %1 = "stablehlo.compare"(%i, %n) {comparison_direction = #stablehlo<comparison_direction LT>} : (tensor<i32>, tensor<i32>) -> tensor<i1>
      "stablehlo.return"(%1) : (tensor<i1>) -> ()
    }, {
    ^bb0(%i: tensor<i32>, %a: tensor<3xf32>):
      %1 = "stablehlo.add"(%i, %c1) : (tensor<i32>, tensor<i32>) -> tensor<i32>
      %2 = "stablehlo.cosine"(%a) : (tensor<3xf32>) -> tensor<3xf32>
      "stablehlo.return"(%1, %2) : (tensor<i32>, tensor<3xf32>) -> ()
    }) : (tensor<i32>, tensor<3xf32>) -> (tensor<i32>, tensor<3xf32>)
    return %0#1, %0#0 : tensor<3xf32>, tensor<i32>
  }
}"""


@pytest.mark.parametrize("n", [0, 1, 4, -3])
def test_generic_while_is_exact_forward(n: int) -> None:
    x = np.array([0.3, -1.0, 2.0], np.float32)
    a = x.copy()
    for _ in range(max(n, 0)):
        a = np.cos(a)
    check_module(GENERIC_BOUND, [x, np.int32(n)], expected=[a, np.int32(max(n, 0))])


def test_generic_while_forward_mode_works_and_reverse_names_the_op() -> None:
    fn = lax_fn(GENERIC_BOUND)
    assert "while" in primitives(fn, np.ones(3, np.float32), np.int32(3))
    x = np.array([0.3, -1.0, 2.0], np.float32)
    _, t = jax.jvp(lambda x: fn(x, np.int32(2))[0], (x,), (np.ones(3, np.float32),))
    want = -np.sin(np.cos(x)) * -np.sin(x)
    np.testing.assert_allclose(t, want, rtol=1e-5)
    with pytest.raises(TransformError, match=r"stablehlo\.while at line 5") as e:
        jax.grad(lambda x: fn(x, np.int32(2))[0].sum())(x)
    assert "trip count" in str(e.value)
    # vmap over the bound: JAX batches the predicate (the loop stays a while loop).
    got = jax.vmap(lambda n: fn(x, n)[0])(np.array([0, 1, 3], np.int32))
    want_v = np.stack([x, np.cos(x), np.cos(np.cos(np.cos(x)))])
    np.testing.assert_allclose(got, want_v, rtol=1e-6)


FLOAT_COND = """module {
  func.func @main(%x: tensor<f64>) -> tensor<f64> {
    %lim = stablehlo.constant dense<1.000000e+02> : tensor<f64>
    %two = stablehlo.constant dense<2.000000e+00> : tensor<f64>
    %0 = stablehlo.while(%a = %x) : tensor<f64>
    cond {
      %1 = stablehlo.compare  LT, %a, %lim : (tensor<f64>, tensor<f64>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %1 = stablehlo.multiply %a, %two : tensor<f64>
      stablehlo.return %1 : tensor<f64>
    }
    return %0 : tensor<f64>
  }
}"""


def test_loop_on_a_float_condition_is_not_counted() -> None:
    x = np.float64(3.0)
    check_module(FLOAT_COND, [x], expected=[np.float64(192.0)])
    assert "while" in primitives(lax_fn(FLOAT_COND), x)


def test_loop_whose_increment_is_not_one_is_not_counted() -> None:
    text = loop_module("i32", 0, "LT", 10, "+1").replace(
        "%c1 = stablehlo.constant dense<1>", "%c1 = stablehlo.constant dense<3>"
    )
    check_module(text, [np.float32(0)], expected=[np.int32(12), np.float32(2.0)])
    assert "while" in primitives(lax_fn(text), np.float32(0))


NESTED = """module {
  func.func @main(%x: tensor<2xf64>) -> tensor<2xf64> {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %c4 = stablehlo.constant dense<4> : tensor<i32>
    %k = stablehlo.constant dense<[1.000000e-01, 2.000000e-01]> : tensor<2xf64>
    %0:2 = stablehlo.while(%i = %c0, %a = %x) : tensor<i32>, tensor<2xf64>
    cond {
      %1 = stablehlo.compare  LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %1:2 = stablehlo.while(%j = %c0, %b = %a) : tensor<i32>, tensor<2xf64>
      cond {
        %3 = stablehlo.compare  LT, %j, %c4 : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %3 : tensor<i1>
      } do {
        %3 = stablehlo.add %j, %c1 : tensor<i32>
        %4 = stablehlo.tanh %b : tensor<2xf64>
        %5 = stablehlo.add %4, %k : tensor<2xf64>
        %6 = stablehlo.multiply %5, %x : tensor<2xf64>
        stablehlo.return %3, %6 : tensor<i32>, tensor<2xf64>
      }
      %2 = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %2, %1#1 : tensor<i32>, tensor<2xf64>
    }
    return %0#1 : tensor<2xf64>
  }
}"""


def nested_reference(x: np.ndarray) -> np.ndarray:
    a = x.copy()
    for _ in range(3):
        for _ in range(4):
            a = (np.tanh(a) + np.array([0.1, 0.2])) * x
    return a


def test_nested_counted_loops_reading_outer_values() -> None:
    x = np.array([0.7, -0.4])
    check_module(NESTED, [x], expected=[nested_reference(x)])
    fn = lax_fn(NESTED)
    g = jax.grad(lambda x: fn(x)[0].sum())(x)
    fd = finite_difference_grad(lambda x: float(nested_reference(x).sum()), x)
    np.testing.assert_allclose(g, fd, rtol=1e-6)


@needs("stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice", "stablehlo.reshape")
def test_reactant_sine_loop_fixture() -> None:
    text = reactant_fixture_text("sine_loop_while.mlir")
    x = np.linspace(-1.0, 1.0, 10).astype(np.float32)
    # The Julia loop: for i in 1:10, x[i] = (|4 + (10 - i0) - 5| * 2 clamped > 31 ? sin : cos)
    # of the element read at 10 - i0 (1-based), written back at ((10 - i0 - 1) % 10) + 1.
    a = x.copy()
    for i0 in range(10):
        j = 10 - i0
        v = a[j - 1]
        sel = min(max(abs(4 + j - 5) * 2, -1), 21) > 31
        a[(j - 1) % 10] = np.float32(np.sin(v) if sel else np.cos(v))
    check_module(text, [x], expected=[a])
    fn = lax_fn(text)
    assert "while" not in primitives(fn, x)
    g = jax.grad(lambda x: fn(x)[0].sum())(x)
    assert np.all(np.isfinite(g))


# --- if / case ----------------------------------------------------------------------------

IF = """module {
  func.func @main(%x: tensor<2x3xf64>, %y: tensor<2x3xf64>, %t: tensor<f64>) -> (tensor<2x3xf64>, tensor<2x3xf64>) {
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f64>
    %p = stablehlo.compare  GT, %t, %zero : (tensor<f64>, tensor<f64>) -> tensor<i1>
    %s = stablehlo.sine %x : tensor<2x3xf64>
    %0:2 = "stablehlo.if"(%p) ({
      %1 = stablehlo.multiply %s, %y : tensor<2x3xf64>
      stablehlo.return %1, %x : tensor<2x3xf64>, tensor<2x3xf64>
    }, {
      %1 = stablehlo.exponential %y : tensor<2x3xf64>
      stablehlo.return %s, %1 : tensor<2x3xf64>, tensor<2x3xf64>
    }) : (tensor<i1>) -> (tensor<2x3xf64>, tensor<2x3xf64>)
    return %0#0, %0#1 : tensor<2x3xf64>, tensor<2x3xf64>
  }
}"""


def if_reference(x: np.ndarray, y: np.ndarray, t: float) -> list[np.ndarray]:
    return [np.sin(x) * y, x] if t > 0 else [np.sin(x), np.exp(y)]


RNG = np.random.default_rng(0)
XM = RNG.standard_normal((2, 3))
YM = RNG.standard_normal((2, 3))


@pytest.mark.parametrize("t", [1.5, -2.0, 0.0])
def test_if_both_branches_with_outer_values(t: float) -> None:
    check_module(IF, [XM, YM, np.float64(t)], expected=if_reference(XM, YM, t))


def test_if_grad_jvp_and_batched_predicate() -> None:
    fn = lax_fn(IF)
    for t in (1.0, -1.0):

        def loss(x: Any, t: float = t) -> Any:
            a, b = fn(x, YM, np.float64(t))
            return (a * b).sum()

        g = jax.grad(loss)(XM)
        fd = finite_difference_grad(
            lambda x, t=t: float(np.prod(if_reference(x, YM, t), axis=0).sum()), XM
        )
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    ts = np.array([1.0, -1.0, 2.0])
    got = jax.vmap(lambda t: fn(XM, YM, t)[0])(ts)
    np.testing.assert_allclose(got, np.stack([if_reference(XM, YM, t)[0] for t in ts]))


@needs("stablehlo.transpose", "stablehlo.broadcast_in_dim", "stablehlo.reduce")
def test_reactant_if_fixture() -> None:
    text = reactant_fixture_text("conditional_if_f64.mlir")
    for x in (np.arange(20.0).reshape(10, 2), -np.arange(20.0).reshape(10, 2) - 5):
        xt = x.T + 1
        pos = xt.sum() > 0
        want = [(xt if pos else -xt).T, (xt - 1 if pos else xt).T, (xt if pos else xt + 1).T, x]
        check_module(text, [x], expected=want)


CASE = """module {
  func.func @main(%i: tensor<i32>, %x: tensor<4xf32>) -> (tensor<4xf32>, tensor<i64>) {
    %c0 = stablehlo.constant dense<0> : tensor<i64>
    %c1 = stablehlo.constant dense<1> : tensor<i64>
    %c2 = stablehlo.constant dense<2> : tensor<i64>
    %0:2 = "stablehlo.case"(%i) ({
      %1 = stablehlo.sine %x : tensor<4xf32>
      stablehlo.return %1, %c0 : tensor<4xf32>, tensor<i64>
    }, {
      %1 = stablehlo.cosine %x : tensor<4xf32>
      stablehlo.return %1, %c1 : tensor<4xf32>, tensor<i64>
    }, {
      %1 = stablehlo.multiply %x, %x : tensor<4xf32>
      stablehlo.return %1, %c2 : tensor<4xf32>, tensor<i64>
    }) : (tensor<i32>) -> (tensor<4xf32>, tensor<i64>)
    return %0#0, %0#1 : tensor<4xf32>, tensor<i64>
  }
}"""

XC = np.array([0.5, -1.5, 2.0, 0.0], np.float32)


@pytest.mark.parametrize("index", [-2147483648, -5, -1, 0, 1, 2, 3, 7, 2147483647])
def test_case_out_of_range_runs_the_last_branch(index: int) -> None:
    branch = index if 0 <= index < 3 else 2
    value = [np.sin(XC), np.cos(XC), XC * XC][branch]
    check_module(CASE, [np.int32(index), XC], expected=[value, np.int64(branch)])


def test_case_grad_and_vmap() -> None:
    fn = lax_fn(CASE)
    g = jax.grad(lambda x: fn(np.int32(-1), x)[0].sum())(XC)
    np.testing.assert_allclose(g, 2 * XC)  # the last branch, not the first
    got = jax.vmap(lambda i: fn(i, XC)[0])(np.array([-1, 0, 1, 5], np.int32))
    np.testing.assert_allclose(got, np.stack([XC * XC, np.sin(XC), np.cos(XC), XC * XC]))


def test_case_with_one_branch() -> None:
    text = """module {
  func.func @main(%i: tensor<i32>, %x: tensor<2xf32>) -> tensor<2xf32> {
    %0 = "stablehlo.case"(%i) ({
      %1 = stablehlo.negate %x : tensor<2xf32>
      stablehlo.return %1 : tensor<2xf32>
    }) : (tensor<i32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""
    x = np.array([1.0, -2.0], np.float32)
    for i in (-3, 0, 4):
        check_module(text, [np.int32(i), x], expected=[-x])


# --- map ----------------------------------------------------------------------------------

MAP = """module {
  func.func @main(%a: tensor<SHAPExf32>, %b: tensor<SHAPExf32>) -> tensor<SHAPExf32> {
    %0 = "stablehlo.map"(%a, %b) ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = stablehlo.constant dense<2.500000e-01> : tensor<f32>
      %1 = stablehlo.multiply %x, %y : tensor<f32>
      %2 = stablehlo.sine %1 : tensor<f32>
      %3 = stablehlo.add %2, %s : tensor<f32>
      stablehlo.return %3 : tensor<f32>
    }) {dimensions = array<i64: DIMS>} : (tensor<SHAPExf32>, tensor<SHAPExf32>) -> tensor<SHAPExf32>
    return %0 : tensor<SHAPExf32>
  }
}"""


def map_module(shape: tuple[int, ...]) -> str:
    text = MAP.replace("SHAPEx", "".join(f"{d}x" for d in shape))
    return text.replace("DIMS", ", ".join(str(i) for i in range(len(shape))))


@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (2, 1, 3, 2)])
def test_map_elementwise_region(shape: tuple[int, ...]) -> None:
    # (XLA refuses a map region that reads values from outside it, so this one does not.)
    a = RNG.standard_normal(shape).astype(np.float32)
    b = RNG.standard_normal(shape).astype(np.float32)
    text = map_module(shape).replace("array<i64: >", "array<i64>")
    check_module(text, [a, b], expected=[np.sin(a * b) + np.float32(0.25)])


def test_map_derivatives_and_vmap() -> None:
    fn = lax_fn(map_module((2, 3)))
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((2, 3)).astype(np.float32)
    g = jax.grad(lambda a: fn(a, b)[0].sum())(a)
    np.testing.assert_allclose(g, np.cos(a * b) * b, rtol=1e-5)
    got = jax.vmap(lambda a: fn(a, b)[0])(np.stack([a, -a]))
    want = np.stack([np.sin(a * b), np.sin(-a * b)]) + np.float32(0.25)
    np.testing.assert_allclose(got, want, rtol=1e-6)


# --- barrier, tuples, tokens --------------------------------------------------------------

BARRIER_TUPLE_TOKEN = """module {
  func.func @main(%x: tensor<3xf32>, %y: tensor<i32>) -> (tensor<3xf32>, tensor<i32>) {
    %t0 = stablehlo.after_all : !stablehlo.token
    %t1 = stablehlo.after_all %t0, %t0 : !stablehlo.token
    %0:3 = stablehlo.optimization_barrier %x, %y, %t1 : tensor<3xf32>, tensor<i32>, !stablehlo.token
    %1 = stablehlo.tuple %0#0, %0#1, %0#2 : tuple<tensor<3xf32>, tensor<i32>, !stablehlo.token>
    %2 = stablehlo.get_tuple_element %1[0] : (tuple<tensor<3xf32>, tensor<i32>, !stablehlo.token>) -> tensor<3xf32>
    %3 = stablehlo.get_tuple_element %1[1] : (tuple<tensor<3xf32>, tensor<i32>, !stablehlo.token>) -> tensor<i32>
    %4 = stablehlo.sine %2 : tensor<3xf32>
    return %4, %3 : tensor<3xf32>, tensor<i32>
  }
}"""


def test_barrier_tuple_and_tokens() -> None:
    x = np.array([0.1, 2.0, -3.0], np.float32)
    check_module(BARRIER_TUPLE_TOKEN, [x, np.int32(7)], expected=[np.sin(x), np.int32(7)])
    fn = lax_fn(BARRIER_TUPLE_TOKEN)
    g = jax.grad(lambda x: fn(x, np.int32(0))[0].sum())(x)
    np.testing.assert_allclose(g, np.cos(x), rtol=1e-6)
    got = jax.vmap(lambda x: fn(x, np.int32(0))[0])(np.stack([x, 2 * x]))
    np.testing.assert_allclose(got, np.sin(np.stack([x, 2 * x])), rtol=1e-6)


def test_create_token() -> None:
    # The reference interpreter aborts on create_token: XLA and numpy only.
    text = BARRIER_TUPLE_TOKEN.replace(
        "%t0 = stablehlo.after_all : !stablehlo.token",
        "%t0 = stablehlo.create_token : !stablehlo.token",
    )
    x = np.array([0.5], np.float32).repeat(3)
    check_module(text, [x, np.int32(1)], expected=[np.sin(x), np.int32(1)], interpreter=False)


TOKEN_LOOP = """module {
  func.func @main(%x: tensor<f32>) -> tensor<f32> {
    %t = stablehlo.after_all : !stablehlo.token
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %0:3 = stablehlo.while(%i = %c0, %tk = %t, %p = %x) : tensor<i32>, !stablehlo.token, tensor<f32>
    cond {
      %1 = stablehlo.compare  LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %1 = stablehlo.add %i, %c1 : tensor<i32>
      %2 = stablehlo.after_all %tk : !stablehlo.token
      %3 = stablehlo.tuple %p, %2 : tuple<tensor<f32>, !stablehlo.token>
      %4 = stablehlo.get_tuple_element %3[0] : (tuple<tensor<f32>, !stablehlo.token>) -> tensor<f32>
      %5 = stablehlo.exponential %4 : tensor<f32>
      stablehlo.return %1, %2, %5 : tensor<i32>, !stablehlo.token, tensor<f32>
    }
    return %0#2 : tensor<f32>
  }
}"""


def test_loop_carrying_a_token() -> None:
    x = np.float32(-1.0)
    want = np.float32(np.exp(np.exp(np.exp(np.float32(-1.0)))))
    check_module(TOKEN_LOOP, [x], expected=[want], rtol=1e-6)
    fn = lax_fn(TOKEN_LOOP)
    g = jax.grad(lambda x: fn(x)[0])(np.float32(-1.0))
    e1 = np.exp(-1.0)
    np.testing.assert_allclose(g, np.exp(np.exp(e1)) * np.exp(e1) * e1, rtol=1e-5)


# --- refused ------------------------------------------------------------------------------

REFUSED = {
    "outfeed": """    %t = stablehlo.create_token : !stablehlo.token
    %0 = "stablehlo.outfeed"(%x, %t) {outfeed_config = ""} : (tensor<2xf32>, !stablehlo.token) -> !stablehlo.token""",
    "infeed": """    %t = stablehlo.create_token : !stablehlo.token
    %0:2 = "stablehlo.infeed"(%t) {infeed_config = "", layout = [[0]]} : (!stablehlo.token) -> (tensor<2xf32>, !stablehlo.token)""",
    "send": """    %t = stablehlo.create_token : !stablehlo.token
    %0 = "stablehlo.send"(%x, %t) {channel_handle = #stablehlo.channel_handle<handle = 1, type = 2>, is_host_transfer = true} : (tensor<2xf32>, !stablehlo.token) -> !stablehlo.token""",
    "recv": """    %t = stablehlo.create_token : !stablehlo.token
    %0:2 = "stablehlo.recv"(%t) {channel_handle = #stablehlo.channel_handle<handle = 1, type = 3>, is_host_transfer = true} : (!stablehlo.token) -> (tensor<2xf32>, !stablehlo.token)""",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_host_io_is_refused_at_load(name: str) -> None:
    text = (
        "module {\n  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
        + REFUSED[name]
        + "\n    return %x : tensor<2xf32>\n  }\n}"
    )
    # Host I/O is refused for every backend when the module is checked at load (it would
    # hang); lax refuses it again for modules loaded with trust=True.
    with pytest.raises(ModuleContractError, match=rf"line 4: stablehlo\.{name} waits"):
        lax_fn(text)
    with pytest.raises(UnsupportedOpError) as e:
        juliabridge.load_mlir(text, backend="lax", trust=True)
    assert e.value.op == f"stablehlo.{name}"
    assert e.value.where == "line 4", str(e.value)
    assert "stablehlo." + name in str(e.value)


# --- collectives on one device --------------------------------------------------------------

_SUM = """({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %1 = stablehlo.multiply %a, %b : tensor<f32>
      stablehlo.return %1 : tensor<f32>
    })"""
_X = "(tensor<2x3xf32>) -> tensor<2x3xf32>"
ONE_DEVICE = {
    "all_reduce": f'"stablehlo.all_reduce"(%x) {_SUM} {{replica_groups = dense<[[0, -1]]> : tensor<1x2xi64>}} : {_X}',
    "all_gather": f'"stablehlo.all_gather"(%x) {{all_gather_dim = 1 : i64, replica_groups = dense<[[0]]> : tensor<1x1xi64>}} : {_X}',
    "all_to_all": f'"stablehlo.all_to_all"(%x) {{split_dimension = 1 : i64, concat_dimension = 0 : i64, split_count = 1 : i64, replica_groups = dense<[[0]]> : tensor<1x1xi64>}} : {_X}',
    "reduce_scatter": f'"stablehlo.reduce_scatter"(%x) {_SUM} {{scatter_dimension = 0 : i64, replica_groups = dense<[[0]]> : tensor<1x1xi64>}} : {_X}',
    "collective_permute": f'"stablehlo.collective_permute"(%x) {{source_target_pairs = dense<[[0, 0]]> : tensor<1x2xi64>}} : {_X}',
    "collective_permute_to_nobody": f'"stablehlo.collective_permute"(%x) {{source_target_pairs = dense<> : tensor<0x2xi64>}} : {_X}',
}


def _one_device(op: str) -> str:
    return (
        "module {\n  func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
        f"    %0 = {op}\n    return %0 : tensor<2x3xf32>\n  }}\n}}"
    )


@pytest.mark.parametrize("name", sorted(ONE_DEVICE))
def test_collectives_on_one_device(name: str) -> None:
    # spec.md: over a group of one, each collective returns its operand (the multiplying
    # region is never applied); a collective_permute that sends nothing to process 0 gives
    # zeros. The interpreter aborts on collectives without a process grid.
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    want = np.zeros_like(x) if name.endswith("nobody") else x
    check_module(_one_device(ONE_DEVICE[name]), [x], interpreter=False, expected=[want])


def test_collective_leaving_process_zero_out_is_refused() -> None:
    # XLA's verifier refuses an empty group; lax says so at load.
    op = ONE_DEVICE["all_reduce"].replace("[[0, -1]]", "[[-1]]").replace("1x2", "1x1")
    with pytest.raises(UnsupportedOpError, match="replica_groups leave process 0 out") as e:
        lax_fn(_one_device(op))
    assert e.value.where == "line 3"


def test_case_with_more_branches_than_one_switch_takes() -> None:
    # 20 branches (more than one lax.switch is given): each index runs its own branch, and an
    # index out of range the last one (spec.md#case).
    n = 20
    branches = ",\n".join(
        f"{{\n      %c = stablehlo.constant dense<{k}> : tensor<i64>\n"
        "      stablehlo.return %c : tensor<i64>\n    }"
        for k in range(n)
    )
    text = f"""module {{
  func.func @main(%i: tensor<i32>) -> tensor<i64> {{
    %0 = "stablehlo.case"(%i) ({branches}) : (tensor<i32>) -> tensor<i64>
    return %0 : tensor<i64>
  }}
}}"""
    fn = jax.jit(lax_fn(text))
    for index in (-7, 0, 1, 7, 8, 9, 10, 11, 15, 18, 19, 20, 1000):
        want = index if 0 <= index < n else n - 1
        assert int(fn(np.int32(index))[0]) == want, index


def test_counted_loop_with_the_constant_first_in_its_increment() -> None:
    # `iv = 1 + iv` counts like `iv = iv + 1`: a counted loop (a scan), with numpy's values.
    text = loop_module("i32", 2, "LT", 9, "+1", iv_first=True).replace(
        "stablehlo.add %i, %c1", "stablehlo.add %c1, %i"
    )
    assert "stablehlo.add %c1, %i" in text
    x = np.float32(0.25)
    check_module(text, [x], expected=[np.int32(9), np.float32(0.25 + 0.5 * 7)])
    assert "scan" in primitives(lax_fn(text), x)


def test_a_loop_whose_condition_reads_an_outer_argument_is_not_counted() -> None:
    # `n < 3` with @main's own argument n (not the carried counter) decides nothing about the
    # trips: with n = 5 the body never runs, and the loop is a while loop, not a scan.
    text = """module {
  func.func @main(%n: tensor<i32>, %x: tensor<f32>) -> (tensor<i32>, tensor<f32>) {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %h = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %0:2 = stablehlo.while(%i = %c0, %a = %x) : tensor<i32>, tensor<f32>
    cond {
      %1 = stablehlo.compare  LT, %n, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %1 = stablehlo.add %i, %c1 : tensor<i32>
      %2 = stablehlo.add %a, %h : tensor<f32>
      stablehlo.return %1, %2 : tensor<i32>, tensor<f32>
    }
    return %0#0, %0#1 : tensor<i32>, tensor<f32>
  }
}"""
    n, x = np.int32(5), np.float32(0.25)
    check_module(text, [n, x], expected=[np.int32(0), x])
    prims = primitives(lax_fn(text), n, x)
    assert "while" in prims and "scan" not in prims, prims


@pytest.mark.parametrize(("ty", "kind"), [("i32", "SIGNED"), ("ui32", "UNSIGNED")])
def test_counted_loop_with_the_compare_type_of_its_counter(ty: str, kind: str) -> None:
    # An explicit compare_type matching the counter's signedness is the same counted loop.
    text = loop_module(ty, 1, "LT", 6, "+1", iv_first=True)
    text = text.replace(f"%i, %cb : (tensor<{ty}>", f"%i, %cb, {kind} : (tensor<{ty}>")
    assert kind in text
    x = np.float32(0.25)
    dtype = np.int32 if ty == "i32" else np.uint32
    check_module(text, [x], expected=[dtype(6), np.float32(0.25 + 0.5 * 5)])
    assert "scan" in primitives(lax_fn(text), x)
