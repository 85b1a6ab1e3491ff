"""stablehlo.cholesky and stablehlo.triangular_solve (spec.md#cholesky, #triangular_solve)
as `jax.lax.linalg`, whose derivative rules JAX has.

Both ops read only one triangle of `a`. `lax.linalg.cholesky` differentiates as if `a` were
the symmetric matrix it is given, so the lift builds that matrix from the triangle the op
reads: entries of the other triangle then have no effect, in value or derivative, as the spec
says. Half-precision factorizations are computed in f32 and rounded (LAPACK, which JAX calls,
has no f16/bf16 kernels; the spec leaves the algorithm open).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax import lax
from jax.lax import linalg

from ....support.jaxinternals import ir
from ..registry import Impl, OpView, lifts

_LAPACK = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def hermitian_from(a: Any, lower: bool) -> Any:
    """The Hermitian matrix whose `lower` (else upper) triangle is `a`'s. A Hermitian
    matrix has a real diagonal: like LAPACK, the imaginary part of `a`'s diagonal is ignored."""
    rows = lax.broadcasted_iota(np.int32, a.shape, a.ndim - 2)
    cols = lax.broadcasted_iota(np.int32, a.shape, a.ndim - 1)
    keep = lax.lt(cols, rows) if lower else lax.gt(cols, rows)
    strict = lax.select(keep, a, lax.full_like(a, 0))
    perm = (*range(a.ndim - 2), a.ndim - 1, a.ndim - 2)
    mirror = lax.transpose(strict, perm)
    diag = lax.select(lax.eq(rows, cols), a, lax.full_like(a, 0))
    if np.issubdtype(a.dtype, np.complexfloating):
        mirror = lax.conj(mirror)
        diag = lax.convert_element_type(lax.real(diag), a.dtype)
    return lax.add(lax.add(strict, mirror), diag)


def _in_lapack_type(dtype: np.dtype) -> np.dtype:
    """The type the factorization is computed in (f16/bf16 go through f32)."""
    return dtype if dtype in _LAPACK else np.dtype(np.float32)


@lifts("stablehlo.cholesky")
def cholesky(view: OpView) -> Impl:
    """spec.md#cholesky: L with A = L L^H (lower) or U with A = U^H U (upper) per matrix of the
    batch; the other triangle is zero (the spec leaves it implementation-defined). A matrix
    LAPACK cannot factor (not positive definite, or NaN) comes back all NaN, as from XLA."""
    t = view.operand
    if t.rank < 2 or t.shape[-1] != t.shape[-2] or t.dtype.kind not in "fc":
        raise view.error(f"the operand {t} is not a batch of square float or complex matrices")
    lower = _flag(view, "lower", default=False)
    work = _in_lapack_type(t.dtype)
    perm = (*range(t.rank - 2), t.rank - 1, t.rank - 2)

    def impl(a: Any) -> list[Any]:
        full = hermitian_from(lax.convert_element_type(a, work), lower)
        chol = linalg.cholesky(full, symmetrize_input=False)
        # XLA on the CPU returns a matrix that is not positive definite as all NaN; JAX's
        # factor has NaN in its triangle only (the other triangle zeroed).
        failed = lax.reduce_or(lax.ne(chol, chol), (t.rank - 2, t.rank - 1))
        failed = lax.broadcast_in_dim(failed, chol.shape, tuple(range(t.rank - 2)))
        chol = lax.select(failed, lax.full_like(chol, np.nan), chol)
        if not lower:
            chol = lax.transpose(chol, perm)
            if work.kind == "c":
                chol = lax.conj(chol)
        return [lax.convert_element_type(chol, t.dtype)]

    return impl


_TRANSPOSE = {"NO_TRANSPOSE": (False, False), "TRANSPOSE": (True, False), "ADJOINT": (True, True)}


@lifts("stablehlo.triangular_solve")
def triangular_solve(view: OpView) -> Impl:
    """spec.md#triangular_solve: op(a) x = b (left_side) or x op(a) = b, op by transpose_a."""
    if view.result.dtype.kind not in "fc":
        raise view.error(f"the result {view.result} is not a float or complex tensor")
    left = _flag(view, "left_side")
    lower = _flag(view, "lower")
    unit = _flag(view, "unit_diagonal")
    mode = view.get_enum("transpose_a")
    if mode not in _TRANSPOSE:
        raise view.error(f"transpose_a {mode} is not NO_TRANSPOSE, TRANSPOSE or ADJOINT")
    transpose, conjugate = _TRANSPOSE[mode]
    dtype = view.result.dtype
    work = _in_lapack_type(dtype)

    def impl(a: Any, b: Any) -> list[Any]:
        x = linalg.triangular_solve(
            lax.convert_element_type(a, work),
            lax.convert_element_type(b, work),
            left_side=left,
            lower=lower,
            transpose_a=transpose,
            conjugate_a=conjugate,
            unit_diagonal=unit,
        )
        return [lax.convert_element_type(x, dtype)]

    return impl


def _flag(view: OpView, name: str, *, default: bool | None = None) -> bool:
    """An i1 attribute (`default` when absent; required when no default is given)."""
    if not view.has(name):
        if default is None:
            raise view.error(f"attribute {name} is missing")
        return default
    try:
        return bool(ir.BoolAttr(view.raw(name)).value)
    except (ValueError, TypeError) as e:
        raise view.error(f"attribute {name} = {view.raw(name)} is not a boolean") from e
