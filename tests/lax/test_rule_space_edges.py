"""The lax rules at the edges of their space: values no ordering settles, and attributes
outside what the spec allows (issue 38; tests/lax/test_rule_space.py has the common space).

- sort by complex keys whose parts are NaN, infinite, signed zeros or tied, in either
  direction and argument order, alone or in a lexicographic chain with an integer key: against
  XLA's own sort with the spec's comparator written out on the real and imaginary parts
  (spec.md#compare: lexicographic, each part an IEEE compare). NaN makes the comparator no
  strict weak order, so the result is the algorithm's and the lift must run XLA's, not
  `lax.sort`'s total order;
- sort dimensions from -rank-1 to rank: a valid one (negative counts from the end) sorts like
  numpy along that axis, any other is a typed refusal;
- convolution dimension numbers drawn anywhere, valid or not: a permutation of each operand's
  axes computes spec.md#convolution (numpy), anything else is a typed refusal at load;
- gather and scatter batching dims at every position of the indices, the index vector's own
  included: valid ones follow spec.md's formulas (numpy), the index vector dim (which
  spec.md#gather C and #scatter C exclude) is a typed refusal;
- counted loops whose unsigned counter crosses the signed maximum (ui8 to ui64, up and down),
  and loops walking away from their bound until the counter wraps at the end of its range
  (signed and unsigned, either compare side), against test_rule_space.py's simulation.

The sizes are test_rule_space.py's (JULIABRIDGE_SPACE_EXAMPLES, default 20 per generated test).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import juliabridge
from juliabridge.errors import JuliaBridgeError

from . import indexing_reference as ix
from .oracles import assert_same, run_lax, run_xla
from .test_conv import Conv, conv_reference, conv_text
from .test_rule_space import SPACE, _loop_text, _simulate, _t
from .test_sort import sort_module

pytestmark = pytest.mark.usefixtures("x64")


# --- sort by complex keys with NaN, infinities and signed zeros ---------------------------------

_PARTS = np.array([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan], np.float32)
_C = "complex<f32>"


def _compare(out: str, direction: str, lhs: str, rhs: str, t: str) -> str:
    return f"      {out} = stablehlo.compare {direction}, {lhs}, {rhs} : (tensor<{t}>, tensor<{t}>) -> tensor<i1>\n"


def _complex_compare(out: str, direction: str, lhs: str, rhs: str, spelled: bool) -> str:
    """`compare direction` of two complex values, as one op or (spelled) as spec.md#compare
    defines it on complex numbers: lexicographic on (real, imag), each an IEEE compare."""
    if not spelled:
        return _compare(out, direction, lhs, rhs, _C)
    n = out.lstrip("%")
    parts = "".join(
        f"      %{n}_{p}{s} = stablehlo.{fn} {v} : (tensor<{_C}>) -> tensor<f32>\n"
        for p, v in (("l", lhs), ("r", rhs))
        for s, fn in (("re", "real"), ("im", "imag"))
    )
    if direction == "EQ":
        return (parts + _compare(f"%{n}_a", "EQ", f"%{n}_lre", f"%{n}_rre", "f32")
                + _compare(f"%{n}_b", "EQ", f"%{n}_lim", f"%{n}_rim", "f32")
                + f"      {out} = stablehlo.and %{n}_a, %{n}_b : tensor<i1>\n")  # fmt: skip
    return (parts + _compare(f"%{n}_a", direction, f"%{n}_lre", f"%{n}_rre", "f32")
            + _compare(f"%{n}_e", "EQ", f"%{n}_lre", f"%{n}_rre", "f32")
            + _compare(f"%{n}_b", direction, f"%{n}_lim", f"%{n}_rim", "f32")
            + f"      %{n}_t = stablehlo.and %{n}_e, %{n}_b : tensor<i1>\n"
            + f"      {out} = stablehlo.or %{n}_a, %{n}_t : tensor<i1>\n")  # fmt: skip


def _complex_sort_body(form: str, direction: str, key: int, other: int, spelled: bool) -> str:
    """The comparator: the complex operand `key` alone (`plain`, `swapped` arguments), or first
    (`complex-first`) or second (`complex-second`) in a chain with the i32 operand `other`."""
    ret = "      stablehlo.return %p : tensor<i1>"
    if form in ("plain", "swapped"):
        lhs, rhs = (f"%l{key}", f"%r{key}") if form == "plain" else (f"%r{key}", f"%l{key}")
        return _complex_compare("%p", direction, lhs, rhs, spelled) + ret
    head, tail = (key, other) if form == "complex-first" else (other, key)

    def strict(out: str, k: int) -> str:
        if k == key:
            return _complex_compare(out, direction, f"%l{k}", f"%r{k}", spelled)
        return _compare(out, direction, f"%l{k}", f"%r{k}", "i32")

    eq = (_complex_compare("%q", "EQ", f"%l{head}", f"%r{head}", spelled) if head == key
          else _compare("%q", "EQ", f"%l{head}", f"%r{head}", "i32"))  # fmt: skip
    return (strict("%h", head) + eq + strict("%s", tail)
            + "      %a = stablehlo.and %q, %s : tensor<i1>\n"
            + "      %p = stablehlo.or %h, %a : tensor<i1>\n" + ret)  # fmt: skip


@st.composite
def complex_sorts(draw: st.DrawFn) -> tuple:
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=2)))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    form = draw(st.sampled_from(["plain", "swapped", "complex-first", "complex-second"]))
    order = draw(st.permutations([0, 1, 2]))  # where the complex key, the i32 key, the payload go
    return (shape, dim, form, draw(st.sampled_from(["LT", "GT"])), order,
            draw(st.booleans()), draw(st.integers(0, 2**16)))  # fmt: skip


@SPACE
@given(case=complex_sorts())
def test_complex_keys_with_nan_infinities_and_signed_zeros_sort_as_xla_s_sort(case) -> None:
    shape, dim, form, direction, order, stable, seed = case
    rng = np.random.default_rng(seed)
    keys = np.empty(shape, np.complex64)  # parts set one by one: 1j * inf would be nan + inf j
    keys.real, keys.imag = rng.choice(_PARTS, shape), rng.choice(_PARTS, shape)
    ints = rng.integers(0, 3, shape).astype(np.int32)  # a second key with ties
    payload = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    arrays: list[np.ndarray] = [np.empty(0)] * 3
    for slot, a in zip(order, (keys, ints, payload)):
        arrays[slot] = a
    types = [_C if a.dtype == np.complex64 else "i32" for a in arrays]
    key, other = order[0], order[1]

    def text(spelled: bool) -> str:
        body = _complex_sort_body(form, direction, key, other, spelled)
        return sort_module(types, "x".join(map(str, shape)), body, dim=dim, stable=stable)

    got = run_lax(text(False), arrays)
    want = run_xla(text(True), arrays)  # XLA's sort, the spec's comparator on f32 parts
    what = f"{case}: keys {keys.tolist()}"
    # The payload is a permutation of distinct numbers: equal payloads mean the same order.
    assert_same([got[order[2]]], [want[order[2]]], rtol=0, atol=0, what=what)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.dtype.kind == "c":  # NaN parts compared as such (a complex NaN is NaN in any part)
            g, w = np.stack([g.real, g.imag]), np.stack([w.real, w.imag])
        np.testing.assert_array_equal(g, w, err_msg=what)


# --- sort dimensions in and out of range --------------------------------------------------------


@pytest.mark.parametrize("dim", range(-3, 3))
def test_a_sort_dimension_counts_from_the_end_when_negative_and_is_refused_outside(dim) -> None:
    rng = np.random.default_rng(dim + 3)
    x = rng.integers(-3, 4, (3, 4)).astype(np.int32)  # ties: the sort is stable
    payload = np.arange(12, dtype=np.int32).reshape(3, 4)
    body = _compare("%p", "LT", "%l0", "%r0", "i32") + "      stablehlo.return %p : tensor<i1>"
    text = sort_module(["i32", "i32"], "3x4", body, dim=dim)
    if not -2 <= dim < 2:
        with pytest.raises(JuliaBridgeError, match="dimension"):
            run_lax(text, [x, payload])
        return
    order = np.argsort(x, axis=dim, kind="stable")
    want = [np.take_along_axis(a, order, axis=dim) for a in (x, payload)]
    assert_same(run_lax(text, [x, payload]), want, rtol=0, atol=0, what=f"dimension {dim}")


# --- convolution dimension numbers, valid or not ------------------------------------------------


@st.composite
def dimension_numbers(draw: st.DrawFn) -> tuple:
    """Rank-3 or -4 convolutions whose dimension numbers are a drawn permutation per operand,
    or, in about half the cases, one entry moved anywhere in [-1, rank] (a repeat, out of
    range) or a spatial list one too long or short."""
    rank = draw(st.integers(3, 4))
    perms = [list(draw(st.permutations(range(rank)))) for _ in range(3)]
    broken = draw(st.sampled_from(["none", "none", "entry", "spatial"]))
    spec, at = draw(st.integers(0, 2)), draw(st.integers(0, rank - 1))
    if broken == "entry":
        perms[spec][at] = draw(st.integers(-1, rank).filter(lambda v: v != perms[spec][at]))
    elif broken == "spatial":
        perms[spec] = perms[spec][:-1] if draw(st.booleans()) else [*perms[spec], 0]
    return rank, perms, broken


def _raw_conv(rank: int, perms: list[list[int]]) -> str:
    (ib, if_, *isp), (ko, ki, *ks), (ob, of, *os_) = perms
    dn = (f"#stablehlo.conv<raw input_batch_dimension = {ib}, input_feature_dimension = {if_}, "
          f"input_spatial_dimensions = {isp}, kernel_input_feature_dimension = {ki}, "
          f"kernel_output_feature_dimension = {ko}, kernel_spatial_dimensions = {ks}, "
          f"output_batch_dimension = {ob}, output_feature_dimension = {of}, "
          f"output_spatial_dimensions = {os_}>")  # fmt: skip
    t = _t([2] * rank, "f32")
    return f"""module {{
  func.func @main(%l: {t}, %r: {t}) -> {t} {{
    %0 = "stablehlo.convolution"(%l, %r) {{batch_group_count = 1 : i64,
      dimension_numbers = {dn}, feature_group_count = 1 : i64}} : ({t}, {t}) -> {t}
    return %0 : {t}
  }}
}}"""


def _layout(perm: list[int], first: str, second: str) -> str:
    """The layout string of test_conv.Conv ('b01f') for axis positions (first, second, 0, 1..)."""
    names = [first, second, *(str(d) for d in range(len(perm) - 2))]
    out = [""] * len(perm)
    for name, pos in zip(names, perm):
        out[pos] = name
    return "".join(out)


@SPACE
@given(case=dimension_numbers(), seed=st.integers(0, 2**16))
def test_any_convolution_dimension_numbers_compute_or_are_refused(case, seed) -> None:
    rank, perms, broken = case
    if broken != "none":
        # Not a permutation of the axes: refused before anything runs, whatever refuses it.
        with pytest.raises(JuliaBridgeError):
            juliabridge.load_mlir(_raw_conv(rank, perms), backend="lax")
        return
    rng = np.random.default_rng(seed)
    shape = tuple(int(v) for v in rng.integers(1, 4, rank))
    lhs = _layout(perms[0], "b", "f")
    rhs = _layout(perms[1], "o", "i")
    kernel = [2 if c.isdigit() else 1 for c in rhs]  # windows of 2 along each spatial dim
    lhs_shape = tuple(max(s, 2) if c.isdigit() else s for s, c in zip(shape, lhs))
    feature = lhs_shape[lhs.index("f")]
    rhs_shape = tuple(feature if c == "i" else 2 if c == "o" else k for c, k in zip(rhs, kernel))
    c = Conv(lhs, rhs, _layout(perms[2], "b", "f"), lhs_shape, rhs_shape)
    text, _ = conv_text(c, "f64")
    x, w = rng.standard_normal(lhs_shape), rng.standard_normal(rhs_shape)
    want = conv_reference(c, x, w, np.dtype(np.float64))
    assert_same(run_lax(text, [x, w]), [want], rtol=1e-12, atol=1e-12, what=str(c))


# --- gather and scatter batching dims at every position -----------------------------------------

# Operand 3x4 (dim 0 the batching dim), indices of shape (3, 2, 1) in some order: a batching dim
# of 3, another batch dim of 2 and the index vector of 1 (into operand dim 1).
_SIZES = {"batching": 3, "batch": 2, "vector": 1}


@pytest.mark.parametrize(
    "layout", list(itertools.permutations(["batching", "batch", "vector"])), ids="-".join
)
@pytest.mark.parametrize("declared", ["batching", "vector"])
def test_gather_and_scatter_batching_dims_at_every_position_of_the_indices(layout, declared):
    idx_shape = tuple(_SIZES[n] for n in layout)
    ivd = layout.index("vector")
    sbatch = layout.index(declared)  # the indices dim declared as the batching dim
    rng = np.random.default_rng(len(layout) * ivd + sbatch)
    x = rng.standard_normal((3, 4))
    idx = rng.integers(-1, 5, idx_shape).astype(np.int32)
    res = [3, 2] if layout.index("batching") < layout.index("batch") else [2, 3]
    g = ix.GatherDims([], [1], [1], ivd, [0], [sbatch])
    gather = ix.gather_module(_t((3, 4), "f64"), _t(idx_shape, "i32"), _t(res, "f64"), g, [1, 1])
    s = ix.ScatterDims([], [1], [1], ivd, [0], [sbatch])
    body = (
        "      %s = stablehlo.add %x0, %y0 : tensor<f64>\n      stablehlo.return %s : tensor<f64>"
    )
    scatter = ix.ScatterModule([_t((3, 4), "f64")], _t(idx_shape, "i32"), [_t(res, "f64")], s, body)
    u = rng.standard_normal(res)
    if declared == "vector":  # spec.md#gather (C) and #scatter (C): not the index vector dim
        for text in (gather, scatter.text()):
            with pytest.raises(JuliaBridgeError, match="index_vector_dim"):
                juliabridge.load_mlir(text, backend="lax")
        return
    want = ix.np_gather(x, idx, g, [1, 1], res)
    assert_same(run_lax(gather, [x, idx]), [want], rtol=0, atol=0, what=f"gather {layout}")
    want = ix.np_scatter([x], idx, [u], s, lambda a, b: [a + b])
    got = run_lax(scatter.text(), [x, idx, u])
    assert_same(got, want, rtol=1e-12, atol=1e-12, what=f"scatter {layout}")


# --- counted loops whose unsigned counter crosses the signed maximum ----------------------------


@pytest.mark.parametrize("ty", ["ui8", "ui16", "ui32", "ui64"])
@pytest.mark.parametrize(
    ("direction", "step", "down"),
    [("LT", "iv + 1", False), ("LE", "1 + iv", False), ("NE", "iv + 1", False),
     ("GT", "iv - 1", True), ("GE", "iv - 1", True), ("NE", "iv - 1", True)],
)  # fmt: skip
def test_an_unsigned_counter_crossing_the_signed_maximum_runs_its_trips(ty, direction, step, down):
    # Start and bound on either side of 2**(bits-1): read as signed numbers they would be
    # on the wrong sides of each other.
    dtype = np.dtype(ty.replace("ui", "uint"))
    half = 1 << (8 * dtype.itemsize - 1)
    start, bound = (half + 2, half - 3) if down else (half - 3, half + 2)
    want = _simulate(dtype, start, direction, bound, step, 1, True)
    assert want is not None and want[1] >= 5
    iv, acc = run_lax(_loop_text(ty, start, direction, bound, step, 1, True), [np.float64(0.0)])
    assert (int(iv), float(acc)) == (want[0], float(want[1])), (ty, direction, want)


_WIDE = {"ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
         "i8": np.int8, "i32": np.int32, "i64": np.int64}  # fmt: skip
_AWAY = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}  # the same compare, bound on the left


@pytest.mark.parametrize("ty", sorted(_WIDE))
@pytest.mark.parametrize("direction", ["LT", "LE", "GT", "GE"])
@pytest.mark.parametrize("iv_first", [True, False])
def test_a_loop_walking_away_from_its_bound_runs_until_its_counter_wraps(ty, direction, iv_first):
    # `iv < b` counting down (`iv > b` counting up) runs to the end of the counter's range and
    # wraps to the other end, where it stops: a few trips from near that end. (jaxlib 0.10's
    # XLA ran such an unsigned while loop 0 times.)
    dtype = np.dtype(_WIDE[ty])
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    down = direction in ("LT", "LE")
    start, bound = (lo + 2, hi - 1) if down else (hi - 2, lo + 1)
    step = "iv - 1" if down else "iv + 1"
    written = direction if iv_first else _AWAY[direction]
    want = _simulate(dtype, start, written, bound, step, 1, iv_first)
    assert want is not None and want[1] == 3, want
    text = _loop_text(ty, start, written, bound, step, 1, iv_first)
    iv, acc = run_lax(text, [np.float64(0.0)])
    assert (int(iv), float(acc)) == (want[0], float(want[1])), (ty, written, iv_first, want)
