"""The differential harness (tests/lax/differential.py) over every op family it generates.

A fixed-seed sample runs with the test suite; JULIABRIDGE_DIFF_LONG=1 runs many more cases
(minutes) and prints the figures docs/lax-backend.md reports (JULIABRIDGE_DIFF_FAMILIES=a,b
restricts it to those families). Each case: lax against the xla
backend and the reference interpreter, vmap against per-sample calls; f64 elementwise cases
also jvp against central differences. Where enzyme-ad imports, the enzyme backend is a third
oracle for the first `ENZYME_CASES` cases of every family (every case in long mode).
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
from collections import Counter, defaultdict
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import juliabridge
from juliabridge import JuliaBridgeError
from juliabridge.backends.lax import RULES
from juliabridge.backends.lax.ops._linalg_targets import TARGETS

from . import differential as diff
from . import differential_misc as misc
from . import differential_numeric as numeric
from . import differential_structured as structured
from .oracles import InterpreterUnavailable, interpret, run_enzyme, run_lax, run_xla

pytestmark = pytest.mark.usefixtures("x64")

LONG = os.environ.get("JULIABRIDGE_DIFF_LONG") == "1"
EXAMPLES = 50 if LONG else 10
TABLE = diff.deviations()
FAMILIES = {**diff.FAMILIES, **structured.FAMILIES, **misc.FAMILIES, **numeric.FAMILIES}
STATS: Counter[str] = Counter()
#: Seconds spent in each oracle (long mode prints them: enzyme's share is its CI cost).
SECONDS: defaultdict[str, float] = defaultdict(float)
#: enzyme (XLA through enzyme-ad, env A only) checks this many cases of each family in the
#: fixed-seed sample; the long mode gives it every case.
ENZYME = importlib.util.find_spec("enzyme_ad") is not None
ENZYME_CASES = EXAMPLES if LONG else 3


def _run(oracle: str, case: diff.Case) -> list[Any] | str:
    try:
        if oracle == "xla":
            return run_xla(case.text, case.args, trust=getattr(case, "trust", False))
        if oracle == "enzyme":
            return run_enzyme(case.text, case.args, trust=getattr(case, "trust", False))
        return interpret(case.text, case.args, timeout=60)
    except InterpreterUnavailable as e:
        return f"unavailable: {e}"
    except JuliaBridgeError as e:
        return f"refused: {type(e).__name__}: {e}"


def _verdict(oracle: str, case: diff.Case, got: list[Any]) -> str | None:
    """Why lax's results `got` disagree with `oracle` on `case`, or None."""
    if oracle == "reference":
        return case.reference(got)  # type: ignore[attr-defined, no-any-return]
    began = time.perf_counter()
    want = _run(oracle, case)
    SECONDS[oracle] += time.perf_counter() - began
    if isinstance(want, str):
        return want
    case.features |= diff.result_features(want)
    if getattr(case, "compare", None):
        return case.compare(got, want)  # type: ignore[attr-defined, no-any-return]
    return diff.compare_results(got, want, case.ulps)


def check_case(case: diff.Case, *, enzyme: bool = False) -> None:
    """lax against each oracle; a divergence must be covered by a table row."""
    got = run_lax(case.text, case.args)
    problems = []
    # A RefCase (differential_numeric.py) may have no XLA form, and has its own reference.
    xla = getattr(case, "xla", True)
    oracles = (["xla"] if xla else []) + (["enzyme"] if enzyme and xla else [])
    oracles += ["interpreter"] if diff.interpretable(case) else []
    oracles += ["reference"] if getattr(case, "reference", None) else []
    for oracle in oracles:
        why = _verdict(oracle, case, got)
        if why is not None and why.startswith("unavailable"):
            STATS[f"{oracle} unavailable"] += 1
            continue
        if why is None:
            continue
        covering = [d.ident for d in TABLE if d.covers(oracle, case)]
        STATS[f"divergence {covering[0] if covering else 'NEW'}"] += 1
        msg = diff.undocumented(oracle, case, why, TABLE)
        if msg:
            problems.append(msg)
    assert not problems, "\n".join(problems)
    if (
        "denormal" not in case.features
        and not {"batch-groups", "nonfinite"} <= case.features
        and getattr(case, "vmap", True)
    ):
        # XLA's CPU code flushes denormals in its vector loops and not in the scalar remainder
        # (f32 log of 1e-45 at position 5: -103.97 in a 6-vector, -inf in 2x6), so a batched
        # call may differ from a single one there. A batch-group convolution with more than
        # one sample per group (what vmap makes of it) is computed by XLA with a zero mask, so
        # an infinity becomes NaN in the other groups (jax.vmap of lax.conv_general_dilated
        # alone does the same: test_conv.py shows it).
        _check_vmap(case, got)


def _check_vmap(case: diff.Case, got: list[Any]) -> None:
    """jax.vmap over two copies of the first argument; the others are unbatched arguments.

    Not closed over: XLA rewrites a division by a compile-time constant as a multiplication
    by its reciprocal, flushed to 0 where that is a denormal (f32 inf / 3e38 gives NaN), so a
    constant operand would test XLA's constant folding instead of the batching
    (test_division_by_a_constant_is_xlas_reciprocal).
    """
    fn = juliabridge.load_mlir(case.text, backend="lax")
    first = case.args[0]
    batch = np.stack([first, first])
    rest = (None,) * (len(case.args) - 1)
    out = jax.jit(jax.vmap(lambda *a: tuple(fn(*a)), in_axes=(0, *rest)))(batch, *case.args[1:])
    compare = getattr(case, "compare", None) or diff.compare_results
    for k in range(2):
        why = compare([np.asarray(g)[k] for g in out], got)
        assert why is None, (
            f"vmap sample {k} of {case.op}: {why}\n{case.text}\n"
            f"  args {[a.tolist() for a in case.args]}"
        )


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
        STATS[f"cases {family}"] += 1
        drawn = STATS[f"cases {family}"] - start
        enzyme = ENZYME and drawn <= ENZYME_CASES
        if enzyme:
            STATS[f"enzyme cases {family}"] += 1
        check_case(case, enzyme=enzyme)

    start = STATS[f"cases {family}"]

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


def test_constant_folded_integer_power_is_a_documented_xla_error() -> None:
    # XLA's constant folder (jax 0.10.2) takes (-1)^-1 as 0; the spec, the interpreter and lax
    # give -1.
    tt = "tensor<2xi32>"
    lines = ["%c = stablehlo.constant dense<[-1, 3]> : tensor<2xi32>",
             "%e = stablehlo.constant dense<[-1, 64]> : tensor<2xi32>",
             f"%p = stablehlo.power %c, %e : {tt}", f"%0 = stablehlo.add %p, %a0 : {tt}"]  # fmt: skip
    case = diff.Case("elementwise", "power", diff.module([tt], lines, [("%0", tt)]),
                     [np.zeros(2, np.int32)], {"i32", "constant-folded"})  # fmt: skip
    got = run_lax(case.text, case.args)[0]
    np.testing.assert_array_equal(got, [-1, (3**64 + 2**31) % 2**32 - 2**31])
    np.testing.assert_array_equal(interpret(case.text, case.args)[0], got)
    why = diff.compare_results([got], run_xla(case.text, case.args))
    # jax 0.10.2's XLA folds it to 0; jax 0.12's gives -1 as well.
    assert why is None or any(d.covers("xla", case) for d in TABLE), why


def test_constant_denormal_to_i1_is_xlas_folded_true() -> None:
    # XLA folds a convert of a constant at compile time (a denormal is nonzero) and flushes
    # a denormal argument at run time; lax follows both.
    lines = ["%c = stablehlo.constant dense<[1.0e-45, 0.0]> : tensor<2xf32>",
             "%b = stablehlo.convert %c : (tensor<2xf32>) -> tensor<2xi1>",
             "%0 = stablehlo.or %b, %a0 : tensor<2xi1>"]  # fmt: skip
    text = diff.module(["tensor<2xi1>"], lines, [("%0", "tensor<2xi1>")])
    args = [np.zeros(2, np.bool_)]
    np.testing.assert_array_equal(run_lax(text, args)[0], [True, False])
    np.testing.assert_array_equal(run_xla(text, args)[0], [True, False])


def test_division_by_a_constant_is_xlas_reciprocal() -> None:
    # XLA rewrites x / c for a constant c as x * (1 / c); 1 / 3e38 is a denormal, flushed to
    # 0 on the CPU. The vmap check once closed over its unbatched arguments, turning them into
    # constants, and saw batched NaN against unbatched inf here.
    tt = "tensor<3xf32>"
    lines = ["%c = stablehlo.constant dense<3.0e+38> : tensor<3xf32>",
             f"%0 = stablehlo.divide %a0, %c : {tt}"]  # fmt: skip
    case = diff.Case("elementwise", "divide", diff.module([tt], lines, [("%0", tt)]),
                     [np.array([np.inf, 3e38, 6.0], np.float32)], {"f32", "constant-divisor"})  # fmt: skip
    spec = case.args[0] / np.float32(3e38)  # numpy's f32 division: [inf, 1, 2e-38]
    np.testing.assert_array_equal(interpret(case.text, case.args)[0], spec)
    got = run_lax(case.text, case.args)[0]
    np.testing.assert_array_equal(got, [np.nan, 0.0, 0.0])
    np.testing.assert_array_equal(run_xla(case.text, case.args)[0], got)
    assert any(d.covers("interpreter", case) for d in TABLE)
    # The same divisor as an argument: a division, the spec's quotients.
    text = diff.module([tt, tt], [f"%0 = stablehlo.divide %a0, %a1 : {tt}"], [("%0", tt)])
    args = [case.args[0], np.full(3, 3e38, np.float32)]
    np.testing.assert_array_equal(run_lax(text, args)[0], spec)


def test_a_denormal_result_of_normal_operands_is_the_documented_flush() -> None:
    # Found by the long mode (family `case`): 0.5 x the smallest normal f32 is a denormal,
    # which XLA (and so lax) flushes to 0 on the CPU and the interpreter keeps; the operands
    # are normal, so only the interpreter's result shows row `denormal-flush` applies.
    tt = "tensor<3xf32>"
    text = diff.module([tt, tt], [f"%0 = stablehlo.multiply %a0, %a1 : {tt}"], [("%0", tt)])
    tiny = np.finfo(np.float32).tiny
    args = [np.array([0.5, 0.0, 2.0], np.float32), np.array([tiny, 0.0, 1.0], np.float32)]
    case = diff.Case("elementwise", "multiply", text, args, diff.features_of(args))
    assert "denormal" not in case.features
    np.testing.assert_array_equal(run_lax(text, args)[0], [0.0, 0.0, 2.0])
    np.testing.assert_array_equal(interpret(text, args)[0], [tiny / 2, 0.0, 2.0])
    check_case(case)  # covered, by the interpreter's result
    assert "denormal" in case.features


def test_the_table_parses_and_names_known_oracles() -> None:
    assert TABLE, "no rows between the lax-deviations markers of docs/lax-backend.md"
    assert {d.oracle for d in TABLE} <= {"xla", "enzyme", "interpreter", "reference"}
    assert len({d.ident for d in TABLE}) == len(TABLE)


@pytest.mark.skipif(not LONG, reason="long mode: set JULIABRIDGE_DIFF_LONG=1 (minutes)")
def test_long_mode_figures() -> None:
    failed = []
    # JULIABRIDGE_DIFF_FAMILIES=a,b limits the run to those families.
    chosen = [f for f in os.environ.get("JULIABRIDGE_DIFF_FAMILIES", "").split(",") if f]
    assert set(chosen) <= set(FAMILIES), sorted(set(chosen) - set(FAMILIES))
    for family in chosen or sorted(FAMILIES):
        try:
            test_family_agrees_with_xla_and_the_interpreter(family)
        except AssertionError as e:  # keep going: the figures of every family are wanted
            failed.append(f"{family}: {str(e)[:3000]}")
        print(f"{family} done: {STATS[f'cases {family}']} cases", flush=True)
    print("\n".join(f"{k}: {v}" for k, v in sorted(STATS.items())))
    print("seconds per oracle:", {k: round(v, 1) for k, v in SECONDS.items()})
    assert not failed, "\n\n".join(failed)


# --- every lifted op is generated or excluded with a reason -------------------------------------

_HOST_IO = (
    "host I/O: refused at load for every backend (it would wait for a host or peer that "
    "never answers); test_control checks the refusal"
)

#: Ops the lax backend lifts that no harness family generates, and why.
EXCLUDED = {
    **{op: _HOST_IO for op in ("infeed", "outfeed", "send", "recv")},
    "unary_einsum": "no backend runs it: XLA cannot translate it and lax refuses it with a "
                    "typed error saying so (tests/lax/test_dot.py)",
}  # fmt: skip
EXCLUDED = {f"stablehlo.{k}": v for k, v in EXCLUDED.items()}


#: What the families draw their op under test from (the lists their strategies sample).
GENERATED = {f"stablehlo.{op}" for op in (
    *diff.UNARY, *diff.UNARY_INT, *diff.BINARY_FLOAT, *diff.BINARY_INT, *structured.SHAPE_OPS,
    "compare", "convert", "bitcast_convert", "clamp", "is_finite", "reduce_precision", "reduce",
    "reduce_window", "sort", "select_and_scatter", "gather", "scatter", "convolution",
    "dot_general", "while", "case", "if", "cholesky", "triangular_solve",
)} | misc.GENERATED_OPS | numeric.GENERATED_OPS  # fmt: skip


def _drawn_ops() -> set[str]:
    """The op under test of 30 draws of every family (each must be in GENERATED)."""
    seen: set[str] = set()
    for strategy in FAMILIES.values():

        @settings(max_examples=30, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(strategy)
        def collect(case: diff.Case) -> None:
            name = case.op if "." in case.op else f"stablehlo.{case.op}"  # chlo.erf, func.call
            assert re.search(rf"{re.escape(name)}\b", case.text), case.op
            seen.add(name)

        collect()
    return seen


def test_every_lifted_op_is_generated_or_excluded_with_a_reason() -> None:
    drawn = _drawn_ops()
    assert drawn <= GENERATED, f"drawn but not declared: {sorted(drawn - GENERATED)}"
    assert len(drawn) > len(FAMILIES), "the families draw too few distinct ops"
    missing = sorted(set(RULES) - GENERATED - set(EXCLUDED))
    assert not missing, f"lifted ops no family generates and EXCLUDED does not name: {missing}"
    both = sorted(GENERATED & set(EXCLUDED))
    assert not both, f"generated yet excluded: {both}"
    assert GENERATED | set(EXCLUDED) <= set(RULES), sorted(GENERATED | set(EXCLUDED) - set(RULES))
    assert all(len(why) > 20 for why in EXCLUDED.values())


#: Custom-call targets the lax backend lifts that the custom_call family does not draw.
TARGETS_EXCLUDED = {
    **{t: "a GPU kernel (cuSOLVER / hipSOLVER / cuSPARSE): XLA on the CPU cannot run the "
          "module; tests/lax/test_linalg.py lowers it for cuda/rocm and checks the lax lift"
       for t in TARGETS if t.split("_")[0] in ("cusolver", "hipsolver", "cusparse", "cu",
                                                "hipsparse", "hip")},
    **{t: "a TPU name (JAX's older lowering): no CPU kernel to compare with; "
          "tests/lax/test_linalg.py::test_tpu_targets" for t in (
              "Eigh", "LuDecomposition", "ProductOfElementaryHouseholderReflectors", "Qr")},
    **{t: "a sharding annotation: the identity on one device (tests/lax/test_custom_call.py)"
       for t in ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")},
}  # fmt: skip


def test_custom_call_counts_as_generated_because_its_targets_are() -> None:
    drawn = numeric.lapack_targets()
    assert drawn <= set(TARGETS), sorted(drawn - set(TARGETS))
    missing = sorted(set(TARGETS) - drawn - set(TARGETS_EXCLUDED))
    assert not missing, f"lifted custom-call targets neither drawn nor excluded: {missing}"
    assert not drawn & set(TARGETS_EXCLUDED), sorted(drawn & set(TARGETS_EXCLUDED))
