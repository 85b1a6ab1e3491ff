"""The module's functions and who calls whom: checked acyclic, complete, callees first.

XLA's StableHLO converter inlines or converts functions recursively: a function that calls
itself (directly or through others) overflows the C stack, and a declaration without a body
crashes the converter (both measured: SIGSEGV). Reactant emits neither. A module is therefore
refused unless every top-level op is a ``func.func`` with a body and the call graph, including
``stablehlo.composite`` decompositions and custom-call ``called_computations``, has no cycle.
The walk is iterative and linear in the number of ops and call sites.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ModuleContractError
from ..support.jaxinternals import ir
from .contracts import where
from .sanitize import walk


@dataclass
class Function:
    """One func.func: its op and the functions it references (one entry per call site)."""

    name: str
    op: ir.Operation
    callees: list[str] = field(default_factory=list)


def _symbol(a: ir.Attribute) -> str:
    return str(ir.FlatSymbolRefAttr(a).value)


def _references(op: ir.Operation) -> list[str]:
    """Functions `op` runs: a call's callee, a composite's decomposition, called computations."""
    attrs = op.attributes
    if op.name == "func.call":
        return [_symbol(attrs["callee"])]
    if op.name == "stablehlo.composite":
        return [_symbol(attrs["decomposition"])]
    if "called_computations" in attrs:
        arr = ir.ArrayAttr(attrs["called_computations"])
        return [_symbol(arr[i]) for i in range(len(arr))]
    return []


def functions(module: ir.Module, origin: str) -> dict[str, Function]:
    """Every function of `module`, checked: top level holds only func.func ops, with bodies."""
    out: dict[str, Function] = {}
    for child in module.body.operations:
        op = child.operation
        if op.name != "func.func":
            raise ModuleContractError(
                f"{where(op, origin)}: a top-level {op.name} op; a StableHLO module holds only "
                "func.func definitions at its top level (Reactant emits nothing else), and "
                "backends cannot run anything else. Export the module again."
            )
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if not op.regions or not len(op.regions[0].blocks):
            raise ModuleContractError(
                f"{where(op, origin)}: func.func @{name} is a declaration without a body; XLA "
                "cannot run a function whose code is missing (its converter crashes). Export "
                "the module again."
            )
        fn = Function(name, op)
        for inner in walk(op):
            fn.callees += _references(inner)
        out[name] = fn
    return out


def callees_first(funcs: dict[str, Function], origin: str) -> list[str]:
    """Function names with every callee before its callers; refuse cycles and unknown names."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done
    for root in funcs:
        if state.get(root):
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            name, i = stack[-1]
            callees = funcs[name].callees
            if i == len(callees):
                stack.pop()
                state[name] = 2
                order.append(name)
                continue
            stack[-1] = (name, i + 1)
            callee = callees[i]
            if callee not in funcs:
                raise ModuleContractError(
                    f"{where(funcs[name].op, origin)}: @{name} calls @{callee}, which the module "
                    "does not define"
                )
            seen = state.get(callee, 0)
            if seen == 1:
                path = [n for n, _ in stack]
                cycle = " -> ".join(f"@{n}" for n in [*path[path.index(callee) :], callee])
                raise ModuleContractError(
                    f"{where(funcs[callee].op, origin)}: recursive calls ({cycle}); StableHLO "
                    "has no recursion and XLA's converter overflows its stack on it. Export "
                    "the module again (Reactant emits loops as stablehlo.while)."
                )
            if seen == 0:
                state[callee] = 1
                stack.append((callee, 0))
    return order
