"""Shape ops on the lax backend against XLA, the reference interpreter and numpy; their
derivatives against finite differences; vmap batched."""

from __future__ import annotations

import numpy as np
import pytest

from juliabridge.support.dtypes import MLIR_TO_NUMPY

from .oracles import check_module, interpret, random_array, run_lax
from .shape_helpers import check_grad, check_vmap, lax_fn, main

pytestmark = pytest.mark.usefixtures("x64")

ALL_TYPES = sorted(MLIR_TO_NUMPY)
rng = np.random.default_rng(0)


def arr(shape: tuple[int, ...], t: str = "f32") -> np.ndarray:
    return random_array(rng, shape, t)


def interpretable(t: str) -> bool:
    """The interpreter binding cannot take complex arguments (eval_module raises TypeError:
    "Can't cast unknown element type"), so complex cases use XLA and numpy only."""
    return not t.startswith("complex")


@pytest.mark.parametrize("t", ALL_TYPES)
def test_reshape_transpose_reverse_slice_concat_every_type(t: str) -> None:
    text = main(
        [f"tensor<2x3x4x{t}>", f"tensor<2x1x4x{t}>"],
        [
            f"tensor<6x4x{t}>",
            f"tensor<4x2x3x{t}>",
            f"tensor<2x3x4x{t}>",
            f"tensor<2x2x2x{t}>",
            f"tensor<2x4x4x{t}>",
        ],
        f"""    %0 = stablehlo.reshape %a0 : (tensor<2x3x4x{t}>) -> tensor<6x4x{t}>
    %1 = stablehlo.transpose %a0, dims = [2, 0, 1] : (tensor<2x3x4x{t}>) -> tensor<4x2x3x{t}>
    %2 = stablehlo.reverse %a0, dims = [0, 2] : tensor<2x3x4x{t}>
    %3 = stablehlo.slice %a0 [0:2, 0:3:2, 1:4:2] : (tensor<2x3x4x{t}>) -> tensor<2x2x2x{t}>
    %4 = stablehlo.concatenate %a0, %a1, dim = 1 : (tensor<2x3x4x{t}>, tensor<2x1x4x{t}>) -> tensor<2x4x4x{t}>
    return %0, %1, %2, %3, %4 : tensor<6x4x{t}>, tensor<4x2x3x{t}>, tensor<2x3x4x{t}>, tensor<2x2x2x{t}>, tensor<2x4x4x{t}>""",
    )
    x, y = arr((2, 3, 4), t), arr((2, 1, 4), t)
    want = [
        x.reshape(6, 4),
        x.transpose(2, 0, 1),
        x[::-1, :, ::-1],
        x[:, 0:3:2, 1:4:2],
        np.concatenate([x, y], axis=1),
    ]
    check_module(text, [x, y], expected=want, rtol=0, atol=0, interpreter=interpretable(t))


@pytest.mark.parametrize("t", ["f32", "i1", "bf16", "complex<f64>", "ui8"])
def test_pad_negative_edges_and_interior(t: str) -> None:
    # low -1 removes the first element after interior padding; high 2 adds two.
    text = main(
        [f"tensor<2x3x{t}>", f"tensor<{t}>"],
        [f"tensor<5x9x{t}>", f"tensor<2x3x{t}>", f"tensor<5x5x{t}>"],
        f"""    %0 = stablehlo.pad %a0, %a1, low = [0, 1], high = [2, 1], interior = [1, 2] : (tensor<2x3x{t}>, tensor<{t}>) -> tensor<5x9x{t}>
    %1 = stablehlo.pad %a0, %a1, low = [0, 0], high = [0, 0], interior = [0, 0] : (tensor<2x3x{t}>, tensor<{t}>) -> tensor<2x3x{t}>
    %2 = "stablehlo.pad"(%a0, %a1) {{edge_padding_low = array<i64: -1, 2>, edge_padding_high = array<i64: 2, -2>, interior_padding = array<i64: 2, 1>}} : (tensor<2x3x{t}>, tensor<{t}>) -> tensor<5x5x{t}>
    return %0, %1, %2 : tensor<5x9x{t}>, tensor<2x3x{t}>, tensor<5x5x{t}>""",
    )
    x, v = arr((2, 3), t), arr((), t)
    check_module(
        text,
        [x, v],
        expected=[
            _np_pad(x, v, [0, 1], [2, 1], [1, 2]),
            x,
            _np_pad(x, v, [-1, 2], [2, -2], [2, 1]),
        ],
        rtol=0,
        atol=0,
        interpreter=interpretable(t),
    )


def _np_pad(
    x: np.ndarray, v: np.ndarray, low: list[int], high: list[int], inner: list[int]
) -> np.ndarray:
    """spec.md#pad from its formula: interior first, then edges (negative edges crop)."""
    shape = [n + max(n - 1, 0) * i for n, i in zip(x.shape, inner)]
    full = np.full([s + max(lo, 0) + max(hi, 0) for s, lo, hi in zip(shape, low, high)], v, x.dtype)
    idx = tuple(slice(max(lo, 0), max(lo, 0) + s, i + 1) for lo, s, i in zip(low, shape, inner))
    full[idx] = x
    crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for lo, hi, n in zip(low, high, full.shape))
    return full[crop]


def test_np_pad_reference_matches_the_spec_example() -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]])
    want = np.array(
        [[0, 1, 0, 0, 2, 0, 0, 3, 0], [0] * 9, [0, 4, 0, 0, 5, 0, 0, 6, 0], [0] * 9, [0] * 9]
    )
    np.testing.assert_array_equal(_np_pad(x, np.array(0), [0, 1], [2, 1], [1, 2]), want)


def test_broadcast_in_dim_and_broadcast() -> None:
    text = main(
        ["tensor<1x3xf32>", "tensor<f32>", "tensor<3xi32>"],
        ["tensor<2x3x2xf32>", "tensor<2x3xf32>", "tensor<4x3xi32>"],
        """    %0 = stablehlo.broadcast_in_dim %a0, dims = [2, 1] : (tensor<1x3xf32>) -> tensor<2x3x2xf32>
    %1 = "stablehlo.broadcast_in_dim"(%a1) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2x3xf32>
    %2 = stablehlo.broadcast_in_dim %a2, dims = [1] : (tensor<3xi32>) -> tensor<4x3xi32>
    return %0, %1, %2 : tensor<2x3x2xf32>, tensor<2x3xf32>, tensor<4x3xi32>""",
    )
    x, s, v = arr((1, 3)), arr(()), arr((3,), "i32")
    # spec.md#broadcast_in_dim: result[i, j, k] = operand[0, j] (operand dim 0 has size 1).
    want = [
        np.broadcast_to(x[0][None, :, None], (2, 3, 2)),
        np.full((2, 3), s),
        np.broadcast_to(v, (4, 3)),
    ]
    check_module(text, [x, s, v], expected=want, rtol=0, atol=0)
    # stablehlo.broadcast (deprecated): the interpreter aborts on it, so numpy is the second oracle.
    text = main(
        ["tensor<2xi64>"],
        ["tensor<3x4x2xi64>"],
        """    %0 = stablehlo.broadcast %a0, sizes = [3, 4] : (tensor<2xi64>) -> tensor<3x4x2xi64>
    return %0 : tensor<3x4x2xi64>""",
    )
    v = np.array([5, -7])
    check_module(text, [v], interpreter=False, expected=[np.broadcast_to(v, (3, 4, 2))])


def test_odd_shapes_scalar_empty_rank5() -> None:
    text = main(
        ["tensor<f32>", "tensor<0x3xf32>", "tensor<1x2x1x2x3xf32>", "tensor<2x3xf32>"],
        [
            "tensor<1x1xf32>",
            "tensor<3x0xf32>",
            "tensor<3x2x2x1x1xf32>",
            "tensor<2x5xf32>",
            "tensor<0x2xf32>",
            "tensor<4x3xf32>",
        ],
        """    %0 = stablehlo.reshape %a0 : (tensor<f32>) -> tensor<1x1xf32>
    %1 = stablehlo.transpose %a1, dims = [1, 0] : (tensor<0x3xf32>) -> tensor<3x0xf32>
    %2 = stablehlo.transpose %a2, dims = [4, 3, 1, 2, 0] : (tensor<1x2x1x2x3xf32>) -> tensor<3x2x2x1x1xf32>
    %3 = stablehlo.pad %a1, %a0, low = [2, 1], high = [0, 1], interior = [3, 0] : (tensor<0x3xf32>, tensor<f32>) -> tensor<2x5xf32>
    %4 = stablehlo.slice %a3 [1:1, 0:3:2] : (tensor<2x3xf32>) -> tensor<0x2xf32>
    %5 = stablehlo.concatenate %a1, %a3, %a1, %a3, dim = 0 : (tensor<0x3xf32>, tensor<2x3xf32>, tensor<0x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    return %0, %1, %2, %3, %4, %5 : tensor<1x1xf32>, tensor<3x0xf32>, tensor<3x2x2x1x1xf32>, tensor<2x5xf32>, tensor<0x2xf32>, tensor<4x3xf32>""",
    )
    s, e, r5, m = arr(()), arr((0, 3)), arr((1, 2, 1, 2, 3)), arr((2, 3))
    want = [
        s.reshape(1, 1),
        e.T,
        r5.transpose(4, 3, 1, 2, 0),
        np.full((2, 5), s),
        np.zeros((0, 2), np.float32),
        np.concatenate([m, m]),
    ]
    check_module(text, [s, e, r5, m], expected=want, rtol=0, atol=0)


def test_get_dimension_size() -> None:
    text = main(
        ["tensor<2x5xf32>"],
        ["tensor<i32>", "tensor<i32>"],
        """    %0 = stablehlo.get_dimension_size %a0, dim = 1 : (tensor<2x5xf32>) -> tensor<i32>
    %1 = "stablehlo.get_dimension_size"(%a0) {dimension = 0 : i64} : (tensor<2x5xf32>) -> tensor<i32>
    return %0, %1 : tensor<i32>, tensor<i32>""",
    )
    check_module(text, [arr((2, 5))], expected=[np.array(5, np.int32), np.array(2, np.int32)])


def test_dynamic_shape_ops_with_static_results() -> None:
    text = main(
        ["tensor<4xf32>", "tensor<2xi64>", "tensor<2xi32>", "tensor<2xui32>"],
        ["tensor<3x4xf32>", "tensor<2x2xf32>", "tensor<2x3xf32>", "tensor<2x3xi16>"],
        """    %0 = stablehlo.dynamic_broadcast_in_dim %a0, %a1, dims = [1] : (tensor<4xf32>, tensor<2xi64>) -> tensor<3x4xf32>
    %1 = stablehlo.dynamic_reshape %a0, %a2 : (tensor<4xf32>, tensor<2xi32>) -> tensor<2x2xf32>
    %2 = stablehlo.dynamic_iota %a3, dim = 1 : (tensor<2xui32>) -> tensor<2x3xf32>
    %3 = "stablehlo.dynamic_iota"(%a3) {iota_dimension = 0 : i64} : (tensor<2xui32>) -> tensor<2x3xi16>
    return %0, %1, %2, %3 : tensor<3x4xf32>, tensor<2x2xf32>, tensor<2x3xf32>, tensor<2x3xi16>""",
    )
    x = arr((4,))
    args = [x, np.array([3, 4]), np.array([2, 2], np.int32), np.array([2, 3], np.uint32)]
    want = [
        np.broadcast_to(x, (3, 4)),
        x.reshape(2, 2),
        np.broadcast_to(np.arange(3, dtype=np.float32), (2, 3)),
        np.broadcast_to(np.array([[0], [1]], np.int16), (2, 3)),
    ]
    check_module(text, args, expected=want, rtol=0, atol=0)


DPAD = main(
    ["tensor<2x3xf32>", "tensor<f32>", "tensor<2xi64>", "tensor<2xi64>", "tensor<2xi64>"],
    ["tensor<5x9xf32>"],
    """    %0 = stablehlo.dynamic_pad %a0, %a1, %a2, %a3, %a4 : (tensor<2x3xf32>, tensor<f32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<5x9xf32>
    return %0 : tensor<5x9xf32>""",
)


@pytest.mark.parametrize(
    "low,high,inner",
    [
        ([0, 1], [2, 1], [1, 2]),
        ([2, 0], [0, 2], [1, 2]),
        ([-1, -2], [2, 0], [2, 4]),
        ([3, 6], [0, 0], [0, 0]),
        ([-1, 3], [0, 1], [4, 1]),
    ],
)
def test_dynamic_pad_same_shape_different_paddings(
    low: list[int], high: list[int], inner: list[int]
) -> None:
    # XLA cannot translate dynamic_pad with runtime paddings; the interpreter and numpy can.
    x, v = arr((2, 3)), np.float32(9)
    args = [x, v, np.array(low), np.array(high), np.array(inner)]
    want = _np_pad(x, v, low, high, inner)
    assert want.shape == (5, 9)
    got = run_lax(DPAD, args)
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(interpret(DPAD, args)[0], want)
    # With constant paddings XLA folds the op into a pad: the module runs on all three.
    consts = "\n".join(
        f"    %c{k} = stablehlo.constant dense<{list(p)}> : tensor<2xi64>"
        for k, p in enumerate((low, high, inner))
    )
    const_text = main(
        ["tensor<2x3xf32>", "tensor<f32>"],
        ["tensor<5x9xf32>"],
        consts
        + """
    %0 = stablehlo.dynamic_pad %a0, %a1, %c0, %c1, %c2 : (tensor<2x3xf32>, tensor<f32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<5x9xf32>
    return %0 : tensor<5x9xf32>""",
    )
    check_module(const_text, [x, v], expected=[want], rtol=0, atol=0)


def test_dynamic_pad_gradient_and_vmap() -> None:
    fn = lax_fn(DPAD.replace("f32", "f64"))
    x, v = arr((2, 3), "f64"), np.float64(0.5)
    pads = [np.array([-1, 3]), np.array([0, 1]), np.array([4, 1])]
    check_grad(fn, [x, v, *pads], argnums=(0, 1))
    check_vmap(
        fn, [np.stack([x, -x]), v, *[np.stack([p, p]) for p in pads]], in_axes=(0, None, 0, 0, 0)
    )


def test_real_dynamic_slice() -> None:
    text = main(
        ["tensor<8x5xf32>", "tensor<2xi64>", "tensor<2xi64>", "tensor<2xi64>"],
        ["tensor<3x2xf32>"],
        """    %0 = stablehlo.real_dynamic_slice %a0, %a1, %a2, %a3 : (tensor<8x5xf32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<3x2xf32>
    return %0 : tensor<3x2xf32>""",
    )
    x = arr((8, 5))
    for start, limit, step in (
        ([1, 0], [7, 4], [2, 3]),
        ([5, 3], [8, 5], [1, 1]),
        ([0, 1], [3, 5], [1, 2]),
    ):
        got = run_lax(text, [x, np.array(start), np.array(limit), np.array(step)])
        want = x[start[0] : limit[0] : step[0], start[1] : limit[1] : step[1]]
        np.testing.assert_array_equal(got[0], want)
    fn = lax_fn(text.replace("f32", "f64"))
    check_grad(
        fn, [arr((8, 5), "f64"), np.array([1, 0]), np.array([7, 4]), np.array([2, 3])], argnums=(0,)
    )


def test_shape_op_gradients_against_finite_differences() -> None:
    text = main(
        ["tensor<2x3xf64>", "tensor<f64>", "tensor<1x3xf64>"],
        [
            "tensor<4x6xf64>",
            "tensor<3x2xf64>",
            "tensor<3x3xf64>",
            "tensor<2x2x3xf64>",
            "tensor<6xf64>",
        ],
        """    %0 = stablehlo.pad %a0, %a1, low = [-1, 2], high = [2, -1], interior = [1, 1] : (tensor<2x3xf64>, tensor<f64>) -> tensor<4x6xf64>
    %1 = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xf64>) -> tensor<3x2xf64>
    %2 = stablehlo.concatenate %a0, %a2, dim = 0 : (tensor<2x3xf64>, tensor<1x3xf64>) -> tensor<3x3xf64>
    %3 = stablehlo.broadcast_in_dim %a2, dims = [0, 2] : (tensor<1x3xf64>) -> tensor<2x2x3xf64>
    %r = stablehlo.reverse %a0, dims = [1] : tensor<2x3xf64>
    %s = stablehlo.slice %r [0:2:1, 0:3:2] : (tensor<2x3xf64>) -> tensor<2x2xf64>
    %4 = stablehlo.reshape %a0 : (tensor<2x3xf64>) -> tensor<6xf64>
    %5 = stablehlo.reshape %s : (tensor<2x2xf64>) -> tensor<4xf64>
    %6 = stablehlo.slice %4 [0:4] : (tensor<6xf64>) -> tensor<4xf64>
    %7 = stablehlo.multiply %5, %6 : tensor<4xf64>
    %8 = stablehlo.pad %7, %a1, low = [1], high = [1], interior = [0] : (tensor<4xf64>, tensor<f64>) -> tensor<6xf64>
    return %0, %1, %2, %3, %8 : tensor<4x6xf64>, tensor<3x2xf64>, tensor<3x3xf64>, tensor<2x2x3xf64>, tensor<6xf64>""",
    )
    fn = lax_fn(text)
    args = [arr((2, 3), "f64"), np.float64(0.25), arr((1, 3), "f64")]
    check_grad(fn, args, argnums=(0, 1, 2))
    check_vmap(fn, [np.stack([a, 2 * a, -a]) for a in args])


GENERIC_OPS = {
    "reshape": (
        '"stablehlo.reshape"(%a0) : (tensor<2x3xf32>) -> tensor<3x2xf32>',
        "tensor<3x2xf32>",
        lambda x: x.reshape(3, 2),
    ),
    "transpose": (
        '"stablehlo.transpose"(%a0) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>',
        "tensor<3x2xf32>",
        lambda x: x.T,
    ),
    "reverse": (
        '"stablehlo.reverse"(%a0) {dimensions = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>',
        "tensor<2x3xf32>",
        lambda x: x[:, ::-1],
    ),
    "slice": (
        '"stablehlo.slice"(%a0) {start_indices = array<i64: 1, 0>, limit_indices = array<i64: 2, 3>, strides = array<i64: 1, 2>} : (tensor<2x3xf32>) -> tensor<1x2xf32>',
        "tensor<1x2xf32>",
        lambda x: x[1:2, 0:3:2],
    ),
    "concatenate": (
        '"stablehlo.concatenate"(%a0, %a0) {dimension = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>',
        "tensor<4x3xf32>",
        lambda x: np.concatenate([x, x]),
    ),
    "dynamic_reshape": (
        '"stablehlo.dynamic_reshape"(%a0, %a1) : (tensor<2x3xf32>, tensor<1xi64>) -> tensor<6xf32>',
        "tensor<6xf32>",
        lambda x: x.reshape(6),
    ),
    "dynamic_broadcast_in_dim": (
        '"stablehlo.dynamic_broadcast_in_dim"(%a0, %a2) {broadcast_dimensions = array<i64: 1, 2>} : (tensor<2x3xf32>, tensor<3xi64>) -> tensor<2x2x3xf32>',
        "tensor<2x2x3xf32>",
        lambda x: np.broadcast_to(x, (2, 2, 3)),
    ),
    # the deprecated broadcast aborts the interpreter (checked against XLA and numpy)
    "broadcast": (
        '"stablehlo.broadcast"(%a0) {broadcast_sizes = array<i64: 2>} : (tensor<2x3xf32>) -> tensor<2x2x3xf32>',
        "tensor<2x2x3xf32>",
        lambda x: np.broadcast_to(x, (2, 2, 3)),
    ),
}


@pytest.mark.parametrize("name", sorted(GENERIC_OPS))
def test_generic_syntax(name: str) -> None:
    # Each op as "op"(...) {attrs} : type, the form any MLIR printer can emit.
    op, res, ref = GENERIC_OPS[name]
    text = main(
        ["tensor<2x3xf32>", "tensor<1xi64>", "tensor<3xi64>"],
        [res],
        f"    %0 = {op}\n    return %0 : {res}",
    )
    x = arr((2, 3))
    check_module(
        text,
        [x, np.array([6]), np.array([2, 2, 3])],
        expected=[ref(x)],
        interpreter=name != "broadcast",
    )


def test_real_dynamic_slice_generic_syntax() -> None:
    # Runtime limits: XLA cannot translate it and the interpreter aborts on it; numpy decides.
    text = main(
        ["tensor<2x3xf32>", "tensor<2xi64>"],
        ["tensor<2x2xf32>"],
        """    %st = stablehlo.constant dense<[0, 1]> : tensor<2xi64>
    %one = stablehlo.constant dense<1> : tensor<2xi64>
    %0 = "stablehlo.real_dynamic_slice"(%a0, %st, %a1, %one) : (tensor<2x3xf32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<2x2xf32>
    return %0 : tensor<2x2xf32>""",
    )
    x = arr((2, 3))
    np.testing.assert_array_equal(run_lax(text, [x, np.array([2, 3])])[0], x[0:2, 1:3])


def test_dynamic_pad_and_real_dynamic_slice_of_a_unit_dim() -> None:
    # An operand with a dim of size 1 is data like any other (only a 0-size dim is empty).
    text = main(
        ["tensor<1x3xf32>", "tensor<f32>", "tensor<2xi64>", "tensor<2xi64>", "tensor<2xi64>"],
        ["tensor<2x6xf32>", "tensor<1x2xf32>"],
        """    %0 = stablehlo.dynamic_pad %a0, %a1, %a2, %a3, %a4 : (tensor<1x3xf32>, tensor<f32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<2x6xf32>
    %st = stablehlo.constant dense<[0, 1]> : tensor<2xi64>
    %lim = stablehlo.constant dense<[1, 3]> : tensor<2xi64>
    %one = stablehlo.constant dense<1> : tensor<2xi64>
    %1 = stablehlo.real_dynamic_slice %a0, %st, %lim, %one : (tensor<1x3xf32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<1x2xf32>
    return %0, %1 : tensor<2x6xf32>, tensor<1x2xf32>""",
    )
    x, v = arr((1, 3)), np.float32(9)
    low, high, inner = [1, 0], [0, 1], [0, 1]
    got = run_lax(text, [x, v, np.array(low), np.array(high), np.array(inner)])
    np.testing.assert_array_equal(got[0], _np_pad(x, v, low, high, inner))
    np.testing.assert_array_equal(got[1], x[0:1, 1:3])
