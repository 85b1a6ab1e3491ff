"""Complex element types in the op budget's weights (issue 50): chains of complex sqrt and acos
compile in quadratic time (measured: 10 complex sqrt 18.9 s, f32 0.28 s), so each counts
budget.COMPLEX_EXPANSION; the same ops on real types keep their own weight."""

from __future__ import annotations

import pytest

from juliabridge.errors import ResourceLimitError
from juliabridge.stablehlo import budget, parse_module

C = "tensor<4xcomplex<f32>>"
F = "tensor<4xf32>"


def _chain(op: str, n: int, t: str) -> str:
    if op == "chlo.acos":
        line = "    %v{j} = chlo.acos %v{i} : {t} -> {t}"
    else:
        line = "    %v{j} = stablehlo.sqrt %v{i} : {t}"
    body = "\n".join(line.format(i=i, j=i + 1, t=t) for i in range(n))
    return (
        f"module @m {{\n  func.func public @main(%v0: {t}) -> {t} {{\n{body}\n"
        f"    return %v{n} : {t}\n  }}\n}}\n"
    )


@pytest.mark.parametrize("op", ["stablehlo.sqrt", "chlo.acos"])
def test_complex_chains_are_weighed_by_their_compile_time(op: str) -> None:
    weight = budget.EXPANSION[op + budget.COMPLEX_KIND]
    admitted = budget.MAX_OPS // weight - 1  # room for the return
    parse_module(_chain(op, admitted, C))
    with pytest.raises(ResourceLimitError) as e:
        parse_module(_chain(op, admitted + 2, C))
    assert f"{admitted + 2} {op} on complex weighing {weight} each" in str(e.value)


@pytest.mark.parametrize("op", ["stablehlo.sqrt", "chlo.acos"])
def test_the_same_ops_on_real_types_keep_their_weight(op: str) -> None:
    weight = budget.EXPANSION.get(op, 1)
    parse_module(_chain(op, min(500, budget.MAX_OPS // weight - 1), F))


def test_the_complex_weights_admit_about_ten() -> None:
    for op, weight in budget.COMPLEX_EXPANSION.items():
        assert 8 <= budget.MAX_OPS // weight <= 12, op
