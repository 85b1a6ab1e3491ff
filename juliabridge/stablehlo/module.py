"""Parse a Reactant StableHLO module once: sanitized text, @main signature, policy checks."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import JuliaBridgeError, MLIRParseError, ResourceLimitError, UnsupportedModuleError
from ..support import dtypes
from ..support.jaxinternals import ir, make_context
from .budget import Limits, check_budget, host_memory, human
from .callgraph import callees_first, functions
from .elementtypes import check_element_types
from .elided import check_constants_present
from .hlosharding import read_sharding
from .nesting import MLIR_SKIP, max_depth
from .policy import check_custom_calls, check_ops, is_allowed_op
from .sanitize import (
    SanitizeReport,
    canonicalize_sort,
    drop_broadcast_hints,
    fix_module_header,
    strip_reactant_attributes,
    walk,
)

#: Text larger than this is refused before parsing (a model's weights live in HDF5, not here).
MAX_MODULE_BYTES = 1 << 30
#: Deepest bracket nesting accepted (measured before parsing; MLIR's parser recurses per level
#: and crashes at a few thousand). Real modules stay below about 30.
MAX_NESTING = 256
#: Peak memory of parsing and checking, per byte of module text (MLIR's in-memory IR, the
#: printed copy and its second parse; measured by benchmarks/bench_parse_memory.py). Text
#: larger than the available memory divided by this is refused before it is read.
PARSE_BYTES_PER_TEXT_BYTE = 32


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
    #: The sanitized MLIR module itself, with the source's line numbers in its locations, for
    #: backends that read ops directly (lax); not part of the value.
    parsed: Any = field(default=None, compare=False, repr=False)
    #: Custom-call target -> "line L" of its first call, for the backends' policy messages.
    custom_call_sites: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: @main result index -> @main argument index, for each result whose return operand *is*
    #: that block argument (returned unchanged: an echo, decided from the structure, never from
    #: values).
    returned_arguments: dict[int, int] = field(default_factory=dict)


def _check_text_budget(size: int, what: str) -> None:
    """Refuse text whose parse would need more memory than this process can get."""
    if size > MAX_MODULE_BYTES:
        raise MLIRParseError(f"{what}: {size} bytes is larger than the 1 GiB module limit")
    avail, source = host_memory()
    need = size * PARSE_BYTES_PER_TEXT_BYTE
    if need > avail:
        raise ResourceLimitError(
            f"{what}: parsing {human(size)} of MLIR text needs about {human(need)} "
            f"({PARSE_BYTES_PER_TEXT_BYTE}x the text), more than {human(avail)}, {source}; "
            "free memory or load it on a larger machine"
        )


def _read_source(source: str | bytes | os.PathLike[str]) -> tuple[str, str]:
    """Return (text, origin): `source` is a path to a file or MLIR text itself."""
    if isinstance(source, bytes):
        _check_text_budget(len(source), "<mlir bytes>")
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MLIRParseError(f"<mlir bytes>: not UTF-8 text ({e})") from e
    if not isinstance(source, (str, os.PathLike)):
        raise MLIRParseError(
            f"expected a path to a .mlir file or the module text (str), got {type(source).__name__}"
        )
    if isinstance(source, os.PathLike) or ("\n" not in source and "{" not in source):
        path = Path(source)
        try:
            st = path.stat()
        except OSError as e:
            raise MLIRParseError(
                f"{path}: cannot read the MLIR file ({e.strerror}). Pass a path to a .mlir file "
                "or the module text itself."
            ) from e
        if stat.S_ISDIR(st.st_mode):
            raise MLIRParseError(
                f"{path}: is a directory, not a .mlir file; for a bundle directory use "
                "juliabridge.import_lux"
            )
        if not stat.S_ISREG(st.st_mode):
            raise MLIRParseError(f"{path}: not a regular file, so not a .mlir module")
        _check_text_budget(st.st_size, str(path))
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_MODULE_BYTES + 1)
        except OSError as e:
            raise MLIRParseError(
                f"{path}: cannot read the MLIR file ({e.strerror}); check its permissions"
            ) from e
        if len(data) > MAX_MODULE_BYTES:
            raise MLIRParseError(f"{path}: larger than the 1 GiB module limit")
        try:
            return data.decode("utf-8"), str(path)
        except UnicodeDecodeError as e:
            raise MLIRParseError(
                f"{path}: not UTF-8 text ({e}), so not an MLIR module; is it the right file "
                "(e.g. not the HDF5 weights)?"
            ) from e
    _check_text_budget(len(source), "<mlir text>")
    return source, "<mlir text>"


def _check_nesting(text: str, origin: str) -> None:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise MLIRParseError(f"{origin}: the MLIR text is not valid Unicode ({e})") from e
    depth = max_depth(data, MLIR_SKIP)
    if depth > MAX_NESTING:
        raise MLIRParseError(
            f"{origin}: brackets nest {depth} levels deep, more than the {MAX_NESTING} "
            "juliabridge accepts (MLIR's parser would exhaust its stack); this is not a module "
            "Reactant emits"
        )


_UNKNOWN_CUSTOM_OP = re.compile(r"Dialect `([^']+)' not found for custom op '([^']+)'")


def _parse(text: str, ctx: ir.Context, origin: str) -> ir.Module:
    try:
        with ctx:
            return ir.Module.parse(text)
    except ir.MLIRError as e:
        detail = "; ".join(_diagnostic(d) for d in e.error_diagnostics) or str(e)
        unknown = _UNKNOWN_CUSTOM_OP.search(detail)
        if unknown:
            # An op of a dialect JAX lacks, printed in its custom syntax, cannot even be parsed
            # (nor loaded with trust=True): every such op the text names, with its line.
            sites = {unknown.group(2): "", **_ops_in_text(text)}
            check_ops(sites, trust=False, where=origin, sites=sites)
        raise MLIRParseError(
            f"{origin}: the MLIR does not parse: {detail[:2000]}. {_PARSE_ADVICE}"
        ) from e
    except (ValueError, RuntimeError) as e:
        raise MLIRParseError(
            f"{origin}: the MLIR does not parse: {str(e)[:2000]}. {_PARSE_ADVICE}"
        ) from e


_OP_AT_LINE_START = re.compile(
    r'^[ \t]*(?:%[^=\n"]*=[ \t]*)?"?([A-Za-z_][\w$]*\.[\w.$]+)"?[ \t(<{@%:]', re.M
)


def _ops_in_text(text: str) -> dict[str, str]:
    """Op names outside StableHLO/CHLO/func that start a line of `text`, with the line of the
    first (for a module the parser stopped on: linear in the text, no IR)."""
    out: dict[str, str] = {}
    for m in _OP_AT_LINE_START.finditer(text):
        name = m.group(1)
        if name not in out and not is_allowed_op(name):
            out[name] = f"line {text.count(chr(10), 0, m.start()) + 1}"
    return out


_PARSE_ADVICE = (
    "The file is damaged or is not a StableHLO module as Reactant prints it; export or "
    "download it again"
)
_LOC = re.compile(r'loc\("[^"]*":(\d+):(\d+)\)')


def _diagnostic(d: ir.DiagnosticInfo) -> str:
    """'line L, column C: message' for a parser diagnostic."""
    m = _LOC.fullmatch(str(d.location))
    where = f"line {m.group(1)}, column {m.group(2)}: " if m else ""
    return f"{where}{d.message}"


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


#: Ops that return their operand's values unchanged when their result type equals the operand's
#: (Reactant's boundary transposes, identity converts and reshapes); transpose is followed
#: through its permutation.
_SAME_VALUE_OPS = frozenset(
    {"stablehlo.convert", "stablehlo.reshape", "stablehlo.bitcast_convert", "stablehlo.copy"}
)


def _echoed_argument(v: ir.Value, block: ir.Block) -> int | None:
    """The @main argument whose values `v` holds unchanged, followed back through no-op chains.

    Reactant returns an unmutated argument as ``transpose(transpose(%argN))`` (its row-major
    boundary), so a chain of transposes whose permutations compose to the identity, and ops
    whose result type is their operand's type (identity convert, reshape, broadcast_in_dim), are
    followed; anything else means the value was computed.
    """
    perm: list[int] | None = None  # v == transpose(current, perm)
    for _ in range(10_000):  # a chain longer than this is not Reactant's boundary
        if isinstance(v.owner, ir.Block):
            if v.owner != block:
                return None
            if perm is not None and perm != sorted(perm):
                return None
            return ir.BlockArgument(v).arg_number
        op = v.owner.operation if hasattr(v.owner, "operation") else v.owner
        if len(op.operands) != 1:
            return None
        if op.name == "stablehlo.transpose":
            p = [int(d) for d in ir.DenseI64ArrayAttr(op.attributes["permutation"])]
            perm = p if perm is None else [p[k] for k in perm]
        elif op.name in _SAME_VALUE_OPS or op.name == "stablehlo.broadcast_in_dim":
            if op.operands[0].type != v.type:
                return None
            if op.name == "stablehlo.broadcast_in_dim":
                dims = [int(d) for d in ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"])]
                if dims != list(range(len(dims))):
                    return None
        else:
            return None
        v = op.operands[0]
    return None


def _returned_arguments(main: ir.Operation) -> dict[int, int]:
    """Result index -> argument index for each @main result that returns an argument unchanged."""
    block = main.regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    echoes: dict[int, int] = {}
    for k, v in enumerate(ret.operands):
        j = _echoed_argument(v, block)
        if j is not None:
            echoes[k] = j
    return echoes


@dataclass(frozen=True)
class _Analysis:
    args: tuple[TensorSpec, ...]
    results: tuple[TensorSpec, ...]
    ops: set[str]
    sites: dict[str, str]
    parts: int
    clean: str
    returned: dict[int, int]


def _analyze(module: ir.Module, report: SanitizeReport, trust: bool, origin: str) -> _Analysis:
    with module.context:
        strip_reactant_attributes(module, report)
        ops: set[str] = set()
        sites: dict[str, str] = {}  # target -> line of its first call, in order of appearance
        op_sites: dict[str, str] = {}  # op outside StableHLO -> line of its first use
        for op in walk(module.operation):
            if op.name not in ops and not is_allowed_op(op.name):
                line = _LOC.search(str(op.location))
                op_sites[op.name] = f"line {line.group(1)}" if line else ""
            ops.add(op.name)
            if op.name == "stablehlo.sort":
                canonicalize_sort(op)
            elif op.name == "stablehlo.dynamic_broadcast_in_dim":
                drop_broadcast_hints(op)
            elif op.name == "stablehlo.custom_call":
                target = ir.StringAttr(op.attributes["call_target_name"]).value
                if target not in sites:
                    line = _LOC.search(str(op.location))
                    sites[target] = f"line {line.group(1)}" if line else ""
        custom_calls = list(sites)
        for i, recorded in sorted(report.arg_shardings.items()):
            read_sharding(recorded, f"{origin}: @main argument {i}")
        check_ops(ops, trust=trust, where=origin, sites=op_sites)
        check_custom_calls(custom_calls, trust=trust, where=origin, sites=sites)
        # Structure first (no recursion, no missing bodies), then every op's contract and the
        # resource budgets, all before anything reaches XLA.
        funcs = functions(module, origin)
        order = callees_first(funcs, origin)
        check_budget(
            funcs,
            order,
            origin,
            check_contracts=not trust,
            limits=None if trust else Limits.current(),
        )
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
        returned = _returned_arguments(main)
        clean = str(module.operation.get_asm(enable_debug_info=False))
    return _Analysis(args, results, ops, sites, int(parts), clean, returned)


def parse_module(
    source: str | bytes | os.PathLike[str], *, trust: bool = False, origin: str | None = None
) -> StableHLOModule:
    """Parse, sanitize and check a StableHLO module given as a path, text or UTF-8 bytes.

    Every check runs before XLA sees the module (docs/reliability.md, "Module checks"): size and
    bracket nesting of the text; the op and custom-call policy; the call graph (no recursion,
    no functions without a body, only functions at the top level); each op's contract (custom
    calls, fft, collectives, no host I/O); and the resource budgets (ops after inlining, chain
    depth, largest value, peak live bytes). `trust=True` skips the policy, the contracts and
    the budgets (not the structure checks), for modules you made yourself. `origin` names text
    read elsewhere (e.g. a bundle file hashed first) in error messages.

    Raises MLIRParseError (unreadable or unparsable text), UnsupportedModuleError and its
    subclasses ModuleContractError and ResourceLimitError.
    """
    raw, found = _read_source(source)
    origin = origin or found
    _check_nesting(raw, origin)
    text, name = fix_module_header(raw)
    check_element_types(text, origin)  # before the parser: it has no quant dialect
    check_constants_present(text, origin)
    report = SanitizeReport(module_name=name)
    ctx = make_context(allow_unregistered=True)
    module = _parse(text, ctx, origin)
    del raw, text  # the IR holds everything from here on
    try:
        a = _analyze(module, report, trust, origin)
    except JuliaBridgeError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, RuntimeError) as e:
        # The bindings' casts fail on shapes of IR the parser accepts but Reactant never writes
        # (e.g. a string where an integer attribute belongs).
        raise UnsupportedModuleError(
            f"{origin}: the module parses but has a structure juliabridge does not expect "
            f"({type(e).__name__}: {str(e)[:300]}); it is not a module Reactant emits"
        ) from e
    if not trust:
        # Anything unregistered still left (e.g. a #enzymexla<...> value under a foreign
        # attribute name) fails here, at load time, instead of inside XLA.
        # The same context, switched to strict: a second one would cost a dialect registry
        # per load, and the constants both parses share are stored once.
        ctx.allow_unregistered_dialects = False
        try:
            _parse(a.clean, ctx, origin)  # dropped at once
        except MLIRParseError as e:
            raise UnsupportedModuleError(
                f"{origin}: after removing Reactant-only attributes the module still holds "
                f"content stock JAX cannot represent: {e}"
            ) from e
        finally:
            ctx.allow_unregistered_dialects = True  # as `module` was parsed, for later users
    return StableHLOModule(
        text=a.clean,
        origin=origin,
        name=name,
        arguments=a.args,
        results=a.results,
        ops=frozenset(a.ops),
        custom_calls=tuple(a.sites),
        custom_call_sites=a.sites,
        dropped_attributes=frozenset(report.dropped),
        aliasing=dict(report.aliasing),
        arg_shardings=dict(report.arg_shardings),
        num_partitions=a.parts,
        parsed=module,
        returned_arguments=a.returned,
    )
