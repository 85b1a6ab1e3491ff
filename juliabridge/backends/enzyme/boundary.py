"""A module's @main wrapped for hlo_call: narrow element types widened at the boundary, and
unused scalar arguments padding @main to at least as many arguments as results.

hlo_call's type table lacks f16, i16, ui8, ui16 and rejects i1, so the wrapper converts those
(exactly: every value of the narrow type is representable in the wider one); its VJP indexes
argument activities by result number, so @main gets padding arguments when it has more results
than arguments.
"""

from __future__ import annotations

import re

from ...errors import UnsupportedModuleError
from ...stablehlo import StableHLOModule, TensorSpec

#: Element types hlo_call cannot take, and the type each crosses the boundary as.
BOUNDARY_TYPES = {"f16": "f32", "i16": "i32", "ui8": "ui32", "ui16": "ui32", "i1": "i8"}
#: The type of a padding argument.
PAD = TensorSpec((), "f32")
_INNER = "__juliabridge_inner_main"
_MAIN_DECL = re.compile(r"func\.func (?:public )?@main\(")


def outer_spec(spec: TensorSpec) -> TensorSpec:
    """The type `spec` crosses hlo_call's boundary as."""
    return TensorSpec(spec.shape, BOUNDARY_TYPES.get(spec.dtype, spec.dtype))


def wrapped_text(module: StableHLOModule) -> tuple[str, int]:
    """The module with a boundary-converting @main, and the number of padding arguments."""
    n_pad = max(0, len(module.results) - len(module.arguments))
    needs_cast = any(s.dtype in BOUNDARY_TYPES for s in module.arguments + module.results)
    if not needs_cast and n_pad == 0:
        return module.text, 0
    # module.text is our own print of the module, so it ends with the module's closing brace.
    body = module.text.rstrip()
    inner, found = _MAIN_DECL.subn(f"func.func private @{_INNER}(", body[:-1], count=1)
    if not body.endswith("}") or found != 1:
        raise UnsupportedModuleError(
            f"{module.origin}: could not locate @main in the printed module to wrap it"
        )
    outer_args = [outer_spec(s) for s in module.arguments] + [PAD] * n_pad
    lines = []
    call_args = []
    for i, (spec, outer) in enumerate(zip(module.arguments, outer_args)):
        if spec == outer:
            call_args.append(f"%arg{i}")
            continue
        lines.append(f"    %c{i} = stablehlo.convert %arg{i} : ({outer}) -> {spec}")
        call_args.append(f"%c{i}")
    in_types = ", ".join(str(s) for s in module.arguments)
    res_types = ", ".join(str(s) for s in module.results)
    n_res = len(module.results)
    res = "%r" if n_res == 1 else f"%r:{n_res}"
    lines.append(
        f"    {res} = func.call @{_INNER}({', '.join(call_args)}) : ({in_types}) -> ({res_types})"
    )
    rets = []
    for k, spec in enumerate(module.results):
        ref = "%r" if n_res == 1 else f"%r#{k}"
        outer = outer_spec(spec)
        if spec == outer:
            rets.append(ref)
            continue
        lines.append(f"    %o{k} = stablehlo.convert {ref} : ({spec}) -> {outer}")
        rets.append(f"%o{k}")
    sig = ", ".join(f"%arg{i}: {s}" for i, s in enumerate(outer_args))
    outer_res = ", ".join(str(outer_spec(s)) for s in module.results)
    ret_line = f"    return {', '.join(rets)} : {outer_res}" if rets else "    return"
    wrapper = (
        f"  func.func @main({sig}) -> ({outer_res}) {{\n"
        + "\n".join(lines)
        + f"\n{ret_line}\n  }}\n"
    )
    return inner + wrapper + "}\n", n_pad
