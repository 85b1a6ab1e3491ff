"""Complex maximum, minimum and ordered compare follow the spec's lexicographic order on every
backend (XLA's own lowering compares real parts only, or fails to compile; lax/rewrite.py)."""

from __future__ import annotations

import numpy as np
import pytest

import juliabridge
from juliabridge.backends.lax.rewrite import misread_by_xla, rewrite_through_lax
from juliabridge.stablehlo import parse_module
from juliabridge.stablehlo.sanitize import walk

# Ties in the real part, so only an order that looks at the imaginary part gets them right.
A = np.array([1 + 2j, 1 + 3j, -1 - 1j, 2 + 0j, 0 + 1j], np.complex64)
B = np.array([1 + 3j, 1 + 2j, -1 - 2j, 2 + 0j, 0 - 1j], np.complex64)


def _key(z: complex) -> tuple[float, float]:
    return (z.real, z.imag)


def _elementwise(op: str, ty: str = "complex<f32>") -> str:
    t = f"tensor<5x{ty}>"
    if op in ("maximum", "minimum"):
        body, out = f"%r = stablehlo.{op} %a, %b : {t}", t
    else:
        body, out = (
            f"%r = stablehlo.compare {op}, %a, %b : ({t}, {t}) -> tensor<5xi1>",
            "tensor<5xi1>",
        )
    return f"""module {{
  func.func @main(%a: {t}, %b: {t}) -> {out} {{
    {body}
    return %r : {out}
  }}
}}"""


def _want(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    pairs = list(zip(a.tolist(), b.tolist()))
    if op == "maximum":
        return np.array([x if _key(x) >= _key(y) else y for x, y in pairs], a.dtype)
    if op == "minimum":
        return np.array([x if _key(x) <= _key(y) else y for x, y in pairs], a.dtype)
    cmp = {
        "LT": lambda p, q: p < q,
        "LE": lambda p, q: p <= q,
        "GT": lambda p, q: p > q,
        "GE": lambda p, q: p >= q,
    }[op]
    return np.array([cmp(_key(x), _key(y)) for x, y in pairs])


# f64 arguments and results need x64 outside the module too (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("x64")


@pytest.mark.parametrize("op", ["maximum", "minimum", "LT", "LE", "GT", "GE"])
@pytest.mark.parametrize("ty", ["complex<f32>", "complex<f64>"])
def test_complex_order_is_lexicographic(backend: str, op: str, ty: str) -> None:
    dt = np.complex64 if ty == "complex<f32>" else np.complex128
    fn = juliabridge.load_mlir(_elementwise(op, ty), backend=backend)
    (out,) = fn(A.astype(dt), B.astype(dt))
    np.testing.assert_array_equal(np.asarray(out), _want(op, A.astype(dt), B.astype(dt)))


def test_complex_max_reduction_and_sort_comparator(backend: str) -> None:
    text = """module {
  func.func @main(%a: tensor<5xcomplex<f32>>, %z: tensor<complex<f32>>) -> (tensor<complex<f32>>, tensor<5xcomplex<f32>>) {
    %m = stablehlo.reduce(%a init: %z) applies stablehlo.maximum across dimensions = [0] : (tensor<5xcomplex<f32>>, tensor<complex<f32>>) -> tensor<complex<f32>>
    %s = "stablehlo.sort"(%a) <{dimension = 0 : i64}> ({
    ^bb0(%l: tensor<complex<f32>>, %r: tensor<complex<f32>>):
      %c = stablehlo.compare LT, %l, %r : (tensor<complex<f32>>, tensor<complex<f32>>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }) : (tensor<5xcomplex<f32>>) -> tensor<5xcomplex<f32>>
    return %m, %s : tensor<complex<f32>>, tensor<5xcomplex<f32>>
  }
}"""
    x = np.array([1 + 2j, 1 + 5j, 1 + 3j, 0j, 1 - 1j], np.complex64)
    low = np.complex64(-1e30 - 1e30j)
    m, s = juliabridge.load_mlir(text, backend=backend)(x, low)
    assert complex(np.asarray(m)) == 1 + 5j
    np.testing.assert_array_equal(np.asarray(s), np.array(sorted(x.tolist(), key=_key), x.dtype))


def test_complex_clamp(backend: str) -> None:
    text = """module {
  func.func @main(%lo: tensor<complex<f32>>, %a: tensor<5xcomplex<f32>>, %hi: tensor<complex<f32>>) -> tensor<5xcomplex<f32>> {
    %r = stablehlo.clamp %lo, %a, %hi : (tensor<complex<f32>>, tensor<5xcomplex<f32>>, tensor<complex<f32>>) -> tensor<5xcomplex<f32>>
    return %r : tensor<5xcomplex<f32>>
  }
}"""
    lo, hi = np.complex64(1 + 2.5j), np.complex64(1 + 2.75j)
    # spec.md#clamp: min(max(operand, min), max) in the lexicographic order
    want = [
        _want("minimum", _want("maximum", A[i : i + 1], np.array([lo])), np.array([hi]))[0]
        for i in range(5)
    ]
    (out,) = juliabridge.load_mlir(text, backend=backend)(lo, A, hi)
    np.testing.assert_array_equal(np.asarray(out), np.array(want, A.dtype))


def test_only_complex_orderings_are_rewritten() -> None:
    # Real maxima and complex equality XLA gets right: they stay as written (no second parse).
    for text in (_elementwise("maximum", "f32"), _elementwise("EQ"), _elementwise("NE")):
        module = parse_module(text)
        assert rewrite_through_lax(module, misread_by_xla) is module
    module = parse_module(_elementwise("GE"))
    with module.parsed.context:
        assert [op.name for op in walk(module.parsed.operation) if misread_by_xla(op)] == [
            "stablehlo.compare"
        ]
    rewritten = rewrite_through_lax(module, misread_by_xla)
    assert "func.call" in rewritten.ops


def test_a_map_body_keeps_xlas_reading_and_runs(backend: str) -> None:
    # XLA's verifier refuses a call inside a map body, so the rewrite leaves it there; real
    # parts that differ make both orders agree, so the values are checked on every backend.
    text = """module {
  func.func @main(%a: tensor<3xcomplex<f32>>, %b: tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>> {
    %r = "stablehlo.map"(%a, %b) <{dimensions = array<i64: 0>}> ({
    ^bb0(%x: tensor<complex<f32>>, %y: tensor<complex<f32>>):
      %m = stablehlo.minimum %x, %y : tensor<complex<f32>>
      stablehlo.return %m : tensor<complex<f32>>
    }) : (tensor<3xcomplex<f32>>, tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>>
    return %r : tensor<3xcomplex<f32>>
  }
}"""
    module = parse_module(text)
    assert rewrite_through_lax(module, misread_by_xla) is module
    a = np.array([1 + 5j, -2 + 0j, 3 - 1j], np.complex64)
    b = np.array([2 - 1j, -3 + 9j, 0 + 0j], np.complex64)
    (out,) = juliabridge.load_mlir(text, backend=backend)(a, b)
    np.testing.assert_array_equal(np.asarray(out), _want("minimum", a, b))


def test_the_rewrite_is_not_charged_to_the_module_budgets(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 40 chained complex maxima are 160 ops once written as formulas; the module's own chain
    # (40) is what the budget checks, on every backend.
    monkeypatch.setenv("JULIABRIDGE_MAX_CHAIN", "60")
    t = "tensor<2xcomplex<f32>>"
    lines = [f"    %v0 = stablehlo.maximum %a, %b : {t}"]
    lines += [f"    %v{i} = stablehlo.maximum %v{i - 1}, %b : {t}" for i in range(1, 40)]
    text = (
        f"module {{\n  func.func @main(%a: {t}, %b: {t}) -> {t} {{\n"
        + "\n".join(lines)
        + f"\n    return %v39 : {t}\n  }}\n}}"
    )
    a = np.array([1 + 2j, 0 - 1j], np.complex64)
    b = np.array([1 + 3j, 0 - 2j], np.complex64)
    (out,) = juliabridge.load_mlir(text, backend=backend)(a, b)
    np.testing.assert_array_equal(np.asarray(out), _want("maximum", a, b))
