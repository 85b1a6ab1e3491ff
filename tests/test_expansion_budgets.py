"""Each op weighted by what it expands to (issue 39).

A CHLO special function counted as one op but XLA legalizes it into a computation of 36-549
instructions: 3,000 chained chlo.digamma peaked at 7.6 GB, 1,000 independent polygamma cost
~1.3 MB each against the 6-18 KB per op the op budget was calibrated on. budget.EXPANSION
weighs each by the instructions its lowering holds (tools/calibrate_budgets.py --expansions).
"""

from __future__ import annotations

import pytest

import juliabridge
from juliabridge.errors import ResourceLimitError
from juliabridge.stablehlo import budget
from tools.calibrate_budgets import expansions


def test_every_weight_covers_what_this_jax_expands_the_op_to() -> None:
    found = expansions()
    assert set(found) <= set(budget.EXPANSION)
    short = {k: (budget.EXPANSION[k], n) for k, n in found.items() if budget.EXPANSION[k] < n}
    assert not short, short  # re-run tools/calibrate_budgets.py --expansions
    for name in ("next_after", "polygamma", "zeta"):
        assert budget.EXPANSION[f"chlo.broadcast_{name}"] == budget.EXPANSION[f"chlo.{name}"]


def _chain(op: str, n: int) -> str:
    t = "tensor<8xf32>"
    body = "".join(f"    %v{k + 1} = chlo.{op} %v{k} : {t} -> {t}\n" for k in range(n))
    return f"func.func @main(%v0: {t}) -> {t} {{\n{body}    return %v{n} : {t}\n}}\n"


@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_special_functions_are_refused_at_what_they_expand_to(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 30 digammas are 30 ops in the text and 30 x 126 once XLA legalizes them.
    monkeypatch.setenv("JULIABRIDGE_MAX_OPS", str(30 * budget.EXPANSION["chlo.digamma"]))
    juliabridge.load_mlir(_chain("digamma", 29), backend=backend)
    with pytest.raises(ResourceLimitError, match=r"expands to 3,9\d\d ops"):
        juliabridge.load_mlir(_chain("digamma", 31), backend=backend)
    # The default budget: 3,000 chained digammas (7.6 GB at load before) are refused at once.
    monkeypatch.delenv("JULIABRIDGE_MAX_OPS")
    with pytest.raises(ResourceLimitError, match=r"expands to 378,\d\d\d ops"):
        juliabridge.load_mlir(_chain("digamma", 3000), backend=backend)
