"""Dot products: dot_general, the deprecated dot, and einsum (spec.md#dot_general).

Each maps to `lax.dot_general`, which lowers to the same op with the module's dimension numbers,
precision_config and result element type (`preferred_element_type`), so XLA computes what it
computes for the original. A `DotAlgorithm` maps to JAX's preset with the same fields.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.mlir.dialects import stablehlo as hlo

from ..registry import Impl, OpView, lifts

_DEFAULT = (lax.Precision.DEFAULT, lax.Precision.DEFAULT)

#: DotAlgorithm fields (lhs, rhs, accumulation type, lhs/rhs component counts, primitive
#: operations, imprecise accumulation) of JAX's presets (DotAlgorithmPreset docs).
_PRESETS: dict[tuple[str, str, str, int, int, int, bool], str] = {
    ("f16", "f16", "f16", 1, 1, 1, False): "F16_F16_F16",
    ("f16", "f16", "f32", 1, 1, 1, False): "F16_F16_F32",
    ("bf16", "bf16", "bf16", 1, 1, 1, False): "BF16_BF16_BF16",
    ("bf16", "bf16", "f32", 1, 1, 1, False): "BF16_BF16_F32",
    ("bf16", "bf16", "f32", 1, 1, 3, False): "BF16_BF16_F32_X3",
    ("bf16", "bf16", "f32", 1, 1, 6, False): "BF16_BF16_F32_X6",
    ("bf16", "bf16", "f32", 1, 1, 9, False): "BF16_BF16_F32_X9",
    ("tf32", "tf32", "f32", 1, 1, 1, False): "TF32_TF32_F32",
    ("tf32", "tf32", "f32", 1, 1, 3, False): "TF32_TF32_F32_X3",
    ("f32", "f32", "f32", 1, 1, 1, False): "F32_F32_F32",
    ("f64", "f64", "f64", 1, 1, 1, False): "F64_F64_F64",
}
#: Presets XLA's CPU backend accepts; it ignores any other algorithm, and JAX refuses to lower
#: those for CPU (jax/_src/lax/lax.py, _handle_dot_precision), so on CPU they run as XLA runs
#: the original module there: as a plain dot.
_ON_CPU = frozenset({"F16_F16_F16", "F32_F32_F32", "F64_F64_F64", "BF16_BF16_F32",
                     "BF16_BF16_F32_X3", "BF16_BF16_F32_X6"})  # fmt: skip


def precision_config(view: OpView) -> tuple[lax.Precision, lax.Precision] | None:
    """The `precision_config` pair as lax.Precision values; None for (DEFAULT, DEFAULT) or absent.

    None hands the choice to `jax.default_matmul_precision`, as a JAX matmul written without a
    precision does: DEFAULT is "the fastest" precision the platform has (spec.md#dot_general), and
    Reactant writes it on every dot, so a model exported from Julia would otherwise be pinned to
    one bf16 pass per f32 product on TPU, with no way for the user to ask for more. With the
    setting unset the lowered op is the same as the module's.
    """
    names = view.get_enums("precision_config", ())
    if not names:
        return None
    if len(names) != 2:
        raise view.error(f"precision_config has {len(names)} entries, expected 2")
    try:
        pair = (lax.Precision[names[0]], lax.Precision[names[1]])
    except KeyError as e:
        raise view.error(f"unknown precision {e.args[0]}") from e
    return None if pair == _DEFAULT else pair


def _algorithm(view: OpView) -> str | None:
    """The JAX preset named by the `algorithm` attribute (None when absent)."""
    if not view.has("algorithm"):
        return None
    algo = view.get_typed("algorithm", hlo.DotAlgorithm)
    key = (
        str(algo.lhs_precision_type),
        str(algo.rhs_precision_type),
        str(algo.accumulation_type),
        int(algo.lhs_component_count),
        int(algo.rhs_component_count),
        int(algo.num_primitive_operations),
        bool(algo.allow_imprecise_accumulation),
    )
    preset = _PRESETS.get(key)
    if key[0].startswith("f8") and key[1].startswith("f8") and key[2:6] == ("f32", 1, 1, 1):
        preset = "ANY_F8_ANY_F8_F32_FAST_ACCUM" if key[6] else "ANY_F8_ANY_F8_F32"
    if preset is None:
        raise view.error(
            f"the dot algorithm {view.raw('algorithm')} is not one JAX can express",
            hint="Load it with backend='xla', which hands the algorithm to XLA as written",
        )
    return preset


def _precision(view: OpView) -> Any:
    """A callable giving the `precision` argument for lax.dot_general at trace time."""
    pair = precision_config(view)
    preset = _algorithm(view)
    if preset is None:
        return lambda: pair
    if pair is not None:
        raise view.error("an algorithm requires precision_config DEFAULT (spec.md C21)")
    chosen = lax.DotAlgorithmPreset[preset]
    return lambda: chosen if preset in _ON_CPU or jax.default_backend() != "cpu" else _DEFAULT


@lifts("stablehlo.dot_general")
def dot_general(view: OpView) -> Impl:
    """spec.md#dot_general: lax.dot_general with batching/contracting dims as given."""
    dn = view.get_typed("dot_dimension_numbers", hlo.DotDimensionNumbers)
    dims = (
        (tuple(dn.lhs_contracting_dimensions), tuple(dn.rhs_contracting_dimensions)),
        (tuple(dn.lhs_batching_dimensions), tuple(dn.rhs_batching_dimensions)),
    )
    return _dot(view, dims)


@lifts("stablehlo.dot")
def dot(view: OpView) -> Impl:
    """The deprecated dot (rank 1 or 2 operands): lhs's last dim contracts rhs's first."""
    lhs, rhs = (view.tensor(t, f"operand {i}") for i, t in enumerate(view.operand_types))
    if lhs.rank not in (1, 2) or rhs.rank not in (1, 2):
        raise view.error(f"dot takes operands of rank 1 or 2, got {lhs} and {rhs}")
    return _dot(view, (((lhs.rank - 1,), (0,)), ((), ())))


def _dot(view: OpView, dims: Any) -> Impl:
    out = view.result.dtype
    precision = _precision(view)

    def impl(a: Any, b: Any) -> list[Any]:
        return [lax.dot_general(a, b, dims, precision=precision(), preferred_element_type=out)]

    return impl


_EINSUM = re.compile(r"\A([A-Za-z]*),([A-Za-z]*)->([A-Za-z]*)\Z")


@lifts("stablehlo.einsum")
def einsum(view: OpView) -> Impl:
    """stablehlo.einsum (removed from the spec, still parsed): the sum of products its config
    names, as jnp.einsum computes it with dot_general."""
    config = view.get_str("einsum_config")
    m = _EINSUM.match(config.replace(" ", ""))
    if m is None:
        raise view.error(f"einsum_config {config!r} is not of the form 'ab,bc->ac'")
    spec = f"{m.group(1)},{m.group(2)}->{m.group(3)}"
    out = view.result.dtype
    # No precision of its own: jax.default_matmul_precision decides, as for dot_general's DEFAULT.
    if out == np.bool_:
        return lambda a, b: [
            jnp.einsum(spec, a, b, precision=None, preferred_element_type=np.int32) != 0
        ]
    return lambda a, b: [jnp.einsum(spec, a, b, precision=None, preferred_element_type=out)]


@lifts("stablehlo.unary_einsum")
def unary_einsum(view: OpView) -> Impl:
    """stablehlo.unary_einsum: XLA cannot translate it either, so no module that runs has it."""
    raise view.error(
        "unary_einsum has no XLA translation (the xla backend refuses it too)",
        hint="Re-export the module; current Reactant emits dot_general or reduce instead",
    )
