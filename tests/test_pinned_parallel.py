"""Pinned: `model.data_parallel(mesh, axis)` splits the batch axis the manifest records.

In-process, over every device JAX has (one CPU device normally; tests/test_multidevice.py,
tools/mutation_smoke.py and the mutation command in docs/mutation-testing.md run this file with
several fake CPU devices). The sharding of
the results is observable on any device count: the batch axis carries the mesh axis (the last
axis under layout="julia", whose arrays are the MLIR ones reversed), everything else is
replicated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

import juliabridge
from juliabridge import CallArgumentError

from .pinned_support import Arg, Res, Spec, lower, write

# Every test here checks more with several devices: tests/test_multidevice.py runs them with 4.
pytestmark = pytest.mark.multidevice

B = 2
W = np.array([[0.5, 2.0, -1.0]] * B, np.float32)


def _bundle(tmp_path: Path, *, independent: bool = True, axis: int = 0) -> Path:
    x = np.ones((B, 3), np.float32)
    w = W
    if axis == 1:
        x, w = x.T.copy(), W.T.copy()
    c = np.array([1.0, 2.0], np.float32)
    spec = Spec(
        name="dp",
        mlir=lower(lambda x, w, c: (x * w, c + c), x, w, c),
        args=[
            Arg("input", [], x, batch_axis=axis),
            Arg("parameter", ["w"], w),
            Arg("state", ["c"], c),
        ],
        results=[
            Res([["output", 1]], x.shape, "f32", batch_axis=axis),
            Res([["state", "c"]], (2,), "f32"),
        ],
        # Output 2 is the input returned unchanged (e.g. a test-mode Dropout), output 3 a
        # parameter returned unchanged (replicated, no batch axis).
        aliases=[(["output", 2], 0), (["output", 3], 1)],
        batch={"size": B, "samples_independent": independent},
    )
    return write(tmp_path / "dp.bundle", spec)


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()), ("data",))


def _spec(a: Any) -> tuple[Any, ...]:
    return tuple(a.sharding.spec) + (None,) * (a.ndim - len(a.sharding.spec))


@pytest.mark.parametrize("layout", ["mlir", "julia"])
def test_data_parallel_splits_the_batch_axis(tmp_path: Path, layout: str) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path), layout=layout)
    n = 2 * B * jax.device_count()
    x = np.random.default_rng(0).standard_normal((n, 3)).astype(np.float32)
    xin = x.T if layout == "julia" else x
    (y, echo, w), st = model.data_parallel(_mesh(), "data")(model.params, model.state, xin)
    want = x * W[np.arange(n) % B]
    np.testing.assert_allclose(y, want.T if layout == "julia" else want, rtol=1e-6)
    np.testing.assert_array_equal(echo, xin)
    np.testing.assert_array_equal(w, model.params["w"])
    np.testing.assert_array_equal(st["c"], [2.0, 4.0])
    if jax.device_count() > 1:  # one device: JAX reports every result as replicated
        batch = (None, "data") if layout == "julia" else ("data", None)
        assert _spec(y) == batch
        assert _spec(echo) == batch
        assert _spec(w) == (None, None)
        assert _spec(st["c"]) == (None,)


@pytest.mark.parametrize("layout", ["mlir", "julia"])
def test_data_parallel_with_batch_axis_1_at_the_traced_size_per_device(
    tmp_path: Path, layout: str
) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path, axis=1), layout=layout)
    n = B * jax.device_count()
    x = np.random.default_rng(2).standard_normal((n, 3)).astype(np.float32)
    xin = x.T if layout == "mlir" else x  # MLIR (3, n), batch axis 1; Julia (n, 3)
    (y, _, _), _ = model.data_parallel(_mesh(), "data")(model.params, model.state, xin)
    want = (x * W[np.arange(n) % B]).T
    np.testing.assert_allclose(y, want if layout == "mlir" else want.T, rtol=1e-6)
    if jax.device_count() > 1:
        assert _spec(y) == ((None, "data") if layout == "mlir" else ("data", None))


def test_data_parallel_places_params_that_live_elsewhere(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path))
    elsewhere = jax.devices()[-1]
    params = jax.device_put(model.params, elsewhere)
    state = jax.device_put(model.state, elsewhere)
    n = B * jax.device_count()
    x = np.ones((n, 3), np.float32)
    (y, _, _), _ = model.data_parallel(_mesh(), "data")(params, state, x)
    np.testing.assert_allclose(y, W[np.arange(n) % B], rtol=1e-6)


def test_data_parallel_needs_independent_samples(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path, independent=False))
    with pytest.raises(CallArgumentError, match="independent") as e:
        model.data_parallel(_mesh(), "data")
    assert str(e.value) == (
        "dp: data parallelism splits the batch over devices, which needs a model whose samples "
        "are independent (manifest batch.samples_independent); this one is not (e.g. BatchNorm "
        "in train mode)"
    )


def test_data_parallel_needs_the_mesh_axis(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path))
    with pytest.raises(CallArgumentError, match="'model'"):
        model.data_parallel(_mesh(), "model")


# Each kind of module: lax's is JAX primitives, xla's one call opaque to JAX. With several
# devices, each device's cotangent of the replicated params counts exactly once in the sum
# (one device's alone, or each counted again per device, is a wrong gradient).
@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_data_parallel_gradients_match_the_single_device_ones(tmp_path: Path, backend: str) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path), backend=backend)
    n = 2 * B * jax.device_count()
    x = np.random.default_rng(1).standard_normal((n, 3)).astype(np.float32)
    apply = model.data_parallel(_mesh(), "data")

    def loss(w: Any) -> Any:
        (y, _, _), _ = apply({"w": w}, model.state, x)
        return (y**2).sum()

    g = np.asarray(jax.grad(loss)(model.params["w"]))
    want = np.zeros_like(W)
    for i in range(n):
        want[i % B] += 2 * x[i] ** 2 * W[i % B]
    np.testing.assert_allclose(g, want, rtol=1e-5)


_MANY = pytest.mark.multidevice(devices=2)


@_MANY
def test_data_parallel_refuses_a_batch_the_devices_do_not_divide(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path))
    d = jax.device_count()
    apply = model.data_parallel(_mesh(), "data")
    with pytest.raises(CallArgumentError) as e:
        apply(model.params, model.state, np.ones((d + 1, 3), np.float32))
    assert str(e.value) == (
        f"dp: data_parallel splits x over mesh axis 'data' of {d} devices along its batch axis "
        f"(0), so the batch must be a multiple of {d}; got {d + 1} samples. Pad the batch to "
        f"{2 * d} (and drop the extra outputs) or call with a multiple of {d}"
    )


@_MANY
def test_data_parallel_places_inputs_that_live_elsewhere(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path))
    n = B * jax.device_count()
    x = jax.device_put(np.ones((n, 3), np.float32), jax.devices()[-1])
    (y, echo, _), _ = model.data_parallel(_mesh(), "data")(model.params, model.state, x)
    np.testing.assert_allclose(y, W[np.arange(n) % B], rtol=1e-6)
    assert _spec(echo) == ("data", None)
