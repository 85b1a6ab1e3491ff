"""Make Reactant's MLIR text something stock JAX/XLA accepts, without changing its meaning.

Reactant prints module names XLA's parser rejects (truncated ``@reactant_#3...``), and attaches
Enzyme-JAX analysis attributes (``enzymexla.*``, ``enzyme.*``, ``#enzymexla<...>`` values) that
JAX's MLIR context has no dialect for. None of these carry semantics for a caller, so they are
removed; everything else is kept as written, except spellings XLA misreads, which are
rewritten to ones with the same meaning (`canonicalize_sort`, `drop_broadcast_hints`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..support.jaxinternals import ir

# Attribute namespaces that only Reactant/Enzyme-JAX passes read.
DROPPED_PREFIXES = ("enzymexla.", "enzyme.")
# Argument/result attributes that would make XLA alias or shard caller buffers; juliabridge
# never donates the caller's arrays (Reactant#2325) and reports shardings separately.
DROPPED_ARG_ATTRS = ("tf.aliasing_output", "mhlo.sharding", "mhlo.layout_mode", "jax.")

# The quoted name's repetition is bounded: Python's regex engine keeps state per repetition of
# an alternation, so an unbounded one over a forged 100 MB name would cost ~120 bytes per byte.
# A longer name falls to the second branch and the module then fails to parse (typed).
_MODULE_HEADER = re.compile(
    r'^(?P<lead>[ \t]*module)[ \t]+@(?P<name>"(?:[^"\\\n]|\\.){0,4096}"|[^\s{]+)', re.MULTILINE
)


@dataclass
class SanitizeReport:
    """What sanitizing found and removed, for inspection and error messages."""

    module_name: str | None = None
    dropped: set[str] = field(default_factory=set)
    aliasing: dict[int, int] = field(default_factory=dict)
    arg_shardings: dict[int, str] = field(default_factory=dict)


def fix_module_header(text: str) -> tuple[str, str | None]:
    """Drop the top-level module's symbol name (Reactant may print an invalid one).

    Returns the new text and the original name.
    """
    m = _MODULE_HEADER.search(text)
    if m is None:
        return text, None
    name = m.group("name")
    if name.startswith('"'):
        name = name[1:-1]
    return text[: m.start()] + m.group("lead") + text[m.end() :], name


def _keep_arg_attr(name: str) -> bool:
    return not name.startswith(DROPPED_PREFIXES) and not any(
        name == p or (p.endswith(".") and name.startswith(p)) for p in DROPPED_ARG_ATTRS
    )


def _filter_arg_attrs(
    attrs: ir.ArrayAttr, report: SanitizeReport, *, is_main_args: bool
) -> ir.ArrayAttr:
    new = []
    for i, d in enumerate(attrs):
        d = ir.DictAttr(d)
        kept = {}
        for j in range(len(d)):
            name = d[j].name
            # By name: NamedAttribute.attr aborts the process on dense complex data, where
            # this raises TypeError (parse_module reports it as an unexpected structure).
            value = d[name]
            if _keep_arg_attr(name):
                kept[name] = value
                continue
            report.dropped.add(name)
            if is_main_args and name == "tf.aliasing_output":
                report.aliasing[i] = ir.IntegerAttr(value).value
            if is_main_args and name == "mhlo.sharding":
                report.arg_shardings[i] = str(value)
        new.append(ir.DictAttr.get(kept))
    return ir.ArrayAttr.get(new)


def walk(op: ir.Operation):  # type: ignore[no-untyped-def]
    """Every operation nested in `op` (not `op` itself), outer before inner (pre-order).

    Iterative, so a deeply nested module cannot exhaust Python's recursion limit.
    """
    stack = [_children(op)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            continue
        yield child
        stack.append(_children(child))


def _children(op: ir.Operation):  # type: ignore[no-untyped-def]
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation


def canonicalize_sort(op: ir.Operation) -> None:
    """Spell a `stablehlo.sort` the way XLA reads it safely, in place, keeping its meaning.

    - The dimension becomes the non-negative axis it means. The spec allows
      -rank <= dimension < rank (and -1 when the attribute is absent), but XLA takes the number
      as written (HLO `dimensions={-2}`), which it does not define: in one CI run (jax 0.10.2)
      its CPU sort returned an array not sorted along any axis; the same call is right in
      most runs.
    - The sort becomes stable. An unstable sort may order equal keys any way, so a stable one
      is one of its results; and XLA's CPU unstable sort, given a comparator that is not a
      strict weak order (`NE`, a constant `true`, `not LT`: one mistake in a Julia `lt=`),
      read past its buffer (SIGSEGV, heap corruption) or never returned.
    """
    if not op.operands:
        return  # the verifier refuses it; nothing to rewrite
    op.attributes["is_stable"] = ir.BoolAttr.get(True)
    operand = op.operands[0].type
    if not isinstance(operand, ir.RankedTensorType):
        return
    rank = operand.rank
    if "dimension" in op.attributes:
        attr = ir.IntegerAttr(op.attributes["dimension"])
        dim, kind = attr.value, attr.type
    else:
        dim, kind = -1, ir.IntegerType.get_signless(64)
    if dim < 0 and dim + rank >= 0:
        op.attributes["dimension"] = ir.IntegerAttr.get(kind, dim + rank)


def drop_broadcast_hints(op: ir.Operation) -> None:
    """Remove `dynamic_broadcast_in_dim`'s expansion hints, in place.

    They only claim which dimensions do (not) expand, so the op means the same without them;
    XLA trusts a false claim and returned an array of the operand's shape instead of the
    declared result's (1x4 for 5x4 when every dimension was claimed non-expanding).
    """
    for name in ("known_expanding_dimensions", "known_nonexpanding_dimensions"):
        if name in op.attributes:
            del op.attributes[name]


def strip_reactant_attributes(module: ir.Module, report: SanitizeReport) -> None:
    """Remove Enzyme/Reactant-only attributes from every op of `module`, in place."""
    for op in walk(module.operation):
        names = [op.attributes[i].name for i in range(len(op.attributes))]
        for name in names:
            if name.startswith(DROPPED_PREFIXES):
                del op.attributes[name]
                report.dropped.add(name)
        if op.name == "func.func":
            is_main = ir.StringAttr(op.attributes["sym_name"]).value == "main"
            for key in ("arg_attrs", "res_attrs"):
                if key in op.attributes:
                    op.attributes[key] = _filter_arg_attrs(
                        ir.ArrayAttr(op.attributes[key]),
                        report,
                        is_main_args=is_main and key == "arg_attrs",
                    )
    # Module-level attributes such as mhlo.num_partitions stay: they are valid StableHLO.
    mod_attrs = module.operation.attributes
    for name in [mod_attrs[i].name for i in range(len(mod_attrs))]:
        if name.startswith(DROPPED_PREFIXES):
            del mod_attrs[name]
            report.dropped.add(name)
