"""export_onnx and save_onnx: an imported model converted to ONNX by jax2onnx (the onnx extra).

The program converted is the one `export_jax` exports with ``batch=None`` (the traced shapes,
params and state as constants; arguments in Lux's order). It is traced once to a jaxpr, on the
lax backend with every primitive under a named scope naming the StableHLO op (and line) that
emitted it, and that jaxpr is what jax2onnx converts, after two rewrites that keep every value:

- calls (``jit``, ``custom_jvp_call``, ``custom_vjp_call``, ``closed_call``) are inlined: the
  ONNX graph is forward-only, so the custom derivative rules have nothing to do there;
- a max or sum window (``reduce_window_max``/``reduce_window_sum``) whose window leaves some
  axes alone (size 1, stride 1, no padding, no dilation: the batch and channel axes of a
  pooling layer) reduces over those axes moved to the front and folded into one. jax2onnx
  pools every axis of the operand as a spatial one, and onnxruntime pools at most three, so
  LeNet's 4-D max-pool (window 1x1x2x2) would not run; folded it is a 3-D window 1x2x2 over
  (N*C, H, W) that does. The windows are the same, so the values are.

Neither rewrite enters the bodies of ``while``, ``cond`` or ``scan``.

A program with 64-bit floats converts in double precision. A primitive jax2onnx has no rule
for is an `OnnxConversionError` naming it and the op of the module it came from.
docs/exporting.md lists what converts.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import os
import pkgutil
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

from .backends.lax.evaluate import SCOPE_SEPARATOR, op_scopes
from .errors import (
    BackendUnavailableError,
    CallArgumentError,
    JuliaBridgeError,
    OnnxConversionError,
    SaveError,
)
from .exporting import _check_target, _program, _write_atomic
from .function import ImportedFunction
from .lux.model import LuxModel
from .support.jaxinternals import global_x64_kept, x64_scope

EXTRA_HINT = "pip install 'juliabridge[onnx]' (jax2onnx and onnxruntime)"
#: The opset asked of jax2onnx unless told otherwise (its own default).
DEFAULT_OPSET = 23
_INLINED = frozenset(
    {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call"}
)
_FOLDABLE = frozenset({"reduce_window_max", "reduce_window_sum"})
#: onnxruntime's MaxPool/AveragePool/LpPool: at most three spatial axes.
_MAX_POOLED_AXES = 3
#: Element types that exist in JAX only with jax_enable_x64 on.
_WIDE = frozenset(map(np.dtype, ("int64", "uint64", "float64", "complex128")))
#: jax2onnx 0.17's message for a primitive without a rule (converter/lowering_dispatch.py).
_MISSING = re.compile(r"No plugins registered for primitive '([^']+)'")


def _jax2onnx() -> Any:
    try:
        with _quiet():
            import jax2onnx
    except ImportError as e:
        raise BackendUnavailableError(
            f"ONNX export needs jax2onnx, which is not installed ({e}); {EXTRA_HINT}"
        ) from e
    except Exception as e:  # a jax2onnx built for another jax fails at import in many ways
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise BackendUnavailableError(
            f"jax2onnx is installed but does not import with this jax {jax.__version__} "
            f"({type(e).__name__}: {first}); install a jax2onnx made for it: {EXTRA_HINT}"
        ) from e
    return jax2onnx


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """jax2onnx logs a traceback for each of its example plugins whose optional package
    (dm-pix, ...) is absent; none of them is used here."""
    logger = logging.getLogger("jax2onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _primitive_rules_only() -> Iterator[None]:
    """jax2onnx imports all of its ~600 plugins (Flax, Equinox, examples) before converting,
    ~10x the time of the primitive rules, which are all a jaxpr of primitives needs. Within:
    only those are imported, and jax2onnx is told its plugins are in (its own flag, restored
    after, so a later jax2onnx.to_onnx of the user's imports the rest). A jax2onnx without
    that flag imports everything, as it would anyway."""
    try:
        system = importlib.import_module("jax2onnx.plugins.plugin_system")
    except ImportError:
        system = None
    flag = "_already_imported_plugins"
    if system is None or not hasattr(system, flag):
        yield
        return
    # The rules of JAX's own primitives: lax and core, and random's (random_bits,
    # random_wrap, ...), which a jaxpr can hold too. Not nn: its plugins need flax.nnx.
    packages = ("lax", "core", "random")
    for package in (f"jax2onnx.plugins.jax.{name}" for name in packages):
        try:
            paths = importlib.import_module(package).__path__
        except ImportError:
            continue
        for info in pkgutil.iter_modules(paths, package + "."):
            with contextlib.suppress(Exception):  # as jax2onnx does: a broken plugin is skipped
                importlib.import_module(info.name)
    before = getattr(system, flag)
    setattr(system, flag, True)
    try:
        yield
    finally:
        setattr(system, flag, before)


# --- the jaxpr rewrite --------------------------------------------------------------------------


def _inner(eqn: Any) -> ClosedJaxpr | None:
    """The jaxpr an inlinable call eqn runs, or None."""
    if eqn.primitive.name not in _INLINED:
        return None
    for key in ("jaxpr", "call_jaxpr"):
        inner = eqn.params.get(key)
        if isinstance(inner, ClosedJaxpr):
            return inner
        if isinstance(inner, Jaxpr):
            return ClosedJaxpr(inner, ())
    return None


def _fold_plan(params: dict[str, Any], rank: int) -> tuple[list[int], list[int]] | None:
    """(untouched axes, windowed axes) when folding the untouched ones lets the pool run."""
    untouched = [
        i
        for i in range(rank)
        if params["window_dimensions"][i] == 1
        and params["window_strides"][i] == 1
        and tuple(params["padding"][i]) == (0, 0)
        and params["base_dilation"][i] == 1
        and params["window_dilation"][i] == 1
    ]
    windowed = [i for i in range(rank) if i not in untouched]
    if rank <= _MAX_POOLED_AXES or len(untouched) < 2 or len(windowed) + 1 > _MAX_POOLED_AXES:
        return None
    return untouched, windowed


def _folded_window(eqn: Any, x: Any) -> Any:
    """The window of `eqn` on `x` with its untouched axes moved first and folded into one."""
    params = eqn.params
    plan = _fold_plan(params, x.ndim)
    if plan is None:
        return eqn.primitive.bind(x, **params)
    untouched, windowed = plan
    perm = untouched + windowed
    moved = lax.transpose(x, perm) if perm != sorted(perm) else x
    lead = [x.shape[i] for i in untouched]
    folded = lax.reshape(moved, (math.prod(lead), *(x.shape[i] for i in windowed)))

    def pick(key: str, fill: Any) -> tuple[Any, ...]:
        return (fill, *(params[key][i] for i in windowed))

    out = eqn.primitive.bind(
        folded,
        window_dimensions=pick("window_dimensions", 1),
        window_strides=pick("window_strides", 1),
        padding=pick("padding", (0, 0)),
        base_dilation=pick("base_dilation", 1),
        window_dilation=pick("window_dilation", 1),
    )
    out = lax.reshape(out, (*lead, *out.shape[1:]))
    inverse = [perm.index(i) for i in range(x.ndim)]
    return lax.transpose(out, inverse) if perm != sorted(perm) else out


def _evaluate(closed: ClosedJaxpr, args: Sequence[Any]) -> list[Any]:
    """Evaluate `closed` on `args`, inlining calls and folding pools (module docstring)."""
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, Literal) else env[v]

    jaxpr = closed.jaxpr
    for var, value in zip((*jaxpr.constvars, *jaxpr.invars), (*closed.consts, *args)):
        env[var] = value
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        inner = _inner(eqn)
        if inner is not None:
            outs: Any = _evaluate(inner, ins)
        elif eqn.primitive.name in _FOLDABLE:
            outs = _folded_window(eqn, ins[0])
        else:
            outs = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(eqn.params))
        for var, value in zip(eqn.outvars, outs if eqn.primitive.multiple_results else [outs]):
            env[var] = value
    return [read(v) for v in jaxpr.outvars]


# --- where a primitive came from --------------------------------------------------------------


def _sources(closed: ClosedJaxpr, primitive: str) -> list[str]:
    """'OP at WHERE' of each module op whose lift emitted `primitive` (innermost scope), in
    order of first appearance; empty when the trace recorded none."""
    found: list[str] = []
    for eqn in _eqns(closed.jaxpr):
        if eqn.primitive.name == primitive:
            scopes = [s for s in str(eqn.source_info.name_stack).split("/") if SCOPE_SEPARATOR in s]
            if scopes:
                here = scopes[-1].replace("\u2215", "/")
                if here not in found:
                    found.append(here)
    return found


def _eqns(jaxpr: Jaxpr) -> Iterator[Any]:
    """Every eqn of `jaxpr` and of the jaxprs in its eqns' params, depth first."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, ClosedJaxpr):
                    yield from _eqns(sub.jaxpr)
                elif isinstance(sub, Jaxpr):
                    yield from _eqns(sub)


def _conversion_error(what: str, closed: ClosedJaxpr, e: Exception) -> OnnxConversionError:
    m = _MISSING.search(str(e))
    if m is None:
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return OnnxConversionError(
            f"{what}: jax2onnx could not convert the program ({type(e).__name__}: {first})"
        )
    primitive = m.group(1)
    sources = _sources(closed, primitive)
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
    avals += [v.aval for eqn in _eqns(closed.jaxpr) for v in eqn.outvars]
    return any(np.dtype(getattr(a, "dtype", np.float32)) in wide for a in avals)


def _x64_if(wide: bool) -> contextlib.AbstractContextManager[None]:
    return x64_scope() if wide else contextlib.nullcontext()


# --- the API --------------------------------------------------------------------------------


def _traced(
    model: LuxModel | ImportedFunction,
) -> tuple[Callable[..., Any], ClosedJaxpr, list[Any], list[str], list[str], str]:
    """The rewritten program, its traced jaxpr, argument specs and names, result names and
    what it is (for messages)."""
    if not isinstance(model, (LuxModel, ImportedFunction)):
        raise CallArgumentError(
            f"export_onnx takes a LuxModel (import_lux) or an ImportedFunction (load_mlir), got "
            f"a {type(model).__name__}"
        )
    backend = model.fn.backend_name if isinstance(model, LuxModel) else model.backend_name
    if backend != "lax":
        raise CallArgumentError(
            f"export_onnx converts the lax backend's JAX primitives, and this model runs on "
            f"{backend!r}; import it with backend='lax'"
        )
    program, sig, out_names, what = _program(model, None, "constants")
    with op_scopes():
        closed = jax.make_jaxpr(program)(*sig.specs)
    flat_out = [str(n) for n in jax.tree.leaves(out_names)]

    def rewritten(*args: Any) -> list[Any]:
        # As the lax backend evaluates (its 64-bit values kept exactly), whatever jax2onnx
        # sets jax_enable_x64 to while it traces.
        with x64_scope():
            return _evaluate(closed, args)

    return rewritten, closed, list(sig.specs), list(sig.names), flat_out, what


def export_onnx(model: LuxModel | ImportedFunction, *, opset: int = DEFAULT_OPSET) -> Any:
    """The model as an ONNX ``ModelProto``, converted by jax2onnx (``juliabridge[onnx]``).

    The graph takes the inputs at the traced shapes (in the model's layout, named as in the
    manifest, e.g. ``x``) and returns the outputs (named ``output``, ``output.1``...); params
    and state are initializers; 64-bit floats stay 64-bit. Run it with onnxruntime:
    ``InferenceSession(proto.SerializeToString()).run(None, {"x": x})``.

    Args:
        model: a LuxModel (``import_lux``) or a ``load_mlir`` function, on the lax backend.
        opset: the ONNX opset to target (jax2onnx's default, 23, unless told otherwise).

    Returns:
        The ``onnx.ModelProto``.

    Raises:
        BackendUnavailableError: jax2onnx is not installed (the message says what to install).
        CallArgumentError: not a model or function, or not on the lax backend.
        OnnxConversionError: jax2onnx cannot convert a primitive (``.primitive``), emitted by
            the module's op ``.op`` at ``.where``.
    """
    if not isinstance(opset, int) or isinstance(opset, bool) or opset < 1:
        raise CallArgumentError(f"opset={opset!r}: expected a positive int, e.g. 23")
    jax2onnx = _jax2onnx()
    fn, closed, specs, in_names, out_names, what = _traced(model)
    # jax2onnx traces with jax_enable_x64 set as its double precision says, which would make
    # 64-bit arguments and results (an i64 with no float64 anywhere) 32-bit: a 64-bit
    # signature keeps x64 on around it.
    wide = any(np.dtype(a.dtype) in _WIDE for a in (*closed.in_avals, *closed.out_avals))
    try:
        with _quiet(), _primitive_rules_only(), global_x64_kept(), _x64_if(wide):
            return jax2onnx.to_onnx(
                fn,
                specs,
                model_name=re.sub(r"\W", "_", what) or "juliabridge_model",
                opset=opset,
                input_names=in_names,
                output_names=out_names,
                enable_double_precision=_has_float64(closed),
            )
    except JuliaBridgeError:
        raise
    except Exception as e:  # jax2onnx raises NotImplementedError, ValueError, TypeError...
        raise _conversion_error(what, closed, e) from e


def save_onnx(
    model: LuxModel | ImportedFunction,
    path: str | os.PathLike[str],
    *,
    opset: int = DEFAULT_OPSET,
    overwrite: bool = False,
) -> Path:
    """Write ``export_onnx(model, opset=opset)`` to `path` (one self-contained .onnx file).

    Args:
        model, opset: as for `export_onnx`.
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
    proto = export_onnx(model, opset=opset)
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


__all__ = ["DEFAULT_OPSET", "export_onnx", "save_onnx"]
