"""Derivative functions built with JAX itself from a traceable primal: backend-neutral (the xla
backend lowers the lax route's VJP with them, the enzyme backend Enzyme's JVP and VJP)."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .. import dtypes
from ..stablehlo import TensorSpec
from .call_target import Arrays, Fn, is_differentiable

Specs = Sequence[TensorSpec]


def _tangent_zero(spec: TensorSpec) -> np.ndarray:
    return np.zeros(spec.shape, jax.dtypes.float0)


def jvp_from_primal(primal: Fn, in_specs: Specs, out_specs: Specs) -> Fn:
    """(*primals, *tangents of float args) -> tangents of float results, via jax.jvp(primal)."""
    n = len(in_specs)
    diff_in = [i for i, s in enumerate(in_specs) if is_differentiable(s)]
    diff_out = [k for k, s in enumerate(out_specs) if is_differentiable(s)]

    def jvp(*args: jax.Array) -> Arrays:
        primals = args[:n]
        tangents: list[object] = [_tangent_zero(s) for s in in_specs]
        for i, t in zip(diff_in, args[n:]):
            tangents[i] = t
        _, out_t = jax.jvp(primal, tuple(primals), tuple(tangents))
        return tuple(out_t[k] for k in diff_out)

    return jvp


def vjp_from_primal(primal: Fn, in_specs: Specs, out_specs: Specs) -> Fn:
    """(*primals, *cotangents of every result) -> cotangents of every argument (spec §5).

    Integer and Bool arguments get zeros of their own type, so the function is a plain
    StableHLO-exportable map with no float0 values.
    """
    n = len(in_specs)

    def vjp(*args: jax.Array) -> Arrays:
        primals, cts = args[:n], args[n:]
        _, pull = jax.vjp(primal, *primals)
        cts_in = tuple(
            ct if is_differentiable(s) else _tangent_zero(s) for ct, s in zip(cts, out_specs)
        )
        grads = pull(cts_in)
        return tuple(
            g if is_differentiable(s) else jnp.zeros(s.shape, dtypes.to_numpy(s.dtype))
            for g, s in zip(grads, in_specs)
        )

    return vjp


def _lowered(fn: Fn, specs: Specs) -> str:
    avals = [jax.ShapeDtypeStruct(s.shape, dtypes.to_numpy(s.dtype)) for s in specs]
    with jax.enable_x64(True):
        # keep_unused: the conventions have one input per argument even where it is ignored.
        return str(jax.jit(fn, keep_unused=True).lower(*avals).as_text())


def vjp_signature(in_specs: Specs, out_specs: Specs) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """(arguments, results) of a VJP module: primals and one cotangent per result -> one
    cotangent per argument (spec §5)."""
    return [*in_specs, *out_specs], list(in_specs)


def jvp_signature(in_specs: Specs, out_specs: Specs) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """(arguments, results) of a JVP module: primals and the float arguments' tangents ->
    the float results' tangents."""
    diff_in = [s for s in in_specs if is_differentiable(s)]
    return [*in_specs, *diff_in], [s for s in out_specs if is_differentiable(s)]


def vjp_module_text(primal: Fn, in_specs: Specs, out_specs: Specs) -> str:
    """Lower the VJP of a traceable primal to StableHLO text in the bundle's VJP convention."""
    return _lowered(
        vjp_from_primal(primal, in_specs, out_specs), vjp_signature(in_specs, out_specs)[0]
    )


def jvp_module_text(primal: Fn, in_specs: Specs, out_specs: Specs) -> str:
    """Lower the JVP of a traceable primal to StableHLO text (see jvp_signature)."""
    return _lowered(
        jvp_from_primal(primal, in_specs, out_specs), jvp_signature(in_specs, out_specs)[0]
    )
