"""Which @main results return an argument unchanged, decided from the module's structure."""

from __future__ import annotations

import pytest

from juliabridge.stablehlo.module import parse_module
from tests.outside import reactant_fixture


def _main(ret: str, body: str = "", args: str = "%arg0: tensor<2x3xf32>", res: str = "") -> str:
    return f"func.func @main({args}) -> ({res}) {{\n{body}\n  return {ret}\n}}\n"


@pytest.mark.parametrize(
    ("body", "ret", "res", "expected"),
    [
        ("", "%arg0 : tensor<2x3xf32>", "tensor<2x3xf32>", {0: 0}),
        (
            "%0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>\n"
            "%1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<3x2xf32>) -> tensor<2x3xf32>",
            "%1 : tensor<2x3xf32>",
            "tensor<2x3xf32>",
            {0: 0},
        ),
        (  # one transpose: the values are moved, not returned unchanged
            "%0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>",
            "%0 : tensor<3x2xf32>",
            "tensor<3x2xf32>",
            {},
        ),
        (  # computed: a no-op for some inputs is still a computation
            "%0 = stablehlo.abs %arg0 : tensor<2x3xf32>",
            "%0 : tensor<2x3xf32>",
            "tensor<2x3xf32>",
            {},
        ),
        (
            "%0 = stablehlo.convert %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>\n"
            "%1 = stablehlo.broadcast_in_dim %0, dims = [0, 1] : (tensor<2x3xf32>) -> "
            "tensor<2x3xf32>\n"
            "%2 = stablehlo.abs %arg0 : tensor<2x3xf32>",
            "%2, %1 : tensor<2x3xf32>, tensor<2x3xf32>",
            "tensor<2x3xf32>, tensor<2x3xf32>",
            {1: 0},
        ),
        (  # a widening convert changes the values' type
            "%0 = stablehlo.convert %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf64>",
            "%0 : tensor<2x3xf64>",
            "tensor<2x3xf64>",
            {},
        ),
    ],
)
def test_returned_arguments(body: str, ret: str, res: str, expected: dict[int, int]) -> None:
    m = parse_module(_main(ret, body, res=res))
    assert m.returned_arguments == expected


def test_second_argument_through_transposes() -> None:
    text = _main(
        "%1, %arg0 : tensor<4x5xf32>, tensor<2x3xf32>",
        "%0 = stablehlo.transpose %arg1, dims = [1, 0] : (tensor<4x5xf32>) -> tensor<5x4xf32>\n"
        "%1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<5x4xf32>) -> tensor<4x5xf32>",
        args="%arg0: tensor<2x3xf32>, %arg1: tensor<4x5xf32>",
        res="tensor<4x5xf32>, tensor<2x3xf32>",
    )
    assert parse_module(text).returned_arguments == {0: 1, 1: 0}


def test_three_dimensional_permutations_compose() -> None:
    t = "tensor<2x3x4xf32>"
    text = _main(
        f"%1 : {t}",
        f"%0 = stablehlo.transpose %arg0, dims = [1, 2, 0] : ({t}) -> tensor<3x4x2xf32>\n"
        f"%1 = stablehlo.transpose %0, dims = [2, 0, 1] : (tensor<3x4x2xf32>) -> {t}",
        args=f"%arg0: {t}",
        res=t,
    )
    assert parse_module(text).returned_arguments == {0: 0}
    wrong = (
        text.replace("dims = [2, 0, 1]", "dims = [1, 2, 0]")
        .replace(f"(tensor<3x4x2xf32>) -> {t}", "(tensor<3x4x2xf32>) -> tensor<4x2x3xf32>")
        .replace(f"%1 : {t}", "%1 : tensor<4x2x3xf32>")
        .replace(f"-> ({t})", "-> (tensor<4x2x3xf32>)")
    )
    assert parse_module(wrong).returned_arguments == {}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cumsum_reduce_window.mlir", {1: 0}),  # aliasing_output = 1, returned through 2 transposes
        ("dense_matvec_slices.mlir", {1: 0, 2: 1}),
        ("conditional_if_f64.mlir", {3: 0}),
        ("sine_loop_while.mlir", {}),  # aliased, but the loop computes a new value
        ("gradient_dot_gather_iota.mlir", {}),
    ],
)
def test_real_reactant_modules(name: str, expected: dict[int, int]) -> None:
    assert parse_module(reactant_fixture(name)).returned_arguments == expected
