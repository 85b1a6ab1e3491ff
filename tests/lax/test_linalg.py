"""Linear algebra on the lax backend: stablehlo.cholesky / triangular_solve, and the
linear-algebra custom calls (LAPACK, cuSOLVER, hipSOLVER, TPU) in the exact form JAX lowers
them to, against XLA (CPU targets), scipy's raw LAPACK and numpy, with derivatives against
finite differences.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg.lapack as lapack

import juliabridge
from juliabridge import TransformError
from juliabridge.backends.lax import RULES

from .custom_calls import custom_call_modules, lowered
from .oracles import check_module

# f64 arguments and results need x64 outside the module too (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("x64")


RNG = np.random.default_rng(0)
TYPES = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128}
MLIR = {"f32": "f32", "f64": "f64", "c64": "complex<f32>", "c128": "complex<f64>", "f16": "f16"}
TOL = {"f32": 2e-4, "f64": 1e-10, "c64": 2e-4, "c128": 1e-10, "f16": 2e-2}


def rand(shape: tuple[int, ...], ty: str) -> np.ndarray:
    x = RNG.standard_normal(shape)
    if ty.startswith("c"):
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(TYPES.get(ty, np.float16))


def spd(batch: tuple[int, ...], n: int, ty: str) -> np.ndarray:
    """Hermitian positive definite matrices, with junk in the strict upper triangle (which
    a lower factorization must not read)."""
    x = rand((*batch, n, n), ty).astype(np.complex128 if ty.startswith("c") else np.float64)
    a = x @ np.conj(np.swapaxes(x, -1, -2)) + n * np.eye(n)
    return a.astype(TYPES.get(ty, np.float16))


def tensor(shape: tuple[int, ...], ty: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + MLIR[ty] + ">"


def load(text: str, backend: str = "lax") -> Callable[..., Any]:
    # Untrusted on lax: the load policy admits every target lax lifts. trust=True for xla: some
    # targets jaxlib registers (gesvd, ormqr) are not on jax.export's stable list.
    return juliabridge.load_mlir(text, backend=backend, trust=backend != "lax")


def run(text: str, args: list[Any]) -> list[np.ndarray]:
    return [np.asarray(r) for r in jax.jit(load(text))(*args)]


def fd_grad(f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def from_triangle(a: np.ndarray, lower: bool) -> np.ndarray:
    """The Hermitian matrix a triangle of `a` defines (the diagonal's imaginary part is
    ignored, as LAPACK does)."""
    strict = np.tril(a, -1) if lower else np.triu(a, 1)
    diag = np.real(np.diagonal(a, axis1=-2, axis2=-1))
    eye = np.eye(a.shape[-1])
    return strict + np.conj(np.swapaxes(strict, -1, -2)) + diag[..., None, :] * eye


# --- stablehlo.cholesky -------------------------------------------------------------------


def cholesky_module(shape: tuple[int, ...], ty: str, lower: bool) -> str:
    t = tensor(shape, ty)
    return f"""module {{
  func.func @main(%a: {t}) -> {t} {{
    %0 = stablehlo.cholesky %a, lower = {str(lower).lower()} : {t}
    return %0 : {t}
  }}
}}"""


def cholesky_reference(a: np.ndarray, lower: bool) -> np.ndarray:
    wide = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)
    chol = np.linalg.cholesky(from_triangle(wide, lower))
    out = chol if lower else np.conj(np.swapaxes(chol, -1, -2))
    return out.astype(a.dtype)


CHOLESKY_CASES = [
    (shape, ty, lower)
    for ty in ("f32", "f64", "c64", "c128", "f16")
    for lower in (True, False)
    for shape in ([(2, 3, 5, 5), (1, 1)] if ty == "f64" else [(2, 3, 5, 5)])
]


@pytest.mark.parametrize("shape,ty,lower", CHOLESKY_CASES)
def test_cholesky_against_xla_and_numpy(shape: tuple[int, ...], ty: str, lower: bool) -> None:
    a = spd(shape[:-2], shape[-1], ty)
    junk = np.triu(rand(shape, ty), 1) if lower else np.tril(rand(shape, ty), -1)
    a = (a + junk).astype(a.dtype)  # the triangle the op does not read holds junk
    want = cholesky_reference(a, lower)
    # jaxlib's reference interpreter aborts on stablehlo.cholesky: XLA and numpy only.
    check_module(
        cholesky_module(shape, ty, lower),
        [a],
        rtol=TOL[ty],
        atol=TOL[ty],
        interpreter=False,
        expected=[want],
    )


@pytest.mark.parametrize("lower", [True, False])
def test_cholesky_gradient_reads_only_its_triangle(lower: bool) -> None:
    fn = load(cholesky_module((3, 3), "f64", lower))
    a = spd((), 3, "f64")
    w = RNG.standard_normal((3, 3))

    def loss(a: Any) -> Any:
        return jnp.sum(jnp.sin(fn(a)[0]) * w)

    g = jax.grad(loss)(a)
    fd = fd_grad(lambda a: float(np.sum(np.sin(cholesky_reference(a, lower)) * w)), a)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    other = np.triu(g, 1) if lower else np.tril(g, -1)
    assert np.all(other == 0)
    _, t = jax.jvp(lambda a: fn(a)[0], (a,), (w,))
    ref = cholesky_reference(a + 1e-6 * w, lower) - cholesky_reference(a - 1e-6 * w, lower)
    np.testing.assert_allclose(t, ref / 2e-6, rtol=1e-6, atol=1e-8)


def test_cholesky_vmap_is_batched() -> None:
    fn = load(cholesky_module((4, 4), "f64", True))
    a = spd((3,), 4, "f64")
    got = jax.vmap(lambda x: fn(x)[0])(a)
    np.testing.assert_allclose(got, cholesky_reference(a, True), rtol=1e-12)
    jaxpr = str(jax.make_jaxpr(jax.vmap(lambda x: fn(x)[0]))(a))
    assert "while" not in jaxpr and "scan" not in jaxpr


# --- stablehlo.triangular_solve ------------------------------------------------------------


def trsolve_module(
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    ty: str,
    *,
    left: bool,
    lower: bool,
    unit: bool,
    transpose: str,
) -> str:
    ta, tb = tensor(a_shape, ty), tensor(b_shape, ty)
    flags = f"left_side = {str(left).lower()}, lower = {str(lower).lower()}"
    flags += f", unit_diagonal = {str(unit).lower()}"
    return f"""module {{
  func.func @main(%a: {ta}, %b: {tb}) -> {tb} {{
    %0 = "stablehlo.triangular_solve"(%a, %b) {{{flags}, transpose_a = #stablehlo<transpose {transpose}>}} : ({ta}, {tb}) -> {tb}
    return %0 : {tb}
  }}
}}"""


def trsolve_reference(
    a: np.ndarray, b: np.ndarray, *, left: bool, lower: bool, unit: bool, transpose: str
) -> np.ndarray:
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    t = (np.tril(a) if lower else np.triu(a)).astype(wide)
    if unit:
        n = t.shape[-1]
        t = t - t * np.eye(n) + np.eye(n)
    if transpose != "NO_TRANSPOSE":
        t = np.swapaxes(t, -1, -2)
        if transpose == "ADJOINT":
            t = np.conj(t)
    bb = b.astype(wide)
    if left:
        x = np.linalg.solve(t, bb)
    else:  # x t = b  <=>  t^T x^T = b^T
        x = np.swapaxes(np.linalg.solve(np.swapaxes(t, -1, -2), np.swapaxes(bb, -1, -2)), -1, -2)
    return x.astype(a.dtype)


def well_conditioned(shape: tuple[int, ...], ty: str) -> np.ndarray:
    n = shape[-1]
    return (rand(shape, ty) * 0.3 + 2 * np.eye(n)).astype(TYPES[ty])


TRI_CASES = [
    (left, lower, unit, tr)
    for left in (True, False)
    for lower in (True, False)
    for unit in (False, True)
    for tr in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")
]


def interpreter_runs_trsolve(ty: str, batched: bool, unit: bool, transpose: str) -> bool:
    """Where jaxlib's reference interpreter evaluates triangular_solve (it aborts on ADJOINT,
    on batches with a non-unit diagonal, and its binding cannot pass complex tensors)."""
    return not ty.startswith("c") and transpose != "ADJOINT" and (unit or not batched)


# Every flag combination once, alternating real unbatched (the interpreter runs those) and
# complex batched; then each other element type on a few.
TRI_ORACLE_CASES = [
    *[((), "f32", *c) if k % 2 == 0 else ((2,), "c128", *c) for k, c in enumerate(TRI_CASES)],
    *[((), "f32", True, True, False, tr) for tr in ("TRANSPOSE", "NO_TRANSPOSE")],
    *[
        (b, ty, True, False, u, "TRANSPOSE")
        for b in ((), (2,))
        for ty in ("f64", "c64")
        for u in (False, True)
    ],
]


@pytest.mark.parametrize("batch,ty,left,lower,unit,transpose", TRI_ORACLE_CASES)
def test_triangular_solve_against_oracles(
    batch: tuple[int, ...], ty: str, left: bool, lower: bool, unit: bool, transpose: str
) -> None:
    a = well_conditioned((*batch, 4, 4), ty)
    b = rand((*batch, 4, 3) if left else (*batch, 3, 4), ty)
    text = trsolve_module(
        a.shape, b.shape, ty, left=left, lower=lower, unit=unit, transpose=transpose
    )
    want = trsolve_reference(a, b, left=left, lower=lower, unit=unit, transpose=transpose)
    interp = interpreter_runs_trsolve(ty, bool(batch), unit, transpose)
    check_module(text, [a, b], rtol=TOL[ty], atol=TOL[ty], interpreter=interp, expected=[want])


def test_triangular_solve_half_precision() -> None:
    a = well_conditioned((3, 3), "f32").astype(np.float16)
    b = rand((3, 2), "f16")
    text = trsolve_module(
        a.shape, b.shape, "f16", left=True, lower=True, unit=False, transpose="NO_TRANSPOSE"
    )
    want = trsolve_reference(a, b, left=True, lower=True, unit=False, transpose="NO_TRANSPOSE")
    check_module(text, [a, b], rtol=2e-2, atol=2e-2, expected=[want])


@pytest.mark.parametrize(
    "left,lower,unit,transpose", [c for c in TRI_CASES if c[3] != "ADJOINT" and c[0] != c[2]]
)
def test_triangular_solve_derivatives(left: bool, lower: bool, unit: bool, transpose: str) -> None:
    a = well_conditioned((3, 3), "f64")
    b = rand((3, 2) if left else (2, 3), "f64")
    fn = load(
        trsolve_module(
            a.shape, b.shape, "f64", left=left, lower=lower, unit=unit, transpose=transpose
        )
    )
    kw = {"left": left, "lower": lower, "unit": unit, "transpose": transpose}
    w = RNG.standard_normal(b.shape)
    ga, gb = jax.grad(lambda a, b: jnp.sum(fn(a, b)[0] * w), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(
        ga, fd_grad(lambda a: float(np.sum(trsolve_reference(a, b, **kw) * w)), a), atol=1e-7
    )
    np.testing.assert_allclose(
        gb, fd_grad(lambda b: float(np.sum(trsolve_reference(a, b, **kw) * w)), b), atol=1e-7
    )
    # Entries the op does not read have no influence (the other triangle; the unit diagonal).
    assert np.all((np.triu(ga, 1) if lower else np.tril(ga, -1)) == 0)
    if unit:
        assert np.all(np.diag(ga) == 0)
    xs = np.stack([b, 2 * b])
    got = jax.vmap(lambda b: fn(a, b)[0])(xs)
    np.testing.assert_allclose(got, np.stack([trsolve_reference(a, x, **kw) for x in xs]))


# --- LAPACK custom calls (CPU): raw outputs against scipy's LAPACK -------------------------

L = jax.lax.linalg
PREFIX = {"f32": "s", "f64": "d", "c64": "c", "c128": "z"}


def lapack_fn(name: str, ty: str) -> Any:
    return getattr(lapack, PREFIX[ty] + name)


def cpu_module(
    fn: Callable[..., Any], *args: Any, target: str, unread: tuple[int, ...] = ()
) -> str:
    modules = custom_call_modules(fn, *args, unread=unread)
    assert target in modules, sorted(modules)
    return modules[target]


@pytest.mark.parametrize(
    "shape,ty",
    [((2, 4, 4), ty) for ty in ("f32", "f64", "c64", "c128")] + [((5, 3), "f64"), ((3, 5), "c64")],
)
def test_getrf(shape: tuple[int, ...], ty: str) -> None:
    a = rand(shape, ty)
    text = cpu_module(L.lu, a, target=f"lapack_{PREFIX[ty]}getrf_ffi")
    getrf = lapack_fn("getrf", ty)
    want: list[list[np.ndarray]] = [[], [], []]
    for m in a.reshape(-1, *shape[-2:]):
        lu, piv, info = getrf(m)
        for k, v in enumerate((lu, piv.astype(np.int32) + 1, np.int32(info))):
            want[k].append(v)
    batch = shape[:-2]
    shapes = (shape, (*batch, min(shape[-2:])), batch)
    expected = [np.stack(w).reshape(s) for w, s in zip(want, shapes)]
    check_module(text, [a], rtol=TOL[ty], atol=TOL[ty], interpreter=False, expected=expected)


def test_getrf_info_on_a_singular_matrix() -> None:
    a = rand((4, 4), "f64")
    a[:, 2] = 0.0  # U[2, 2] is exactly zero: info = 3
    text = cpu_module(L.lu, a, target="lapack_dgetrf_ffi")
    _, _, info = lapack.dgetrf(a)
    assert info == 3
    got = check_module(text, [a], interpreter=False)
    assert int(got[2]) == 3


def test_getrf_derivatives_and_vmap() -> None:
    a = rand((4, 4), "f64")
    fn = load(cpu_module(L.lu, a, target="lapack_dgetrf_ffi"))
    w = RNG.standard_normal((4, 4))
    g = jax.grad(lambda a: jnp.sum(fn(a)[0] * w))(a)
    np.testing.assert_allclose(
        g, fd_grad(lambda a: float(np.sum(lapack.dgetrf(a)[0] * w)), a), rtol=1e-6, atol=1e-8
    )
    batch = rand((3, 4, 4), "f64")
    got = jax.vmap(lambda a: fn(a)[0])(batch)
    np.testing.assert_allclose(got, np.stack([lapack.dgetrf(m)[0] for m in batch]))
    assert "while" not in str(jax.make_jaxpr(jax.vmap(lambda a: fn(a)[0]))(batch))


def potrf_module(ty: str, lower: bool, shape: tuple[int, ...] = (4, 4)) -> str:
    a = spd(shape[:-2], shape[-1], ty)
    text = cpu_module(
        lambda a: L.cholesky(a, symmetrize_input=False), a, target=f"lapack_{PREFIX[ty]}potrf_ffi"
    )
    assert "uplo = 76 : ui8" in text
    return text if lower else text.replace("uplo = 76 : ui8", "uplo = 85 : ui8")


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("ty", ["f32", "f64", "c64", "c128"])
def test_potrf_keeps_the_other_triangle(ty: str, lower: bool) -> None:
    a = spd((), 4, ty)
    a = (a + (np.triu(rand((4, 4), ty), 1) if lower else np.tril(rand((4, 4), ty), -1))).astype(
        a.dtype
    )
    c, info = lapack_fn("potrf", ty)(a, lower=lower, clean=0)
    check_module(
        potrf_module(ty, lower),
        [a],
        rtol=TOL[ty],
        atol=TOL[ty],
        interpreter=False,
        expected=[c, np.int32(info)],
    )


@pytest.mark.parametrize("lower", [True, False])
def test_potrf_info_locates_the_first_failing_minor(lower: bool) -> None:
    for k in range(1, 5):
        a = spd((), 4, "f64")
        a[k - 1, k - 1] = -50.0  # leading minors 1..k-1 stay positive definite
        _, info = lapack.dpotrf(a, lower=lower, clean=0)
        assert info == k
        got = run(potrf_module("f64", lower), [a])
        assert int(got[1]) == k
        other = np.triu(got[0], 1) if lower else np.tril(got[0], -1)
        np.testing.assert_array_equal(other, np.triu(a, 1) if lower else np.tril(a, -1))


@pytest.mark.parametrize("lower", [True, False])
def test_potrf_info_of_a_semidefinite_matrix_with_an_exactly_zero_pivot(lower: bool) -> None:
    # Leading minor 2 has determinant 4 * 1 - 2 * 2 = 0: positive semidefinite, not definite,
    # so LAPACK stops there (its test is pivot <= 0), though the pivot is not negative.
    a = np.array([[4.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 3.0]])
    _, info = lapack.dpotrf(a, lower=lower, clean=0)
    assert info == 2
    got = run(potrf_module("f64", lower, (3, 3)), [a])
    assert int(got[1]) == 2


def test_potrf_batched_info() -> None:
    a = spd((3,), 4, "f64")
    a[1, 2, 2] = -1.0
    _, info1 = lapack.dpotrf(a[1], lower=True, clean=0)
    got = run(potrf_module("f64", True, (3, 4, 4)), [a])
    np.testing.assert_array_equal(got[1], [0, info1, 0])


def test_potrf_derivative() -> None:
    a = spd((), 4, "f64")
    fn = load(potrf_module("f64", True))
    w = np.tril(RNG.standard_normal((4, 4)))
    g = jax.grad(lambda a: jnp.sum(fn(a)[0] * w))(a)
    fd = fd_grad(lambda a: float(np.sum(lapack.dpotrf(a, lower=True, clean=0)[0] * w)), a)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("ty", ["f32", "f64", "c64", "c128"])
@pytest.mark.parametrize("shape", [(5, 3), (3, 3), (3, 5)])
def test_geqrf_orgqr_ormqr(shape: tuple[int, ...], ty: str) -> None:
    a = rand(shape, ty)
    m, n = shape
    k = min(m, n)
    modules = custom_call_modules(lambda a: L.qr(a, full_matrices=False), a)
    p = PREFIX[ty]
    qr, tau, *_ = lapack_fn("geqrf", ty)(a)
    check_module(
        modules[f"lapack_{p}geqrf_ffi"],
        [a],
        rtol=TOL[ty],
        atol=TOL[ty],
        interpreter=False,
        expected=[qr, tau],
    )
    # orgqr/ungqr forms the first k columns of Q from the reflectors.
    orgqr_name = "ungqr" if ty.startswith("c") else "orgqr"
    q_in = np.asarray(qr[:, :k])
    q = lapack_fn(orgqr_name, ty)(q_in, tau)[0]
    orgqr_mod = custom_call_modules(lambda a, t: L.householder_product(a, t), q_in, tau)[
        f"lapack_{p}{orgqr_name}_ffi"
    ]
    check_module(
        orgqr_mod, [q_in, tau], rtol=TOL[ty], atol=TOL[ty], interpreter=False, expected=[q]
    )
    c = rand((m, 2), ty)
    ormqr_name = "unmqr" if ty.startswith("c") else "ormqr"
    for transpose in (False, True):
        mod = custom_call_modules(
            lambda a, t, c, tr=transpose: L.ormqr(a, t, c, left=True, transpose=tr), q_in, tau, c
        )[f"lapack_{p}{ormqr_name}_ffi"]
        padded = np.concatenate([q_in, np.zeros((m, m - k), q_in.dtype)], axis=1)
        full_q = lapack_fn(orgqr_name, ty)(padded, tau)[0]
        want = (np.conj(full_q.T) if transpose else full_q) @ c
        # ormqr is registered by jaxlib but not on jax.export's stable list: trust=True.
        for backend in ("lax", "xla"):
            got = load(mod, backend)(q_in, tau, c)
            np.testing.assert_allclose(
                np.asarray(got[0]), want.astype(c.dtype), rtol=TOL[ty] * 10, atol=TOL[ty] * 10
            )


def test_geqrf_has_no_derivative_and_says_so() -> None:
    a = rand((4, 3), "f64")
    fn = load(custom_call_modules(lambda a: L.qr(a, full_matrices=False), a)["lapack_dgeqrf_ffi"])
    with pytest.raises(TransformError, match=r"lapack_dgeqrf_ffi at line 3.*geqrf"):
        jax.grad(lambda a: jnp.sum(fn(a)[0]))(a)
    with pytest.raises(TransformError, match="lapack_dgeqrf_ffi"):
        jax.jvp(lambda a: fn(a)[1], (a,), (a,))
    got = jax.vmap(lambda a: fn(a)[0])(np.stack([a, 2 * a]))
    np.testing.assert_allclose(got[1], lapack.dgeqrf(2 * a)[0], rtol=1e-12)


def eig_check(v: np.ndarray, w: np.ndarray, a: np.ndarray, w_ref: np.ndarray, tol: float) -> None:
    """Eigenvectors are defined up to a phase: check A V = V diag(w), V^H V = I, w = w_ref."""
    np.testing.assert_allclose(w, w_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(a @ v, v * w[..., None, :], rtol=tol * 10, atol=tol * 10)
    eye = np.conj(np.swapaxes(v, -1, -2)) @ v
    np.testing.assert_allclose(eye, np.broadcast_to(np.eye(v.shape[-1]), eye.shape), atol=tol * 10)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("ty", ["f32", "f64", "c64", "c128"])
def test_syevd_heevd(ty: str, lower: bool) -> None:
    a = rand((2, 4, 4), ty)
    text = cpu_module(
        lambda a: L.eigh(a, lower=lower, symmetrize_input=False),
        a,
        target=f"lapack_{PREFIX[ty]}{'heevd' if ty.startswith('c') else 'syevd'}_ffi",
    )
    got = check_module(text, [a], rtol=TOL[ty], atol=TOL[ty], interpreter=False)
    herm = from_triangle(a, lower)
    w_ref = np.linalg.eigvalsh(herm)
    eig_check(got[0], got[1], herm, w_ref, TOL[ty])
    np.testing.assert_array_equal(got[2], [0, 0])


def test_syevd_info_is_per_matrix_of_the_batch() -> None:
    # A NaN matrix cannot converge (its info is nonzero, its factors NaN); the finite matrix
    # beside it in the batch converges as LAPACK computes it alone: info 0, its eigenvalues.
    a = rand((2, 4, 4), "f64")
    text = cpu_module(lambda a: L.eigh(a, symmetrize_input=False), a, target="lapack_dsyevd_ffi")
    a[1, 2, 1] = np.nan
    _, _, info0 = lapack.dsyevd(a[0], lower=1)
    got = run(text, [a])
    np.testing.assert_allclose(got[1][0], np.linalg.eigvalsh(from_triangle(a[0], True)))
    assert int(got[2][0]) == info0 == 0
    assert int(got[2][1]) != 0 and np.isnan(got[1][1]).all()


def test_syevd_derivative_of_eigenvalues() -> None:
    a = rand((4, 4), "f64")
    fn = load(
        cpu_module(lambda a: L.eigh(a, symmetrize_input=False), a, target="lapack_dsyevd_ffi")
    )
    w = np.array([1.0, -2.0, 0.5, 3.0])
    g = jax.grad(lambda a: jnp.sum(fn(a)[1] * w))(a)
    fd = fd_grad(lambda a: float(np.sum(np.linalg.eigvalsh(from_triangle(a, True)) * w)), a)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


SVD_FORMS = [
    (lambda a: L.svd(a, full_matrices=False), "S"),
    (lambda a: L.svd(a, full_matrices=True), "A"),
    (lambda a: L.svd(a, compute_uv=False), "N"),
]


def svd_check(got: list[np.ndarray], a: np.ndarray, mode: str, tol: float) -> None:
    s_ref = np.linalg.svd(a, compute_uv=False)
    np.testing.assert_allclose(got[1], s_ref, rtol=tol, atol=tol)
    if mode == "N":
        return
    u, vt = got[2], got[3]
    k = s_ref.shape[-1]
    np.testing.assert_allclose(
        (u[..., :, :k] * got[1][..., None, :]) @ vt[..., :k, :], a, rtol=tol * 10, atol=tol * 10
    )
    np.testing.assert_allclose(
        np.conj(np.swapaxes(u, -1, -2)) @ u,
        np.broadcast_to(np.eye(u.shape[-1]), u.shape[:-2] + (u.shape[-1],) * 2),
        atol=tol * 10,
    )


SVD_CASES = [
    (shape, ty, form, target)
    for target in ("gesdd", "gesvd")
    for form in range(3)
    for ty, shapes in (
        ("f32", [(5, 3), (3, 5)]),
        ("c128", [(2, 4, 4)]),
        ("f64", [(2, 3, 5)]),
        ("c64", [(4, 3)]),
    )
    for shape in shapes
]


@pytest.mark.parametrize("shape,ty,form,target", SVD_CASES)
def test_gesdd_gesvd(shape: tuple[int, ...], ty: str, form: int, target: str) -> None:
    fn, mode = SVD_FORMS[form]
    a = rand(shape, ty)
    algorithm = L.SvdAlgorithm.QR if target == "gesvd" else None
    if target == "gesvd":
        fn = [
            lambda a: L.svd(a, full_matrices=False, algorithm=algorithm),
            lambda a: L.svd(a, full_matrices=True, algorithm=algorithm),
            lambda a: L.svd(a, compute_uv=False, algorithm=algorithm),
        ][form]
    # The workspace (result 0), and u and vt in mode N, are undefined: they stay unread.
    unread = (0, 2, 3) if mode == "N" else (0,)
    text = cpu_module(fn, a, target=f"lapack_{PREFIX[ty]}{target}_ffi", unread=unread)
    got = run(text, [a])
    full = [np.zeros(0), got[0], None, None, got[1]] if mode == "N" else [np.zeros(0), *got]
    svd_check(full, a, mode, TOL[ty])
    xla = load(text, "xla")(a)
    for g, x in zip(got, xla):
        if g.dtype.kind == "f":  # s (u and vt agree only up to signs)
            np.testing.assert_allclose(np.asarray(x), g, rtol=TOL[ty], atol=TOL[ty])
            break
    np.testing.assert_array_equal(got[-1], np.zeros(shape[:-2], np.int32))


def test_svd_derivative_of_singular_values() -> None:
    a = rand((4, 3), "f64")
    text = cpu_module(
        lambda a: L.svd(a, full_matrices=False), a, target="lapack_dgesdd_ffi", unread=(0,)
    )
    fn = load(text)
    w = np.array([1.0, -0.5, 2.0])
    g = jax.grad(lambda a: jnp.sum(fn(a)[0] * w))(a)
    fd = fd_grad(lambda a: float(np.sum(np.linalg.svd(a, compute_uv=False) * w)), a)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(
    "ty,left,lower,unit,transpose",
    [("c64" if c[3] == "ADJOINT" or c[1] else "f64", *c) for c in TRI_CASES],
)
def test_trsm(ty: str, left: bool, lower: bool, unit: bool, transpose: str) -> None:
    a = well_conditioned((2, 4, 4), ty)
    b = rand((2, 4, 3) if left else (2, 3, 4), ty)
    conj = transpose == "ADJOINT"
    text = cpu_module(
        lambda a, b: L.triangular_solve(
            a,
            b,
            left_side=left,
            lower=lower,
            transpose_a=transpose != "NO_TRANSPOSE",
            conjugate_a=conj,
            unit_diagonal=unit,
        ),
        a,
        b,
        target=f"lapack_{PREFIX[ty]}trsm_ffi",
    )
    want = trsolve_reference(a, b, left=left, lower=lower, unit=unit, transpose=transpose)
    check_module(text, [a, b], rtol=TOL[ty], atol=TOL[ty], interpreter=False, expected=[want])


@pytest.mark.parametrize("ty", ["f64", "c64"])
def test_gehrd_and_sytrd(ty: str) -> None:
    a = rand((4, 4), ty)
    p = PREFIX[ty]
    ht, tau, info = lapack_fn("gehrd", ty)(a, lo=0, hi=3)
    text = cpu_module(L.hessenberg, a, target=f"lapack_{p}gehrd_ffi")
    check_module(
        text, [a], rtol=TOL[ty], atol=TOL[ty], interpreter=False, expected=[ht, tau, np.int32(info)]
    )
    name = "hetrd" if ty.startswith("c") else "sytrd"
    for lower in (True, False):
        c, d, e, tau, info = lapack_fn(name, ty)(a, lower=lower)
        text = cpu_module(
            lambda a, lo=lower: L.tridiagonal(a, lower=lo), a, target=f"lapack_{p}{name}_ffi"
        )
        want = [c, d, e, tau, np.int32(info)]
        check_module(text, [a], rtol=TOL[ty], atol=TOL[ty], interpreter=False, expected=want)
    with pytest.raises(TransformError, match="hessenberg"):
        jax.jvp(load(cpu_module(L.hessenberg, a, target=f"lapack_{p}gehrd_ffi")), (a,), (a,))


@pytest.mark.parametrize("ty", ["f32", "c128"])
def test_gtsv(ty: str) -> None:
    m = 5
    dl, d, du = rand((2, m), ty), rand((2, m), ty) + 4, rand((2, m), ty)
    dl[:, 0] = 0
    du[:, -1] = 0
    b = rand((2, m, 3), ty)
    text = cpu_module(
        L.tridiagonal_solve, dl, d, du, b, target=f"lapack_{PREFIX[ty]}gtsv_ffi", unread=(0, 1, 2)
    )
    x = np.stack([lapack_fn("gtsv", ty)(dl[i, 1:], d[i], du[i, :-1], b[i])[3] for i in range(2)])
    check_module(
        text,
        [dl, d, du, b],
        rtol=TOL[ty],
        atol=TOL[ty],
        interpreter=False,
        expected=[x, np.zeros(2, np.int32)],
    )
    if ty == "c128":
        return
    fn = load(text)
    g = jax.grad(lambda b: jnp.sum(fn(dl, d, du, b)[0]))(b)

    def ref(b: np.ndarray) -> float:
        wide = [v.astype(np.float64) for v in (dl, d, du)]
        xs = [lapack.dgtsv(wide[0][i, 1:], wide[1][i], wide[2][i, :-1], b[i])[3] for i in range(2)]
        return float(np.sum(xs))

    np.testing.assert_allclose(g, fd_grad(ref, b.astype(np.float64), 1e-3), rtol=1e-3)


@pytest.mark.parametrize("ty", ["f64", "c64"])
def test_geev(ty: str) -> None:
    a = rand((2, 4, 4), ty)
    p = PREFIX[ty]
    text = cpu_module(L.eig, a, target=f"lapack_{p}geev_ffi")
    got = check_module(text, [a], rtol=TOL[ty], atol=TOL[ty], interpreter=False)
    w = got[0] + 1j * got[1] if ty == "f64" else got[0]
    vl, vr = got[-3], got[-2]
    tol = TOL[ty] * 10
    np.testing.assert_allclose(a @ vr, vr * w[..., None, :], atol=tol)
    np.testing.assert_allclose(
        np.conj(np.swapaxes(vl, -1, -2)) @ a,
        w[..., :, None] * np.conj(np.swapaxes(vl, -1, -2)),
        atol=tol,
    )
    ref = np.linalg.eigvals(a)
    np.testing.assert_allclose(
        np.sort_complex(w.astype(np.complex128)),
        np.sort_complex(ref.astype(np.complex128)),
        atol=tol,
    )
    right_only = cpu_module(
        lambda a: L.eig(a, compute_left_eigenvectors=False), a, target=f"lapack_{p}geev_ffi"
    )
    with pytest.raises(juliabridge.UnsupportedOpError, match="no left eigenvectors"):
        load(right_only)


# --- GPU and TPU targets: the forms JAX lowers to there, run by lax on this machine -------


@pytest.mark.parametrize("platform,prefix", [("cuda", "cusolver"), ("rocm", "hipsolver")])
@pytest.mark.parametrize("ty", ["f32", "c128"])
def test_gpu_solver_targets(platform: str, prefix: str, ty: str) -> None:
    tol = TOL[ty]
    a = rand((2, 5, 3), ty)
    sq = rand((2, 4, 4), ty)
    mods = custom_call_modules(L.lu, a, platform=platform)
    lu, piv, info = run(mods[f"{prefix}_getrf_ffi"], [a])
    for i in range(2):
        slu, spiv, sinfo = lapack_fn("getrf", ty)(a[i])
        np.testing.assert_allclose(lu[i], slu, rtol=tol, atol=tol)
        np.testing.assert_array_equal(piv[i], spiv + 1)
        assert info[i] == sinfo
    perm_name = f"{'cu' if platform == 'cuda' else 'hip'}_lu_pivots_to_permutation"
    (perm,) = run(mods[perm_name], [(piv - 1).astype(np.int32)])
    for i in range(2):
        want = np.arange(5)
        for j, p in enumerate(piv[i] - 1):
            want[[j, p]] = want[[p, j]]
        np.testing.assert_array_equal(perm[i], want)
    h = spd((2,), 4, ty)
    chol = custom_call_modules(
        lambda a: L.cholesky(a, symmetrize_input=False), h, platform=platform
    )[f"{prefix}_potrf_ffi"]
    assert "lower = true" in chol
    factor, info = run(chol, [h])
    np.testing.assert_allclose(np.tril(factor), cholesky_reference(h, True), rtol=tol, atol=tol)
    np.testing.assert_array_equal(info, [0, 0])
    qr_mods = custom_call_modules(lambda a: L.qr(a, full_matrices=False), a, platform=platform)
    packed, taus = run(qr_mods[f"{prefix}_geqrf_ffi"], [a])
    np.testing.assert_allclose(packed[0], lapack_fn("geqrf", ty)(a[0])[0], rtol=tol, atol=tol)
    (q,) = run(qr_mods[f"{prefix}_orgqr_ffi"], [packed, taus])
    np.testing.assert_allclose(q @ np.triu(packed[:, :3]), a, rtol=tol * 10, atol=tol * 10)
    dl, d, du = rand((2, 4), ty), rand((2, 4), ty) + 4, rand((2, 4), ty)
    dl[:, 0] = 0
    du[:, -1] = 0
    sparse = "cusparse" if platform == "cuda" else "hipsparse"
    gtsv2 = custom_call_modules(L.tridiagonal_solve, dl, d, du, sq, platform=platform)
    (x,) = run(gtsv2[f"{sparse}_gtsv2_ffi"], [dl, d, du, sq])
    tri = np.stack(
        [np.diag(d[i]) + np.diag(dl[i, 1:], -1) + np.diag(du[i, :-1], 1) for i in range(2)]
    )
    np.testing.assert_allclose(tri @ x, sq, rtol=tol * 10, atol=tol * 10)
    trd = custom_call_modules(L.tridiagonal, sq, platform=platform)[f"{prefix}_sytrd_ffi"]
    name = "hetrd" if ty.startswith("c") else "sytrd"
    got = run(trd, [sq])
    for i in range(2):
        want = lapack_fn(name, ty)(sq[i], lower=True)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g[i], w, rtol=tol, atol=tol)
    for lower in (True, False):
        ev = custom_call_modules(
            lambda a, lo=lower: L.eigh(a, lower=lo, symmetrize_input=False), sq, platform=platform
        )[f"{prefix}_syevd_ffi"]
        v, w, info = run(ev, [sq])
        herm = from_triangle(sq, lower)
        eig_check(v, w, herm, np.linalg.eigvalsh(herm), tol)


@pytest.mark.parametrize("platform,prefix", [("cuda", "cusolver"), ("rocm", "hipsolver")])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5)])
@pytest.mark.parametrize("full", [False, True])
def test_gpu_svd_targets(platform: str, prefix: str, shape: tuple[int, ...], full: bool) -> None:
    a = rand((2, *shape), "f64")
    mods = custom_call_modules(
        lambda a: L.svd(a, full_matrices=full, algorithm=L.SvdAlgorithm.QR),
        a,
        platform=platform,
        unread=(0,),
    )
    text = mods[f"{prefix}_gesvd_ffi"]
    assert ("transposed = true" in text) == (shape[0] < shape[1])
    s, first, second, info = run(text, [a])
    u, vt = (second, first) if shape[0] < shape[1] else (first, second)
    svd_check([np.zeros(0), s, u, vt, info], a, "A" if full else "S", 1e-10)
    jac = custom_call_modules(
        lambda a: L.svd(a, full_matrices=full), a, platform=platform, unread=(0,)
    )[f"{prefix}_gesvdj_ffi"]
    s, u, v, info = run(jac, [a])
    vt = np.conj(np.swapaxes(v, -1, -2))
    svd_check([np.zeros(0), s, u, vt, info], a, "A", 1e-10)
    values = custom_call_modules(
        lambda a: L.svd(a, compute_uv=False), a, platform=platform, unread=(0, 2, 3)
    )[f"{prefix}_gesvdj_ffi"]
    assert "compute_uv = false" in values
    s, info = run(values, [a])
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-10)


def test_tpu_targets() -> None:
    a = rand((2, 5, 3), "f32")
    sq = rand((2, 4, 4), "f32")
    lu, piv, perm = run(custom_call_modules(L.lu, a, platform="tpu")["LuDecomposition"], [a])
    for i in range(2):
        slu, spiv, _ = lapack.sgetrf(a[i])
        np.testing.assert_allclose(lu[i], slu, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(piv[i], spiv)
    np.testing.assert_array_equal(
        np.take_along_axis(a, perm[..., None].astype(np.int64), axis=1).shape, a.shape
    )
    mods = custom_call_modules(lambda a: L.qr(a, full_matrices=False), a, platform="tpu")
    packed, taus = run(mods["Qr"], [a])
    (q,) = run(mods["ProductOfElementaryHouseholderReflectors"], [packed, taus])
    np.testing.assert_allclose(q @ np.triu(packed[:, :3]), a, rtol=1e-4, atol=1e-4)
    for lower in (True, False):
        eigh = custom_call_modules(
            lambda a, lo=lower: L.eigh(a, lower=lo, symmetrize_input=False), sq, platform="tpu"
        )["Eigh"]
        v, w = run(eigh, [sq])
        herm = from_triangle(sq, lower)
        eig_check(v, w, herm, np.linalg.eigvalsh(herm), 2e-4)


# --- whole JAX functions lowered on CPU: the custom calls with JAX's surrounding ops -------

WHOLE_OPS = (
    "stablehlo.broadcast_in_dim",
    "stablehlo.dynamic_slice",
    "stablehlo.dynamic_update_slice",
    "stablehlo.slice",
    "stablehlo.reshape",
    "stablehlo.transpose",
    "stablehlo.dot_general",
    "stablehlo.reduce",
    "stablehlo.gather",
    "stablehlo.scatter",
    "stablehlo.concatenate",
    "stablehlo.pad",
)


def whole_ops_available(text: str) -> list[str]:
    return sorted({o for o in WHOLE_OPS if o.split(".")[1] in text and o not in RULES})


WHOLE = {
    "solve": (lambda a, b: jnp.linalg.solve(a, b), lambda a, b: np.linalg.solve(a, b)),
    "inv": (jnp.linalg.inv, np.linalg.inv),
    "det": (jnp.linalg.det, np.linalg.det),
    "cholesky": (jnp.linalg.cholesky, np.linalg.cholesky),
    "eigvalsh": (jnp.linalg.eigvalsh, np.linalg.eigvalsh),
    "svdvals": (
        lambda a: jnp.linalg.svd(a, compute_uv=False),
        lambda a: np.linalg.svd(a, compute_uv=False),
    ),
}


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_whole_jax_linalg_functions(name: str) -> None:
    fn, ref = WHOLE[name]
    a = spd((), 4, "f64") if name in ("cholesky", "eigvalsh") else well_conditioned((4, 4), "f64")
    args = [a, rand((4, 2), "f64")] if name == "solve" else [a]
    text = lowered(fn, *args)
    missing = whole_ops_available(text)
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (other families)")
    check_module(
        text, args, rtol=1e-9, atol=1e-9, interpreter=False, expected=[np.asarray(ref(*args))]
    )
    lifted = load(text)
    g = jax.grad(lambda a: jnp.sum(jnp.sin(lifted(a, *args[1:])[0])))(a)
    want = jax.grad(lambda a: jnp.sum(jnp.sin(fn(a, *args[1:]))))(a)
    np.testing.assert_allclose(g, want, rtol=1e-8, atol=1e-10)
