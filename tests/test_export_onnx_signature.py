"""The exported ONNX graph's signature is the model's (issue 38): each graph input and output
has the element type and shape the module declares for its argument and result, across
element types and with jax_enable_x64 on or off around the call (and the global flag as it
was after); f64 values that need double precision (1 + 1e-12) come back exactly; a max-pool
inside a called function is still folded and runs.

References: the types declared in the module text (parsed here, not read from the exporter);
numpy's arithmetic and blockwise max. Skipped where the onnx extra is not installed.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.support import jaxinternals

pytest.importorskip("jax2onnx", reason="the onnx extra (jax2onnx) is not installed")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime) is not installed")
from onnx import TensorProto  # noqa: E402  (after the skip)

SPACE = settings(
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    max_examples=25,
    deadline=None,
    derandomize=True,
)

#: MLIR element type -> (numpy dtype, ONNX element type).
TYPES = {
    "f32": (np.float32, TensorProto.FLOAT),
    "f64": (np.float64, TensorProto.DOUBLE),
    "i32": (np.int32, TensorProto.INT32),
    "i64": (np.int64, TensorProto.INT64),
    "i1": (np.bool_, TensorProto.BOOL),
    "f16": (np.float16, TensorProto.FLOAT16),
}


def _declared(text: str) -> tuple[list[tuple[str, list[int]]], list[tuple[str, list[int]]]]:
    """(element type, shape) of @main's arguments and results, read from the module text."""
    m = re.search(r"func\.func @main\((.*?)\) -> \((.*?)\) \{", text)
    assert m is not None, text

    def parse(part: str) -> list[tuple[str, list[int]]]:
        out = []
        for dims, elem in re.findall(r"tensor<((?:\d+x)*)(\w+)>", part):
            out.append((elem, [int(d) for d in dims.split("x") if d]))
        return out

    return parse(m.group(1)), parse(m.group(2))


def _body(k: int, elem: str, shape: str) -> tuple[str, Any]:
    """Ops giving result k from argument k, and numpy's value of it."""
    t = f"tensor<{shape}{elem}>"
    if elem == "i1":
        return f"    %r{k} = stablehlo.not %a{k} : {t}\n", np.logical_not
    if elem == "f64":
        # needs double precision: (a + 1e-12) - a is 1e-12 only in f64
        return (
            f"    %c{k} = stablehlo.constant dense<1.000000e-12> : {t}\n"
            f"    %s{k} = stablehlo.add %a{k}, %c{k} : {t}\n"
            f"    %r{k} = stablehlo.subtract %s{k}, %a{k} : {t}\n",
            lambda a: (a + 1e-12) - a,
        )
    if elem == "i64":
        # needs 64 bits: 2^33 does not fit in 32
        return (
            f"    %c{k} = stablehlo.constant dense<8589934592> : {t}\n"
            f"    %r{k} = stablehlo.add %a{k}, %c{k} : {t}\n",
            lambda a: a + 2**33,
        )
    return f"    %r{k} = stablehlo.add %a{k}, %a{k} : {t}\n", lambda a: a + a


def _module(elems: list[str], dims: list[int]) -> tuple[str, list[Any]]:
    shape = "".join(f"{d}x" for d in dims)
    ts = [f"tensor<{shape}{e}>" for e in elems]
    bodies = [_body(k, e, shape) for k, e in enumerate(elems)]
    args = ", ".join(f"%a{k}: {t}" for k, t in enumerate(ts))
    rets = ", ".join(f"%r{k}" for k in range(len(elems)))
    text = (
        f"module {{\n  func.func @main({args}) -> ({', '.join(ts)}) {{\n"
        + "".join(b for b, _ in bodies)
        + f"    return {rets} : {', '.join(ts)}\n  }}\n}}"
    )
    return text, [f for _, f in bodies]


def _sample(elem: str, dims: list[int], rng: np.random.Generator) -> np.ndarray:
    dtype = TYPES[elem][0]
    if elem == "i1":
        return np.asarray(rng.integers(0, 2, dims), np.bool_)
    if elem.startswith("i"):
        return np.asarray(rng.integers(-(2**20), 2**20, dims), dtype)
    return np.asarray(1.0 + rng.integers(0, 4, dims) * 1e-12, dtype)  # 1 + k*1e-12


def _graph_types(values: Any) -> list[tuple[int, list[int]]]:
    return [
        (v.type.tensor_type.elem_type, [d.dim_value for d in v.type.tensor_type.shape.dim])
        for v in values
    ]


@SPACE
@given(
    elems=st.lists(st.sampled_from(sorted(TYPES)), min_size=1, max_size=3),
    dims=st.lists(st.integers(1, 3), max_size=2),
    global_x64=st.booleans(),
    scoped=st.booleans(),
)
# 64-bit integers and no float64 with the global flag on: jax2onnx traces in single precision
@example(elems=["i64"], dims=[2], global_x64=True, scoped=False)
@example(elems=["f32", "i64", "f16"], dims=[], global_x64=True, scoped=False)
@example(elems=["f64", "f16", "i1"], dims=[3, 1], global_x64=False, scoped=True)
def test_the_graph_signature_is_the_modules(
    elems: list[str], dims: list[int], global_x64: bool, scoped: bool
) -> None:
    text, refs = _module(elems, dims)
    ins, outs = _declared(text)
    wide = any(e in ("f64", "i64") for e in elems)
    # juliabridge needs x64 on for a 64-bit module: with the global flag off, a scope does it
    scoped = scoped or (wide and not global_x64)
    before = jaxinternals.global_x64()
    jax.config.update("jax_enable_x64", global_x64)
    try:
        if scoped:
            with jax.enable_x64(True):
                proto = juliabridge.export_onnx(juliabridge.load_mlir(text, backend="lax"))
        else:
            proto = juliabridge.export_onnx(juliabridge.load_mlir(text, backend="lax"))
        assert jaxinternals.global_x64() is global_x64
    finally:
        jax.config.update("jax_enable_x64", before)
    has_f64 = "f64" in elems

    def onnx_type(elem: str) -> int:
        # a program holding a float64 converts in jax2onnx's double precision, which makes
        # every float of the graph 64-bit, its f32 inputs and the f32 results computed from
        # them included (docs/exporting.md)
        return TensorProto.DOUBLE if has_f64 and elem == "f32" else TYPES[elem][1]

    assert _graph_types(proto.graph.input) == [(onnx_type(e), s) for e, s in ins]
    assert _graph_types(proto.graph.output) == [(onnx_type(e), s) for e, s in outs]
    rng = np.random.default_rng(len(elems))
    xs = [_sample(e, dims, rng) for e in elems]
    feeds = {
        i.name: x.astype(np.float64) if t == TensorProto.DOUBLE else x
        for i, x, (t, _) in zip(proto.graph.input, xs, _graph_types(proto.graph.input))
    }
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, feeds)
    for g, x, ref in zip(got, xs, refs):
        want = np.asarray(ref(x))
        np.testing.assert_array_equal(np.asarray(g), want, err_msg=str(elems))


def test_float64_only_inside_converts_in_double_precision() -> None:
    # f32 in and out, f64 only inside: the program converts in double precision as one with
    # a float64 argument does (its f32 inputs widened), and its result is the module's
    # explicit convert to f32
    text = """module {
  func.func @main(%a: tensor<3xf32>, %b: tensor<3xf32>) -> (tensor<3xf32>) {
    %wa = stablehlo.convert %a : (tensor<3xf32>) -> tensor<3xf64>
    %wb = stablehlo.convert %b : (tensor<3xf32>) -> tensor<3xf64>
    %s = stablehlo.add %wa, %wb : tensor<3xf64>
    %d = stablehlo.subtract %s, %wa : tensor<3xf64>
    %r = stablehlo.convert %d : (tensor<3xf64>) -> tensor<3xf32>
    return %r : tensor<3xf32>
  }
}"""
    ins, outs = _declared(text)
    for global_x64 in (False, True):
        before = jaxinternals.global_x64()
        jax.config.update("jax_enable_x64", global_x64)
        try:
            proto = juliabridge.export_onnx(juliabridge.load_mlir(text, backend="lax"))
        finally:
            jax.config.update("jax_enable_x64", before)
        assert _graph_types(proto.graph.input) == [(TensorProto.DOUBLE, s) for _, s in ins]
        assert _graph_types(proto.graph.output) == [(TYPES[e][1], s) for e, s in outs]


def test_64_bit_integers_inside_keep_their_range_with_the_global_flag_on() -> None:
    # x * 2^33 / 2^33 in i64 is trunc(x); in 32 bits the constant does not fit. With the
    # global flag on and no scope, jax2onnx turns x64 off while it traces an f32 program.
    text = """module {
  func.func @main(%x: tensor<3xf32>) -> (tensor<3xf32>) {
    %c = stablehlo.constant dense<8589934592> : tensor<3xi64>
    %w = stablehlo.convert %x : (tensor<3xf32>) -> tensor<3xi64>
    %m = stablehlo.multiply %w, %c : tensor<3xi64>
    %d = stablehlo.divide %m, %c : tensor<3xi64>
    %o = stablehlo.convert %d : (tensor<3xi64>) -> tensor<3xf32>
    return %o : tensor<3xf32>
  }
}"""
    x = np.array([1.5, -2.0, 3.75], np.float32)
    for global_x64 in (False, True):
        before = jaxinternals.global_x64()
        jax.config.update("jax_enable_x64", global_x64)
        try:
            proto = juliabridge.export_onnx(juliabridge.load_mlir(text, backend="lax"))
            assert jaxinternals.global_x64() is global_x64
        finally:
            jax.config.update("jax_enable_x64", before)
        session = ort.InferenceSession(
            proto.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        (got,) = session.run(None, {proto.graph.input[0].name: x})
        np.testing.assert_array_equal(got, np.trunc(x))


POOL_IN_CALL = """module {
  func.func private @pool(%x: tensor<2x3x4x6xf32>) -> tensor<2x3x2x2xf32> {
    %init = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %r = "stablehlo.reduce_window"(%x, %init) <{window_dimensions = array<i64: 1, 1, 2, 3>,
        window_strides = array<i64: 1, 1, 2, 3>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %m = stablehlo.maximum %a, %b : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }) : (tensor<2x3x4x6xf32>, tensor<f32>) -> tensor<2x3x2x2xf32>
    return %r : tensor<2x3x2x2xf32>
  }
  func.func @main(%x: tensor<2x3x4x6xf32>) -> tensor<2x3x2x2xf32> {
    %r = func.call @pool(%x) : (tensor<2x3x4x6xf32>) -> tensor<2x3x2x2xf32>
    return %r : tensor<2x3x2x2xf32>
  }
}"""


def test_a_max_pool_inside_a_called_function_runs_in_onnxruntime() -> None:
    proto = juliabridge.export_onnx(juliabridge.load_mlir(POOL_IN_CALL, backend="lax"))
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 6)).astype(np.float32)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {proto.graph.input[0].name: x})
    np.testing.assert_array_equal(got, x.reshape(2, 3, 2, 2, 2, 3).max(axis=(3, 5)))
