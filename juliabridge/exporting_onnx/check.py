"""The converted graph checked before it is handed over: onnxruntime runs it on inputs of the
declared types and its outputs are compared with juliabridge's own; where they differ, the
first op that differs converted alone is found and named.

Inputs are generated (seeded): floats from a standard normal, every fourth a half-integer or
a tiny value, integers in [-3, 4] ([0, 7] unsigned), Booleans at random. Floats compare
within a tolerance of the element type's precision (``rtol * |want| + rtol * max |want|``:
1e-2 for 16-bit, 1e-4 for 32-bit, 1e-9 for 64-bit floats), NaNs and infinities exactly
where they are; integers and Booleans exactly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import ClosedJaxpr, Literal

from ..errors import OnnxConversionError
from ..support.jaxinternals import x64_scope
from . import rewrite
from .plugins import onnxruntime_module

#: At most this many distinct ops are converted alone to find the one that differs, within
#: this many seconds (a conversion takes ~0.1-1 s).
DIAGNOSE_OPS = 64
DIAGNOSE_SECONDS = 60.0
_SEED = 0
_EDGES = np.array([0.5, -0.5, 1.5, 2.5, -2.5, 1e-7, -1e-7, 3e-5])

#: convert(fn, specs, **names) -> the ModelProto of `fn` at `specs` (OnnxConversionError).
Convert = Callable[..., Any]


def example_arguments(specs: Sequence[Any], batch_size: int) -> list[np.ndarray]:
    """Seeded arrays of `specs`' shapes and dtypes; a symbolic dimension is `batch_size`."""
    rng = np.random.default_rng(_SEED)
    out = []
    for spec in specs:
        shape = tuple(d if isinstance(d, int) else batch_size for d in spec.shape)
        dtype = np.dtype(spec.dtype)
        if dtype == np.bool_:
            value: np.ndarray = rng.random(shape) < 0.5
        elif dtype.kind == "u":
            value = rng.integers(0, 8, shape)
        elif dtype.kind == "i":
            value = rng.integers(-3, 5, shape)
        elif dtype.kind == "c":
            value = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape)
            # every fourth a half-integer or a tiny value: where ONNX operators round or
            # cancel otherwise than StableHLO's (half to even, exp(x) - 1)
            flat = value.reshape(-1)
            flat[::4] = rng.choice(_EDGES, flat[::4].shape)
        out.append(np.asarray(value).astype(dtype))
    return out


def _rtol(dtype: np.dtype) -> float:
    if not jnp.issubdtype(dtype, jnp.inexact):
        return 0.0
    bits = np.dtype(dtype).itemsize * 8 // (2 if dtype.kind == "c" else 1)
    return {16: 1e-2, 32: 1e-4}.get(bits, 1e-9)


def difference(got: Any, want: Any) -> str | None:
    """What differs between onnxruntime's `got` and juliabridge's `want` (None: nothing)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, juliabridge's {list(want.shape)}"
    rtol = _rtol(want.dtype)
    if rtol == 0.0:
        bad = got != want
    else:
        g, w = (
            got.astype(np.complex128 if want.dtype.kind == "c" else np.float64),
            want.astype(np.complex128 if want.dtype.kind == "c" else np.float64),
        )
        finite = np.isfinite(w)
        scale = float(np.max(np.abs(w[finite]), initial=0.0))
        with np.errstate(invalid="ignore"):
            close = np.abs(g - w) <= rtol * np.abs(w) + rtol * scale
        same = (np.isnan(g) & np.isnan(w)) | (~np.isnan(w) & ~finite & (g == w))
        bad = ~np.where(finite, close, same)
    if not bad.any():
        return None
    i = tuple(int(k) for k in np.argwhere(bad)[0])
    return (
        f"at index {list(i)} onnxruntime gives {got[i]!r}, juliabridge {want[i]!r} "
        f"({int(bad.sum())} of {bad.size} elements differ)"
    )


def session(proto: Any) -> Any:
    """An onnxruntime CPU session of `proto` (raises what onnxruntime raises)."""
    ort = onnxruntime_module()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def run(proto: Any, arguments: Sequence[np.ndarray]) -> list[np.ndarray]:
    """`proto`'s outputs on `arguments` (its inputs in order)."""
    import onnx.helper

    s = session(proto)
    # jax2onnx's double precision makes every float of the graph 64-bit, inputs included
    types = [
        onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        for i in proto.graph.input
    ]
    feeds = {
        i.name: np.asarray(a).astype(t) for i, a, t in zip(proto.graph.input, arguments, types)
    }
    return list(s.run(None, feeds))


@dataclass
class Finding:
    """The first op that computes something else when converted alone."""

    eqn: Any
    problem: str
    onnx_ops: list[str]


def diagnose(closed: ClosedJaxpr, args: Sequence[Any], convert: Convert) -> Finding | None:
    """Evaluate `closed` (rewritten) on `args` and convert each distinct op alone (within
    `DIAGNOSE_OPS` and `DIAGNOSE_SECONDS`) until one differs from the op's own values."""
    seen: set[str] = set()
    found: list[Finding] = []
    deadline = time.monotonic() + DIAGNOSE_SECONDS

    def visit(eqn: Any, ins: list[Any], outs: list[Any]) -> None:
        key = f"{eqn.primitive.name}|{[str(v.aval) for v in eqn.invars]}|{eqn.params}"
        if found or key in seen or len(seen) >= DIAGNOSE_OPS or time.monotonic() > deadline:
            return
        seen.add(key)
        finding = _alone(eqn, ins, convert)
        if finding is not None:
            found.append(finding)

    with x64_scope():
        rewrite.evaluate(closed, args, visit)
    return found[0] if found else None


def _alone(eqn: Any, ins: list[Any], convert: Convert) -> Finding | None:
    """Whether `eqn`, converted alone with its non-literal inputs as graph inputs, computes
    what binding it computes on `ins`."""
    fed = [i for i, v in enumerate(eqn.invars) if not isinstance(v, Literal)]
    concrete = [np.asarray(ins[i]) for i in fed]

    def one(*xs: Any) -> list[Any]:
        full = list(ins)
        for i, x in zip(fed, xs):
            full[i] = x
        outs = rewrite.apply(eqn, full)
        return list(outs) if eqn.primitive.multiple_results else [outs]

    with x64_scope():
        want = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(eqn.params))
    want = list(want) if eqn.primitive.multiple_results else [want]
    try:
        proto = convert(one, [jax.ShapeDtypeStruct(c.shape, c.dtype) for c in concrete])
    except OnnxConversionError as e:
        return Finding(eqn, f"does not convert ({e})", [])
    ops = sorted({n.op_type for n in proto.graph.node})
    try:
        got = run(proto, concrete)
    except Exception as e:  # onnxruntime's own errors (Fail, InvalidGraph, NotImplemented...)
        return Finding(eqn, f"onnxruntime refuses it ({_first_line(e)})", ops)
    for g, w in zip(got, want):
        problem = difference(g, w)
        if problem is not None:
            return Finding(eqn, problem, ops)
    return None


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


__all__ = ["Finding", "diagnose", "difference", "example_arguments", "run", "session"]
