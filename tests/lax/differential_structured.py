"""Generators of the differential harness for the structured op families: gather, scatter,
convolution, dot_general, control flow (while, case, if) and linalg (cholesky,
triangular_solve). Each draws shapes, attributes and dimension numbers, element types and
edge values, and returns a `differential.Case` that tests/lax/test_differential.py runs on
lax, the xla backend and the reference interpreter like the elementwise families.

Float data of the summing ops (convolution, dot_general, scatter-add) are small integers
and halves, so every partial sum is exact and the order of accumulation (which the spec
leaves open) cannot show; NaN, infinities and signed zeros still enter, since no order
changes whether a sum of them is NaN, infinite or a zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from juliabridge.backends.lax.valtypes import ELEMENT_TYPES

from .differential import Case, array_of, features_of
from .indexing_reference import GatherDims, ScatterDims, ScatterModule, gather_module
from .test_conv import Conv, conv_text
from .test_dot import dot_text

SPECIALS = (0.0, -0.0, np.inf, -np.inf, np.nan)


def _tensor(shape: tuple[int, ...], t: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + t + ">"


def exact_floats(draw: Any, t: str, shape: tuple[int, ...], specials: bool = True) -> np.ndarray:
    """Small multiples of 1/2 (sums exact in every float type), sometimes a special value."""
    n = int(np.prod(shape))
    pool = st.sampled_from([v / 2 for v in range(-6, 7)])
    if specials:
        pool = pool | st.sampled_from(SPECIALS)
    vals = draw(st.lists(pool, min_size=n, max_size=n))
    return np.array(vals, np.float64).reshape(shape).astype(ELEMENT_TYPES[t])


def values(draw: Any, t: str, shape: tuple[int, ...], *, exact: bool = False) -> np.ndarray:
    """Data of type `t`: edge values (`array_of`) or, for summing ops, exact floats."""
    if exact and t in ("f16", "bf16", "f32", "f64"):
        return exact_floats(draw, t, shape)
    return array_of(draw, t, int(np.prod(shape))).reshape(shape)


def _ints(draw: Any, shape: tuple[int, ...], lo: int, hi: int, t: str) -> np.ndarray:
    n = int(np.prod(shape))
    vals = draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
    return np.array(vals, np.int64).reshape(shape).astype(ELEMENT_TYPES[t])


# --- gather ----------------------------------------------------------------------------------

INDEX_TYPES = ("i32", "i64", "i8", "ui32")


@st.composite
def gather_case(draw: Any) -> Case:
    """Any start_index_map/collapsed dims/offset dims placement over a rank-2 or -3 operand;
    indices out of range on both sides (the spec clamps the start)."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    t = draw(st.sampled_from(("f32", "i32", "bf16", "f16", "i8", "f64")))
    it = draw(st.sampled_from(INDEX_TYPES))
    smap = draw(st.permutations(range(rank)))[: draw(st.integers(1, rank))]
    sizes = [draw(st.integers(0 if d not in smap else 1, shape[d])) for d in range(rank)]
    collapsed = sorted(d for d in smap if sizes[d] == 1 and draw(st.booleans()))
    nbatch = draw(st.integers(0, 2))
    bshape = tuple(draw(st.lists(st.integers(1, 3), min_size=nbatch, max_size=nbatch)))
    ivd = draw(st.integers(0, nbatch))
    idx_shape = (*bshape[:ivd], len(smap), *bshape[ivd:])
    if len(smap) == 1 and draw(st.booleans()):  # the index vector dim past the last: implicit
        ivd, idx_shape = nbatch, bshape
    lo = 0 if it.startswith("u") else -2
    idx = _ints(draw, idx_shape, lo, max(shape) + 1, it)
    offsets = [sizes[d] for d in range(rank) if d not in collapsed]
    out_rank = nbatch + len(offsets)
    offset_dims = sorted(draw(st.permutations(range(out_rank)))[: len(offsets)])
    out, b_it, o_it = [], iter(bshape), iter(offsets)
    for d in range(out_rank):
        out.append(next(o_it) if d in offset_dims else next(b_it))
    dn = GatherDims(offset_dims, collapsed, list(smap), ivd)
    x = values(draw, t, shape)
    text = gather_module(_tensor(shape, t), _tensor(idx_shape, it), _tensor(tuple(out), t), dn,
                         sizes)  # fmt: skip
    feats = features_of([x]) | {it}
    vectors = idx.reshape(-1, 1) if idx_shape == bshape else np.moveaxis(idx, ivd, -1)
    for vec in np.asarray(vectors).reshape(-1, len(smap)).astype(np.int64):
        if any(v < 0 or v + sizes[d] > shape[d] for v, d in zip(vec, smap)):
            feats.add("out-of-range")
    return Case("gather", "gather", text, [x, idx], feats)


# --- scatter ---------------------------------------------------------------------------------

SCATTER_BODIES = {
    "add": "      %s = stablehlo.add %x0, %y0 : tensor<{e}>\n      stablehlo.return %s : tensor<{e}>",
    "max": "      %s = stablehlo.maximum %x0, %y0 : tensor<{e}>\n      stablehlo.return %s : tensor<{e}>",
    "min": "      %s = stablehlo.minimum %x0, %y0 : tensor<{e}>\n      stablehlo.return %s : tensor<{e}>",
    "mul": "      %s = stablehlo.multiply %x0, %y0 : tensor<{e}>\n      stablehlo.return %s : tensor<{e}>",
    "replace": "      stablehlo.return %y0 : tensor<{e}>",
}


@st.composite
def scatter_case(draw: Any) -> Case:
    """Scatter into a rank-1..3 operand with add/max/min/multiply/replace updates; indices
    out of range (the whole update window is then skipped) and repeated."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    t = draw(st.sampled_from(("f32", "i32", "f64", "f16", "i8", "ui8")))
    it = draw(st.sampled_from(("i32", "i64")))
    combine = draw(st.sampled_from(sorted(SCATTER_BODIES)))
    sdims = draw(st.permutations(range(rank)))[: draw(st.integers(1, rank))]
    inserted = sorted(d for d in sdims if draw(st.booleans()))
    window = [draw(st.integers(1, shape[d])) for d in range(rank) if d not in inserted]
    nscatter = draw(st.integers(1, 3))
    idx = _ints(draw, (nscatter, len(sdims)), -1, max(shape), it)
    upd_rank = 1 + len(window)
    pos = sorted(draw(st.permutations(range(upd_rank)))[: len(window)])
    ushape, w_it = [], iter(window)
    for d in range(upd_rank):
        ushape.append(next(w_it) if d in pos else nscatter)
    dn = ScatterDims(pos, inserted, list(sdims), 1)
    exact = combine in ("add", "mul")
    x, u = values(draw, t, shape, exact=exact), values(draw, t, tuple(ushape), exact=exact)
    mod = ScatterModule([_tensor(shape, t)], _tensor(idx.shape, it), [_tensor(tuple(ushape), t)],
                        dn, SCATTER_BODIES[combine].format(e=t))  # fmt: skip
    feats = features_of([x, u]) | {it, f"combine-{combine}"}
    full = [1 if d in inserted else window[[e for e in range(rank) if e not in inserted].index(d)]
            for d in range(rank)]  # fmt: skip
    starts = [tuple(int(v) for v in row) for row in idx]
    for row in starts:
        if any(v < 0 or v + full[d] > shape[d] for v, d in zip(row, sdims)):
            feats.add("out-of-range")
            if all(v < shape[d] and v + full[d] > 0 for v, d in zip(row, sdims)):
                feats.add("window-overhang")  # partly inside: spec and XLA differ
    if len(set(starts)) < len(starts) or any(full[d] > 1 for d in sdims):
        feats.add("overlap")  # windows may meet: the order of updates matters for replace
    return Case("scatter", "scatter", mod.text(), [x, idx, u], feats)


# --- convolution -----------------------------------------------------------------------------

CONV_LAYOUTS = (("bf0", "oi0", "bf0"), ("b0f", "0io", "b0f"), ("bf01", "oi01", "bf01"),
                ("b01f", "01io", "b01f"), ("fb01", "io01", "0bf1"))  # fmt: skip


@st.composite
def convolution_case(draw: Any) -> Case:
    """Layouts, strides, padding (negative too), lhs/rhs dilation, window reversal, feature
    or batch groups; f16/bf16/f32/f64/i32 data."""
    lhs_l, rhs_l, out_l = draw(st.sampled_from(CONV_LAYOUTS))
    n = len(lhs_l) - 2
    groups, bgroups = draw(st.sampled_from([(1, 1), (2, 1), (1, 2), (3, 1)]))
    cin = groups * draw(st.integers(1, 2))
    batch = bgroups * draw(st.integers(1, 2))
    cout = groups * bgroups * draw(st.integers(1, 2))
    spatial = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))
    kernel = [draw(st.integers(1, min(3, s + 1))) for s in spatial]
    dims = {"b": batch, "f": cin}
    lhs_shape = tuple(dims[c] if c in dims else spatial[int(c)] for c in lhs_l)
    kd = {"o": cout, "i": cin // groups}
    rhs_shape = tuple(kd[c] if c in kd else kernel[int(c)] for c in rhs_l)
    strides = tuple(draw(st.integers(1, 2)) for _ in range(n))
    padding = tuple((draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(n))
    lhs_dil = tuple(draw(st.integers(1, 2)) for _ in range(n))
    rhs_dil = tuple(draw(st.integers(1, 2)) for _ in range(n))
    reversal = tuple(draw(st.booleans()) for _ in range(n))
    prec = draw(st.sampled_from(["DEFAULT", "HIGH", "HIGHEST"]))
    c = Conv(lhs_l, rhs_l, out_l, lhs_shape, rhs_shape, strides, padding, lhs_dil, rhs_dil,
             reversal, groups, bgroups, (prec, prec))  # fmt: skip
    t = draw(st.sampled_from(("f32", "f64", "f16", "bf16", "i32")))
    text, out_shape = conv_text(c, t, generic=draw(st.booleans()))
    assume(0 not in out_shape)
    x, w = values(draw, t, lhs_shape, exact=True), values(draw, t, rhs_shape, exact=True)
    feats = features_of([x, w]) | {f"precision-{prec}"}
    # lhs dilation pads with zeros inside the input: the same as edge padding for inf and NaN
    feats |= {"padding"} if any(p for pair in padding for p in pair) or max(lhs_dil) > 1 else set()
    feats |= {"nonfinite"} if feats & {"inf", "nan"} else set()
    feats |= {"groups"} if groups > 1 else set()
    feats |= {"batch-groups"} if bgroups > 1 else set()
    spatial_out = [out_shape[k] for k, ch in enumerate(out_l) if ch.isdigit()]
    if (
        any(r and k > 1 for r, k in zip(reversal, kernel))
        and set(spatial_out) == {1}
        and kd["i"] == 1
        and kd["o"] == 1
    ):
        feats.add("reverse-whole-window")  # one window, one feature each way: XLA drops `reverse`
    return Case("convolution", "convolution", text, [x, w], feats)


# --- dot_general -----------------------------------------------------------------------------


@st.composite
def dot_general_case(draw: Any) -> Case:
    """Batch and contracting dims anywhere in both operands (and none of either), free dims on
    either side; integer data wraps, float data is exact; precision DEFAULT/HIGH/HIGHEST."""
    nb, nc = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    nfl, nfr = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    bsz = draw(st.lists(st.integers(1, 3), min_size=nb, max_size=nb))
    csz = draw(st.lists(st.integers(0, 4), min_size=nc, max_size=nc))
    fl = draw(st.lists(st.integers(1, 3), min_size=nfl, max_size=nfl))
    fr = draw(st.lists(st.integers(1, 3), min_size=nfr, max_size=nfr))

    def place(free: list[int]) -> tuple[list[int], list[int], list[int]]:
        kinds = [("b", k) for k in range(nb)] + [("c", k) for k in range(nc)]
        kinds += [("f", k) for k in range(len(free))]
        order = draw(st.permutations(kinds))
        sz = {"b": bsz, "c": csz, "f": free}
        shape = [sz[k][i] for k, i in order]
        return (
            shape,
            [order.index(("b", k)) for k in range(nb)],
            [order.index(("c", k)) for k in range(nc)],
        )

    ls, lb, lc = place(fl)
    rs, rb, rc = place(fr)
    t = draw(st.sampled_from(("f32", "f64", "f16", "bf16", "i8", "i32", "ui8", "i64")))
    prec = draw(st.sampled_from(["", "DEFAULT, DEFAULT", "HIGH, HIGH", "HIGHEST, HIGHEST"]))
    generic = draw(st.booleans())
    text = dot_text(ls, rs, lb, rb, lc, rc, t, precision=prec, generic=generic)
    x, y = values(draw, t, tuple(ls), exact=True), values(draw, t, tuple(rs), exact=True)
    feats = features_of([x, y]) | ({"batch"} if nb else set())
    return Case("dot_general", "dot_general", text, [x, y], feats)


# --- control flow ----------------------------------------------------------------------------

STEP = {"f32": "1.500000e+00", "f64": "1.500000e+00", "i32": "3", "i64": "3", "f16": "1.5"}


@st.composite
def while_case(draw: Any) -> Case:
    """A counted loop whose trip count is an argument (0, negative, a few), carrying a vector
    updated by a small elementwise body."""
    t = draw(st.sampled_from(sorted(STEP)))
    op = draw(st.sampled_from(["add", "multiply", "maximum", "subtract"]))
    tt = f"tensor<4x{t}>"
    x = values(draw, t, (4,))
    n = np.array(draw(st.integers(-2, 6)), np.int32)
    text = f"""module {{
  func.func @main(%x: {tt}, %n: tensor<i32>) -> ({tt}, tensor<i32>) {{
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %s = stablehlo.constant dense<{STEP[t]}> : {tt}
    %0:2 = stablehlo.while(%i = %c0, %a = %x) : tensor<i32>, {tt}
    cond {{
      %1 = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    }} do {{
      %1 = stablehlo.add %i, %c1 : tensor<i32>
      %2 = stablehlo.{op} %a, %s : {tt}
      stablehlo.return %1, %2 : tensor<i32>, {tt}
    }}
    return %0#1, %0#0 : {tt}, tensor<i32>
  }}
}}"""
    return Case("control", "while", text, [x, n], features_of([x]) | {f"body-{op}"})


@st.composite
def case_case(draw: Any) -> Case:
    """stablehlo.case over 1-4 branches with an index in and out of range (out of range takes
    the last branch)."""
    nbr = draw(st.integers(1, 4))
    t = draw(st.sampled_from(("f32", "i32", "f64")))
    tt = f"tensor<3x{t}>"
    ops = draw(st.lists(st.sampled_from(["abs", "negate", "add", "multiply", "minimum"]),
                        min_size=nbr, max_size=nbr))  # fmt: skip
    branches = []
    for op in ops:
        expr = f"stablehlo.{op} %x, %y : {tt}" if op in ("add", "multiply", "minimum") else (
            f"stablehlo.{op} %x : {tt}")  # fmt: skip
        branches.append(f"{{\n      %r = {expr}\n      stablehlo.return %r : {tt}\n    }}")
    idx = np.array(draw(st.integers(-2, nbr + 1)), np.int32)
    x, y = values(draw, t, (3,)), values(draw, t, (3,))
    text = f"""module {{
  func.func @main(%i: tensor<i32>, %x: {tt}, %y: {tt}) -> {tt} {{
    %0 = "stablehlo.case"(%i) ({", ".join(branches)}) : (tensor<i32>) -> {tt}
    return %0 : {tt}
  }}
}}"""
    feats = features_of([x, y]) | ({"out-of-range"} if not 0 <= idx < nbr else set())
    return Case("control", "case", text, [idx, x, y], feats)


@st.composite
def if_case(draw: Any) -> Case:
    """stablehlo.if on a predicate computed from the data (NaN compares false)."""
    t = draw(st.sampled_from(("f32", "f64", "i32", "f16")))
    direction = draw(st.sampled_from(["LT", "GE", "EQ", "NE"]))
    tt, s = f"tensor<3x{t}>", f"tensor<{t}>"
    x, y = values(draw, t, (3,)), values(draw, t, ())
    text = f"""module {{
  func.func @main(%x: {tt}, %y: {s}) -> {tt} {{
    %z0 = "stablehlo.slice"(%x) <{{start_indices = array<i64: 0>, limit_indices = array<i64: 1>, strides = array<i64: 1>}}> : ({tt}) -> tensor<1x{t}>
    %x0 = stablehlo.reshape %z0 : (tensor<1x{t}>) -> {s}
    %p = stablehlo.compare {direction}, %x0, %y : ({s}, {s}) -> tensor<i1>
    %0 = "stablehlo.if"(%p) ({{
      %r = stablehlo.negate %x : {tt}
      stablehlo.return %r : {tt}
    }}, {{
      %b = stablehlo.broadcast_in_dim %y, dims = [] : ({s}) -> {tt}
      %r = stablehlo.subtract %x, %b : {tt}
      stablehlo.return %r : {tt}
    }}) : (tensor<i1>) -> {tt}
    return %0 : {tt}
  }}
}}"""
    return Case("control", "if", text, [x, y], features_of([x, y]))


# --- linalg ----------------------------------------------------------------------------------


@st.composite
def cholesky_case(draw: Any) -> Case:
    """Positive definite matrices (with junk in the unread triangle) and ones that are not
    (indefinite, singular, NaN)."""
    t = draw(st.sampled_from(("f32", "f64")))
    n = draw(st.integers(1, 4))
    batch = draw(st.sampled_from([(), (2,)]))
    lower = draw(st.booleans())
    kind = draw(st.sampled_from(["pd", "pd", "indefinite", "singular", "semidefinite", "nan"]))
    m = exact_floats(draw, "f64", (*batch, n, n), specials=False)
    a = m @ np.swapaxes(m, -1, -2) + n * np.eye(n)
    if kind == "semidefinite":  # rank one: zero pivots after the first column
        v = m[..., :1] + 1
        a = v @ np.swapaxes(v, -1, -2)
    elif kind == "indefinite":
        a = a - 2 * np.abs(a).max() * np.eye(n)
    elif kind == "singular":
        a = np.zeros_like(a)
    elif kind == "nan":
        a[..., 0, 0] = np.nan
    junk = values(draw, "f64", a.shape, exact=True)
    junk = np.triu(junk, 1) if lower else np.tril(junk, -1)
    a = (a + np.nan_to_num(junk, nan=7.0, posinf=5.0, neginf=-5.0)).astype(ELEMENT_TYPES[t])
    ty = _tensor(a.shape, t)
    text = f"""module {{
  func.func @main(%a: {ty}) -> {ty} {{
    %0 = stablehlo.cholesky %a, lower = {str(lower).lower()} : {ty}
    return %0 : {ty}
  }}
}}"""
    feats = {t, f"cholesky-{kind}"} | ({"non-pd"} if kind != "pd" else set())
    feats |= {"semidefinite"} if kind in ("singular", "semidefinite") else set()
    # jaxlib's reference interpreter aborts its process on stablehlo.cholesky.
    return Case("linalg", "cholesky", text, [a], feats, interpret=False)


@st.composite
def triangular_solve_case(draw: Any) -> Case:
    """Every flag (left/right, lower/upper, unit diagonal, transpose) on well-conditioned
    triangles, batched or not, and a zero pivot now and then."""
    t = draw(st.sampled_from(("f32", "f64")))
    n, k = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    batch = draw(st.sampled_from([(), (2,)]))
    left, lower, unit = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    tr = draw(st.sampled_from(["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"]))
    a = exact_floats(draw, "f64", (*batch, n, n), specials=False) / 4 + 2 * np.eye(n)
    zero_pivot = draw(st.integers(0, 9)) == 0
    if zero_pivot:
        a[..., 0, 0] = 0.0
    b = values(draw, t, (*batch, n, k) if left else (*batch, k, n))
    a = a.astype(ELEMENT_TYPES[t])
    ta, tb = _tensor(a.shape, t), _tensor(b.shape, t)
    flags = f"left_side = {str(left).lower()}, lower = {str(lower).lower()}"
    flags += f", unit_diagonal = {str(unit).lower()}"
    text = f"""module {{
  func.func @main(%a: {ta}, %b: {tb}) -> {tb} {{
    %0 = "stablehlo.triangular_solve"(%a, %b) {{{flags}, transpose_a = #stablehlo<transpose {tr}>}} : ({ta}, {tb}) -> {tb}
    return %0 : {tb}
  }}
}}"""
    feats = features_of([b]) | ({"zero-pivot"} if zero_pivot and not unit else set())
    tiny = float(np.finfo(ELEMENT_TYPES[t]).tiny)
    fin = np.abs(b[np.isfinite(b) & (b != 0)])
    if fin.size and fin.min() < 16 * tiny:
        # a product of such an entry with one of A's (|a| < 16) can be a denormal
        feats.add("denormal")
    feats |= {"nonfinite"} if feats & {"inf", "nan", "zero-pivot", "extreme"} else set()
    # The interpreter aborts on ADJOINT and on batches with a non-unit diagonal.
    interp = tr != "ADJOINT" and (unit or not batch)
    # LAPACK's substitution and XLA's blocked solve (inverted diagonal blocks) round apart:
    # 9 ulp seen in f32 on a 2x2 batch; the spec leaves the algorithm open.
    return Case("linalg", "triangular_solve", text, [a, b], feats, interpret=interp, ulps=64)


# --- data movement ---------------------------------------------------------------------------

SHAPE_OPS = ("transpose", "reverse", "reshape", "broadcast_in_dim", "slice", "pad",
             "concatenate", "iota", "select", "dynamic_slice", "dynamic_update_slice")  # fmt: skip


def _arr(v: list[int]) -> str:
    return f"array<i64: {', '.join(map(str, v))}>" if v else "array<i64>"


@st.composite
def shape_case(draw: Any) -> Case:
    """One data-movement op on a 2x3 (or 2x3x2) operand of any type; pads negative and
    interior, dynamic starts out of range."""
    op = draw(st.sampled_from(SHAPE_OPS))
    t = draw(st.sampled_from(("f32", "bf16", "i8", "ui32", "i1", "f64", "i64")))
    shape = draw(st.sampled_from([(2, 3), (2, 3, 2)]))
    r = len(shape)
    x = values(draw, t, shape)
    xt = _tensor(shape, t)
    args, ins, feats = [x], [xt], features_of([x])
    if op == "transpose":
        perm = list(draw(st.permutations(range(r))))
        out = tuple(shape[p] for p in perm)
        expr = f'"stablehlo.transpose"(%a0) {{permutation = {_arr(perm)}}}'
    elif op == "reverse":
        dims = sorted(d for d in range(r) if draw(st.booleans()))
        out, expr = shape, f'"stablehlo.reverse"(%a0) {{dimensions = {_arr(dims)}}}'
    elif op == "reshape":
        out = draw(st.sampled_from([(6 * (r - 1),), (3, 2 * (r - 1)), (1, 2, 3 * (r - 1))]))
        expr = '"stablehlo.reshape"(%a0)'
    elif op == "broadcast_in_dim":
        out = (4, *shape)
        expr = f'"stablehlo.broadcast_in_dim"(%a0) {{broadcast_dimensions = {_arr(list(range(1, r + 1)))}}}'
    elif op == "slice":
        lo = [draw(st.integers(0, n - 1)) for n in shape]
        hi = [draw(st.integers(a + 1, n)) for a, n in zip(lo, shape)]
        sd = [draw(st.integers(1, 2)) for _ in shape]
        out = tuple(-(-(h - a) // k) for a, h, k in zip(lo, hi, sd))
        expr = (f'"stablehlo.slice"(%a0) {{start_indices = {_arr(lo)}, limit_indices = '
                f"{_arr(hi)}, strides = {_arr(sd)}}}")  # fmt: skip
    elif op == "pad":
        lo = [draw(st.integers(-1, 2)) for _ in shape]
        hi = [draw(st.integers(-1, 2)) for _ in shape]
        inner = [draw(st.integers(0, 2)) for _ in shape]
        out = tuple(n + a + b + (n - 1) * i for n, a, b, i in zip(shape, lo, hi, inner))
        assume(min(out) > 0)
        pv = values(draw, t, ())
        args, ins = [x, pv], [xt, _tensor((), t)]
        expr = (f'"stablehlo.pad"(%a0, %a1) {{edge_padding_low = {_arr(lo)}, edge_padding_high '
                f"= {_arr(hi)}, interior_padding = {_arr(inner)}}}")  # fmt: skip
    elif op == "concatenate":
        d = draw(st.integers(0, r - 1))
        y = values(draw, t, shape)
        args, ins = [x, y], [xt, xt]
        out = tuple(n * 2 if k == d else n for k, n in enumerate(shape))
        expr = f'"stablehlo.concatenate"(%a0, %a1) {{dimension = {d} : i64}}'
    elif op == "iota":
        d = draw(st.integers(0, r - 1))
        out, ins, args = shape, [], []
        expr = f'"stablehlo.iota"() {{iota_dimension = {d} : i64}}'
        t = draw(st.sampled_from(("f32", "i8", "ui32", "bf16", "i64")))
        xt = _tensor(shape, t)
    elif op == "select":
        p = values(draw, "i1", shape)
        y = values(draw, t, shape)
        args, ins, out = [p, x, y], [_tensor(shape, "i1"), xt, xt], shape
        expr = '"stablehlo.select"(%a0, %a1, %a2)'
    else:
        starts = [np.array(draw(st.integers(-3, 4)), np.int32) for _ in shape]
        feats |= {"out-of-range"}
        sizes = [draw(st.integers(1, n)) for n in shape]
        if op == "dynamic_slice":
            args, ins, out = [x, *starts], [xt] + ["tensor<i32>"] * r, tuple(sizes)
            operands = ", ".join(f"%a{k}" for k in range(r + 1))
            expr = f'"stablehlo.dynamic_slice"({operands}) {{slice_sizes = {_arr(sizes)}}}'
        else:
            u = values(draw, t, tuple(sizes))
            args = [x, u, *starts]
            ins, out = [xt, _tensor(tuple(sizes), t)] + ["tensor<i32>"] * r, shape
            operands = ", ".join(f"%a{k}" for k in range(r + 2))
            expr = f'"stablehlo.dynamic_update_slice"({operands})'
    ot = _tensor(tuple(out), t)
    params = ", ".join(f"%a{k}: {ty}" for k, ty in enumerate(ins))
    text = f"""module {{
  func.func @main({params}) -> {ot} {{
    %0 = {expr} : ({", ".join(ins)}) -> {ot}
    return %0 : {ot}
  }}
}}"""
    if not args:  # an iota takes nothing: give @main a dummy argument (vmap needs one)
        dummy = np.zeros((), np.int32)
        text = text.replace("@main()", "@main(%d: tensor<i32>)")
        args = [dummy]
    return Case("shape", op, text, args, feats)


#: The structured families, merged with differential.FAMILIES by the test.
FAMILIES = {
    "gather": gather_case(),
    "scatter": scatter_case(),
    "convolution": convolution_case(),
    "dot_general": dot_general_case(),
    "while": while_case(),
    "case": case_case(),
    "if": if_case(),
    "cholesky": cholesky_case(),
    "triangular_solve": triangular_solve_case(),
    "shape": shape_case(),
}
