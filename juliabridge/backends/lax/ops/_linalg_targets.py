"""Linear-algebra custom-call targets (LAPACK, cuSOLVER, hipSOLVER, TPU) as jax.lax.linalg.

The contracts are the ones jaxlib's own lowerings use (jax/_src/lax/linalg.py): JAX lowers its
linalg primitives to these very targets, so a module JAX or Reactant traced on one platform is
re-expressed as the primitive, which JAX lowers for whichever platform runs it — and
differentiates, where JAX has a rule (lu, cholesky, eigh, svd, triangular_solve; not geqrf,
householder_product, ormqr).

Raw kernel outputs are reproduced: 1-based LAPACK pivots, `info` codes, the untouched other
triangle of potrf. Where LAPACK leaves an output undefined (workspace, a matrix not computed)
the lift refuses a module that reads it. The `info` of an eigen/singular-value solver that did
not converge is 1 here (LAPACK's nonzero value locates the failing block, which the JAX
primitive does not report); the factors are then NaN, as JAX's own lowering makes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.lax import linalg

from ....support.jaxinternals import geqrf
from ..registry import Impl
from ..valtypes import TensorType
from ._custom_call_util import Call, forward_only
from .linalg import hermitian_from

Handler = Callable[[Call], Impl]

#: target name -> handler; custom_call.py dispatches on it.
TARGETS: dict[str, Handler] = {}

_BY_PREFIX: dict[str, np.dtype] = {
    "s": np.dtype(np.float32),
    "d": np.dtype(np.float64),
    "c": np.dtype(np.complex64),
    "z": np.dtype(np.complex128),
}
_SOLVER: tuple[np.dtype, ...] = tuple(_BY_PREFIX.values())
_REAL: dict[np.dtype, np.dtype] = {
    np.dtype(np.complex64): np.dtype(np.float32),
    np.dtype(np.complex128): np.dtype(np.float64),
}
I32 = np.dtype(np.int32)

# LAPACK character options as the FFI kernels take them (ASCII codes in a ui8).
_UPLO = {ord("L"): True, ord("U"): False}  # -> lower
_SIDE = {ord("L"): True, ord("R"): False}  # -> left side
_TRANS = {ord("N"): (False, False), ord("T"): (True, False), ord("C"): (True, True)}
_DIAG = {ord("N"): False, ord("U"): True}  # -> unit diagonal
_EIG_MODE = {ord("V"): True, ord("N"): False}  # -> compute vectors
_SVD_MODE = {ord("A"): "A", ord("S"): "S", ord("N"): "N"}


def real_of(dtype: np.dtype) -> np.dtype:
    return _REAL.get(dtype, dtype)


def register(names: list[str]) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for n in names:
            TARGETS[n] = fn
        return fn

    return deco


def lapack(base: str, prefixes: str = "sdcz") -> list[str]:
    return [f"lapack_{p}{base}_ffi" for p in prefixes]


def gpu(base: str) -> list[str]:
    return [f"cusolver_{base}_ffi", f"hipsolver_{base}_ffi"]


def element_types(call: Call) -> tuple[np.dtype, ...]:
    """The element types a target name computes on (lapack_s... is f32 only, etc.)."""
    name = call.target
    if name.startswith("lapack_"):
        return (_BY_PREFIX[name[len("lapack_")]],)
    return _SOLVER


def _info_ok(values: Any, batch: tuple[int, ...]) -> Any:
    """0 where every entry of a batch member is finite, else 1 (non-convergence, see top)."""
    axes = tuple(range(len(batch), values.ndim))
    finite = jnp.all(jnp.isfinite(values), axis=axes)
    return lax.select(finite, jnp.zeros(batch, I32), jnp.ones(batch, I32))


# --- LU -----------------------------------------------------------------------------------


@register([*lapack("getrf"), *gpu("getrf")])
def getrf(call: Call) -> Impl:
    """getrf: (lu, 1-based pivots, info); info = first i with U[i, i] == 0 (1-based), else 0."""
    call.expect_operands(1)
    batch, m, n = call.matrix(0)
    dt = call.expect_dtype(0, element_types(call))
    k = min(m, n)
    call.expect_results([((*batch, m, n), dt), ((*batch, k), I32), (batch, I32)])
    call.expect_layouts()

    def impl(a: Any) -> list[Any]:
        lu, pivots, _ = linalg.lu(a)
        diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
        zero = diag == 0
        info = jnp.where(jnp.any(zero, axis=-1), jnp.argmax(zero, axis=-1) + 1, 0)
        return [lu, lax.add(pivots, np.int32(1)), info.astype(I32)]

    return impl


@register(["LuDecomposition"])
def lu_tpu(call: Call) -> Impl:
    """TPU LuDecomposition: (lu, 0-based pivots, 0-based permutation) = lax.linalg.lu."""
    call.expect_operands(1)
    batch, m, n = call.matrix(0)
    dt = call.expect_dtype(0, _SOLVER)
    call.expect_results([((*batch, m, n), dt), ((*batch, min(m, n)), I32), ((*batch, m), I32)])
    return lambda a: list(linalg.lu(a))


@register(["cu_lu_pivots_to_permutation", "hip_lu_pivots_to_permutation"])
def pivots_to_permutation(call: Call) -> Impl:
    """0-based pivots [..., k] -> the permutation [..., m] they apply to 0..m-1."""
    call.expect_operands(1)
    t = call.operands[0]
    call.expect_dtype(0, (I32,))
    if t.rank < 1 or len(call.results) != 1 or call.results[0].rank != t.rank:
        raise call.error(f"takes pivots {t} and returns one permutation of the same rank")
    m = call.results[0].shape[-1]
    if m < t.shape[-1]:
        raise call.error(f"a permutation of {m} entries cannot apply {t.shape[-1]} pivots")
    call.expect_results([((*t.shape[:-1], m), I32)])
    call.expect_layouts(fortran=False)
    return lambda p: [linalg.lu_pivots_to_permutation(p, m)]


# --- Cholesky -----------------------------------------------------------------------------


def _potrf_info(h: Any) -> Any:
    """LAPACK potrf's info for Hermitian `h`: the order of the first leading minor that is not
    positive definite (1-based), by the unblocked column Cholesky; 0 if there is none."""
    n = h.shape[-1]
    batch = h.shape[:-2]
    rows = lax.broadcasted_iota(np.int32, (n,), 0)

    def column(j: Any, carry: tuple[Any, Any]) -> tuple[Any, Any]:
        chol, info = carry
        h_col = lax.dynamic_index_in_dim(h, j, axis=h.ndim - 1, keepdims=False)
        l_row = lax.dynamic_index_in_dim(chol, j, axis=h.ndim - 2, keepdims=False)
        h_jj = jnp.real(lax.dynamic_index_in_dim(h_col, j, axis=h_col.ndim - 1, keepdims=False))
        pivot = h_jj - jnp.sum(jnp.abs(l_row) ** 2, axis=-1)
        ok = pivot > 0
        info = jnp.where((info == 0) & ~ok, j + 1, info)
        root = jnp.sqrt(jnp.where(ok, pivot, 1))
        col = (h_col - jnp.einsum("...ik,...k->...i", chol, jnp.conj(l_row))) / root[..., None]
        col = jnp.where(rows > j, col, jnp.where(rows == j, root[..., None], 0)).astype(h.dtype)
        chol = lax.dynamic_update_index_in_dim(chol, col[..., None], j, axis=h.ndim - 1)
        return chol, info

    init = (jnp.zeros_like(h), jnp.zeros(batch, I32))
    return lax.fori_loop(0, n, column, init)[1]


@register([*lapack("potrf"), *gpu("potrf")])
def potrf(call: Call) -> Impl:
    """potrf: (factor in the `uplo` triangle with the operand's other triangle untouched,
    info = order of the first leading minor that is not positive definite)."""
    call.expect_operands(1)
    batch, n, _ = call.matrix(0, square=True)
    dt = call.expect_dtype(0, element_types(call))
    call.expect_results([((*batch, n, n), dt), (batch, I32)])
    call.expect_layouts()
    lapack_form = call.target.startswith("lapack_")
    lower = call.option("uplo", _UPLO) if lapack_form else call.flag("lower")
    rank = len(batch) + 2
    perm = (*range(rank - 2), rank - 1, rank - 2)

    def impl(a: Any) -> list[Any]:
        h = hermitian_from(a, lower)
        chol = linalg.cholesky(h, symmetrize_input=False)
        if not lower:
            chol = jnp.conj(lax.transpose(chol, perm))
        rows = lax.broadcasted_iota(np.int32, a.shape, rank - 2)
        cols = lax.broadcasted_iota(np.int32, a.shape, rank - 1)
        mine = lax.ge(rows, cols) if lower else lax.le(rows, cols)
        out = lax.select(mine, chol, a)
        failed = ~jnp.all(jnp.isfinite(chol), axis=(-2, -1))
        info = lax.cond(
            jnp.any(failed),
            lambda: jnp.where(failed, _potrf_info(h), 0).astype(I32),
            lambda: jnp.zeros(batch, I32),
        )
        return [out, info]

    return impl


# --- QR -----------------------------------------------------------------------------------


@register([*lapack("geqrf"), *gpu("geqrf"), "Qr"])
def geqrf_(call: Call) -> Impl:
    """geqrf (TPU: Qr): R above the diagonal and the Householder vectors below it, and taus."""
    call.expect_operands(1)
    batch, m, n = call.matrix(0)
    dt = call.expect_dtype(0, element_types(call))
    call.expect_results([((*batch, m, n), dt), ((*batch, min(m, n)), dt)])
    if call.target != "Qr":
        call.expect_layouts()
    return forward_only(lambda a: list(geqrf(a)), call, "geqrf")


@register(
    [
        *lapack("orgqr", "sd"),
        *lapack("ungqr", "cz"),
        *gpu("orgqr"),
        "ProductOfElementaryHouseholderReflectors",
    ]
)
def orgqr(call: Call) -> Impl:
    """orgqr/ungqr: the m x n matrix with orthonormal columns the reflectors define."""
    call.expect_operands(2)
    batch, m, n = call.matrix(0)
    dt = call.expect_dtype(0, element_types(call))
    tau = call.operands[1]
    if tau.dtype != dt or tau.shape[:-1] != batch or tau.rank != len(batch) + 1:
        raise call.error(f"operand 1 is {tau}; taus of {call.operands[0]} are expected")
    if not tau.shape[-1] <= n <= m:
        raise call.error(f"{tau.shape[-1]} reflectors cannot form {m} x {n} columns")
    call.expect_results([((*batch, m, n), dt)])
    if not call.target.startswith("Product"):
        call.expect_layouts()
    return forward_only(lambda a, t: [linalg.householder_product(a, t)], call, "orgqr")


@register([*lapack("ormqr", "sd"), *lapack("unmqr", "cz"), *gpu("ormqr")])
def ormqr(call: Call) -> Impl:
    """ormqr/unmqr: Q or Q^H (from reflectors) applied to c from the left or the right."""
    call.expect_operands(3)
    batch, _, k = call.matrix(0)
    dt = call.expect_dtype(0, element_types(call))
    c = call.operands[2]
    if c.dtype != dt or c.shape[:-2] != batch or call.operands[1].shape != (*batch, k):
        raise call.error("the reflectors, taus and c do not fit together")
    left, transpose = call.flag("left"), call.flag("transpose")
    call.expect_results([(c.shape, dt)])
    call.expect_layouts()
    return forward_only(
        lambda a, t, c: [linalg.ormqr(a, t, c, left=left, transpose=transpose)], call, "ormqr"
    )


# --- Hermitian eigendecomposition ---------------------------------------------------------


@register([*lapack("syevd", "sd"), *lapack("heevd", "cz"), *gpu("syevd")])
def syevd(call: Call) -> Impl:
    """syevd/heevd: (eigenvectors as columns, ascending eigenvalues, info)."""
    call.expect_operands(1)
    batch, n, _ = call.matrix(0, square=True)
    dt = call.expect_dtype(0, element_types(call))
    call.expect_results([((*batch, n, n), dt), ((*batch, n), real_of(dt)), (batch, I32)])
    call.expect_layouts()
    if call.target.startswith("lapack_"):
        lower = call.option("uplo", _UPLO)
        vectors = call.option("mode", _EIG_MODE)
    else:
        lower, vectors = call.flag("lower"), True
    if not vectors:
        call.unused(0, why="mode N leaves the operand's storage as workspace")

    def impl(a: Any) -> list[Any]:
        v, w = linalg.eigh(hermitian_from(a, lower), lower=lower, symmetrize_input=False)
        return [v, w, _info_ok(w, batch)]

    return impl


@register(["Eigh"])
def eigh_tpu(call: Call) -> Impl:
    """TPU Eigh (backend_config "lower,sort,max_iter,epsilon"): (eigenvectors, eigenvalues)."""
    call.expect_operands(1)
    batch, n, _ = call.matrix(0, square=True)
    dt = call.expect_dtype(0, _SOLVER)
    parts = call.string_config.split(",")
    if len(parts) != 4 or parts[0] not in ("0", "1") or parts[1] != "1":
        raise call.error(
            f"backend_config {call.string_config!r}: only sorted eigenvalues "
            "('lower,1,max_iter,eps') have a defined order"
        )
    lower = parts[0] == "1"
    call.expect_results([((*batch, n, n), dt), ((*batch, n), real_of(dt))])
    return lambda a: list(
        linalg.eigh(hermitian_from(a, lower), lower=lower, symmetrize_input=False)
    )


# --- SVD ----------------------------------------------------------------------------------


def _svd_impl(mode: str, algorithm: Any, batch: tuple[int, ...], results: list[Any]) -> Impl:
    """(workspace, s, u, vt, info); for mode N, u and vt are zeros of their declared types."""

    def impl(a: Any) -> list[Any]:
        if mode == "N":
            s = linalg.svd(a, compute_uv=False, algorithm=algorithm)
            u = jnp.zeros(results[2].shape, results[2].dtype)
            vt = jnp.zeros(results[3].shape, results[3].dtype)
        else:
            u, s, vt = linalg.svd(a, full_matrices=mode == "A", algorithm=algorithm)
        return [a, s, u, vt, _info_ok(s, batch)]

    return impl


@register([*lapack("gesdd"), *lapack("gesvd")])
def gesdd(call: Call) -> Impl:
    """gesdd/gesvd (mode A, S or N): (workspace, s, u, vt, info)."""
    call.expect_operands(1)
    batch, m, n = call.matrix(0)
    dt = call.expect_dtype(0, element_types(call))
    mode = call.option("mode", _SVD_MODE)
    k = min(m, n)
    ucols, vrows = (m, n) if mode in ("A", "N") else (k, k)
    call.expect_results(
        [
            ((*batch, m, n), dt),
            ((*batch, k), real_of(dt)),
            ((*batch, m, ucols), dt),
            ((*batch, vrows, n), dt),
            (batch, I32),
        ]
    )
    call.expect_layouts()
    call.unused(0, why="the kernel destroys the operand's storage")
    if mode == "N":
        call.unused(2, 3, why="mode N computes no singular vectors")
    algorithm = linalg.SvdAlgorithm.QR if "gesvd" in call.target else None
    return _svd_impl(mode, algorithm, batch, call.results)


@register(gpu("gesvd"))
def gesvd_gpu(call: Call) -> Impl:
    """cuSOLVER/hipSOLVER gesvd: (workspace, s, u, vt, info); `transposed` (m < n) takes the
    matrix row-major, i.e. factors its transpose, so u and vt trade places."""
    call.expect_operands(1)
    batch, m, n = call.matrix(0)
    dt = call.expect_dtype(0, _SOLVER)
    full, compute_uv = call.flag("full_matrices"), call.flag("compute_uv")
    transposed = call.flag("transposed", False)
    k = min(m, n)
    u_shape = (*batch, m, m if full else k)
    vt_shape = (*batch, n if full else k, n)
    first, second = (vt_shape, u_shape) if transposed else (u_shape, vt_shape)
    call.expect_results(
        [
            ((*batch, m, n), dt),
            ((*batch, k), real_of(dt)),
            (first, dt) if compute_uv else None,
            (second, dt) if compute_uv else None,
            (batch, I32),
        ]
    )
    call.expect_layouts(fortran=not transposed)
    call.unused(0, why="the kernel destroys the operand's storage")
    if not compute_uv:
        call.unused(2, 3, why="compute_uv = false computes no singular vectors")
    mode = "N" if not compute_uv else ("A" if full else "S")
    inner = _svd_impl(mode, None, batch, call.results)
    if not transposed or not compute_uv:
        return inner
    return lambda a: (lambda r: [r[0], r[1], r[3], r[2], r[4]])(inner(a))


@register(gpu("gesvdj"))
def gesvdj(call: Call) -> Impl:
    """cuSOLVER/hipSOLVER gesvdj: (workspace, s, u, v, info) — V itself, not V^H."""
    call.expect_operands(1)
    batch, m, n = call.matrix(0)
    dt = call.expect_dtype(0, _SOLVER)
    full, compute_uv = call.flag("full_matrices"), call.flag("compute_uv")
    k = min(m, n)
    call.expect_results(
        [
            ((*batch, m, n), dt),
            ((*batch, k), real_of(dt)),
            ((*batch, m, m if full else k), dt),
            ((*batch, n, n if full else k), dt),
            (batch, I32),
        ]
    )
    call.expect_layouts()
    call.unused(0, why="the kernel destroys the operand's storage")
    if not compute_uv:
        call.unused(2, 3, why="compute_uv = false leaves the singular-vector buffers unset")
    if not compute_uv:
        return _svd_impl("N", None, batch, call.results)
    rank = len(batch) + 2
    perm = (*range(rank - 2), rank - 1, rank - 2)
    inner = _svd_impl("A" if full else "S", None, batch, call.results)

    def impl(a: Any) -> list[Any]:
        ws, s, u, vt, info = inner(a)
        return [ws, s, u, jnp.conj(lax.transpose(vt, perm)), info]

    return impl


# --- triangular solve ---------------------------------------------------------------------


@register(lapack("trsm"))
def trsm(call: Call) -> Impl:
    """trsm: x with op(a) x = b (side L) or x op(a) = b (side R); a read in its uplo triangle."""
    call.expect_operands(2)
    batch, k, _ = call.matrix(0, square=True)
    dt = call.expect_dtype(0, element_types(call))
    b = call.operands[1]
    left = call.option("side", _SIDE)
    if b.dtype != dt or b.shape[:-2] != batch or b.rank != len(batch) + 2:
        raise call.error(f"operand 1 is {b}; a matrix batch of {call.operands[0]} is expected")
    if b.shape[-2 if left else -1] != k:
        raise call.error(f"{b} does not fit the {k} x {k} triangular matrix")
    lower = call.option("uplo", _UPLO)
    transpose, conjugate = call.option("trans_x", _TRANS)
    unit = call.option("diag", _DIAG)
    call.expect_results([(b.shape, dt)])
    call.expect_layouts()
    return lambda a, rhs: [
        linalg.triangular_solve(
            a,
            rhs,
            left_side=left,
            lower=lower,
            transpose_a=transpose,
            conjugate_a=conjugate,
            unit_diagonal=unit,
        )
    ]


# --- reductions to condensed form, tridiagonal solve, general eigenproblem -----------------


@register(lapack("gehrd"))
def gehrd(call: Call) -> Impl:
    """gehrd over the whole matrix (low = 1, high = n, as JAX calls it): (Hessenberg form with
    the reflectors below it, taus, info = 0)."""
    call.expect_operands(1)
    batch, n, _ = call.matrix(0, square=True)
    dt = call.expect_dtype(0, element_types(call))
    call.option("low", {1: 1})
    call.option("high", {n: n})
    call.expect_results([((*batch, n, n), dt), ((*batch, max(n - 1, 0)), dt), (batch, I32)])
    call.expect_layouts()
    zeros = np.zeros(batch, I32)
    return forward_only(lambda a: [*linalg.hessenberg(a), zeros], call, "hessenberg")


@register([*lapack("sytrd", "sd"), *lapack("hetrd", "cz"), *gpu("sytrd")])
def sytrd(call: Call) -> Impl:
    """sytrd/hetrd: (reflectors in the uplo triangle, diagonal, off-diagonal, taus, info)."""
    call.expect_operands(1)
    batch, n, _ = call.matrix(0, square=True)
    dt = call.expect_dtype(0, element_types(call))
    lapack_form = call.target.startswith("lapack_")
    lower = call.option("uplo", _UPLO) if lapack_form else call.flag("lower")
    real, m = real_of(dt), max(n - 1, 0)
    call.expect_results(
        [
            ((*batch, n, n), dt),
            ((*batch, n), real),
            ((*batch, m), real),
            ((*batch, m), dt),
            (batch, I32),
        ]
    )
    call.expect_layouts()

    def impl(a: Any) -> list[Any]:
        arr, d, e, taus = linalg.tridiagonal(a, lower=lower)
        return [arr, d, e, taus, _info_ok(d, batch)]

    return forward_only(impl, call, "tridiagonal")


def _tridiagonal_operands(call: Call) -> tuple[tuple[int, ...], np.dtype]:
    """(shape of b, dtype) for operands (dl, d, du, b) of a tridiagonal solve."""
    call.expect_operands(4)
    b = call.operands[3]
    dt = call.expect_dtype(3, element_types(call))
    if b.rank < 2:
        raise call.error(f"operand 3 is {b}; right-hand sides [..., m, n] are expected")
    for i in range(3):
        if call.operands[i] != TensorType(b.shape[:-1], dt, call.operands[i].mlir):
            raise call.error(f"operand {i} is {call.operands[i]}; a diagonal of {b} is expected")
    return b.shape, dt


@register(lapack("gtsv"))
def gtsv(call: Call) -> Impl:
    """gtsv: (workspace dl/d/du, the solution, info) for tridiagonal A x = b (dl[0] and
    du[m-1] are outside the matrix, as in JAX's convention)."""
    shape, dt = _tridiagonal_operands(call)
    diag = (shape[:-1], dt)
    call.expect_results([diag, diag, diag, (shape, dt), (shape[:-2], I32)])
    call.expect_layouts()
    call.unused(0, 1, 2, why="the kernel overwrites the diagonals with its LU factors")

    def impl(dl: Any, d: Any, du: Any, b: Any) -> list[Any]:
        x = linalg.tridiagonal_solve(dl, d, du, b)
        return [dl, d, du, x, _info_ok(x, shape[:-2])]

    return impl


@register(["cusparse_gtsv2_ffi", "hipsparse_gtsv2_ffi"])
def gtsv2(call: Call) -> Impl:
    """cuSPARSE/hipSPARSE gtsv2: the solution of tridiagonal A x = b."""
    shape, dt = _tridiagonal_operands(call)
    call.expect_results([(shape, dt)])
    call.expect_layouts()
    return lambda dl, d, du, b: [linalg.tridiagonal_solve(dl, d, du, b)]


_COMPLEX_OF: dict[np.dtype, np.dtype] = {
    np.dtype(np.float32): np.dtype(np.complex64),
    np.dtype(np.float64): np.dtype(np.complex128),
}


@register(lapack("geev"))
def geev(call: Call) -> Impl:
    """geev: eigenvalues ((wr, wi) for real matrices, w for complex), left and right
    eigenvectors as complex columns (jaxlib's kernel unpacks LAPACK's real pairs), info."""
    call.expect_operands(1)
    batch, n, _ = call.matrix(0, square=True)
    dt = call.expect_dtype(0, element_types(call))
    left = call.option("compute_left", _EIG_MODE)
    right = call.option("compute_right", _EIG_MODE)
    cplx = _COMPLEX_OF.get(dt, dt)
    values = [((*batch, n), dt)] * (2 if dt.kind == "f" else 1)
    vectors = ((*batch, n, n), cplx)
    call.expect_results([*values, vectors, vectors, (batch, I32)])
    call.expect_layouts()
    k = len(values)
    if not left:
        call.unused(k, why="compute_left = N computes no left eigenvectors")
    if not right:
        call.unused(k + 1, why="compute_right = N computes no right eigenvectors")
    zeros = np.zeros((*batch, n, n), cplx)

    def impl(a: Any) -> list[Any]:
        out = linalg.eig(a, compute_left_eigenvectors=left, compute_right_eigenvectors=right)
        w = out[0]
        vl = out[1] if left else zeros
        vr = out[-1] if right else zeros
        ws = [jnp.real(w), jnp.imag(w)] if dt.kind == "f" else [w]
        return [*ws, vl, vr, _info_ok(w, batch)]

    return impl
