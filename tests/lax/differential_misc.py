"""Generators of the differential harness for the remaining op families: random bits
(rng_bit_generator, rng), collectives on one device, tokens and the structural ops (tuple,
get_tuple_element, optimization_barrier, after_all, create_token, composite, func.call), map,
constants in every literal form, the dynamic-shape ops with static-valued shape operands and
the legacy spellings (dot, einsum, torch_index_select, broadcast).

Each strategy returns a `differential.Case` that tests/lax/test_differential.py runs on lax,
the xla backend (and enzyme) and, where it takes the op, the reference interpreter. What the
interpreter cannot run is marked `interpret=False` here, with the reason next to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from juliabridge.backends.lax.valtypes import ELEMENT_TYPES

from ._elementwise_util import module
from .differential import FLOATS, Case, array_of, features_of, float_edges, int_edges
from .differential_structured import _tensor, values

# --- random bits -----------------------------------------------------------------------------

RBG_TYPES = ("ui8", "ui16", "ui32", "ui64", "i8", "i16", "i32", "i64", *FLOATS)
RBG_SHAPES = ((), (1,), (7,), (3, 5), (2, 2, 3), (4, 33))


def unsigned_of(t: str) -> str:
    """The unsigned integer type of `t`'s width (how XLA draws bits of type `t`)."""
    return f"ui{8 * ELEMENT_TYPES[t].itemsize}"


@st.composite
def rng_bit_generator_case(draw: Any, types: tuple[str, ...] = RBG_TYPES) -> Case:
    """Every algorithm and state size, output types of 8 to 64 bits, signed and float ones
    with their bits as unsigned twice: bitcast in the module, and drawn as the unsigned type
    from the same state (XLA's own form, the reference test_differential_misc compares with
    numpy's view of the typed bits). The interpreter has no rng support (it aborts)."""
    algorithm = draw(st.sampled_from(("DEFAULT", "THREE_FRY", "PHILOX")))
    words = 3 if algorithm == "PHILOX" and draw(st.booleans()) else 2
    t = draw(st.sampled_from(types))
    shape = draw(st.sampled_from(RBG_SHAPES))
    edges = st.sampled_from([0, 1, 2, 1 << 63, (1 << 64) - 1, 0x0123456789ABCDEF])
    state = np.array(draw(st.lists(edges | st.integers(0, (1 << 64) - 1), min_size=words,
                                   max_size=words)), np.uint64)  # fmt: skip
    stt, bt = f"tensor<{words}xui64>", _tensor(shape, t)
    lines = [f"%s, %b = stablehlo.rng_bit_generator %a0, algorithm = {algorithm} : "
             f"({stt}) -> ({stt}, {bt})"]  # fmt: skip
    outs = [("%s", stt), ("%b", bt)]
    raw = unsigned_of(t)
    if raw != t:
        ut = _tensor(shape, raw)
        lines += [f"%u = stablehlo.bitcast_convert %b : ({bt}) -> {ut}",
                  f'%s2, %r = "stablehlo.rng_bit_generator"(%a0) {{rng_algorithm = '
                  f"#stablehlo<rng_algorithm {algorithm}>}} : ({stt}) -> ({stt}, {ut})"]  # fmt: skip
        outs += [("%u", ut), ("%r", ut)]
    feats = {t, algorithm, f"state-{words}"}
    return Case("random", "rng_bit_generator", module([stt], lines, outs), [state], feats,
                interpret=False)  # fmt: skip


RNG_INTS = ("i32", "i64", "ui32", "ui64")


@st.composite
def rng_case(draw: Any) -> Case:
    """UNIFORM over floats and 32/64-bit integers, NORMAL over floats. rng draws anew on
    every run (on XLA too), so the module returns what every draw must satisfy: UNIFORM's
    samples in [a, b] ([a, b) for integers), NORMAL's finite; the result's shape and type
    are the op's. The interpreter aborts on rng."""
    dist = draw(st.sampled_from(("UNIFORM", "NORMAL")))
    t = draw(st.sampled_from(FLOATS + (RNG_INTS if dist == "UNIFORM" else ())))
    shape = draw(st.sampled_from(((), (5,), (3, 4), (2, 1, 6))))
    dt = ELEMENT_TYPES[t]
    if t in FLOATS:
        pool = [-8.0, -2.5, -1.0, 0.0, 0.5, 1.0, 3.0, 100.0]
        a, b = sorted(draw(st.lists(st.sampled_from(pool), min_size=2, max_size=2, unique=True)))
        if dist == "NORMAL":
            b = abs(b) or 1.0  # a standard deviation
    else:
        info = np.iinfo(dt)
        pool = [int(info.min), -7, -1, 0, 1, 2, 100, int(info.max)]
        a, b = sorted(draw(st.lists(st.sampled_from([p for p in pool if info.min <= p]),
                                    min_size=2, max_size=2, unique=True)))  # fmt: skip
    lo, hi = np.array(a).astype(dt), np.array(b).astype(dt)
    s, rt, pt = f"tensor<{t}>", _tensor(shape, t), _tensor(shape, "i1")
    dims = f"tensor<{len(shape)}xi64>"
    shape_attr = f"dense<{list(shape)}>" if shape else "dense<>"
    lines = [f"%shape = stablehlo.constant {shape_attr} : {dims}",
             f"%r = stablehlo.rng %a0, %a1, %shape, distribution = {dist} : "
             f"({s}, {s}, {dims}) -> {rt}"]  # fmt: skip
    if dist == "NORMAL":
        lines.append(f"%ok = stablehlo.is_finite %r : ({rt}) -> {pt}")
    else:
        upper = "LE" if t in FLOATS else "LT"  # a float draw may round up to b
        lines += [f"%lo = stablehlo.broadcast_in_dim %a0, dims = [] : ({s}) -> {rt}",
                  f"%hi = stablehlo.broadcast_in_dim %a1, dims = [] : ({s}) -> {rt}",
                  f"%p = stablehlo.compare GE, %r, %lo : ({rt}, {rt}) -> {pt}",
                  f"%q = stablehlo.compare {upper}, %r, %hi : ({rt}, {rt}) -> {pt}",
                  f"%ok = stablehlo.and %p, %q : {pt}"]  # fmt: skip
    text = module([s, s], lines, [("%ok", pt)])
    return Case("random", "rng", text, [lo, hi], {t, dist}, interpret=False)


# --- collectives on one device ---------------------------------------------------------------

COLLECTIVES = ("all_gather", "all_reduce", "all_to_all", "collective_broadcast",
               "collective_permute", "reduce_scatter")  # fmt: skip
GROUPS = ("dense<[[0]]> : tensor<1x1xi64>", "dense<[[0, -1]]> : tensor<1x2xi64>")
COLLECTIVE_TYPES = ("f32", "f64", "f16", "bf16", "i32", "i8", "ui64", "i1")


def _monoid_body(op: str, e: str) -> str:
    s = f"tensor<{e}>"
    return (f"({{\n    ^bb0(%p: {s}, %q: {s}):\n      %v = stablehlo.{op} %p, %q : {s}\n"
            f"      stablehlo.return %v : {s}\n    }})")  # fmt: skip


@st.composite
def collective_case(draw: Any, ops: tuple[str, ...] = COLLECTIVES) -> Case:
    """Each collective over a group of one (process 0, padded with -1 or not), with and
    without a channel and global device ids, variadic where XLA takes it. The interpreter
    runs no collective without a process grid (it aborts)."""
    op = draw(st.sampled_from(ops))
    t = draw(st.sampled_from(COLLECTIVE_TYPES))
    shape = draw(st.sampled_from(((4,), (2, 3), (2, 1, 3))))
    n = 2 if op in ("all_gather", "all_reduce") and draw(st.booleans()) else 1
    xs = [values(draw, t, shape) for _ in range(n)]
    xt = _tensor(shape, t)
    # Only all_reduce's verifier takes -1 padding in replica_groups.
    groups = GROUPS if op == "all_reduce" else GROUPS[:1]
    attrs = [f"replica_groups = {draw(st.sampled_from(groups))}"]
    region, feats = "", features_of(xs) | ({"variadic"} if n > 1 else set())
    if draw(st.booleans()) and op != "collective_broadcast":
        attrs.append("channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>")
        feats.add("channel")
        if op != "collective_permute" and draw(st.booleans()):
            attrs.append("use_global_device_ids")
    if op == "all_reduce" and "use_global_device_ids" not in attrs and draw(st.booleans()):
        attrs[0] = "replica_groups = dense<> : tensor<0x0xi64>"  # every process, one group
    d = draw(st.integers(0, len(shape) - 1))
    if op == "all_gather":
        attrs.append(f"all_gather_dim = {d} : i64")
    elif op == "all_to_all":
        c = draw(st.integers(0, len(shape) - 1))
        attrs += [f"split_dimension = {d} : i64", f"concat_dimension = {c} : i64",
                  "split_count = 1 : i64"]  # fmt: skip
    elif op == "collective_permute":
        pairs = draw(st.sampled_from(["dense<[[0, 0]]> : tensor<1x2xi64>",
                                      "dense<> : tensor<0x2xi64>"]))  # fmt: skip
        attrs = [a for a in attrs if not a.startswith("replica")] + [
            f"source_target_pairs = {pairs}"
        ]
        feats.add("no-source" if "<>" in pairs else "self-pair")
    if op in ("all_reduce", "reduce_scatter"):
        monoid = draw(st.sampled_from(("or", "and") if t == "i1" else
                                      ("add", "multiply", "maximum", "minimum")))  # fmt: skip
        region = " " + _monoid_body(monoid, t)
        if op == "reduce_scatter":
            attrs.append(f"scatter_dimension = {d} : i64")
    names = ", ".join(f"%a{k}" for k in range(n))
    types = ", ".join([xt] * n)
    results = [f"%0#{k}" for k in range(n)] if n > 1 else ["%0"]
    lines = [f'%0{":" + str(n) if n > 1 else ""} = "stablehlo.{op}"({names}){region} '
             f"{{{', '.join(attrs)}}} : ({types}) -> ({types})"]  # fmt: skip
    text = module([xt] * n, lines, [(r, xt) for r in results])
    return Case("collective", op, text, xs, feats | {op}, interpret=False)


# --- tokens and structural ops ---------------------------------------------------------------

STRUCTURAL = ("tuple", "get_tuple_element", "optimization_barrier", "after_all",
              "create_token", "composite", "call")  # fmt: skip
STRUCT_TYPES = ("f32", "f64", "i32", "i1", "bf16", "ui8", "f16")
MAP_FLOAT_OPS = ("add", "multiply", "divide", "maximum", "power", "atan2")
MAP_INT_OPS = ("divide", "remainder", "add", "multiply")


def _token(draw: Any, feats: set[str]) -> list[str]:
    """Lines defining %tok: create_token, or after_all of 0 to 2 tokens."""
    if draw(st.booleans()):
        feats.add("create_token")
        return ["%tok = stablehlo.create_token : !stablehlo.token"]
    k = draw(st.integers(0, 2))
    operands = "".join([" %t0", ", %t0"][:k])
    return ["%t0 = stablehlo.after_all : !stablehlo.token",
            f"%tok = stablehlo.after_all{operands} : !stablehlo.token"]  # fmt: skip


@st.composite
def map_case(draw: Any) -> Case:
    """stablehlo.map with a binary body; integer division and remainder by 0 and INT_MIN / -1
    inside it (issue 27: guarded inline on every backend)."""
    ints = draw(st.booleans())
    t = draw(st.sampled_from(("i32", "i8", "i64", "ui32") if ints else ("f32", "f64", "f16")))
    op = draw(st.sampled_from(MAP_INT_OPS if ints else MAP_FLOAT_OPS))
    shape = draw(st.sampled_from(((6,), (2, 3), ())))
    x, y = values(draw, t, shape), values(draw, t, shape)
    if ints and op in ("divide", "remainder") and draw(st.booleans()):
        y.flat[0] = 0  # the trapping operands, placed (edge values alone rarely pair them)
        if t[0] == "i" and x.size > 1:
            x.flat[-1], y.flat[-1] = np.iinfo(x.dtype).min, -1
    s, xt = f"tensor<{t}>", _tensor(shape, t)
    dims = ", ".join(str(k) for k in range(len(shape)))
    text = f"""module {{
  func.func @main(%a0: {xt}, %a1: {xt}) -> {xt} {{
    %0 = "stablehlo.map"(%a0, %a1) ({{
    ^bb0(%p: {s}, %q: {s}):
      %v = stablehlo.{op} %p, %q : {s}
      stablehlo.return %v : {s}
    }}) {{dimensions = array<i64{": " + dims if dims else ""}>}} : ({xt}, {xt}) -> {xt}
    return %0 : {xt}
  }}
}}"""
    feats = features_of([x, y]) | {f"map-{op}"}
    # The interpreter dies of SIGFPE on an integer division by zero or INT_MIN / -1.
    trapping = (
        ints
        and op in ("divide", "remainder")
        and ((y == 0).any() or (t[0] == "i" and ((x == np.iinfo(x.dtype).min) & (y == -1)).any()))
    )
    return Case("map", "map", text, [x, y], feats, interpret=not trapping)


@st.composite
def structural_case(draw: Any, ops: tuple[str, ...] = STRUCTURAL) -> Case:
    """Values passed through tuples, barriers (with a token from after_all or create_token),
    composites and calls, around one elementwise op so the result depends on every path."""
    op = draw(st.sampled_from(ops))
    t = draw(st.sampled_from(STRUCT_TYPES))
    shape = draw(st.sampled_from(((3,), (2, 2), ())))
    x, y = values(draw, t, shape), values(draw, t, shape)
    xt = _tensor(shape, t)
    feats = features_of([x, y]) | {op}
    combine = "or" if t == "i1" else draw(st.sampled_from(("add", "maximum", "multiply")))
    lines: list[str] = []
    funcs = ""
    interpret = True
    if op in ("tuple", "get_tuple_element"):
        nested = draw(st.booleans())
        inner = f"tuple<{xt}, {xt}>"
        if nested:
            lines += [f"%i = stablehlo.tuple %a1, %a0 : {inner}",
                      f"%t = stablehlo.tuple %a0, %i : tuple<{xt}, {inner}>",
                      f"%g = stablehlo.get_tuple_element %t[1] : (tuple<{xt}, {inner}>) -> {inner}",
                      f"%u = stablehlo.get_tuple_element %g[1] : ({inner}) -> {xt}",
                      f"%w = stablehlo.get_tuple_element %t[0] : (tuple<{xt}, {inner}>) -> {xt}"]  # fmt: skip
        else:
            lines += [f"%t = stablehlo.tuple %a0, %a1 : {inner}",
                      f"%w = stablehlo.get_tuple_element %t[1] : ({inner}) -> {xt}",
                      f"%u = stablehlo.get_tuple_element %t[0] : ({inner}) -> {xt}"]  # fmt: skip
        lines.append(f"%0 = stablehlo.{combine} %u, %w : {xt}")
    elif op in ("optimization_barrier", "after_all", "create_token"):
        if op == "after_all":
            feats.discard("create_token")
            lines += ["%t0 = stablehlo.after_all : !stablehlo.token",
                      "%tok = stablehlo.after_all %t0, %t0 : !stablehlo.token"]  # fmt: skip
        elif op == "create_token":
            lines.append("%tok = stablehlo.create_token : !stablehlo.token")
        else:
            lines += _token(draw, feats)
        lines += [f"%b:3 = stablehlo.optimization_barrier %a0, %tok, %a1 : {xt}, !stablehlo.token, {xt}",
                  f"%0 = stablehlo.{combine} %b#0, %b#2 : {xt}"]  # fmt: skip
        # The interpreter aborts on create_token.
        interpret = "create_token" not in feats and op != "create_token"
    elif op == "composite":
        lines.append(f'%0 = stablehlo.composite "jb.combine" %a0, %a1 {{composite_attributes = '
                     f'{{k = 2 : i64}}, decomposition = @jb_combine, version = 1 : i32}} : '
                     f"({xt}, {xt}) -> {xt}")  # fmt: skip
        funcs = _callee("jb_combine", combine, xt)
    else:  # func.call
        lines.append(f"%0 = func.call @jb_combine(%a0, %a1) : ({xt}, {xt}) -> {xt}")
        funcs = _callee("jb_combine", combine, xt)
        op = "func.call"
    text = module([xt, xt], lines, [("%0", xt)])
    if funcs:
        text = text[: text.rindex("}")] + funcs + "}"
    return Case("structural", op, text, [x, y], feats | {f"combine-{combine}"},
                interpret=interpret)  # fmt: skip


def _callee(name: str, combine: str, xt: str) -> str:
    return (f"  func.func private @{name}(%x: {xt}, %y: {xt}) -> {xt} {{\n"
            f"    %r = stablehlo.{combine} %x, %y : {xt}\n    return %r : {xt}\n  }}\n")  # fmt: skip


# --- constants -------------------------------------------------------------------------------


@dataclass
class ConstantCase(Case):
    """A constant's case with the array its literal spells (numpy's, independent of MLIR)."""

    expected: np.ndarray = field(default_factory=lambda: np.zeros(()))


CONSTANT_TYPES = ("i1", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64", *FLOATS)


def _literal(v: Any, t: str, draw: Any) -> str:
    """One element's literal: decimal, or the bits in hex for a float (how MLIR prints
    infinities and NaN)."""
    if t == "i1":
        return "true" if v else "false"
    if t not in FLOATS:
        return str(int(v))
    x = np.array(v).astype(ELEMENT_TYPES[t])
    if np.isfinite(x) and draw(st.booleans()):
        return f"{float(x):.17e}"  # 17 digits: the nearest double, rounded to the type
    bits = x.view(f"u{x.dtype.itemsize}")
    return f"0x{int(bits):0{2 * x.dtype.itemsize}X}"


@st.composite
def constant_case(draw: Any) -> Case:
    """stablehlo.constant of every non-complex element type as a splat, a list or the raw
    bytes in hex, with the types' edge values (infinities, NaN, -0, denormals, extremes).
    A dummy argument gives @main something to batch."""
    t = draw(st.sampled_from(CONSTANT_TYPES))
    shape = draw(st.sampled_from(((), (3,), (2, 3))))
    n = int(np.prod(shape))
    form = draw(st.sampled_from(("splat", "list", "hex")))
    if t == "i1":
        vals = array_of(draw, t, n)
    elif t in FLOATS:
        vals = np.array(draw(st.lists(st.sampled_from(float_edges(t)), min_size=n, max_size=n)),
                        np.float64).astype(ELEMENT_TYPES[t])  # fmt: skip
    else:
        vals = np.array(draw(st.lists(st.sampled_from(int_edges(t)), min_size=n, max_size=n)),
                        dtype=object).astype(ELEMENT_TYPES[t])  # fmt: skip
    if form == "splat" or n == 0:
        vals = np.full(n, vals[0] if n else vals, vals.dtype)
    arr = vals.reshape(shape)
    ct = _tensor(shape, t)
    if form == "hex":
        raw = (arr.astype(np.uint8) if t == "i1" else arr).tobytes()
        lit = f'"0x{raw.hex().upper()}"'
    elif form == "splat" or not shape:
        lit = _literal(arr.reshape(-1)[0], t, draw)
    else:
        rows = arr.reshape(shape[0], -1) if len(shape) > 1 else arr.reshape(1, -1)
        items = [[_literal(v, t, draw) for v in row] for row in rows]
        inner = ["[" + ", ".join(r) + "]" for r in items]
        lit = ("[" + ", ".join(inner) + "]") if len(shape) > 1 else inner[0]
    lines = [f"%0 = stablehlo.constant dense<{lit}> : {ct}"]
    text = module(["tensor<i32>"], lines, [("%0", ct)])
    feats = features_of([arr]) | {f"literal-{form}"}
    return ConstantCase("constant", "constant", text, [np.zeros((), np.int32)], feats,
                        expected=arr)  # fmt: skip


# --- dynamic-shape ops with static-valued shape operands --------------------------------------

DYNAMIC = ("dynamic_broadcast_in_dim", "dynamic_iota", "dynamic_pad", "dynamic_reshape",
           "real_dynamic_slice", "get_dimension_size")  # fmt: skip
SHAPE_INDEX_TYPES = ("i64", "i32", "ui32")


def _shape_operand(draw: Any, vals: list[int], name: str, args: list[Any], ins: list[str],
                   lines: list[str], *, argument: bool = True, it: str = "") -> tuple[str, str]:  # fmt: skip
    """A 1-d shape operand holding `vals` (of type `it`, else drawn): a constant in the
    module, or an argument."""
    it = it or draw(st.sampled_from(SHAPE_INDEX_TYPES))
    tt = f"tensor<{len(vals)}x{it}>"
    if argument and draw(st.booleans()):
        args.append(np.array(vals, ELEMENT_TYPES[it]))
        ins.append(tt)
        return f"%a{len(args) - 1}", tt
    lit = f"dense<{vals}>" if vals else "dense<>"
    lines.append(f"%{name} = stablehlo.constant {lit} : {tt}")
    return f"%{name}", tt


@st.composite
def dynamic_case(draw: Any, ops: tuple[str, ...] = DYNAMIC) -> Case:
    """Each dynamic-shape op whose shape operands hold the result type's static extents
    (as constants, or arguments where XLA translates that): broadcasts with expansion hints,
    iotas of any type, pads negative and interior, slices with strides."""
    op = draw(st.sampled_from(ops))
    t = draw(st.sampled_from(("f32", "i32", "bf16", "f64", "i8", "ui16", "i1")))
    shape = draw(st.sampled_from(((2, 3), (4,), (1, 3), (2, 1, 2))))
    r = len(shape)
    x = values(draw, t, shape)
    xt = _tensor(shape, t)
    args: list[Any] = [x]
    ins, lines = [xt], []
    feats = features_of([x]) | {op}
    interpret = op != "real_dynamic_slice"  # the interpreter aborts on it
    if op == "dynamic_broadcast_in_dim":
        out = tuple(draw(st.sampled_from((n, 3) if n == 1 else (n,))) for n in shape)
        out = (draw(st.integers(1, 2)), *out)
        sv, stt = _shape_operand(draw, list(out), "s", args, ins, lines)
        dims = ", ".join(str(k + 1) for k in range(r))
        hints = ""
        if draw(st.booleans()):
            exp = [k for k in range(r) if shape[k] != out[k + 1]]
            same = [k for k in range(r) if shape[k] == out[k + 1] and shape[k] != 1]
            hints = (f", known_expanding_dimensions = array<i64{': ' if exp else ''}"
                     f"{', '.join(map(str, exp))}>, known_nonexpanding_dimensions = array<i64"
                     f"{': ' if same else ''}{', '.join(map(str, same))}>")  # fmt: skip
        ot = _tensor(out, t)
        lines.append(f'%0 = "stablehlo.dynamic_broadcast_in_dim"(%a0, {sv}) {{broadcast_dimensions '
                     f"= array<i64: {dims}>{hints}}} : ({xt}, {stt}) -> {ot}")  # fmt: skip
    elif op == "dynamic_iota":
        t = draw(st.sampled_from(("f32", "i32", "bf16", "ui8", "i64", "f16")))
        ot, out = _tensor(shape, t), shape
        args, ins = [np.zeros((), np.int32)], ["tensor<i32>"]  # a dummy to batch
        sv, stt = _shape_operand(draw, list(shape), "s", args, ins, lines)
        d = draw(st.integers(0, r - 1))
        lines.append(f"%0 = stablehlo.dynamic_iota {sv}, dim = {d} : ({stt}) -> {ot}")
    elif op == "dynamic_pad":
        lo = [draw(st.integers(-1, 2)) for _ in shape]
        hi = [draw(st.integers(-1, 2)) for _ in shape]
        inner = [draw(st.integers(0, 2)) for _ in shape]
        out = tuple(n + a + b + (n - 1) * i for n, a, b, i in zip(shape, lo, hi, inner))
        if min(out) <= 0:
            lo, hi = [max(v, 0) for v in lo], [max(v, 0) for v in hi]
            out = tuple(n + a + b + (n - 1) * i for n, a, b, i in zip(shape, lo, hi, inner))
        pv = values(draw, t, ())
        args.append(pv)
        ins.append(_tensor((), t))
        # XLA translates dynamic_pad only with constant paddings (all of one type).
        it = draw(st.sampled_from(SHAPE_INDEX_TYPES[:2] if min(lo + hi) < 0 else SHAPE_INDEX_TYPES))
        ops = [_shape_operand(draw, v, k, args, ins, lines, argument=False, it=it)
               for v, k in ((lo, "lo"), (hi, "hi"), (inner, "in"))]  # fmt: skip
        ot = _tensor(out, t)
        names = ", ".join(v for v, _ in ops)
        types = ", ".join(tt for _, tt in ops)
        lines.append(f"%0 = stablehlo.dynamic_pad %a0, %a1, {names} : ({xt}, {_tensor((), t)}, "
                     f"{types}) -> {ot}")  # fmt: skip
        feats |= {"padding"} | ({"negative-padding"} if min(lo + hi) < 0 else set())
    elif op == "dynamic_reshape":
        n = int(np.prod(shape))
        out = draw(st.sampled_from([s for s in ((n,), (1, n), (n, 1), (2, n // 2), (n // 2, 1, 2))
                                    if int(np.prod(s)) == n]))  # fmt: skip
        sv, stt = _shape_operand(draw, list(out), "s", args, ins, lines)
        ot = _tensor(out, t)
        lines.append(f"%0 = stablehlo.dynamic_reshape %a0, {sv} : ({xt}, {stt}) -> {ot}")
    elif op == "real_dynamic_slice":
        start = [draw(st.integers(0, n - 1)) for n in shape]
        limit = [draw(st.integers(a + 1, n)) for a, n in zip(start, shape)]
        step = [draw(st.integers(1, 2)) for _ in shape]
        out = tuple(-(-(h - a) // k) for a, h, k in zip(start, limit, step))
        # XLA translates real_dynamic_slice only with constant operands (all of one type).
        it = draw(st.sampled_from(SHAPE_INDEX_TYPES))
        ops = [_shape_operand(draw, v, k, args, ins, lines, argument=False, it=it)
               for v, k in ((start, "st"), (limit, "li"), (step, "sp"))]  # fmt: skip
        ot = _tensor(out, t)
        names = ", ".join(v for v, _ in ops)
        types = ", ".join(tt for _, tt in ops)
        lines.append(f"%0 = stablehlo.real_dynamic_slice %a0, {names} : ({xt}, {types}) -> {ot}")
    else:
        d = draw(st.integers(0, r - 1))
        ot = "tensor<i32>"
        lines.append(f"%0 = stablehlo.get_dimension_size %a0, dim = {d} : ({xt}) -> {ot}")
    text = module(ins, lines, [("%0", ot)])
    return Case("dynamic", op, text, args, feats, interpret=interpret)


# --- legacy spellings ------------------------------------------------------------------------

LEGACY = ("dot", "einsum", "torch_index_select", "broadcast")
EINSUMS = (("ab,bc->ac", (2, 3), (3, 4)), ("abc,dc->adb", (2, 3, 4), (5, 4)),
           ("ab,ab->a", (3, 2), (3, 2)), ("a,b->ab", (3,), (2,)), ("ab,b->a", (2, 3), (3,)))  # fmt: skip


@st.composite
def legacy_case(draw: Any, ops: tuple[str, ...] = LEGACY) -> Case:
    """The legacy spellings of dot_general, gather and broadcast_in_dim that older exports
    still hold. The interpreter aborts on all four (removed from the spec). Float data of the
    summing ops are exact (small halves)."""
    op = draw(st.sampled_from(ops))
    t = draw(st.sampled_from(("f32", "f64", "i32", "bf16", "f16")))
    feats = {op, t}
    if op == "dot":
        m, k, n = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
        ls, rs = draw(st.sampled_from((((m, k), (k, n)), ((m, k), (k,)), ((k,), (k,)))))
        out = ls[:-1] + rs[1:]
        a, b = values(draw, t, ls, exact=True), values(draw, t, rs, exact=True)
        prec = draw(st.sampled_from(("", ", precision = [DEFAULT, HIGHEST]")))
        line = (f"%0 = stablehlo.dot %a0, %a1{prec} : ({_tensor(ls, t)}, {_tensor(rs, t)}) -> "
                f"{_tensor(out, t)}")  # fmt: skip
        args = [a, b]
    elif op == "einsum":
        config, ls, rs = draw(st.sampled_from(EINSUMS))
        a, b = values(draw, t, ls, exact=True), values(draw, t, rs, exact=True)
        want = np.einsum(config, np.zeros(ls), np.zeros(rs))
        out = want.shape
        line = (f'%0 = "stablehlo.einsum"(%a0, %a1) {{einsum_config = "{config}"}} : '
                f"({_tensor(ls, t)}, {_tensor(rs, t)}) -> {_tensor(out, t)}")  # fmt: skip
        args = [a, b]
        feats.add(config)
    elif op == "torch_index_select":
        shape = draw(st.sampled_from(((4, 3), (2, 3, 2), (5,))))
        batch = 1 if len(shape) > 1 and draw(st.booleans()) else 0
        dim = draw(st.integers(batch, len(shape) - 1))
        it = draw(st.sampled_from(("i32", "i64")))
        ishape = (shape[0], draw(st.integers(1, 3))) if batch else (draw(st.integers(1, 3)),)
        idx = np.array(draw(st.lists(st.integers(0, shape[dim] - 1), min_size=int(np.prod(ishape)),
                                     max_size=int(np.prod(ishape)))),
                       ELEMENT_TYPES[it]).reshape(ishape)  # fmt: skip
        out = shape[:dim] + ishape[batch:] + shape[dim + 1 :]
        x = values(draw, t, shape)
        line = (f'%0 = "stablehlo.torch_index_select"(%a0, %a1) {{dim = {dim} : i64, batch_dims '
                f"= {batch} : i64}} : ({_tensor(shape, t)}, {_tensor(ishape, it)}) -> "
                f"{_tensor(out, t)}")  # fmt: skip
        args = [x, idx]
        feats |= features_of([x])
    else:
        shape = draw(st.sampled_from(((3,), (2, 2), ())))
        sizes = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
        out = sizes + shape
        x = values(draw, t, shape)
        line = (f"%0 = stablehlo.broadcast %a0, sizes = {list(sizes)} : ({_tensor(shape, t)}) -> "
                f"{_tensor(out, t)}")  # fmt: skip
        args = [x]
        feats |= features_of([x])
    ins = [_tensor(a.shape, t) if k == 0 or op != "torch_index_select" else
           _tensor(a.shape, it) for k, a in enumerate(args)]  # fmt: skip
    text = module(ins, [line], [("%0", _tensor(tuple(out), t))])
    if op in ("dot", "einsum"):
        feats |= features_of(args)
    return Case("legacy", op, text, args, feats, interpret=False)


#: The op each family draws from (test_differential's GENERATED takes them).
GENERATED_OPS = {f"stablehlo.{op}" for op in (
    "rng_bit_generator", "rng", *COLLECTIVES, *STRUCTURAL, "constant",
    "map", *DYNAMIC, *LEGACY,
) if op != "call"} | {"func.call"}  # fmt: skip

#: The families of this module, merged with the others by the test.
FAMILIES = {
    "rng_bit_generator": rng_bit_generator_case(),
    "rng": rng_case(),
    "collective": collective_case(),
    "structural": structural_case(),
    "map": map_case(),
    "constant": constant_case(),
    "dynamic": dynamic_case(),
    "legacy": legacy_case(),
}

#: One strategy per op of the families that draw among several ops: the fixed-seed sample of
#: a family draws some ops only now and then, so test_differential_misc runs each op too.
_MULTI = ((collective_case, COLLECTIVES), (structural_case, STRUCTURAL),
          (dynamic_case, DYNAMIC), (legacy_case, LEGACY))  # fmt: skip
BY_OP = {op: case(ops=(op,)) for case, ops in _MULTI for op in ops}
