"""The window-work bound and the ragged_dot live bytes over their whole space (issue 38).

stablehlo/budget.py documents two costs the module's size does not show:

- window work (JULIABRIDGE_MAX_WINDOW_WORK): every reduce_window counts its result elements
  times its window elements, every select_and_scatter its *source* elements times its window
  elements, wherever the op is (top level, a while body, each case branch, nested) and once
  per call once calls are inlined;
- a chlo.ragged_dot's dense copies while it runs on the lax backend: one lhs per group when
  the ragged dimension is not contracted, one lhs, rhs and result per group when it is, none
  for a ragged batch dimension.

The references are written here from those rules and the StableHLO spec's shape formulas (a
window's output size per dimension), not read from the code: a module whose result type
disagrees with the spec's formula does not even parse. Each case checks the exact figure the
refusal names and that a limit equal to it admits the module.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge import ResourceLimitError

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _t(shape: tuple[int, ...], et: str = "f32") -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{et}>"


def _arr(xs: list[int]) -> str:
    return f"array<i64: {', '.join(map(str, xs))}>"


def _pad(pads: list[tuple[int, int]]) -> str:
    rows = ", ".join(f"[{lo}, {hi}]" for lo, hi in pads)
    return f"dense<[{rows}]> : tensor<{len(pads)}x2xi64>"


@st.composite
def geometries(draw: st.DrawFn, dilations: bool) -> dict:
    """A window over an operand of rank 1-3, each output dimension at least 1 (spec formula)."""
    rank = draw(st.integers(1, 3))
    dims = []
    for _ in range(rank):
        n = draw(st.integers(1, 9))
        lo, hi = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        bd = draw(st.integers(1, 3)) if dilations else 1
        wd = draw(st.integers(1, 2)) if dilations else 1
        padded = (n - 1) * bd + 1 + lo + hi
        w = draw(st.integers(1, max(1, (padded - 1) // wd + 1)))
        s = draw(st.integers(1, 3))
        out = (padded - ((w - 1) * wd + 1)) // s + 1
        dims.append({"n": n, "w": w, "s": s, "lo": lo, "hi": hi, "bd": bd, "wd": wd, "out": out})
    return {
        "operand": tuple(d["n"] for d in dims),
        "out": tuple(d["out"] for d in dims),
        "window": [d["w"] for d in dims],
        "strides": [d["s"] for d in dims],
        "pads": [(d["lo"], d["hi"]) for d in dims],
        "base": [d["bd"] for d in dims],
        "wdil": [d["wd"] for d in dims],
    }


def _reduce_window(g: dict, x: str, tag: str) -> tuple[list[str], str, str]:
    """A max reduce_window of `x`: (lines, result, result type)."""
    t, r, s = _t(g["operand"]), _t(g["out"]), "tensor<f32>"
    attrs = (
        f"window_dimensions = {_arr(g['window'])}, window_strides = {_arr(g['strides'])}, "
        f"base_dilations = {_arr(g['base'])}, window_dilations = {_arr(g['wdil'])}, "
        f"padding = {_pad(g['pads'])}"
    )
    lines = [
        f"%{tag}z = stablehlo.constant dense<0xFF800000> : {s}",
        f'%{tag} = "stablehlo.reduce_window"({x}, %{tag}z) <{{{attrs}}}> ({{',
        f"^bb0(%{tag}p: {s}, %{tag}q: {s}):",
        f"  %{tag}m = stablehlo.maximum %{tag}p, %{tag}q : {s}",
        f"  stablehlo.return %{tag}m : {s}",
        f"}}) : ({t}, {s}) -> {r}",
    ]
    return lines, f"%{tag}", r


def _select_and_scatter(g: dict, x: str, tag: str) -> tuple[list[str], str, str]:
    """A max-select, add-scatter of main's %src over `x`: (lines, result, result type)."""
    t, src, s, b = _t(g["operand"]), _t(g["out"]), "tensor<f32>", "tensor<i1>"
    attrs = (
        f"window_dimensions = {_arr(g['window'])}, window_strides = {_arr(g['strides'])}, "
        f"padding = {_pad(g['pads'])}"
    )
    lines = [
        f"%{tag}z = stablehlo.constant dense<0.0> : {s}",
        f'%{tag} = "stablehlo.select_and_scatter"({x}, %src, %{tag}z) <{{{attrs}}}> ({{',
        f"^bb0(%{tag}p: {s}, %{tag}q: {s}):",
        f"  %{tag}c = stablehlo.compare GE, %{tag}p, %{tag}q : ({s}, {s}) -> {b}",
        f"  stablehlo.return %{tag}c : {b}",
        "}, {",
        f"^bb0(%{tag}u: {s}, %{tag}v: {s}):",
        f"  %{tag}a = stablehlo.add %{tag}u, %{tag}v : {s}",
        f"  stablehlo.return %{tag}a : {s}",
        f"}}) : ({t}, {src}, {s}) -> {t}",
    ]
    return lines, f"%{tag}", t


def _placed(op: str, g: dict, place: str, copies: int) -> str:
    """@main with the window op at `place`; `copies` is the number of calls or branches."""
    build = _reduce_window if op == "reduce_window" else _select_and_scatter
    t = _t(g["operand"])
    i32, pred = "tensor<i32>", "tensor<i1>"
    args = f"%a: {t}, %src: {_t(g['out'])}, %i: {i32}"
    if place == "top":
        lines, v, r = build(g, "%a", "w")
        return (
            f"func.func @main({args}) -> {r} {{\n" + "\n".join(lines) + f"\nreturn {v} : {r}\n}}\n"
        )
    if place == "call":
        lines, v, r = build(g, "%a", "w")
        callee = (
            f"func.func private @f(%a: {t}, %src: {_t(g['out'])}) -> {r} {{\n"
            + "\n".join(lines)
            + f"\nreturn {v} : {r}\n}}\n"
        )
        calls = "".join(
            f"%c{k} = func.call @f(%a, %src) : ({t}, {_t(g['out'])}) -> {r}\n"
            for k in range(copies)
        )
        return callee + f"func.func @main({args}) -> {r} {{\n{calls}return %c0 : {r}\n}}\n"
    branches = []
    for k in range(copies):
        lines, v, r = build(g, "%a", f"b{k}_")
        branches.append("\n".join(lines) + f'\n"stablehlo.return"({v}) : ({r}) -> ()\n')
    case = ['%k = "stablehlo.case"(%i) ({\n' + "}, {\n".join(branches) + f"}}) : ({i32}) -> {r}"]
    if place == "case":
        return f"func.func @main({args}) -> {r} {{\n" + "\n".join(case) + f"\nreturn %k : {r}\n}}\n"
    # a while body holding the op (in a case when nested), its result unused
    inner = case if place == "while-case" else build(g, "%v", "w")[0]
    if place == "while-case":
        inner = [line.replace("(%a,", "(%v,") for line in inner]
    loop = [
        '%l:2 = "stablehlo.while"(%i, %a) ({',
        f"^bb0(%j: {i32}, %v: {t}):",
        "  %three = stablehlo.constant dense<3> : tensor<i32>",
        f"  %lt = stablehlo.compare LT, %j, %three : ({i32}, {i32}) -> {pred}",
        f"  stablehlo.return %lt : {pred}",
        "}, {",
        f"^bb0(%j: {i32}, %v: {t}):",
        *inner,
        "  %one = stablehlo.constant dense<1> : tensor<i32>",
        f"  %n = stablehlo.add %j, %one : {i32}",
        f"  stablehlo.return %n, %v : {i32}, {t}",
        f"}}) : ({i32}, {t}) -> ({i32}, {t})",
    ]
    return f"func.func @main({args}) -> {t} {{\n" + "\n".join(loop) + f"\nreturn %l#1 : {t}\n}}\n"


PLACES = ["top", "call", "case", "while", "while-case"]


@SETTINGS
@given(
    g=st.one_of(
        geometries(dilations=True).map(lambda g: ("reduce_window", g)),
        geometries(dilations=False).map(lambda g: ("select_and_scatter", g)),
    ),
    place=st.sampled_from(PLACES),
    copies=st.integers(1, 3),
)
def test_window_work_is_visited_elements_wherever_the_op_is(
    g: tuple[str, dict], place: str, copies: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    op, geo = g
    text = _placed(op, geo, place, copies)
    # reduce_window visits each result element's window; select_and_scatter each source
    # element's (its source has the reduce_window result's shape, its result the operand's).
    per_op = math.prod(geo["out"]) * math.prod(geo["window"])
    n_ops = 1 if place in ("top", "while") else copies
    want = per_op * n_ops
    monkeypatch.setenv("JULIABRIDGE_MAX_WINDOW_WORK", str(want - 1))
    with pytest.raises(ResourceLimitError) as info:
        juliabridge.load_mlir(text, backend="lax")
    assert f"visit {want:,} window elements per call" in str(info.value), (op, place, geo)
    monkeypatch.setenv("JULIABRIDGE_MAX_WINDOW_WORK", str(want))
    juliabridge.load_mlir(text, backend="lax")


def test_a_strided_select_and_scatter_counts_its_source_not_its_operand(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 8x8 operand, 2x2 windows at stride 2: a 4x4 source, 16 x 4 = 64 elements visited
    # (64 x 4 = 256 if it were counted over its operand).
    g = {"operand": (8, 8), "out": (4, 4), "window": [2, 2], "strides": [2, 2],
         "pads": [(0, 0), (0, 0)]}  # fmt: skip
    monkeypatch.setenv("JULIABRIDGE_MAX_WINDOW_WORK", "64")
    juliabridge.load_mlir(_placed("select_and_scatter", g, "top", 1), backend="lax")
    monkeypatch.setenv("JULIABRIDGE_MAX_WINDOW_WORK", "63")
    with pytest.raises(ResourceLimitError, match="visit 64 window elements"):
        juliabridge.load_mlir(_placed("select_and_scatter", g, "top", 1), backend="lax")


RAGGED_MODES = {
    # name: lhs dims, rhs dims, out dims, dimension numbers (m, k, n, b, g are sizes)
    "rows": (
        ("m", "k"), ("g", "k", "n"), ("m", "n"),
        "lhs_batching_dimensions = [], rhs_batching_dimensions = [], "
        "lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], "
        "lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]",
    ),
    "contracting": (
        ("m", "k"), ("k", "n"), ("g", "m", "n"),
        "lhs_batching_dimensions = [], rhs_batching_dimensions = [], "
        "lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0], "
        "lhs_ragged_dimensions = [1], rhs_group_dimensions = []",
    ),
    "batch": (
        ("b", "m", "k"), ("b", "k", "n"), ("b", "m", "n"),
        "lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], "
        "lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1], "
        "lhs_ragged_dimensions = [0], rhs_group_dimensions = []",
    ),
}  # fmt: skip


@SETTINGS
@given(
    mode=st.sampled_from(sorted(RAGGED_MODES)),
    # large enough that the live values, not the attributes' data (x 14), meet the limit first
    sizes=st.fixed_dictionaries(
        {**{c: st.integers(40, 96) for c in "mkn"}, **{c: st.integers(1, 12) for c in "bg"}}
    ),
    et=st.sampled_from([("f32", 4), ("f64", 8)]),
)
def test_a_ragged_dot_adds_its_dense_copies_per_group(
    mode: str, sizes: dict[str, int], et: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    lhs_d, rhs_d, out_d, dims = RAGGED_MODES[mode]
    name, width = et
    shape = {k: tuple(sizes[c] for c in d) for k, d in (("a", lhs_d), ("b", rhs_d), ("r", out_d))}
    lhs, rhs, out = (math.prod(shape[k]) * width for k in "abr")
    g = sizes["g"]
    a, b, gs, r = (
        _t(shape["a"], name),
        _t(shape["b"], name),
        f"tensor<{g}xi32>",
        _t(shape["r"], name),
    )
    text = (
        f"func.func @main(%a: {a}, %b: {b}, %g: {gs}) -> {r} {{\n"
        f'  %0 = "chlo.ragged_dot"(%a, %b, %g) {{ragged_dot_dimension_numbers = '
        f"#chlo.ragged_dot<{dims}>, precision_config = [#chlo<precision DEFAULT>, "
        f"#chlo<precision DEFAULT>]}} : ({a}, {b}, {gs}) -> {r}\n"
        f"  return %0 : {r}\n}}\n"
    )
    dense = {"rows": g * lhs, "contracting": g * (lhs + rhs + out), "batch": 0}[mode]
    # @main's arguments live throughout, its result from the op on, the copies while it runs.
    peak = lhs + rhs + 4 * g + out + dense
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", str(peak))
    juliabridge.load_mlir(text, backend="lax")
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", str(peak - 1))
    with pytest.raises(ResourceLimitError, match="of live values"):
        juliabridge.load_mlir(text, backend="lax")
