"""Differential testing of the lax backend: small generated StableHLO modules, one op each,
with edge-value inputs, run on lax, the xla backend (and enzyme where it imports, on the
first cases of each family) and the StableHLO reference interpreter (a child process,
tests/lax/oracles.py).

Integers and Booleans must agree exactly; floats within `ULPS` units in the last place of
their type (NaN matches any NaN). A disagreement is allowed only where docs/lax-backend.md's
deviation table (between the `lax-deviations` markers) has a row whose oracle, op and
conditions all match the case, so a new divergence fails and a documented one does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from juliabridge.backends.lax.valtypes import ELEMENT_TYPES

from ._elementwise_util import module

DOC = Path(__file__).resolve().parents[2] / "docs" / "lax-backend.md"
#: Float tolerance in units in the last place of the result type.
ULPS = 4

FLOATS = ("f16", "bf16", "f32", "f64")
INTS = ("i8", "i32", "i64", "ui8", "ui32")


@dataclass
class Case:
    """One generated module, its arguments and the conditions it exercises."""

    family: str
    op: str
    text: str
    args: list[np.ndarray]
    features: set[str] = field(default_factory=set)
    #: False where the reference interpreter aborts or refuses the op (see the generator).
    interpret: bool = True
    #: The float bound of this case (wider where the spec leaves the algorithm open).
    ulps: int = ULPS


@dataclass(frozen=True)
class Deviation:
    """A row of the deviation table."""

    ident: str
    oracle: str
    ops: frozenset[str]
    when: frozenset[str]

    def covers(self, oracle: str, case: Case) -> bool:
        """Whether this row documents `case` disagreeing with `oracle`. A row for xla also
        covers enzyme, which compiles the module through XLA; an enzyme row covers enzyme only."""
        if self.oracle != oracle and (oracle, self.oracle) != ("enzyme", "xla"):
            return False
        if "*" not in self.ops and case.op not in self.ops:
            return False
        return self.when <= case.features


def deviations(path: Path = DOC) -> list[Deviation]:
    """The rows between the lax-deviations markers of docs/lax-backend.md."""
    text = path.read_text()
    block = text.split("<!-- lax-deviations:begin")[1].split("<!-- lax-deviations:end")[0]
    rows = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[0].startswith("`"):
            continue
        words = lambda c: frozenset(  # noqa: E731
            w.strip("` ") for w in c.split(",") if w.strip("` ") not in ("", "-")
        )
        rows.append(Deviation(cells[0].strip("`"), cells[1], words(cells[2]), words(cells[3])))
    return rows


# --- values ----------------------------------------------------------------------------------


def float_edges(t: str) -> list[float]:
    """Edge values of a float type: signed zeros, infinities, NaN, extremes, a denormal."""
    info = ml_dtypes.finfo(ELEMENT_TYPES[t])
    tiny = float(info.smallest_subnormal)
    return [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -2.5, 3.0,
            float(info.max), -float(info.max), float(info.tiny), tiny, -tiny]  # fmt: skip


def int_edges(t: str) -> list[int]:
    """Edge values of an integer type: 0, ±1, the extremes, a shift past the width."""
    info = np.iinfo(ELEMENT_TYPES[t])
    return sorted({0, 1, int(info.max), int(info.min), 2, 7, 8 * info.bits, -1 if info.min else 3})


def array_of(draw: Any, t: str, n: int) -> np.ndarray:
    """`n` values of type `t`, mostly edge values."""
    dt = ELEMENT_TYPES[t]
    if t in FLOATS:
        vals = draw(st.lists(st.sampled_from(float_edges(t)) | st.floats(-8, 8, width=16),
                             min_size=n, max_size=n))  # fmt: skip
        return np.array(vals, np.float64).astype(dt)
    if t == "i1":
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    info = np.iinfo(dt)
    vals = draw(st.lists(st.sampled_from(int_edges(t)) | st.integers(int(info.min), int(info.max)),
                         min_size=n, max_size=n))  # fmt: skip
    return np.array(vals, dtype=object).astype(dt)


def _any_denormal(w: np.ndarray, tiny: float) -> bool:
    """Whether the float64 values `w` hold a nonzero value below `tiny` (a denormal)."""
    return bool(((w != 0) & (np.abs(w) < tiny)).any())


def result_features(results: Sequence[Any]) -> set[str]:
    """Conditions an oracle's results show that the arguments do not: a denormal result of
    normal operands (0.5 x the smallest normal f32) is flushed to 0 on the CPU as a denormal
    operand is (row `denormal-flush`: inputs and results)."""
    for r in results:
        a = np.asarray(r)
        if a.dtype.kind == "c":
            a = np.concatenate([a.real.ravel(), a.imag.ravel()])
        try:
            tiny = float(ml_dtypes.finfo(a.dtype).tiny)
        except ValueError:  # not a float type
            continue
        if _any_denormal(a.astype(np.float64), tiny):
            return {"denormal"}
    return set()


def features_of(args: Sequence[np.ndarray]) -> set[str]:
    """Conditions the arguments exercise (names used by the deviation table)."""
    out: set[str] = set()
    for a in args:
        name = next(k for k, v in ELEMENT_TYPES.items() if v == a.dtype)
        out.add(name)
        if a.dtype.kind in "fV" and a.dtype != np.bool_:
            w = a.astype(np.float64)
            info = ml_dtypes.finfo(a.dtype)
            out |= {"nan"} if np.isnan(w).any() else set()
            out |= {"inf"} if np.isinf(w).any() else set()
            if _any_denormal(w, float(info.tiny)):
                out.add("denormal")
            if (np.abs(w) == float(info.max)).any():
                out.add("extreme")
        elif a.dtype.kind in "iu":
            info = np.iinfo(a.dtype)
            if (a == 0).any():
                out.add("zero")
            if info.min and (a == info.min).any():
                out.add("int-min")
    return out


# --- modules per family ----------------------------------------------------------------------

UNARY = ("abs", "negate", "sqrt", "rsqrt", "exponential", "log", "log_plus_one", "tanh",
         "floor", "ceil", "sign", "cosine", "sine", "logistic", "round_nearest_even", "cbrt",
         "exponential_minus_one", "round_nearest_afz", "tan")  # fmt: skip
UNARY_INT = ("abs", "negate", "sign", "not", "popcnt", "count_leading_zeros")
BINARY_FLOAT = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
                "remainder", "atan2")  # fmt: skip
BINARY_INT = ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power",
              "and", "or", "xor", "shift_left", "shift_right_arithmetic",
              "shift_right_logical")  # fmt: skip
N = 6


def _unary(draw: Any, op: str, t: str) -> Case:
    tt = f"tensor<{N}x{t}>"
    x = array_of(draw, t, N)
    text = module([tt], [f"%0 = stablehlo.{op} %a0 : {tt}"], [("%0", tt)])
    return Case("elementwise", op, text, [x], features_of([x]))


@st.composite
def unary_case(draw: Any) -> Case:
    return _unary(draw, draw(st.sampled_from(UNARY)), draw(st.sampled_from(FLOATS)))


@st.composite
def int_unary_case(draw: Any) -> Case:
    op, t = draw(st.sampled_from(UNARY_INT)), draw(st.sampled_from(("i1", *INTS)))
    if t == "i1" or (t.startswith("u") and op in ("abs", "negate", "sign")):
        op = "not"  # abs, negate and sign take signless integers only
    return _unary(draw, op, t)


@st.composite
def float_predicate_case(draw: Any) -> Case:
    """is_finite (float -> i1) and reduce_precision (to narrower exponent/mantissa widths)."""
    t = draw(st.sampled_from(FLOATS))
    tt = f"tensor<{N}x{t}>"
    x = array_of(draw, t, N)
    if draw(st.booleans()):
        bt = f"tensor<{N}xi1>"
        text = module([tt], [f"%0 = stablehlo.is_finite %a0 : ({tt}) -> {bt}"], [("%0", bt)])
        return Case("elementwise", "is_finite", text, [x], features_of([x]))
    e, m = draw(st.integers(2, 8)), draw(st.integers(1, 10))
    line = f"%0 = stablehlo.reduce_precision %a0, format = e{e}m{m} : {tt}"
    return Case("elementwise", "reduce_precision", module([tt], [line], [("%0", tt)]), [x],
                features_of([x]) | {f"e{e}m{m}"})  # fmt: skip


@st.composite
def binary_case(draw: Any) -> Case:
    floats = draw(st.booleans())
    op = draw(st.sampled_from(BINARY_FLOAT if floats else BINARY_INT))
    t = draw(st.sampled_from(FLOATS if floats else INTS))
    tt = f"tensor<{N}x{t}>"
    a, b = array_of(draw, t, N), array_of(draw, t, N)
    text = module([tt, tt], [f"%0 = stablehlo.{op} %a0, %a1 : {tt}"], [("%0", tt)])
    feats = features_of([a, b])
    if op == "power" and not floats and (b.astype(np.int64) >= 64).any():
        feats.add("exponent-ge-64")
    if op == "divide" and floats:
        # XLA may divide by multiplying with the reciprocal (with the divisor broadcast, as
        # under vmap), and 1/b is a denormal, flushed, for |b| above 1/smallest normal
        big = 1 / float(ml_dtypes.finfo(ELEMENT_TYPES[t]).tiny)
        if (np.abs(b[np.isfinite(b)].astype(np.float64)) > big).any():
            feats.add("denormal")
    return Case("elementwise", op, text, [a, b], feats)


@st.composite
def compare_case(draw: Any) -> Case:
    t = draw(st.sampled_from(FLOATS + INTS))
    direction = draw(st.sampled_from(["EQ", "NE", "LT", "LE", "GT", "GE"]))
    kinds = ["FLOAT", "TOTALORDER"] if t in FLOATS else (["UNSIGNED"] if "u" in t else ["SIGNED"])
    kind = draw(st.sampled_from(kinds))
    tt, bt = f"tensor<{N}x{t}>", f"tensor<{N}xi1>"
    a, b = array_of(draw, t, N), array_of(draw, t, N)
    line = f"%0 = stablehlo.compare {direction}, %a0, %a1, {kind} : ({tt}, {tt}) -> {bt}"
    feats = features_of([a, b]) | ({"totalorder"} if kind == "TOTALORDER" else set())
    return Case("compare", "compare", module([tt, tt], [line], [("%0", bt)]), [a, b], feats)


@st.composite
def convert_case(draw: Any) -> Case:
    src = draw(st.sampled_from(FLOATS + INTS))
    dst = draw(st.sampled_from(("i1", *FLOATS, *INTS)))
    x = array_of(draw, src, N)
    st_, dt_ = f"tensor<{N}x{src}>", f"tensor<{N}x{dst}>"
    if draw(st.integers(0, 3)) == 0:  # a bitcast to the other type of the same width
        same = [u for u in (*FLOATS, *INTS) if u != src and _width(u) == _width(src)]
        if same:
            dst = draw(st.sampled_from(same))
            dt_ = f"tensor<{N}x{dst}>"
            line = f"%0 = stablehlo.bitcast_convert %a0 : ({st_}) -> {dt_}"
            text = module([st_], [line], [("%0", dt_)])
            return Case("convert", "bitcast_convert", text, [x], features_of([x]))
    text = module([st_], [f"%0 = stablehlo.convert %a0 : ({st_}) -> {dt_}"], [("%0", dt_)])
    return Case("convert", "convert", text, [x], features_of([x]) | {f"to-{dst}"})


def _width(t: str) -> int:
    return ELEMENT_TYPES[t].itemsize


@st.composite
def reduce_case(draw: Any) -> Case:
    op = draw(st.sampled_from(["add", "multiply", "maximum", "minimum"]))
    t = draw(st.sampled_from(("f32", "f64", "i32", "f16")))
    window = draw(st.booleans())
    x = array_of(draw, t, 12).reshape(3, 4)
    init = array_of(draw, t, 1).reshape(())
    s, xs = f"tensor<{t}>", f"tensor<3x4x{t}>"
    body = f"""^bb0(%a: {s}, %b: {s}):
      %s = stablehlo.{op} %a, %b : {s}
      stablehlo.return %s : {s}"""
    feats = features_of([x, init]) | {"init"}
    if not window:
        text = f"""module {{
  func.func @main(%x: {xs}, %i: {s}) -> tensor<4x{t}> {{
    %r = "stablehlo.reduce"(%x, %i) ({{
    {body}
    }}) {{dimensions = array<i64: 0>}} : ({xs}, {s}) -> tensor<4x{t}>
    return %r : tensor<4x{t}>
  }}
}}"""
        return Case("reduce", "reduce", text, [x, init], feats)
    lo, hi = draw(st.integers(0, 1)), draw(st.integers(0, 1))
    out = 4 + lo + hi - 2 + 1
    feats |= {"padding"} if lo or hi else set()
    text = f"""module {{
  func.func @main(%x: {xs}, %i: {s}) -> tensor<2x{out}x{t}> {{
    %r = "stablehlo.reduce_window"(%x, %i) <{{window_dimensions = array<i64: 2, 2>,
        padding = dense<[[0, 0], [{lo}, {hi}]]> : tensor<2x2xi64>}}> ({{
    {body}
    }}) : ({xs}, {s}) -> tensor<2x{out}x{t}>
    return %r : tensor<2x{out}x{t}>
  }}
}}"""
    return Case("reduce", "reduce_window", text, [x, init], feats)


@st.composite
def sort_case(draw: Any) -> Case:
    t = draw(st.sampled_from(("f32", "f64", "i32")))
    direction = draw(st.sampled_from(["LT", "GT"]))
    kind = draw(st.sampled_from(["FLOAT", "TOTALORDER"] if t != "i32" else ["SIGNED"]))
    x = array_of(draw, t, 8)
    iota = np.arange(8, dtype=np.int32)
    xt, it = f"tensor<8x{t}>", "tensor<8xi32>"
    text = f"""module {{
  func.func @main(%x: {xt}, %y: {it}) -> ({xt}, {it}) {{
    %0:2 = "stablehlo.sort"(%x, %y) ({{
    ^bb0(%a: tensor<{t}>, %b: tensor<{t}>, %c: tensor<i32>, %d: tensor<i32>):
      %r = stablehlo.compare {direction}, %a, %b, {kind} : (tensor<{t}>, tensor<{t}>) -> tensor<i1>
      stablehlo.return %r : tensor<i1>
    }}) {{dimension = 0 : i64, is_stable = true}} : ({xt}, {it}) -> ({xt}, {it})
    return %0#0, %0#1 : {xt}, {it}
  }}
}}"""
    feats = features_of([x]) | ({"totalorder"} if kind == "TOTALORDER" else set())
    if len(np.unique(x.astype(np.float64))) < len(x):
        feats.add("ties")
    return Case("sort", "sort", text, [x, iota], feats)


@st.composite
def select_and_scatter_case(draw: Any) -> Case:
    select = draw(st.sampled_from(["GE", "GT", "LE", "LT"]))
    lo, hi = draw(st.integers(0, 1)), draw(st.integers(0, 1))
    x = np.maximum(np.array(draw(st.lists(st.integers(-1, 2), min_size=20, max_size=20)),
                            np.float32), 0).reshape(4, 5)  # fmt: skip
    src_w = (5 + lo + hi - 3) // 1 + 1
    s = np.array(draw(st.lists(st.floats(-2, 2, width=32), min_size=2 * src_w,
                               max_size=2 * src_w)), np.float32).reshape(2, src_w)  # fmt: skip
    text = f"""module {{
  func.func @main(%x: tensor<4x5xf32>, %s: tensor<2x{src_w}xf32>, %i: tensor<f32>) -> tensor<4x5xf32> {{
    %r = "stablehlo.select_and_scatter"(%x, %s, %i) <{{window_dimensions = array<i64: 3, 3>,
        window_strides = array<i64: 1, 1>,
        padding = dense<[[0, 0], [{lo}, {hi}]]> : tensor<2x2xi64>}}> ({{
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.compare {select}, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }}, {{
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %c : tensor<f32>
    }}) : (tensor<4x5xf32>, tensor<2x{src_w}xf32>, tensor<f32>) -> tensor<4x5xf32>
    return %r : tensor<4x5xf32>
  }}
}}"""
    feats = {"f32", "ties"} | ({"padding"} if lo or hi else set())
    return Case("reduce", "select_and_scatter", text, [x, s, np.float32(0)], feats)


@st.composite
def clamp_case(draw: Any) -> Case:
    t = draw(st.sampled_from(FLOATS + INTS))
    x, lo, hi = array_of(draw, t, N), array_of(draw, t, 1).reshape(()), array_of(draw, t, N)
    tt, s = f"tensor<{N}x{t}>", f"tensor<{t}>"
    line = f"%0 = stablehlo.clamp %a1, %a0, %a2 : ({s}, {tt}, {tt}) -> {tt}"
    return Case("elementwise", "clamp", module([tt, s, tt], [line], [("%0", tt)]), [x, lo, hi],
                features_of([x, lo, hi]))  # fmt: skip


#: One strategy per op family.
FAMILIES = {
    "unary": unary_case(),
    "int_unary": int_unary_case(),
    "float_predicate": float_predicate_case(),
    "binary": binary_case(),
    "compare": compare_case(),
    "convert": convert_case(),
    "clamp": clamp_case(),
    "reduce": reduce_case(),
    "sort": sort_case(),
    "select_and_scatter": select_and_scatter_case(),
}


# --- comparison ------------------------------------------------------------------------------


def _ordered(x: np.ndarray) -> np.ndarray:
    """Float bits as integers ordered like the values (-0 next to +0), for ulp distances."""
    sign = 1 << (8 * x.dtype.itemsize - 1)
    bits = x.view(np.dtype(f"u{x.dtype.itemsize}")).reshape(-1).tolist()
    # Python integers: the 64-bit magnitudes do not fit numpy's int64 arithmetic.
    ordered = [-(b & (sign - 1)) - 1 if b & sign else b for b in bits]
    return np.array(ordered, dtype=object).reshape(x.shape)


def disagreement(got: np.ndarray, want: np.ndarray, ulps: int = ULPS) -> str | None:
    """Why `got` and `want` differ beyond the bounds, or None."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    if got.dtype.kind in "biu":
        return None if np.array_equal(got, want) else f"{got.tolist()} vs {want.tolist()}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(g) & np.isnan(w)
    if (np.isnan(g) != np.isnan(w)).any():
        return f"NaN placement: {g.tolist()} vs {w.tolist()}"
    dist = np.where(nan, 0, np.abs(_ordered(got) - _ordered(want)))
    if dist.size and dist.max() > ulps:
        return f"{int(dist.max())} ulp: {g.tolist()} vs {w.tolist()}"
    return None


def compare_results(got: Sequence[Any], want: Sequence[Any], ulps: int = ULPS) -> str | None:
    """The first disagreement of two result lists, or None."""
    if len(got) != len(want):
        return f"{len(got)} results vs {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        why = disagreement(g, w, ulps)
        if why:
            return f"result {k}: {why}"
    return None


def interpretable(case: Case) -> bool:
    """The interpreter takes no bf16 (or complex) arguments, and aborts on some ops."""
    return case.interpret and not any(a.dtype == ml_dtypes.bfloat16 for a in case.args)


def undocumented(oracle: str, case: Case, why: str, table: Sequence[Deviation]) -> str | None:
    """A failure message for a divergence no table row covers, else None."""
    if any(d.covers(oracle, case) for d in table):
        return None
    return f"{case.op} ({case.family}) lax vs {oracle}: {why}\n  features {sorted(case.features)}\n{case.text}\n  args {[a.tolist() for a in case.args]}"


def op_names(table: Sequence[Deviation]) -> set[str]:
    """Every op a table row names (for checking the table against the generator)."""
    return {o for d in table for o in d.ops}
