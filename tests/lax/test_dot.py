"""dot_general, dot and einsum on the lax backend: against XLA, the reference interpreter and
numpy (einsum of the spec's sum of products); derivatives against finite differences (f64);
vmap batched."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import jax
import numpy as np
import pytest

import juliabridge
from juliabridge import UnsupportedOpError
from juliabridge.backends.lax.valtypes import ELEMENT_TYPES

from .oracles import check_module, random_array, run_lax
from .transform_checks import check_batched, check_grad, check_hvp, check_jvp, lax_fn, x64

LETTERS = "abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(autouse=True)
def _x64() -> Iterator[None]:
    with x64():
        yield


def dot_reference(
    lhs: np.ndarray, rhs: np.ndarray, lb: Sequence[int], rb: Sequence[int], lc: Sequence[int],
    rc: Sequence[int], out_dtype: np.dtype,
) -> np.ndarray:  # fmt: skip
    """spec.md#dot_general: batch dims, then lhs free dims, then rhs free dims."""
    it = iter(LETTERS)
    ls, rs = [""] * lhs.ndim, [""] * rhs.ndim
    for a, b in (*zip(lb, rb), *zip(lc, rc)):
        ls[a] = rs[b] = next(it)
    for s in (ls, rs):
        for i, v in enumerate(s):
            s[i] = v or next(it)
    free_l = [ls[i] for i in range(lhs.ndim) if i not in (*lb, *lc)]
    free_r = [rs[i] for i in range(rhs.ndim) if i not in (*rb, *rc)]
    out = "".join([ls[i] for i in lb] + free_l + free_r)
    kind = np.dtype(out_dtype).kind
    wide = np.int64 if kind in "biu" else np.complex128 if kind == "c" else np.float64
    y = np.einsum(f"{''.join(ls)},{''.join(rs)}->{out}", lhs.astype(wide), rhs.astype(wide))
    if out_dtype == np.bool_:
        return np.asarray(y != 0)
    with np.errstate(over="ignore"):
        return np.asarray(y).astype(out_dtype)


def _t(shape: Sequence[int], t: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if len(shape) else ''}{t}>"


def dot_text(
    ls: Sequence[int], rs: Sequence[int], lb: Sequence[int], rb: Sequence[int],
    lc: Sequence[int], rc: Sequence[int], t: str, out_t: str = "", rt: str = "",
    precision: str = "", generic: bool = False, algorithm: str = "",
) -> str:  # fmt: skip
    out_t, rt = out_t or t, rt or t
    shape = dot_reference(np.zeros(ls), np.zeros(rs), lb, rb, lc, rc, np.float64).shape
    lt, rtt, ot = _t(ls, t), _t(rs, rt), _t(shape, out_t)
    j = lambda v: ", ".join(map(str, v))  # noqa: E731
    if generic:
        dn = (f"#stablehlo.dot<lhs_batching_dimensions = [{j(lb)}], rhs_batching_dimensions = "
              f"[{j(rb)}], lhs_contracting_dimensions = [{j(lc)}], rhs_contracting_dimensions = "
              f"[{j(rc)}]>")  # fmt: skip
        attrs = [f"dot_dimension_numbers = {dn}"]
        if precision:
            prec = ", ".join(f"#stablehlo<precision {p.strip()}>" for p in precision.split(","))
            attrs.append(f"precision_config = [{prec}]")
        if algorithm:
            attrs.append(f"algorithm = {algorithm}")
        op = f'"stablehlo.dot_general"(%l, %r) {{{", ".join(attrs)}}}'
    else:
        batch = f"batching_dims = [{j(lb)}] x [{j(rb)}], " if lb else ""
        op = f"stablehlo.dot_general %l, %r, {batch}contracting_dims = [{j(lc)}] x [{j(rc)}]"
        if precision:
            op += f", precision = [{precision}]"
    return f"""module {{
  func.func @main(%l: {lt}, %r: {rtt}) -> {ot} {{
    %0 = {op} : ({lt}, {rtt}) -> {ot}
    return %0 : {ot}
  }}
}}"""


LAYOUTS = {
    "matmul": ((4, 3), (3, 5), (), (), (1,), (0,)),
    "lenet_backward_transposed": ((4, 10), (128, 10), (), (), (1,), (1,)),
    "batch_dims_anywhere": ((3, 4, 2, 5), (5, 2, 6, 3), (2, 0), (1, 3), (3,), (0,)),
    "two_contracting": ((2, 3, 4), (4, 5, 3), (), (), (2, 1), (0, 2)),
    "outer_product": ((3,), (4,), (), (), (), ()),
    "vector_dot": ((6,), (6,), (), (), (0,), (0,)),
    "batch_only": ((2, 3), (2, 3), (0, 1), (0, 1), (), ()),
    "size_zero_contraction": ((3, 0), (0, 2), (), (), (1,), (0,)),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
@pytest.mark.parametrize("generic", [False, True], ids=["pretty", "generic"])
def test_dot_general_dimension_numbers(name: str, generic: bool) -> None:
    ls, rs, lb, rb, lc, rc = LAYOUTS[name]
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(ls), rng.standard_normal(rs)
    text = dot_text(ls, rs, lb, rb, lc, rc, "f64", generic=generic)
    # The reference interpreter aborts on a contraction over a size-0 dimension.
    check_module(text, [x, y], rtol=1e-12, atol=1e-12, interpreter=0 not in ls,
                 expected=[dot_reference(x, y, lb, rb, lc, rc, np.float64)])  # fmt: skip


@pytest.mark.parametrize("precision", ["DEFAULT, DEFAULT", "HIGH, HIGHEST", "HIGHEST, DEFAULT"])
def test_dot_general_precision_config(precision: str) -> None:
    ls, rs, lb, rb, lc, rc = LAYOUTS["batch_dims_anywhere"]
    text = dot_text(ls, rs, lb, rb, lc, rc, "f32", precision=precision)
    rng = np.random.default_rng(1)
    x, y = random_array(rng, ls, "f32"), random_array(rng, rs, "f32")
    check_module(text, [x, y], rtol=1e-5, atol=1e-5,
                 expected=[dot_reference(x, y, lb, rb, lc, rc, np.float32)])  # fmt: skip
    jaxpr = str(jax.make_jaxpr(lambda x, y: lax_fn(text)(x, y))(x, y))
    want = tuple(f"Precision.{p.strip()}" for p in precision.split(","))
    # DEFAULT, DEFAULT defers to jax.default_matmul_precision (tests/lax/test_matmul_precision.py)
    if precision == "DEFAULT, DEFAULT":
        assert "precision=" not in jaxpr  # the jaxpr prints no precision=None
    else:
        assert f"precision=({want[0]}, {want[1]})" in jaxpr


TYPES = [
    # lhs, rhs, result, tolerance, interpreter (a result type unlike the operands' is XLA's
    # preferred element type, outside spec.md C13: the interpreter accumulates in the operand
    # type, XLA in the result type)
    ("f32", "f32", "f32", 1e-5, True),
    ("f16", "f16", "f16", 2e-2, True),
    ("bf16", "bf16", "f32", 1e-5, False),
    ("f16", "f16", "f32", 1e-5, False),
    ("i8", "i8", "i32", 0, False),
    ("i8", "i16", "i32", 0, False),
    ("i32", "i32", "i32", 0, True),
    ("ui16", "ui16", "ui16", 0, True),
    ("i64", "i64", "i64", 0, True),
    ("i1", "i1", "i1", 0, True),
    ("complex<f32>", "complex<f32>", "complex<f32>", 1e-5, False),  # harness: no complex
]


@pytest.mark.parametrize(("t", "rt", "out_t", "tol", "interp"), TYPES)
def test_dot_general_element_types(t: str, rt: str, out_t: str, tol: float, interp: bool) -> None:
    ls, rs, lb, rb, lc, rc = LAYOUTS["batch_dims_anywhere"]
    rng = np.random.default_rng(2)
    x, y = random_array(rng, ls, t), random_array(rng, rs, rt)
    if t in ("f16", "bf16"):
        x, y = (np.round(a.astype(np.float32) * 4).astype(a.dtype) / 4 for a in (x, y))
        x, y = x.astype(ELEMENT_TYPES[t]), y.astype(ELEMENT_TYPES[t])
    text = dot_text(ls, rs, lb, rb, lc, rc, t, out_t=out_t, rt=rt)
    want = dot_reference(x, y, lb, rb, lc, rc, ELEMENT_TYPES[out_t])
    check_module(text, [x, y], rtol=tol, atol=tol, expected=[want], interpreter=interp)


ALGORITHM = ("#stablehlo.dot_algorithm<lhs_precision_type = {lhs}, rhs_precision_type = {lhs}, "
             "accumulation_type = {acc}, lhs_component_count = 1, rhs_component_count = 1, "
             "num_primitive_operations = {ops}, allow_imprecise_accumulation = false>")  # fmt: skip


def test_dot_algorithm_presets() -> None:
    ls, rs, lb, rb, lc, rc = LAYOUTS["matmul"]
    rng = np.random.default_rng(3)
    x, y = random_array(rng, ls, "f32"), random_array(rng, rs, "f32")
    want = [dot_reference(x, y, lb, rb, lc, rc, np.float32)]
    f32 = ALGORITHM.format(lhs="f32", acc="f32", ops=1)
    text = dot_text(ls, rs, lb, rb, lc, rc, "f32", generic=True, algorithm=f32)
    check_module(text, [x, y], rtol=1e-5, atol=1e-5, expected=want)
    jaxpr = str(jax.make_jaxpr(lambda x, y: lax_fn(text)(x, y))(x, y))
    assert "F32_F32_F32" in jaxpr
    # TF32 is a GPU algorithm: XLA on CPU ignores it, and so does the lax backend there.
    tf32 = ALGORITHM.format(lhs="tf32", acc="f32", ops=1)
    text = dot_text(ls, rs, lb, rb, lc, rc, "f32", generic=True, algorithm=tf32)
    if jax.default_backend() == "cpu":
        check_module(text, [x, y], rtol=1e-5, atol=1e-5, expected=want, interpreter=False)


def test_every_algorithm_stablehlo_accepts_lifts() -> None:
    # StableHLO's verifier admits only algorithms known to some hardware; each must map to a
    # JAX preset (else the lift raises its typed error naming the algorithm).
    ls, rs, lb, rb, lc, rc = LAYOUTS["matmul"]
    accepted = 0
    for lhs in ("f16", "bf16", "tf32", "f32", "f64"):
        for acc in ("f16", "bf16", "f32", "f64"):
            for ops in (1, 3, 6, 9):
                for imprecise in ("false", "true"):
                    algo = ALGORITHM.format(lhs=lhs, acc=acc, ops=ops).replace(
                        "= false>", f"= {imprecise}>"
                    )
                    text = dot_text(ls, rs, lb, rb, lc, rc, "f32", generic=True, algorithm=algo)
                    try:
                        juliabridge.load_mlir(text, backend="xla")
                    except juliabridge.MLIRParseError:
                        continue
                    accepted += 1
                    juliabridge.load_mlir(text, backend="lax")
    assert accepted >= 10


@pytest.mark.parametrize("name", ["matmul", "batch_dims_anywhere", "two_contracting",
                                  "outer_product"])  # fmt: skip
def test_dot_general_derivatives_and_vmap(name: str) -> None:
    ls, rs, lb, rb, lc, rc = LAYOUTS[name]
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(ls), rng.standard_normal(rs)
    fn = lax_fn(dot_text(ls, rs, lb, rb, lc, rc, "f64"))
    check_jvp(fn, [x, y], [0, 1])
    check_grad(fn, [x, y], [0, 1])
    check_hvp(fn, [x, y], 0)
    check_hvp(fn, [x, y], 1)
    xs, ys = rng.standard_normal((3, *ls)), rng.standard_normal((3, *rs))
    check_batched(fn, [xs, y], [0, None])
    check_batched(fn, [xs, ys], [0, 0])


def test_complex_dot_gradient() -> None:
    ls, rs, lb, rb, lc, rc = LAYOUTS["matmul"]
    rng = np.random.default_rng(5)
    x = rng.standard_normal(ls) + 1j * rng.standard_normal(ls)
    y = rng.standard_normal(rs) + 1j * rng.standard_normal(rs)
    fn = lax_fn(dot_text(ls, rs, lb, rb, lc, rc, "complex<f64>"))
    g = jax.grad(lambda x: (abs(fn(x, y)[0]) ** 2).sum())(x)
    want = jax.grad(lambda x: (abs(x @ y) ** 2).sum())(x)  # the same loss in plain JAX
    np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-10)


DOT = """module {
  func.func @main(%a: tensor<3x4xf32>, %v: tensor<4xf32>, %w: tensor<4xf32>) -> (tensor<3xf32>, tensor<f32>, tensor<4x4xf32>) {
    %0 = stablehlo.dot %a, %v, precision = [DEFAULT, HIGHEST] : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3xf32>
    %1 = stablehlo.dot %v, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
    %2 = "stablehlo.dot"(%a, %a) : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<4x4xf32>
    return %0, %1, %2 : tensor<3xf32>, tensor<f32>, tensor<4x4xf32>
  }
}"""


def test_deprecated_dot() -> None:
    text = DOT.replace('"stablehlo.dot"(%a, %a) : (tensor<3x4xf32>, tensor<3x4xf32>)',
                       '"stablehlo.dot"(%at, %a) : (tensor<4x3xf32>, tensor<3x4xf32>)')  # fmt: skip
    text = text.replace("%w: tensor<4xf32>)", "%w: tensor<4xf32>, %at: tensor<4x3xf32>)")
    rng = np.random.default_rng(6)
    a, v, w = (random_array(rng, s, "f32") for s in ((3, 4), (4,), (4,)))
    # The reference interpreter aborts on the deprecated dot.
    check_module(text, [a, v, w, a.T.copy()], rtol=1e-5, atol=1e-5, interpreter=False,
                 expected=[a @ v, np.float32(v @ w), a.T @ a])  # fmt: skip


EINSUM = """module {
  func.func @main(%a: tensor<2x3x4xf32>, %b: tensor<5x4xf32>) -> tensor<2x5x3xf32> {
    %0 = "stablehlo.einsum"(%a, %b) {einsum_config = "abc,dc->adb"} : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x5x3xf32>
    return %0 : tensor<2x5x3xf32>
  }
}"""


def test_einsum() -> None:
    # The reference interpreter aborts on einsum (removed from the spec); XLA still runs it.
    rng = np.random.default_rng(7)
    a, b = random_array(rng, (2, 3, 4), "f32"), random_array(rng, (5, 4), "f32")
    want = np.einsum("abc,dc->adb", a.astype(np.float64), b.astype(np.float64))
    check_module(EINSUM, [a, b], rtol=1e-5, atol=1e-5, interpreter=False,
                 expected=[want.astype(np.float32)])  # fmt: skip


def test_unary_einsum_is_a_typed_error() -> None:
    text = """module {
  func.func @main(%a: tensor<2x3xf32>) -> tensor<3xf32> {
    %0 = "stablehlo.unary_einsum"(%a) {einsum_config = ",ab->b"} : (tensor<2x3xf32>) -> tensor<3xf32>
    return %0 : tensor<3xf32>
  }
}"""
    with pytest.raises(UnsupportedOpError, match="unary_einsum at line 3"):
        juliabridge.load_mlir(text, backend="lax")


def test_lenet_dense_layer_matches_numpy() -> None:
    text = dot_text((4, 256), (256, 128), (), (), (1,), (0,), "f32", precision="DEFAULT, DEFAULT")
    rng = np.random.default_rng(8)
    x, w = random_array(rng, (4, 256), "f32"), random_array(rng, (256, 128), "f32")
    got = run_lax(text, [x, w])[0]
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rhs", ["f8E4M3FN", "f8E5M2"])
@pytest.mark.parametrize("imprecise", ["false", "true"])
def test_f8_dot_algorithms_lift(rhs: str, imprecise: str) -> None:
    # Any pair of f8 precision types accumulating in f32 is JAX's ANY_F8_ANY_F8_F32 preset (its
    # FAST_ACCUM form with imprecise accumulation); XLA's CPU backend ignores it, as lax does
    # there. (jax 0.12's XLA cannot take the original module, so numpy is the oracle.)
    ls, rs, lb, rb, lc, rc = LAYOUTS["matmul"]
    algo = (
        ALGORITHM.format(lhs="f8E4M3FN", acc="f32", ops=1)
        .replace("rhs_precision_type = f8E4M3FN", f"rhs_precision_type = {rhs}")
        .replace("= false>", f"= {imprecise}>")
    )
    text = dot_text(ls, rs, lb, rb, lc, rc, "f32", generic=True, algorithm=algo)
    rng = np.random.default_rng(4)
    x, y = random_array(rng, ls, "f32"), random_array(rng, rs, "f32")
    want = [dot_reference(x, y, lb, rb, lc, rc, np.float32)]
    fn = lax_fn(text)
    if jax.default_backend() == "cpu":
        np.testing.assert_allclose(np.asarray(fn(x, y)[0]), want[0], rtol=1e-5, atol=1e-5)
