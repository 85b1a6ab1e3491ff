"""Parse a Reactant StableHLO module once: sanitized text, @main signature, policy checks."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import dtypes
from ..errors import MLIRParseError, UnsupportedModuleError
from ..jaxinternals import ir, make_context
from .policy import check_custom_calls, check_ops
from .sanitize import SanitizeReport, fix_module_header, strip_reactant_attributes, walk

#: Text larger than this is refused before parsing (a model's weights live in HDF5, not here).
MAX_MODULE_BYTES = 1 << 30


@dataclass(frozen=True)
class TensorSpec:
    """Shape (MLIR order) and MLIR element type of one @main argument or result."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        return f"tensor<{dims + 'x' if dims else ''}{self.dtype}>"


@dataclass(frozen=True)
class StableHLOModule:
    """A parsed, sanitized module: what backends compile and calls are checked against."""

    text: str
    origin: str
    name: str | None
    arguments: tuple[TensorSpec, ...]
    results: tuple[TensorSpec, ...]
    ops: frozenset[str]
    custom_calls: tuple[str, ...]
    dropped_attributes: frozenset[str]
    aliasing: dict[int, int] = field(default_factory=dict)
    arg_shardings: dict[int, str] = field(default_factory=dict)
    num_partitions: int = 1


def _read_source(source: str | os.PathLike[str]) -> tuple[str, str]:
    """Return (text, origin): `source` is a path to a file or MLIR text itself."""
    if isinstance(source, os.PathLike) or ("\n" not in source and "{" not in source):
        path = Path(source)
        try:
            size = path.stat().st_size
        except OSError as e:
            raise MLIRParseError(
                f"{path}: cannot read the MLIR file ({e.strerror}). Pass a path to a .mlir file "
                "or the module text itself."
            ) from e
        if size > MAX_MODULE_BYTES:
            raise MLIRParseError(f"{path}: {size} bytes is larger than the 1 GiB module limit")
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as e:
            raise MLIRParseError(f"{path}: not readable as UTF-8 MLIR text ({e})") from e
    return source, "<mlir text>"


_UNKNOWN_CUSTOM_OP = re.compile(r"Dialect `([^']+)' not found for custom op '([^']+)'")


def _parse(text: str, ctx: ir.Context, origin: str) -> ir.Module:
    try:
        with ctx:
            return ir.Module.parse(text)
    except ir.MLIRError as e:
        detail = "; ".join(str(d) for d in e.error_diagnostics) or str(e)
        unknown = _UNKNOWN_CUSTOM_OP.search(detail)
        if unknown:
            # An op of a dialect JAX lacks, printed in its custom syntax, cannot even be parsed.
            check_ops([unknown.group(2)], trust=False, where=origin)
        raise MLIRParseError(f"{origin}: the MLIR does not parse: {detail[:2000]}") from e
    except (ValueError, RuntimeError) as e:
        raise MLIRParseError(f"{origin}: the MLIR does not parse: {str(e)[:2000]}") from e


def _tensor_spec(t: ir.Type, what: str, origin: str) -> TensorSpec:
    if not isinstance(t, ir.RankedTensorType):
        raise UnsupportedModuleError(
            f"{origin}: {what} has type {t}; only ranked tensors cross the boundary "
            "(tokens and unranked tensors are not supported)"
        )
    rt = t
    if not rt.has_static_shape:
        raise UnsupportedModuleError(
            f"{origin}: {what} has dynamic shape {t}; export with concrete sizes "
            "(Reactant arrays have static shapes)"
        )
    et = str(rt.element_type)
    if not dtypes.is_known(et):
        raise UnsupportedModuleError(
            f"{origin}: {what} has element type {et}, which juliabridge cannot pass to JAX "
            f"(supported: {', '.join(dtypes.MLIR_TO_NUMPY)})"
        )
    return TensorSpec(tuple(int(d) for d in rt.shape), et)


def _find_main(module: ir.Module, origin: str) -> ir.Operation:
    for child in module.body.operations:
        op = child.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            if "sym_visibility" in op.attributes:
                vis = ir.StringAttr(op.attributes["sym_visibility"]).value
                if vis != "public":
                    raise UnsupportedModuleError(f"{origin}: @main is {vis}, it must be public")
            return op
    raise UnsupportedModuleError(
        f"{origin}: no func.func @main; Reactant always names the entry point main, "
        "so this is not a module Reactant emitted"
    )


def parse_module(source: str | os.PathLike[str], *, trust: bool = False) -> StableHLOModule:
    """Parse, sanitize and check a StableHLO module given as a path or as text."""
    raw, origin = _read_source(source)
    text, name = fix_module_header(raw)
    report = SanitizeReport(module_name=name)
    module = _parse(text, make_context(allow_unregistered=True), origin)
    with module.context:
        strip_reactant_attributes(module, report)
        ops: set[str] = set()
        custom_calls: list[str] = []
        for op in walk(module.operation):
            ops.add(op.name)
            if op.name == "stablehlo.custom_call":
                target = ir.StringAttr(op.attributes["call_target_name"]).value
                if target not in custom_calls:
                    custom_calls.append(target)
        check_ops(ops, trust=trust, where=origin)
        check_custom_calls(custom_calls, trust=trust, where=origin)
        main = _find_main(module, origin)
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        args = tuple(
            _tensor_spec(t, f"@main argument {i}", origin) for i, t in enumerate(ftype.inputs)
        )
        results = tuple(
            _tensor_spec(t, f"@main result {i}", origin) for i, t in enumerate(ftype.results)
        )
        parts = 1
        if "mhlo.num_partitions" in module.operation.attributes:
            parts = ir.IntegerAttr(module.operation.attributes["mhlo.num_partitions"]).value
        clean = str(module.operation.get_asm(enable_debug_info=False))
    if not trust:
        # Anything unregistered still left (e.g. a #enzymexla<...> value under a foreign
        # attribute name) fails here, at load time, instead of inside XLA.
        try:
            _parse(clean, make_context(allow_unregistered=False), origin)
        except MLIRParseError as e:
            raise UnsupportedModuleError(
                f"{origin}: after removing Reactant-only attributes the module still holds "
                f"content stock JAX cannot represent: {e}"
            ) from e
    return StableHLOModule(
        text=clean,
        origin=origin,
        name=name,
        arguments=args,
        results=results,
        ops=frozenset(ops),
        custom_calls=tuple(custom_calls),
        dropped_attributes=frozenset(report.dropped),
        aliasing=dict(report.aliasing),
        arg_shardings=dict(report.arg_shardings),
        num_partitions=int(parts),
    )
