"""Element types a module may use: those XLA computes, checked at load on every backend.

Every backend ends in XLA (lax lowers JAX primitives to it, xla and enzyme hand it the module),
so one table serves them all. It was derived in child processes, one per element type, op and
backend (tests/test_element_types.py keeps it true): a constant of the type, a convert to it and
back, and an `add` of it, compared with ml_dtypes' arithmetic (the StableHLO spec's rounding).

- ``f6E2M3FN`` and ``f6E3M2FN``: XLA fails an internal check building a literal of them and
  aborts the process (SIGABRT, jaxlib 0.10.2 and 0.12.0.1, CPU); a convert to them does not
  compile. They are refused here, before any backend sees the module, whatever `trust` says.
- Quantized types (``!quant.uniform<...>``): jaxlib's MLIR context has no quant dialect, so
  they cannot be represented at all; refused with that reason rather than as a damaged file.
"""

from __future__ import annotations

import re

from ..errors import UnsupportedModuleError
from ..support.shown import shown

#: Element types XLA cannot compute, with what happens when it tries.
REFUSED: dict[str, str] = {
    "f6E2M3FN": "XLA aborts the process (SIGABRT) building a constant or an add of it",
    "f6E3M2FN": "XLA aborts the process (SIGABRT) building a constant or an add of it",
}
#: A type name not inside a longer name; an `x` may precede it (`tensor<4xf6E2M3FN>`).
_REFUSED_RE = re.compile(r"(?<![0-9A-Za-wyz_])(" + "|".join(REFUSED) + r")(?![A-Za-z0-9_])")
_QUANT_RE = re.compile(r"!quant\.[A-Za-z_]+")


def _line_of(text: str, start: int) -> tuple[int, str]:
    begin = text.rfind("\n", 0, start) + 1
    end = text.find("\n", start)
    return text.count("\n", 0, start) + 1, text[begin : end if end >= 0 else len(text)].strip()


def quantized_refusal(text: str, origin: str) -> UnsupportedModuleError | None:
    """The error for a module that uses quantized element types, or None when it uses none.

    Args:
        text: the module text (as given, or as printed after parsing).
        origin: the module's file or description, for the message.
    """
    m = _QUANT_RE.search(text)
    if m is None:
        return None
    line, content = _line_of(text, m.start())
    return UnsupportedModuleError(
        f"{origin}: line {line} uses a quantized element type ({m.group()}, in "
        f"{shown(content, 120)}); jaxlib's MLIR context has no quant dialect, so no backend "
        "can represent it. Dequantize the model (Float32 or another float type) before "
        "exporting"
    )


def check_element_types(text: str, origin: str) -> None:
    """Refuse a module that uses an element type of REFUSED, or a quantized one.

    Args:
        text: the module text (its lines are the file's).
        origin: the module's file or description, for the message.

    Raises:
        UnsupportedModuleError: naming the type, its first line and why XLA cannot run it.
    """
    quantized = quantized_refusal(text, origin)
    if quantized is not None:
        raise quantized
    m = _REFUSED_RE.search(text)
    if m is None:
        return
    line, content = _line_of(text, m.start())
    raise UnsupportedModuleError(
        f"{origin}: the module uses element type {m.group(1)} (line {line}: "
        f"{shown(content, 120)}); {REFUSED[m.group(1)]}, so juliabridge refuses it on every "
        "backend. Convert those values to f8E4M3FN or a wider float type before exporting"
    )


__all__ = ["REFUSED", "check_element_types", "quantized_refusal"]
