"""stablehlo.convolution on the lax backend: every layout and attribute, against XLA, the
reference interpreter and a numpy convolution written from spec.md#convolution; derivatives
against finite differences (f64); vmap batched."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import juliabridge
from juliabridge.backends.lax.registry import RULES
from juliabridge.backends.lax.valtypes import ELEMENT_TYPES
from tests.outside import reactant_fixture_text

from .oracles import check_module, interpret, random_array, run_lax, run_xla
from .transform_checks import check_batched, check_grad, check_hvp, check_jvp, lax_fn, x64


@pytest.fixture(autouse=True)
def _x64() -> Iterator[None]:
    with x64():
        yield


@dataclass(frozen=True)
class Conv:
    """One convolution: layouts as in the pretty syntax ('bf01' = [b, f, 0, 1]) and attributes."""

    lhs: str
    rhs: str
    out: str
    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]
    strides: tuple[int, ...] = ()
    padding: tuple[tuple[int, int], ...] = ()
    lhs_dilation: tuple[int, ...] = ()
    rhs_dilation: tuple[int, ...] = ()
    reversal: tuple[bool, ...] = ()
    groups: int = 1
    batch_groups: int = 1
    precision: tuple[str, str] = ("DEFAULT", "DEFAULT")
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.lhs) - 2

    def get(self, name: str, default: object) -> tuple:
        value = getattr(self, name)
        return tuple(value) if value else (default,) * self.n


def _spec(layout: str, first: str, second: str) -> tuple[int, ...]:
    """Axis positions (first, second, spatial 0, 1, ...) of a layout string."""
    spatial = sorted((c, i) for i, c in enumerate(layout) if c.isdigit())
    return (layout.index(first), layout.index(second), *(i for _, i in spatial))


def conv_reference(c: Conv, lhs: np.ndarray, rhs: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
    """spec.md#convolution, literally: dilate and pad lhs, slice windows, reverse, dot."""
    if out_dtype == np.bool_ or np.dtype(out_dtype).kind in "iu":
        wide = np.int64
    elif np.dtype(out_dtype).kind == "c":
        wide = np.complex128
    else:
        wide = np.float64
    x = np.transpose(lhs.astype(wide), _spec(c.lhs, "b", "f"))
    w = np.transpose(rhs.astype(wide), _spec(c.rhs, "o", "i"))
    if c.groups > 1:
        parts = [_conv(c, a, b) for a, b in zip(np.split(x, c.groups, 1), np.split(w, c.groups, 0))]
    elif c.batch_groups > 1:
        parts = [_conv(c, a, b) for a, b in
                 zip(np.split(x, c.batch_groups, 0), np.split(w, c.batch_groups, 0))]  # fmt: skip
    else:
        parts = [_conv(c, x, w)]
    y = np.concatenate(parts, axis=1)
    y = np.transpose(y, np.argsort(_spec(c.out, "b", "f")))
    if out_dtype == np.bool_:
        return y != 0
    with np.errstate(over="ignore", invalid="ignore"):
        return y.astype(out_dtype)


def _conv(c: Conv, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    strides, pads = c.get("strides", 1), c.get("padding", (0, 0))
    ld, rd, rev = c.get("lhs_dilation", 1), c.get("rhs_dilation", 1), c.get("reversal", False)
    n = c.n
    dil = np.zeros(x.shape[:2] + tuple((s - 1) * d + 1 if s else 0 for s, d in zip(x.shape[2:], ld)),
                   x.dtype)  # fmt: skip
    dil[(slice(None), slice(None), *(slice(None, None, d) for d in ld))] = x
    for d, (lo, hi) in enumerate(pads):
        ax = 2 + d
        if lo < 0:
            dil = np.take(dil, range(-lo, dil.shape[ax]), axis=ax)
        if hi < 0:
            dil = np.take(dil, range(dil.shape[ax] + hi), axis=ax)
        widths = [(0, 0)] * dil.ndim
        widths[ax] = (max(lo, 0), max(hi, 0))
        dil = np.pad(dil, widths)
    spans = [(k - 1) * d + 1 for k, d in zip(w.shape[2:], rd)]
    out_sp = [0 if s > p else (p - s) // st + 1 for p, s, st in zip(dil.shape[2:], spans, strides)]
    y = np.zeros((x.shape[0], w.shape[0], *out_sp), x.dtype)
    for pos in np.ndindex(*out_sp):
        sl = tuple(slice(p * st, p * st + s, d) for p, st, s, d in zip(pos, strides, spans, rd))
        win = dil[(slice(None), slice(None), *sl)]
        flip = tuple(2 + d for d in range(n) if rev[d])
        if flip:
            win = np.flip(win, flip)
        y[(slice(None), slice(None), *pos)] = np.tensordot(
            win, w, axes=([1, *range(2, 2 + n)], [1, *range(2, 2 + n)])
        )
    return y


def _layout(s: str) -> str:
    return "[" + ", ".join(s) + "]"


def conv_text(c: Conv, t: str, out_t: str = "", generic: bool = False) -> tuple[str, tuple]:
    """The module and its result shape (computed with the reference on zeros)."""
    out_t = out_t or t
    shape = conv_reference(c, np.zeros(c.lhs_shape), np.zeros(c.rhs_shape), np.float64).shape
    lt = f"tensor<{'x'.join(map(str, c.lhs_shape))}x{t}>"
    rt = f"tensor<{'x'.join(map(str, c.rhs_shape))}x{t}>"
    ot = f"tensor<{'x'.join(map(str, shape))}x{out_t}>"
    dn = f"{_layout(c.lhs)}x{_layout(c.rhs)}->{_layout(c.out)}"
    ints = lambda v: ", ".join(map(str, v))  # noqa: E731
    pads = ", ".join(f"[{lo}, {hi}]" for lo, hi in c.get("padding", (0, 0)))
    prec = ", ".join(f"#stablehlo<precision {p}>" for p in c.precision)
    extra = "".join(f", {k} = {v}" for k, v in c.extra.items())
    if generic:
        rev = ", ".join("true" if r else "false" for r in c.get("reversal", False))
        op = (f'"stablehlo.convolution"(%l, %r) {{batch_group_count = {c.batch_groups} : i64, '
              f"dimension_numbers = #stablehlo.conv<{dn}>, feature_group_count = {c.groups} : i64, "
              f"lhs_dilation = array<i64: {ints(c.get('lhs_dilation', 1))}>, "
              f"padding = dense<[{pads}]> : tensor<{c.n}x2xi64>, precision_config = [{prec}], "
              f"rhs_dilation = array<i64: {ints(c.get('rhs_dilation', 1))}>, "
              f"window_reversal = array<i1: {rev}>, "
              f"window_strides = array<i64: {ints(c.get('strides', 1))}>{extra}}}")  # fmt: skip
    else:
        rev = ", ".join("true" if r else "false" for r in c.get("reversal", False))
        op = (f"stablehlo.convolution(%l, %r) dim_numbers = {dn}, window = {{stride = "
              f"[{ints(c.get('strides', 1))}], pad = [{pads}], lhs_dilate = "
              f"[{ints(c.get('lhs_dilation', 1))}], rhs_dilate = [{ints(c.get('rhs_dilation', 1))}], "
              f"reverse = [{rev}]}} {{batch_group_count = {c.batch_groups} : i64, "
              f"feature_group_count = {c.groups} : i64, precision_config = [{prec}]{extra}}}")  # fmt: skip
    text = f"""module {{
  func.func @main(%l: {lt}, %r: {rt}) -> {ot} {{
    %0 = {op} : ({lt}, {rt}) -> {ot}
    return %0 : {ot}
  }}
}}"""
    return text, shape


LENET = Conv("bf01", "oi01", "bf01", (2, 1, 8, 8), (3, 1, 5, 5))
CASES = {
    "lenet_nchw": LENET,
    "nhwc_hwio": Conv("b01f", "01io", "b01f", (2, 6, 5, 3), (3, 2, 3, 4), strides=(2, 1),
                      padding=((1, 1), (0, 2))),
    "lux_reversed_spatial_grouped": Conv("bf10", "01io", "bf10", (1, 4, 4, 4), (3, 3, 1, 8),
                                         groups=4),
    "1d_dilations_negative_padding": Conv("b0f", "0io", "b0f", (2, 7, 3), (3, 3, 2), strides=(2,),
                                          padding=((-1, 2),), lhs_dilation=(2,), rhs_dilation=(2,)),
    "3d": Conv("bf012", "oi012", "bf012", (1, 2, 4, 5, 3), (2, 2, 2, 3, 2), strides=(1, 2, 1),
               padding=((0, 1), (1, 0), (1, 1))),
    "batch_groups": Conv("fb01", "io01", "fb01", (3, 4, 5, 5), (3, 4, 3, 3), batch_groups=2),
    "window_reversal": Conv("bf01", "oi01", "bf01", (2, 2, 5, 6), (3, 2, 2, 3),
                            reversal=(True, False), padding=((1, 0), (0, 1))),
    "output_layout_differs": Conv("bf01", "i01o", "0bf1", (2, 3, 5, 4), (3, 2, 2, 4),
                                  rhs_dilation=(1, 2), precision=("HIGH", "HIGHEST")),
}  # fmt: skip


LAYOUT_CASES = [(name, False) for name in sorted(CASES)] + [
    (name, True) for name in ("lux_reversed_spatial_grouped", "batch_groups", "window_reversal")
]


@pytest.mark.parametrize(("name", "generic"), LAYOUT_CASES)
def test_convolution_layouts_and_attributes(name: str, generic: bool) -> None:
    c = CASES[name]
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(c.lhs_shape), rng.standard_normal(c.rhs_shape)
    text, _ = conv_text(c, "f64", generic=generic)
    check_module(text, [x, w], rtol=1e-10, atol=1e-10,
                 expected=[conv_reference(c, x, w, np.float64)])  # fmt: skip


DTYPES = [
    # operand type, result type, tolerance, interpreter. A result type unlike the operands'
    # (XLA's preferred element type) is outside spec.md (C27): XLA accumulates in the result
    # type, the interpreter in the operand type, so XLA and numpy are the oracles there.
    ("f32", "f32", 1e-5, True),
    ("f16", "f16", 2e-2, True),
    ("bf16", "f32", 1e-5, False),
    ("f16", "f32", 1e-5, False),
    ("i8", "i32", 0, False),
    ("i32", "i32", 0, True),
    ("ui8", "ui32", 0, False),
    ("i1", "i1", 0, True),
    ("complex<f32>", "complex<f32>", 1e-5, False),  # the interpreter harness passes no complex
    ("complex<f64>", "complex<f64>", 1e-10, False),
]


@pytest.mark.parametrize(("t", "out_t", "tol", "interp"), DTYPES)
def test_convolution_element_types(t: str, out_t: str, tol: float, interp: bool) -> None:
    c = replace(CASES["nhwc_hwio"], groups=1)
    rng = np.random.default_rng(1)
    x, w = random_array(rng, c.lhs_shape, t), random_array(rng, c.rhs_shape, t)
    if t in ("f16", "bf16"):
        # Products of half-precision inputs are exact in f32; keep sums short and in range.
        x, w = (np.round(a.astype(np.float32) * 4) / 4 for a in (x, w))
        x, w = x.astype(ELEMENT_TYPES[t]), w.astype(ELEMENT_TYPES[t])
    text, _ = conv_text(c, t, out_t)
    want = conv_reference(c, x, w, ELEMENT_TYPES[out_t])
    check_module(text, [x, w], rtol=tol, atol=tol, expected=[want], interpreter=interp)


def test_nnlib_grouped_conv_fixture() -> None:
    text = reactant_fixture_text("nnlib_grouped_conv2d.mlir")
    missing = {"stablehlo.transpose", "stablehlo.reverse"} - set(RULES)
    if missing:
        pytest.skip(f"ops of other families not lifted yet: {', '.join(sorted(missing))}")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 4, 4, 4)).astype(np.float32)
    w = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    # NNlib.conv is a true convolution (kernel flipped) with groups=4; Julia dims reversed.
    kernel = np.flip(np.transpose(w, (3, 2, 1, 0)), (0, 1))
    c = CASES["lux_reversed_spatial_grouped"]
    check_module(text, [x, w], rtol=1e-5, atol=1e-5,
                 expected=[conv_reference(c, x, kernel, np.float32)])  # fmt: skip


GRAD_CASES = ["lenet_nchw", "lux_reversed_spatial_grouped", "1d_dilations_negative_padding",
              "batch_groups", "window_reversal", "nhwc_hwio"]  # fmt: skip


@pytest.mark.parametrize("name", GRAD_CASES)
def test_convolution_derivatives_match_finite_differences(name: str) -> None:
    c = CASES[name]
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(c.lhs_shape), rng.standard_normal(c.rhs_shape)
    fn = lax_fn(conv_text(c, "f64")[0])
    check_jvp(fn, [x, w], [0, 1])
    check_grad(fn, [x, w], [0, 1])
    check_hvp(fn, [x, w], 0)
    check_hvp(fn, [x, w], 1)


@pytest.mark.parametrize("name", ["lenet_nchw", "batch_groups", "lux_reversed_spatial_grouped"])
def test_convolution_vmap_is_batched(name: str) -> None:
    c = CASES[name]
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((3, *c.lhs_shape))
    ws = rng.standard_normal((3, *c.rhs_shape))
    fn = lax_fn(conv_text(c, "f64")[0])
    check_batched(fn, [xs, ws[0]], [0, None])
    check_batched(fn, [xs[0], ws], [None, 0])
    check_batched(fn, [xs, ws], [0, 0])


def test_convolution_in_the_lenet_bundle_lifts_to_conv_general_dilated() -> None:
    text, _ = conv_text(LENET, "f32")
    x = np.zeros(LENET.lhs_shape, np.float32)
    w = np.zeros(LENET.rhs_shape, np.float32)
    jaxpr = str(jax.make_jaxpr(lambda x, w: lax_fn(text)(x, w))(x, w))
    assert jaxpr.count("conv_general_dilated") == 1


# --- the shipped LeNet bundle: Conv, MaxPool and Dense as Lux lowers them ----------------------

LENET_BUNDLE = Path(juliabridge.__file__).resolve().parent / "examples" / "lenet.bundle"


def _lenet_lifts_or_skip() -> None:
    """Skip, naming them, while ops of families other than conv/reduce/dot are missing."""
    import re

    text = (LENET_BUNDLE / "model.mlir").read_text() + (LENET_BUNDLE / "vjp.mlir").read_text()
    missing = sorted(
        set(re.findall(r"stablehlo\.[a-z_]+", text)) - set(RULES) - {"stablehlo.return"}
    )
    if missing:
        pytest.skip(f"ops of other families not lifted yet: {', '.join(missing)}")


def test_lenet_bundle_lifts_and_matches_its_references() -> None:
    from tests.reference import lux_numpy

    _lenet_lifts_or_skip()
    report = juliabridge.verify(LENET_BUNDLE, backend="lax")
    assert report.ok and report.backend == "lax", report
    model = juliabridge.import_lux(LENET_BUNDLE, backend="lax")
    assert model.fn.backend_name == "lax"
    x = np.random.default_rng(5).standard_normal((4, 1, 28, 28)).astype(np.float32)
    params = jax.tree.map(np.asarray, model.params)
    want, _ = lux_numpy.lenet(x, params, {})
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(np.asarray(model(x)), want, rtol=1e-5, atol=1e-5 * scale)


def test_lenet_transformations_through_max_pooling() -> None:
    from juliabridge.examples import luxmodels

    _lenet_lifts_or_skip()
    model = juliabridge.import_lux(LENET_BUNDLE, backend="lax")
    spec = luxmodels.lenet(batch=4, seed=0)  # the generator of the shipped bundle, pure JAX
    params = [a.value for a in spec.arguments[1:]]
    x = np.random.default_rng(6).standard_normal((4, 1, 28, 28)).astype(np.float32)
    t = np.random.default_rng(7).standard_normal(x.shape).astype(np.float32)

    def lifted(x: jax.Array) -> jax.Array:
        return model.apply(model.params, model.state, x)[0]

    def native(x: jax.Array) -> jax.Array:
        return spec.main(x, *params)[0]

    def close(a: object, b: object) -> None:
        a, b = np.asarray(a), np.asarray(b)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))

    close(jax.jvp(lifted, (x,), (t,))[1], jax.jvp(native, (x,), (t,))[1])
    close(jax.jacfwd(lambda x: lifted(x)[0])(x[:1].repeat(4, 0)),
          jax.jacfwd(lambda x: native(x)[0])(x[:1].repeat(4, 0)))  # fmt: skip

    def loss(f: object) -> object:
        return lambda x: (f(x) ** 2).sum()  # type: ignore[operator]

    close(jax.grad(loss(lifted))(x), jax.grad(loss(native))(x))
    hvp = lambda f: jax.jvp(jax.grad(loss(f)), (x,), (t,))[1]  # noqa: E731
    close(hvp(lifted), hvp(native))


def test_lenet_vjp_module_select_and_scatter_matches_jax_vjp() -> None:
    from juliabridge.examples import luxmodels

    _lenet_lifts_or_skip()
    spec = luxmodels.lenet(batch=4, seed=0)
    params = [a.value for a in spec.arguments[1:]]
    x = np.random.default_rng(8).standard_normal((4, 1, 28, 28)).astype(np.float32)
    ct = np.random.default_rng(9).standard_normal((4, 10)).astype(np.float32)
    fn = lax_fn((LENET_BUNDLE / "vjp.mlir").read_text())
    jaxpr = str(jax.make_jaxpr(lambda *a: fn(*a))(x, *params, ct))
    assert jaxpr.count("select_and_scatter_add") == 2
    got = fn(x, *params, ct)
    _, vjp = jax.vjp(lambda *a: spec.main(*a)[0], x, *params)
    for g, w in zip(got, vjp(ct)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4,
                                   atol=1e-5 * float(np.abs(w).max()))  # fmt: skip


#: docs/lax-backend.md row `conv-reverse-whole-window-xla`: XLA on the CPU computes a reversed
#: convolution with one output position and one feature each way without its `reverse` on jax
#: 0.10.2 and 0.12.0.1; jax 0.12.1's XLA reverses it as the spec says.
XLA_DROPS_WHOLE_WINDOW_REVERSE = jax.__version_info__ < (0, 12, 1)


def test_a_reversed_window_spanning_the_input_is_reversed() -> None:
    """spec.md#convolution reverses the window; XLA on the CPU of jax 0.10.2 and 0.12.0.1 skips
    `reverse` when the output has one position and the kernel one feature each way
    (docs/lax-backend.md row `conv-reverse-whole-window-xla`), 0.12.1's does not: lax keeps the
    spec's result on every version."""
    text = """module {
  func.func @main(%l: tensor<1x1x2xf32>, %r: tensor<1x1x2xf32>) -> tensor<1x1x1xf32> {
    %0 = stablehlo.convolution(%l, %r) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {stride = [1], pad = [[0, 0]], lhs_dilate = [1], rhs_dilate = [1], reverse = [true]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x1x2xf32>, tensor<1x1x2xf32>) -> tensor<1x1x1xf32>
    return %0 : tensor<1x1x1xf32>
  }
}"""
    lhs = np.array([[[1.0, 2.0]]], np.float32)
    rhs = np.array([[[10.0, 1.0]]], np.float32)
    (got,) = run_lax(text, [lhs, rhs])
    assert float(np.asarray(got).ravel()[0]) == 1 * 1 + 2 * 10  # the reversed kernel [1, 10]
    (interp,) = interpret(text, [lhs, rhs])
    assert float(np.asarray(interp).ravel()[0]) == 21
    (xla,) = run_xla(text, [lhs, rhs])
    # XLA's on each version, as the row says (XLA_DROPS_WHOLE_WINDOW_REVERSE); a jax where this
    # fails changed XLA here: update the row and the constant.
    want = 1 * 10 + 2 * 1 if XLA_DROPS_WHOLE_WINDOW_REVERSE else 21
    assert float(np.asarray(xla).ravel()[0]) == want, f"jax {jax.__version__}: update the row"


def test_xla_masks_batch_groups_of_several_samples_with_zeros() -> None:
    """Why the differential harness does not compare vmap with per-sample calls for a
    batch-group convolution of non-finite data: with one sample per group XLA computes each
    group alone; with more (what vmap makes of it) it multiplies the other groups by a zero
    mask, so an infinity in one group's kernel makes NaN in the other group. JAX's own
    conv_general_dilated does it, not the lift."""
    lhs = np.full((2, 1, 4, 5), -3.0, np.float32)
    rhs = np.array([[[[-3.0, -3.0]]], [[[-3.0, np.inf]]]], np.float32)

    def conv(a: Any, b: Any) -> Any:
        dn = ("NCHW", "OIHW", "NCHW")
        return jax.lax.conv_general_dilated(
            a, b, (1, 1), [(0, 0), (0, 0)], batch_group_count=2, dimension_numbers=dn
        )

    single = np.asarray(conv(lhs, rhs))
    assert (single[0, 0] == 18).all() and (single[0, 1] == -np.inf).all()
    batched = np.asarray(jax.vmap(conv, in_axes=(0, None))(np.stack([lhs, lhs]), rhs))
    # if a jaxlib stops masking, the harness's vmap exception for this form should go
    assert np.isnan(batched[:, 0, 0]).all(), "XLA no longer masks: drop the vmap exception"
    assert (batched[:, 0, 1] == -np.inf).all()
