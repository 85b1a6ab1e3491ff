"""stablehlo.fft on the lax backend: every fft_type, 1-3 transformed dims, both precisions,
against XLA, the reference interpreter and numpy.fft; derivatives against finite differences."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge import ModuleContractError, UnsupportedOpError
from juliabridge.backends.lax import RULES
from tests.outside import reactant_fixture_text

from .oracles import check_module

# f64 arguments and results need x64 outside the module too (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("x64")


REAL = {"f32": np.float32, "f64": np.float64}
CPLX = {"f32": np.complex64, "f64": np.complex128}


def tensor(shape: tuple[int, ...], ty: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + ty + ">"


def module(kind: str, shape: tuple[int, ...], lengths: tuple[int, ...], prec: str) -> str:
    real, cplx = prec, f"complex<{prec}>"
    if kind == "RFFT":
        out = (*shape[:-1], shape[-1] // 2 + 1)
        a, b = tensor(shape, real), tensor(out, cplx)
    elif kind == "IRFFT":
        out = (*shape[: -len(lengths)], *lengths)
        a, b = tensor(shape, cplx), tensor(out, real)
    else:
        a, b = tensor(shape, cplx), tensor(shape, cplx)
    ls = ", ".join(map(str, lengths))
    return f"""module {{
  func.func @main(%x: {a}) -> {b} {{
    %0 = stablehlo.fft %x, type =  {kind}, length = [{ls}] : ({a}) -> {b}
    return %0 : {b}
  }}
}}"""


def numpy_fft(kind: str, x: np.ndarray, lengths: tuple[int, ...]) -> np.ndarray:
    axes = tuple(range(-len(lengths), 0))
    if kind == "FFT":
        return np.fft.fftn(x, axes=axes)
    if kind == "IFFT":
        return np.fft.ifftn(x, axes=axes)
    if kind == "RFFT":
        return np.fft.rfftn(x, axes=axes)
    return np.fft.irfftn(x, s=lengths, axes=axes)


CASES = [
    # (kind, operand shape, fft_length)
    ("FFT", (8,), (8,)),
    ("FFT", (3, 5), (5,)),
    ("FFT", (2, 4, 6), (4, 6)),
    ("FFT", (2, 1, 3, 4, 5), (3, 4, 5)),
    ("IFFT", (7,), (7,)),
    ("IFFT", (2, 3, 4), (3, 4)),
    ("IFFT", (2, 2, 3, 4), (2, 3, 4)),
    ("RFFT", (8,), (8,)),
    ("RFFT", (3, 7), (7,)),
    ("RFFT", (2, 4, 6), (4, 6)),
    ("RFFT", (2, 3, 4, 5), (3, 4, 5)),
    ("IRFFT", (5,), (8,)),
    ("IRFFT", (3, 4), (7,)),
    ("IRFFT", (2, 4, 4), (4, 6)),
    ("IRFFT", (2, 3, 4, 3), (3, 4, 5)),
]


@pytest.mark.parametrize("prec", ["f32", "f64"])
@pytest.mark.parametrize("kind,shape,lengths", CASES)
def test_fft_against_oracles_and_numpy(
    kind: str, shape: tuple[int, ...], lengths: tuple[int, ...], prec: str
) -> None:
    rng = np.random.default_rng(0)
    if kind == "RFFT":
        x = rng.standard_normal(shape).astype(REAL[prec])
    else:
        x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(CPLX[prec])
    want = numpy_fft(kind, x.astype(np.complex128 if kind != "RFFT" else np.float64), lengths)
    want = want.astype(REAL[prec] if kind == "IRFFT" else CPLX[prec])
    tol = 2e-5 if prec == "f32" else 1e-12
    # jaxlib's reference interpreter aborts the process on stablehlo.fft: XLA and numpy.
    text = module(kind, shape, lengths, prec)
    check_module(text, [x], rtol=tol, atol=tol, expected=[want], interpreter=False)


def test_generic_syntax_and_empty_batch() -> None:
    text = """module {
  func.func @main(%x: tensor<0x4xf32>) -> tensor<0x3xcomplex<f32>> {
    %0 = "stablehlo.fft"(%x) {fft_type = #stablehlo<fft_type RFFT>, fft_length = array<i64: 4>} : (tensor<0x4xf32>) -> tensor<0x3xcomplex<f32>>
    return %0 : tensor<0x3xcomplex<f32>>
  }
}"""
    x = np.zeros((0, 4), np.float32)
    check_module(text, [x], expected=[np.zeros((0, 3), np.complex64)], interpreter=False)


@pytest.mark.parametrize(
    "kind,shape,lengths,out",
    [
        ("FFT", (8,), (4,), (8,)),  # length shorter than the operand
        ("FFT", (2, 4), (2, 8), (2, 4)),
        ("IFFT", (4,), (5,), (4,)),
    ],
)
def test_fft_length_disagreeing_with_the_operand_is_refused(
    kind: str, shape: tuple[int, ...], lengths: tuple[int, ...], out: tuple[int, ...]
) -> None:
    a, b = tensor(shape, "complex<f32>"), tensor(out, "complex<f32>")
    ls = ", ".join(map(str, lengths))
    text = f"""module {{
  func.func @main(%x: {a}) -> {b} {{
    %0 = "stablehlo.fft"(%x) {{fft_type = #stablehlo<fft_type {kind}>, fft_length = array<i64: {ls}>}} : ({a}) -> {b}
    return %0 : {b}
  }}
}}"""
    # Refused at load for every backend (the FFT library would abort the process) ...
    with pytest.raises(ModuleContractError, match=r"line 3: stablehlo\.fft .*fft_length") as c:
        juliabridge.load_mlir(text, backend="lax")
    assert "abort" in str(c.value)
    # ... and by the lax lift itself when the load-time checks are skipped.
    with pytest.raises(UnsupportedOpError, match=r"stablehlo\.fft at line 3: fft_length") as e:
        juliabridge.load_mlir(text, backend="lax", trust=True)
    assert "abort" in str(e.value)


def fd_grad(f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


@pytest.mark.parametrize("kind,shape,lengths", [c for c in CASES if len(c[1]) <= 3])
def test_fft_derivatives(kind: str, shape: tuple[int, ...], lengths: tuple[int, ...]) -> None:
    fn = juliabridge.load_mlir(module(kind, shape, lengths, "f64"), backend="lax")
    rng = np.random.default_rng(1)
    if kind == "RFFT":
        x0 = rng.standard_normal(shape)
        make: Callable[[Any], Any] = lambda p: p  # noqa: E731
    else:
        # Differentiate with respect to the real and imaginary parts (real parameters).
        x0 = rng.standard_normal((2, *shape))
        make = lambda p: p[0] + 1j * p[1]  # noqa: E731
    w = rng.standard_normal(numpy_fft(kind, make(x0), lengths).shape)

    def loss(p: Any) -> Any:
        y = fn(make(p))[0]
        return jnp.sum(w * jnp.abs(y) ** 2)

    def ref(p: np.ndarray) -> float:
        return float(np.sum(w * np.abs(numpy_fft(kind, make(p), lengths)) ** 2))

    np.testing.assert_allclose(jax.grad(loss)(x0), fd_grad(ref, x0), rtol=1e-5, atol=1e-7)
    v = rng.standard_normal(x0.shape)
    _, t = jax.jvp(loss, (x0,), (v,))
    np.testing.assert_allclose(t, (ref(x0 + 1e-6 * v) - ref(x0 - 1e-6 * v)) / 2e-6, rtol=1e-5)
    xs = np.stack([x0, 2 * x0, -x0])
    got = jax.vmap(lambda p: fn(make(p))[0])(xs)
    np.testing.assert_allclose(got, np.stack([numpy_fft(kind, make(p), lengths) for p in xs]))


@pytest.mark.skipif(
    not {"stablehlo.scatter", "stablehlo.dot_general", "stablehlo.transpose"} <= set(RULES),
    reason="needs scatter, dot_general, transpose, reshape, concatenate (other families)",
)
def test_reactant_fixture_with_fft() -> None:
    text = reactant_fixture_text("complex_scatter_fft_dot_symattr.mlir")
    rng = np.random.default_rng(2)

    def c(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)

    # Distinct indices: a replace-scatter with duplicates has no defined winner.
    idx = rng.permutation(128 * 128)[:4096].astype(np.int64) + 1
    args = [
        c(274),
        c(128, 128),
        c(64, 64),
        idx,
        c(4096),
        c(274, 16384),
        rng.standard_normal((64, 64)),
    ]
    grid = np.full((128, 128), 5j)
    k = idx - 1
    grid[k % 128, (k // 128) % 128] = args[6].reshape(-1) * args[4]
    spectrum = np.fft.fft2(grid.T)
    want = [args[5] @ spectrum.reshape(-1), spectrum]
    # The reference interpreter aborts on stablehlo.fft: XLA and numpy.
    check_module(text, args, rtol=1e-9, atol=1e-6, expected=want, interpreter=False)
