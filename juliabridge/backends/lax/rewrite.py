"""Replacing chosen ops of a module by JAX's lowering of their lax lift, for other backends.

Enzyme has wrong or missing derivative rules for `batch_norm_*` (it ignores the cotangents of
the returned batch statistics, has no rule for batch_norm_inference and aborts on Lux's
BatchNorm modules). Before a module reaches Enzyme, each such op becomes a call of a private
function whose body is what JAX lowers the op's lax implementation (its defining formula) to:
elementary StableHLO that every backend differentiates. Ops with the same name, attributes and
types share one function.

XLA orders complex numbers differently from the spec (spec.md#maximum, #compare: the
lexicographic order of (real, imag)): its `maximum`/`minimum`/`clamp` compare real parts only, its
ordered `compare` (LT/LE/GT/GE) gave wrong values in jax 0.10.2 and fails to compile in 0.12.
So before a module reaches XLA (xla and enzyme backends) those ops are rewritten the same way.
So is a `rng_bit_generator` with signed or float bits: XLA returned those as an array of the
unsigned type of their width (a float result came back with dtype uint32); the lax lift draws
the unsigned bits and bitcasts them, which are the same bits in the declared type.

XLA has no complex cube root (its compiler refuses one), so a complex `cbrt` reaches it as the
lax lift's formula, exp(log(z) / 3) (spec.md#cbrt: the principal root). And XLA's constant folder
adds and multiplies booleans as integers (true + true folded to false, where spec.md#add says
logical or): an i1 `add` / `multiply` reaches XLA spelled as the `or` / `and` it means, in place
(also inside region bodies). A one-operand `reduce_window` of size-1 windows (strides and
dilations 1) whose padding is nowhere positive and somewhere negative only cuts its operand, and
XLA's algebraic simplifier takes it for an elementwise op of the operand's shape and aborts the
process on the mismatch (jaxlib 0.10.2 and 0.12): it reaches XLA as the slice its padding cuts,
then the same reduce_window unpadded (`cutting_window`, in place).

XLA's constant folder divides integers on the host with the machine's instruction: an integer
`divide` or `remainder` of constants by zero, or of INT_MIN by -1, killed the process with
SIGFPE (jax 0.10.2, xla and enzyme backends; `auto` whenever it fell back). The lax lift never
divides by those values (it selects 1 in their place and then the spec's results), so every
integer division whose divisor is not a constant free of 0 and -1 reaches XLA as that lift too.
The same formula is written inline (`_guard_inline`) wherever the operands have the result's
type (inside a `stablehlo.map` body XLA refuses a call; inside a reduce body of a derived VJP
module the call made XLA abort), and through a call only for a broadcasting `chlo` division:
the divisor is replaced by 1 where it is 0 (or -1 with INT_MIN), and the spec's results are
selected in those places; a 7 / 0 of constants in a map body killed the process with SIGFPE
before.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from ...errors import UnsupportedModuleError
from ...stablehlo import StableHLOModule, parse_module
from ...stablehlo.sanitize import walk
from ...support import dtypes
from ...support.jaxinternals import ir, make_context, x64_scope
from .attrs import enum, integers

#: The ops rewritten before a module reaches Enzyme (see the module docstring).
ENZYME_UNSAFE_OPS = frozenset(
    {"stablehlo.batch_norm_training", "stablehlo.batch_norm_inference", "stablehlo.batch_norm_grad"}
)
#: Ops whose complex form XLA orders wrongly (see the module docstring and `misread_by_xla`).
XLA_MISREAD_OPS = frozenset(
    {"stablehlo.maximum", "stablehlo.minimum", "stablehlo.clamp", "stablehlo.compare"}
)
_ORDERED = frozenset({"LT", "LE", "GT", "GE"})
#: Integer divisions XLA's constant folder evaluates with the host's trapping instruction.
DIVISION_OPS = frozenset(
    {
        "stablehlo.divide",
        "stablehlo.remainder",
        "chlo.broadcast_divide",
        "chlo.broadcast_remainder",
    }
)
_PREFIX = "__juliabridge_lifted"


def misread_by_xla(op: ir.Operation) -> bool:
    """Whether XLA computes `op` differently from the spec (a complex max, min, clamp or
    order, or a `rng_bit_generator` whose bits are not an unsigned integer type) or can trap on
    it (an integer division that may fold to one by 0 or INT_MIN / -1)."""
    if op.name == "stablehlo.rng_bit_generator" and len(op.results) == 2:
        return not _unsigned(op.results[1].type) and not _inside_map(op)
    if op.name in DIVISION_OPS:
        return may_trap(op) and not _inside_map(op)
    if op.name == "stablehlo.cbrt":  # XLA has no complex cube root: it refuses to compile one
        return _complex(op.operands[0].type) and not _inside_map(op)
    if op.name not in XLA_MISREAD_OPS or not op.operands:
        return False
    if not _complex(op.operands[0].type):
        return False
    if (
        op.name == "stablehlo.compare"
        and enum(op.attributes["comparison_direction"]) not in _ORDERED
    ):
        return False
    return not _inside_map(op)


def _complex(t: ir.Type) -> bool:
    return isinstance(t, ir.RankedTensorType) and isinstance(t.element_type, ir.ComplexType)


def _unsigned(t: ir.Type) -> bool:
    if not isinstance(t, ir.RankedTensorType) or not isinstance(t.element_type, ir.IntegerType):
        return False
    return bool(ir.IntegerType(t.element_type).is_unsigned)


def may_trap(op: ir.Operation) -> bool:
    """Whether an integer division `op` could divide by 0, or INT_MIN by -1, when XLA folds it.

    Only a divisor that is a `stablehlo.constant` splat of another value is safe for certain;
    any other divisor may become such a constant by folding (`c - c`), so it counts as a risk.
    """
    if len(op.operands) != 2:
        return False
    t = op.operands[1].type
    if not isinstance(t, ir.RankedTensorType) or not isinstance(t.element_type, ir.IntegerType):
        return False
    et = ir.IntegerType(t.element_type)
    if et.width == 1:
        return False  # i1 division is not defined (the verifier and the lifts refuse it)
    owner = op.operands[1].owner
    owner = getattr(owner, "operation", owner)  # an OpView, or a Block
    if not isinstance(owner, ir.Operation) or owner.name != "stablehlo.constant":
        return True
    value = owner.attributes["value"]
    if not isinstance(value, ir.DenseIntElementsAttr) or not value.is_splat:
        return True
    d = int(ir.IntegerAttr(value.get_splat_value()).value)
    return d == 0 or (d == -1 and not et.is_unsigned)


def _inside_map(op: ir.Operation) -> bool:
    """Whether `op` is in a `stablehlo.map` body, where XLA refuses a call of the rewrite.

    XLA's verifier rejected the call there ("shape does not match parameter's"), so such an op
    keeps XLA's reading (docs/lax-backend.md).
    """
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "stablehlo.map":
            return True
        parent = parent.parent
    return False


#: What `add` and `multiply` of booleans mean (spec.md#add: logical or; #multiply: logical and).
BOOLEAN_SPELLING = {"stablehlo.add": "stablehlo.or", "stablehlo.multiply": "stablehlo.and"}


def boolean_arithmetic(op: ir.Operation) -> bool:
    """An `add` or `multiply` of i1 values, which XLA's constant folder computes as integer
    arithmetic (true + true folded to false); it reaches XLA spelled as `or` / `and`."""
    if op.name not in BOOLEAN_SPELLING or len(op.results) != 1:
        return False
    t = op.results[0].type
    return (
        isinstance(t, ir.RankedTensorType)
        and isinstance(t.element_type, ir.IntegerType)
        and ir.IntegerType(t.element_type).width == 1
    )


def _spell_boolean(op: ir.Operation) -> None:
    """Replace the i1 `add` / `multiply` `op` by the `or` / `and` it means, in place."""
    new = ir.Operation.create(
        BOOLEAN_SPELLING[op.name],
        results=[op.results[0].type],
        operands=list(op.operands),
        loc=op.location,
        ip=ir.InsertionPoint(op),
    )
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()


def cutting_window(op: ir.Operation) -> bool:
    """A one-operand `reduce_window` of size-1 windows (strides and dilations 1) whose padding
    is nowhere positive and somewhere negative: XLA's simplifier takes it for an elementwise op
    of the operand's shape, not the result's, and aborts the process (jaxlib 0.10.2 and 0.12)."""
    if op.name != "stablehlo.reduce_window" or len(op.operands) != 2:
        return False
    pads = _window_padding(op)
    if pads is None or max(pads) > 0 or min(pads) >= 0:
        return False
    for key in ("window_dimensions", "window_strides", "base_dilations", "window_dilations"):
        if key in op.attributes and any(v != 1 for v in integers(op.attributes[key])):
            return False
    return True


def _window_padding(op: ir.Operation) -> tuple[int, ...] | None:
    """A reduce_window's padding, low and high of each dimension in turn (None: none, or an
    operand that is not a ranked tensor)."""
    if "padding" not in op.attributes or not isinstance(op.operands[0].type, ir.RankedTensorType):
        return None
    return integers(op.attributes["padding"])


def _uncut(op: ir.Operation) -> None:
    """Give the cutting `reduce_window` `op` the slice its padding cuts, unpadded, in place:
    each result is the body applied to the init value and one element, as before."""
    x = op.operands[0]
    t = ir.RankedTensorType(x.type)
    pads = _window_padding(op) or ()
    lows, highs = pads[0::2], pads[1::2]
    shape = [d + lo + hi for d, lo, hi in zip(t.shape, lows, highs, strict=True)]
    cut = ir.Operation.create(
        "stablehlo.slice",
        results=[ir.RankedTensorType.get(shape, t.element_type)],
        operands=[x],
        attributes={
            "start_indices": ir.DenseI64ArrayAttr.get([-lo for lo in lows]),
            "limit_indices": ir.DenseI64ArrayAttr.get(
                [d + hi for d, hi in zip(t.shape, highs, strict=True)]
            ),
            "strides": ir.DenseI64ArrayAttr.get([1] * t.rank),
        },
        loc=op.location,
        ip=ir.InsertionPoint(op),
    )
    op.operands[0] = cut.results[0]
    del op.attributes["padding"]


def trapping_in_map(op: ir.Operation) -> bool:
    """An integer division in a `stablehlo.map` body that XLA could fold into a trap."""
    return op.name in DIVISION_OPS and may_trap(op) and _inside_map(op)


def _guarded_inline(op: ir.Operation) -> bool:
    """Whether a trapping integer division is guarded in place rather than through a call.

    Every same-typed one is: a call of the lifted formula inside a region body (a reduce
    body of a VJP module JAX derived, whose divisor is a select of constants) made XLA abort
    with "Failed to infer result type(s)", while the same formula inline compiles and folds
    safely. Only a broadcasting `chlo` division outside a map body keeps the call.
    """
    if op.name not in DIVISION_OPS or not may_trap(op):
        return False
    t = op.results[0].type
    return _inside_map(op) or all(v.type == t for v in op.operands)


def _guard_inline(op: ir.Operation, origin: str) -> None:
    """Replace the integer division `op` by its guarded formula, op by op, in place.

    x / 0 = -1 (all bits set), x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0 (the spec's
    and XLA's results), and the division itself only ever sees a divisor free of those values.
    """
    x, y = op.operands
    t = op.results[0].type
    if x.type != t or y.type != t:
        raise UnsupportedModuleError(
            f"{origin}: {op.name} at {op.location} in a stablehlo.map body broadcasts "
            f"({x.type}, {y.type}) -> {t}; juliabridge guards only same-typed integer "
            "divisions there (XLA's constant folder traps on a division by zero)"
        )
    et = ir.IntegerType(ir.RankedTensorType(t).element_type)
    width, signed = et.width, not et.is_unsigned
    ip = ir.InsertionPoint(op)
    loc = op.location
    i1 = ir.RankedTensorType.get(ir.RankedTensorType(t).shape, ir.IntegerType.get_signless(1))

    def make(name: str, operands: list[ir.Value], attrs: dict[str, ir.Attribute] | None = None,
             result: ir.Type = t) -> ir.Value:  # fmt: skip
        return ir.Operation.create(
            name, results=[result], operands=operands, attributes=attrs or {}, loc=loc, ip=ip
        ).results[0]

    def const(v: int) -> ir.Value:
        return make("stablehlo.constant", [], {"value": ir.Attribute.parse(f"dense<{v}> : {t}")})

    def equal(a: ir.Value, b: ir.Value) -> ir.Value:
        direction = ir.Attribute.parse("#stablehlo<comparison_direction EQ>")
        return make("stablehlo.compare", [a, b], {"comparison_direction": direction}, i1)

    zero = equal(y, const(0))
    bad = zero
    overflow = None
    if signed:
        overflow = make(
            "stablehlo.and", [equal(x, const(-(1 << (width - 1)))), equal(y, const(-1))], result=i1
        )
        bad = make("stablehlo.or", [zero, overflow], result=i1)
    safe = make("stablehlo.select", [bad, const(1), y])
    remainder = "remainder" in op.name
    q = make("stablehlo.remainder" if remainder else "stablehlo.divide", [x, safe])
    if overflow is not None:
        q = make("stablehlo.select", [overflow, const(0) if remainder else x, q])
    by_zero = x if remainder else const(-1 if signed else (1 << width) - 1)
    out = make("stablehlo.select", [zero, by_zero, q])
    op.results[0].replace_all_uses_with(out)
    op.erase()


def before_enzyme(op: ir.Operation) -> bool:
    """Ops rewritten before a module reaches Enzyme (and then XLA)."""
    return op.name in ENZYME_UNSAFE_OPS or misread_by_xla(op)


def _standalone(op: ir.Operation) -> str:
    """A module whose @main is just `op` on its own arguments (generic syntax)."""
    ins = [str(v.type) for v in op.operands]
    outs = [str(r.type) for r in op.results]
    named = [op.attributes[i] for i in range(len(op.attributes))]
    attrs = ", ".join(f"{a.name} = {a.attr}" for a in named)
    args = ", ".join(f"%a{i}" for i in range(len(ins)))
    sig = ", ".join(f"%a{i}: {t}" for i, t in enumerate(ins))
    res = "%r" if len(outs) == 1 else f"%r:{len(outs)}"
    rets = ", ".join("%r" if len(outs) == 1 else f"%r#{k}" for k in range(len(outs)))
    return (
        f"module {{\n  func.func @main({sig}) -> ({', '.join(outs)}) {{\n"
        f'    {res} = "{op.name}"({args}) {{{attrs}}} : ({", ".join(ins)}) -> ({", ".join(outs)})\n'
        f"    return {rets} : {', '.join(outs)}\n  }}\n}}\n"
    )


def _lowered(text: str) -> str:
    """JAX's StableHLO for the lax lift of a one-op module."""
    from . import LaxBackend

    small = parse_module(text, trust=True)
    backend = LaxBackend(small)
    avals = [jax.ShapeDtypeStruct(s.shape, dtypes.to_numpy(s.dtype)) for s in small.arguments]
    with x64_scope():
        return str(jax.jit(backend.call, keep_unused=True).lower(*avals).as_text())


def rewrite_through_lax(
    module: StableHLOModule,
    select: Callable[[ir.Operation], bool] = before_enzyme,
    *,
    trust: bool = False,
) -> StableHLOModule:
    """`module` with every op `select` picks replaced by a call of its lowered lax lift.

    Returns `module` itself when `select` picks none (checked on the module's own parse, so
    most modules are not parsed again).

    Raises:
        UnsupportedOpError: such an op cannot be lifted (its attributes or types).
        UnsupportedModuleError: the rewritten module does not verify.
    """

    def picked(op: ir.Operation) -> bool:
        return select(op) or trapping_in_map(op) or boolean_arithmetic(op) or cutting_window(op)

    if module.parsed is not None:
        with module.parsed.context:
            if not any(picked(op) for op in walk(module.parsed.operation)):
                return module
    with make_context(allow_unregistered=trust) as ctx:
        # Loaded before any op is created: the context loads a dialect when a module first uses
        # it, and an op created by name before then (the guard's stablehlo.constant in a module
        # of chlo divisions only) was renamed when the dialect loaded later
        # ("stablehlo.convert" with a `value`, which failed to verify).
        ctx.dialects["stablehlo"]
        parsed = ir.Module.parse(module.text)
        ops = list(walk(parsed.operation))
        targets = [op for op in ops if select(op) and not _guarded_inline(op)]
        for op in ops:
            if boolean_arithmetic(op):
                _spell_boolean(op)
            elif cutting_window(op):
                with op.location:
                    _uncut(op)
            elif picked(op) and _guarded_inline(op):
                with op.location:
                    _guard_inline(op, module.origin)
        functions: dict[str, str] = {}
        for op in targets:
            if len(op.regions):
                raise UnsupportedModuleError(
                    f"{module.origin}: {op.name} has regions; it cannot be rewritten"
                )
            text = _standalone(op)
            callee = functions.get(text)
            if callee is None:
                callee = f"{_PREFIX}_{len(functions)}"
                _append_functions(parsed, _lowered(text), callee, ctx)
                functions[text] = callee
            call = ir.Operation.create(
                "func.call",
                results=[r.type for r in op.results],
                operands=list(op.operands),
                attributes={"callee": ir.FlatSymbolRefAttr.get(callee)},
                loc=op.location,
                ip=ir.InsertionPoint(op),
            )
            for old, new in zip(op.results, call.results):
                old.replace_all_uses_with(new)
            op.erase()
        if not parsed.operation.verify():
            raise UnsupportedModuleError(f"{module.origin}: the rewritten module does not verify")
        text = str(parsed.operation.get_asm(enable_debug_info=False))
    # `module` passed every check already and what was added is JAX's own lowering, so the
    # checks are not repeated: the budgets would count the longer chains of the formulas
    # (4 ops for a complex maximum) against the author's module, citing lines it does not have.
    return parse_module(text, trust=True, origin=module.origin)


def _append_functions(target: ir.Module, lowered: str, name: str, ctx: ir.Context) -> None:
    """Move the functions of JAX's module into `target`, @main renamed `name`, all private."""
    source = ir.Module.parse(lowered, ctx)
    renames = {}
    for child in source.body.operations:
        op = child.operation
        old = ir.StringAttr(op.attributes["sym_name"]).value
        renames[old] = name if old == "main" else f"{name}__{old}"
    for old, new in renames.items():
        ir.SymbolTable.replace_all_symbol_uses(old, new, source.operation)
    for child in list(source.body.operations):
        op = child.operation
        old = ir.StringAttr(op.attributes["sym_name"]).value
        op.attributes["sym_name"] = ir.StringAttr.get(renames[old])
        op.attributes["sym_visibility"] = ir.StringAttr.get("private")
        for key in ("arg_attrs", "res_attrs"):
            if key in op.attributes:
                del op.attributes[key]
        target.body.append(op)


__all__ = [
    "BOOLEAN_SPELLING",
    "DIVISION_OPS",
    "ENZYME_UNSAFE_OPS",
    "XLA_MISREAD_OPS",
    "before_enzyme",
    "boolean_arithmetic",
    "cutting_window",
    "may_trap",
    "misread_by_xla",
    "rewrite_through_lax",
    "trapping_in_map",
]
