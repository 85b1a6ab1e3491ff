"""A model out of juliabridge as ONNX (issue 41): jax2onnx converts, onnxruntime runs.

The shipped LeNet and the benchmarks' 1,018-op conv+BatchNorm network (benchmarks/bench_lax.py,
42 blocks) are exported and run in onnxruntime; the outputs are checked against references
independent of the lifted module (LeNet's forward from luxmodels' layer formulas, the
network's forward written in JAX) and against juliabridge's own call. A module whose lift
emits a primitive jax2onnx has no rule for gets an OnnxConversionError naming the primitive
and the op. Skipped where the onnx extra (jax2onnx, onnxruntime) is not installed.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle
from juliabridge.errors import CallArgumentError, OnnxConversionError, SaveError
from juliabridge.examples import lenet_bundle
from juliabridge.support.jaxinternals import global_x64
from tests.test_export_jax import lenet_reference
from tests.test_exporting_doc import run_examples

pytest.importorskip("jax2onnx", reason="the onnx extra (jax2onnx) is not installed")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime) is not installed")

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "exporting.md"
CONVBN_BLOCKS = 42  # the benchmark's size: 1,018 StableHLO ops


def _run(proto: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def _ops_of(text: str) -> set[str]:
    return set(re.findall(r"\b(stablehlo\.[a-z_]+)", text))


def _ops(bundle: Path) -> set[str]:
    return _ops_of((bundle / "model.mlir").read_text())


@pytest.fixture(scope="module")
def lenet() -> juliabridge.LuxModel:
    return juliabridge.import_lux(lenet_bundle(), backend="lax")


@pytest.fixture(scope="module")
def bench_lax() -> Iterator[ModuleType]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("bench_lax")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_lenet_runs_in_onnxruntime(lenet: juliabridge.LuxModel) -> None:
    proto = juliabridge.export_onnx(lenet)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    # the bundle's batch axis is symbolic: any batch size runs
    assert [(i.name, i.shape) for i in session.get_inputs()] == [("x", ["b", 1, 28, 28])]
    assert [(o.name, o.shape) for o in session.get_outputs()] == [("output", ["b", 10])]
    # LeNet's max-pools arrive as 3-D pools over (N*C, H, W): onnxruntime runs those.
    assert {"Conv", "MaxPool"} <= {n.op_type for n in proto.graph.node}
    for seed, n in ((0, 4), (1, 7), (2, 1)):
        x = np.random.default_rng(seed).standard_normal((n, 1, 28, 28)).astype(np.float32)
        (got,) = session.run(None, {"x": x})
        want = np.asarray(lenet_reference(lenet.params, x))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got, np.asarray(lenet(x)), rtol=1e-4, atol=1e-5)


def test_max_pool_ties_and_infinities_match(lenet: juliabridge.LuxModel) -> None:
    """The folded pool picks the same maxima: ties, -inf and large values."""
    x = np.zeros((4, 1, 28, 28), np.float32)
    x[:, :, ::3, ::2] = -np.inf
    x[1] = 1e30
    x[2, 0, :14] = np.float32(3.0)
    (got,) = _run(juliabridge.export_onnx(lenet), {"x": x})
    want = np.asarray(lenet_reference(lenet.params, x))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_convbn_network_runs_in_onnxruntime(tmp_path: Path, bench_lax: ModuleType) -> None:
    path, ps, st, x = bench_lax.convbn_bundle(tmp_path, blocks=CONVBN_BLOCKS, channels=16, batch=8)
    text = (path / "model.mlir").read_text()
    assert sum(1 for line in text.splitlines() if " = " in line) == 1018
    model = juliabridge.import_lux(path, backend="lax")
    (got,) = _run(juliabridge.export_onnx(model), {"x": x})
    want = np.asarray(bench_lax.convbn_forward(ps, st, x, CONVBN_BLOCKS)[0])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got, np.asarray(model(x)), rtol=1e-4, atol=1e-6)


def _pool_module(body: str, init: str) -> str:
    return f"""module {{
  func.func @main(%x: tensor<2x3x4x6xf32>) -> tensor<2x3x2x2xf32> {{
    %init = stablehlo.constant dense<{init}> : tensor<f32>
    %r = "stablehlo.reduce_window"(%x, %init) <{{window_dimensions = array<i64: 1, 1, 2, 3>,
        window_strides = array<i64: 1, 1, 2, 3>}}> ({{
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %m = stablehlo.{body} %a, %b : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }}) : (tensor<2x3x4x6xf32>, tensor<f32>) -> tensor<2x3x2x2xf32>
    return %r : tensor<2x3x2x2xf32>
  }}
}}"""


#: Small modules lowered by jax from these functions, with numpy references from the semantics.
SMALL: dict[str, tuple[Any, Any]] = {
    "fori_loop": (
        lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c * 2 + 1, x),
        lambda x: 8 * x + 7,
    ),
    "cond": (
        lambda x: jax.lax.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, x),
        lambda x: 2 * x if x.sum() > 0 else x - 1,
    ),
    "logsumexp_tanh": (
        lambda x: jax.nn.logsumexp(jnp.tanh(x), axis=1),
        lambda x: np.log(np.exp(np.tanh(x.astype(np.float64))).sum(axis=1)),
    ),
}


def _small_module(name: str) -> str:
    return str(jax.jit(SMALL[name][0]).lower(np.zeros((2, 3), np.float32)).as_text())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_modules_with_control_flow_and_transcendentals(name: str) -> None:
    fn = juliabridge.load_mlir(_small_module(name), backend="lax")
    proto = juliabridge.export_onnx(fn)
    for x in (np.arange(6, dtype=np.float32).reshape(2, 3) - 1, -np.ones((2, 3), np.float32)):
        (got,) = _run(proto, {proto.graph.input[0].name: x})
        np.testing.assert_allclose(got, SMALL[name][1](x), rtol=1e-5, atol=1e-6)


def test_64_bit_values_keep_their_types() -> None:
    """A float64 module (jax_enable_x64 on) converts in double precision; an f32 module with
    i64 loop counters (as Reactant writes them) converts with x64 off."""
    with jax.enable_x64(True):
        wide = jax.jit(lambda x: jnp.tanh(x) * 3 + 1e-12).lower(np.zeros((2, 3))).as_text()
        loop = jax.jit(lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c * 2 + 1, x))
        counters = loop.lower(np.zeros((2, 3), np.float32)).as_text()
    assert "tensor<i64>" in counters
    x = np.linspace(-2, 2, 6).reshape(2, 3)
    with jax.enable_x64(True):  # a 64-bit model needs it, in juliabridge as always
        proto = juliabridge.export_onnx(juliabridge.load_mlir(str(wide), backend="lax"))
    (got,) = _run(proto, {proto.graph.input[0].name: x})
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.tanh(x) * 3 + 1e-12, rtol=1e-14, atol=1e-15)
    proto = juliabridge.export_onnx(juliabridge.load_mlir(str(counters), backend="lax"))
    (got,) = _run(proto, {proto.graph.input[0].name: x.astype(np.float32)})
    np.testing.assert_allclose(got, 8 * x.astype(np.float32) + 7, rtol=1e-6)


@pytest.mark.parametrize(
    ("body", "init", "reduce"),
    [("maximum", "0xFF800000", np.max), ("add", "0.000000e+00", np.sum)],
)
def test_4d_max_and_sum_windows(body: str, init: str, reduce: Any) -> None:
    """Windows over H and W of an NCHW array (2x3 windows): numpy's blockwise max and sum."""
    fn = juliabridge.load_mlir(_pool_module(body, init), backend="lax")
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 6)).astype(np.float32)
    proto = juliabridge.export_onnx(fn)
    (got,) = _run(proto, {proto.graph.input[0].name: x})
    want = reduce(x.reshape(2, 3, 2, 2, 2, 3), axis=(3, 5))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


MIN_POOL = """module {
  func.func @main(%x: tensor<2x3x4x4xf32>) -> tensor<2x3x2x2xf32> {
    %init = stablehlo.constant dense<0x7F800000> : tensor<f32>
    %r = "stablehlo.reduce_window"(%x, %init) <{window_dimensions = array<i64: 1, 1, 2, 2>,
        window_strides = array<i64: 1, 1, 2, 2>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %m = stablehlo.minimum %a, %b : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }) : (tensor<2x3x4x4xf32>, tensor<f32>) -> tensor<2x3x2x2xf32>
    return %r : tensor<2x3x2x2xf32>
  }
}"""


def test_a_primitive_without_onnx_rule_is_named_with_its_op() -> None:
    fn = juliabridge.load_mlir(MIN_POOL, backend="lax")
    with pytest.raises(OnnxConversionError) as info:
        juliabridge.export_onnx(fn)
    e = info.value
    where = "line 4 of <mlir text>"
    assert (e.primitive, e.op, e.where) == ("reduce_window_min", "stablehlo.reduce_window", where)
    assert "'reduce_window_min', emitted by the module's stablehlo.reduce_window at line 4" in str(
        e
    )
    assert "docs/exporting.md" in str(e)


def test_sort_is_refused_naming_juliabridges_own_primitive() -> None:
    text = str(jax.jit(lambda x: jnp.sort(x, axis=1)).lower(np.zeros((2, 3), np.float32)).as_text())
    with pytest.raises(OnnxConversionError) as info:
        juliabridge.export_onnx(juliabridge.load_mlir(text, backend="lax"))
    assert (info.value.primitive, info.value.op) == (
        "juliabridge_sort_with_comparator",
        "stablehlo.sort",
    )


def test_cli_names_the_primitive_and_the_bundle_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from juliabridge.cli import main

    x = np.random.default_rng(4).standard_normal((2, 3, 4, 4)).astype(np.float32)
    bundle = write_bundle(
        tmp_path / "minpool.bundle",
        BundleDescription(
            name="minpool",
            mlir_text=MIN_POOL,
            arguments=[ArgumentSpec("input", [], x, 0)],
            result_paths=[[["output"]]],
            batch={"size": 2, "samples_independent": True},
        ),
    )
    assert main(["export-onnx", str(bundle), "--out", str(tmp_path / "m.onnx")]) == 23
    err = capsys.readouterr().err
    assert "'reduce_window_min'" in err and "stablehlo.reduce_window at line 4 of " in err
    assert "model.mlir" in err and not (tmp_path / "m.onnx").exists()


def test_min_pool_still_runs_in_jax() -> None:
    """The refused module is fine otherwise: the values are those of the window's spec."""
    fn = juliabridge.load_mlir(MIN_POOL, backend="lax")
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 4)).astype(np.float32)
    want = x.reshape(2, 3, 2, 2, 2, 2).min(axis=(3, 5))
    np.testing.assert_array_equal(np.asarray(fn(x)[0]), want)


def test_load_mlir_function_exports(lenet: juliabridge.LuxModel) -> None:
    fn = juliabridge.load_mlir(Path(lenet_bundle()) / "model.mlir", backend="lax")
    x = np.random.default_rng(5).standard_normal((4, 1, 28, 28)).astype(np.float32)
    flat = [x] + [np.asarray(v) for v in _lux_order_weights(lenet)]
    proto = juliabridge.export_onnx(fn)
    got = _run(proto, dict(zip([i.name for i in proto.graph.input], flat)))
    want = np.asarray(lenet_reference(lenet.params, x))
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5)


def _lux_order_weights(model: juliabridge.LuxModel) -> list[Any]:
    out = []
    for a in model.manifest.arguments:
        if a.role != "input":
            tree = model.params if a.role == "parameter" else model.state
            for key in a.path:
                tree = tree[key]
            out.append(tree)
    return out


def test_bad_options_and_backends(lenet: juliabridge.LuxModel, tmp_path: Path) -> None:
    with pytest.raises(CallArgumentError, match="opset=0"):
        juliabridge.export_onnx(lenet, opset=0)
    with pytest.raises(CallArgumentError, match="LuxModel"):
        juliabridge.export_onnx(object())  # type: ignore[arg-type]
    xla = juliabridge.import_lux(lenet_bundle(), backend="xla")
    with pytest.raises(CallArgumentError, match="backend='lax'"):
        juliabridge.export_onnx(xla)
    target = tmp_path / "lenet.onnx"
    assert juliabridge.save_onnx(lenet, target) == target
    with pytest.raises(SaveError, match="already exists"):
        juliabridge.save_onnx(lenet, target)


def test_cli_writes_a_file_onnxruntime_runs(tmp_path: Path, lenet: juliabridge.LuxModel) -> None:
    from juliabridge.cli import main

    out = tmp_path / "lenet.onnx"
    assert main(["export-onnx", str(lenet_bundle()), "--out", str(out)]) == 0
    x = np.random.default_rng(7).standard_normal((4, 1, 28, 28)).astype(np.float32)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": x})
    np.testing.assert_allclose(
        got, np.asarray(lenet_reference(lenet.params, x)), rtol=1e-4, atol=1e-5
    )
    assert main(["export-onnx", str(lenet_bundle()), "--out", str(out)]) == 20  # SaveError
    fixed = tmp_path / "fixed.onnx"
    assert main(["export-onnx", str(lenet_bundle()), "--out", str(fixed), "--batch", "none",
                 "--no-check"]) == 0  # fmt: skip
    session = ort.InferenceSession(str(fixed), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == [4, 1, 28, 28]


def test_docs_list_the_ops_these_tests_convert(tmp_path: Path, bench_lax: ModuleType) -> None:
    """docs/exporting.md's list of converted StableHLO ops is the union of the two models'."""
    path, *_ = bench_lax.convbn_bundle(tmp_path, blocks=1, channels=2, batch=1)
    tested = _ops(Path(lenet_bundle())) | _ops(path)
    small = set().union(*(_ops_of(_small_module(name)) for name in SMALL)) - tested
    section = DOC.read_text().split("## ONNX", 1)[1].split("**What converts", 1)[1]
    models, rest = section.split("Small modules", 1)
    listed = set(re.findall(r"`(stablehlo\.[a-z_]+)`", models))
    assert listed == tested - {"stablehlo.return"}
    assert set(re.findall(r"`(stablehlo\.[a-z_]+)`", rest.split("\n\n", 1)[0])) == small


def test_doc_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ONNX section's examples, in order, in one namespace."""
    monkeypatch.chdir(tmp_path)
    ns = run_examples(DOC.read_text().split("\n## ONNX", 1)[1], "ONNX example", at_least=2)
    model, x = ns["model"], np.asarray(ns["x"])
    np.testing.assert_allclose(
        np.asarray(ns["logits"]), np.asarray(lenet_reference(model.params, x)), rtol=1e-4, atol=1e-5
    )
    assert (tmp_path / "lenet.onnx").is_file()


def test_save_refuses_an_existing_file_before_converting(
    tmp_path: Path, lenet: juliabridge.LuxModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    import juliabridge.exporting_onnx.convert as eo

    target = tmp_path / "there.onnx"
    target.write_bytes(b"x")

    def never(*a: Any, **k: Any) -> Any:
        raise AssertionError("converted before refusing")

    monkeypatch.setattr(eo, "export_onnx", never)
    with pytest.raises(SaveError, match="already exists"):
        eo.save_onnx(lenet, target)
    assert target.read_bytes() == b"x"


def test_a_model_protobuf_cannot_hold_is_a_save_error(
    tmp_path: Path, lenet: juliabridge.LuxModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    import juliabridge.exporting_onnx.convert as eo

    class TooBig:
        def SerializeToString(self) -> bytes:
            raise ValueError("Message onnx.ModelProto exceeds maximum protobuf size of 2GB")

    monkeypatch.setattr(eo, "export_onnx", lambda *a, **k: TooBig())
    with pytest.raises(SaveError, match="over 2 GB needs ONNX's external data"):
        eo.save_onnx(lenet, tmp_path / "big.onnx")
    assert not (tmp_path / "big.onnx").exists()


def test_export_leaves_the_global_x64_flag_as_it_was(lenet: juliabridge.LuxModel) -> None:
    before = global_x64()
    try:
        jax.config.update("jax_enable_x64", True)
        with jax.enable_x64(True):
            juliabridge.export_onnx(lenet)  # f32: jax2onnx converts with x64 off
        assert global_x64() is True
    finally:
        jax.config.update("jax_enable_x64", before)


def test_only_a_missing_rule_is_reported_as_one() -> None:
    import juliabridge.exporting_onnx.convert as eo

    assert eo._MISSING.search("[x] No plugins registered for primitive 'foo_p' (scope)")
    assert not eo._MISSING.search("Unsupported plugin type for primitive 'foo_p'")
