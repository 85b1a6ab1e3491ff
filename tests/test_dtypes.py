"""Every element type Reactant emits crosses the boundary on both backends, eager and jit."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest

import juliabridge
from juliabridge.support import dtypes

ALL_TYPES = list(dtypes.MLIR_TO_NUMPY)


def _module(t: str) -> str:
    # add for numbers, and for i1 (xor would also do): both have exact numpy counterparts.
    op = "and" if t == "i1" else "add"
    return f"""module @"reactant_{t}..." {{
  func.func @main(%a: tensor<2x3x{t}>, %b: tensor<{t}>) -> (tensor<2x3x{t}>, tensor<{t}>, tensor<3x2x{t}>) {{
    %0 = stablehlo.broadcast_in_dim %b, dims = [] : (tensor<{t}>) -> tensor<2x3x{t}>
    %1 = stablehlo.{op} %a, %0 : tensor<2x3x{t}>
    %2 = stablehlo.transpose %a, dims = [1, 0] : (tensor<2x3x{t}>) -> tensor<3x2x{t}>
    return %1, %b, %2 : tensor<2x3x{t}>, tensor<{t}>, tensor<3x2x{t}>
  }}
}}"""


def _inputs(t: str) -> tuple[np.ndarray, np.ndarray]:
    dt = dtypes.to_numpy(t)
    rng = np.random.default_rng(7)
    if t == "i1":
        return rng.integers(0, 2, (2, 3)).astype(bool), np.array(True)
    a = rng.integers(0, 50, (2, 3))
    if t.startswith("complex"):
        return (a + 1j * a[::-1]).astype(dt), np.array(3 - 2j, dtype=dt)
    return a.astype(dt), np.array(5).astype(dt)


def _expected(t: str, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    if t == "i1":
        first = a & b
    elif t == "bf16":
        # ml_dtypes' bfloat16 arithmetic rounds like XLA's; values here are exact anyway.
        first = (a.astype(np.float32) + b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    else:
        first = a + b
    return first, b, a.T


@pytest.mark.parametrize("mlir_type", ALL_TYPES)
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_element_type_roundtrip(mlir_type: str, mode: str, backend: str) -> None:
    with jax.enable_x64(True):
        fn = juliabridge.load_mlir(_module(mlir_type), backend=backend)
        a, b = _inputs(mlir_type)
        out = fn(a, b) if mode == "eager" else jax.jit(fn)(a, b)
        want = _expected(mlir_type, a, b)
        assert len(out) == 3
        for got, exp in zip(out, want, strict=True):
            assert np.asarray(got).dtype == dtypes.to_numpy(mlir_type)
            assert np.asarray(got).shape == exp.shape
            np.testing.assert_array_equal(np.asarray(got), exp)


@pytest.mark.parametrize("mlir_type", sorted(dtypes.SIXTY_FOUR_BIT))
def test_64bit_without_x64_is_a_clear_error(mlir_type: str, backend: str) -> None:
    with jax.enable_x64(False):
        fn = juliabridge.load_mlir(_module(mlir_type), backend=backend)
        a, b = _inputs(mlir_type)
        with pytest.raises(juliabridge.X64DisabledError, match="jax_enable_x64"):
            fn(a, b)


def test_dtype_tables_are_consistent() -> None:
    assert set(dtypes.MLIR_TO_JULIA) == set(dtypes.MLIR_TO_NUMPY)
    for t, dt in dtypes.MLIR_TO_NUMPY.items():
        assert dtypes.from_numpy(dt) == t
