"""`import_lux(..., shardings=)` and `load_params(..., shardings=)` (issue 54): every array made
from this process's shards only, bit-identical to a whole load, for every element type and rank
0-4, shardings splitting each axis, partially replicated and replicated, Explicit and Auto mesh
axes; each distinct shard read once; a training step equal to one device's. The multi-device
cases are marked `multidevice` (tests/test_multidevice.py runs them on 4 fake CPU devices)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, make_single_device_sharding
from jax.sharding import PartitionSpec as P

import juliabridge
from juliabridge.bundle.weights import sharded as sh
from juliabridge.errors import BundleError, CallArgumentError
from juliabridge.lux.params_io import load_params, save_params
from juliabridge.support import dtypes

ROOT = Path(__file__).resolve().parents[1]
#: Every element type save_params writes (64-bit ones need x64, which tests do not turn on).
TYPES = [t for t in dtypes.MLIR_TO_JULIA if t not in dtypes.SIXTY_FOUR_BIT]


@pytest.fixture(scope="module")
def common() -> Iterator[ModuleType]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("common")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _mesh(kind: str) -> jax.sharding.Mesh:
    axis = AxisType.Explicit if kind == "explicit" else AxisType.Auto
    return jax.make_mesh((2, 2), ("x", "y"), axis_types=(axis, axis))


def _value(rng: np.random.Generator, shape: tuple[int, ...], tag: str) -> np.ndarray:
    if tag == "i1":
        return rng.integers(0, 2, shape).astype(bool)
    want = dtypes.to_numpy(tag)
    if want.kind in "fc":
        return np.array(rng.standard_normal(shape) * 3, dtype=want)
    return np.array(rng.integers(0, 100, shape), dtype=want)


def _specs(rank: int) -> list[tuple[str, P | None]]:
    """Shardings over a 2x2 mesh: each axis split alone, two axes split, partially
    replicated, replicated (P()) and the default (None)."""
    out: list[tuple[str, P | None]] = [("default", None), ("replicated", P())]
    for a in range(rank):
        out.append((f"x@{a}", P(*([None] * a), "x")))
        if a + 1 < rank:
            out.append((f"x@{a},y@{a + 1}", P(*([None] * a), "x", "y")))
    if rank >= 2:
        out.append((f"y@0,x@{rank - 1}", P("y", *([None] * (rank - 2)), "x")))
    return out


def _bits(a: Any) -> tuple[Any, ...]:
    arr = np.asarray(a)
    return arr.shape, arr.dtype, arr.tobytes()


@pytest.mark.multidevice(devices=4)
@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_load_params_shards_equal_a_whole_load_for_every_type_and_rank(
    tmp_path: Path, kind: str
) -> None:
    rng = np.random.default_rng(0)
    mesh = _mesh(kind)
    params: dict[str, Any] = {}
    want: dict[str, P | None] = {}
    for tag in TYPES:
        for rank in range(5):
            shape = tuple([4, 2, 6, 2][:rank])
            for name, spec in _specs(rank):
                key = f"{tag.replace('<', '_').replace('>', '')}_r{rank}_{name}".replace(
                    "@", "at"
                ).replace(",", "_")
                params[key] = _value(rng, shape, tag)
                want[key] = spec
    path = save_params(params, tmp_path / "w.h5", state={"s": np.arange(4, dtype=np.float32)})

    def shardings(lux_path: str, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        spec = want.get(lux_path.removeprefix("params."))
        return None if spec is None else NamedSharding(mesh, spec)

    got, state = load_params(path, shardings=shardings)
    whole, whole_state = load_params(path)
    assert set(got) == set(whole)
    for key, arr in got.items():
        assert isinstance(arr, jax.Array), key
        assert _bits(arr) == _bits(whole[key]), key
        expected = want[key] if want[key] is not None else P()
        assert arr.sharding == NamedSharding(mesh, expected), key  # None: P() on the mesh
        for shard in arr.addressable_shards:
            assert _bits(shard.data) == _bits(whole[key][shard.index]), key
    assert _bits(state["s"]) == _bits(whole_state["s"])


@pytest.mark.multidevice(devices=4)
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (P("x"), 1.0),  # 2 distinct boxes of rows (each on 2 devices): the dataset once
        (P("x", "y"), 1.0),  # 4 boxes, rows of 256 KiB split in two far-apart halves
        (P(), 1.0),  # replicated: one box, read once for 4 devices
    ],
)
def test_each_distinct_shard_is_read_once_and_only_its_bytes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spec: P, expected: float
) -> None:
    value = np.arange(8 * 65536, dtype=np.float32).reshape(8, 65536)
    path = save_params({"w": value}, tmp_path / "w.h5")
    calls: list[int] = []
    real = sh._pread_into

    def counted(fd: int, view: memoryview, offset: int) -> None:
        calls.append(len(view))
        real(fd, view, offset)

    monkeypatch.setattr(sh, "_pread_into", counted)
    mesh = _mesh("auto")
    got, _ = load_params(path, shardings=(NamedSharding(mesh, spec), None))
    assert _bits(got["w"]) == _bits(value)
    assert sum(calls) == expected * value.nbytes, calls


@pytest.mark.multidevice(devices=4)
@pytest.mark.parametrize(("kind", "layout"), [("explicit", "mlir"), ("auto", "julia")])
@pytest.mark.parametrize("verify", [True, False])
def test_import_lux_sharded_equals_one_device_and_so_does_a_training_step(
    tmp_path: Path, common: ModuleType, kind: str, layout: str, verify: bool
) -> None:
    case = common.mlp_case(tmp_path, widths=[8, 16, 4], batch=4, name="mlp")
    mesh = _mesh(kind)

    def shardings(lux_path: str, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        if lux_path.endswith("weight"):
            return NamedSharding(mesh, P("x", "y"))
        return NamedSharding(mesh, P("y")) if lux_path == "params.layer_1.bias" else None

    model = juliabridge.import_lux(
        case.bundle, layout=layout, verify_checksums=verify, shardings=shardings
    )
    ref = juliabridge.import_lux(case.bundle, layout=layout)
    flat = jax.tree_util.tree_flatten_with_path(model.params)[0]
    ref_flat = dict(jax.tree_util.tree_flatten_with_path(ref.params)[0])
    for keys, leaf in flat:
        assert _bits(leaf) == _bits(ref_flat[keys]), keys
    assert model.params["layer_1"]["weight"].sharding.spec == P("x", "y")
    assert model.params["layer_2"]["bias"].sharding.spec == P()
    x = case.x.T if layout == "julia" else case.x
    y_ref = np.asarray(ref(x))

    def loss(p: Any, xb: Any) -> Any:
        return jnp.sum(model.apply(p, model.state, xb)[0] ** 2)

    def step(p: Any, xb: Any) -> Any:
        g = jax.grad(loss)(p, xb)
        return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g)

    with jax.set_mesh(mesh):
        y = np.asarray(jax.jit(model)(jax.device_put(x, NamedSharding(mesh, P()))))
        new = jax.jit(step)(model.params, jax.device_put(x, NamedSharding(mesh, P())))
    np.testing.assert_allclose(y, y_ref, rtol=1e-6, atol=1e-6)
    one = jax.jit(step)(ref.params, x)
    want = dict(jax.tree_util.tree_flatten_with_path(one)[0])
    for keys, leaf in jax.tree_util.tree_flatten_with_path(new)[0]:
        np.testing.assert_allclose(np.asarray(leaf), np.asarray(want[keys]), rtol=1e-5, atol=1e-6)


@pytest.mark.multidevice(devices=1)
def test_one_device_sharding_and_a_pair_of_trees(tmp_path: Path) -> None:
    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    path = save_params({"a": {"w": value}, "b": (np.ones(2, np.int8),)}, tmp_path / "w.h5")
    dev = make_single_device_sharding(jax.devices()[0])
    got, _ = load_params(path, shardings=({"a": {"w": dev}, "b": (None,)}, None))
    assert _bits(got["a"]["w"]) == _bits(value)
    assert got["a"]["w"].sharding == dev
    got, _ = load_params(path, shardings=dev)
    assert _bits(got["b"][0]) == _bits(np.ones(2, np.int8))


@pytest.mark.multidevice(devices=1)
def test_bad_shardings_are_typed_errors(tmp_path: Path) -> None:
    path = save_params({"a": {"w": np.zeros((3, 4), np.float32)}}, tmp_path / "w.h5")
    with pytest.raises(CallArgumentError, match=r"expected a function .* got int"):
        load_params(path, shardings=3)  # type: ignore[arg-type]
    with pytest.raises(CallArgumentError, match=r"params\.a\.w is missing from the params tree"):
        load_params(path, shardings=({"b": None}, None))
    with pytest.raises(CallArgumentError, match=r"params\.a\.w got a str; expected a jax"):
        load_params(path, shardings=lambda p, s, d: "x")  # type: ignore[arg-type,return-value]
    if jax.device_count() >= 2:
        mesh = jax.make_mesh((2,), ("x",))
        with pytest.raises(CallArgumentError, match=r"shape \[3, 4\] does not fit"):
            load_params(path, shardings=NamedSharding(mesh, P("x")))
    # A spec naming more axes than the array has (JAX's own check is an IndexError).
    mesh1 = jax.make_mesh((1,), ("x",))
    with pytest.raises(CallArgumentError, match=r"params\.a\.w of shape \[3, 4\] \(rank 2\)"):
        load_params(path, shardings=NamedSharding(mesh1, P(None, None, "x")))


@pytest.mark.multidevice(devices=1)
def test_a_hostile_offset_is_refused_before_any_array_is_made(tmp_path: Path) -> None:
    value = np.arange(1024, dtype=np.float32)
    path = save_params({"w": value}, tmp_path / "w.h5")
    whole, _ = load_params(path)
    from juliabridge.bundle.weights import open_weights

    with open_weights(path) as f:
        at = f.metadata.plan("/params/w", None, None, None).offset  # type: ignore[union-attr]
    assert at is not None
    data = bytearray(path.read_bytes())
    where = data.rfind(at.to_bytes(8, "little"), 0, at)  # the layout message's address
    assert where > 0
    data[where : where + 8] = (len(data) * 4).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="lie past the end of the"):
        load_params(path, shardings=make_single_device_sharding(jax.devices()[0]))
    assert _bits(whole["w"]) == _bits(value)


@pytest.mark.multidevice(devices=4)
def test_a_julia_export_directory_is_placed_on_its_shardings(tmp_path: Path) -> None:
    from tests.julia_export_writer import write_julia_export
    from tests.test_julia_export import dense_bn

    root = write_julia_export(tmp_path / "dense_bn", dense_bn())
    mesh = _mesh("auto")
    weight = NamedSharding(mesh, P("x"))
    model = juliabridge.import_lux(
        root, shardings=({"layer_1": {"weight": weight, "bias": None}, "layer_2": None}, None)
    )
    ref = juliabridge.import_lux(root)
    assert model.params["layer_1"]["weight"].sharding == weight
    assert model.params["layer_2"]["scale"].sharding == NamedSharding(mesh, P())
    for (k, a), (_, b) in zip(
        jax.tree_util.tree_flatten_with_path((model.params, model.state))[0],
        jax.tree_util.tree_flatten_with_path((ref.params, ref.state))[0],
        strict=True,
    ):
        assert _bits(a) == _bits(b), k
    x = np.random.default_rng(0).standard_normal((5, 2)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(ref(x)), rtol=1e-6, atol=1e-6)
