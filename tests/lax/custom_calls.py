"""Real custom-call forms for tests: JAX's own lowering of a function, for any platform.

`jax.jit(f).trace(x).lower(lowering_platforms=(p,))` gives exactly what jaxlib emits for the
LAPACK (cpu), cuSOLVER (cuda), hipSOLVER (rocm) and TPU targets, without the hardware; each
custom call found is rewritten as a module of its own (generic syntax, every attribute kept)
whose @main takes the call's operands and returns all its raw results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax

from juliabridge.support.jaxinternals import ir, make_context


def _walk(op: ir.Operation) -> Iterator[ir.Operation]:
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from _walk(child.operation)


def lowered(fn: Callable[..., Any], *args: Any, platform: str = "cpu") -> str:
    """The StableHLO text JAX lowers `fn` to for `platform`."""
    return str(jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,)).as_text())


def custom_call_modules(
    fn: Callable[..., Any], *args: Any, platform: str = "cpu", unread: tuple[int, ...] = ()
) -> dict[str, str]:
    """target name -> a module running that custom call alone (the first of each target),
    returning every result except those in `unread` (e.g. a kernel's workspace)."""
    out: dict[str, str] = {}
    with make_context(allow_unregistered=True):
        module = ir.Module.parse(lowered(fn, *args, platform=platform))
        for op in _walk(module.operation):
            if op.name != "stablehlo.custom_call":
                continue
            target = ir.StringAttr(op.attributes["call_target_name"]).value
            if target in out:
                continue
            ins = [str(v.type) for v in op.operands]
            outs = [str(r.type) for r in op.results]
            attrs = []
            for i in range(len(op.attributes)):
                named = op.attributes[i]
                attrs.append(f"{named.name} = {named.attr}")
            params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(ins))
            operands = ", ".join(f"%a{i}" for i in range(len(ins)))
            kept = [i for i in range(len(outs)) if i not in unread]
            results = ", ".join(f"%r#{i}" for i in kept)
            returned = ", ".join(outs[i] for i in kept)
            out[target] = (
                "module {\n"
                f"  func.func @main({params}) -> ({returned}) {{\n"
                f'    %r:{len(outs)} = "stablehlo.custom_call"({operands}) {{{", ".join(attrs)}}}'
                f" : ({', '.join(ins)}) -> ({', '.join(outs)})\n"
                f"    return {results} : {returned}\n"
                "  }\n}"
            )
    return out
