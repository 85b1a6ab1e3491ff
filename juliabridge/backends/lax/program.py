"""A StableHLO module lifted into plain Python data: functions, blocks and steps.

Lifting walks the MLIR once, at load time. Each value gets a slot number within its function
(regions share their function's slots, so a region reads outer values directly, as MLIR scoping
allows), and each op becomes a `Step` holding the implementation its lift function returned.
After lifting no MLIR object is needed: evaluation (evaluate.py) only indexes Python lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import UnsupportedModuleError, UnsupportedOpError
from ...support.jaxinternals import ir
from .registry import RULES, Impl, OpView, location_of
from .valtypes import TypeNotSupported, ValueType, value_type

#: Most op evaluations one call may expand to after inlining func.call (a module whose calls
#: fan out exponentially is refused at load time instead of tracing for ever).
MAX_INLINED_OPS = 2_000_000
_TERMINATORS = frozenset({"stablehlo.return", "func.return", "chlo.return"})


@dataclass(slots=True, eq=False)
class Step:
    """One op: its implementation, operand and result slots, regions, and where it came from."""

    impl: Impl
    operands: tuple[int, ...]
    results: tuple[int, ...]
    result_types: tuple[ValueType, ...]
    regions: tuple[Block, ...]
    with_regions: bool
    name: str
    where: str
    calls: str | None = None


@dataclass(slots=True, eq=False)
class Block:
    """A region's single block: argument slots, steps, and the slots its terminator returns."""

    args: tuple[int, ...]
    arg_types: tuple[ValueType, ...]
    steps: list[Step] = field(default_factory=list)
    returns: tuple[int, ...] = ()

    def single_op_over_args(self) -> str | None:
        """The op name when the block is ``return op(arg0, arg1, ...)`` on its own arguments.

        Arguments may appear in either order (the monoid ops recognised are commutative).
        """
        if len(self.steps) != 1 or len(self.returns) != 1:
            return None
        step = self.steps[0]
        if step.regions or step.results != self.returns:
            return None
        if sorted(step.operands) != sorted(self.args) or len(set(step.operands)) != len(self.args):
            return None
        return step.name

    def count_ops(self) -> int:
        """Steps in this block and every nested region (not following calls)."""
        return sum(1 + sum(r.count_ops() for r in s.regions) for s in self.steps)

    def calls(self) -> list[str]:
        """Functions called from this block or its nested regions."""
        out: list[str] = []
        for s in self.steps:
            if s.calls is not None:
                out.append(s.calls)
            for r in s.regions:
                out.extend(r.calls())
        return out


@dataclass(eq=False)
class Function:
    """A lifted func.func."""

    name: str
    body: Block
    n_slots: int
    arg_types: tuple[ValueType, ...]
    result_types: tuple[ValueType, ...]


class Program:
    """Every function of a module reachable from @main, lifted."""

    def __init__(self, module: ir.Module, *, origin: str, resources: Mapping[str, bytes]) -> None:
        self.origin = origin
        self.resources = resources
        #: Decoded dense attributes, shared by every op that carries the same one.
        self.constants: dict[tuple[Any, str, tuple[int, ...]], Any] = {}
        self._decls: dict[str, ir.Operation] = {}
        for child in module.body.operations:
            op = child.operation
            if op.name != "func.func":
                raise UnsupportedModuleError(
                    f"{origin}: top-level {op.name} at {location_of(op)}: a module holds only "
                    "func.func ops; this is not a module Reactant emits"
                )
            name = ir.StringAttr(op.attributes["sym_name"]).value
            if name in self._decls:
                raise UnsupportedModuleError(f"{origin}: two functions are named @{name}")
            self._decls[name] = op
        self.functions: dict[str, Function] = {}
        self._lifting: list[str] = []
        self.main = self.function("main")
        self._cost: dict[str, int] = {}
        total = self.inlined_ops("main")
        if total > MAX_INLINED_OPS:
            raise UnsupportedModuleError(
                f"{origin}: @main expands to {total} ops once its func.call ops are inlined, "
                f"more than the {MAX_INLINED_OPS} the lax backend traces; the call graph fans "
                "out far beyond any model Reactant emits"
            )

    def function(self, name: str) -> Function:
        """The lifted function `name`, lifting it on first use (a call cycle is refused)."""
        done = self.functions.get(name)
        if done is not None:
            return done
        if name in self._lifting:
            cycle = " -> ".join(
                f"@{n}" for n in [*self._lifting[self._lifting.index(name) :], name]
            )
            raise UnsupportedModuleError(
                f"{self.origin}: the functions call each other in a cycle ({cycle}); StableHLO "
                "has no recursion, so this module cannot be evaluated"
            )
        decl = self._decls.get(name)
        if decl is None:
            raise UnsupportedModuleError(f"{self.origin}: @{name} is called but not defined")
        if not decl.regions or not decl.regions[0].blocks:
            raise UnsupportedModuleError(
                f"{self.origin}: @{name} at {location_of(decl)} is a declaration without a "
                "body, so there is nothing to evaluate"
            )
        self._lifting.append(name)
        try:
            fn = _FunctionBuilder(self, decl, name).build()
        finally:
            self._lifting.pop()
        self.functions[name] = fn
        return fn

    def inlined_ops(self, name: str) -> int:
        """Ops one call of `name` evaluates with every call inlined (saturating)."""
        if name in self._cost:
            return self._cost[name]
        fn = self.functions[name]
        total = fn.body.count_ops()
        for callee in fn.body.calls():
            total += self.inlined_ops(callee)
            if total > MAX_INLINED_OPS:
                break
        self._cost[name] = min(total, MAX_INLINED_OPS + 1)
        return self._cost[name]


class _FunctionBuilder:
    """Assigns slots and lifts the ops of one function (iteratively, region by region)."""

    def __init__(self, program: Program, decl: ir.Operation, name: str) -> None:
        self.program = program
        self.decl = decl
        self.name = name
        self.slots: dict[ir.Value, int] = {}

    def _slot(self, v: ir.Value) -> int:
        n = len(self.slots)
        self.slots[v] = n
        return n

    def _types(self, values: Any, what: str, op: ir.Operation) -> tuple[ValueType, ...]:
        out = []
        for i, v in enumerate(values):
            try:
                out.append(value_type(v.type))
            except TypeNotSupported as e:
                raise UnsupportedOpError(
                    f"{self.program.origin}: {what} {i} of {op.name} at {location_of(op)} has "
                    f"type {e}, which the lax backend cannot represent",
                    op=op.name,
                    where=location_of(op),
                ) from e
        return tuple(out)

    def build(self) -> Function:
        ftype = ir.FunctionType(ir.TypeAttr(self.decl.attributes["function_type"]).value)
        body = self._block(self.decl.regions[0], self.decl)
        results = self._types([_Typed(t) for t in ftype.results], "result", self.decl)
        return Function(self.name, body, len(self.slots), body.arg_types, results)

    def _block(self, region: ir.Region, owner: ir.Operation) -> Block:
        blocks = list(region.blocks)
        if len(blocks) != 1:
            raise UnsupportedOpError(
                f"{self.program.origin}: {owner.name} at {location_of(owner)} has a region "
                f"with {len(blocks)} blocks; StableHLO regions have exactly one",
                op=owner.name,
                where=location_of(owner),
            )
        blk = blocks[0]
        block = Block(
            args=tuple(self._slot(a) for a in blk.arguments),
            arg_types=self._types(blk.arguments, "block argument", owner),
        )
        for child in blk.operations:
            op = child.operation
            if op.name in _TERMINATORS:
                block.returns = tuple(self._use(v, op) for v in op.operands)
                break
            block.steps.append(self._step(op))
        return block

    def _use(self, v: ir.Value, op: ir.Operation) -> int:
        slot = self.slots.get(v)
        if slot is None:
            raise UnsupportedModuleError(
                f"{self.program.origin}: {op.name} at {location_of(op)} uses a value defined "
                "outside its function; this is not valid StableHLO"
            )
        return slot

    def _step(self, op: ir.Operation) -> Step:
        rule = RULES.get(op.name)
        if rule is None:
            where = location_of(op)
            raise UnsupportedOpError(
                f"{self.program.origin}: {op.name} at {where} is not an op the lax backend "
                "lifts. Load the module with backend='xla' (backend='auto' falls back to it "
                "by itself), or report the op so the lax backend learns it.",
                op=op.name,
                where=where,
            )
        operands = tuple(self._use(v, op) for v in op.operands)
        regions = tuple(self._block(r, op) for r in op.regions)
        view = OpView(op, origin=self.program.origin, regions=regions, program=self.program)
        impl = rule.lift(view)
        results = tuple(self._slot(r) for r in op.results)
        calls = getattr(impl, "calls", None)
        return Step(
            impl=impl,
            operands=operands,
            results=results,
            result_types=view.result_types,
            regions=regions,
            with_regions=rule.with_regions,
            name=op.name,
            where=f"{view.where} of {self.program.origin}",
            calls=calls if isinstance(calls, str) else None,
        )


@dataclass(frozen=True)
class _Typed:
    """Adapts an ir.Type to the `.type` shape `_types` reads."""

    type: ir.Type
