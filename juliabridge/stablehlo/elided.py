"""Modules whose constants were elided when they were printed: they hold no weights.

MLIR's printer, asked to elide large elements (the Python bindings' ``print(
large_elements_limit=N)``, mlir-opt's ``--mlir-elide-elementsattrs-if-larger=N``), writes
``dense_resource<__elided__>`` in place of each large constant (older MLIR:
``opaque<"elided_large_const", "0xDEADBEEF">``). The text still parses, so without this check
lax failed on a missing blob (advising backend='xla'), and xla and enzyme compiled and failed
at the first call with XLA's "Only dense elements attr are supported". The check runs on every
load, trusted or not: no backend and no option can run a constant whose values are absent.
"""

from __future__ import annotations

import re

from ..errors import UnsupportedModuleError

_ELIDED = re.compile(r'dense_resource<__elided__>|opaque<"elided_large_const"')

#: How to print a module with its constants. Reactant prints every constant: its `show` sets
#: no elision flag (R src/mlir/IR/Operation.jl:40-43, `string(mod)` and `@code_hlo`'s text,
#: R src/compiler/Macros.jl:23-34), so only a printer that was asked to elide writes these.
ADVICE = (
    "Print the module again without eliding constants: in Julia, Reactant's `string(mod)` "
    "or `String(@code_hlo f(x))` (Reactant elides nothing); in Python, "
    "`jax.jit(f).lower(x).as_text()` or MLIR's `print()` without `large_elements_limit`; "
    "with mlir-opt, without `--mlir-elide-elementsattrs-if-larger`. Or export with "
    "JuliaBridge.export_lux, which keeps the weights in weights.h5"
)


def check_constants_present(text: str, origin: str) -> None:
    """Refuse a module whose constants were elided at print.

    Args:
        text: the module's text.
        origin: where it came from, for the message.

    Raises:
        UnsupportedModuleError: naming the line of the first elided constant, how many there
            are, and how to print the module with them.
    """
    first = _ELIDED.search(text)
    if first is None:
        return
    count = len(_ELIDED.findall(text))
    line = text.count("\n", 0, first.start()) + 1
    raise UnsupportedModuleError(
        f"{origin}: line {line} holds {first.group(0)} ({count} elided constant"
        f"{'s' if count != 1 else ''} in all): the text was printed with its large constants "
        "elided, so it holds no weights, and no backend (lax, xla or enzyme) and no option "
        f"can run it. {ADVICE}."
    )


__all__ = ["ADVICE", "check_constants_present"]
