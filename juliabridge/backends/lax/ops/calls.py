"""func.call and stablehlo.composite: calls of other functions of the module.

The callee is lifted once (Program.function refuses cycles and bodiless declarations) and
evaluated per call, i.e. inlined into the trace; Program bounds the total after inlining.
"""

from __future__ import annotations

from typing import Any

from ..evaluate import run_function
from ..registry import Impl, OpView, lifts


class _Call:
    """A call step's implementation; `calls` tells Program which function it reaches."""

    def __init__(self, view: OpView, callee: str) -> None:
        self.calls = callee
        self._program = view.program
        self._fn = view.program.function(callee)
        if len(self._fn.arg_types) != len(view.operand_types) or tuple(
            self._fn.result_types
        ) != tuple(view.result_types):
            raise view.error(
                f"@{callee} takes {len(self._fn.arg_types)} values and returns "
                f"({', '.join(map(str, self._fn.result_types))}), which does not match the call"
            )

    def __call__(self, *args: Any) -> list[Any]:
        return run_function(self._fn, args)


@lifts("func.call")
def call(view: OpView) -> Impl:
    """func.call @f(args): evaluate @f (the func dialect; Reactant calls private helpers)."""
    return _Call(view, view.get_symbol("callee"))


@lifts("stablehlo.composite")
def composite(view: OpView) -> Impl:
    """spec.md#composite: semantically a call of its `decomposition` function."""
    return _Call(view, view.get_symbol("decomposition"))
