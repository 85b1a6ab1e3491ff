"""A lifted op must produce exactly its declared result type (issue 38): every way a lift rule
can get it wrong, the shape alone (a dimension more or fewer, two swapped, one size off, 0-d
for one element), the dtype alone (width, kind, signedness, bool) or both, is refused at that
op with a typed UnsupportedOpError naming the op, its line, what it produced and the declared
type, eagerly and under jax.jit; the exact type passes through unchanged.

The rules here are test-only lift rules registered for the duration of one test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import juliabridge
from juliabridge import UnsupportedOpError
from juliabridge.backends.lax import RULES
from juliabridge.backends.lax.registry import OpView, Rule

pytestmark = pytest.mark.usefixtures("x64")

#: Declared MLIR element types and the numpy dtype each means (spec.md's types).
DECLARED = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f64": np.dtype(np.float64),
    "i32": np.dtype(np.int32),
    "ui32": np.dtype(np.uint32),
    "i8": np.dtype(np.int8),
    "i1": np.dtype(np.bool_),
}
SHAPES = [(), (1,), (3,), (2, 3), (2, 1, 4)]


def _wrong_shapes(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Shapes a lift gets wrong: a dim more, a dim fewer, swapped, a size off, 0-d/(1,)."""
    out = [(*shape, 1), (1, *shape), shape[1:], shape[:-1]]
    if len(shape) >= 2:
        out.append((shape[1], shape[0], *shape[2:]))
    out += [(*shape[:-1], shape[-1] + 1)] if shape else [(1,), (0,)]
    if shape:
        out.append((*shape[:-1], shape[-1] - 1))
    return sorted({s for s in out if s != shape})


def _wrong_dtypes(dtype: np.dtype) -> list[np.dtype]:
    return [d for d in DECLARED.values() if d != dtype]


def _mlir(shape: tuple[int, ...], elem: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + elem + ">"


@pytest.fixture
def produce() -> Iterator[dict[str, Any]]:
    """A test-only op `jbtest.produce` whose impl returns `box["value"]` whatever it gets."""
    box: dict[str, Any] = {}

    def lift(view: OpView) -> Any:
        return lambda x: [box["value"]]

    assert "jbtest.produce" not in RULES
    RULES["jbtest.produce"] = Rule(lift, False)
    try:
        yield box
    finally:
        RULES.pop("jbtest.produce", None)


def _module(t: str) -> str:
    return f"""module {{
  func.func @main(%a: tensor<f32>) -> {t} {{
    %0 = "jbtest.produce"(%a) : (tensor<f32>) -> {t}
    return %0 : {t}
  }}
}}"""


def _refused(box: dict[str, Any], t: str, value: Any, got: str) -> None:
    box["value"] = value
    fn = juliabridge.load_mlir(_module(t), backend="lax", trust=True)
    for call in (fn, jax.jit(fn)):
        with pytest.raises(UnsupportedOpError) as e:
            call(np.float32(1.0))
        assert e.value.op == "jbtest.produce" and e.value.where.startswith("line 3"), str(e.value)
        assert f"produced {got}, not the declared {t}" in str(e.value), str(e.value)


def _name(dtype: np.dtype) -> str:
    return str(jnp.zeros((), dtype).dtype)


#: Every shape with a declared type, and every declared type with a shape (not their product:
#: the check does not depend on which pairs meet, and each case compiles).
_ELEMS = list(DECLARED)
CASES = [(s, _ELEMS[k % len(_ELEMS)]) for k, s in enumerate(SHAPES)]
CASES += [(SHAPES[k % len(SHAPES)], e) for k, e in enumerate(_ELEMS) if k >= len(SHAPES)]


@pytest.mark.parametrize(("shape", "elem"), CASES, ids=[_mlir(s, e) for s, e in CASES])
def test_a_lift_of_the_right_dtype_and_a_wrong_shape_is_refused_at_the_op(
    produce: dict[str, Any], shape: tuple[int, ...], elem: str
) -> None:
    t, dtype = _mlir(shape, elem), DECLARED[elem]
    for wrong in _wrong_shapes(shape):
        _refused(produce, t, jnp.zeros(wrong, dtype), f"{_name(dtype)}{list(wrong)}")


@pytest.mark.parametrize(("shape", "elem"), CASES, ids=[_mlir(s, e) for s, e in CASES])
def test_a_lift_of_the_right_shape_and_a_wrong_dtype_is_refused_at_the_op(
    produce: dict[str, Any], shape: tuple[int, ...], elem: str
) -> None:
    t = _mlir(shape, elem)
    for wrong in _wrong_dtypes(DECLARED[elem]):
        _refused(produce, t, jnp.zeros(shape, wrong), f"{_name(wrong)}{list(shape)}")


def test_a_lift_wrong_in_both_shape_and_dtype_is_refused_at_the_op(
    produce: dict[str, Any],
) -> None:
    _refused(produce, "tensor<2x3xf32>", jnp.zeros((3, 2), jnp.int32), "int32[3, 2]")
    _refused(produce, "tensor<i1>", jnp.zeros((1,), jnp.float32), "float32[1]")


@pytest.mark.parametrize(("shape", "elem"), CASES, ids=[_mlir(s, e) for s, e in CASES])
def test_a_lift_of_exactly_the_declared_type_passes_its_value_through(
    produce: dict[str, Any], shape: tuple[int, ...], elem: str
) -> None:
    dtype = DECLARED[elem]
    want = (np.arange(int(np.prod(shape))) % 3).astype(dtype).reshape(shape)
    produce["value"] = jnp.asarray(want)
    fn = juliabridge.load_mlir(_module(_mlir(shape, elem)), backend="lax", trust=True)
    for call in (fn, jax.jit(fn)):
        got = np.asarray(call(np.float32(1.0))[0])
        assert got.dtype == dtype and got.shape == shape
        np.testing.assert_array_equal(got, want)
