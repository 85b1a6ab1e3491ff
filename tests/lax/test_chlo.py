"""CHLO ops on the lax backend: the special functions, the inverse and hyperbolic
trigonometry, is_inf, conj, square, next_after, polygamma, zeta, mulhi, top_k, constant,
constant_like and the broadcast_* ops.

The reference interpreter aborts on every CHLO op, so each check runs lax against XLA (which
legalizes CHLO as jax 0.10.2's lowering of the same lax function does; jax 0.12 has its own
decompositions of some) and against numpy /
scipy references; where XLA cannot run a form (non-prefix broadcast_dimensions,
broadcast_select), numpy alone is the oracle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest
import scipy.special as sp

import juliabridge
from juliabridge import UnsupportedOpError

from ._elementwise_util import (
    COMPLEX,
    FLOATS,
    INTS,
    SIGNED,
    TOL,
    bits,
    check,
    complex_parts,
    cplx,
    dt,
    int_ref,
    module,
    specials,
    total_order_key,
    up,
)
from .oracles import random_array

# 64-bit types cross @main (the x64 fixture of tests/conftest.py).
pytestmark = pytest.mark.usefixtures("x64")

#: XLA's CHLO decomposition (which the xla backend runs and lax.digamma follows) changed after
#: jaxlib 0.10: digamma(+-0) is -inf on 0.12, NaN on 0.10.2 (the negative integers stay NaN).
#: lax and xla agree on every version; the reference follows the installed one.
_ZERO_POLE = -np.inf if jax.__version_info__[:2] >= (0, 11) else np.nan


def _digamma_ref(x: np.ndarray) -> np.ndarray:
    pole = (x <= 0) & (x == np.floor(x))
    return np.where(x == 0, _ZERO_POLE, np.where(pole, np.nan, sp.digamma(x)))


UNARY_REAL: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "asinh": np.arcsinh,
    "atan": np.arctan,
    "atanh": np.arctanh,
    "bessel_i1e": sp.i1e,
    "cosh": np.cosh,
    # XLA's digamma is NaN at its poles (0: see _ZERO_POLE) where scipy gives +-inf.
    "digamma": _digamma_ref,
    "erf": sp.erf,
    "erf_inv": sp.erfinv,
    "erfc": sp.erfc,
    # log|Gamma(x)|; at -inf XLA gives +inf where scipy gives -inf.
    "lgamma": lambda x: np.where(x == -np.inf, np.inf, sp.gammaln(x)),
    "sinh": np.sinh,
    "square": np.square,
    "tan": np.tan,
    "conj": lambda x: x,
}
PREDICATES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "is_inf": np.isinf,
    "is_pos_inf": np.isposinf,
    "is_neg_inf": np.isneginf,
}


def _real_inputs(t: str) -> np.ndarray:
    """Inside every function's domain and away from poles, plus the IEEE specials."""
    x = np.array(
        [
            0.3,
            -0.7,
            0.95,
            -0.2,
            1.7,
            2.5,
            3.25,
            0.6,
            -1.5,
            4.0,
            0.05,
            -0.0,
            0.0,
            np.inf,
            -np.inf,
            np.nan,
        ]
    )
    return x.astype(dt(t))


@pytest.mark.parametrize("t", FLOATS)
def test_unary_real_ops(t: str) -> None:
    x = _real_inputs(t)
    n = x.shape[0]
    tt, bt = f"tensor<{n}x{t}>", f"tensor<{n}xi1>"
    body = [f"%{k} = chlo.{op} %a0 : {tt} -> {tt}" for k, op in enumerate(UNARY_REAL)]
    body += [f"%p{k} = chlo.{op} %a0 : {tt} -> {bt}" for k, op in enumerate(PREDICATES)]
    outs = [(f"%{k}", tt) for k in range(len(UNARY_REAL))]
    outs += [(f"%p{k}", bt) for k in range(len(PREDICATES))]
    with np.errstate(all="ignore"):
        want = [f(up(x)).astype(x.dtype) for f in UNARY_REAL.values()]
    want += [f(up(x)) for f in PREDICATES.values()]
    rtol, atol = TOL[t]
    # XLA's f32 polynomial approximations of the special functions are a few ulp off scipy's.
    rtol = max(rtol, 5e-6) if t != "f64" else 1e-11
    check(
        module([tt], body, outs),
        [x],
        want,
        [*UNARY_REAL, *PREDICATES],
        rtol=rtol,
        atol=atol,
        interpreter=False,
    )


def test_is_inf_on_f8_without_infinities() -> None:
    # f8E4M3FN has no infinity: inf converts to NaN there, and nothing is infinite.
    x = np.array([np.inf, -np.inf, 448.0, np.nan], np.float32)
    f8 = "tensor<4xf8E4M3FN>"
    body = ["%x = stablehlo.convert %a0 : (tensor<4xf32>) -> " + f8]
    body += [f"%{k} = chlo.{op} %x : {f8} -> tensor<4xi1>" for k, op in enumerate(PREDICATES)]
    outs = [(f"%{k}", "tensor<4xi1>") for k in range(3)]
    check(
        module(["tensor<4xf32>"], body, outs),
        [x],
        [np.zeros(4, bool)] * 3,
        list(PREDICATES),
        interpreter=False,
    )


UNARY_COMPLEX: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "asinh": np.arcsinh,
    "atan": np.arctan,
    "atanh": np.arctanh,
    "cosh": np.cosh,
    "sinh": np.sinh,
    "square": np.square,
    "tan": np.tan,
    "conj": np.conj,
}


@pytest.mark.parametrize("t", COMPLEX)
def test_unary_complex_ops(t: str) -> None:
    part = "f32" if t == "complex<f32>" else "f64"
    rng = np.random.default_rng(20)
    re, im = (random_array(rng, (10,), part) for _ in range(2))
    tt, pt = f"tensor<10x{t}>", f"tensor<10x{part}>"
    body = [f"%z = stablehlo.complex %a0, %a1 : {tt}"]
    outs, names, want = [], [], []
    z = cplx(re, im)
    for op, f in UNARY_COMPLEX.items():
        line = f"%{op} = chlo.{op} %z : {tt} -> {tt}"
        for acc, more in zip(
            (body, outs, names, want), complex_parts(line, op, tt, pt, f(z), re.dtype)
        ):
            acc += more
    rtol, atol = TOL[t]
    check(
        module([pt, pt], body, outs),
        [re, im],
        want,
        names,
        rtol=rtol * 10,
        atol=atol * 10,
        interpreter=False,
    )


def test_next_after_polygamma_zeta() -> None:
    x = np.array([1.0, 2.0, 0.5, 3.0, 1.0, 0.0, -0.0, 5e-324, np.nan, 1.0])
    y = np.array([2.0, 0.5, 3.0, 1.5, np.inf, -0.0, 1.0, 0.0, 1.0, np.nan])
    n = np.array([0.0, 1.0, 2.0, 3.0, 1.0, 0.0, 4.0, 1.0, 2.0, 0.0])
    q = np.array([0.5, 1.5, 2.0, 4.0, 0.7, 3.0, 1.1, 2.2, 5.0, 1.0])
    s = np.array([2.0, 3.0, 1.5, 4.0, 2.5, 6.0, 2.0, 3.5, 8.0, 1.0])
    tt = "tensor<10xf64>"
    text = module(
        [tt] * 5,
        [
            f"%0 = chlo.next_after %a0, %a1 : {tt}, {tt} -> {tt}",
            f"%1 = chlo.polygamma %a2, %a3 : {tt}, {tt} -> {tt}",
            f'%2 = "chlo.zeta"(%a4, %a3) : ({tt}, {tt}) -> {tt}',
        ],
        [("%0", tt), ("%1", tt), ("%2", tt)],
    )
    want = [np.nextafter(x, y), sp.polygamma(n.astype(int), q), sp.zeta(s, q)]
    got = check(
        text,
        [x, y, n, q, s],
        want,
        ["next_after", "polygamma", "zeta"],
        rtol=1e-11,
        atol=1e-13,
        interpreter=False,
    )
    np.testing.assert_array_equal(bits(got[0])[:8], bits(want[0])[:8])  # next_after is exact


def _mulhi_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    width = a.dtype.itemsize * 8
    out = [(int(x) * int(y)) >> width for x, y in zip(a.tolist(), b.tolist())]
    return (
        np.array([v % (1 << width) for v in out], dtype=np.uint64)
        .astype(np.dtype(f"u{a.dtype.itemsize}"))
        .view(a.dtype)
    )


@pytest.mark.parametrize("t", INTS)
def test_mulhi(t: str) -> None:
    a, b = specials(t, 16, seed=21), specials(t, 16, seed=22)
    b[:9] = a[:9][::-1]
    tt = f"tensor<16x{t}>"
    text = module([tt, tt], [f"%0 = chlo.mulhi %a0, %a1 : {tt}, {tt} -> {tt}"], [("%0", tt)])
    check(text, [a, b], [_mulhi_ref(a, b)], ["mulhi"], interpreter=False)


def _top_k_ref(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Descending in IEEE totalOrder (NaN first, -0 after +0), ties to the lower index."""
    flat = x.reshape(-1, x.shape[-1])
    idx = np.array(
        [
            sorted(
                range(len(row)), key=lambda i, r=row: (tuple(-v for v in total_order_key(r[i])), i)
            )[:k]
            for row in flat
        ]
    ).reshape(*x.shape[:-1], k)
    return np.take_along_axis(x, idx, axis=-1), idx.astype(np.int32)


def test_top_k_order_ties_and_specials() -> None:
    v = np.array(
        [
            [1, 3, 3, 2, np.nan, -0.0, 0.0, -np.inf, -np.nan, 0.0, -0.0],
            [5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5],
        ],
        np.float32,
    )
    body = [
        "%0:2 = chlo.top_k(%a0, k = 11) : tensor<2x11xf32> -> (tensor<2x11xf32>, tensor<2x11xi32>)",
        '%1:2 = "chlo.top_k"(%a0) {k = 3 : i64, is_stable = true} : (tensor<2x11xf32>) -> (tensor<2x3xf32>, tensor<2x3xi32>)',
    ]
    outs = [
        ("%0#0", "tensor<2x11xf32>"),
        ("%0#1", "tensor<2x11xi32>"),
        ("%1#0", "tensor<2x3xf32>"),
        ("%1#1", "tensor<2x3xi32>"),
    ]
    want = [*_top_k_ref(v, 11), *_top_k_ref(v, 3)]
    got = check(
        module(["tensor<2x11xf32>"], body, outs),
        [v],
        want,
        ["values", "indices", "values k=3", "indices k=3"],
        interpreter=False,
    )
    np.testing.assert_array_equal(bits(got[0]), bits(want[0]))  # -0 after +0, the NaN signs


@pytest.mark.parametrize("t", ["bf16", "i32", "ui8", "f64"])
def test_top_k_rank3_and_types(t: str) -> None:
    rng = np.random.default_rng(23)
    x = random_array(rng, (2, 3, 7), t)
    if t in INTS:
        x[0, 0, :3] = x[0, 0, 3]  # ties
    tt = f"tensor<2x3x7x{t}>"
    text = module(
        [tt],
        [f"%0:2 = chlo.top_k(%a0, k = 4) : {tt} -> (tensor<2x3x4x{t}>, tensor<2x3x4xi32>)"],
        [("%0#0", f"tensor<2x3x4x{t}>"), ("%0#1", "tensor<2x3x4xi32>")],
    )
    check(text, [x], list(_top_k_ref(x, 4)), ["values", "indices"], interpreter=False)


def test_top_k_with_k_beyond_the_dimension_is_refused() -> None:
    text = module(
        ["tensor<3xf32>"],
        [
            '%0:2 = "chlo.top_k"(%a0) {k = 4 : i64} : (tensor<3xf32>) -> (tensor<4xf32>, tensor<4xi32>)'
        ],
        [("%0#0", "tensor<4xf32>"), ("%0#1", "tensor<4xi32>")],
    )
    with pytest.raises(juliabridge.JuliaBridgeError, match="line 3"):
        juliabridge.load_mlir(text, backend="lax")


def test_constant_and_constant_like() -> None:
    body = [
        "%0 = chlo.constant dense<[[1.5, -2.0], [0x7FC00000, 3.0]]> : tensor<2x2xf32>",
        '%1 = "chlo.constant_like"(%a0) {value = 2.5 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>',
        '%2 = "chlo.constant_like"(%a1) {value = -7 : i16} : (tensor<4xi16>) -> tensor<4xi16>',
        '%3 = "chlo.constant_like"(%a2) {value = true} : (tensor<3xi1>) -> tensor<3xi1>',
        '%4 = "chlo.constant_like"(%a3) {value = 0.1 : bf16} : (tensor<bf16>) -> tensor<bf16>',
    ]
    outs = [
        ("%0", "tensor<2x2xf32>"),
        ("%1", "tensor<2x3xf32>"),
        ("%2", "tensor<4xi16>"),
        ("%3", "tensor<3xi1>"),
        ("%4", "tensor<bf16>"),
    ]
    args = [
        np.zeros((2, 3), np.float32),
        np.zeros(4, np.int16),
        np.zeros(3, bool),
        np.array(0, ml_dtypes.bfloat16),
    ]
    want = [
        np.array([[1.5, -2.0], [np.nan, 3.0]], np.float32),
        np.full((2, 3), 2.5, np.float32),
        np.full(4, -7, np.int16),
        np.ones(3, bool),
        np.array(0.1, ml_dtypes.bfloat16),
    ]
    check(
        module(["tensor<2x3xf32>", "tensor<4xi16>", "tensor<3xi1>", "tensor<bf16>"], body, outs),
        args,
        want,
        ["constant", "f32", "i16", "i1", "bf16"],
        interpreter=False,
    )


# --- broadcast_* ------------------------------------------------------------------------------

BROADCAST_FLOAT: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "remainder": np.fmod,
    "power": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "atan2": np.arctan2,
    "next_after": np.nextafter,
}


@pytest.mark.parametrize("t", ["f32", "bf16"])
def test_broadcast_float_binaries_numpy_style(t: str) -> None:
    rng = np.random.default_rng(24)
    x = random_array(rng, (2, 1, 3), t, special=True)
    y = random_array(rng, (4, 1), t, special=True)
    xt, yt, rt = f"tensor<2x1x3x{t}>", f"tensor<4x1x{t}>", f"tensor<2x4x3x{t}>"
    body = [
        f"%{k} = chlo.broadcast_{op} %a0, %a1 : ({xt}, {yt}) -> {rt}"
        for k, op in enumerate(BROADCAST_FLOAT)
    ]
    outs = [(f"%{k}", rt) for k in range(len(BROADCAST_FLOAT))]
    with np.errstate(all="ignore"):
        want = [f(up(x), up(y)).astype(x.dtype) for f in BROADCAST_FLOAT.values()]
    want[-1] = (
        np.nextafter(*np.broadcast_arrays(x.astype(np.float32), y.astype(np.float32)))
        if t == "f32"
        else want[-1]
    )
    rtol, atol = TOL[t]
    names = list(BROADCAST_FLOAT)
    if t == "bf16":  # numpy has no bf16 nextafter; XLA is the oracle for that one
        body, outs, want, names = body[:-1], outs[:-1], want[:-1], names[:-1]
    check(
        module([xt, yt], body, outs), [x, y], want, names, rtol=rtol, atol=atol, interpreter=False
    )


BROADCAST_INT = (
    "add",
    "subtract",
    "multiply",
    "maximum",
    "minimum",
    "and",
    "or",
    "xor",
    "shift_left",
    "shift_right_logical",
    "shift_right_arithmetic",
)


@pytest.mark.parametrize("t", ["i8", "ui32", "i64"])
def test_broadcast_integer_binaries_with_scalar_operand(t: str) -> None:
    x = specials(t, 12, seed=25).reshape(3, 4)
    y = np.array(3 if t != "ui32" else 33).astype(dt(t))
    xt, yt = f"tensor<3x4x{t}>", f"tensor<{t}>"
    body = [
        f"%{k} = chlo.broadcast_{op} %a0, %a1 : ({xt}, {yt}) -> {xt}"
        for k, op in enumerate(BROADCAST_INT)
    ]
    body.append(f"%d = chlo.broadcast_divide %a1, %a0 : ({yt}, {xt}) -> {xt}")
    outs = [(f"%{k}", xt) for k in range(len(BROADCAST_INT))] + [("%d", xt)]
    yy = np.full(x.shape, y)
    want = [int_ref(op, x.ravel(), yy.ravel()).reshape(x.shape) for op in BROADCAST_INT]
    want.append(int_ref("divide", yy.ravel(), x.ravel()).reshape(x.shape))
    check(module([xt, yt], body, outs), [x, y], want, [*BROADCAST_INT, "divide"], interpreter=False)


def test_broadcast_boolean_ops_and_compare() -> None:
    p = np.array([[True, False], [False, True]])
    q = np.array([True, False])
    f = np.array([[1.0, -0.0], [np.nan, 2.0]], np.float32)
    g = np.array([0.0, 2.0], np.float32)
    bt, ft = "tensor<2x2xi1>", "tensor<2x2xf32>"
    body = [
        f"%0 = chlo.broadcast_and %a0, %a1 : ({bt}, tensor<2xi1>) -> {bt}",
        f"%1 = chlo.broadcast_or %a1, %a0 : (tensor<2xi1>, {bt}) -> {bt}",
        f"%2 = chlo.broadcast_xor %a0, %a1 : ({bt}, tensor<2xi1>) -> {bt}",
        f"%3 = chlo.broadcast_add %a0, %a1 : ({bt}, tensor<2xi1>) -> {bt}",
        f"%4 = chlo.broadcast_compare %a2, %a3 {{comparison_direction = #chlo<comparison_direction GE>}} : ({ft}, tensor<2xf32>) -> {bt}",
        f"%5 = chlo.broadcast_compare %a2, %a3 {{comparison_direction = #chlo<comparison_direction LT>, compare_type = #chlo<comparison_type TOTALORDER>}} : ({ft}, tensor<2xf32>) -> {bt}",
        f"%6 = chlo.broadcast_compare %a0, %a1 {{comparison_direction = #chlo<comparison_direction NE>, compare_type = #chlo<comparison_type UNSIGNED>}} : ({bt}, tensor<2xi1>) -> {bt}",
    ]
    outs = [(f"%{k}", bt) for k in range(7)]
    with np.errstate(invalid="ignore"):
        want = [p & q, p | q, p ^ q, p | q, f >= g]
    lt = np.array([[total_order_key(a) < total_order_key(b) for a, b in zip(row, g)] for row in f])
    want += [lt, p != q]
    check(
        module([bt, "tensor<2xi1>", ft, "tensor<2xf32>"], body, outs),
        [p, q, f, g],
        want,
        ["and", "or", "xor", "add", "GE", "LT TOTALORDER", "NE"],
        interpreter=False,
    )


def test_broadcast_dimensions() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    col = np.array([10.0, 20.0], np.float32)
    row = np.array([1.0, 2.0, 3.0], np.float32)
    xt = "tensor<2x3xf32>"
    # Prefix padding (the trailing dimensions): the form XLA legalizes.
    text = module(
        [xt, "tensor<3xf32>"],
        [
            f"%0 = chlo.broadcast_multiply %a1, %a0 {{broadcast_dimensions = array<i64: 1>}} : (tensor<3xf32>, {xt}) -> {xt}"
        ],
        [("%0", xt)],
    )
    check(text, [x, row], [row * x], ["dims [1]"], interpreter=False)
    # Any other mapping (XLA refuses to legalize it): the lower-rank operand's dimension i
    # goes to result dimension broadcast_dimensions[i]; size-1 dimensions expand.
    text = module(
        [xt, "tensor<2xf32>", "tensor<3x2xf32>", "tensor<2x1xf32>"],
        [
            f"%0 = chlo.broadcast_add %a0, %a1 {{broadcast_dimensions = array<i64: 0>}} : ({xt}, tensor<2xf32>) -> {xt}",
            f"%1 = chlo.broadcast_subtract %a2, %a0 {{broadcast_dimensions = array<i64: 1, 0>}} : (tensor<3x2xf32>, {xt}) -> {xt}",
            f'%2 = "chlo.broadcast_maximum"(%a3, %a0) {{broadcast_dimensions = array<i64: 0, 1>}} : (tensor<2x1xf32>, {xt}) -> {xt}',
        ],
        [("%0", xt), ("%1", xt), ("%2", xt)],
    )
    t = np.arange(6, dtype=np.float32).reshape(3, 2) * 7
    c1 = col.reshape(2, 1)
    want = [x + col[:, None], t.T - x, np.maximum(c1, x)]
    check(
        text,
        [x, col, t, c1],
        want,
        ["dims [0]", "dims [1, 0]", "degenerate"],
        interpreter=False,
        xla=False,
    )


def test_broadcast_select_complex_and_specials() -> None:
    p = np.array([True, False, True])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    text = module(
        [
            "tensor<3xi1>",
            "tensor<2x3xf32>",
            "tensor<f32>",
            "tensor<f32>",
            "tensor<3xf64>",
            "tensor<2x1xf64>",
        ],
        [
            "%0 = chlo.broadcast_select %a0, %a1, %a2 : (tensor<3xi1>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>",
            "%c = chlo.broadcast_complex %a1, %a3 : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xcomplex<f32>>",
            "%1 = stablehlo.imag %c : (tensor<2x3xcomplex<f32>>) -> tensor<2x3xf32>",
            "%2 = chlo.broadcast_polygamma %a5, %a4 : (tensor<2x1xf64>, tensor<3xf64>) -> tensor<2x3xf64>",
            "%3 = chlo.broadcast_zeta %a5, %a4 : (tensor<2x1xf64>, tensor<3xf64>) -> tensor<2x3xf64>",
        ],
        [
            ("%0", "tensor<2x3xf32>"),
            ("%1", "tensor<2x3xf32>"),
            ("%2", "tensor<2x3xf64>"),
            ("%3", "tensor<2x3xf64>"),
        ],
    )
    q = np.array([0.5, 1.5, 3.0])
    n = np.array([[1.0], [2.0]])
    args = [p, x, np.float32(-1), np.float32(4), q, n]
    want = [
        np.where(p, x, -1).astype(np.float32),
        np.full((2, 3), 4, np.float32),
        sp.polygamma(n.astype(int), q),
        sp.zeta(n, q),
    ]
    # XLA fails to legalize broadcast_select on static shapes (shape.const_witness): numpy only.
    check(
        text,
        args,
        want,
        ["select", "complex", "polygamma", "zeta"],
        rtol=1e-11,
        atol=1e-13,
        interpreter=False,
        xla=False,
    )


@pytest.mark.parametrize(
    ("line", "ins", "out", "error", "match"),
    [
        (
            '"chlo.broadcast_add"(%a0, %a1) : (tensor<2x3xf32>, tensor<2xf32>) -> tensor<2x3xf32>',
            ["tensor<2x3xf32>", "tensor<2xf32>"],
            "tensor<2x3xf32>",
            juliabridge.JuliaBridgeError,
            "line 3",
        ),
        (
            '"chlo.erf"(%a0) : (tensor<2xi32>) -> tensor<2xi32>',
            ["tensor<2xi32>"],
            "tensor<2xi32>",
            juliabridge.JuliaBridgeError,
            "line 3",
        ),
        (
            '"chlo._asin_acos_kernel"(%a0) : (tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>>',
            ["tensor<2xcomplex<f32>>"],
            "tensor<2xcomplex<f32>>",
            UnsupportedOpError,
            r"chlo._asin_acos_kernel at line 3",
        ),
    ],
    ids=["incompatible broadcast", "erf of integers", "unlifted op"],
)
def test_refusals_name_the_op_and_line(
    line: str, ins: list[str], out: str, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        juliabridge.load_mlir(module(ins, [f"%0 = {line}"], [("%0", out)]), backend="lax")


# --- transformations --------------------------------------------------------------------------

SMOOTH = (
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "bessel_i1e",
    "cosh",
    "digamma",
    "erf",
    "erf_inv",
    "erfc",
    "lgamma",
    "sinh",
    "square",
    "tan",
)


def _domain(op: str) -> np.ndarray:
    if op == "acosh":
        return np.array([1.3, 2.0, 3.5, 1.1])
    if op in ("acos", "asin", "atanh", "erf_inv"):
        return np.array([0.3, -0.6, 0.1, 0.8])
    return np.array([0.7, 1.3, 2.1, 0.4])


def _smooth_module() -> str:
    tt = "tensor<4xf64>"
    body = [f"%{k} = chlo.{op} %a{k} : {tt} -> {tt}" for k, op in enumerate(SMOOTH)]
    body += [
        f"%b = chlo.broadcast_multiply %a0, %s : ({tt}, tensor<f64>) -> {tt}",
        "%c = chlo.polygamma %n, %a1 : tensor<4xf64>, tensor<4xf64> -> tensor<4xf64>",
        "%z = chlo.zeta %two, %a2 : tensor<4xf64>, tensor<4xf64> -> tensor<4xf64>",
        "%t:2 = chlo.top_k(%a3, k = 2) : tensor<4xf64> -> (tensor<2xf64>, tensor<2xi32>)",
    ]
    body = [
        "%s = stablehlo.constant dense<3.0> : tensor<f64>",
        "%n = stablehlo.constant dense<1.0> : tensor<4xf64>",
        "%two = stablehlo.constant dense<2.0> : tensor<4xf64>",
        *body,
    ]
    outs = [(f"%{k}", tt) for k in range(len(SMOOTH))]
    outs += [("%b", tt), ("%c", tt), ("%z", tt), ("%t#0", "tensor<2xf64>")]
    return module([tt] * len(SMOOTH), body, outs)


def test_grad_and_jvp_match_finite_differences() -> None:
    fn = juliabridge.load_mlir(_smooth_module(), backend="lax")
    xs = [_domain(op) for op in SMOOTH]
    rng = np.random.default_rng(26)
    weights = [rng.standard_normal(r.shape) for r in fn(*xs)]

    @jax.jit
    def loss(*a: Any) -> Any:
        return sum(jax.numpy.vdot(w, r) for w, r in zip(weights, fn(*a)))

    grads = jax.grad(loss, argnums=tuple(range(len(xs))))(*xs)
    eps = 1e-6
    for i in range(len(xs)):
        for k in range(4):
            plus = [x.copy() for x in xs]
            minus = [x.copy() for x in xs]
            plus[i][k] += eps
            minus[i][k] -= eps
            fd = (loss(*plus) - loss(*minus)) / (2 * eps)
            np.testing.assert_allclose(
                grads[i][k], fd, rtol=1e-6, atol=1e-8, err_msg=f"{SMOOTH[i]}[{k}]"
            )
    ts = [rng.standard_normal(4) for _ in xs]
    _, tangent = jax.jvp(loss, tuple(xs), tuple(ts))
    fd = (
        loss(*[x + eps * t for x, t in zip(xs, ts)]) - loss(*[x - eps * t for x, t in zip(xs, ts)])
    ) / (2 * eps)
    np.testing.assert_allclose(tangent, fd, rtol=1e-6)


def test_vmap_is_batched_and_equals_stacked_samples() -> None:
    fn = juliabridge.load_mlir(_smooth_module(), backend="lax")
    rng = np.random.default_rng(27)
    batch = [_domain(op) + 0.01 * rng.random((5, 4)) for op in SMOOTH]
    batched = jax.jit(jax.vmap(fn))(*batch)
    one = jax.jit(fn)
    for i in range(5):
        for r, out in zip(one(*[b[i] for b in batch]), batched):
            np.testing.assert_allclose(out[i], r, rtol=1e-14, atol=1e-15)
    jaxpr = str(jax.make_jaxpr(jax.vmap(fn))(*batch))
    assert "while" not in jaxpr and "scan" not in jaxpr


@pytest.mark.parametrize("t", SIGNED[-1:])
def test_mulhi_under_vmap(t: str) -> None:
    tt = f"tensor<3x{t}>"
    fn = juliabridge.load_mlir(
        module([tt, tt], [f"%0 = chlo.mulhi %a0, %a1 : {tt}, {tt} -> {tt}"], [("%0", tt)]),
        backend="lax",
    )
    a = specials(t, 9, seed=28).reshape(3, 3)
    b = specials(t, 9, seed=29).reshape(3, 3)
    out = jax.vmap(fn)(a, b)[0]
    for i in range(3):
        np.testing.assert_array_equal(out[i], _mulhi_ref(a[i], b[i]))


@pytest.mark.parametrize(
    ("op", "operand", "line"),
    [
        ("chlo.zeta", "x", 3),
        ("chlo.polygamma", "n", 3),
        ("chlo.next_after", "y", 3),
        ("chlo.broadcast_zeta", "x", 3),
    ],
)
def test_missing_derivatives_are_typed_errors_naming_op_and_line(
    op: str, operand: str, line: int
) -> None:
    tt = "tensor<2xf64>"
    text = module([tt, tt], [f'%0 = "{op}"(%a0, %a1) : ({tt}, {tt}) -> {tt}'], [("%0", tt)])
    fn = juliabridge.load_mlir(text, backend="lax")
    a, b = np.array([2.0, 3.0]), np.array([1.5, 2.5])
    argnum = 1 if op == "chlo.next_after" else 0
    for transform in (jax.grad, jax.jacfwd):
        with pytest.raises(
            juliabridge.TransformError, match=rf"{op} at line {line}.*operand {operand}"
        ):
            transform(lambda *v: fn(*v)[0].sum(), argnums=argnum)(a, b)
    if op != "chlo.next_after":  # the other operand has its derivative
        g = jax.grad(lambda q: fn(a, q)[0].sum())(b)
        eps = 1e-6
        fd = [
            (fn(a, b + eps * e)[0].sum() - fn(a, b - eps * e)[0].sum()) / (2 * eps)
            for e in np.eye(2)
        ]
        np.testing.assert_allclose(g, fd, rtol=1e-6)


def _ragged(dims: str, ins: list[str], out: str) -> str:
    return module(
        ins,
        [
            f'%0 = "chlo.ragged_dot"(%a0, %a1, %a2) {{ragged_dot_dimension_numbers = #chlo.ragged_dot<{dims}>, '
            f"precision_config = [#chlo<precision DEFAULT>, #chlo<precision HIGHEST>]}} : ({', '.join(ins)}) -> {out}"
        ],
        [("%0", out)],
    )


def ttype_of(x: np.ndarray) -> str:
    """The f64 tensor type of an array's shape."""
    return f"tensor<{''.join(f'{d}x' for d in x.shape)}f64>"


def _groups(sizes: np.ndarray) -> list[slice]:
    ends = np.cumsum(sizes)
    return [slice(int(e - s), int(e)) for s, e in zip(sizes, ends)]


def test_ragged_dot_three_modes() -> None:
    # XLA:CPU has no ragged-dot ("HLO opcode `ragged-dot` is not supported by XLA:CPU
    # ThunkEmitter"), so numpy's group-by-group products are the oracle.
    rng = np.random.default_rng(30)
    gs = np.array([2, 0, 3], np.int64)  # 5 of 6 rows in groups: the last row is 0
    none = "lhs_batching_dimensions = [], rhs_batching_dimensions = []"
    # 1: ragged lhs rows, one rhs matrix per group.
    lhs, rhs = rng.standard_normal((6, 4)), rng.standard_normal((3, 4, 5))
    want1 = np.zeros((6, 5))
    for i, sl in enumerate(_groups(gs)):
        want1[sl] = lhs[sl] @ rhs[i]
    # 2: ragged contracting dimension: one product per group of k.
    lhs2, rhs2 = rng.standard_normal((3, 6)), rng.standard_normal((6, 2))
    want2 = np.stack([lhs2[:, sl] @ rhs2[sl] for sl in _groups(gs)])
    # 3: ragged batch dimension: an ordinary batched product.
    lhs3, rhs3 = rng.standard_normal((5, 2, 3)), rng.standard_normal((5, 3, 4))
    cases = [
        (
            "rows",
            f"{none}, lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]",
            lhs,
            rhs,
            want1,
        ),
        (
            "contracting",
            f"{none}, lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0], lhs_ragged_dimensions = [1], rhs_group_dimensions = []",
            lhs2,
            rhs2,
            want2,
        ),
        (
            "batch",
            "lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1], lhs_ragged_dimensions = [0], rhs_group_dimensions = []",
            lhs3,
            rhs3,
            lhs3 @ rhs3,
        ),
    ]
    for name, dims, a, b, want in cases:
        ins = [ttype_of(a), ttype_of(b), "tensor<3xi64>"]
        text = _ragged(dims, ins, ttype_of(want))
        check(
            text, [a, b, gs], [want], [name], rtol=1e-12, atol=1e-12, interpreter=False, xla=False
        )
    text1 = _ragged(cases[0][1], [ttype_of(lhs), ttype_of(rhs), "tensor<3xi64>"], ttype_of(want1))
    # It differentiates like any dot: the gradient of a weighted sum against numpy's.
    fn = juliabridge.load_mlir(text1, backend="lax")
    w = rng.standard_normal((6, 5))
    g = jax.grad(lambda r: (fn(lhs, r, gs)[0] * w).sum())(rhs)
    want_g = np.zeros_like(rhs)
    for i, sl in enumerate(_groups(gs)):
        want_g[i] = lhs[sl].T @ w[sl]
    np.testing.assert_allclose(g, want_g, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", ["broadcast_divide", "broadcast_remainder"])
@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_same_typed_integer_chlo_division_at_zero_and_overflow(op: str, backend: str) -> None:
    # The xla backend guards a same-typed chlo division inline; in a module of chlo ops only,
    # the guard's first constant came out renamed ("stablehlo.convert") and the module failed
    # to verify (a bare MLIRError). The spec's (and XLA's) values: x / 0 = -1, x % 0 = x,
    # INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0.
    tt = "tensor<4xi32>"
    text = (
        "module {\n"
        f"  func.func @main(%a: {tt}, %b: {tt}) -> {tt} {{\n"
        f'    %0 = "chlo.{op}"(%a, %b) : ({tt}, {tt}) -> {tt}\n'
        f"    return %0 : {tt}\n  }}\n}}\n"
    )
    lo = np.iinfo(np.int32).min
    x = np.array([7, lo, -7, lo], np.int32)
    y = np.array([0, -1, 2, 3], np.int32)
    if op == "broadcast_divide":
        want = [-1, lo, -3, int(lo / 3)]  # truncating division
    else:
        want = [7, 0, -1, lo - 3 * int(lo / 3)]  # the remainder has the dividend's sign
    (got,) = juliabridge.load_mlir(text, backend=backend)(x, y)
    np.testing.assert_array_equal(np.asarray(got), np.array(want, np.int32))


def test_broadcast_dimensions_permuting_an_operand_of_the_result_shape() -> None:
    # A square operand of the result's own shape, mapped by broadcast_dimensions = [1, 0], is
    # transposed into place (operand dim i -> result dim broadcast_dimensions[i]).
    st = "tensor<2x2xf32>"
    text = module(
        [st, st],
        [
            f"%0 = chlo.broadcast_subtract %a0, %a1 {{broadcast_dimensions = array<i64: 1, 0>}} : ({st}, {st}) -> {st}"
        ],
        [("%0", st)],
    )
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    b = np.array([[10.0, 20.0], [30.0, 40.0]], np.float32)
    check(text, [a, b], [a.T - b], ["dims [1, 0] square"], interpreter=False, xla=False)


def test_lgamma_of_a_negative_argument_on_each_jax() -> None:
    """docs/lax-backend.md row lgamma-negative-jax-decomposition: XLA's legalization of
    chlo.lgamma gives -0.0562438965 for -2.5 (48 ulp from the true value); lax gives the same on
    jax 0.10.2 (jax.lax.lgamma is chlo.lgamma there) and, on jax 0.12 (JAX's own
    decomposition), a value within 2 ulp of the true one."""
    text = """module {
  func.func @main(%a: tensor<1xf32>) -> tensor<1xf32> {
    %0 = chlo.lgamma %a : tensor<1xf32> -> tensor<1xf32>
    return %0 : tensor<1xf32>
  }
}"""
    x = np.array([-2.5], np.float32)
    exact = -0.056243716497674  # log |Γ(-2.5)| = log(4·sqrt(π)/15)
    ulp = float(np.spacing(np.float32(exact)))
    got = float(np.asarray(juliabridge.load_mlir(text, backend="lax")(x)).ravel()[0])
    xla = float(np.asarray(juliabridge.load_mlir(text, backend="xla")(x)).ravel()[0])
    assert xla == np.float32(-0.056243896484375)  # 48 ulp from the true value
    if got != xla:  # jax 0.12: JAX's decomposition
        assert abs(got - exact) <= 2 * abs(ulp)


@pytest.mark.parametrize("t", ["f16", "f32", "f64"])
def test_digamma_at_its_zeros_and_poles_is_xlas_on_each_jax(t: str) -> None:
    """chlo.digamma at both zeros is what XLA's legalization gives on this jax (_ZERO_POLE:
    NaN on 0.10.2, -inf on 0.12); jax 0.12.1's own decomposition, which lax.digamma is there,
    gives +inf at -0, so the rule reads -0 as +0. The negative integers are NaN everywhere."""
    x = np.array([-0.0, 0.0, -1.0, -3.0, 0.5, -2.5], dt(t))
    tt = f"tensor<6x{t}>"
    text = module([tt], [f"%0 = chlo.digamma %a0 : {tt} -> {tt}"], [("%0", tt)])
    want = np.array([_ZERO_POLE, _ZERO_POLE, np.nan, np.nan, sp.digamma(0.5), sp.digamma(-2.5)])
    rtol = {"f16": 2e-3, "f32": 5e-6, "f64": 1e-11}[t]
    for backend in ("lax", "xla"):
        (got,) = juliabridge.load_mlir(text, backend=backend)(x)
        got = np.asarray(got).astype(np.float64)
        np.testing.assert_array_equal(got[:4], want[:4], err_msg=f"{backend} {t}")
        np.testing.assert_allclose(got[4:], want[4:], rtol=rtol, err_msg=f"{backend} {t}")


def test_digamma_keeps_its_derivative_at_and_off_the_zeros() -> None:
    # d/dx digamma = polygamma(1, x): pi^2 / 2 at 0.5 (scipy), and lax.digamma's own rule's
    # +inf at both zeros (the select that reads -0 as +0 must not make it 0).
    tt = "tensor<3xf64>"
    text = module([tt], [f"%0 = chlo.digamma %a0 : {tt} -> {tt}"], [("%0", tt)])
    fn = juliabridge.load_mlir(text, backend="lax")
    x = np.array([0.5, -0.0, 0.0])
    jac = np.diag(np.asarray(jax.jacfwd(lambda v: fn(v)[0])(x)))
    grad = np.asarray(jax.grad(lambda v: fn(v)[0].sum())(x))
    for d in (jac, grad):
        np.testing.assert_allclose(d[0], sp.polygamma(1, 0.5), rtol=1e-12)
        assert d[0] == pytest.approx(np.pi**2 / 2, rel=1e-12)
        np.testing.assert_array_equal(d[1:], [np.inf, np.inf])
