"""Counted loops across their whole space (issue 38): every compare direction, the induction
variable on either side, steps of ±1 and ±k, signed and unsigned counters of every width, start
and bound anywhere including the type's minimum and maximum.

The reference is independent of the lift's trip table: a loop with a step of ±1 visits every
value of its counter's ring, so it stops at the first value, walking from the start, where the
condition fails; that value is the start or an end of an interval of failing values, i.e. one
of the type's ends or a neighbour of the bound. None of those failing means the loop never ends.
Steps of ±k (and 8/16-bit counters) are simulated in wrapping arithmetic.

What the tests check (docs/lax-backend.md: a `while` whose counter runs in steps of 1 from a
constant to a constant bound is counted, up to 2^31 - 1 trips, and reverse-differentiates; any
other `while` refuses reverse mode by name):

- a loop that ends within a few tens of thousands of trips computes the simulation's counter
  and trip count;
- reverse mode (traced with jax.eval_shape, nothing runs) is available exactly for counted
  loops: steps of ±1 with a finite count up to 2^31 - 1; refused with a TransformError for a
  loop that never ends, one that runs longer, and any step of ±k.

A loop that never ends (or runs for billions of trips) is never executed.

The sizes are test_rule_space.py's (JULIABRIDGE_SPACE_EXAMPLES, default 20 per generated test).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import juliabridge
from juliabridge.errors import TransformError

from .test_rule_space import _CMP as HOLDS  # spec.md#compare, the counter on the left
from .test_rule_space import SPACE

pytestmark = pytest.mark.usefixtures("x64")


TYPES = {
    "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
}  # fmt: skip
#: The longest scan the lax backend makes (docs/lax-backend.md).
LONGEST_SCAN = 2**31 - 1
#: Loops up to this many trips are run.
RUN_AT_MOST = 70_000


def _range(ty: str) -> tuple[int, int]:
    info = np.iinfo(TYPES[ty])
    return int(info.min), int(info.max)


def _wrap(v: int, ty: str) -> int:
    lo, hi = _range(ty)
    return (v - lo) % (hi - lo + 1) + lo


def _cond(direction: str, iv_first: bool):  # type: ignore[no-untyped-def]
    """The loop's condition as a predicate of the counter (`compare DIR, b, iv` if not
    iv_first)."""
    holds = HOLDS[direction]
    return (lambda i, b: holds(i, b)) if iv_first else (lambda i, b: holds(b, i))


def _trips_by_ends(ty: str, start: int, direction: str, bound: int, step: int, iv_first: bool):
    """Trip count of a ±1 loop (None: it never ends) from the ends of its failing values."""
    lo, hi = _range(ty)
    cond = _cond(direction, iv_first)
    if not cond(start, bound):
        return 0
    size = hi - lo + 1
    fails = [v for v in {lo, hi, bound - 1, bound, bound + 1} if lo <= v <= hi]
    fails = [v for v in fails if not cond(v, bound)]
    if not fails:
        return None  # the condition holds on the whole ring
    return min(((v - start) * step) % size for v in fails)


def _simulate(ty: str, start: int, direction: str, bound: int, step: int, iv_first: bool,
              limit: int) -> int | None:  # fmt: skip
    """Trip count by running the loop in wrapping arithmetic; None past `limit` trips."""
    cond, i, trips = _cond(direction, iv_first), start, 0
    lo, hi = _range(ty)
    size = hi - lo + 1
    while cond(i, bound):
        i, trips = (i + step - lo) % size + lo, trips + 1
        if trips > limit:
            return None
    return trips


def _text(ty: str, start: int, direction: str, bound: int, step: int, iv_first: bool) -> str:
    t = f"tensor<{ty}>"
    op, c = ("add", step) if step > 0 else ("subtract", -step)
    cmp = "%i, %cb" if iv_first else "%cb, %i"
    return f"""module {{
  func.func @main(%x: tensor<f64>) -> ({t}, tensor<f64>) {{
    %cs = stablehlo.constant dense<{start}> : {t}
    %cb = stablehlo.constant dense<{bound}> : {t}
    %c = stablehlo.constant dense<{c}> : {t}
    %0:3 = stablehlo.while(%i = %cs, %a = %x, %y = %x) : {t}, tensor<f64>, tensor<f64>
    cond {{
      %1 = stablehlo.compare  {direction}, {cmp} : ({t}, {t}) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    }} do {{
      %1 = stablehlo.{op} %i, %c : {t}
      %2 = stablehlo.add %a, %y : tensor<f64>
      stablehlo.return %1, %2, %y : {t}, tensor<f64>, tensor<f64>
    }}
    return %0#0, %0#1 : {t}, tensor<f64>
  }}
}}"""


def _check(ty: str, start: int, direction: str, bound: int, step: int, iv_first: bool) -> None:
    lo, hi = _range(ty)
    start, bound = _wrap(start, ty), _wrap(bound, ty)
    # 8- and 16-bit counters are simulated for a whole period (the ring's size), which
    # decides; wider ones up to a bound, past which the loop is not run
    limit = hi - lo + 1 if hi - lo < 2**16 else 4 * RUN_AT_MOST
    if abs(step) == 1:
        trips = _trips_by_ends(ty, start, direction, bound, step, iv_first)
        if hi - lo < 2**8:  # the two references agree (8-bit: quick to simulate whole)
            assert _simulate(ty, start, direction, bound, step, iv_first, limit) == trips
    else:
        trips = _simulate(ty, start, direction, bound, step, iv_first, limit)
    fn = juliabridge.load_mlir(_text(ty, start, direction, bound, step, iv_first), backend="lax")
    case = (ty, start, direction, bound, step, iv_first, trips)
    counted = abs(step) == 1 and trips is not None and trips <= LONGEST_SCAN
    _reverse_mode(fn, counted, case)
    if trips is not None and trips <= RUN_AT_MOST:
        iv, acc = jax.jit(fn)(np.float64(0.5))
        assert int(iv) == _wrap(start + trips * step, ty), case
        assert float(acc) == 0.5 * (1 + trips), case


def _reverse_mode(fn: Any, counted: bool, case: tuple) -> None:
    """Reverse mode traced without running anything: available iff the loop is counted."""
    grad = jax.grad(lambda x: fn(x)[1])
    if counted:
        out = jax.eval_shape(grad, jax.ShapeDtypeStruct((), np.float64))
        assert out.shape == (), case
    else:
        with pytest.raises(TransformError, match="reverse-mode differentiation"):
            jax.eval_shape(grad, jax.ShapeDtypeStruct((), np.float64))


@st.composite
def loops(draw: st.DrawFn) -> tuple:
    ty = draw(st.sampled_from(sorted(TYPES)))
    lo, hi = _range(ty)
    ends = st.sampled_from([lo, lo + 1, lo + 2, hi - 2, hi - 1, hi])
    near = st.one_of(st.integers(-6, 6), ends)
    start = draw(near)
    bound = draw(st.one_of(near, st.integers(start - 9, start + 9)))
    step = draw(st.sampled_from([1, 1, -1, -1, 2, -2, 3, -5]))
    return ty, start, draw(st.sampled_from(sorted(HOLDS))), bound, step, draw(st.booleans())


@SPACE
@given(case=loops())
def test_loops_of_any_direction_step_width_and_bound_run_or_are_not_counted(case) -> None:
    _check(*case)


@pytest.mark.parametrize("ty", sorted(TYPES))
def test_an_inclusive_bound_at_the_type_s_end_is_an_endless_loop_never_counted(ty: str) -> None:
    # `iv <= max` or `iv >= min`, whichever way the counter walks: the condition always holds
    lo, hi = _range(ty)
    for direction, step, bound in [("LE", -1, hi), ("LE", 1, hi), ("GE", 1, lo), ("GE", -1, lo)]:
        for iv_first, start in [(True, lo), (False, 0), (True, hi - 1), (False, hi)]:
            written = direction if iv_first else {"LE": "GE", "GE": "LE"}[direction]
            assert _trips_by_ends(ty, start, written, bound, step, iv_first) is None
            _check(ty, start, written, bound, step, iv_first)


@pytest.mark.parametrize("ty", sorted(TYPES))
def test_loops_starting_at_the_type_s_ends_against_a_near_bound(ty: str) -> None:
    lo, hi = _range(ty)
    pairs = [(lo, lo + 2), (hi, hi - 2), (lo, hi), (hi, lo)]
    for d, direction in enumerate(sorted(HOLDS)):
        for p, (start, bound) in enumerate(pairs):
            step = 1 if (p + d) % 2 == 0 else -1
            _check(ty, start, direction, bound, step, iv_first=(p + d) // 2 % 2 == 0)


@pytest.mark.parametrize(
    ("ty", "start", "direction", "bound", "step", "trips"),
    [
        # walking away from the bound until the counter wraps: 2^31 - 1 trips is the longest
        # counted loop, one more is a while loop
        ("i32", 1, "GT", 0, 1, 2**31 - 1),
        ("i32", 0, "GT", -1, 1, 2**31),
        ("ui32", 2**31 - 2, "LE", 2**31 + 5, -1, 2**31 - 1),
        ("ui32", 2**31 - 1, "LE", 2**31 + 5, -1, 2**31),
        ("i64", 0, "LT", 2**31 - 1, 1, 2**31 - 1),
        ("i64", -1, "LT", 2**31 - 1, 1, 2**31),
        ("ui64", 2**31 - 1, "NE", 0, -1, 2**31 - 1),
        ("ui64", 2**31, "NE", 0, -1, 2**31),
    ],
)
def test_the_longest_counted_loop_has_2_31_minus_1_trips(ty, start, direction, bound, step,
                                                         trips) -> None:  # fmt: skip
    assert _trips_by_ends(ty, start, direction, bound, step, True) == trips
    fn = juliabridge.load_mlir(_text(ty, start, direction, bound, step, True), backend="lax")
    _reverse_mode(fn, trips <= LONGEST_SCAN, (ty, start, direction, bound, step))
