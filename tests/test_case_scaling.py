"""`stablehlo.case` with many branches (issue 27, class 2): the lax lift is linear in its
branches, and the module-wide branch budget is enforced at load time, before any tracing.

The cost that is not linear is XLA's CPU compiler (tools/calibrate_budgets.py measures it),
which is why the budget exists; the lift itself must not add to it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import juliabridge
from juliabridge import ResourceLimitError
from juliabridge.stablehlo import budget

REPO = Path(__file__).resolve().parents[1]


def case_module(n: int, *, calls: int = 0) -> str:
    """@main(i32, 4xf32) -> 4xf32: a case of `n` branches, branch k adding k; with `calls`, the
    case sits in @c and @main calls it that many times (summing the results)."""
    parts = [
        f"{{\n      %c{k} = stablehlo.constant dense<{float(k)}> : tensor<4xf32>\n"
        f"      %a{k} = stablehlo.add %x, %c{k} : tensor<4xf32>\n"
        f"      stablehlo.return %a{k} : tensor<4xf32>\n    }}"
        for k in range(n)
    ]
    case = f'%r = "stablehlo.case"(%i) ({", ".join(parts)}) : (tensor<i32>) -> tensor<4xf32>'
    sig = "%i: tensor<i32>, %x: tensor<4xf32>"
    if not calls:
        return (
            f"module {{\n  func.func @main({sig}) -> tensor<4xf32> {{\n    {case}\n"
            "    return %r : tensor<4xf32>\n  }\n}\n"
        )
    body = [
        f"%s{j} = func.call @c(%i, %x) : (tensor<i32>, tensor<4xf32>) -> tensor<4xf32>"
        for j in range(calls)
    ]
    acc = "%s0"
    for j in range(1, calls):
        body.append(f"%t{j} = stablehlo.add {acc}, %s{j} : tensor<4xf32>")
        acc = f"%t{j}"
    return (
        f"module {{\n  func.func private @c({sig}) -> tensor<4xf32> {{\n    {case}\n"
        "    return %r : tensor<4xf32>\n  }\n"
        f"  func.func @main({sig}) -> tensor<4xf32> {{\n    "
        + "\n    ".join(body)
        + f"\n    return {acc} : tensor<4xf32>\n  }}\n}}\n"
    )


_LIFT = """
    import json, sys, time, tracemalloc
    import jax, numpy as np
    import juliabridge
    from tests.test_case_scaling import case_module
    import juliabridge.backends.lax.ops.control as control
    control.SWITCH_FANOUT = {fanout}
    n = {n}
    fn = juliabridge.load_mlir(case_module(n), backend="lax")
    args = (np.int32(0), np.zeros(4, np.float32))
    jax.jit(fn).lower(*args)  # warm JAX's own caches on a first lowering
    fn = juliabridge.load_mlir(case_module(n), backend="lax")
    tracemalloc.start()
    t0 = time.process_time()
    jax.jit(fn).lower(*args).as_text()
    seconds = time.process_time() - t0
    print(json.dumps({{"seconds": seconds, "bytes": tracemalloc.get_traced_memory()[1]}}))
"""


def _lift_cost(n: int, fanout: int) -> dict[str, float]:
    """Tracing and lowering an n-branch case on the lax backend, in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_LIFT.format(n=n, fanout=fanout))],
        env=env, capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _growth(fanout: int) -> tuple[float, float]:
    """Per-branch cost at 800 branches over that at 100: (memory, time)."""
    small, large = _lift_cost(100, fanout), _lift_cost(800, fanout)
    return (
        (large["bytes"] / 800) / (small["bytes"] / 100),
        (large["seconds"] / 800) / max(small["seconds"] / 100, 1e-9),
    )


@pytest.mark.slow
def test_the_case_lift_is_linear_in_its_branches() -> None:
    memory, seconds = _growth(control_fanout())
    # Linear means a ratio near 1; n log n at these sizes stays under 2. Quadratic is 8.
    assert memory < 2.5, memory
    assert seconds < 3.5, seconds


@pytest.mark.slow
def test_the_linearity_check_can_fail() -> None:
    # One flat lax.switch (the lift before the tree) is quadratic in its branches.
    memory, seconds = _growth(1 << 30)
    assert memory > 2.5 or seconds > 3.5, (memory, seconds)


def control_fanout() -> int:
    from juliabridge.backends.lax.ops import control

    return control.SWITCH_FANOUT


def test_the_branch_budget_is_enforced_at_load_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JULIABRIDGE_MAX_CASE_BRANCHES", "40")
    for text, count in ((case_module(41), 41), (case_module(21, calls=2), 42)):
        for backend in ("lax", "xla"):
            with pytest.raises(ResourceLimitError) as info:
                juliabridge.load_mlir(text, backend=backend)
            message = str(info.value)
            assert f"holds {count} stablehlo.case branches" in message, message
            assert "more than the 40 " in message and "JULIABRIDGE_MAX_CASE_BRANCHES" in message
    # At the limit the module loads and computes the branch's value (k added, last for others).
    x = np.arange(4, dtype=np.float32)
    fn = juliabridge.load_mlir(case_module(20, calls=2), backend="lax")
    for i, k in ((3, 3), (-1, 19), (25, 19)):
        np.testing.assert_array_equal(np.asarray(fn(np.int32(i), x)[0]), 2 * (x + k))


def test_the_default_branch_budget() -> None:
    assert budget.Limits.current().max_case_branches == budget.MAX_CASE_BRANCHES
    with pytest.raises(ResourceLimitError, match=r"holds 1,001 stablehlo\.case branches"):
        juliabridge.load_mlir(case_module(budget.MAX_CASE_BRANCHES + 1), backend="lax")


def _hex_constant(values: np.ndarray) -> str:
    n = values.size
    return (
        f"module {{\n  func.func @main() -> tensor<{n}xf32> {{\n"
        f'    %0 = stablehlo.constant dense<"0x{values.tobytes().hex().upper()}"> : '
        f"tensor<{n}xf32>\n    return %0 : tensor<{n}xf32>\n  }}\n}}\n"
    )


def test_constant_data_is_budgeted_at_what_loading_spends(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.arange(1 << 18, dtype=np.float32) * np.float32(0.5)  # 1 MiB of data
    text = _hex_constant(values)
    spent = values.nbytes * budget.CONSTANT_COST
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", str(spent - 1))
    with pytest.raises(ResourceLimitError) as info:
        juliabridge.load_mlir(text, backend="lax")
    message = str(info.value)
    assert "constants hold 1.0 MiB of data" in message and "JULIABRIDGE_MEMORY_LIMIT" in message
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", str(spent + (1 << 20)))
    for backend in ("lax", "xla"):
        np.testing.assert_array_equal(
            np.asarray(juliabridge.load_mlir(text, backend=backend)()[0]), values
        )
    # A splat of the same size is one element broadcast: not counted.
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", str(spent // 4))
    splat = text.replace(f'"0x{values.tobytes().hex().upper()}"', "1.5")
    out = juliabridge.load_mlir(splat, backend="lax")()[0]
    np.testing.assert_array_equal(np.asarray(out), np.full(values.shape, 1.5, np.float32))
