"""Matmul precision over its whole space (issue 38): every precision_config pair, on every op
that carries one (dot_general, convolution, chlo.ragged_dot), under every kind of
`jax.default_matmul_precision` setting; and verify's setting is the one the module runs under.

The reference for a pair is the spec's rule as docs/lax-backend.md states it: (DEFAULT,
DEFAULT), or no precision at all, is "the fastest the platform has", which the lax backend
hands to JAX's setting, so the op lowers as a JAX matmul written without a precision does
under that setting (lowered here from `lax.dot_general(..., precision=None)` itself); any other
pair lowers exactly as written, lhs first, whatever the setting.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from jax import lax

import juliabridge
from juliabridge import JuliaBridgeError
from juliabridge.examples import lenet_bundle
from juliabridge.function import ImportedFunction

PRECISIONS = ("DEFAULT", "HIGH", "HIGHEST")
SETTINGS = (None, "bfloat16", "highest")

_DOT = """module {{
  func.func @main(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>) -> tensor<3x5xf32> {{
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]{prec} : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
    return %0 : tensor<3x5xf32>
  }}
}}"""

_CONV = """module {{
  func.func @main(%x: tensor<1x6x6x2xf32>, %w: tensor<3x3x2x3xf32>) -> tensor<1x4x4x3xf32> {{
    %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {{stride = [1, 1]}} {{batch_group_count = 1 : i64, feature_group_count = 1 : i64{prec}}} : (tensor<1x6x6x2xf32>, tensor<3x3x2x3xf32>) -> tensor<1x4x4x3xf32>
    return %0 : tensor<1x4x4x3xf32>
  }}
}}"""

_RAGGED = """module {{
  func.func @main(%a: tensor<4x3xf32>, %b: tensor<2x3x5xf32>, %g: tensor<2xi32>) -> tensor<4x5xf32> {{
    %0 = "chlo.ragged_dot"(%a, %b, %g) {{ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]>{prec}}} : (tensor<4x3xf32>, tensor<2x3x5xf32>, tensor<2xi32>) -> tensor<4x5xf32>
    return %0 : tensor<4x5xf32>
  }}
}}"""


def _written(op: str, pair: tuple[str, str] | None) -> str:
    """The module with `op` carrying `pair` (None: no precision_config)."""
    if op == "dot_general":
        return _DOT.format(prec="" if pair is None else f", precision = [{pair[0]}, {pair[1]}]")
    dialect = "chlo" if op == "ragged_dot" else "stablehlo"
    prec = (
        ""
        if pair is None
        else f", precision_config = [#{dialect}<precision {pair[0]}>, "
        f"#{dialect}<precision {pair[1]}>]"
    )
    return (_RAGGED if op == "ragged_dot" else _CONV).format(prec=prec)


def _lower(fn: Any, specs: list[Any], setting: str | None) -> str:
    if setting is None:
        return jax.jit(fn).lower(*specs).as_text()
    with jax.default_matmul_precision(setting):
        return jax.jit(fn).lower(*specs).as_text()


def _pairs(lowered: str) -> list[tuple[str, str]]:
    """The precision pair of every dot or convolution in lowered StableHLO (both spellings)."""
    pairs = re.findall(r"precision = \[([A-Z]+), ([A-Z]+)\]", lowered)
    pairs += re.findall(
        r"precision_config = \[#stablehlo<precision ([A-Z]+)>, #stablehlo<precision ([A-Z]+)>\]",
        lowered,
    )
    return pairs


def _lowered_module(text: str, setting: str | None) -> list[tuple[str, str]]:
    fn = juliabridge.load_mlir(text, backend="lax")
    dtypes = {"f32": np.float32, "i32": np.int32}
    specs = [jax.ShapeDtypeStruct(a.shape, dtypes[a.dtype]) for a in fn.in_specs]
    return _pairs(_lower(fn, specs, setting))


def _jax_unwritten(setting: str | None) -> tuple[str, str]:
    """The pair JAX lowers a matmul written without a precision to under `setting`."""
    spec = jax.ShapeDtypeStruct((3, 4), np.float32), jax.ShapeDtypeStruct((4, 5), np.float32)
    found = set(_pairs(_lower(lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))),
                              list(spec), setting)))  # fmt: skip
    assert len(found) == 1, found
    return found.pop()


CASES = [
    (op, pair)
    for op in ("dot_general", "convolution", "ragged_dot")
    for pair in [None, *itertools.product(PRECISIONS, PRECISIONS)]
]


@pytest.mark.parametrize(("op", "pair"), CASES, ids=lambda v: str(v))
def test_every_pair_lowers_as_the_spec_s_rule_says_under_every_setting(
    op: str, pair: tuple[str, str] | None
) -> None:
    text = _written(op, pair)
    for setting in SETTINGS:
        got = set(_lowered_module(text, setting))
        deferred = pair is None or pair == ("DEFAULT", "DEFAULT")
        want = _jax_unwritten(setting) if deferred else pair
        assert got == {want}, (op, pair, setting, got)


# --- verify -----------------------------------------------------------------------------------


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The `jax.default_matmul_precision` in force at each call of an imported function."""
    got: list[Any] = []
    call = ImportedFunction.__call__

    def spy(self: ImportedFunction, *args: Any, **kwargs: Any) -> Any:
        got.append(jax.config.jax_default_matmul_precision)
        return call(self, *args, **kwargs)

    monkeypatch.setattr(ImportedFunction, "__call__", spy)
    return got


@pytest.mark.parametrize("setting", ["highest", "bfloat16", "float32", "default", None])
def test_verify_runs_the_module_under_the_precision_it_reports(
    seen: list[Any], setting: str | None
) -> None:
    before = jax.config.jax_default_matmul_precision
    report = juliabridge.verify(lenet_bundle(), matmul_precision=setting)
    assert report.ok and report.matmul_precision == setting
    assert seen == [setting if setting is not None else before]
    assert jax.config.jax_default_matmul_precision == before  # restored after


def test_verify_s_default_is_highest(seen: list[Any]) -> None:
    assert juliabridge.verify(lenet_bundle()).matmul_precision == "highest"
    assert seen == ["highest"]


@pytest.mark.parametrize("name", ["fastest", "HIGHEST!", "bf16"])
def test_an_unknown_precision_is_refused_before_the_bundle_is_read(
    tmp_path: Path, name: str
) -> None:
    # The path does not exist: were the bundle read first, its BundleError would come first.
    with pytest.raises(JuliaBridgeError, match=r"is not a precision JAX names") as info:
        juliabridge.verify(tmp_path / "missing.bundle", matmul_precision=name)
    assert type(info.value) is JuliaBridgeError
