"""Evaluating a lifted program with JAX values: each step's implementation on its operands.

Evaluation is what JAX traces: under jax.jit, grad, vmap... every step emits JAX primitives,
so JAX's own rules apply to the module. Slots live in a list per function call, so two threads
(or two nested traces) evaluating the same program never share state. Inside `op_scopes()`
each step runs under a `jax.named_scope` naming its op and line, so the primitives it emits
say which op of the module they came from (the ONNX exporter's errors use this).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import jax
import numpy as np

from ...errors import JuliaBridgeError, UnsupportedOpError
from .program import Block, Function, Step
from .valtypes import TensorType

_SCOPED: ContextVar[bool] = ContextVar("juliabridge_lax_op_scopes", default=False)
SCOPE_SEPARATOR = " at "


@contextlib.contextmanager
def op_scopes() -> Iterator[None]:
    """Within: every step traced runs under ``jax.named_scope("OP at WHERE")`` (a ``/`` in
    WHERE written as U+2215, since JAX joins scopes with ``/``)."""
    token = _SCOPED.set(True)
    try:
        yield
    finally:
        _SCOPED.reset(token)


def run_function(fn: Function, args: Sequence[Any]) -> list[Any]:
    """Evaluate `fn` on `args` (values in argument order); returns its results in order."""
    slots: list[Any] = [None] * fn.n_slots
    return run_block(fn.body, slots, args)


def run_block(block: Block, slots: list[Any], args: Sequence[Any]) -> list[Any]:
    """Evaluate one block in the slots of its function; returns its terminator's operands."""
    if len(args) != len(block.args):
        raise UnsupportedOpError(
            f"a region with {len(block.args)} arguments was called with {len(args)}",
            op="region",
            where="",
        )
    for slot, value in zip(block.args, args):
        slots[slot] = value
    scoped = _SCOPED.get()
    for step in block.steps:
        operands = [slots[i] for i in step.operands]
        try:
            if scoped:
                where = step.where.replace("/", "\u2215")
                with jax.named_scope(f"{step.name}{SCOPE_SEPARATOR}{where}"):
                    outs = _run_step(step, slots, operands)
            else:
                outs = _run_step(step, slots, operands)
        except JuliaBridgeError:
            raise
        except Exception as e:
            # JAX refusing an op's operands (a shape rule, an unsupported dtype) is reported at
            # the op that caused it instead of deep inside JAX.
            first = (str(e).strip().splitlines() or [""])[0][:300]
            raise UnsupportedOpError(
                f"{step.name} at {step.where} could not be evaluated with JAX "
                f"({type(e).__name__}: {first})",
                op=step.name,
                where=step.where,
            ) from e
        if len(outs) != len(step.results):
            raise UnsupportedOpError(
                f"{step.name} at {step.where}: the lift produced {len(outs)} values for "
                f"{len(step.results)} results",
                op=step.name,
                where=step.where,
            )
        for slot, value, t in zip(step.results, outs, step.result_types):
            if isinstance(t, TensorType):
                _check(step, value, t)
            slots[slot] = value
    return [slots[i] for i in block.returns]


def _run_step(step: Step, slots: list[Any], operands: list[Any]) -> Any:
    if step.with_regions:
        return step.impl(tuple(_region(r, slots) for r in step.regions), *operands)
    return step.impl(*operands)


def _region(block: Block, slots: list[Any]) -> Callable[..., list[Any]]:
    """Region `block` as the callable lift functions get: ``region(*block_args)``."""
    return lambda *args: run_block(block, slots, args)


def _check(step: Step, value: Any, t: TensorType) -> None:
    """A lifted op must produce exactly the MLIR result type (catches lift bugs at the op)."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or tuple(shape) != t.shape or np.dtype(dtype) != t.dtype:
        got = f"{getattr(value, 'dtype', type(value).__name__)}{list(shape or ())}"
        raise UnsupportedOpError(
            f"{step.name} at {step.where}: the lifted op produced {got}, not the declared {t}",
            op=step.name,
            where=step.where,
        )
