"""The adapter over JAX's private API works with the installed jax (it moves between releases)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from juliabridge.support import jaxinternals as ji

TEXT = """module {
  func.func @main(%arg0: tensor<3xf32>, %arg1: tensor<3xf32>) -> (tensor<3xf32>, tensor<f32>) {
    %0 = stablehlo.multiply %arg0, %arg1 : tensor<3xf32>
    %c = stablehlo.constant dense<0.0> : tensor<f32>
    %1 = stablehlo.reduce(%0 init: %c) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
    return %0, %1 : tensor<3xf32>, tensor<f32>
  }
}"""


def test_context_registers_stablehlo_and_chlo() -> None:
    with ji.make_context():
        m = ji.ir.Module.parse(TEXT)
        assert "stablehlo.multiply" in str(m)


#: Generic syntax (as Reactant prints it), CHLO and an sdy attribute: each dialect is loaded
#: by the parser on first use in juliabridge's contexts (registered, not preloaded).
GENERIC = """module attributes {mhlo.num_partitions = 1 : i64} {
  sdy.mesh @mesh = <["x"=1]>
  func.func @main(%arg0: tensor<3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) -> tensor<3xf32> {
    %0 = "stablehlo.sine"(%arg0) : (tensor<3xf32>) -> tensor<3xf32>
    %1 = "chlo.erf"(%0) : (tensor<3xf32>) -> tensor<3xf32>
    %2 = "stablehlo.compare"(%0, %1) {comparison_direction = #stablehlo<comparison_direction LT>} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
    %3 = "stablehlo.select"(%2, %0, %1) : (tensor<3xi1>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    return %3 : tensor<3xf32>
  }
}"""


def test_context_loads_each_dialect_when_a_module_uses_it() -> None:
    ctx = ji.make_context()
    with ctx:
        m = ji.ir.Module.parse(GENERIC)
        assert m.operation.verify()
    text = str(m)
    for name in ("stablehlo.sine", "chlo.erf", "#sdy.sharding"):
        assert name in text, name
    ops = list(m.body.operations[1].regions[0].blocks[0].operations)
    assert [op.operation.name for op in ops] == ["stablehlo.sine", "chlo.erf",
        "stablehlo.compare", "stablehlo.select", "func.return"]  # fmt: skip
    direction = ops[2].operation.attributes["comparison_direction"]
    assert str(direction) == "#stablehlo<comparison_direction LT>"


def test_contexts_are_juliabridges_own() -> None:
    # jax >= 0.11's make_ir_context hands the same per-thread context out again; a flag set on
    # one of juliabridge's must never reach the context JAX lowers in, nor the next import's.
    a, b = ji.make_context(allow_unregistered=True), ji.make_context()
    assert a is not b and a.allow_unregistered_dialects and not b.allow_unregistered_dialects
    jax_ctx = ji.jax_mlir.make_ir_context()
    assert jax_ctx is not a and jax_ctx is not b
    assert not jax_ctx.allow_unregistered_dialects


def test_dialects_load_when_a_module_first_uses_them() -> None:
    # What makes a context cheap: nothing is loaded before the parse needs it.
    ctx = ji.make_context()
    assert not ctx.is_registered_operation("stablehlo.add")
    with ctx:
        ji.ir.Module.parse(TEXT)
    assert ctx.is_registered_operation("stablehlo.add")


def test_without_the_lean_pieces_the_fallback_is_still_a_context_of_our_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ji, "_lean_context", lambda: None)
    ctx = ji.make_context(allow_unregistered=True)
    assert ctx is not ji.jax_mlir.make_ir_context()
    assert ctx.is_registered_operation("stablehlo.add")  # loaded up front there
    with ctx:
        m = ji.ir.Module.parse(GENERIC)
        assert m.operation.verify()
    assert not ji.jax_mlir.make_ir_context().allow_unregistered_dialects


def test_a_module_of_lazily_loaded_dialects_serializes(tmp_path: Path) -> None:
    # serialize_portable runs passes that build ops of other dialects; were one of them never
    # loaded, MLIR would abort the process, so this runs in a child.
    script = tmp_path / "serialize.py"
    script.write_text(
        "import sys\n"
        "from juliabridge.support import jaxinternals as ji\n"
        f"text = {GENERIC!r}\n"
        "with ji.make_context():\n"
        "    data = ji.serialize_portable(ji.ir.Module.parse(text))\n"
        "sys.stdout.write(str(len(data)))\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout) > 0


def test_unregistered_switch() -> None:
    ctx = ji.make_context(allow_unregistered=True)
    assert ctx.allow_unregistered_dialects
    assert not ji.make_context().allow_unregistered_dialects


def test_serialize_and_build_exported_run_eagerly_and_jitted() -> None:
    with ji.make_context():
        blob = ji.serialize_portable(ji.ir.Module.parse(TEXT))
    assert isinstance(blob, bytes) and blob.startswith(b"ML\xefR")  # MLIR bytecode magic
    f32 = np.dtype(np.float32)
    exp = ji.build_exported(
        name="t",
        module_bytecode=blob,
        in_avals=[jax.core.ShapedArray((3,), f32)] * 2,
        out_avals=[jax.core.ShapedArray((3,), f32), jax.core.ShapedArray((), f32)],
    )
    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([4.0, 5.0, 6.0], np.float32)
    for out in (exp.call(a, b), jax.jit(exp.call)(a, b)):
        np.testing.assert_array_equal(np.asarray(out[0]), a * b)
        assert float(out[1]) == 32.0


def test_custom_call_allowlist_has_stable_targets() -> None:
    allow = ji.custom_call_allowlist()
    assert "Sharding" in allow
    assert not any(t.startswith("enzymexla") for t in allow)


def test_geqrf_is_householder_qr() -> None:
    a = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    packed, taus = ji.geqrf(a)
    q = jax.lax.linalg.householder_product(packed, taus)
    np.testing.assert_allclose(np.asarray(q) @ np.triu(np.asarray(packed)[:3]), a, atol=1e-5)


def test_current_platform_is_a_lowering_platform() -> None:
    assert ji.current_platform() in {"cpu", "cuda", "rocm", "tpu"}


def test_array_impl_is_the_class_of_concrete_arrays_only() -> None:
    assert type(jax.numpy.zeros(2)) is ji.ARRAY_IMPL
    assert type(jax.device_put(np.ones(2, np.float32))) is ji.ARRAY_IMPL
    kinds: list[type] = []
    jax.jit(lambda t: kinds.append(type(t)) or t)(np.ones(2, np.float32))
    assert kinds and kinds[0] is not ji.ARRAY_IMPL


def test_global_x64_kept_restores_what_a_body_changed_under_a_context() -> None:
    from jax._src import config as c

    from juliabridge.support.jaxinternals import global_x64_kept

    before = bool(c.enable_x64.get_global())
    try:
        jax.config.update("jax_enable_x64", True)
        # jax2onnx's way: read the (context's) value, set the global flag, "restore" the value
        # it read, which leaves the global False when the context said True.
        with jax.enable_x64(True), global_x64_kept():
            seen = jax.config.jax_enable_x64
            jax.config.update("jax_enable_x64", False)
            if jax.config.jax_enable_x64 != seen:
                jax.config.update("jax_enable_x64", seen)
        assert c.enable_x64.get_global() is True
        with global_x64_kept():
            jax.config.update("jax_enable_x64", False)
        assert c.enable_x64.get_global() is True
    finally:
        jax.config.update("jax_enable_x64", before)


def test_global_x64_reads_the_process_wide_flag_not_a_context_s() -> None:
    before = ji.global_x64()
    try:
        for flag in (False, True):
            jax.config.update("jax_enable_x64", flag)
            assert ji.global_x64() is flag
            with jax.enable_x64(not flag):
                assert ji.global_x64() is flag
            with ji.global_x64_kept():
                jax.config.update("jax_enable_x64", not flag)
            assert ji.global_x64() is flag
    finally:
        jax.config.update("jax_enable_x64", before)
