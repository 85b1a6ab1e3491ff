"""The lax rules across the space their bugs hide in, not their common case (issue 38).

Each test draws its cases with hypothesis from the dimensions a rule depends on, and checks
the lax backend against a reference written independently from spec.md:

- convolution: every permutation of the lhs, rhs and output layouts (NHWC/HWIO and the
  rest, lhs and rhs spatial dims at different positions), window reversal per spatial dim,
  strides, padding (negative too) and dilations, against a numpy convolution;
- counted loops: the induction variable's type (signed, unsigned), start, bound, direction,
  which side of the compare it is on, and every way the body can write its step (``iv + 1``,
  ``1 + iv``, ``iv - 1``, ``c - iv``, ...), against a Python simulation of the loop;
- sort: integer keys of every width and signedness with 0, -1, the minimum and the maximum,
  ascending and descending, the comparator's arguments in either order;
- gather and scatter: the index vector at every position (and implicit), any start index map,
  collapsed/inserted dims and offset/window dims at any positions, indices out of bounds;
- reduce_window: windows, strides, base and window dilations, padding (negative too), inits
  that are and are not the identity, against XLA's semantics written in numpy.

The sizes are CI's (JULIABRIDGE_SPACE_EXAMPLES, default 20 examples per test); set it higher
for a long run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import reduction_reference as ref
from .indexing_reference import (
    GatherDims,
    ScatterDims,
    ScatterModule,
    gather_module,
    np_gather,
    np_scatter,
)
from .oracles import assert_same, random_array, run_lax, run_xla
from .test_conv import Conv, conv_reference, conv_text
from .test_reduction import window_text
from .test_sort import sort_module

pytestmark = pytest.mark.usefixtures("x64")

EXAMPLES = int(os.environ.get("JULIABRIDGE_SPACE_EXAMPLES", "20"))
SPACE = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- convolution --------------------------------------------------------------------------------


@st.composite
def convolutions(draw: st.DrawFn) -> Conv:
    n = draw(st.integers(1, 2))
    spatial = [str(d) for d in range(n)]
    lhs = "".join(draw(st.permutations(["b", "f", *spatial])))
    rhs = "".join(draw(st.permutations(["o", "i", *spatial])))
    out = "".join(draw(st.permutations(["b", "f", *spatial])))
    groups = draw(st.sampled_from([1, 1, 2]))
    per_group = draw(st.integers(1, 2))
    sizes = {"b": draw(st.integers(1, 2)), "f": groups * per_group, "i": per_group}
    sizes["o"] = groups * draw(st.integers(1, 2))
    kernel = [draw(st.integers(1, 3)) for _ in range(n)]
    lhs_sizes = {"b": sizes["b"], "f": sizes["f"]}
    rhs_sizes = {"o": sizes["o"], "i": sizes["i"]}
    strides, padding, lhs_dil, rhs_dil = [], [], [], []
    for d in range(n):
        rhs_dil.append(draw(st.integers(1, 2)))
        lhs_dil.append(draw(st.integers(1, 2)))
        span = (kernel[d] - 1) * rhs_dil[d] + 1
        size = draw(st.integers(1, 5))
        lo, hi = draw(st.integers(-1, 2)), draw(st.integers(-1, 2))
        dilated = (size - 1) * lhs_dil[d] + 1
        if dilated + lo + hi < span:  # keep at least one output position
            hi = span - dilated - lo
        lhs_sizes[str(d)], rhs_sizes[str(d)] = size, kernel[d]
        strides.append(draw(st.integers(1, 2)))
        padding.append((lo, hi))
    return Conv(
        lhs,
        rhs,
        out,
        tuple(lhs_sizes[c] for c in lhs),
        tuple(rhs_sizes[c] for c in rhs),
        strides=tuple(strides),
        padding=tuple(padding),
        lhs_dilation=tuple(lhs_dil),
        rhs_dilation=tuple(rhs_dil),
        reversal=tuple(draw(st.booleans()) for _ in range(n)),
        groups=groups,
    )


@SPACE
@given(c=convolutions(), seed=st.integers(0, 2**16))
def test_convolution_in_any_layout_with_any_window_reversal(c: Conv, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(c.lhs_shape), rng.standard_normal(c.rhs_shape)
    text, _ = conv_text(c, "f64", generic=True)
    want = conv_reference(c, x, w, np.float64)
    assert_same(run_lax(text, [x, w]), [want], rtol=1e-10, atol=1e-10, what=str(c))


def test_nhwc_hwio_reversal_of_one_spatial_dim() -> None:
    # A Flux/Lux-style correlation in TensorFlow's layout, reversing only the second window dim.
    c = Conv("b01f", "01io", "b01f", (1, 4, 5, 2), (2, 3, 2, 3), reversal=(False, True))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(c.lhs_shape), rng.standard_normal(c.rhs_shape)
    text, _ = conv_text(c, "f64", generic=True)
    assert_same(run_lax(text, [x, w]), [conv_reference(c, x, w, np.float64)], rtol=1e-10,
                atol=1e-10, what="nhwc")  # fmt: skip


# --- counted loops ------------------------------------------------------------------------------

#: How the body writes the next induction variable, as (MLIR op, operands), and its meaning.
STEPS = {
    "iv + 1": ("add", "%i, %c", lambda i, c: i + c),
    "1 + iv": ("add", "%c, %i", lambda i, c: c + i),
    "iv - 1": ("subtract", "%i, %c", lambda i, c: i - c),
    "c - iv": ("subtract", "%c, %i", lambda i, c: c - i),
}
_CMP = {
    "LT": lambda a, b: a < b,
    "LE": lambda a, b: a <= b,
    "GT": lambda a, b: a > b,
    "GE": lambda a, b: a >= b,
    "EQ": lambda a, b: a == b,
    "NE": lambda a, b: a != b,
}


def _loop_text(ty: str, start: int, direction: str, bound: int, step: str, c: int,
               iv_first: bool) -> str:  # fmt: skip
    op, operands, _ = STEPS[step]
    cmp = "%i, %cb" if iv_first else "%cb, %i"
    return f"""module {{
  func.func @main(%x: tensor<f64>) -> (tensor<{ty}>, tensor<f64>) {{
    %cs = stablehlo.constant dense<{start}> : tensor<{ty}>
    %cb = stablehlo.constant dense<{bound}> : tensor<{ty}>
    %c = stablehlo.constant dense<{c}> : tensor<{ty}>
    %h = stablehlo.constant dense<1.000000e+00> : tensor<f64>
    %0:2 = stablehlo.while(%i = %cs, %a = %x) : tensor<{ty}>, tensor<f64>
    cond {{
      %1 = stablehlo.compare  {direction}, {cmp} : (tensor<{ty}>, tensor<{ty}>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    }} do {{
      %1 = stablehlo.{op} {operands} : tensor<{ty}>
      %2 = stablehlo.add %a, %h : tensor<f64>
      stablehlo.return %1, %2 : tensor<{ty}>, tensor<f64>
    }}
    return %0#0, %0#1 : tensor<{ty}>, tensor<f64>
  }}
}}"""


def _simulate(dtype: np.dtype, start: int, direction: str, bound: int, step: str, c: int,
              iv_first: bool, limit: int = 600) -> tuple[int, int] | None:  # fmt: skip
    """(final iv, trips) of the loop in wrapping integer arithmetic, None past `limit` trips."""
    bits = 8 * dtype.itemsize
    signed = dtype.kind == "i"

    def wrap(v: int) -> int:
        v %= 1 << bits
        return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v

    i, b, trips = wrap(start), wrap(bound), 0
    while _CMP[direction](i, b) if iv_first else _CMP[direction](b, i):
        i = wrap(STEPS[step][2](i, wrap(c)))
        trips += 1
        if trips > limit:
            return None
    return i, trips


TYPES = {"i32": np.dtype(np.int32), "i64": np.dtype(np.int64), "ui8": np.dtype(np.uint8),
         "ui32": np.dtype(np.uint32), "i8": np.dtype(np.int8)}  # fmt: skip


@st.composite
def loops(draw: st.DrawFn) -> tuple:
    ty = draw(st.sampled_from(sorted(TYPES)))
    info = np.iinfo(TYPES[ty])
    near = st.one_of(st.integers(-6, 6), st.sampled_from([int(info.min), int(info.max)]))
    start = draw(near)
    bound = draw(st.one_of(near, st.integers(start - 8, start + 8)))
    return (ty, start, draw(st.sampled_from(sorted(_CMP))), bound,
            draw(st.sampled_from(sorted(STEPS))), draw(st.sampled_from([1, 1, 1, 2, -1, 0, 5])),
            draw(st.booleans()))  # fmt: skip


@SPACE
@given(case=loops())
def test_loops_in_any_direction_and_step_form_run_their_trips(case: tuple) -> None:
    ty, start, direction, bound, step, c, iv_first = case
    dtype = TYPES[ty]
    bits = 8 * dtype.itemsize

    def wrap(v: int) -> int:  # a drawn value outside the type (start - 8, c = -1) as it wraps
        v %= 1 << bits
        return v - (1 << bits) if dtype.kind == "i" and v >= 1 << (bits - 1) else v

    start, bound, c = wrap(start), wrap(bound), wrap(c)
    want = _simulate(dtype, start, direction, bound, step, c, iv_first)
    if want is None:
        return  # a loop that runs until a 32- or 64-bit counter wraps: too long to run here
    text = _loop_text(ty, start, direction, bound, step, c, iv_first)
    iv, acc = run_lax(text, [np.float64(0.5)])
    assert (int(iv), float(acc)) == (want[0], 0.5 + want[1]), (case, want)


@pytest.mark.parametrize(("start", "direction", "bound", "c"), [
    (3, "GE", 2, 1), (0, "NE", 1, 1), (5, "GT", 0, 1), (0, "LT", 1, 1), (-4, "LE", 0, 1),
])  # fmt: skip
def test_a_body_writing_c_minus_iv_is_not_a_step_of_one(start: int, direction: str, bound: int,
                                                        c: int) -> None:  # fmt: skip
    want = _simulate(np.dtype(np.int32), start, direction, bound, "c - iv", c, True)
    assert want is not None
    iv, acc = run_lax(_loop_text("i32", start, direction, bound, "c - iv", c, True),
                      [np.float64(0.0)])  # fmt: skip
    assert (int(iv), float(acc)) == (want[0], float(want[1]))


@pytest.mark.parametrize(("ty", "start", "bound", "step"), [
    ("ui8", 5, 3, "iv + 1"), ("i8", -3, -5, "iv + 1"), ("ui8", 3, 5, "iv - 1"),
    ("i8", 100, -100, "1 + iv"),
])  # fmt: skip
def test_a_not_equal_loop_walking_away_from_its_bound_wraps_its_8_bit_counter(
    ty: str, start: int, bound: int, step: str
) -> None:
    want = _simulate(TYPES[ty], start, "NE", bound, step, 1, True)
    assert want is not None and want[1] > 50  # it wraps around before it meets the bound
    iv, acc = run_lax(_loop_text(ty, start, "NE", bound, step, 1, True), [np.float64(0.0)])
    assert (int(iv), float(acc)) == (want[0], float(want[1]))


@pytest.mark.parametrize(("start", "direction", "bound", "step"), [
    (0, "GT", 5, "iv + 1"), (0, "GE", 5, "iv + 1"), (5, "LT", 0, "iv - 1"), (5, "LE", 0, "iv - 1"),
    (0, "NE", 3, "1 + iv"),
])  # fmt: skip
def test_a_compare_with_the_bound_first_is_read_mirrored(start, direction, bound, step) -> None:
    # `compare GT, 5, iv` is `iv < 5`: the loop runs while the bound is on the left's side.
    want = _simulate(np.dtype(np.int32), start, direction, bound, step, 1, False)
    assert want is not None and want[1] >= 3
    iv, acc = run_lax(_loop_text("i32", start, direction, bound, step, 1, False),
                      [np.float64(0.0)])  # fmt: skip
    assert (int(iv), float(acc)) == (want[0], float(want[1]))


# --- case ---------------------------------------------------------------------------------------


def _case_text(n: int, ty: str) -> str:
    branches = "}, {\n".join(
        f"      %c{b} = stablehlo.constant dense<{b}> : tensor<i32>\n"
        f"      stablehlo.return %c{b} : tensor<i32>\n"
        for b in range(n)
    )
    return f"""module {{
  func.func @main(%i: tensor<{ty}>) -> tensor<i32> {{
    %0 = "stablehlo.case"(%i) ({{
{branches}    }}) : (tensor<{ty}>) -> tensor<i32>
    return %0 : tensor<i32>
  }}
}}"""


@SPACE
@given(n=st.integers(1, 20), data=st.data())
def test_case_runs_branch_index_and_the_last_for_any_index_outside(n: int, data) -> None:
    # spec.md#case: branch `index`, the last branch for an index outside [0, n); with more
    # branches than one switch takes, the lift splits them into a tree.
    index = data.draw(st.one_of(st.integers(-3, n + 3), st.sampled_from([-(2**31), 2**31 - 1])))
    fn = run_lax(_case_text(n, "i32"), [np.int32(index)])
    assert int(fn[0]) == (index if 0 <= index < n else n - 1), (n, index)


@pytest.mark.parametrize("n", [9, 17])
def test_case_split_into_a_tree_runs_every_branch(n: int) -> None:
    # More branches than one lax.switch takes (8): every index, both halves of every split.
    import jax

    import juliabridge

    fn = jax.jit(juliabridge.load_mlir(_case_text(n, "i32"), backend="lax"))
    got = [int(fn(np.int32(i))[0]) for i in range(-2, n + 2)]
    assert got == [i if 0 <= i < n else n - 1 for i in range(-2, n + 2)]


# --- sort ---------------------------------------------------------------------------------------

INT_TYPES = ["i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"]


@st.composite
def integer_keys(draw: st.DrawFn) -> tuple[str, np.ndarray]:
    t = draw(st.sampled_from(INT_TYPES))
    dt = np.dtype(("u" if t.startswith("u") else "") + "int" + t.lstrip("ui"))
    info = np.iinfo(dt)
    edges = [0, 1, int(info.min), int(info.max), int(info.max) - 1]
    if dt.kind == "i":
        edges += [-1, int(info.min) + 1]
    values = draw(st.lists(st.one_of(st.sampled_from(edges),
                                     st.integers(int(info.min), int(info.max))),
                           min_size=1, max_size=9))  # fmt: skip
    return t, np.array(values, dtype=object).astype(dt)


@SPACE
@given(keys=integer_keys(), direction=st.sampled_from(["LT", "GT"]), swap=st.booleans())
def test_integer_keys_with_zero_and_the_extremes_sort_in_order(
    keys: tuple[str, np.ndarray], direction: str, swap: bool
) -> None:
    t, x = keys
    lhs, rhs = ("%r0", "%l0") if swap else ("%l0", "%r0")
    body = (
        f"      %c = stablehlo.compare {direction}, {lhs}, {rhs} : (tensor<{t}>, tensor<{t}>) "
        "-> tensor<i1>\n      stablehlo.return %c : tensor<i1>"
    )
    text = sort_module([t, "i32"], str(x.size), body)
    payload = np.arange(x.size, dtype=np.int32)
    # The comparator as the spec reads it: less(a, b) = compare(DIR, lhs, rhs), with Python ints.
    descending = (direction == "GT") != swap
    order = sorted(range(x.size), key=lambda k: -int(x[k]) if descending else int(x[k]))
    got = run_lax(text, [x, payload])
    assert_same(got, [x[order], payload[order]], rtol=0, atol=0, what=f"{t} {direction} {swap}")


@st.composite
def sorts(draw: st.DrawFn) -> tuple:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    key_t = draw(st.sampled_from(["i32", "ui8", "f32", "complex<f32>"]))
    key_at = draw(st.integers(0, 1))  # the key operand: first or second
    types = [key_t, "i32"] if key_at == 0 else ["i32", key_t]
    form = draw(st.sampled_from(["LT", "GT", "swapped", "cross", "lexicographic"]))
    return shape, dim, types, key_at, form


def _sort_body(types: list[str], key_at: int, form: str) -> str:
    k, o = key_at, 1 - key_at
    t, u = types[k], types[o]
    if form == "cross-direct":  # one compare of operand 0's lhs with operand 1's rhs
        return ("      %c = stablehlo.compare LT, %l0, %r1 : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
                "      stablehlo.return %c : tensor<i1>")  # fmt: skip
    if form == "cross":  # compares the two operands' elements: no key of one operand
        return ('      %c = stablehlo.compare LT, %l0, %r0 : (tensor<' + types[0] + '>, tensor<'
                + types[0] + '>) -> tensor<i1>\n'
                '      %d = stablehlo.compare LT, %l1, %r1 : (tensor<' + types[1] + '>, tensor<'
                + types[1] + '>) -> tensor<i1>\n'
                '      %e = stablehlo.and %c, %d : tensor<i1>\n'
                '      stablehlo.return %e : tensor<i1>')  # fmt: skip
    if form == "lexicographic":  # by the key, ties by the other operand
        return (f"      %c = stablehlo.compare LT, %l{k}, %r{k} : (tensor<{t}>, tensor<{t}>) -> tensor<i1>\n"
                f"      %q = stablehlo.compare EQ, %l{k}, %r{k} : (tensor<{t}>, tensor<{t}>) -> tensor<i1>\n"
                f"      %d = stablehlo.compare LT, %l{o}, %r{o} : (tensor<{u}>, tensor<{u}>) -> tensor<i1>\n"
                "      %a = stablehlo.and %q, %d : tensor<i1>\n"
                "      %e = stablehlo.or %c, %a : tensor<i1>\n"
                "      stablehlo.return %e : tensor<i1>")  # fmt: skip
    direction = "LT" if form == "swapped" else form
    lhs, rhs = (f"%r{k}", f"%l{k}") if form == "swapped" else (f"%l{k}", f"%r{k}")
    return (f"      %c = stablehlo.compare {direction}, {lhs}, {rhs} : (tensor<{t}>, tensor<{t}>) "
            "-> tensor<i1>\n      stablehlo.return %c : tensor<i1>")  # fmt: skip


@SPACE
@given(case=sorts(), seed=st.integers(0, 2**16))
def test_sort_at_any_dimension_key_position_and_comparator_is_xla_s_sort(case, seed) -> None:
    # XLA runs the module's own comparator (the xla backend, used here only as the reference):
    # for a comparator that is no strict weak order (a plain float or complex compare on NaN,
    # a compare across operands) its result depends on XLA's algorithm, which the lax
    # backend must reproduce rather than replace by lax.sort.
    shape, dim, types, key_at, form = case
    rng = np.random.default_rng(seed)
    arrays = []
    for t in types:
        a = random_array(rng, shape, t, special=True)
        if t in ("f32", "complex<f32>") and a.size > 2:
            a.reshape(-1)[:2] = a.reshape(-1)[-2:]  # ties
        arrays.append(a)
    text = sort_module(types, "x".join(map(str, shape)), _sort_body(types, key_at, form), dim=dim)
    assert_same(run_lax(text, arrays), run_xla(text, arrays), rtol=0, atol=0, what=str(case))


@pytest.mark.parametrize(("key_t", "form"), [("i32", "LT"), ("ui8", "LT"), ("i32", "cross"),
                                           ("i32", "cross-direct"),
                                           ("complex<f32>", "LT"), ("f32", "LT")])  # fmt: skip
def test_sort_by_the_second_operand_and_other_comparators_is_xla_s_sort(key_t, form) -> None:
    rng = np.random.default_rng(5)
    types = ["i32", key_t]
    arrays = [random_array(rng, (3, 5), t, special=True) for t in types]
    arrays[1].reshape(-1)[:3] = arrays[1].reshape(-1)[-3:]  # ties
    text = sort_module(types, "3x5", _sort_body(types, 1, form), dim=1)
    assert_same(run_lax(text, arrays), run_xla(text, arrays), rtol=0, atol=0, what=key_t)


# --- gather and scatter -------------------------------------------------------------------------


def _with_vector(draw: st.DrawFn, batch: Sequence[int], k: int) -> tuple[tuple[int, ...], int]:
    """Indices shape with the index vector (length k) at a drawn position, and that position
    (== rank of batch: implicit, only for k == 1)."""
    positions = len(batch) + (2 if k == 1 else 1)
    ivd = draw(st.integers(0, positions - 1))
    if ivd == len(batch) + 1:  # implicit trailing vector of one index
        return tuple(batch), len(batch)
    return (*batch[:ivd], k, *batch[ivd:]), ivd


@st.composite
def gathers(draw: st.DrawFn) -> tuple:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    rank = len(shape)
    start_map = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    collapsed = sorted(d for d in start_map if draw(st.booleans()))
    sizes = [1 if d in collapsed else draw(st.integers(1, shape[d])) for d in range(rank)]
    batch = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    idx_shape, ivd = _with_vector(draw, batch, len(start_map))
    n_offset = rank - len(collapsed)
    out_rank = len(batch) + n_offset
    offset_dims = sorted(draw(st.permutations(range(out_rank)))[:n_offset])
    dn = GatherDims(offset_dims, collapsed, start_map, ivd)
    offsets = iter(s for d, s in enumerate(sizes) if d not in collapsed)
    batches = iter(batch)
    out_shape = [next(offsets) if d in offset_dims else next(batches) for d in range(out_rank)]
    return shape, idx_shape, dn, sizes, out_shape


def _t(shape: Sequence[int], t: str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{t}>"


@SPACE
@given(case=gathers(), seed=st.integers(0, 2**16))
def test_gather_with_the_index_vector_at_any_position(case: tuple, seed: int) -> None:
    shape, idx_shape, dn, sizes, out_shape = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    idx = rng.integers(-2, max(shape) + 2, idx_shape).astype(np.int32)
    text = gather_module(_t(shape, "f64"), _t(idx_shape, "i32"), _t(out_shape, "f64"), dn, sizes)
    want = np_gather(x, idx, dn, sizes, out_shape)
    assert_same(run_lax(text, [x, idx]), [want], rtol=0, atol=0, what=str(case))


@st.composite
def scatters(draw: st.DrawFn) -> tuple:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    rank = len(shape)
    to_operand = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    inserted = sorted(d for d in to_operand if draw(st.booleans()))
    window = [draw(st.integers(1, shape[d])) for d in range(rank) if d not in inserted]
    batch = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    idx_shape, ivd = _with_vector(draw, batch, len(to_operand))
    upd_rank = len(batch) + len(window)
    window_dims = sorted(draw(st.permutations(range(upd_rank)))[: len(window)])
    sizes, batches = iter(window), iter(batch)
    upd_shape = [next(sizes) if d in window_dims else next(batches) for d in range(upd_rank)]
    dn = ScatterDims(window_dims, inserted, to_operand, ivd)
    return shape, idx_shape, upd_shape, dn, draw(st.sampled_from(["add", "replace", "subtract"]))


@SPACE
@given(case=scatters(), seed=st.integers(0, 2**16))
def test_scatter_with_the_index_vector_at_any_position(case: tuple, seed: int) -> None:
    shape, idx_shape, upd_shape, dn, how = case
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, shape).astype(np.int64)
    u = rng.integers(-50, 50, upd_shape).astype(np.int64)
    idx = rng.integers(-2, max(shape) + 1, idx_shape).astype(np.int32)
    if how in ("add", "subtract"):  # subtract has no JAX scatter: the element-by-element path
        body = (f"      %s = stablehlo.{how} %x0, %y0 : tensor<i64>\n"
                "      stablehlo.return %s : tensor<i64>")  # fmt: skip
        combine = (lambda a, b: [a + b]) if how == "add" else (lambda a, b: [a - b])
    else:
        body = "      stablehlo.return %y0 : tensor<i64>"
        combine = lambda a, b: [b]  # noqa: E731
        # replace with duplicate indices is implementation-defined: keep indices unique
        flat = np.moveaxis(idx, dn.index_vector_dim, -1) if dn.index_vector_dim < idx.ndim else idx
        rows = flat.reshape(-1, flat.shape[-1] if dn.index_vector_dim < idx.ndim else 1)
        if len({tuple(r) for r in rows.tolist()}) != len(rows):
            return
        if any(w > 1 for w in _window_sizes(shape, dn, upd_shape)):
            return  # overlapping windows of distinct starts also collide
    m = ScatterModule([_t(shape, "i64")], _t(idx_shape, "i32"), [_t(upd_shape, "i64")], dn, body)
    want = np_scatter([x], idx, [u], dn, combine)
    assert_same(run_lax(m.text(), [x, idx, u]), want, rtol=0, atol=0, what=str(case))


def _window_sizes(shape: Sequence[int], dn: ScatterDims, upd_shape: Sequence[int]) -> list[int]:
    sizes, pos = [], 0
    for d in range(len(shape)):
        if d in dn.inserted_window_dims:
            sizes.append(1)
        else:
            sizes.append(int(upd_shape[dn.update_window_dims[pos]]))
            pos += 1
    return sizes


@pytest.mark.parametrize("how", ["add", "or", "multiply", "and"])
def test_boolean_scatter_adds_as_or_and_multiplies_as_and(how: str) -> None:
    # spec.md: on i1, add is logical or and multiply logical and.
    rng = np.random.default_rng(7)
    x = rng.random((5, 3)) < 0.5
    u = rng.random((4, 3)) < 0.5
    idx = np.array([[0], [2], [2], [4]], np.int32)  # a duplicate index: updates combine
    dn = ScatterDims([1], [0], [0], 1)
    body = ("      %s = stablehlo." + how + " %x0, %y0 : tensor<i1>\n"
            "      stablehlo.return %s : tensor<i1>")  # fmt: skip
    m = ScatterModule([_t((5, 3), "i1")], _t((4, 1), "i32"), [_t((4, 3), "i1")], dn, body)
    combine = (lambda a, b: [a or b]) if how in ("add", "or") else (lambda a, b: [a and b])
    want = np_scatter([x], idx, [u], dn, combine)
    assert_same(run_lax(m.text(), [x, idx, u]), want, rtol=0, atol=0, what=how)


# --- reduce_window ------------------------------------------------------------------------------

_IDENTITY = {("add", "f64"): "0.000000e+00", ("maximum", "f64"): "0xFFF0000000000000",
             ("minimum", "f64"): "0x7FF0000000000000", ("add", "i32"): "0",
             ("maximum", "i32"): "-2147483648", ("minimum", "i32"): "2147483647"}  # fmt: skip


@st.composite
def windows(draw: st.DrawFn) -> tuple:
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 5)) for _ in range(rank)]
    g: dict[str, list[int]] = {"window_dimensions": [], "window_strides": [],
                               "base_dilations": [], "window_dilations": []}  # fmt: skip
    padding = []
    for s in shape:
        base, wdil = draw(st.integers(1, 2)), draw(st.integers(1, 2))
        lo, hi = draw(st.integers(-1, 2)), draw(st.integers(-1, 2))
        size = (s - 1) * base + 1 + lo + hi
        if size < 1:
            lo, hi = 0, 0
            size = (s - 1) * base + 1
        win = draw(st.integers(1, max(1, (size - 1) // wdil + 1)))
        g["window_dimensions"].append(win)
        g["window_strides"].append(draw(st.integers(1, 2)))
        g["base_dilations"].append(base)
        g["window_dilations"].append(wdil)
        padding.append((lo, hi))
    op = draw(st.sampled_from(["add", "maximum", "minimum"]))
    t = draw(st.sampled_from(["f64", "i32"]))
    init = draw(st.sampled_from(["identity", "argument", "0", "3"]))
    return tuple(shape), g, padding, op, t, init


@SPACE
@given(case=windows(), seed=st.integers(0, 2**16))
def test_reduce_window_with_any_geometry_and_init(case: tuple, seed: int) -> None:
    shape, g, padding, op, t, init = case
    rng = np.random.default_rng(seed)
    dt = np.float64 if t == "f64" else np.int32
    x = (rng.standard_normal(shape) * 10).astype(dt)
    const = {"identity": _IDENTITY[op, t], "argument": None}.get(init, init)
    if const is not None and t == "f64" and not const.startswith("0x"):
        const = f"{float(const):e}"
    text = window_text(op, shape, t, g, padding, const)
    if const is None:
        init_value = dt(rng.integers(-5, 5))
        args = [x, np.asarray(init_value, dt)]
    else:
        init_value = {"0xFFF0000000000000": -np.inf, "0x7FF0000000000000": np.inf}.get(const)
        init_value = dt(init_value if init_value is not None else float(const))
        args = [x]
    r = len(shape)
    want = ref.reduce_window(op, x, init_value, g["window_dimensions"], g["window_strides"],
                             padding, g["base_dilations"], g["window_dilations"],
                             as_xla=True)  # fmt: skip
    assert r == len(want.shape)
    assert_same(run_lax(text, args), [want], rtol=1e-12, atol=1e-12, what=str(case))


@pytest.mark.parametrize(("op", "t"), [("add", "f64"), ("maximum", "f64"), ("maximum", "i32")])
@pytest.mark.parametrize(
    ("shape", "g", "padding"),
    [
        ((3, 4), {"window_dimensions": [2, 2], "window_strides": [1, 1], "base_dilations": [2, 1],
                  "window_dilations": [1, 1]}, [(0, 0), (0, 0)]),
        ((5, 4), {"window_dimensions": [2, 2], "window_strides": [1, 2], "base_dilations": [1, 1],
                  "window_dilations": [1, 1]}, [(-1, 0), (1, -1)]),
        ((4,), {"window_dimensions": [3], "window_strides": [1], "base_dilations": [3],
                "window_dilations": [2]}, [(1, -2)]),
    ],
)  # fmt: skip
def test_reduce_window_with_an_identity_init_and_holes_or_crops(op, t, shape, g, padding) -> None:
    # An init that is the identity takes JAX's monoid window directly, which has no base
    # dilation and no negative padding: those must still be honoured. Integer max: every value
    # negative, so a hole taken as 0 would show.
    x = np.random.default_rng(4).standard_normal(shape) * 10
    if t == "i32":
        x = -1 - np.abs(x).astype(np.int32)
    text = window_text(op, shape, t, g, padding, _IDENTITY[op, t])
    init = 0.0 if op == "add" else (-np.inf if t == "f64" else np.iinfo(np.int32).min)
    want = ref.reduce_window(op, x, init, g["window_dimensions"], g["window_strides"], padding,
                             g["base_dilations"], g["window_dilations"], as_xla=True)  # fmt: skip
    assert_same(run_lax(text, [x]), [want], rtol=1e-12, atol=1e-12, what=op)


@pytest.mark.parametrize("op", ["add", "maximum"])
def test_reduce_window_gradient_with_crops_and_holes(op: str) -> None:
    # Reverse mode through negative padding and base dilation, against central differences of
    # the numpy reference (distinct values: max has one winner per window).
    import jax

    import juliabridge

    shape, padding = (5, 4), [(-1, 1), (1, -1)]
    g = {"window_dimensions": [2, 2], "window_strides": [1, 2], "base_dilations": [1, 2],
         "window_dilations": [1, 1]}  # fmt: skip
    text = window_text(op, shape, "f64", g, padding, _IDENTITY[op, "f64"])
    fn = juliabridge.load_mlir(text, backend="lax")
    x = np.random.default_rng(6).permutation(20).reshape(shape).astype(np.float64)
    init = 0.0 if op == "add" else -np.inf

    def ref_sum(v: np.ndarray) -> float:
        out = ref.reduce_window(op, v, init, g["window_dimensions"], g["window_strides"], padding,
                                g["base_dilations"], g["window_dilations"], as_xla=True)  # fmt: skip
        return float(np.sum(out * np.arange(1, out.size + 1).reshape(out.shape)))

    weights = np.arange(1, ref.reduce_window(op, x, init, g["window_dimensions"],
                        g["window_strides"], padding, g["base_dilations"],
                        g["window_dilations"], as_xla=True).size + 1)  # fmt: skip
    got = jax.grad(lambda v: (fn(v)[0].reshape(-1) * weights).sum())(x)
    want = np.zeros(shape)
    for i in np.ndindex(*shape):
        e = np.zeros(shape)
        e[i] = 1e-3
        want[i] = (ref_sum(x + e) - ref_sum(x - e)) / 2e-3
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_reverse_mode_through_a_dilated_max_window_is_refused_by_name() -> None:
    # JAX has no reverse rule for max windows with window dilation: a typed error naming it,
    # while forward mode and the values are fine.
    import jax

    import juliabridge

    g = {"window_dimensions": [2], "window_strides": [1], "base_dilations": [1],
         "window_dilations": [2]}  # fmt: skip
    text = window_text("maximum", (6,), "f64", g, [(0, 0)], _IDENTITY["maximum", "f64"])
    fn = juliabridge.load_mlir(text, backend="lax")
    x = np.arange(6.0)
    np.testing.assert_array_equal(np.asarray(fn(x)[0]), [2.0, 3.0, 4.0, 5.0])
    jax.jvp(lambda v: fn(v)[0], (x,), (np.ones(6),))
    with pytest.raises(juliabridge.TransformError, match="window dilation"):
        jax.grad(lambda v: fn(v)[0].sum())(x)
