"""Indexing ops on the lax backend (dynamic_slice, dynamic_update_slice, gather, scatter,
torch_index_select) against XLA, the reference interpreter and numpy references written from
the spec; derivatives against finite differences; vmap batched."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from juliabridge import TransformError

from .indexing_reference import (
    GatherDims,
    ScatterDims,
    ScatterModule,
    gather_module,
    np_gather,
    np_scatter,
)
from .oracles import check_module, interpret, random_array, run_lax, run_xla
from .shape_helpers import check_grad, check_vmap, lax_fn, loop_count, main, primitives

pytestmark = pytest.mark.usefixtures("x64")
rng = np.random.default_rng(1)


def arr(shape: tuple[int, ...], t: str = "f32") -> np.ndarray:
    return random_array(rng, shape, t)


# --- dynamic_slice / dynamic_update_slice -------------------------------------------------------

SPEC_DS = main(
    ["tensor<4x4xi32>", "tensor<i64>", "tensor<i64>"],
    ["tensor<2x2xi32>"],
    """    %0 = "stablehlo.dynamic_slice"(%a0, %a1, %a2) {slice_sizes = array<i64: 2, 2>} : (tensor<4x4xi32>, tensor<i64>, tensor<i64>) -> tensor<2x2xi32>
    return %0 : tensor<2x2xi32>""",
)


def test_dynamic_slice_spec_example_clamps_negative_and_large_starts() -> None:
    x = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]], np.int32)
    check_module(SPEC_DS, [x, np.int64(-1), np.int64(3)], expected=[np.ones((2, 2), np.int32)])


def _np_ds(x: np.ndarray, starts: list[int], sizes: list[int]) -> np.ndarray:
    s = [min(max(int(v), 0), n - k) for v, n, k in zip(starts, x.shape, sizes)]
    return x[tuple(slice(a, a + k) for a, k in zip(s, sizes))]


@pytest.mark.parametrize(
    "it,starts",
    [
        ("i32", [-5, 2, 9]),
        ("i32", [-1, -2, 3]),
        ("i64", [2**40, -(2**40), 1]),
        ("ui32", [2**32 - 1, 0, 2]),
        ("ui8", [255, 3, 1]),
        ("i8", [-128, 127, 0]),
        ("ui64", [2**64 - 1, 1, 2**63]),
    ],
)
@pytest.mark.parametrize("t", ["f32", "bf16", "i1", "ui64"])
def test_dynamic_slice_and_update_slice_clamp_every_index_type(
    it: str, starts: list[int], t: str
) -> None:
    text = main(
        [
            f"tensor<5x4x6x{t}>",
            f"tensor<{it}>",
            f"tensor<{it}>",
            f"tensor<{it}>",
            f"tensor<2x0x3x{t}>",
            f"tensor<2x3x3x{t}>",
        ],
        [f"tensor<2x3x3x{t}>", f"tensor<5x4x6x{t}>", f"tensor<5x4x6x{t}>", f"tensor<2x0x3x{t}>"],
        f"""    %0 = stablehlo.dynamic_slice %a0, %a1, %a2, %a3, sizes = [2, 3, 3] : (tensor<5x4x6x{t}>, tensor<{it}>, tensor<{it}>, tensor<{it}>) -> tensor<2x3x3x{t}>
    %1 = stablehlo.dynamic_update_slice %a0, %a5, %a1, %a2, %a3 : (tensor<5x4x6x{t}>, tensor<2x3x3x{t}>, tensor<{it}>, tensor<{it}>, tensor<{it}>) -> tensor<5x4x6x{t}>
    %2 = "stablehlo.dynamic_update_slice"(%a0, %a4, %a3, %a2, %a1) : (tensor<5x4x6x{t}>, tensor<2x0x3x{t}>, tensor<{it}>, tensor<{it}>, tensor<{it}>) -> tensor<5x4x6x{t}>
    %3 = stablehlo.dynamic_slice %a0, %a3, %a1, %a2, sizes = [2, 0, 3] : (tensor<5x4x6x{t}>, tensor<{it}>, tensor<{it}>, tensor<{it}>) -> tensor<2x0x3x{t}>
    return %0, %1, %2, %3 : tensor<2x3x3x{t}>, tensor<5x4x6x{t}>, tensor<5x4x6x{t}>, tensor<2x0x3x{t}>""",
    )
    dt = np.dtype(
        {
            "i32": np.int32,
            "i64": np.int64,
            "ui32": np.uint32,
            "ui8": np.uint8,
            "i8": np.int8,
            "ui64": np.uint64,
        }[it]
    )
    idx = [np.array(v).astype(dt) for v in starts]
    x, empty, upd = arr((5, 4, 6), t), arr((2, 0, 3), t), arr((2, 3, 3), t)
    updated = x.copy()
    s = [min(max(int(v), 0), n - k) for v, n, k in zip(idx, x.shape, (2, 3, 3))]
    updated[s[0] : s[0] + 2, s[1] : s[1] + 3, s[2] : s[2] + 3] = upd
    want = [_np_ds(x, idx, [2, 3, 3]), updated, x, np.zeros((2, 0, 3), x.dtype)]
    check_module(
        text,
        [x, *idx, empty, upd],
        expected=want,
        rtol=0,
        atol=0,
        interpreter=interpreter_reads(idx),
    )


def interpreter_reads(indices: list[np.ndarray] | np.ndarray) -> bool:
    """Whether the interpreter reads these indices right: it sign-extends every index
    (stablehlo/reference/Ops.cpp evalIndex: getSExtValue), so an unsigned index with its top bit
    set becomes negative there; XLA and the spec read it as the large number it is."""
    for i in indices if isinstance(indices, list) else [indices]:
        i = np.asarray(i)
        if i.dtype.kind == "u" and (i >> (8 * i.dtype.itemsize - 1)).any():
            return False
    return True


def test_interpreter_sign_extends_unsigned_indices() -> None:
    # Why interpreter_reads exists: the reference interpreter clamps 0xFFFFFFFF to 0.
    text = SPEC_DS.replace("tensor<i64>", "tensor<ui32>")
    x = np.arange(16, dtype=np.int32).reshape(4, 4)
    big = np.uint32(2**32 - 1)
    np.testing.assert_array_equal(interpret(text, [x, big, big])[0], x[:2, :2])
    check_module(text, [x, big, big], expected=[x[2:, 2:]], interpreter=False)


def test_dynamic_slice_gradients_and_vmap() -> None:
    text = main(
        ["tensor<5x4xf64>", "tensor<i32>", "tensor<i32>", "tensor<2x2xf64>"],
        ["tensor<3x2xf64>", "tensor<5x4xf64>"],
        """    %0 = stablehlo.dynamic_slice %a0, %a1, %a2, sizes = [3, 2] : (tensor<5x4xf64>, tensor<i32>, tensor<i32>) -> tensor<3x2xf64>
    %1 = stablehlo.dynamic_update_slice %a0, %a3, %a2, %a1 : (tensor<5x4xf64>, tensor<2x2xf64>, tensor<i32>, tensor<i32>) -> tensor<5x4xf64>
    return %0, %1 : tensor<3x2xf64>, tensor<5x4xf64>""",
    )
    fn = lax_fn(text)
    x, u = arr((5, 4), "f64"), arr((2, 2), "f64")
    for i, j in ((1, 1), (-3, 7), (4, -1)):  # in range, and clamped both ways
        check_grad(fn, [x, np.int32(i), np.int32(j), u], argnums=(0, 3))
    check_vmap(
        fn,
        [
            np.stack([x, -x, 2 * x]),
            np.array([-3, 1, 9], np.int32),
            np.array([7, 0, 2], np.int32),
            np.stack([u, u, -u]),
        ],
    )


# --- gather -------------------------------------------------------------------------------------

SPEC_OPERAND = np.arange(1, 49, dtype=np.int32).reshape(2, 3, 4, 2)
SPEC_INDICES = np.array(
    [
        [[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]],
        [[[0, 0], [2, 1], [2, 2]], [[1, 2], [0, 1], [1, 0]]],
    ],
    np.int64,
)
SPEC_GATHER = GatherDims(
    offset_dims=[3, 4],
    collapsed_slice_dims=[1],
    start_index_map=[2, 1],
    index_vector_dim=3,
    operand_batching_dims=[0],
    start_indices_batching_dims=[1],
)


def test_gather_spec_example_with_batching_dims() -> None:
    text = gather_module(
        "tensor<2x3x4x2xi32>",
        "tensor<2x2x3x2xi64>",
        "tensor<2x2x3x2x2xi32>",
        SPEC_GATHER,
        [1, 1, 2, 2],
        ", indices_are_sorted = false",
    )
    spec_result = np.array(
        [
            [
                [[[1, 2], [3, 4]], [[3, 4], [5, 6]], [[13, 14], [15, 16]]],
                [[[33, 34], [35, 36]], [[35, 36], [37, 38]], [[41, 42], [43, 44]]],
            ],
            [
                [[[1, 2], [3, 4]], [[13, 14], [15, 16]], [[21, 22], [23, 24]]],
                [[[43, 44], [45, 46]], [[33, 34], [35, 36]], [[27, 28], [29, 30]]],
            ],
        ],
        np.int32,
    )
    ref = np_gather(SPEC_OPERAND, SPEC_INDICES, SPEC_GATHER, [1, 1, 2, 2], spec_result.shape)
    np.testing.assert_array_equal(ref, spec_result)  # the reference reproduces the spec
    check_module(text, [SPEC_OPERAND, SPEC_INDICES], expected=[spec_result])


GATHERS = {
    # Reactant's diagonal gather (gradient_dot_gather_iota.mlir): one element per index pair.
    "reactant_pairs": (
        "tensor<6x5xf32>",
        (6, 5),
        "tensor<4x2x{it}>",
        (4, 2),
        "tensor<4xf32>",
        GatherDims([], [0, 1], [0, 1], 1),
        [1, 1],
    ),
    # index_vector_dim = rank(indices): each index is a scalar; rows of width 3.
    "scalar_indices": (
        "tensor<5x3xf32>",
        (5, 3),
        "tensor<4x{it}>",
        (4,),
        "tensor<4x3xf32>",
        GatherDims([1], [0], [0], 1),
        [1, 3],
    ),
    # index vector first, windows of 2x3 that clamp at the edges.
    "vector_first": (
        "tensor<6x5xf32>",
        (6, 5),
        "tensor<2x3x{it}>",
        (2, 3),
        "tensor<3x2x3xf32>",
        GatherDims([1, 2], [], [0, 1], 0),
        [2, 3],
    ),
    # a batching dim on both sides, index vector in the middle, offset dim before batch dims.
    "batched_middle": (
        "tensor<3x7x4xf32>",
        (3, 7, 4),
        "tensor<2x1x3x{it}>",
        (2, 1, 3),
        "tensor<4x2x3xf32>",
        GatherDims([0], [1], [1], 1, [0], [2]),
        [1, 1, 4],
    ),
    # rank 4 operand, start_index_map out of order, a size-0 window dim.
    "rank4": (
        "tensor<3x4x2x5xf32>",
        (3, 4, 2, 5),
        "tensor<2x2x{it}>",
        (2, 2),
        "tensor<2x2x0x5xf32>",
        GatherDims([1, 2, 3], [0], [2, 0], 1),
        [1, 2, 0, 5],
    ),
}


@pytest.mark.parametrize("it", ["i32", "i64", "ui32", "ui8", "i16"])
@pytest.mark.parametrize("case", sorted(GATHERS))
def test_gather_layouts_and_out_of_bounds_starts(case: str, it: str) -> None:
    op_t, op_shape, idx_t, idx_shape, res_t, dn, sizes = GATHERS[case]
    idx_t = idx_t.format(it=it)
    dt = np.dtype(
        {"i32": np.int32, "i64": np.int64, "ui32": np.uint32, "ui8": np.uint8, "i16": np.int16}[it]
    )
    lo = 0 if dt.kind == "u" else -4
    idx = rng.integers(lo, 10, size=idx_shape).astype(dt)  # many out of bounds
    idx.reshape(-1)[0] = np.iinfo(dt).max
    x = arr(op_shape)
    res_shape = tuple(int(d) for d in res_t[len("tensor<") : -1].split("x")[:-1])
    want = np_gather(x, idx, dn, sizes, res_shape)
    sorted_attr = ", indices_are_sorted = true" if case == "scalar_indices" else ""
    text = gather_module(op_t, idx_t, res_t, dn, sizes, sorted_attr)
    check_module(
        text, [x, idx], expected=[want], rtol=0, atol=0, interpreter=interpreter_reads(idx)
    )
    if not interpreter_reads(idx):  # the interpreter still checks every other index
        idx.reshape(-1)[0] = 1
        want = np_gather(x, idx, dn, sizes, res_shape)
        check_module(text, [x, idx], expected=[want], rtol=0, atol=0)


def test_gather_gradient_goes_where_the_clamped_start_read() -> None:
    op_t, op_shape, _, _, res_t, dn, sizes = GATHERS["vector_first"]
    text = gather_module(
        op_t.replace("f32", "f64"), "tensor<2x3xi32>", res_t.replace("f32", "f64"), dn, sizes
    )
    fn = lax_fn(text)
    idx = np.array([[-2, 5, 9], [1, 4, -7]], np.int32)
    check_grad(fn, [arr(op_shape, "f64"), idx], argnums=(0,))
    check_vmap(
        fn, [np.stack([arr(op_shape, "f64") for _ in range(3)]), np.stack([idx, idx[::-1], -idx])]
    )
    # indices batched only, and operand batched only
    check_vmap(fn, [arr(op_shape, "f64"), np.stack([idx, idx + 2])], in_axes=(None, 0))
    check_vmap(fn, [np.stack([arr(op_shape, "f64")] * 2), idx], in_axes=(0, None))


def test_gather_lowers_to_one_bare_gather() -> None:
    op_t, op_shape, idx_t, idx_shape, res_t, dn, sizes = GATHERS["batched_middle"]
    fn = lax_fn(gather_module(op_t, idx_t.format(it="i32"), res_t, dn, sizes))
    text = jax.jit(fn).lower(arr(op_shape), np.zeros(idx_shape, np.int32)).as_text()
    assert text.count('"stablehlo.gather"') == 1, text
    assert "clamp" not in text and "select" not in text


# --- scatter ------------------------------------------------------------------------------------

ADD_BODY = """      %s = stablehlo.add %x0, %y0 : tensor<{e}>
      stablehlo.return %s : tensor<{e}>"""


def test_scatter_spec_example_with_batching_dims() -> None:
    dn = ScatterDims([3, 4], [1], [2, 1], 3, [0], [1])
    mod = ScatterModule(
        ["tensor<2x3x4x2xi64>"],
        "tensor<2x2x3x2xi64>",
        ["tensor<2x2x3x2x2xi64>"],
        dn,
        ADD_BODY.format(e="i64"),
        ", indices_are_sorted = false, unique_indices = false",
    )
    x = SPEC_OPERAND.astype(np.int64)
    u = np.ones((2, 2, 3, 2, 2), np.int64)
    spec_result = np.array(
        [
            [
                [[3, 4], [6, 7], [6, 7], [7, 8]],
                [[9, 10], [11, 12], [15, 16], [17, 18]],
                [[17, 18], [19, 20], [22, 23], [24, 25]],
            ],
            [
                [[25, 26], [28, 29], [30, 31], [31, 32]],
                [[35, 36], [38, 39], [38, 39], [39, 40]],
                [[41, 42], [44, 45], [46, 47], [47, 48]],
            ],
        ],
        np.int64,
    )
    ref = np_scatter([x], SPEC_INDICES, [u], dn, lambda a, b: [a + b])
    np.testing.assert_array_equal(ref[0], spec_result)
    check_module(mod.text(), [x, SPEC_INDICES, u], expected=[spec_result])


def test_scatter_reactant_setindex_form_complex() -> None:
    # complex_scatter_fft_dot_symattr.mlir: replace body, inserted_window_dims = [0, 1].
    dn = ScatterDims([], [0, 1], [0, 1], 1)
    body = """      stablehlo.return %y0 : tensor<complex<f64>>"""
    mod = ScatterModule(
        ["tensor<8x8xcomplex<f64>>"], "tensor<20x2xi64>", ["tensor<20xcomplex<f64>>"], dn, body
    )
    x = arr((8, 8), "complex<f64>")
    flat = rng.permutation(64)[:20]
    idx = np.stack([flat // 8, flat % 8], axis=1).astype(np.int64)
    u = arr((20,), "complex<f64>")
    want = np_scatter([x], idx, [u], dn, lambda a, b: [b])
    # The interpreter binding takes no complex arguments (eval_module: "Can't cast unknown
    # element type"), so numpy is the second oracle here.
    check_module(mod.text(), [x, idx, u], expected=want, interpreter=False)


def _body(op: str, e: str) -> str:
    if op == "replace":
        return f"      stablehlo.return %y0 : tensor<{e}>"
    if op == "keep":
        return f"      stablehlo.return %x0 : tensor<{e}>"
    if op == "sub_then_mul":  # an update computation with no JAX primitive
        return f"""      %s = stablehlo.subtract %x0, %y0 : tensor<{e}>
      %m = stablehlo.multiply %s, %y0 : tensor<{e}>
      stablehlo.return %m : tensor<{e}>"""
    # the update first, as some writers emit it
    return f"""      %s = stablehlo.{op} %y0, %x0 : tensor<{e}>
      stablehlo.return %s : tensor<{e}>"""


_NP = {
    "add": lambda a, b: [a | b] if a.dtype == np.bool_ else [a + b],
    "multiply": lambda a, b: [a & b] if a.dtype == np.bool_ else [a * b],
    "maximum": lambda a, b: [np.maximum(a, b)],
    "minimum": lambda a, b: [np.minimum(a, b)],
    "and": lambda a, b: [a & b],
    "or": lambda a, b: [a | b],
    "replace": lambda a, b: [b],
    "keep": lambda a, b: [a],
    "sub_then_mul": lambda a, b: [(a - b) * b],
}

BODIES = [
    ("add", "f32"),
    ("add", "i32"),
    ("add", "i1"),
    ("multiply", "f64"),
    ("multiply", "i1"),
    ("maximum", "f32"),
    ("minimum", "i64"),
    ("maximum", "ui8"),
    ("and", "i1"),
    ("or", "i1"),
    ("and", "i32"),
    ("or", "ui16"),
    ("replace", "bf16"),
    ("keep", "f32"),
    ("sub_then_mul", "f32"),
    ("sub_then_mul", "i32"),
]


@pytest.mark.parametrize("op,e", BODIES)
def test_scatter_update_computations(op: str, e: str) -> None:
    # Row windows (update_window_dims = [1]); duplicates only where the result is order-free.
    dn = ScatterDims([1], [0], [0], 1)
    mod = ScatterModule(
        [f"tensor<6x4x{e}>"], "tensor<5x1xi32>", [f"tensor<5x4x{e}>"], dn, _body(op, e)
    )
    order_free = op not in ("replace", "sub_then_mul")
    rows = [1, 3, 1, 5, 3] if order_free else [4, 0, 2, 5, 1]
    if e in ("f32", "f64", "bf16") and op in ("add", "multiply"):
        rows = [1, 3, 2, 5, 0]  # float sums of duplicates depend on the order
    idx = np.array(rows, np.int32)[:, None]
    x, u = arr((6, 4), e), arr((5, 4), e)
    want = np_scatter([x], idx, [u], dn, _NP[op])
    check_module(mod.text(), [x, idx, u], expected=want)


def test_scatter_out_of_bounds_elements_skipped_as_the_spec_says() -> None:
    # Windows of 3 along a scattered dim: starts 3 and -1 overhang the 5-long operand. The spec
    # (and the interpreter) apply the elements inside; XLA drops whole windows.
    dn = ScatterDims([1], [], [0], 1)
    mod = ScatterModule(
        ["tensor<5xf32>"], "tensor<4x1xi32>", ["tensor<4x3xf32>"], dn, ADD_BODY.format(e="f32")
    )
    x = np.zeros(5, np.float32)
    idx = np.array([[3], [-1], [7], [-9]], np.int32)
    u = np.array([[1, 2, 3], [10, 20, 30], [5, 5, 5], [6, 6, 6]], np.float32)
    want = np_scatter([x], idx, [u], dn, _NP["add"])
    np.testing.assert_array_equal(want[0], [20, 30, 0, 1, 2])
    got = run_lax(mod.text(), [x, idx, u])
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(interpret(mod.text(), [x, idx, u])[0], want[0])
    assert not np.array_equal(run_xla(mod.text(), [x, idx, u])[0], want[0])  # XLA's rule differs


@pytest.mark.parametrize("op", ["add", "replace", "sub_then_mul", "maximum"])
def test_scatter_overhanging_windows_2d_batched(op: str) -> None:
    # 2-d windows overhanging both edges, a batching dim, index vector first, u8 indices.
    dn = ScatterDims([2, 3], [], [2, 1], 0, [0], [2])
    e = "f32"
    mod = ScatterModule(
        [f"tensor<2x5x6x{e}>"], "tensor<2x3x2xi8>", [f"tensor<3x2x3x2x{e}>"], dn, _body(op, e)
    )
    idx = np.array([[[4, 0], [-2, 5], [2, 1]], [[-1, 1], [3, 4], [5, 9]]], np.int8)
    x, u = arr((2, 5, 6)), arr((3, 2, 3, 2))
    want = np_scatter([x], idx, [u], dn, _NP[op])
    got = run_lax(mod.text(), [x, idx, u])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(interpret(mod.text(), [x, idx, u])[0], want[0], rtol=1e-6)


def test_scatter_two_operands_recognised_and_generic() -> None:
    dn = ScatterDims([], [0], [0], 1)
    split = """      %s = stablehlo.add %x0, %y0 : tensor<f32>
      %m = stablehlo.maximum %x1, %y1 : tensor<i32>
      stablehlo.return %s, %m : tensor<f32>, tensor<i32>"""
    joint = """      %c = stablehlo.convert %y1 : (tensor<i32>) -> tensor<f32>
      %s = stablehlo.multiply %y0, %c : tensor<f32>
      %t = stablehlo.add %x0, %s : tensor<f32>
      %m = stablehlo.add %x1, %y1 : tensor<i32>
      stablehlo.return %t, %m : tensor<f32>, tensor<i32>"""
    x0, x1 = arr((6,)), arr((6,), "i32")
    idx = np.array([[2], [0], [2], [7], [5]], np.int64)
    u0, u1 = arr((5,)), arr((5,), "i32")
    for body, ref in (
        (split, lambda a, b, c, d: [a + c, max(b, d)]),
        (joint, lambda a, b, c, d: [a + c * np.float32(d), b + d]),
    ):
        mod = ScatterModule(
            ["tensor<6xf32>", "tensor<6xi32>"],
            "tensor<5x1xi64>",
            ["tensor<5xf32>", "tensor<5xi32>"],
            dn,
            body,
            elem=["f32", "i32"],
        )
        want = np_scatter([x0, x1], idx, [u0, u1], dn, ref)
        check_module(mod.text(), [x0, x1, idx, u0, u1], expected=want, rtol=1e-6, atol=1e-6)


def test_scatter_scalar_indices_unique_and_sorted_flags() -> None:
    dn = ScatterDims([1], [0], [0], 1)  # index_vector_dim = rank(indices)
    mod = ScatterModule(
        ["tensor<5x2xf32>"],
        "tensor<3xui32>",
        ["tensor<3x2xf32>"],
        dn,
        ADD_BODY.format(e="f32"),
        ", indices_are_sorted = true, unique_indices = true",
    )
    x, u = arr((5, 2)), arr((3, 2))
    idx = np.array([0, 2, 4], np.uint32)
    check_module(mod.text(), [x, idx, u], expected=np_scatter([x], idx, [u], dn, _NP["add"]))


def _f64(mod: ScatterModule) -> str:
    return mod.text().replace("f32", "f64")


@pytest.mark.parametrize("op", ["add", "replace", "maximum", "minimum", "multiply", "sub_then_mul"])
def test_scatter_gradients_against_finite_differences(op: str) -> None:
    dn = ScatterDims([1], [], [0], 1)  # overhanging windows: the padded form
    mod = ScatterModule(
        ["tensor<6xf32>"], "tensor<4x1xi32>", ["tensor<4x3xf32>"], dn, _body(op, "f64")
    )
    unique = op in ("replace", "multiply", "sub_then_mul")
    idx = np.array([[4], [-1], [0], [9]] if unique else [[4], [-1], [3], [1]], np.int32)
    if op == "multiply":  # JAX differentiates scatter_mul only for unique_indices = true
        mod.extra = ", unique_indices = true"
        idx = np.array([[0], [3], [9], [-5]], np.int32)
    fn = lax_fn(_f64(mod))
    x, u = arr((6,), "f64"), arr((4, 3), "f64")
    check_grad(fn, [x, idx, u], argnums=(0, 2))
    if op != "sub_then_mul":
        check_vmap(fn, [np.stack([x, -x]), np.stack([idx, idx[::-1]]), np.stack([u, 2 * u])])


def test_scatter_in_order_batches_without_a_loop_over_the_batch() -> None:
    dn = ScatterDims([], [0], [0], 1)
    mod = ScatterModule(
        ["tensor<6xf32>"], "tensor<4x1xi32>", ["tensor<4xf32>"], dn, _body("sub_then_mul", "f32")
    )
    fn = lax_fn(mod.text())
    x, u = arr((6,)), arr((4,))
    idx = np.array([[4], [-1], [0], [2]], np.int32)
    got = jax.vmap(fn)(np.stack([x, -x]), np.stack([idx, idx]), np.stack([u, u]))
    np.testing.assert_allclose(np.asarray(got[0][1]), np.asarray(fn(-x, idx, u)[0]), rtol=1e-6)
    # the one loop is over the 4 update elements, with the batch carried inside it
    batched = [np.stack([x, -x]), np.stack([idx, idx[::-1]]), np.stack([u, 2 * u])]
    check_vmap(fn, batched, own_loops=True)
    assert loop_count(jax.make_jaxpr(fn)(x, idx, u)) == 1


def test_scatter_mul_with_duplicate_indices_refuses_gradients_by_name() -> None:
    dn = ScatterDims([], [0], [0], 1)
    mod = ScatterModule(
        ["tensor<4xf64>"], "tensor<3x1xi32>", ["tensor<3xf64>"], dn, _body("multiply", "f64")
    )
    fn = lax_fn(mod.text())
    args = [arr((4,), "f64"), np.array([[1], [1], [2]], np.int32), arr((3,), "f64")]
    np.testing.assert_allclose(
        fn(*args)[0], np_scatter(args[:1], args[1], args[2:], dn, _NP["multiply"])[0]
    )
    with pytest.raises(TransformError, match=r"stablehlo.scatter at line 3.*unique_indices"):
        jax.grad(lambda u: fn(args[0], args[1], u)[0].sum())(args[2])


def test_scatter_add_lowers_to_one_bare_scatter() -> None:
    dn = ScatterDims([], [0], [0], 1)
    mod = ScatterModule(
        ["tensor<6xf32>"], "tensor<4x1xi32>", ["tensor<4xf32>"], dn, ADD_BODY.format(e="f32")
    )
    text = (
        jax.jit(lax_fn(mod.text()))
        .lower(arr((6,)), np.zeros((4, 1), np.int32), arr((4,)))
        .as_text()
    )
    assert text.count('"stablehlo.scatter"') == 1 and "stablehlo.pad" not in text
    assert "scan" not in primitives(
        jax.make_jaxpr(lax_fn(mod.text()))(arr((6,)), np.zeros((4, 1), np.int32), arr((4,)))
    )


# --- torch_index_select -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,index_shape,dim,batch",
    [
        ((2, 5, 3), (2, 4), 1, 1),
        ((5, 3), (4,), 0, 0),
        ((4, 6), (2, 3), 1, 0),
        ((2, 3, 5, 2), (2, 3, 4), 2, 2),
    ],
)
def test_torch_index_select(
    shape: tuple[int, ...], index_shape: tuple[int, ...], dim: int, batch: int
) -> None:
    result = shape[:dim] + index_shape[batch:] + shape[dim + 1 :]
    t = lambda s: "tensor<" + "x".join(map(str, s)) + "xf64>"  # noqa: E731
    it = "tensor<" + "x".join(map(str, index_shape)) + "xi32>"
    text = main(
        [t(shape), it],
        [t(result)],
        f"""    %0 = "stablehlo.torch_index_select"(%a0, %a1) {{dim = {dim} : i64, batch_dims = {batch} : i64}} : ({t(shape)}, {it}) -> {t(result)}
    return %0 : {t(result)}""",
    )
    x = arr(shape, "f64")
    idx = rng.integers(-2, shape[dim] + 2, size=index_shape).astype(np.int32)
    want = np.zeros(result, np.float64)
    for r in np.ndindex(*result):
        b, mid, rest = (
            r[:batch],
            r[dim : dim + len(index_shape) - batch],
            r[dim + len(index_shape) - batch :],
        )
        k = min(max(int(idx[(*b, *mid)]), 0), shape[dim] - 1)  # XLA clamps, as gather does
        want[r] = x[(*r[:dim], k, *rest)]
    # The interpreter refuses this deprecated op ("decomposable"): XLA and numpy are the oracles.
    check_module(text, [x, idx], expected=[want], interpreter=False)
    fn = lax_fn(text)
    check_grad(fn, [x, idx], argnums=(0,))
    check_vmap(fn, [np.stack([x, -x]), np.stack([idx, idx])])


# --- random dimension numbers -------------------------------------------------------------------


def random_gather(
    seed: int,
) -> tuple[GatherDims, list[int], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """A valid random gather: dims, slice sizes, operand, indices and result shapes."""
    r = np.random.default_rng(seed)
    rank = int(r.integers(1, 5))
    shape = tuple(int(v) for v in r.integers(1, 5, rank))
    dims = list(r.permutation(rank))
    n_batch = int(r.integers(0, 2)) if rank > 1 else 0
    obatch = sorted(dims[:n_batch])
    rest = dims[n_batch:]
    n_map = int(r.integers(1, len(rest) + 1))
    start_map = [int(d) for d in r.permutation(rest)[:n_map]]
    collapsed = sorted(int(d) for d in rest if r.random() < 0.5)
    sizes = [
        1 if d in obatch or d in collapsed else int(r.integers(0, shape[d] + 1))
        for d in range(rank)
    ]
    # indices: the batching dims, some other batch dims, and the index vector somewhere
    extra = [int(v) for v in r.integers(1, 4, int(r.integers(0, 3)))]
    batch_sizes = [shape[d] for d in obatch] + extra
    order = list(r.permutation(len(batch_sizes)))
    batch_sizes = [batch_sizes[i] for i in order]
    sbatch_pos = [order.index(i) for i in range(n_batch)]  # where each batching dim went
    scalar = n_map == 1 and r.random() < 0.3
    ivd = len(batch_sizes) if scalar else int(r.integers(0, len(batch_sizes) + 1))
    idx_shape = list(batch_sizes)
    if not scalar:
        idx_shape.insert(ivd, n_map)
    sbatch = [p + (1 if not scalar and p >= ivd else 0) for p in sbatch_pos]
    offset_sizes = [sizes[d] for d in range(rank) if d not in obatch and d not in collapsed]
    res_rank = len(batch_sizes) + len(offset_sizes)
    offset_dims = sorted(int(d) for d in r.permutation(res_rank)[: len(offset_sizes)])
    res, bs, os_ = [], iter(batch_sizes), iter(offset_sizes)
    for d in range(res_rank):
        res.append(next(os_) if d in offset_dims else next(bs))
    dn = GatherDims(offset_dims, collapsed, start_map, ivd, obatch, sbatch)
    return dn, sizes, shape, tuple(idx_shape), tuple(res)


def _t(shape: Sequence[int], e: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + e + ">"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31))
def test_random_gathers_against_numpy_and_both_oracles(seed: int) -> None:
    dn, sizes, shape, idx_shape, res = random_gather(seed)
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape).astype(np.float32)
    idx = r.integers(-2, max(shape) + 2, idx_shape).astype(np.int32)
    text = gather_module(_t(shape, "f32"), _t(idx_shape, "i32"), _t(res, "f32"), dn, sizes)
    check_module(text, [x, idx], expected=[np_gather(x, idx, dn, sizes, res)], rtol=0, atol=0)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31))
def test_random_scatters_against_numpy_and_the_interpreter(seed: int) -> None:
    # The gather's dims read as a scatter's (updates shaped like the gather's result). Windows
    # may overhang, where XLA's rule differs from the spec's: the interpreter and numpy decide.
    g, _, shape, idx_shape, res = random_gather(seed)
    dn = ScatterDims(
        g.offset_dims,
        g.collapsed_slice_dims,
        g.start_index_map,
        g.index_vector_dim,
        g.operand_batching_dims,
        g.start_indices_batching_dims,
    )
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape).astype(np.float32)
    idx = r.integers(-2, max(shape) + 2, idx_shape).astype(np.int32)
    u = r.standard_normal(res).astype(np.float32)
    mod = ScatterModule(
        [_t(shape, "f32")], _t(idx_shape, "i32"), [_t(res, "f32")], dn, ADD_BODY.format(e="f32")
    )
    want = np_scatter([x], idx, [u], dn, _NP["add"])
    got = run_lax(mod.text(), [x, idx, u])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(interpret(mod.text(), [x, idx, u])[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["add", "replace", "keep", "maximum", "multiply"])
def test_recognised_update_computations_scatter_without_a_loop(op: str) -> None:
    # A body that returns its input, its update or one binary op of the two is a JAX scatter
    # (or, for "keep", no scatter at all): no per-element loop.
    dn = ScatterDims([1], [0], [0], 1)
    mod = ScatterModule(
        ["tensor<6x4xf32>"], "tensor<5x1xi32>", ["tensor<5x4xf32>"], dn, _body(op, "f32")
    )
    x, u = arr((6, 4)), arr((5, 4))
    idx = np.array([4, 0, 2, 5, 1], np.int32)[:, None]
    fn = lax_fn(mod.text())
    want = np_scatter([x], idx, [u], dn, _NP[op])
    np.testing.assert_allclose(np.asarray(fn(x, idx, u)[0]), want[0], rtol=1e-6)
    assert loop_count(jax.make_jaxpr(fn)(x, idx, u)) == 0, op
