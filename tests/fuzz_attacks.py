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

from juliabridge.stablehlo import budget
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
    kind = draw(st.sampled_from(["chain", "doubling", "value", "live", "case"]))
    if kind == "case":
        # Branches past MAX_CASE_BRANCHES (XLA's compile is superlinear in them) are refused at
        # load time; also when they sit in a function called twice.
        n = draw(st.sampled_from([1, 3, 120, 1_001, 2_500]))
        calls = draw(st.sampled_from([1, 2]))
        index = draw(st.sampled_from([-1, 0, 2, 1 << 20]))
        parts = [
            f"{{\n      %cc{k} = stablehlo.constant dense<{k}.0> : tensor<3xf32>\n"
            f"      %ca{k} = stablehlo.add %arg0, %cc{k} : tensor<3xf32>\n"
            f"      stablehlo.return %ca{k} : tensor<3xf32>\n    }}"
            for k in range(n)
        ]
        fn = (
            "  func.func private @cs(%arg0: tensor<3xf32>) -> tensor<3xf32> {\n"
            f"    %i = stablehlo.constant dense<{index}> : tensor<i32>\n"
            f'    %r = "stablehlo.case"(%i) ({", ".join(parts)}) : (tensor<i32>) -> tensor<3xf32>\n'
            "    return %r : tensor<3xf32>\n  }\n"
        )
        body = [
            f"%cb{j} = func.call @cs(%arg2) : (tensor<3xf32>) -> tensor<3xf32>"
            for j in range(calls)
        ]
        if calls == 2:
            body.append("%cb = stablehlo.add %cb0, %cb1 : tensor<3xf32>")
        body += _sum_f32("%cb" if calls == 2 else "%cb0", "tensor<3xf32>")
        return Attack(
            _edit(base, body, [fn], sink="%zs"),
            f"case of {n} branches called {calls}x",
            None if n * calls <= 1_000 else BUDGET,
        )
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


#: Element types for element_type_attack (issue 39): those XLA aborts on must be refused at load
#: (stablehlo/elementtypes.py), the others must compute; i1 arithmetic is folded by XLA.
_ELEMENT_TYPES = {
    "f6E2M3FN": "1.5",
    "f6E3M2FN": "1.5",
    "f8E4M3FN": "1.5",
    "f8E5M2": "1.5",
    "f8E8M0FNU": "2.0",
    "f4E2M1FN": "1.5",
    "i4": "3",
    "ui2": "1",
    "bf16": "1.5",
    "i1": "true",
}


@st.composite
def element_type_attack(draw: st.DrawFn, base: str) -> Attack:
    """A constant of a narrow element type, added or multiplied with itself (the f6 types
    aborted the process on every backend; XLA folded an i1 add as integers), or a bitcast
    between booleans and floats (XLA returned another shape than declared)."""
    if draw(st.booleans()) and draw(st.booleans()):
        n = draw(st.sampled_from([8, 16, 32]))
        src = {8: "ui8", 16: "f16", 32: "f32"}[n]
        value = "1" if src == "ui8" else "1.5"
        body = [
            f"%ba = stablehlo.constant dense<{value}> : tensor<{src}>",
            f"%bb = stablehlo.bitcast_convert %ba : (tensor<{src}>) -> tensor<{n}xi1>",
        ]
        summed = _edit(base, [*body, *_sum_f32("%bb", f"tensor<{n}xi1>")], sink="%zs")
        return Attack(summed, f"bitcast_convert {src} -> tensor<{n}xi1>", CONTRACT)
    et = draw(st.sampled_from(sorted(_ELEMENT_TYPES)))
    op = draw(st.sampled_from(["add", "multiply"]))
    t = f"tensor<3x{et}>"
    body = [
        f"%ea = stablehlo.constant dense<{_ELEMENT_TYPES[et]}> : {t}",
        f"%eb = stablehlo.{op} %ea, %ea : {t}",
    ]
    summed = _edit(base, [*body, *_sum_f32("%eb", t)], sink="%zs")
    return Attack(summed, f"{op} of {et} constants", CONTRACT if et.startswith("f6") else None)


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


def _checked(base: str, body: list[str], value: str, want: list[int] | list[float], t: str) -> str:
    """`body`, then the count of elements of `value` (type `t`, 1-D) that differ from `want`
    added to the output: a wrong value changes the output, a right one leaves it exact."""
    n = len(want)
    et = re.sub(r"^tensor<(?:\d+x)*", "", t)[:-1]
    shown = ", ".join(map(str, want)) if et != "f32" else ", ".join(f"{w:.1f}" for w in want)
    lines = [
        *body,
        f"%hw = stablehlo.constant dense<[{shown}]> : {t}",
        f"%hd = stablehlo.compare NE, {value}, %hw : ({t}, {t}) -> tensor<{n}xi1>",
        f"%hc = stablehlo.convert %hd : (tensor<{n}xi1>) -> tensor<{n}xf32>",
        "%hi = stablehlo.constant dense<0.0> : tensor<f32>",
        f"%hs = stablehlo.reduce(%hc init: %hi) applies stablehlo.add across dimensions = [0] "
        f": (tensor<{n}xf32>, tensor<f32>) -> tensor<f32>",
        "%hb = stablehlo.broadcast_in_dim %hs, dims = [] : (tensor<f32>) -> tensor<5x3xf32>",
        "%ho = stablehlo.add %18, %hb : tensor<5x3xf32>",
    ]
    return base.replace(
        RETURN, "".join(f"    {ln}\n" for ln in lines) + "    return %ho : tensor<5x3xf32>\n", 1
    )


def _xla_division(x: int, y: int, dtype: np.dtype, remainder: bool) -> int:
    """XLA's integer division: x / 0 = -1 (all bits set), x % 0 = x, INT_MIN / -1 = INT_MIN,
    INT_MIN % -1 = 0, else truncation toward zero."""
    info = np.iinfo(dtype)
    if y == 0:
        return x if remainder else (-1 if info.min < 0 else int(info.max))
    if info.min < 0 and x == info.min and y == -1:
        return 0 if remainder else x
    q = abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1)
    return x - q * y if remainder else q


_DIVISIONS = {
    "stablehlo.divide",
    "stablehlo.remainder",
    "chlo.broadcast_divide",
    "chlo.broadcast_remainder",
}
_HUGE = [(1 << 63) - 2, (1 << 62) + 3, 1 << 61, (1 << 58) // 3]


def _padded(x: list[int], low: int, high: int, interior: int) -> list[float]:
    spread = np.zeros(len(x) + (len(x) - 1) * interior, np.float32)
    spread[:: interior + 1] = x
    full = np.concatenate([np.zeros(max(low, 0)), spread, np.zeros(max(high, 0))])
    return [float(v) for v in full[max(-low, 0) : len(full) - max(-high, 0)]]


def region_division(
    region: str, op: str, name: str, dtype: np.dtype, xs: list[int], y: int
) -> tuple[list[str], list[int]]:
    """Ops computing `op`(x, y) for each x of `xs` inside a `region` body (map, reduce, while),
    the divisor a constant defined in the body; and the values XLA's semantics give."""
    n = len(xs)
    t, s = f"tensor<{n}x{name}>", f"tensor<{name}>"
    rem = "remainder" in op
    div = [_xla_division(x, y, dtype, rem) for x in xs]

    def call(a: str, b: str, ty: str) -> str:
        return (
            f"{op} {a}, {b} : ({ty}, {ty}) -> {ty}"
            if op.startswith("chlo")
            else f"{op} {a}, {b} : {ty}"
        )

    body = [f"%gx = stablehlo.constant dense<[{', '.join(map(str, xs))}]> : {t}"]
    if region == "map":
        # op(element, y) + op(x0, y): the second of two constants of the body, which XLA folds.
        body.append(
            f'%gr = "stablehlo.map"(%gx) ({{\n    ^bb0(%e: {s}):\n'
            f"      %c = stablehlo.constant dense<{xs[0]}> : {s}\n"
            f"      %d = stablehlo.constant dense<{y}> : {s}\n      %qe = {call('%e', '%d', s)}\n"
            f"      %qc = {call('%c', '%d', s)}\n      %q = stablehlo.add %qe, %qc : {s}\n"
            f"      stablehlo.return %q : {s}\n    }}) {{dimensions = array<i64: 0>}} : ({t}) -> {t}"
        )
        bits = 1 << (8 * dtype.itemsize)
        wrap = [(v + div[0]) % bits for v in div]
        return body, [int(np.array(v, np.uint64).astype(dtype)) for v in wrap]
    if region == "while":
        body += [
            "%gi = stablehlo.constant dense<0> : tensor<i64>",
            f"%gw:2 = stablehlo.while(%wi = %gi, %wc = %gx) : tensor<i64>, {t}\n"
            "     cond {\n      %one = stablehlo.constant dense<1> : tensor<i64>\n"
            "      %lt = stablehlo.compare LT, %wi, %one : (tensor<i64>, tensor<i64>) -> tensor<i1>\n"
            "      stablehlo.return %lt : tensor<i1>\n     } do {\n"
            "      %one = stablehlo.constant dense<1> : tensor<i64>\n"
            "      %nx = stablehlo.add %wi, %one : tensor<i64>\n"
            f"      %d = stablehlo.constant dense<{y}> : {t}\n      %q = {call('%wc', '%d', t)}\n"
            f"      stablehlo.return %nx, %q : tensor<i64>, {t}\n     }}",
            f"%gr = stablehlo.add %gw#1, %gz : {t}",
            f"%gz = stablehlo.constant dense<0> : {t}",
        ]
        body[-2], body[-1] = body[-1], body[-2]
        return body, div
    # A reduce may apply its body to the init value any number of times (spec.md#reduce), so
    # its result is a sum (0 the identity) and the division, of two constants of the body,
    # only has to compile and run without trapping.
    t2 = f"tensor<{n}x1x{name}>"
    body += [
        f"%g2 = stablehlo.reshape %gx : ({t}) -> {t2}",
        f"%g0 = stablehlo.constant dense<0> : {s}",
        f'%gr = "stablehlo.reduce"(%g2, %g0) ({{\n    ^bb0(%a: {s}, %b: {s}):\n'
        f"      %c = stablehlo.constant dense<{xs[0]}> : {s}\n"
        f"      %d = stablehlo.constant dense<{y}> : {s}\n      %q = {call('%c', '%d', s)}\n"
        f"      %z = stablehlo.constant dense<0> : {s}\n"
        f"      %m = stablehlo.multiply %q, %z : {s}\n      %ab = stablehlo.add %a, %b : {s}\n"
        f"      %r = stablehlo.add %ab, %m : {s}\n"
        f"      stablehlo.return %r : {s}\n    }}) {{dimensions = array<i64: 1>}} : ({t2}, {s}) -> {t}",
    ]
    return body, list(xs)


@st.composite
def host_eval_attack(draw: st.DrawFn, base: str) -> Attack:
    """What XLA evaluates on the host (issue 27): integer division of constants (by 0, by -1,
    folded divisors), also inside map, reduce and while bodies, and pad/reduce_window/
    dynamic_pad extents near int64's range."""
    kind = draw(
        st.sampled_from(["division", "division", "region", "pad", "reduce_window", "dynamic_pad"])
    )
    if kind == "region":
        name = draw(st.sampled_from(["i8", "i32", "ui8", "ui32"]))
        dtype = np.dtype(("u" if name[0] == "u" else "") + "int" + name.lstrip("ui"))
        info = np.iinfo(dtype)
        pool = [int(info.min), int(info.max), 0, 1, 7, 200 % (int(info.max) + 1)]
        if info.min < 0:
            pool += [-1, -7]
        xs = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
        y = draw(st.sampled_from([0, 0, -1, 3] if info.min < 0 else [0, 0, 3]))
        region = draw(st.sampled_from(["map", "reduce", "while"]))
        op = draw(st.sampled_from(sorted(_DIVISIONS)))
        body, want = region_division(region, op, name, dtype, xs, y)
        return Attack(
            _checked(base, body, "%gr", want, f"tensor<{len(xs)}x{name}>"),
            f"{op} {name} {xs} by {y} in a {region} body",
            None,
        )
    if kind == "division":
        name = draw(st.sampled_from(["i8", "i16", "i32", "ui8", "ui32"]))
        dtype = np.dtype(("u" if name[0] == "u" else "") + "int" + name.lstrip("ui"))
        info = np.iinfo(dtype)
        pool = (
            [int(info.min), int(info.max), 0, 1, -1, 7, -7, 3]
            if info.min < 0
            else [0, 1, 7, 200 % (int(info.max) + 1), int(info.max)]
        )
        n = draw(st.integers(1, 4))
        xs = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
        trap = [0, -1] if info.min < 0 else [0]  # what XLA's folder must never divide by
        ys = draw(
            st.lists(
                st.one_of(st.sampled_from(trap), st.sampled_from(pool)), min_size=n, max_size=n
            )
        )
        splat = draw(st.booleans())
        if splat:
            ys = [ys[0]] * n
        op = draw(
            st.sampled_from(
                [
                    "stablehlo.divide",
                    "stablehlo.remainder",
                    "chlo.broadcast_divide",
                    "chlo.broadcast_remainder",
                ]
            )
        )
        folded = draw(st.booleans())
        t = f"tensor<{n}x{name}>"
        body = [
            f"%hx = stablehlo.constant dense<[{', '.join(map(str, xs))}]> : {t}",
            f"%hy = stablehlo.constant dense<[{', '.join(map(str, ys))}]> : {t}",
        ]
        div = "%hy"
        if folded:  # a divisor that is a constant only once XLA folds y + 0 * y
            body += [
                f"%hz = stablehlo.constant dense<0> : {t}",
                f"%hm = stablehlo.multiply %hz, %hy : {t}",
                f"%hf = stablehlo.add %hy, %hm : {t}",
            ]
            div = "%hf"
        if op.startswith("chlo"):
            body.append(f"%hq = {op} %hx, {div} : ({t}, {t}) -> {t}")
        else:
            body.append(f"%hq = {op} %hx, {div} : {t}")
        want = [_xla_division(x, y, dtype, "remainder" in op) for x, y in zip(xs, ys)]
        return Attack(
            _checked(base, body, "%hq", want, t),
            f"{op} {name} {xs} by {ys}{' folded' if folded else ''}",
            None,
        )
    n = draw(st.integers(1, 4))
    x = list(range(1, n + 1))
    huge = draw(st.booleans())
    interior = draw(st.sampled_from(_HUGE if huge and draw(st.booleans()) else [0, 1, 2]))
    if kind == "reduce_window" and interior > 2:
        interior = (1 << 62) - 1  # base dilation b = interior + 1
    low = draw(st.sampled_from([-v for v in _HUGE] + _HUGE if huge else [-2, -1, 0, 1, 3]))
    if kind == "dynamic_pad":  # i32 operands (the fuzz child runs without x64): small only
        low, interior = max(-1, min(low, 3)), min(interior, 2)
    out = draw(st.integers(0, 6))
    high = out - low - n - interior * (n - 1)
    clamped = not -(1 << 63) <= high < (1 << 63)
    if clamped:  # the verifier then refuses the declared result (a parse error)
        high = -(1 << 63) if high < 0 else (1 << 63) - 1
    if kind == "dynamic_pad" and not -(1 << 31) <= high < (1 << 31):
        high, clamped = 0, True
    t_in = f"tensor<{n}xf32>"
    t_out = f"tensor<{out}xf32>"
    body = [
        f"%hx = stablehlo.constant dense<[{', '.join(f'{v}.0' for v in x)}]> : {t_in}",
        "%hp = stablehlo.constant dense<0.0> : tensor<f32>",
    ]
    if kind == "pad":
        body.append(
            f"%hr = stablehlo.pad %hx, %hp, low = [{low}], high = [{high}], interior = "
            f"[{interior}] : ({t_in}, tensor<f32>) -> {t_out}"
        )
    elif kind == "dynamic_pad":
        body += [
            f"%hl = stablehlo.constant dense<[{low}]> : tensor<1xi32>",
            f"%hh = stablehlo.constant dense<[{high}]> : tensor<1xi32>",
            f"%hn = stablehlo.constant dense<[{interior}]> : tensor<1xi32>",
            f"%hr = stablehlo.dynamic_pad %hx, %hp, %hl, %hh, %hn : ({t_in}, tensor<f32>, "
            f"tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> {t_out}",
        ]
    else:
        body.append(
            f'%hr = "stablehlo.reduce_window"(%hx, %hp) ({{\n'
            "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
            "      %s = stablehlo.add %a, %b : tensor<f32>\n"
            "      stablehlo.return %s : tensor<f32>\n"
            f"    }}) {{window_dimensions = array<i64: 1>, base_dilations = array<i64: "
            f"{interior + 1}>, padding = dense<[[{low}, {high}]]> : tensor<1x2xi64>}} : "
            f"({t_in}, tensor<f32>) -> {t_out}"
        )
    what = f"{kind} of {n} low {low} high {high} interior {interior} -> {out}"
    # The rule of contracts.check_extents: |value| x (largest dimension + 1) <= 2^58.
    scale = max(n, out) + 1
    extents = [low, high, interior + (kind == "reduce_window")]
    rule_ok = all(abs(v) * scale <= 1 << 58 for v in extents)
    summed = _edit(base, [*body, *_sum_f32("%hr", t_out)], sink="%zs")
    if clamped or not rule_ok:
        return Attack(summed, what, CONTRACT)
    if max(abs(low), abs(high), interior) > 64 or out == 0:
        return Attack(summed, what, None)  # within the rule: XLA compiles it (no reference)
    padded = _padded(x, low, high, interior)
    return Attack(_checked(base, body, "%hr", padded, t_out), what, None)


@st.composite
def reuse_attack(draw: st.DrawFn, base: str) -> Attack:
    """Issue 39: one attribute (an alias ``#a``) carried by many ops, as constants (f32 or
    complex) or as a discardable attribute: every use is counted (the printed module and XLA's
    literals hold a copy per use), so past the budget the module is refused at load."""
    kind = draw(st.sampled_from(["constant", "complex", "attribute"]))
    n = draw(st.sampled_from([64, 1 << 18]))  # elements of the alias
    uses = draw(st.sampled_from([3, 100]))
    et = "complex<f32>" if kind == "complex" else "f32"
    values = np.random.default_rng(n).standard_normal(n * (2 if kind == "complex" else 1))
    t = f"tensor<{n}x{et}>"
    alias = f'#a = dense<"0x{values.astype(np.float32).tobytes().hex()}"> : {t}\n'
    body: list[str] = []
    acc = "%arg2"
    for k in range(uses):
        if kind == "attribute":
            body.append(
                f'%ra{k} = "stablehlo.add"({acc}, %arg2) {{foo.bar = #a}} : '
                "(tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>"
            )
        else:
            part = "real" if kind == "complex" else "abs"
            body += [
                f"%rc{k} = stablehlo.constant #a",
                f"%rs{k} = stablehlo.slice %rc{k} [0:3] : ({t}) -> tensor<3x{et}>",
                f"%rr{k} = stablehlo.{part} %rs{k} : (tensor<3x{et}>) -> tensor<3xf32>",
                f"%ra{k} = stablehlo.add {acc}, %rr{k} : tensor<3xf32>",
            ]
        acc = f"%ra{k}"
    body += _sum_f32(acc, "tensor<3xf32>")
    counted = n * (8 if kind == "complex" else 4) * uses * 14
    return Attack(
        alias + _edit(base, body, sink="%zs"),
        f"an alias of {n} {et} carried by {uses} ops ({kind})",
        BUDGET if counted > MEMORY_LIMIT else None,
    )


#: CHLO special functions weighted by memory (digamma... bessel_i1e) or by compile time (asinh,
#: atanh: budget.COMPILE_SECONDS), unary so one chain shape fits them all.
_SPECIAL = ("digamma", "lgamma", "erf_inv", "bessel_i1e", "asinh", "atanh")


@st.composite
def expansion_attack(draw: st.DrawFn, base: str) -> Attack:
    """Issue 39: ops whose cost is what they expand to, not one op: chains of CHLO special
    functions (weighted by budget.EXPANSION; 900 of any, and one more than the default admits
    alone, are past the op budget), a sort of one value passed 3 or 60,000 times (budget.
    PER_OPERAND: past the budget however short the text), a max pool whose windows visit 10^13
    elements (past MAX_WINDOW_WORK) or few, and select_and_scatter over windows
    up to the whole operand (lax enumerated every offset)."""
    kind = draw(st.sampled_from(["special", "sort", "pool", "window"]))
    if kind == "pool":
        n, w = draw(st.sampled_from([(64, 2), (4096, 2048)]))
        o, s = n - w + 1, "tensor<f32>"
        t, r, flat = f"tensor<{n}x{n}xf32>", f"tensor<{o}x{o}xf32>", f"tensor<{n * n}xf32>"
        body = [
            f"%pi = stablehlo.iota dim = 0 : {flat}",
            f"%px = stablehlo.reshape %pi : ({flat}) -> {t}",
            f"%pz = stablehlo.constant dense<0.0> : {s}",
            f'%pr = "stablehlo.reduce_window"(%px, %pz) <{{window_dimensions = '
            f"array<i64: {w}, {w}>}}> ({{",
            f"^bb0(%pa: {s}, %pb: {s}):",
            f"  %pc = stablehlo.maximum %pa, %pb : {s}",
            f"  stablehlo.return %pc : {s}",
            f"}}) : ({t}, {s}) -> {r}",
            *_sum_f32("%pr", r),
        ]
        return Attack(
            _edit(base, body, sink="%zs"),
            f"a {w}x{w} max pool over {n}x{n}",
            BUDGET if o * o * w * w > budget.MAX_WINDOW_WORK else None,
        )
    if kind == "sort":
        n = draw(st.sampled_from([3, 60_000]))
        f3, s = "tensor<3xf32>", "tensor<f32>"
        types = ", ".join([f3] * n)
        body = [
            f'%so:{n} = "stablehlo.sort"({", ".join(["%arg2"] * n)}) '
            "<{dimension = 0 : i64, is_stable = true}> ({",
            f"^bb0({', '.join(f'%sp{i}: {s}, %sq{i}: {s}' for i in range(n))}):",
            f"  %slt = stablehlo.compare LT, %sp0, %sq0 : ({s}, {s}) -> tensor<i1>",
            "  stablehlo.return %slt : tensor<i1>",
            f"}}) : ({types}) -> ({types})",
            *_sum_f32(f"%so#{n - 1}", f3),
        ]
        weight = n * budget.PER_OPERAND["stablehlo.sort"]
        return Attack(
            _edit(base, body, sink="%zs"),
            f"a sort of {n} operands",
            BUDGET if weight > budget.MAX_OPS else None,
        )
    if kind == "special":
        op = draw(st.sampled_from(_SPECIAL))
        weight = budget.EXPANSION[f"chlo.{op}"]
        n = draw(st.sampled_from([2, 12, budget.MAX_OPS // weight + 1, 900]))
        f3 = "tensor<3xf32>"
        body = [f"%e0 = chlo.{op} %arg2 : {f3} -> {f3}"]
        body += [f"%e{i} = chlo.{op} %e{i - 1} : {f3} -> {f3}" for i in range(1, n)]
        body += _sum_f32(f"%e{n - 1}", f3)
        return Attack(
            _edit(base, body, sink="%zs"),
            f"a chain of {n} chlo.{op}",
            BUDGET if n * weight > budget.MAX_OPS else None,
        )
    side = draw(st.sampled_from([8, 512]))
    w = draw(st.sampled_from([2, side]))
    scatter = draw(st.sampled_from(["add", "maximum", "multiply"]))
    select = draw(st.sampled_from(["GE", "GT", "LE"]))
    src = (side - w) // w + 1
    t, ts, s = f"tensor<{side}x{side}xf32>", f"tensor<{src}x{src}xf32>", "tensor<f32>"
    flat = f"tensor<{side * side}xf32>"
    body = [
        f"%wi = stablehlo.iota dim = 0 : {flat}",
        f"%wx = stablehlo.reshape %wi : ({flat}) -> {t}",
        f"%wone = stablehlo.constant dense<1.5> : {s}",
        f"%ws = stablehlo.broadcast_in_dim %wone, dims = [] : ({s}) -> {ts}",
        f'%wr = "stablehlo.select_and_scatter"(%wx, %ws, %wone) <{{padding = dense<0> : '
        f"tensor<2x2xi64>, window_dimensions = array<i64: {w}, {w}>, window_strides = "
        f"array<i64: {w}, {w}>}}> ({{",
        f"^bb0(%wa: {s}, %wb: {s}):",
        f"  %wc = stablehlo.compare {select}, %wa, %wb : ({s}, {s}) -> tensor<i1>",
        "  stablehlo.return %wc : tensor<i1>",
        "}, {",
        f"^bb0(%wa: {s}, %wb: {s}):",
        f"  %wc = stablehlo.{scatter} %wa, %wb : {s}",
        f"  stablehlo.return %wc : {s}",
        f"}}) : ({t}, {ts}, {s}) -> {t}",
        *_sum_f32("%wr", t),
    ]
    return Attack(
        _edit(base, body, sink="%zs"), f"select_and_scatter {select}/{scatter} window {w}^2", None
    )


#: Modules of a kind juliabridge refuses with advice of its own (issue 50): the injected line,
#: given the f32 scalar %zk, defines the f32 scalar %ze.
_REFUSALS = {
    "elided constant": "%ze = stablehlo.constant dense_resource<__elided__> : tensor<f32>",
    "enzyme.autodiff": '%ze = "enzyme.autodiff"(%zk) {fn = @main} : (tensor<f32>) -> tensor<f32>',
    "enzyme.batch": "%ze = enzyme.batch @main(%zk) {batch_shape = array<i64: 2>} : "
    "(tensor<f32>) -> tensor<f32>",
    "mhlo.add": '%ze = "mhlo.add"(%zk, %zk) : (tensor<f32>, tensor<f32>) -> tensor<f32>',
    "metal kernel": "%ze = stablehlo.custom_call @metal_gelu_kernel(%zk) : "
    "(tensor<f32>) -> tensor<f32>",
    "cuda kernel": "%ze = stablehlo.custom_call @cublas_gemm(%zk) : (tensor<f32>) -> tensor<f32>",
}


@st.composite
def refusal_attack(draw: st.DrawFn, base: str) -> Attack:
    """A module juliabridge refuses on every backend, trusted or not where trust cannot help:
    elided weights, ops outside StableHLO, a kernel for another platform (issue 50)."""
    kind = draw(st.sampled_from(sorted(_REFUSALS)))
    body = ["%zk = stablehlo.constant dense<0.25> : tensor<f32>", _REFUSALS[kind]]
    return Attack(_edit(base, body, sink="%ze"), f"refusal: {kind}", ("UnsupportedModuleError",))


@st.composite
def compile_time_attack(draw: st.DrawFn, base: str) -> Attack:
    """A chain of complex elementwise ops, which XLA compiles in quadratic time (issue 50):
    short chains, and 40 sines or exponentials, must load and run; 40 sqrt (minutes to compile)
    must end as a ResourceLimitError: past budget.COMPLEX_EXPANSION, with the compile limit
    (tests/test_fuzz.py's runner sets JULIABRIDGE_COMPILE_LIMIT) behind it."""
    n = draw(st.sampled_from([2, 4, 40]))
    op = draw(st.sampled_from(["sqrt", "sine", "exponential"]))
    t, f = "tensor<3xcomplex<f32>>", "tensor<3xf32>"
    # From an argument, so XLA cannot fold the chain into a constant.
    body = [f"%zv0 = stablehlo.complex %arg2, %arg3 : ({f}, {f}) -> {t}"]
    body += [f"%zv{i + 1} = stablehlo.{op} %zv{i} : {t}" for i in range(n)]
    body += [f"%zr = stablehlo.real %zv{n} : ({t}) -> {f}", *_sum_f32("%zr", f)]
    # Measured: 40 chained complex sqrt take minutes; sine and exponential compile in seconds.
    fails = ("ResourceLimitError",) if n == 40 and op == "sqrt" else None
    return Attack(_edit(base, body, sink="%zs"), f"compile time: {n} complex {op}", fails)


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
        host_eval_attack(base),
        element_type_attack(base),
        reuse_attack(base),
        expansion_attack(base),
        refusal_attack(base),
        compile_time_attack(base),
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


# --- zip metadata (issue 39): the Reactant export's inputs npz -----------------------------------

#: Values a forged zip field takes: zero, small, the 16/32-bit maxima, 2^31 and around.
ZIP_VALUES = [0, 1, 2, 3, 7, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
#: (record signature, field offset, width) of the fields forged: end record (entries on this
#: disk, total entries, directory size and offset, comment length); central header (method,
#: crc, compressed and uncompressed size, name and extra lengths, local header offset); local
#: header (method, sizes, name and extra lengths).
ZIP_FIELDS = {
    "end.entries_disk": (b"PK\x05\x06", 8, 2),
    "end.entries": (b"PK\x05\x06", 10, 2),
    "end.cd_size": (b"PK\x05\x06", 12, 4),
    "end.cd_offset": (b"PK\x05\x06", 16, 4),
    "end.comment_len": (b"PK\x05\x06", 20, 2),
    "central.method": (b"PK\x01\x02", 10, 2),
    "central.crc": (b"PK\x01\x02", 16, 4),
    "central.csize": (b"PK\x01\x02", 20, 4),
    "central.usize": (b"PK\x01\x02", 24, 4),
    "central.name_len": (b"PK\x01\x02", 28, 2),
    "central.extra_len": (b"PK\x01\x02", 30, 2),
    "central.offset": (b"PK\x01\x02", 42, 4),
    "local.method": (b"PK\x03\x04", 8, 2),
    "local.csize": (b"PK\x03\x04", 18, 4),
    "local.usize": (b"PK\x03\x04", 22, 4),
    "local.name_len": (b"PK\x03\x04", 26, 2),
    "local.extra_len": (b"PK\x03\x04", 28, 2),
}


def forge_zip_field(data: bytes, field: str, which: int, value: int) -> bytes:
    """`data` with `field` (ZIP_FIELDS) of the `which`-th record of its kind set to `value`
    (masked to the field's width); unchanged when there is no such record."""
    sig, offset, width = ZIP_FIELDS[field]
    starts = [i for i in range(len(data) - 3) if data[i : i + 4] == sig]
    if not starts:
        return data
    at = starts[which % len(starts)] + offset
    out = bytearray(data)
    out[at : at + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return bytes(out)


@st.composite
def zip_metadata_attack(draw: st.DrawFn, members: dict[str, bytes]) -> tuple[bytes, str, bool]:
    """A zip of `members` (name -> bytes) with its metadata attacked: (bytes, what, whether
    the member values may differ from the originals: a duplicate with other content)."""
    import io
    import warnings
    import zipfile

    how = draw(
        st.sampled_from(["field", "field", "field", "duplicate", "huge_name", "deflated", "junk"])
    )
    names = list(members)
    buf = io.BytesIO()
    other = False
    what = how
    with zipfile.ZipFile(buf, "w") as z:
        deflate = how == "deflated"
        for n in names:
            z.writestr(n, members[n], zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED)
        if how == "duplicate":
            n = draw(st.sampled_from(names))
            other = draw(st.booleans())
            data = members[n][:-4] + b"\x00\x00\x80\x40" if other else members[n]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # zipfile warns of the duplicate name
                z.writestr(n, data)
            what += f" {n} ({'other' if other else 'same'} bytes)"
        elif how == "huge_name":
            size = draw(st.sampled_from([256, 4096, 65535]))
            z.writestr("a" * (size - 4) + ".npy", b"")
            what += f" of {size} chars"
    data = buf.getvalue()
    if how in ("field", "deflated") and draw(st.booleans() if how == "deflated" else st.just(1)):
        field = draw(st.sampled_from(sorted(ZIP_FIELDS)))
        which = draw(st.integers(0, 3))
        value = draw(st.sampled_from(ZIP_VALUES) | st.integers(0, 1 << 32))
        data = forge_zip_field(data, field, which, value)
        what += f" {field}[{which}] = {value}"
    elif how == "junk":
        pos = draw(st.sampled_from(["prepend", "append", "truncate"]))
        if pos == "truncate":
            data = data[: draw(st.integers(0, len(data) - 1))]
        else:
            junk = draw(st.binary(min_size=1, max_size=64)) + b"PK\x05\x06" * draw(
                st.integers(0, 2)
            )
            data = junk + data if pos == "prepend" else data + junk
        what += f" {pos}"
    return data, what, other
