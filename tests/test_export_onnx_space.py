"""ONNX export over the space of its rewrites (issue 38): max and sum windows of rank 4 and 5
whose windowed axes are anywhere (not only NCHW's last two), each with its own window, stride
and padding, next to axes a window leaves alone (or touches only by a stride or a pad, which
are not left alone: a pad there onnxruntime refuses, but never computes a wrong value); 64-bit floats only inside an f32 program; a missing rule emitted by
several ops.

References: numpy's reduce_window from the spec (spec.md#reduce_window: pad with the init
value, then reduce each window at every stride); the f64 arithmetic of numpy; the module's
own line numbers. Skipped where the onnx extra (jax2onnx, onnxruntime) is not installed.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.errors import OnnxConversionError

pytest.importorskip("jax2onnx", reason="the onnx extra (jax2onnx) is not installed")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime) is not installed")

#: No shrinking: a failing case is reported as drawn (each case loads a module, so
#: shrinking one costs minutes, and a mutation run stops at the first failure).
SPACE = settings(
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    max_examples=20,
    deadline=None,
    derandomize=True,
)


def _run(proto: Any, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {proto.graph.input[0].name: x})[0])


def _t(shape: tuple[int, ...]) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


@st.composite
def windows(draw: st.DrawFn) -> dict[str, Any]:
    rank = draw(st.sampled_from([4, 5]))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    touched = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=2, unique=True))
    window, strides, padding = [1] * rank, [1] * rank, [[0, 0] for _ in range(rank)]
    for axis in touched:
        form = draw(st.sampled_from(["window", "window", "stride only", "pad only"]))
        if form == "stride only":
            strides[axis] = 2
        elif form == "pad only":
            padding[axis] = [draw(st.integers(0, 1)), 1]
        else:
            # onnxruntime pools only with pads smaller than the window
            window[axis] = draw(st.integers(2, shape[axis] + 1))
            strides[axis] = draw(st.integers(1, 3))
            lo = draw(st.integers(0, 1))
            padding[axis] = [lo, max(draw(st.integers(0, 1)), window[axis] - shape[axis] - lo)]
    return {"shape": shape, "window": window, "strides": strides, "padding": padding,
            "kind": draw(st.sampled_from(["max", "sum"]))}  # fmt: skip


def _reference(x: np.ndarray, c: dict[str, Any]) -> np.ndarray:
    init = -np.inf if c["kind"] == "max" else 0.0
    padded = np.pad(x.astype(np.float64), c["padding"], constant_values=init)
    out_shape = [(n - w) // s + 1 for n, w, s in zip(padded.shape, c["window"], c["strides"])]
    out = np.empty(out_shape)
    reduce = np.max if c["kind"] == "max" else np.sum
    for idx in itertools.product(*(range(n) for n in out_shape)):
        sl = tuple(slice(i * s, i * s + w) for i, s, w in zip(idx, c["strides"], c["window"]))
        out[idx] = reduce(padded[sl])
    return out


def _module(c: dict[str, Any], out_shape: tuple[int, ...]) -> str:
    rank = len(c["shape"])
    t, r, s = _t(c["shape"]), _t(out_shape), "tensor<f32>"
    init, body = ("0xFF800000", "maximum") if c["kind"] == "max" else ("0.000000e+00", "add")
    return f"""module {{
  func.func @main(%x: {t}) -> {r} {{
    %init = stablehlo.constant dense<{init}> : {s}
    %r = "stablehlo.reduce_window"(%x, %init) <{{window_dimensions = array<i64: {", ".join(map(str, c["window"]))}>,
        window_strides = array<i64: {", ".join(map(str, c["strides"]))}>,
        padding = dense<{c["padding"]}> : tensor<{rank}x2xi64>}}> ({{
    ^bb0(%a: {s}, %b: {s}):
      %m = stablehlo.{body} %a, %b : {s}
      stablehlo.return %m : {s}
    }}) : ({t}, {s}) -> {r}
    return %r : {r}
  }}
}}"""


@SPACE
@given(c=windows())
def test_windows_on_any_axes_run_in_onnxruntime_as_the_spec_computes(c: dict[str, Any]) -> None:
    x = np.random.default_rng(7).standard_normal(c["shape"]).astype(np.float32)
    want = _reference(x, c)
    fn = juliabridge.load_mlir(_module(c, want.shape), backend="lax")
    pad_only = any(w == 1 and p != [0, 0] for w, p in zip(c["window"], c["padding"]))
    try:
        proto = juliabridge.export_onnx(fn)
    except OnnxConversionError as e:
        # onnxruntime pools only with pads smaller than the window: a pad on an axis of
        # window 1 is refused when the graph is checked, never a wrong value returned
        if pad_only and "onnxruntime refuses" in str(e):
            return
        raise
    got = _run(proto, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(c))


def _export64(text: str) -> Any:
    import jax

    with jax.enable_x64(True):
        return juliabridge.export_onnx(juliabridge.load_mlir(text, backend="lax"))


def _feed(proto: Any, k: int, x: np.ndarray) -> np.ndarray:
    """`x` as the graph's input `k` takes it: jax2onnx's double precision makes every float of
    the graph 64-bit, its inputs included."""
    wide = proto.graph.input[k].type.tensor_type.elem_type == 11  # TensorProto.DOUBLE
    return x.astype(np.float64) if wide else x


def test_float64_only_inside_an_f32_program_converts_in_double_precision() -> None:
    # f32 in and out, no 64-bit constant: (a + b) - a of the f64 values inside is b exactly,
    # in f32 it loses b's bits under a = 2^25.
    text = """module {
  func.func @main(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
    %wa = stablehlo.convert %a : (tensor<3xf32>) -> tensor<3xf64>
    %wb = stablehlo.convert %b : (tensor<3xf32>) -> tensor<3xf64>
    %s = stablehlo.add %wa, %wb : tensor<3xf64>
    %d = stablehlo.subtract %s, %wa : tensor<3xf64>
    %r = stablehlo.convert %d : (tensor<3xf64>) -> tensor<3xf32>
    return %r : tensor<3xf32>
  }
}"""
    a = np.full(3, 2.0**25, np.float32)
    b = np.array([0.25, -1.5, 3.0], np.float32)
    proto = _export64(text)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {
        proto.graph.input[0].name: _feed(proto, 0, a),
        proto.graph.input[1].name: _feed(proto, 1, b),
    }
    (got,) = session.run(None, feeds)
    np.testing.assert_array_equal(np.asarray(got).astype(np.float32), b)
    assert not np.array_equal((a + b) - a, b)  # f32 arithmetic would not give it


def test_64_bit_integers_inside_an_f32_program_keep_their_range() -> None:
    # x * 2^33 / 2^33 in i64 is trunc(x); in 32 bits the constant alone does not fit.
    text = """module {
  func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
    %c = stablehlo.constant dense<8589934592> : tensor<3xi64>
    %w = stablehlo.convert %x : (tensor<3xf32>) -> tensor<3xi64>
    %m = stablehlo.multiply %w, %c : tensor<3xi64>
    %d = stablehlo.divide %m, %c : tensor<3xi64>
    %o = stablehlo.convert %d : (tensor<3xi64>) -> tensor<3xf32>
    return %o : tensor<3xf32>
  }
}"""
    x = np.array([1.5, -2.0, 3.75], np.float32)
    # jax_enable_x64 left off, as for any f32 model: the lax backend keeps i64 inside
    proto = juliabridge.export_onnx(juliabridge.load_mlir(text, backend="lax"))
    np.testing.assert_array_equal(_run(proto, x), np.trunc(x))


def test_a_complex128_program_builds_no_graph_onnxruntime_runs() -> None:
    # Where the ONNX export stops (docs/exporting.md): jax2onnx's graph of a complex value is
    # refused by onnxruntime, with double precision or without. The day it runs, complex128
    # must ask for double precision as float64 does (exporting_onnx._has_float64).
    text = """module {
  func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
    %w = stablehlo.convert %x : (tensor<3xf32>) -> tensor<3xcomplex<f64>>
    %m = stablehlo.multiply %w, %w : tensor<3xcomplex<f64>>
    %r = stablehlo.real %m : (tensor<3xcomplex<f64>>) -> tensor<3xf64>
    %o = stablehlo.convert %r : (tensor<3xf64>) -> tensor<3xf32>
    return %o : tensor<3xf32>
  }
}"""
    with pytest.raises(OnnxConversionError, match=r"onnxruntime refuses the graph.*complex"):
        _export64(text)  # the check runs it: no graph is returned


def test_a_missing_rule_names_the_first_op_that_emitted_it() -> None:
    pool = """    %r{k} = "stablehlo.reduce_window"(%x, %init) <{{window_dimensions = array<i64: 2>}}> ({{
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %m = stablehlo.minimum %a, %b : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }}) : (tensor<4xf32>, tensor<f32>) -> tensor<3xf32>"""
    text = (
        "module {\n  func.func @main(%x: tensor<4xf32>) -> tensor<3xf32> {\n"
        "    %init = stablehlo.constant dense<0x7F800000> : tensor<f32>\n"
        f"{pool.format(k=0)}\n{pool.format(k=1)}\n"
        "    %s = stablehlo.add %r0, %r1 : tensor<3xf32>\n    return %s : tensor<3xf32>\n  }\n}"
    )
    with pytest.raises(OnnxConversionError) as info:
        juliabridge.export_onnx(juliabridge.load_mlir(text, backend="lax"))
    e = info.value
    assert (e.primitive, e.op, e.where) == (
        "reduce_window_min",
        "stablehlo.reduce_window",
        "line 4 of <mlir text>",
    )
    assert "at line 4 of <mlir text>; stablehlo.reduce_window at line 9" in str(e)
