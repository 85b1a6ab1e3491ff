"""export_onnx and save_onnx: an imported model converted to ONNX by jax2onnx (the onnx extra),
and checked in onnxruntime before it is returned.

The program converted is the one `export_jax` exports with params and state as constants and
arguments in Lux's order; a LuxModel whose bundle declares a batch axis with independent
samples gets a symbolic batch dimension there (as `export_jax` does), anything else the traced
shapes. It is traced once to a jaxpr, on the lax backend with every primitive under a named
scope naming the StableHLO op (and line) that emitted it; `rewrite` evaluates that jaxpr again
into the one jax2onnx converts (calls inlined, pools folded, convolutions in the canonical
layout, unfaithful ops in faithful forms). `check` runs the graph in onnxruntime and compares
its outputs with juliabridge's own before it is returned.

A program with 64-bit floats converts in double precision. A primitive jax2onnx has no rule
for is an `OnnxConversionError` naming it and the op of the module it came from; so is a graph
whose outputs differ, naming the op that differs. docs/exporting.md lists what converts.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr

from ..backends.lax.evaluate import SCOPE_SEPARATOR, op_scopes
from ..errors import CallArgumentError, JuliaBridgeError, OnnxConversionError, SaveError
from ..exporting import _check_target, _program, _write_atomic
from ..function import ImportedFunction
from ..lux.model import LuxModel
from ..support.jaxinternals import global_x64_kept, x64_scope
from . import batch as batching
from . import check as checking
from . import rewrite
from .plugins import jax2onnx_module, primitive_rules_only, quiet

#: The opset asked of jax2onnx unless told otherwise (its own default).
DEFAULT_OPSET = 23
#: export_onnx's default batch: the bundle's batch axis, named "b", where it declares one.
AUTO = "auto"
#: Element types that exist in JAX only with jax_enable_x64 on.
_WIDE = frozenset(map(np.dtype, ("int64", "uint64", "float64", "complex128")))
#: jax2onnx 0.17's message for a primitive without a rule (converter/lowering_dispatch.py).
_MISSING = re.compile(r"No plugins registered for primitive '([^']+)'")


def _conversion_error(what: str, closed: ClosedJaxpr, e: Exception) -> OnnxConversionError:
    m = _MISSING.search(str(e))
    if m is None:
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return OnnxConversionError(
            f"{what}: jax2onnx could not convert the program ({type(e).__name__}: {first})"
        )
    primitive = m.group(1)
    sources = rewrite.sources(closed, primitive)
    if sources:
        more = f" (and {len(sources) - 3} more)" if len(sources) > 3 else ""
        origin = f", emitted by the module's {'; '.join(sources[:3])}{more}"
    else:
        origin = ""
    op, _, where = sources[0].partition(SCOPE_SEPARATOR) if sources else ("", "", "")
    return OnnxConversionError(
        f"{what}: jax2onnx has no ONNX rule for the JAX primitive {primitive!r}{origin}; "
        "docs/exporting.md lists what converts. The model still runs in JAX (and exports "
        "with export_jax)",
        primitive=primitive,
        op=op,
        where=where,
    )


def _has_float64(closed: ClosedJaxpr) -> bool:
    """Whether any value of the program is a 64-bit float: jax2onnx then converts with double
    precision (else it traces with jax_enable_x64 off and f64 values become f32)."""
    wide = (np.dtype(np.float64), np.dtype(np.complex128))
    avals = [*closed.in_avals, *closed.out_avals, *(v.aval for v in closed.jaxpr.constvars)]
    avals += [c for c in closed.consts if hasattr(c, "dtype")]  # their dtype, not a copy
    avals += [v.aval for eqn in rewrite.eqns(closed.jaxpr) for v in eqn.outvars]
    return any(np.dtype(getattr(a, "dtype", np.float32)) in wide for a in avals)


def _x64_if(wide: bool) -> contextlib.AbstractContextManager[None]:
    return x64_scope() if wide else contextlib.nullcontext()


# --- the API --------------------------------------------------------------------------------


class _Traced:
    """The program to convert: its reference function (juliabridge's own), its jaxpr, argument
    specs and names, result names, what it is (for messages) and its traced batch size."""

    def __init__(self, model: LuxModel | ImportedFunction, batch: str | None) -> None:
        if not isinstance(model, (LuxModel, ImportedFunction)):
            raise CallArgumentError(
                f"export_onnx takes a LuxModel (import_lux) or an ImportedFunction "
                f"(load_mlir), got a {type(model).__name__}"
            )
        backend = model.fn.backend_name if isinstance(model, LuxModel) else model.backend_name
        if backend != "lax":
            raise CallArgumentError(
                f"export_onnx converts the lax backend's JAX primitives, and this model runs on "
                f"{backend!r}; import it with backend='lax'"
            )
        if batch == AUTO:
            batch = "b" if _declares_batch(model) else None
        if batch is not None and not isinstance(model, LuxModel):
            raise CallArgumentError(
                f"batch={batch!r}: a load_mlir function declares no batch axis, so its ONNX "
                "graph takes the traced shapes; pass batch=None (or leave the default)"
            )
        static, sig, out_tree, self.what = _program(model, None, "constants")
        self.out_names = [str(n) for n in jax.tree.leaves(out_tree)]
        self.program = static  # juliabridge's own, for the check
        self.symbolic = batch is not None
        traced = model.manifest.batch if isinstance(model, LuxModel) else None
        self.batch_size = traced.size if traced is not None else 1
        converted: Callable[..., Any] = static
        if isinstance(model, LuxModel) and batch is not None:
            self.program, sig, _, _ = _program(model, batch, "constants")
            julia = model.layout == "julia"
            out_axes = batching.output_axes(model.manifest, self.out_names, julia)
            converted = batching.any_batch(static, sig.batch_axes, out_axes, self.batch_size)
        with op_scopes():
            self.closed = jax.make_jaxpr(converted)(*sig.specs)
        self.specs, self.in_names = list(sig.specs), list(sig.names)

    def rewritten(self, *args: Any) -> list[Any]:
        """The program jax2onnx converts: the jaxpr evaluated with `rewrite`'s rewrites. As
        the lax backend evaluates (its 64-bit values kept exactly), whatever jax2onnx sets
        jax_enable_x64 to while it traces."""
        with x64_scope():
            return rewrite.evaluate(self.closed, args)

    def check_sizes(self) -> list[int]:
        """The batch sizes the graph is checked at: the traced one, and another (not a
        multiple of it) when the batch is symbolic."""
        return [self.batch_size, self.batch_size + 1] if self.symbolic else [self.batch_size]


def _declares_batch(model: LuxModel | ImportedFunction) -> bool:
    """Whether the bundle declares a batch every input and output carries, with independent
    samples: then "auto" makes it symbolic."""
    if not isinstance(model, LuxModel):
        return False
    m = model.manifest
    if m.batch is None or not m.batch.samples_independent:
        return False
    if not any(a.role == "input" and a.batch_axis is not None for a in m.arguments):
        return False
    outputs = [r for r in m.results if any(p[0] == "output" for p in r.paths)]
    return all(r.batch_axis is not None for r in outputs)


def _check_options(opset: int, batch: str | None, check: bool) -> None:
    if not isinstance(opset, int) or isinstance(opset, bool) or opset < 1:
        raise CallArgumentError(f"opset={opset!r}: expected a positive int, e.g. 23")
    if batch is not None and (not isinstance(batch, str) or not batch.isidentifier()):
        raise CallArgumentError(
            f"batch={batch!r}: expected 'auto' (the bundle's batch axis, where it declares "
            "one), the name of a symbolic dimension (an identifier such as 'b'), or None for "
            "the traced shapes"
        )
    if not isinstance(check, bool):
        raise CallArgumentError(f"check={check!r}: expected True or False")


def _converter(jax2onnx: Any, what: str, closed: ClosedJaxpr, opset: int) -> checking.Convert:
    """A function converting a function of `closed`'s element types with jax2onnx."""
    # jax2onnx traces with jax_enable_x64 set as its double precision says, which would make
    # 64-bit arguments and results (an i64 with no float64 anywhere) 32-bit: a 64-bit
    # signature keeps x64 on around it.
    wide = any(np.dtype(a.dtype) in _WIDE for a in (*closed.in_avals, *closed.out_avals))
    double = _has_float64(closed)

    def convert(fn: Callable[..., Any], specs: Sequence[Any], **names: Any) -> Any:
        try:
            with quiet(), primitive_rules_only(), global_x64_kept(), _x64_if(wide):
                return jax2onnx.to_onnx(
                    fn,
                    list(specs),
                    model_name=re.sub(r"\W", "_", what) or "juliabridge_model",
                    opset=opset,
                    enable_double_precision=double,
                    **names,
                )
        except JuliaBridgeError:
            raise
        except Exception as e:  # jax2onnx raises NotImplementedError, ValueError, TypeError...
            raise _conversion_error(what, closed, e) from e

    return convert


def export_onnx(
    model: LuxModel | ImportedFunction,
    *,
    opset: int = DEFAULT_OPSET,
    batch: str | None = AUTO,
    check: bool = True,
) -> Any:
    """The model as an ONNX ``ModelProto``, converted by jax2onnx (``juliabridge[onnx]``) and
    checked in onnxruntime against juliabridge's own outputs.

    The graph takes the inputs in the model's layout, named as in the manifest (e.g. ``x``),
    and returns the outputs (named ``output``, ``output.1``...); params and state are
    initializers; 64-bit floats stay 64-bit. Run it with onnxruntime:
    ``InferenceSession(proto.SerializeToString()).run(None, {"x": x})``.

    Args:
        model: a LuxModel (``import_lux``) or a ``load_mlir`` function, on the lax backend.
        opset: the ONNX opset to target (jax2onnx's default, 23, unless told otherwise).
        batch: "auto" (default): a LuxModel whose bundle declares a batch axis with
            independent samples gets a symbolic dimension ``b`` there (any batch size runs),
            anything else the traced shapes; a name: that symbolic dimension (for a load_mlir
            function, a new leading axis, as `export_jax` does); None: the traced shapes.
        check: run the graph in onnxruntime on generated inputs of the declared types (at
            the traced batch size, and one more when it is symbolic) and compare with the
            model's outputs before returning (default). False returns the graph unchecked:
            only for a graph you check yourself.

    Returns:
        The ``onnx.ModelProto``.

    Raises:
        BackendUnavailableError: jax2onnx (or, checking, onnxruntime) is not installed.
        CallArgumentError: not a model or function, not on the lax backend, or a bad option.
        OnnxConversionError: jax2onnx cannot convert a primitive (``.primitive``), emitted by
            the module's op ``.op`` at ``.where``; or the graph computes something else than
            the model (or onnxruntime refuses it): the message names the output and the
            first op of the module that differs converted alone, with its ONNX operators.
    """
    _check_options(opset, batch, check)
    jax2onnx = jax2onnx_module()
    traced = _Traced(model, batch)
    if check:
        checking.onnxruntime_module()  # before the conversion, not after it
    found = rewrite.unfaithful_in_bodies(traced.closed.jaxpr)
    if found is not None:
        raise _unfaithful(traced.what, found)
    convert = _converter(jax2onnx, traced.what, traced.closed, opset)
    proto = convert(
        traced.rewritten,
        traced.specs,
        input_names=traced.in_names,
        output_names=traced.out_names,
    )
    if check:
        _check(traced, proto, convert)
    return proto


def _unfaithful(what: str, eqn: Any) -> OnnxConversionError:
    op, _, where = rewrite.scope_of(eqn).partition(SCOPE_SEPARATOR)
    name = eqn.primitive.name
    return OnnxConversionError(
        f"{what}: the JAX primitive {name!r} (from the module's {op or 'op'} at "
        f"{where or 'an unknown line'}) sits in the body of a higher-order primitive "
        "export_onnx does not rewrite, where its ONNX form computes something else; the "
        "model still runs in JAX (and exports with export_jax)",
        primitive=name,
        op=op,
        where=where,
    )


def _check(traced: _Traced, proto: Any, convert: checking.Convert) -> None:
    """Raise OnnxConversionError where onnxruntime's outputs differ from the model's."""
    for size in traced.check_sizes():
        args = checking.example_arguments(traced.specs, size)
        with x64_scope():
            want = [np.asarray(w) for w in jax.tree.leaves(jax.jit(traced.program)(*args))]
        try:
            got = checking.run(proto, args)
        except Exception as e:  # onnxruntime's own errors (Fail, InvalidGraph, ...)
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            problem = f"onnxruntime refuses the graph at batch size {size} ({first})"
        else:
            problems = [
                f"{name}: {p}"
                for name, g, w in zip(traced.out_names, got, want)
                if (p := checking.difference(g, w)) is not None
            ]
            if not problems:
                continue
            problem = (
                f"onnxruntime's outputs differ from the model's at batch size {size}: "
                + "; ".join(problems[:3])
            )
        raise _mismatch(traced, problem, args, convert)


def _mismatch(
    traced: _Traced, problem: str, args: list[np.ndarray], convert: checking.Convert
) -> OnnxConversionError:
    finding = checking.diagnose(traced.closed, args, convert)
    advice = (
        " The graph is not returned; the model still runs in JAX (and exports with "
        "export_jax). check=False returns it unchecked."
    )
    if finding is None:
        return OnnxConversionError(
            f"{traced.what}: {problem}. No single op differs converted alone (the difference "
            f"accumulates, or lies past the {checking.DIAGNOSE_OPS} ops tried)." + advice
        )
    op, _, where = rewrite.scope_of(finding.eqn).partition(SCOPE_SEPARATOR)
    name = finding.eqn.primitive.name
    onnx = f" (ONNX {', '.join(finding.onnx_ops)})" if finding.onnx_ops else ""
    return OnnxConversionError(
        f"{traced.what}: {problem}. The first op that differs converted alone is the module's "
        f"{op or 'op'} at {where or 'an unknown line'}: JAX primitive {name!r}{onnx} "
        f"{finding.problem}." + advice,
        primitive=name,
        op=op,
        where=where,
    )


def save_onnx(
    model: LuxModel | ImportedFunction,
    path: str | os.PathLike[str],
    *,
    opset: int = DEFAULT_OPSET,
    batch: str | None = AUTO,
    check: bool = True,
    overwrite: bool = False,
) -> Path:
    """Write ``export_onnx(model, opset=..., batch=..., check=...)`` to `path` (one
    self-contained .onnx file).

    Args:
        model, opset, batch, check: as for `export_onnx`.
        path: the file to write, e.g. ``lenet.onnx``.
        overwrite: replace an existing file (default: refuse).

    Returns:
        The path written.

    Raises:
        SaveError: the file exists (without overwrite) or cannot be written.
        BackendUnavailableError / CallArgumentError / OnnxConversionError: as for `export_onnx`.
    """
    target = Path(path)
    _check_target(target, overwrite)  # before the conversion, not after it
    proto = export_onnx(model, opset=opset, batch=batch, check=check)
    try:
        data = proto.SerializeToString()
    except Exception as e:  # protobuf refuses a message over 2 GB (ValueError / EncodeError)
        raise SaveError(
            f"{target}: the ONNX model does not serialize as one protobuf ({type(e).__name__}: "
            f"{str(e)[:200]}); a model over 2 GB needs ONNX's external data, which save_onnx "
            "does not write: export a smaller model, or write the initializers out yourself "
            "with onnx.save_model(proto, path, save_as_external_data=True)"
        ) from e
    _write_atomic(target, data, overwrite)
    return target


__all__ = ["AUTO", "DEFAULT_OPSET", "export_onnx", "save_onnx"]
