"""The module budgets inside regions, not only on straight-line code (issue 38).

stablehlo/budget.py documents what it bounds: ops once calls (func.call and
stablehlo.composite) are inlined, the longest chain of dependent ops within one computation (a
region is its own computation), `stablehlo.case` branches once calls are inlined, and peak
live bytes (a value is live from its definition to its last use, a use inside a region counting
at the op that owns the region, whose regions add their own peak). Each test places the costly
part at every position the walk could miss it: top level, a while body, a case branch (first,
middle or last), an if branch, regions nested two deep, and checks that a limit just below
the documented figure refuses the module and a limit well above it accepts it.
"""

from __future__ import annotations

import pytest

import juliabridge
from juliabridge.stablehlo.module import parse_module

S = "tensor<f32>"


def _chain(n: int, v: str, tag: str) -> tuple[list[str], str]:
    """n dependent negates of `v`; (lines, last value)."""
    lines = []
    for k in range(n):
        lines.append(f"%{tag}{k} = stablehlo.negate {v} : {S}")
        v = f"%{tag}{k}"
    return lines, v


def _wrap(kind: str, inner: list[str], value: str, tag: str, branch: int = 0) -> tuple[list, str]:
    """`inner` (ending with `value`) placed inside a region of `kind`; (lines, result)."""
    ret = [*inner, f"stablehlo.return {value} : {S}"]
    plain = [f"stablehlo.return %x : {S}"]
    if kind == "case":
        branches = [ret if b == branch else plain for b in range(3)]
        body = "}, {\n".join("\n".join(b) + "\n" for b in branches)
        return [f'%{tag} = "stablehlo.case"(%i) ({{\n{body}}}) : (tensor<i32>) -> {S}'], f"%{tag}"
    if kind == "if":
        branches = [ret, plain] if branch == 0 else [plain, ret]
        body = "}, {\n".join("\n".join(b) + "\n" for b in branches)
        return [f'%{tag} = "stablehlo.if"(%p) ({{\n{body}}}) : (tensor<i1>) -> {S}'], f"%{tag}"
    # while: the work is in the body, carried next to a counter
    body = [*inner, f"%{tag}n = stablehlo.add %{tag}c, %one : tensor<i32>",
            f"stablehlo.return %{tag}n, {value} : tensor<i32>, {S}"]  # fmt: skip
    lines = [
        f"%{tag}:2 = stablehlo.while(%{tag}c = %zero, %{tag}a = %x) : tensor<i32>, {S}",
        "cond {",
        f"%{tag}b = stablehlo.compare LT, %{tag}c, %three : (tensor<i32>, tensor<i32>) -> "
        "tensor<i1>",
        f"stablehlo.return %{tag}b : tensor<i1>",
        "} do {",
        *[line.replace("%x", f"%{tag}a") for line in body],
        "}",
    ]
    return lines, f"%{tag}#1"


def _module(lines: list[str], value: str) -> str:
    body = "\n    ".join(
        [
            "%zero = stablehlo.constant dense<0> : tensor<i32>",
            "%one = stablehlo.constant dense<1> : tensor<i32>",
            "%three = stablehlo.constant dense<3> : tensor<i32>",
            *lines,
        ]
    )
    return (
        "module {\n  func.func @main(%x: tensor<f32>, %i: tensor<i32>, %p: tensor<i1>) -> "
        f"{S} {{\n    {body}\n    return {value} : {S}\n  }}\n}}\n"
    )


PLACES = [
    ("top", []),
    ("while", [("while", 0)]),
    ("case first", [("case", 0)]),
    ("case middle", [("case", 1)]),
    ("case last", [("case", 2)]),
    ("if else", [("if", 1)]),
    ("case in while", [("while", 0), ("case", 1)]),
    ("while in case", [("case", 0), ("while", 0)]),
    ("if in case in while", [("while", 0), ("case", 2), ("if", 0)]),
]


def _placed(inner: list[str], value: str, place: list[tuple[str, int]]) -> str:
    for depth, (kind, branch) in enumerate(reversed(place)):
        inner, value = _wrap(kind, inner, value, f"r{depth}", branch)
    return _module(inner, value)


@pytest.mark.parametrize("place", PLACES, ids=[p for p, _ in PLACES])
def test_a_long_chain_is_refused_wherever_it_is_nested(monkeypatch, place) -> None:
    lines, v = _chain(60, "%x", "c")
    text = _placed(lines, v, place[1])
    monkeypatch.setenv("JULIABRIDGE_MAX_CHAIN", "200")
    parse_module(text)  # 60 dependent ops: well within
    monkeypatch.setenv("JULIABRIDGE_MAX_CHAIN", "50")
    with pytest.raises(juliabridge.ResourceLimitError, match=r"a chain of 6[0-9] dependent ops"):
        parse_module(text)


BIG = "tensor<512x1024xf32>"  # 2 MiB


def _big_value(tag: str) -> tuple[list[str], str]:
    """A 2 MiB intermediate reduced back to a scalar."""
    return [
        f"%{tag}b = stablehlo.broadcast_in_dim %x, dims = [] : ({S}) -> {BIG}",
        f"%{tag}e = stablehlo.exponential %{tag}b : {BIG}",
        f"%{tag}z = stablehlo.constant dense<0.000000e+00> : {S}",
        f"%{tag}r = stablehlo.reduce(%{tag}e init: %{tag}z) applies stablehlo.add across "
        f"dimensions = [0, 1] : ({BIG}, {S}) -> {S}",
    ], f"%{tag}r"


@pytest.mark.parametrize("place", PLACES, ids=[p for p, _ in PLACES])
def test_a_large_intermediate_counts_wherever_it_is_nested(monkeypatch, place) -> None:
    lines, v = _big_value("m")
    text = _placed(lines, v, place[1])
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "64M")
    parse_module(text)
    # Two 2 MiB values are live at once (the broadcast and its exponential): 4 MiB.
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "3M")
    with pytest.raises(juliabridge.ResourceLimitError, match=r"running @main needs about 4\.0 MiB"):
        parse_module(text)


@pytest.mark.parametrize("kind", ["case", "if", "while"])
def test_a_value_used_inside_a_region_stays_live_until_that_op(monkeypatch, kind) -> None:
    # %big (2 MiB) is defined first, then small ops, then a region that uses it and makes another
    # 2 MiB value: both are live inside the region, 4 MiB, plus the two broadcast copies.
    inner = [
        f"%u = stablehlo.exponential %big : {BIG}",
        f"%w = stablehlo.add %u, %big : {BIG}",
        "%z = stablehlo.constant dense<0.000000e+00> : tensor<f32>",
        f"%s = stablehlo.reduce(%w init: %z) applies stablehlo.add across dimensions = [0, 1] : "
        f"({BIG}, {S}) -> {S}",
    ]
    region, value = _wrap(kind, inner, "%s", "q", 1 if kind != "while" else 0)
    lines = [
        f"%big = stablehlo.broadcast_in_dim %x, dims = [] : ({S}) -> {BIG}",
        *[f"%k{j} = stablehlo.negate %x : {S}" for j in range(4)],
        *region,
    ]
    text = _module(lines, value)
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "64M")
    parse_module(text)
    # %big, %u and %w can all be live at %w: 6 MiB; without %big it would be 4 MiB.
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "5M")
    with pytest.raises(juliabridge.ResourceLimitError, match=r"running @main needs about 6\.0 MiB"):
        parse_module(text)


def _fan_out(depth: int, via: str) -> str:
    """@main calls f{depth}, each f{k} calling f{k-1} twice (through `via`): 2^depth leaves."""
    funcs = []
    for k in range(depth, 0, -1):
        if via == "composite":
            calls = [f'%{j} = stablehlo.composite "x.f" %a {{decomposition = @f{k - 1}}} : '
                     f"({S}) -> {S}" for j in range(2)]  # fmt: skip
        else:
            calls = [f"%{j} = func.call @f{k - 1}(%a) : ({S}) -> {S}" for j in range(2)]
        funcs.append(
            f"  func.func private @f{k}(%a: {S}) -> {S} {{\n    "
            + "\n    ".join(calls)
            + f"\n    %2 = stablehlo.add %0, %1 : {S}\n    return %2 : {S}\n  }}"
        )
    funcs.append(f"  func.func private @f0(%a: {S}) -> {S} {{\n    "
                 f"%0 = stablehlo.negate %a : {S}\n    return %0 : {S}\n  }}")  # fmt: skip
    main = (f"  func.func @main(%x: {S}) -> {S} {{\n    %0 = func.call @f{depth}(%x) : "
            f"({S}) -> {S}\n    return %0 : {S}\n  }}")  # fmt: skip
    return "module {\n" + "\n".join([main, *funcs]) + "\n}\n"


@pytest.mark.parametrize("via", ["call", "composite"])
def test_fan_out_through_calls_and_composites_counts_every_inlined_op(monkeypatch, via) -> None:
    monkeypatch.setenv("JULIABRIDGE_MAX_OPS", "1000")
    parse_module(_fan_out(4, via))  # about 2^4 * 4 ops
    with pytest.raises(juliabridge.ResourceLimitError, match="once its calls are inlined"):
        parse_module(_fan_out(10, via))  # more than 2^10 leaves


def _cases(n: int) -> list[str]:
    branches = "}, {\n".join(f"stablehlo.return %x : {S}\n" for _ in range(n))
    return [f'%cs = "stablehlo.case"(%i) ({{\n{branches}}}) : (tensor<i32>) -> {S}']


@pytest.mark.parametrize("place", PLACES, ids=[p for p, _ in PLACES])
def test_case_branches_count_wherever_the_case_is_nested(monkeypatch, place) -> None:
    text = _placed(_cases(12), "%cs", place[1])
    monkeypatch.setenv("JULIABRIDGE_MAX_CASE_BRANCHES", "20")
    parse_module(text)
    # 12 branches plus the 3 of each enclosing case
    monkeypatch.setenv("JULIABRIDGE_MAX_CASE_BRANCHES", "11")
    with pytest.raises(juliabridge.ResourceLimitError, match=r"stablehlo\.case branches"):
        parse_module(text)


@pytest.mark.parametrize("via", ["call", "composite"])
def test_a_chain_continued_through_a_call_counts_the_callee_s_depth(monkeypatch, via) -> None:
    # 30 dependent ops in @f, 30 more after the call in @main: one chain of about 61 once the
    # call is inlined, though neither function alone reaches 50.
    inner, v = _chain(30, "%a", "f")
    outer, w = _chain(30, "%y", "m")
    call = (
        f"%y = func.call @f(%x) : ({S}) -> {S}"
        if via == "call"
        else f'%y = stablehlo.composite "x.f" %x {{decomposition = @f}} : ({S}) -> {S}'
    )
    text = (
        "module {\n"
        f"  func.func @main(%x: {S}) -> {S} {{\n    {call}\n    "
        + "\n    ".join(outer)
        + f"\n    return {w} : {S}\n  }}\n"
        f"  func.func private @f(%a: {S}) -> {S} {{\n    "
        + "\n    ".join(inner)
        + f"\n    return {v} : {S}\n  }}\n}}\n"
    )
    monkeypatch.setenv("JULIABRIDGE_MAX_CHAIN", "100")
    parse_module(text)
    monkeypatch.setenv("JULIABRIDGE_MAX_CHAIN", "50")
    with pytest.raises(juliabridge.ResourceLimitError, match=r"a chain of 6[0-9] dependent ops"):
        parse_module(text)


def test_main_s_arguments_stay_live_to_the_end(monkeypatch) -> None:
    # @main's arguments are the caller's buffers: the 2 MiB argument, read only at the start,
    # is still live when the two 2 MiB intermediates are made later.
    text = (
        "module {\n"
        f"  func.func @main(%a: {BIG}, %x: {S}) -> ({S}, {S}) {{\n"
        f"    %z = stablehlo.constant dense<0.000000e+00> : {S}\n"
        f"    %s = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0, 1] :"
        f" ({BIG}, {S}) -> {S}\n"
        f"    %b = stablehlo.broadcast_in_dim %x, dims = [] : ({S}) -> {BIG}\n"
        f"    %e = stablehlo.exponential %b : {BIG}\n"
        f"    %r = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [0, 1] :"
        f" ({BIG}, {S}) -> {S}\n"
        f"    return %s, %r : {S}, {S}\n  }}\n}}\n"
    )
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "64M")
    parse_module(text)
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "5M")
    with pytest.raises(juliabridge.ResourceLimitError, match=r"running @main needs about 6\.0 MiB"):
        parse_module(text)
