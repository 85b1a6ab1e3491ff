"""What a new user meets first (issue 40): weights back into a model with the same tree, a half
bundle named whole, shape advice for channels-last and wrong-rank inputs, save_params given the
wrong object. References are written here from the trees and shapes, not read back from code."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge import BundleError, CallArgumentError, SignatureMismatchError
from juliabridge.examples import lenet_bundle
from juliabridge.examples.luxmodels import build_bundle

LEAF_DTYPES = [np.float32, np.float64, np.int32, np.uint8, np.bool_, np.complex64, np.float16]


@pytest.fixture(scope="module")
def lenet() -> juliabridge.LuxModel:
    return juliabridge.import_lux(lenet_bundle())


def _paths(tree: Any) -> list[tuple[str, tuple[int, ...], str]]:
    """Every leaf as (key path, shape, dtype), with tuple positions and dict keys distinct."""
    return [
        (jax.tree_util.keystr(p), np.shape(v), str(np.asarray(v).dtype))
        for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]
    ]


def test_load_params_gives_the_models_own_tree_back(
    lenet: juliabridge.LuxModel, tmp_path: Path
) -> None:
    target = juliabridge.save_params(lenet, tmp_path / "w.h5")
    params, state = juliabridge.load_params(target)
    # The LeNet params have empty layers (pools, flatten): they must come back too.
    assert jax.tree.structure(params) == jax.tree.structure(lenet.params)
    assert list(params) == list(lenet.params)  # Lux's layer order
    assert params["layer_2"] == {}
    assert jax.tree.structure(state) == jax.tree.structure(lenet.state)
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(lenet.params), strict=True):
        np.testing.assert_array_equal(got, np.asarray(want))
    from_bundle, _ = juliabridge.load_params(lenet_bundle())
    assert jax.tree.structure(from_bundle) == jax.tree.structure(lenet.params)


_names = st.text("abcxyz_", min_size=1, max_size=4)


@st.composite
def _trees(draw: Any, depth: int = 0) -> Any:
    """Lux-like trees: dicts by name, tuples by position, empty containers, array leaves."""
    kind = draw(st.sampled_from(["leaf", "dict", "tuple", "empty"] if depth < 3 else ["leaf"]))
    if kind == "leaf":
        dtype = draw(st.sampled_from(LEAF_DTYPES))
        shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        return (np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) % 2).astype(dtype)
    if kind == "empty":
        return {}
    n = draw(st.integers(1, 3))
    children = [draw(_trees(depth + 1)) for _ in range(n)]
    if kind == "tuple":
        return tuple(children)
    keys = draw(st.lists(_names, min_size=n, max_size=n, unique=True))
    return dict(zip(keys, children, strict=True))


@settings(max_examples=30, deadline=None)
@given(params=st.dictionaries(_names, _trees(), min_size=1, max_size=3))
def test_save_then_load_keeps_any_tree(params: dict[str, Any], tmp_path_factory: Any) -> None:
    if not jax.tree.leaves(params):
        params = {**params, "w": np.zeros(2, np.float32)}
    path = tmp_path_factory.mktemp("t") / "w.h5"
    juliabridge.save_params(params, path)
    got, state = juliabridge.load_params(path)
    assert state == {}
    assert jax.tree.structure(got) == jax.tree.structure(params)
    assert _paths(got) == _paths(params)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("layout", ["mlir", "julia"])
def test_load_into_a_model_checks_and_places_every_leaf(layout: str, tmp_path: Path) -> None:
    model = juliabridge.import_lux(lenet_bundle(), layout=layout)
    doubled = jax.tree.map(lambda a: a * 2, model.params)
    juliabridge.save_params(doubled, tmp_path / "w.h5", state=model.state, layout=layout)
    loaded = juliabridge.load_into(model, tmp_path / "w.h5")
    assert loaded is not model and loaded.params is not model.params
    for got, want in zip(jax.tree.leaves(loaded.params), jax.tree.leaves(doubled), strict=True):
        assert isinstance(got, jax.Array)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    x = np.ones((4, 1, 28, 28), np.float32)
    if layout == "julia":
        x = x.T
    # Two programs (the call with the loaded params, apply with `doubled` as arguments) that
    # XLA may fuse and sum in different orders (jaxlib 0.12.1 differs by 1.3e-6 relative on
    # LeNet); the leaves themselves are compared bit for bit above.
    np.testing.assert_allclose(
        np.asarray(loaded(x)), np.asarray(model.apply(doubled, model.state, x)[0]), rtol=1e-5
    )


def test_load_into_names_what_differs(lenet: juliabridge.LuxModel, tmp_path: Path) -> None:
    other = {k: dict(v) for k, v in lenet.params.items()}
    other["layer_1"]["bias"] = np.zeros(7, np.float32)
    juliabridge.save_params(other, tmp_path / "shape.h5", state=lenet.state)
    with pytest.raises(SignatureMismatchError, match=r"params\.layer_1\.bias is float32\[7\]"):
        juliabridge.load_into(lenet, tmp_path / "shape.h5")
    del other["layer_7"]
    juliabridge.save_params(other, tmp_path / "tree.h5", state=lenet.state)
    with pytest.raises(SignatureMismatchError, match=r"missing from the file: \['params\.layer_7"):
        juliabridge.load_into(lenet, tmp_path / "tree.h5")
    with pytest.raises(CallArgumentError, match="load_params"):
        juliabridge.load_into(lenet.params, tmp_path / "tree.h5")


def test_load_into_the_wrappers(lenet: juliabridge.LuxModel, tmp_path: Path) -> None:
    import juliabridge.equinox as jeqx
    import juliabridge.flax as jflax

    halved = jax.tree.map(lambda a: a / 2, lenet.params)
    juliabridge.save_params(halved, tmp_path / "w.h5", state=lenet.state)
    emod = jeqx.LuxModule(lenet)
    new = juliabridge.load_into(emod, tmp_path / "w.h5")
    assert type(new) is type(emod) and new is not emod
    np.testing.assert_array_equal(new.params["layer_7"]["bias"], halved["layer_7"]["bias"])
    np.testing.assert_array_equal(emod.params["layer_7"]["bias"], lenet.params["layer_7"]["bias"])
    fmod = jflax.LuxModule(lenet)
    assert juliabridge.load_into(fmod, tmp_path / "w.h5") is fmod
    np.testing.assert_array_equal(
        fmod.params["layer_7"]["bias"].get_value(), halved["layer_7"]["bias"]
    )


def test_a_damaged_tree_record_is_a_bundle_error(tmp_path: Path) -> None:
    import h5py

    path = juliabridge.save_params({"a": np.ones(2, np.float32)}, tmp_path / "w.h5")
    with h5py.File(path, "r+") as f:
        del f["juliabridge/tree"]
        f.create_dataset("juliabridge/tree", data=np.frombuffer(b'{"params": 3}', np.uint8))
        f["juliabridge/tree"].attrs["dtype"] = "ui8"
    with pytest.raises(BundleError, match="tree record"):
        juliabridge.load_params(path)


def test_a_half_bundle_names_every_missing_file(tmp_path: Path) -> None:
    bundle = tmp_path / "b.bundle"
    shutil.copytree(lenet_bundle(), bundle)
    names = [p.name for p in bundle.iterdir() if p.name not in ("manifest.json",)]
    assert len(names) >= 3
    for name in names[:-1]:
        (bundle / name).unlink()
    with pytest.raises(BundleError) as e:
        juliabridge.import_lux(bundle)
    for name in names[:-1]:
        assert name in str(e.value)
    assert f"{len(names) - 1} files" in str(e.value)


def test_channels_last_and_rank_advice(lenet: juliabridge.LuxModel) -> None:
    with pytest.raises(
        CallArgumentError, match=r"channels-last \(N, H, W, C\).*moveaxis\(x, -1, 1\)"
    ):
        lenet(np.zeros((7, 28, 28, 1), np.float32))
    with pytest.raises(CallArgumentError) as e:
        lenet(np.zeros((1, 28, 28), np.float32))
    assert "shape (N, 1, 28, 28): any batch size N on axis 0 (traced with N=4)" in str(e.value)
    with pytest.raises(CallArgumentError) as e:
        lenet(np.zeros((4, 2, 28, 28), np.float32))  # a wrong channel count is not channels-last
    assert "channels-last" not in str(e.value)


def test_save_params_names_the_wrapper_an_outer_module_holds(
    lenet: juliabridge.LuxModel, tmp_path: Path
) -> None:
    import equinox as eqx

    import juliabridge.equinox as jeqx

    class Net(eqx.Module):  # type: ignore[misc]
        body: Any

        def __init__(self) -> None:
            self.body = jeqx.LuxModule(lenet)

    with pytest.raises(CallArgumentError, match=r"holds a juliabridge wrapper at \.body"):
        juliabridge.save_params(Net(), tmp_path / "w.h5")


def test_train_mode_state_round_trips(tmp_path: Path) -> None:
    model = juliabridge.import_lux(
        build_bundle("batchnorm_train", tmp_path / "bn.bundle", batch=6, seed=0)
    )
    juliabridge.save_params(model, tmp_path / "w.h5")
    loaded = juliabridge.load_into(model, tmp_path / "w.h5")
    assert jax.tree.structure(loaded.state) == jax.tree.structure(model.state)
