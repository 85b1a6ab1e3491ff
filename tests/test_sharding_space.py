"""Sharding and batching across meshes, axes and layouts, on several devices (issue 38).

The space: meshes whose axes differ in size ((4,), (2, 2), (4, 1), (1, 4)), the mesh axis the
batch is split over, the input's batch axis (0 or 1 in the module's order), the layout the
caller uses ("mlir", or "julia": every array reversed), batch sizes the axis does and does not
divide, and Explicit meshes serving another batch size than the traced one. The reference is
numpy (the model is ``y = x * w`` per sample) and the sharding the documentation promises: the
batch axis of every batched result split over the batch's mesh axis, the rest replicated.

These need 4 devices: a plain run (one CPU device) skips them, tests/test_multidevice.py runs
them with 4 fake CPU devices.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import juliabridge
from juliabridge import CallArgumentError

from .pinned_support import Arg, Res, Spec, lower, write

pytestmark = pytest.mark.multidevice(devices=4)

B = 2  # traced batch size
F = 3  # features


def _bundle(tmp_path: Path, axis: int) -> Path:
    """``y = x * w`` with x of shape (B, F) (batch axis 0) or (F, B) (batch axis 1)."""
    x = np.ones((B, F), np.float32)
    w = np.arange(1, B * F + 1, dtype=np.float32).reshape(B, F)
    if axis == 1:
        x, w = x.T.copy(), w.T.copy()
    spec = Spec(
        name="sp",
        mlir=lower(lambda x, w: (x * w,), x, w),
        args=[Arg("input", [], x, batch_axis=axis), Arg("parameter", ["w"], w)],
        results=[Res([["output"]], x.shape, "f32", batch_axis=axis)],
        batch={"size": B, "samples_independent": True},
    )
    return write(tmp_path / f"sp{axis}.bundle", spec)


def _reference(x: np.ndarray, w: np.ndarray, axis: int) -> np.ndarray:
    """numpy: sample i (along `axis`) times row i mod B of w (along the same axis)."""
    n = x.shape[axis]
    rows = np.take(w, np.arange(n) % B, axis=axis)
    return x * rows


MESHES = [((4,), ("a",)), ((2, 2), ("a", "b")), ((4, 1), ("a", "b")), ((1, 4), ("a", "b"))]


def _cases() -> list[tuple[Any, ...]]:
    out = []
    for shape, names in MESHES:
        for name in names:
            for axis in (0, 1):
                for layout in ("mlir", "julia"):
                    out.append((shape, names, name, axis, layout))
    return out


def _spec_of(a: Any) -> tuple[Any, ...]:
    return tuple(a.sharding.spec) + (None,) * (a.ndim - len(a.sharding.spec))


@pytest.mark.parametrize(("shape", "names", "name", "axis", "layout"), _cases())
def test_data_parallel_on_any_mesh_axis_batch_axis_and_layout(
    tmp_path: Path, shape, names, name, axis, layout
) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path, axis), layout=layout)
    mesh = Mesh(np.array(jax.devices()[: math.prod(shape)]).reshape(shape), names)
    size = dict(zip(names, shape))[name]
    n = 2 * size * B  # a multiple of the axis's devices, not always of the whole mesh
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, F) if axis == 0 else (F, n)).astype(np.float32)
    w = np.asarray(model.params["w"]) if layout == "mlir" else np.asarray(model.params["w"]).T
    want = _reference(x, w, axis)
    xin = x.T if layout == "julia" else x
    apply = model.data_parallel(mesh, name)
    y, _ = apply(model.params, model.state, xin)
    y = np.asarray(y) if layout == "mlir" else np.asarray(y).T
    np.testing.assert_allclose(y, want, rtol=1e-6)
    # the batch axis carries the mesh axis, in the caller's layout
    out, _ = apply(model.params, model.state, xin)
    pos = axis if layout == "mlir" else 1 - axis
    expect = tuple(name if i == pos else None for i in range(2))
    if size > 1:
        assert _spec_of(out) == expect, (_spec_of(out), expect)
    # a batch the axis's devices do not divide is refused, naming that axis's size
    if size > 1:
        bad = n + 1
        xb = rng.standard_normal((bad, F) if axis == 0 else (F, bad)).astype(np.float32)
        with pytest.raises(CallArgumentError, match=f"of {size} devices"):
            apply(model.params, model.state, xb.T if layout == "julia" else xb)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("n", [B, 4 * B, 3 * 4])
def test_another_batch_size_on_an_explicit_mesh_stays_split_along_its_batch_axis(
    tmp_path: Path, axis: int, n: int
) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path, axis))
    mesh = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Explicit,))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, F) if axis == 0 else (F, n)).astype(np.float32)
    split = P("data", None) if axis == 0 else P(None, "data")
    if n % 4:
        split = P()  # a batch the mesh does not divide stays whole
    xs = jax.device_put(x, NamedSharding(mesh, split))
    y = jax.jit(model)(xs)
    np.testing.assert_allclose(np.asarray(y), _reference(x, np.asarray(model.params["w"]), axis),
                               rtol=1e-6)  # fmt: skip
    want = tuple("data" if (i == axis and n % 4 == 0) else None for i in range(2))
    assert _spec_of(y) == want


def test_device_conflict_between_a_split_and_a_single_device_array() -> None:
    from juliabridge.transforms import sharding as sh

    d = jax.devices()
    split = jax.device_put(np.ones((4, 2)), NamedSharding(Mesh(np.array(d[:4]), ("x",)), P("x")))
    pair = jax.device_put(np.ones(2), NamedSharding(Mesh(np.array(d[:2]), ("y",)), P()))
    one = jax.device_put(np.ones(2), d[0])
    assert sh.device_conflict({"a": split, "b": split}) is None
    got = sh.device_conflict({"a": split, "b": one})
    assert got == f"a on devices {sorted(x.id for x in d[:4])}; b on devices [{d[0].id}]"
    got = sh.device_conflict({"p": pair, "q": split})
    assert got == (
        f"p on devices {sorted(x.id for x in d[:2])}; q on devices {sorted(x.id for x in d[:4])}"
    )
