"""stablehlo.rng_bit_generator and stablehlo.rng (spec.md#rng_bit_generator, #rng).

Both ops are implementation-defined: the values depend on how XLA expands them. So that the
lifted module produces what XLA produces for the original (bit for bit for rng_bit_generator;
rng draws anew on every run, on XLA too), each lifts to a primitive whose lowering *is* the
original op, with its algorithm or distribution and state shape unchanged; signed and float
bits are drawn as the unsigned type of their width and bitcast, which gives XLA's bits.
`jax.lax.rng_bit_generator` would not do: it accepts only a u64[2] (or u32[4]) state,
generates signed and float outputs as u32 followed by a *value* convert, and its vmap rule
draws every batch element from the first state. `jax.lax.rng_uniform` has no NORMAL form and
no vmap rule.

Transformations: rng_bit_generator's state is an integer, so nothing is differentiated through
it; differentiating rng with respect to its bounds is a TransformError. vmap of rng_bit_generator
runs the batch elements in order (`lax.map`), since each state has its own bit stream and
only one-at-a-time evaluation reproduces them. vmap of rng with batched bounds maps over them;
with unbatched bounds JAX evaluates the op once for the whole batch, so every batch element
sees the same draw (the spec allows rng to be deterministic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero
from jaxlib.mlir.dialects import stablehlo as hlo

from ....errors import TransformError
from ....support.jaxinternals import batching, ir, jax_mlir, make_primitive
from ..registry import Impl, OpView, lifts
from .elementwise import is_float, is_signed, is_unsigned

_ALGORITHMS = ("DEFAULT", "THREE_FRY", "PHILOX")
#: spec.md#rng_bit_generator (C2); DEFAULT's size is implementation-defined (XLA: 2 on CPU and
#: GPU, where DEFAULT is Philox) so it is left to XLA to accept or refuse.
_STATE_SIZES = {"THREE_FRY": (2,), "PHILOX": (2, 3)}


def _primitive(name: str, abstract: Any, lowering: Any, batch: Any) -> Any:
    """A multiple-results primitive with these rules; evaluated eagerly by compiling it."""
    p = make_primitive(name)

    def impl(*args: Any, **params: Any) -> Any:
        return jax.jit(lambda *a: p.bind(*a, **params))(*args)

    p.def_impl(impl)
    p.def_abstract_eval(abstract)
    jax_mlir.register_lowering(p, lowering)
    batching.primitive_batchers[p] = batch
    return p


# --- rng_bit_generator ------------------------------------------------------------------------


def _rbg_abstract(state: Any, *, algorithm: str, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    return [jax.core.ShapedArray(state.shape, state.dtype), jax.core.ShapedArray(shape, dtype)]


def _rbg_lowering(ctx: Any, state: Any, *, algorithm: str, shape: Any, dtype: Any) -> Any:
    bits = ir.RankedTensorType.get(list(shape), jax_mlir.dtype_to_ir_type(np.dtype(dtype)))
    op = hlo.RngBitGeneratorOp(state.type, bits, hlo.RngAlgorithmAttr.get(algorithm), state)
    return list(op.results)


def _rbg_batch(args: Sequence[Any], dims: Sequence[Any], **params: Any) -> Any:
    (states,), (bd,) = args, dims  # the state is the only operand, so it is the batched one
    states = jax.numpy.moveaxis(states, bd, 0)
    new_states, bits = lax.map(lambda s: tuple(_rbg_p.bind(s, **params)), states)
    return (new_states, bits), (0, 0)


_rbg_p = _primitive("juliabridge_rng_bit_generator", _rbg_abstract, _rbg_lowering, _rbg_batch)


@lifts("stablehlo.rng_bit_generator")
def rng_bit_generator(view: OpView) -> Impl:
    """spec.md#rng_bit_generator: (new state, bits) from the state, as XLA expands the op."""
    algorithm = view.get_enum("rng_algorithm")
    if algorithm not in _ALGORITHMS:
        raise view.error(f"unknown rng_algorithm {algorithm}")
    state = view.operand
    if state.dtype != np.uint64 or state.rank != 1:
        raise view.error(f"the state is {state}, expected a 1-d tensor of ui64")
    sizes = _STATE_SIZES.get(algorithm)
    if sizes is not None and state.shape[0] not in sizes:
        raise view.error(f"{algorithm} takes a state of {' or '.join(map(str, sizes))} words")
    if len(view.result_types) != 2 or view.result_types[0] != view.operand_types[0]:
        raise view.error("expected results (new state of the state's type, bits)")
    out = view.tensor(view.result_types[1], "the bits")
    if not (is_float(out.dtype) or is_signed(out.dtype) or is_unsigned(out.dtype)):
        raise view.error(f"bits of type {out.dtype.name}, expected an integer or float type")
    # Bits are drawn as the unsigned type of the output's width and reinterpreted: the same
    # bits XLA returns for a signed or float output (XLA's own translation of those forms
    # yields an unsigned value, which breaks any op consuming it).
    raw = np.dtype(f"u{out.dtype.itemsize}")
    params = {"algorithm": algorithm, "shape": out.shape, "dtype": raw}
    if raw == out.dtype:
        return lambda s: list(_rbg_p.bind(s, **params))

    def reinterpreted(s: Any) -> list[Any]:
        state, bits = _rbg_p.bind(s, **params)
        return [state, lax.bitcast_convert_type(bits, out.dtype)]

    return reinterpreted


# --- rng --------------------------------------------------------------------------------------


def _rng_abstract(a: Any, b: Any, *, distribution: str, shape: tuple[int, ...]) -> Any:
    return [jax.core.ShapedArray(shape, a.dtype)]


def _rng_lowering(ctx: Any, a: Any, b: Any, *, distribution: str, shape: Any) -> Any:
    dims = jax_mlir.ir_constant(np.array(shape, np.int64))
    return [hlo.rng(a, b, dims, hlo.RngDistributionAttr.get(distribution))]


def _rng_batch(args: Sequence[Any], dims: Sequence[Any], *, distribution: str, shape: Any) -> Any:
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    a, b = (
        jax.numpy.moveaxis(x, d, 0) if d is not None else jax.numpy.broadcast_to(x, (size,))
        for x, d in zip(args, dims)
    )
    (out,) = lax.map(
        lambda ab: tuple(_rng_p.bind(*ab, distribution=distribution, shape=shape)), (a, b)
    )
    return [out], (0,)


_rng_p = _primitive("juliabridge_rng", _rng_abstract, _rng_lowering, _rng_batch)


@lifts("stablehlo.rng")
def rng(view: OpView) -> Impl:
    """spec.md#rng: UNIFORM on [a, b) or NORMAL(mean a, std b), drawn as XLA draws them."""
    distribution = view.get_enum("rng_distribution")
    if distribution not in ("UNIFORM", "NORMAL"):
        raise view.error(f"unknown rng_distribution {distribution}")
    t = view.result
    for i in (0, 1):
        bound = view.tensor(view.operand_types[i], f"operand {i}")
        if bound.rank != 0 or bound.dtype != t.dtype:
            raise view.error(f"operand {i} is {bound}, expected a 0-d tensor of {t.dtype.name}")
    if distribution == "NORMAL" and not is_float(t.dtype):
        raise view.error(f"NORMAL draws floats, not {t.dtype.name} (spec.md#rng C2)")
    if not is_float(t.dtype) and t.dtype.itemsize < 4:
        # XLA's RngExpander CHECK-fails (aborting the whole process) on these.
        raise view.error(
            f"UNIFORM over {t.dtype.name}: XLA draws integers of 32 or 64 bits only, and "
            "aborts the process on narrower ones",
            hint="Draw i32 and convert, or use rng_bit_generator",
        )
    params = {"distribution": distribution, "shape": t.shape}

    @jax.custom_jvp
    def draw(a: Any, b: Any) -> Any:
        return _rng_p.bind(a, b, **params)[0]

    def no_tangent(primals: tuple[Any, Any], tangents: tuple[Any, Any]) -> Any:
        if not all(isinstance(t, SymbolicZero) for t in tangents):
            raise TransformError(
                f"{view.name} at {view.where}: the samples of an implementation-defined "
                f"{distribution} draw have no derivative with respect to its bounds; "
                "stop the gradient at a and b (jax.lax.stop_gradient)"
            )
        out = draw(*primals)
        return out, lax.full_like(out, 0)

    draw.defjvp(no_tangent, symbolic_zeros=True)
    # The shape operand is the result type's shape (C3); the type is what counts here.
    return lambda a, b, _shape: [draw(a, b)]
