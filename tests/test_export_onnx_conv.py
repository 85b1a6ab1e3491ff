"""Convolutions in Reactant's layout convert to ONNX (issue 49).

Reactant writes a Lux convolution on Julia's WHCN arrays with the dimension numbers
``[b, f, 1, 0]x[0, 1, i, o]->[b, f, 1, 0]`` (../shared/fixtures/reactant/nnlib_grouped_conv2d.mlir:
spatial axes reversed, the kernel's spatial axes first); jax2onnx converts NCHW/OIHW only.
These modules are written here in that layout for 1, 2 and 3 spatial axes (a clean clone has
no ../shared): plain, grouped, depthwise, strided, dilated, padded, and transposed (input
dilation, as Lux's ConvTranspose lowers). onnxruntime's outputs are compared with XLA's
convolution of the same dimension numbers and with juliabridge's own call. Skipped where the
onnx extra is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jax import lax

import juliabridge
from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle
from tests.outside import reactant_fixture

pytest.importorskip("jax2onnx", reason="the onnx extra (jax2onnx) is not installed")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime) is not installed")

#: name -> (batch, channels, out channels, groups, spatial sizes (axis 0 first), kernel,
#: stride, padding, input dilation, kernel dilation)
CASES: dict[str, tuple[Any, ...]] = {
    "2d_grouped_as_the_fixture": (1, 4, 8, 4, (4, 4), (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1)),
    "2d_strided_dilated_padded": (2, 3, 5, 1, (7, 6), (3, 2), (2, 1), ((1, 0), (2, 1)), (1, 1), (1, 2)),
    "2d_depthwise": (2, 3, 3, 3, (5, 5), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1)),
    "2d_transposed": (2, 2, 3, 1, (3, 4), (3, 3), (1, 1), ((2, 2), (1, 2)), (2, 2), (1, 1)),
    "1d_strided_dilated": (2, 2, 3, 1, (9,), (3,), (2,), ((1, 1),), (1,), (2,)),
    "1d_transposed_grouped": (1, 4, 2, 2, (5,), (2,), (1,), ((1, 1),), (3,), (1,)),
    "3d_padded": (1, 2, 2, 1, (3, 4, 3), (2, 2, 2), (1, 1, 1), ((1, 0), (0, 1), (1, 1)), (1, 1, 1), (1, 1, 1)),
    "3d_grouped_strided": (2, 4, 4, 2, (5, 4, 4), (3, 2, 2), (2, 1, 2), ((0, 0), (1, 1), (0, 1)), (1, 1, 1), (1, 1, 1)),
}  # fmt: skip


def _t(shape: tuple[int, ...]) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


def _shapes(case: tuple[Any, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Input, kernel and output shapes in Reactant's layout (spatial axes reversed)."""
    n, c, o, g, sizes, kernel, stride, pad, lhs, rhs = case
    d = len(sizes)
    out = [
        ((s - 1) * ld + 1 + lo + hi - ((k - 1) * rd + 1)) // st + 1
        for s, k, st, (lo, hi), ld, rd in zip(sizes, kernel, stride, pad, lhs, rhs)
    ]
    return (
        (
            (n, c, *sizes[::-1]),
            (*kernel, c // g, o),
            (n, o, *out[::-1]),
        )
        if d
        else ((), (), ())
    )


def _numbers(d: int) -> str:
    spatial = ", ".join(str(j) for j in reversed(range(d)))
    kernel = ", ".join(str(j) for j in range(d))
    return f"[b, f, {spatial}]x[{kernel}, i, o]->[b, f, {spatial}]"


def _module(case: tuple[Any, ...]) -> str:
    _n, _c, _o, g, sizes, _kernel, stride, pad, lhs, rhs = case
    x, w, y = _shapes(case)

    def ints(v: tuple[int, ...]) -> str:
        return ", ".join(map(str, v))

    pads = ", ".join(f"[{lo}, {hi}]" for lo, hi in pad)
    return f"""module {{
  func.func @main(%x: {_t(x)}, %w: {_t(w)}) -> {_t(y)} {{
    %0 = stablehlo.convolution(%x, %w) dim_numbers = {_numbers(len(sizes))}, window = {{stride = [{ints(stride)}], pad = [{pads}], lhs_dilate = [{ints(lhs)}], rhs_dilate = [{ints(rhs)}]}} {{batch_group_count = 1 : i64, feature_group_count = {g} : i64}} : ({_t(x)}, {_t(w)}) -> {_t(y)}
    return %0 : {_t(y)}
  }}
}}"""


def _reference(case: tuple[Any, ...], x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """XLA's convolution with Reactant's dimension numbers, spelled out as lax takes them."""
    _n, _c, _o, g, sizes, _kernel, stride, pad, lhs, rhs = case
    d = len(sizes)
    spatial = tuple(2 + d - 1 - j for j in range(d))  # axis holding spatial dim j
    numbers = lax.ConvDimensionNumbers((0, 1, *spatial), (d + 1, d, *range(d)), (0, 1, *spatial))
    return np.asarray(
        lax.conv_general_dilated(
            x, w, stride, pad, lhs, rhs, numbers, feature_group_count=g,
            precision=lax.Precision.HIGHEST,
        )
    )  # fmt: skip


def _run(proto: Any, *xs: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in proto.graph.input]
    return np.asarray(session.run(None, dict(zip(names, xs)))[0])


@pytest.mark.parametrize("name", sorted(CASES))
def test_reactant_layout_convolutions_run_in_onnxruntime(name: str) -> None:
    case = CASES[name]
    xs, ws, ys = _shapes(case)
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    fn = juliabridge.load_mlir(_module(case), backend="lax")
    proto = juliabridge.export_onnx(fn)
    got = _run(proto, x, w)
    assert got.shape == ys
    np.testing.assert_allclose(got, _reference(case, x, w), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, np.asarray(fn(x, w)[0]), rtol=1e-4, atol=1e-4)


def test_the_fixtures_dimension_numbers_are_the_ones_tested() -> None:
    fixture = reactant_fixture("nnlib_grouped_conv2d.mlir")  # skips where ../shared is absent
    assert _numbers(2) in fixture.read_text()


def test_a_reactant_layout_cnn_bundle_takes_any_batch_size(tmp_path: Path) -> None:
    """A bundle of the grouped convolution with its batch axis declared: the graph's batch
    is symbolic, and every batch size gives XLA's values."""
    case = CASES["2d_strided_dilated_padded"]
    xs, ws, _ = _shapes(case)
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    bundle = write_bundle(
        tmp_path / "conv.bundle",
        BundleDescription(
            name="conv",
            mlir_text=_module(case),
            arguments=[ArgumentSpec("input", [], x0, 0), ArgumentSpec("parameter", ["weight"], w, None)],
            result_paths=[[["output"]]],
            result_batch_axes=[0],
            batch={"size": xs[0], "samples_independent": True},
        ),
    )  # fmt: skip
    model = juliabridge.import_lux(bundle, backend="lax")
    proto = juliabridge.export_onnx(model)
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "b"
    for n in (1, 2, 5):
        x = rng.standard_normal((n, *xs[1:])).astype(np.float32)
        np.testing.assert_allclose(
            _run(proto, x), _reference(case, x, w), rtol=1e-4, atol=1e-4, err_msg=str(n)
        )
