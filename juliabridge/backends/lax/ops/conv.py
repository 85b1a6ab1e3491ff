"""stablehlo.convolution (spec.md#convolution) as lax.conv_general_dilated.

The module's dimension numbers are handed to JAX as they are (any layout: NCHW, NHWC, Lux's
reversed spatial dims, 1-D to N-D), with strides, padding (negative crops), lhs/rhs dilation,
feature and batch group counts, precision_config and the result element type, so JAX lowers
the very same op and differentiates it with its own rules. `window_reversal`, which JAX does
not take, reverses the window of lhs, which is the same as reversing the kernel's spatial dims.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from jax import lax
from jax.extend.mlir.dialects import stablehlo as hlo

from ..registry import Impl, OpView, lifts
from ..valtypes import TensorType
from ._reduction_util import ints_of_rank, padding_pairs
from .dot import precision_config


@lifts("stablehlo.convolution")
def convolution(view: OpView) -> Impl:
    """spec.md#convolution: lax.conv_general_dilated with the module's dimension numbers."""
    lhs, rhs = (view.tensor(t, f"operand {i}") for i, t in enumerate(view.operand_types))
    out = view.result
    rank = lhs.rank
    if rank < 2 or rhs.rank != rank or out.rank != rank:
        raise view.error(f"operands and result must have one rank >= 2, got {lhs}, {rhs}, {out}")
    dn = view.get_typed("dimension_numbers", hlo.ConvDimensionNumbers)
    specs = lax.ConvDimensionNumbers(
        lhs_spec=(dn.input_batch_dimension, dn.input_feature_dimension,
                  *dn.input_spatial_dimensions),
        rhs_spec=(dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
                  *dn.kernel_spatial_dimensions),
        out_spec=(dn.output_batch_dimension, dn.output_feature_dimension,
                  *dn.output_spatial_dimensions),
    )  # fmt: skip
    for spec in specs:
        if sorted(spec) != list(range(rank)):
            raise view.error(f"dimension_numbers {list(spec)} are not a permutation of the axes")
    n = rank - 2
    strides = ints_of_rank(view, "window_strides", n, 1)
    padding = padding_pairs(view, n)
    lhs_dilation = ints_of_rank(view, "lhs_dilation", n, 1)
    rhs_dilation = ints_of_rank(view, "rhs_dilation", n, 1)
    reversal = view.get_bools("window_reversal", (False,) * n)
    if len(reversal) != n:
        raise view.error(f"window_reversal has {len(reversal)} entries, expected {n}")
    groups = view.get_int("feature_group_count", 1), view.get_int("batch_group_count", 1)
    if min(groups) < 1 or min((*strides, *lhs_dilation, *rhs_dilation), default=1) < 1:
        raise view.error("group counts, strides and dilations must be positive")
    flip = tuple(specs.rhs_spec[2 + d] for d in range(n) if reversal[d])
    precision = precision_config(view)
    compute, finish = _element_types(view, lhs, rhs, out)

    def impl(x: Any, w: Any) -> list[Any]:
        if flip:
            w = lax.rev(w, flip)
        y = lax.conv_general_dilated(
            compute(x),
            compute(w),
            strides,
            padding,
            lhs_dilation,
            rhs_dilation,
            specs,
            feature_group_count=groups[0],
            batch_group_count=groups[1],
            precision=precision,
            preferred_element_type=finish[0],
        )
        return [finish[1](y)]

    return impl


def _element_types(
    view: OpView, lhs: TensorType, rhs: TensorType, out: TensorType
) -> tuple[Callable[[Any], Any], tuple[np.dtype, Callable[[Any], Any]]]:
    """(operand conversion, (accumulation type, result conversion)) for the element types.

    i1 is Boolean algebra (products are and, sums or): an integer count of true products,
    compared with zero. A result type unlike the operands' is XLA's preferred element type.
    """
    if lhs.dtype != rhs.dtype:
        raise view.error(f"operands of two element types ({lhs}, {rhs})")
    if out.dtype == np.bool_ or lhs.dtype == np.bool_:
        if out.dtype != lhs.dtype:
            raise view.error("i1 operands need an i1 result")
        return (lambda x: x.astype(np.int32)), (np.dtype(np.int32), lambda y: y != 0)
    return (lambda x: x), (out.dtype, lambda y: y)
