"""The differential harness (tests/lax/differential.py) over every op family it generates.

A fixed-seed sample runs with the test suite; JULIABRIDGE_DIFF_LONG=1 runs many more cases
(minutes) and prints the figures docs/lax-backend.md reports. Each case: lax against the xla
backend and the reference interpreter, vmap against per-sample calls; f64 elementwise cases
also jvp against central differences.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import juliabridge
from juliabridge import JuliaBridgeError

from . import differential as diff
from . import differential_structured as structured
from .oracles import InterpreterUnavailable, interpret, run_lax, run_xla

pytestmark = pytest.mark.usefixtures("x64")

LONG = os.environ.get("JULIABRIDGE_DIFF_LONG") == "1"
EXAMPLES = 150 if LONG else 12
TABLE = diff.deviations()
FAMILIES = {**diff.FAMILIES, **structured.FAMILIES}
STATS: Counter[str] = Counter()


def _run(oracle: str, case: diff.Case) -> list[Any] | str:
    try:
        if oracle == "xla":
            return run_xla(case.text, case.args)
        return interpret(case.text, case.args, timeout=60)
    except InterpreterUnavailable as e:
        return f"unavailable: {e}"
    except JuliaBridgeError as e:
        return f"refused: {type(e).__name__}: {e}"


def check_case(case: diff.Case) -> None:
    """lax against each oracle; a divergence must be covered by a table row."""
    STATS[f"cases {case.family}"] += 1
    got = run_lax(case.text, case.args)
    problems = []
    oracles = ["xla"] + (["interpreter"] if diff.interpretable(case) else [])
    for oracle in oracles:
        want = _run(oracle, case)
        if isinstance(want, str):
            if want.startswith("unavailable"):
                STATS[f"{oracle} unavailable"] += 1
                continue
            why: str | None = want
        else:
            why = diff.compare_results(got, want)
        if why is None:
            continue
        covering = [d.ident for d in TABLE if d.covers(oracle, case)]
        STATS[f"divergence {covering[0] if covering else 'NEW'}"] += 1
        msg = diff.undocumented(oracle, case, why, TABLE)
        if msg:
            problems.append(msg)
    assert not problems, "\n".join(problems)
    if "denormal" not in case.features:
        # XLA's CPU code flushes denormals in its vector loops and not in the scalar remainder
        # (f32 log of 1e-45 at position 5: -103.97 in a 6-vector, -inf in 2x6), so a batched
        # call may differ from a single one there.
        _check_vmap(case, got)


def _check_vmap(case: diff.Case, got: list[Any]) -> None:
    """jax.vmap over two copies of the first argument (the second reversed where it can be)."""
    fn = juliabridge.load_mlir(case.text, backend="lax")
    first = case.args[0]
    batch = np.stack([first, first])
    out = jax.jit(jax.vmap(lambda a: tuple(fn(a, *case.args[1:])), in_axes=0))(batch)
    for g, w in zip(out, got):
        for k in range(2):
            why = diff.disagreement(np.asarray(g)[k], np.asarray(w))
            assert why is None, f"vmap sample {k} of {case.op}: {why}"


def _settings() -> Any:
    return settings(
        max_examples=EXAMPLES,
        derandomize=not LONG,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_agrees_with_xla_and_the_interpreter(family: str) -> None:
    @_settings()
    @given(FAMILIES[family])
    def run(case: diff.Case) -> None:
        check_case(case)

    run()


SMOOTH = ("exponential", "tanh", "sine", "logistic", "add", "multiply", "divide", "atan2")


def test_f64_derivatives_against_finite_differences() -> None:
    from .transform_checks import check_grad, check_jvp

    rng = np.random.default_rng(0)
    for op in SMOOTH:
        binary = op in diff.BINARY_FLOAT
        tt = f"tensor<{diff.N}xf64>"
        line = f"%0 = stablehlo.{op} %a0{', %a1' if binary else ''} : {tt}"
        text = diff.module([tt] * (2 if binary else 1), [line], [("%0", tt)])
        args = [rng.uniform(0.5, 2.0, diff.N) for _ in range(2 if binary else 1)]
        fn = juliabridge.load_mlir(text, backend="lax")
        check_jvp(fn, args, list(range(len(args))))
        check_grad(fn, args, list(range(len(args))))


def test_the_table_parses_and_names_known_oracles() -> None:
    assert TABLE, "no rows between the lax-deviations markers of docs/lax-backend.md"
    assert {d.oracle for d in TABLE} <= {"xla", "interpreter"}
    assert len({d.ident for d in TABLE}) == len(TABLE)


@pytest.mark.skipif(not LONG, reason="long mode: set JULIABRIDGE_DIFF_LONG=1 (minutes)")
def test_long_mode_figures() -> None:
    for family in sorted(FAMILIES):
        test_family_agrees_with_xla_and_the_interpreter(family)
    print("\n".join(f"{k}: {v}" for k, v in sorted(STATS.items())))
