"""Hypothesis strategies for the attack classes of issue 11, applied to the fuzzer's base module.

Each strategy draws one attack and returns the mutated module text, a description, and the
error classes the loader *must* end in when the attack breaks a rule (None when the module is
valid and must load and run). The base module is tests/bundle_factory's dense_bn @main; attacks
add ops before its ``return`` (optionally feeding a result into the output through ``0 * sum``
so XLA cannot drop it) and functions after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests.mlir_snippets import DTYPES, custom_calls, lowered, mutations

RETURN = "    return %18 : tensor<5x3xf32>\n"
CONTRACT = ("ModuleContractError", "MLIRParseError", "UnsupportedModuleError")
BUDGET = ("ResourceLimitError",)
#: The fuzz child's memory budget (JULIABRIDGE_MEMORY_LIMIT): values are drawn around it.
MEMORY_LIMIT = 1 << 30


@dataclass
class Attack:
    """A mutated module and what must happen when it is loaded."""

    text: str
    what: str
    must_fail: tuple[str, ...] | None  # None: valid, must load and run


def _edit(base: str, body: list[str], functions: list[str] = (), sink: str | None = None) -> str:
    """Insert `body` lines before @main's return (adding `sink`, an f32 scalar, times zero to
    the output) and `functions` after @main."""
    lines = [f"    {ln}\n" for ln in body]
    ret = RETURN
    if sink is not None:
        lines += [
            "    %zz = stablehlo.constant dense<0.0> : tensor<f32>\n",
            f"    %zm = stablehlo.multiply {sink}, %zz : tensor<f32>\n",
            "    %zb = stablehlo.broadcast_in_dim %zm, dims = [] : (tensor<f32>) -> tensor<5x3xf32>\n",
            "    %zo = stablehlo.add %18, %zb : tensor<5x3xf32>\n",
        ]
        ret = "    return %zo : tensor<5x3xf32>\n"
    text = base.replace(RETURN, "".join(lines) + ret, 1)
    head, tail = text.rsplit("}", 1)
    return head + "".join(f + "\n" for f in functions) + "}" + tail


def _sum_f32(value: str, t: str) -> list[str]:
    """Lines reducing `value` of tensor type `t` to the f32 scalar %zs."""
    m = re.fullmatch(r"tensor<((?:\d+x)*)(.+)>", t)
    assert m
    dims = [d for d in m.group(1).split("x") if d]
    shape = "".join(f"{d}x" for d in dims)
    return [
        f"%zc = stablehlo.convert {value} : ({t}) -> tensor<{shape}f32>",
        "%zi = stablehlo.constant dense<0.0> : tensor<f32>",
        f"%zs = stablehlo.reduce(%zc init: %zi) applies stablehlo.add across dimensions = "
        f"[{', '.join(map(str, range(len(dims))))}] : (tensor<{shape}f32>, tensor<f32>) -> tensor<f32>",
    ]


def _constant(name: str, t: str) -> str:
    """A splat constant of tensor type `t` (float, complex or integer elements)."""
    et = re.sub(r"^tensor<(?:\d+x)*", "", t)[:-1]
    value = "(2.5e-01,0.0e+00)" if et.startswith("complex") else ("1" if et[0] in "iu" else "0.25")
    return f"{name} = stablehlo.constant dense<{value}> : {t}"


@cache
def call_pool() -> tuple[dict[str, Any], ...]:
    """Custom calls exactly as JAX lowers them (the valid reference), small sizes."""
    names = ["lu", "qr_reduced", "cholesky", "svd_full", "svd_values", "eigh", "eig"]
    names += ["schur", "hessenberg", "tridiagonal", "trsm_left", "gtsv", "householder"]
    pool: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}
    for name in names:
        for shape in ((3, 3), (4, 2), (2, 4), (2, 3, 3)):
            for dtype in DTYPES[:3]:
                text = lowered(name, shape, dtype, "cpu")
                for c in custom_calls(text) if text else ():
                    pool.setdefault((c["target"], tuple(c["ins"])), c)
    return tuple(pool.values())


@st.composite
def custom_call_attack(draw: st.DrawFn, base: str) -> Attack:
    call = dict(draw(st.sampled_from(call_pool())))
    attrs = dict(call["attrs"])
    outs = list(call["outs"])
    how = draw(st.sampled_from(["valid", "valid", "result", "result", "enum", "operand"]))
    what = f"custom_call @{call['target']} {how}"
    must: tuple[str, ...] | None = None
    if how == "result":
        i = draw(st.integers(0, len(outs) - 1))
        other = draw(st.sampled_from(mutations(outs[i])))
        if call["target"].endswith("pivots_to_permutation") and "x" in other[7:]:
            other = other.replace("i32", "i64")
        outs[i] = other
        for key in ("output_operand_aliases", "result_layouts", "operand_layouts"):
            attrs.pop(key, None)
        what += f" {i} -> {other}"
        must = CONTRACT
    elif how == "enum":
        cfg = attrs.get("mhlo.backend_config", "{}")
        hits = re.findall(r"(\w+ = \d+ : ui8)", cfg)
        if hits:
            hit = draw(st.sampled_from(hits))
            value = draw(st.sampled_from([0, 1, 79, 88, 255]))
            attrs["mhlo.backend_config"] = cfg.replace(hit, re.sub(r"= \d+", f"= {value}", hit))
            what += f" {hit} -> {value}"
            must = CONTRACT
    elif how == "operand":
        i = draw(st.integers(0, len(call["ins"]) - 1))
        ins = list(call["ins"])
        ins[i] = draw(st.sampled_from(mutations(ins[i])))
        call["ins"] = ins
        for key in ("output_operand_aliases", "result_layouts", "operand_layouts"):
            attrs.pop(key, None)
        what += f" operand {i} -> {ins[i]}"
        must = CONTRACT
    body = [_constant(f"%ca{i}", t) for i, t in enumerate(call["ins"])]
    res = "%cr" if len(outs) == 1 else f"%cr:{len(outs)}"
    ops = ", ".join(f"%ca{i}" for i in range(len(call["ins"])))
    attr_text = ", ".join(f"{k} = {v}" for k, v in attrs.items())
    body.append(
        f"{res} = stablehlo.custom_call @{call['target']}({ops}) {{{attr_text}}} : "
        f"({', '.join(call['ins'])}) -> ({', '.join(outs)})"
    )
    first = "%cr" if len(outs) == 1 else "%cr#0"
    body += _sum_f32(first, outs[0])
    return Attack(_edit(base, body, sink="%zs"), what, must)


@st.composite
def fft_attack(draw: st.DrawFn, base: str) -> Attack:
    kind = draw(st.sampled_from(["FFT", "IFFT", "RFFT", "IRFFT"]))
    rank = draw(st.integers(1, 2))
    dims = draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank))
    k = draw(st.integers(1, rank))
    length = list(dims[-k:])
    if kind == "IRFFT":
        length[-1] = draw(st.sampled_from([2 * (dims[-1] - 1), 2 * dims[-1] - 1]))
    bad = draw(st.booleans())
    if bad:
        j = draw(st.integers(0, k - 1))
        length[j] = draw(st.sampled_from([length[j] + 1, 2 * length[j] + 3, 64]))
    lead = dims[:-k]
    cin, rin = "complex<f32>", "f32"
    if kind in ("FFT", "IFFT"):
        tin, tout, out_dims = cin, cin, dims
    elif kind == "RFFT":
        tin, tout, out_dims = rin, cin, [*lead, *dims[-k:-1], dims[-1] // 2 + 1]
    else:
        tin, tout, out_dims = cin, rin, [*lead, *length]
    if kind == "RFFT" and not bad:
        out_dims = [*lead, *length[:-1], length[-1] // 2 + 1]
    t_in = f"tensor<{''.join(f'{d}x' for d in dims)}{tin}>"
    t_out = f"tensor<{''.join(f'{d}x' for d in out_dims)}{tout}>"
    body = [
        _constant("%fa", t_in),
        f"%fr = stablehlo.fft %fa, type = {kind}, length = [{', '.join(map(str, length))}] : "
        f"({t_in}) -> {t_out}",
        *_sum_f32("%fr", t_out),
    ]
    valid = _fft_valid(kind, dims, length, out_dims)
    return Attack(
        _edit(base, body, sink="%zs"),
        f"fft {kind} {dims} length {length} -> {out_dims}",
        None if valid else CONTRACT,
    )


def _fft_valid(kind: str, dims: list[int], length: list[int], out: list[int]) -> bool:
    k = len(length)
    if kind in ("FFT", "IFFT", "RFFT"):
        ok_in = dims[-k:] == length
    else:
        ok_in = dims[-k:] == [*length[:-1], length[-1] // 2 + 1]
    want_out = [*dims[:-k], *length] if kind in ("FFT", "IFFT", "IRFFT") else None
    if kind == "RFFT":
        want_out = [*dims[:-k], *length[:-1], length[-1] // 2 + 1]
    return ok_in and out == want_out


F8 = "tensor<8xf32>"


def _fn(name: str, body: list[str], ret: str = "%r") -> str:
    lines = "".join(f"    {b}\n" for b in body)
    return (
        f"  func.func private @{name}(%arg0: {F8}) -> {F8} {{\n{lines}    return {ret} : {F8}\n  }}"
    )


@st.composite
def callgraph_attack(draw: st.DrawFn, base: str) -> Attack:
    kind = draw(
        st.sampled_from(["self", "mutual", "composite", "no_body", "top", "fvalue", "diamond"])
    )
    use = ["%g0 = stablehlo.constant dense<0.5> : tensor<8xf32>"]
    call = lambda c, a, out: f"{out} = func.call @{c}({a}) : ({F8}) -> {F8}"  # noqa: E731
    sine = "%r = stablehlo.sine %arg0 : " + F8
    fns: list[str] = []
    top = ""
    must: tuple[str, ...] | None = CONTRACT
    if kind == "self":
        fns = [_fn("f", [call("f", "%arg0", "%r")])]
    elif kind == "mutual":
        fns = [_fn("f", [call("g", "%arg0", "%r")]), _fn("g", [call("f", "%arg0", "%r")])]
    elif kind == "composite":
        comp = f'%r = stablehlo.composite "x.f" %arg0 {{decomposition = @f}} : ({F8}) -> {F8}'
        fns = [_fn("f", [comp])]
    elif kind == "no_body":
        fns = [f"  func.func private @f(%arg0: {F8}) -> {F8}"]
    elif kind == "top":
        top = draw(
            st.sampled_from(
                [
                    "  %tc = stablehlo.constant dense<1.0> : tensor<f32>\n",
                    f"  func.func private @h(%arg0: {F8}) -> {F8} {{\n    return %arg0 : {F8}\n  }}\n"
                    "  module @inner {\n  }\n",
                ]
            )
        )
        fns = [_fn("f", [sine])]
    elif kind == "fvalue":
        fns = [
            _fn(
                "f",
                [
                    f"%fv = func.constant @g : ({F8}) -> {F8}",
                    f"%r = func.call_indirect %fv(%arg0) : ({F8}) -> {F8}",
                ],
            ),
            _fn("g", [sine]),
        ]
    else:
        fns = [
            _fn(
                "f",
                [
                    call("a", "%arg0", "%x"),
                    call("b", "%arg0", "%y"),
                    f"%r = stablehlo.add %x, %y : {F8}",
                ],
            ),
            _fn("a", [call("c", "%arg0", "%r")]),
            _fn("b", [call("c", "%arg0", "%r")]),
            _fn("c", [sine]),
        ]
        must = None
    use += [call("f", "%g0", "%g1"), *_sum_f32("%g1", F8)]
    text = _edit(base, use, fns, sink="%zs")
    if top:
        head, rest = text.split("\n", 1)
        text = head + "\n" + top + rest
    return Attack(text, f"call graph {kind}", must)


IO = {
    "infeed": [
        "%t = stablehlo.create_token : !stablehlo.token",
        '%i:2 = "stablehlo.infeed"(%t) {infeed_config = "", layout = [[0]]} : (!stablehlo.token) -> (tensor<3xf32>, !stablehlo.token)',
    ],
    "outfeed": [
        "%t = stablehlo.create_token : !stablehlo.token",
        '%o = "stablehlo.outfeed"(%arg2, %t) {outfeed_config = ""} : (tensor<3xf32>, !stablehlo.token) -> !stablehlo.token',
    ],
    "send": [
        "%t = stablehlo.create_token : !stablehlo.token",
        '%o = "stablehlo.send"(%arg2, %t) {channel_handle = #stablehlo.channel_handle<handle = 1, type = 2>, is_host_transfer = true} : (tensor<3xf32>, !stablehlo.token) -> !stablehlo.token',
    ],
    "recv": [
        "%t = stablehlo.create_token : !stablehlo.token",
        '%r:2 = "stablehlo.recv"(%t) {channel_handle = #stablehlo.channel_handle<handle = 1, type = 3>, is_host_transfer = true} : (!stablehlo.token) -> (tensor<3xf32>, !stablehlo.token)',
    ],
}


@st.composite
def io_attack(draw: st.DrawFn, base: str) -> Attack:
    kind = draw(st.sampled_from(sorted(IO)))
    return Attack(_edit(base, IO[kind]), f"host I/O {kind}", CONTRACT)


@st.composite
def collective_attack(draw: st.DrawFn, base: str) -> Attack:
    ids = draw(st.sampled_from([[[0]], [[0, 1]], [[1]], [[0], [1]], [[0, 3]]]))
    op = draw(st.sampled_from(["all_reduce", "collective_permute"]))
    if op == "all_reduce":
        n = len(ids[0])
        shape = f"{len(ids)}x{n}"
        flat = ", ".join("[" + ", ".join(map(str, g)) + "]" for g in ids)
        body = [
            f'%cl = "stablehlo.all_reduce"(%arg2) ({{\n    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n      %s = stablehlo.add %a, %b : tensor<f32>\n      stablehlo.return %s : tensor<f32>\n    }}) {{replica_groups = dense<[{flat}]> : tensor<{shape}xi64>}} : (tensor<3xf32>) -> tensor<3xf32>'
        ]
        valid = all(i == 0 for g in ids for i in g)
    else:
        pairs = [[0, 0]] if ids == [[0]] else [[0, 1], [1, 0]]
        flat = ", ".join("[" + ", ".join(map(str, p)) + "]" for p in pairs)
        body = [
            f'%cl = "stablehlo.collective_permute"(%arg2) {{source_target_pairs = dense<[{flat}]> : tensor<{len(pairs)}x2xi64>, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>}} : (tensor<3xf32>) -> tensor<3xf32>'
        ]
        valid = pairs == [[0, 0]]
    body += _sum_f32("%cl", "tensor<3xf32>")
    return Attack(_edit(base, body, sink="%zs"), f"{op} {ids}", None if valid else CONTRACT)


@st.composite
def budget_attack(draw: st.DrawFn, base: str, long_run: bool) -> Attack:
    kind = draw(st.sampled_from(["chain", "doubling", "value", "live"]))
    if kind == "chain":
        choices = [10, 300, 10_200] + ([2_000, 9_000, 12_000, 30_000, 50_000] if long_run else [])
        n = draw(st.sampled_from(choices))
        body = ["%k0 = stablehlo.sine %arg2 : tensor<3xf32>"]
        body += [f"%k{i} = stablehlo.sine %k{i - 1} : tensor<3xf32>" for i in range(1, n)]
        body += _sum_f32(f"%k{n - 1}", "tensor<3xf32>")
        return Attack(
            _edit(base, body, sink="%zs"), f"chain of {n}", None if n <= 9_000 else BUDGET
        )
    if kind == "doubling":
        levels = draw(st.sampled_from([3, 8, 22, 30, 40]))
        fns = []
        for i in range(levels):
            fns.append(
                _fn(
                    f"d{i}",
                    [
                        f"%x = func.call @d{i + 1}(%arg0) : ({F8}) -> {F8}",
                        f"%y = func.call @d{i + 1}(%arg0) : ({F8}) -> {F8}",
                        f"%r = stablehlo.add %x, %y : {F8}",
                    ],
                )
            )
        fns.append(_fn(f"d{levels}", [f"%r = stablehlo.sine %arg0 : {F8}"]))
        body = [
            "%dg = stablehlo.constant dense<0.5> : tensor<8xf32>",
            f"%dr = func.call @d0(%dg) : ({F8}) -> {F8}",
            *_sum_f32("%dr", F8),
        ]
        return Attack(
            _edit(base, body, fns, sink="%zs"),
            f"calls doubling {levels} levels",
            None if levels <= 8 else BUDGET,
        )
    if kind == "value":
        n = draw(st.sampled_from([1 << 16, 1 << 26, (MEMORY_LIMIT >> 2) + 1, 1 << 40]))
        t = f"tensor<{n}xf32>"
        body = [
            "%vc = stablehlo.constant dense<1.0> : tensor<f32>",
            f"%vb = stablehlo.broadcast_in_dim %vc, dims = [] : (tensor<f32>) -> {t}",
        ]
        sink = None
        if n <= 1 << 16:
            body += _sum_f32("%vb", t)
            sink = "%zs"
        return Attack(
            _edit(base, body, sink=sink),
            f"a value of {4 * n} bytes",
            None if 4 * n <= 1 << 28 else BUDGET,
        )
    n = (MEMORY_LIMIT // 4) * 3 // 4  # three values of 3/4 of the budget each, alive at once
    t = f"tensor<{n}xf32>"
    body = [
        "%lc = stablehlo.constant dense<1.0> : tensor<f32>",
        f"%la = stablehlo.broadcast_in_dim %lc, dims = [] : (tensor<f32>) -> {t}",
        f"%lb = stablehlo.broadcast_in_dim %lc, dims = [] : (tensor<f32>) -> {t}",
        f"%ld = stablehlo.add %la, %lb : {t}",
    ]
    return Attack(_edit(base, body), "three large values alive at once", BUDGET)


@st.composite
def text_attack(draw: st.DrawFn, base: str, long_run: bool) -> Attack:
    """Long strings and comments (cheap to scan now), brackets hidden in them, real nesting."""
    kind = draw(
        st.sampled_from(["long_string", "brackets_in_string", "comment", "escapes", "nesting"])
    )
    size = draw(st.sampled_from([1 << 10, 1 << 20] + ([8 << 20, 64 << 20] if long_run else [])))
    attr = {
        "long_string": '"' + "x" * size + '"',
        "brackets_in_string": '"' + "[" * min(size, 1 << 16) + '"',
        "escapes": '"' + '\\"' * (size // 2) + '"',
    }.get(kind)
    if kind == "comment":
        comment = "// " + "{[(<" * (size // 4) + '"\n'
        return Attack(base.replace(RETURN, comment + RETURN, 1), f"comment of {size} bytes", None)
    if kind == "nesting":
        depth = draw(st.sampled_from([200, 257, 5_000, 100_000]))
        body = [
            f"%nn = stablehlo.constant {{note = {'[' * depth}1{']' * depth}}} dense<1.0> : tensor<f32>"
        ]
        return Attack(
            _edit(base, body), f"nesting {depth}", None if depth <= 256 else ("MLIRParseError",)
        )
    body = [f"%ns = stablehlo.constant {{note = {attr}}} dense<1.0> : tensor<f32>"]
    return Attack(_edit(base, body), f"{kind} of {size} bytes", None)


def module_attacks(base: str, long_run: bool = False) -> st.SearchStrategy[Attack]:
    """One attack of any class."""
    return st.one_of(
        custom_call_attack(base),
        fft_attack(base),
        callgraph_attack(base),
        io_attack(base),
        collective_attack(base),
        budget_attack(base, long_run),
        text_attack(base, long_run),
    )


#: Strings that act on a terminal or on rich markup, for the CLI family.
HOSTILE = [
    "\x1b]0;pwned\x07",
    "\x1b[2J\x1b[H",
    "\x1b]52;c;ZWNobyBoaQ==\x07",
    "[/bold]",
    "[red]x[/red]",
    "[link=file:///etc/passwd]x[/link]",
    "\u202egnp.exe",
    "\x9b31m",
    "a\nb\rc\x08",
    "\x00",
    "\ud800",
]


def hostile_text() -> st.SearchStrategy[str]:
    """A string with one or more hostile pieces."""
    return st.lists(st.sampled_from(HOSTILE) | st.text(max_size=4), min_size=1, max_size=4).map(
        "".join
    )


def assert_no_terminal_codes(text: str) -> None:
    """No byte in `text` that a terminal acts on (ESC, BEL, C1 controls, bidi overrides)."""
    bad = re.search("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]", text)
    assert bad is None, f"terminal control {bad.group()!r} in output: {text[:500]!r}"


__all__ = ["Attack", "assert_no_terminal_codes", "hostile_text", "module_attacks", "np"]
