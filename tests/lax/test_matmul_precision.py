"""A module's DEFAULT matmul precision defers to `jax.default_matmul_precision` on the lax
backend (as a JAX matmul written without a precision does); any other precision stays as
written. Checked on the StableHLO that JAX lowers, which is what XLA compiles on every platform
(on CPU every precision computes the same f32, so values alone could not tell)."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import juliabridge
from juliabridge import JuliaBridgeError
from juliabridge.examples import lenet_bundle

DOT = """module {{
  func.func @main(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>) -> tensor<3x5xf32> {{
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]{prec} : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
    return %0 : tensor<3x5xf32>
  }}
}}"""

CONV = """module {{
  func.func @main(%x: tensor<1x2x6x6xf32>, %w: tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32> {{
    %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {{stride = [1, 1]}} {{batch_group_count = 1 : i64, feature_group_count = 1 : i64{prec}}} : (tensor<1x2x6x6xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32>
    return %0 : tensor<1x3x4x4xf32>
  }}
}}"""

EINSUM = """module {
  func.func @main(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>) -> tensor<3x5xf32> {
    %0 = "stablehlo.einsum"(%a, %b) {einsum_config = "ab,bc->ac"} : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
    return %0 : tensor<3x5xf32>
  }
}"""

RAGGED = """module {
  func.func @main(%a: tensor<4x3xf32>, %b: tensor<2x3x5xf32>, %g: tensor<2xi32>) -> tensor<4x5xf32> {
    %0 = "chlo.ragged_dot"(%a, %b, %g) {ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]>, precision_config = [#chlo<precision DEFAULT>, #chlo<precision DEFAULT>]} : (tensor<4x3xf32>, tensor<2x3x5xf32>, tensor<2xi32>) -> tensor<4x5xf32>
    return %0 : tensor<4x5xf32>
  }
}"""

_DOT_DEFAULT = ", precision = [DEFAULT, DEFAULT]"
_CONV_PREC = ", precision_config = [#stablehlo<precision {0}>, #stablehlo<precision {1}>]"

CASES = {
    "dot_general, precision written DEFAULT": DOT.format(prec=_DOT_DEFAULT),
    "dot_general, no precision": DOT.format(prec=""),
    "convolution, precision written DEFAULT": CONV.format(
        prec=_CONV_PREC.format("DEFAULT", "DEFAULT")
    ),
    "convolution, no precision": CONV.format(prec=""),
    "einsum": EINSUM,
}


def _lowered(text: str, setting: str | None) -> str:
    """The StableHLO JAX lowers the lax backend's function to, under the given setting."""
    fn = juliabridge.load_mlir(text, backend="lax")
    dtypes = {"f32": np.float32, "i32": np.int32}
    args = [jax.ShapeDtypeStruct(a.shape, dtypes[a.dtype]) for a in fn.in_specs]
    if setting is None:
        return jax.jit(fn).lower(*args).as_text()
    with jax.default_matmul_precision(setting):
        return jax.jit(fn).lower(*args).as_text()


def _precisions(lowered: str) -> list[str]:
    """Every precision named on a dot or convolution of the lowered text (both spellings)."""
    pairs = re.findall(r"precision = \[([A-Z]+), ([A-Z]+)\]", lowered)
    return [p for pair in pairs for p in pair] + re.findall(
        r"#stablehlo<precision ([A-Z]+)>", lowered
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_default_precision_follows_jax_setting(case: str) -> None:
    text = CASES[case]
    assert "HIGHEST" not in _precisions(_lowered(text, None))
    highest = _precisions(_lowered(text, "highest"))
    assert highest and set(highest) == {"HIGHEST"}, highest


def test_ragged_dot_default_precision_follows_jax_setting() -> None:
    # JAX lowers ragged_dot_general to a loop of dots (or a chlo op): the setting reaches each.
    assert "HIGHEST" not in _lowered(RAGGED, None)
    assert "HIGHEST" in _lowered(RAGGED, "highest")


@pytest.mark.parametrize(
    ("written", "setting"),
    [(("HIGHEST", "DEFAULT"), "bfloat16"), (("HIGH", "HIGH"), "highest"), (("HIGHEST",) * 2, None)],
)
def test_written_precision_is_kept(written: tuple[str, str], setting: str | None) -> None:
    dot = DOT.format(prec=f", precision = [{written[0]}, {written[1]}]")
    conv = CONV.format(prec=_CONV_PREC.format(*written))
    for text in (dot, conv):
        got = _precisions(_lowered(text, setting))
        assert got[:2] == list(written), (written, setting, got)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="a TPU's default is one bf16 pass")
def test_values_unchanged_on_cpu() -> None:
    # The same product under every setting: XLA:CPU computes f32 products in f32.
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4), np.float32), rng.standard_normal((4, 5), np.float32)
    fn = juliabridge.load_mlir(DOT.format(prec=_DOT_DEFAULT), backend="lax")
    want = a.astype(np.float64) @ b.astype(np.float64)
    for setting in (None, "highest", "bfloat16"):
        if setting is None:
            got = fn(a, b)[0]
        else:
            with jax.default_matmul_precision(setting):
                got = fn(a, b)[0]
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_verify_runs_under_highest_by_default() -> None:
    report = juliabridge.verify(lenet_bundle())
    assert report.ok and report.matmul_precision == "highest"
    assert juliabridge.verify(lenet_bundle(), matmul_precision=None).matmul_precision is None


def test_verify_refuses_unknown_precision_before_loading(tmp_path: object) -> None:
    with pytest.raises(JuliaBridgeError, match=r"matmul_precision 'fastest' is not a precision"):
        juliabridge.verify(lenet_bundle(), matmul_precision="fastest")
