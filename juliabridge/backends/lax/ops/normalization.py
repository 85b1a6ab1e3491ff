"""Batch normalization (spec.md#batch_norm_training, #batch_norm_inference, #batch_norm_grad).

JAX has no batch-norm primitive, so each op is its defining formula from the spec, built from
lax reductions and elementwise ops. JAX then differentiates the formula itself, in every mode
and order, including the paths through the returned batch mean and variance (which Enzyme's
rule ignores).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..registry import Impl, OpView, lifts
from ..valtypes import TensorType


class _Norm:
    """Shape facts shared by the three ops, decoded once: the reduced axes, the per-feature
    element count and epsilon in the operand's element type."""

    def __init__(self, view: OpView) -> None:
        t = view.operand
        # bf16 and the ml_dtypes floats have numpy kind "V"; the spec allows every float type.
        if not jnp.issubdtype(t.dtype, jnp.floating):
            raise view.error(f"the operand has element type {t}; batch norm is defined on floats")
        self.fi = view.get_int("feature_index")
        if not 0 <= self.fi < t.rank:
            raise view.error(f"feature_index {self.fi} is outside rank {t.rank}")
        features = t.shape[self.fi]
        for k, ot in enumerate(view.operand_types[1:], start=1):
            if not isinstance(ot, TensorType) or ot.shape not in ((features,), t.shape):
                raise view.error(f"operand {k} has type {ot}, which does not fit {t}")
        self.shape = t.shape
        self.dtype = t.dtype
        # XLA on the CPU has no bf16 arithmetic: it runs a bf16 batch norm in f32, constants
        # included, and rounds only the results (its excess precision). The formulas'
        # cancelling terms make that visible (batch_norm_grad with a small variance: whole
        # results apart), and so do the constants: XLA's count 257 and epsilon are the f32
        # values, not bf16's 256 and rounded epsilon.
        self.compute = np.dtype(np.float32) if t.dtype == jnp.bfloat16 else t.dtype
        self.axes = tuple(i for i in range(t.rank) if i != self.fi)
        size = int(np.prod(t.shape, dtype=np.int64))
        # spec: constant(size(operand) / dim(operand, feature_index), element_type(operand)),
        # made in the compute type (bf16: f32, as above).
        self.count = np.array(size / features if features else 0.0, self.compute)
        # epsilon is an f32 attribute; the spec converts it to the operand's element type
        # (bf16: kept in f32, as above).
        self.eps = np.array(np.float32(view.get_float("epsilon")), self.compute)

    def run(self, formula: Any) -> Impl:
        """`formula` on the operands converted to the compute type, its results converted
        back to the operand's element type."""

        def impl(*operands: Any) -> list[Any]:
            up = [lax.convert_element_type(v, self.compute) for v in operands]
            return [lax.convert_element_type(r, self.dtype) for r in formula(*up)]

        return impl

    def bcast(self, v: Any) -> Any:
        """A per-feature vector broadcast along `feature_index`."""
        return lax.broadcast_in_dim(v, self.shape, (self.fi,))

    def sum(self, x: Any) -> Any:
        """compute_sum: add-reduction over every dim but `feature_index` (lax.reduce with add
        and 0 is JAX's reduce_sum, which every transformation handles)."""
        return lax.reduce(x, np.array(0, self.compute), lax.add, self.axes)

    def mean(self, x: Any) -> Any:
        """compute_mean."""
        return lax.div(self.sum(x), self.count)

    def normalize(self, x: Any, mean: Any, var: Any) -> tuple[Any, Any, Any]:
        """(centered, stddev, normalized) with the given per-feature statistics."""
        centered = lax.sub(x, self.bcast(mean))
        stddev = lax.sqrt(lax.add(self.bcast(var), self.eps))
        return centered, stddev, lax.div(centered, stddev)

    def inference(self, x: Any, scale: Any, offset: Any, mean: Any, var: Any) -> Any:
        """batch_norm_inference's formula."""
        _, _, normalized = self.normalize(x, mean, var)
        return lax.add(lax.mul(self.bcast(scale), normalized), self.bcast(offset))


@lifts("stablehlo.batch_norm_inference")
def batch_norm_inference(view: OpView) -> Impl:
    """spec.md#batch_norm_inference: scale * (x - mean) / sqrt(var + eps) + offset."""
    n = _Norm(view)
    return n.run(lambda x, scale, offset, mean, var: [n.inference(x, scale, offset, mean, var)])


@lifts("stablehlo.batch_norm_training")
def batch_norm_training(view: OpView) -> Impl:
    """spec.md#batch_norm_training: batch mean and biased variance over every dim but
    `feature_index`, then the inference formula; results (output, batch_mean, batch_var)."""
    n = _Norm(view)

    def impl(x: Any, scale: Any, offset: Any) -> list[Any]:
        mean = n.mean(x)
        centered = lax.sub(x, n.bcast(mean))
        var = n.mean(lax.mul(centered, centered))
        return [n.inference(x, scale, offset, mean, var), mean, var]

    return n.run(impl)


@lifts("stablehlo.batch_norm_grad")
def batch_norm_grad(view: OpView) -> Impl:
    """spec.md#batch_norm_grad: the spec's closed form (XLA's batchnorm expander) for
    (grad_operand, grad_scale, grad_offset)."""
    n = _Norm(view)

    def impl(x: Any, scale: Any, mean: Any, var: Any, grad_out: Any) -> list[Any]:
        centered, stddev, normalized = n.normalize(x, mean, var)
        var_eps = lax.add(n.bcast(var), n.eps)
        i1 = lax.mul(grad_out, n.count)
        i2 = n.bcast(n.sum(grad_out))
        i3 = n.bcast(n.sum(lax.mul(grad_out, centered)))
        i5 = lax.div(lax.mul(i3, centered), var_eps)
        i6 = lax.sub(lax.sub(i1, i2), i5)
        grad_operand = lax.mul(lax.div(lax.div(n.bcast(scale), stddev), n.count), i6)
        grad_scale = n.sum(lax.mul(grad_out, normalized))
        return [grad_operand, grad_scale, n.sum(grad_out)]

    return n.run(impl)
