"""save_params / load_params / load_into as contracts over their input space (issue 52).

The tree handed to save_params comes back from load_params as the same tree (same nesting, the
same keys, tuples where tuples were, empty containers kept, every leaf's
dtype, shape and bits) for every bundle element type and ranks 0-4; a file whose datasets and
tree record disagree is refused, never silently trimmed; load_into refuses a file whose arrays
are of another type or shape than the model's instead of changing the model. References are the
generated trees themselves, compared leaf by leaf with numpy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.errors import BundleError, SignatureMismatchError
from tests.bundle_factory import make_dense_bn

#: Every element type a weights file stores (bundle-format §3.9), as numpy dtypes.
DTYPES = [
    np.float16,
    ml_dtypes.bfloat16,
    np.float32,
    np.float64,
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.complex64,
    np.complex128,
]

#: Lux field names: ASCII and Unicode, names differing only in case, digits.
NAMES = st.sampled_from(["weight", "Weight", "bias", "layer_1", "Layer_1", "é", "Ω", "x1", "_"])


@st.composite
def arrays(draw: st.DrawFn) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=4)))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        flat = rng.integers(0, 2, n).astype(np.bool_)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        # the extremes too: a narrowing or sign change shows there first
        flat = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        if n:
            flat[0] = info.max
    elif dtype.kind == "c":
        flat = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    else:
        flat = rng.standard_normal(n).astype(dtype)
    return flat.reshape(shape)


def trees(leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Nested dicts (Lux names) and non-empty tuples, with empty dicts (a MaxPool's params)."""

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.dictionaries(NAMES, children, max_size=3) | st.lists(
            children, min_size=1, max_size=3
        ).map(tuple)

    return st.recursive(leaf | st.just({}), extend, max_leaves=6)


def top(tree: Any) -> dict[str, Any]:
    """A params or state tree is a dict at its root (Lux's NamedTuple)."""
    return tree if isinstance(tree, dict) else {"layer_1": tree}


def same_tree(got: Any, want: Any, where: str = "root") -> None:
    """Equal as trees: container kinds, keys in order, leaves' dtype, shape and bits."""
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {type(got).__name__}, expected a dict"
        # as dicts (and jax's trees) compare: the keys, not their order (an empty container is
        # rebuilt before the leaves, so it may move ahead of its siblings)
        assert sorted(got) == sorted(want), f"{where}: keys {list(got)}, expected {list(want)}"
        for k in want:
            same_tree(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, tuple):
        assert isinstance(got, tuple), f"{where}: {type(got).__name__}, expected a tuple"
        assert len(got) == len(want), f"{where}: {len(got)} positions, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            same_tree(g, w, f"{where}.{i + 1}")
    else:
        g, w = np.asarray(got), np.asarray(want)
        assert g.dtype == w.dtype, f"{where}: dtype {g.dtype}, expected {w.dtype}"
        assert g.shape == w.shape, f"{where}: shape {g.shape}, expected {w.shape}"
        assert g.tobytes() == w.tobytes(), f"{where}: values differ"


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(params=trees(arrays()).map(top), state=trees(arrays()).map(top))
def test_every_tree_round_trips(tmp_path: Path, params: Any, state: Any) -> None:
    f = tmp_path / "w.h5"
    juliabridge.save_params(params, f, state=state, overwrite=True)
    got_params, got_state = juliabridge.load_params(f)
    same_tree(got_params, params, "params")
    same_tree(got_state, state, "state")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("rank", range(5))
def test_every_dtype_and_rank_round_trips(tmp_path: Path, dtype: Any, rank: int) -> None:
    shape = (2, 3, 1, 2)[:rank]
    rng = np.random.default_rng(rank)
    d = np.dtype(dtype)
    if d.kind in "iu":
        a = np.full(shape, np.iinfo(d).max, d)
        a.reshape(-1)[::2] = np.iinfo(d).min
    elif d == np.bool_:
        a = rng.integers(0, 2, shape).astype(d)
    else:
        a = (rng.standard_normal(shape) * (1 + 1j if d.kind == "c" else 1)).astype(d)
    tree = {"layer_1": {"weight": a}, "layer_2": {}, "layer_3": ({"x": a}, {})}
    juliabridge.save_params(tree, tmp_path / "w.h5")
    got, state = juliabridge.load_params(tmp_path / "w.h5")
    same_tree(got, tree, "params")
    assert state == {}


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    group=st.sampled_from(["params", "state"]),
    name=st.sampled_from(["extra", "Weight", "WEIGHT", "é", "layer_1/Bias"]),
    dtype=st.sampled_from(DTYPES),
)
def test_a_dataset_outside_the_tree_record_is_refused(
    tmp_path: Path, group: str, name: str, dtype: Any
) -> None:
    f = tmp_path / "w.h5"
    tree = {"layer_1": {"weight": np.ones((2,), np.float32)}}
    juliabridge.save_params(tree, f, state=tree, overwrite=True)
    with h5py.File(f, "a") as h:
        ds = h.create_dataset(f"/{group}/layer_1/{name}", data=np.zeros((1,), np.uint8))
        ds.attrs["dtype"] = "ui8"
    with pytest.raises(BundleError, match=f"tree record of {group} does not match"):
        juliabridge.load_params(f)


@pytest.mark.parametrize("group", ["params", "state"])
def test_a_recorded_dataset_missing_from_the_file_is_refused(tmp_path: Path, group: str) -> None:
    f = tmp_path / "w.h5"
    tree = {"layer_1": {"weight": np.ones((2,), np.float32), "bias": np.zeros((2,), np.float32)}}
    juliabridge.save_params(tree, f, state=tree)
    with h5py.File(f, "a") as h:
        del h[f"/{group}/layer_1/bias"]
    with pytest.raises(BundleError, match=f"tree record of {group} does not match"):
        juliabridge.load_params(f)


@pytest.fixture(scope="module")
def dense_bn(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = make_dense_bn(tmp_path_factory.mktemp("b") / "dense_bn.bundle")
    return juliabridge.import_lux(root, backend="lax")


def _as(tree: Any, dtype: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _as(v, dtype) for k, v in tree.items()}
    return np.asarray(tree).astype(dtype)


def test_load_into_round_trips_the_model(tmp_path: Path, dense_bn: Any) -> None:
    bumped = {k: {n: np.asarray(v) + 1 for n, v in d.items()} for k, d in dense_bn.params.items()}
    juliabridge.save_params(bumped, tmp_path / "w.h5", state=dense_bn.state)
    got = juliabridge.load_into(dense_bn, tmp_path / "w.h5")
    same_tree(jax_numpy(got.params), bumped, "params")
    same_tree(jax_numpy(got.state), jax_numpy(dense_bn.state), "state")


def jax_numpy(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: jax_numpy(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(jax_numpy(v) for v in tree)
    return np.asarray(tree)


@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.float64, np.int32], ids=lambda d: np.dtype(d).name
)
@pytest.mark.parametrize("group", ["params", "state"])
def test_load_into_refuses_another_element_type(
    tmp_path: Path, dense_bn: Any, dtype: Any, group: str
) -> None:
    params, state = jax_numpy(dense_bn.params), jax_numpy(dense_bn.state)
    if group == "params":
        params = _as(params, dtype)
    else:
        state = _as(state, dtype)
    juliabridge.save_params(params, tmp_path / "w.h5", state=state)
    with pytest.raises(SignatureMismatchError, match=f"{np.dtype(dtype).name}.* in the file but"):
        juliabridge.load_into(dense_bn, tmp_path / "w.h5")
    assert all(np.asarray(v).dtype == np.float32 for v in _leaves(dense_bn.params))


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    return [tree]


def test_load_into_refuses_another_shape(tmp_path: Path, dense_bn: Any) -> None:
    params = jax_numpy(dense_bn.params)
    params["layer_1"]["bias"] = np.concatenate([params["layer_1"]["bias"], [0.0]]).astype(
        np.float32
    )
    juliabridge.save_params(params, tmp_path / "w.h5", state=jax_numpy(dense_bn.state))
    with pytest.raises(SignatureMismatchError, match=r"params\.layer_1\.bias is float32\[4\]"):
        juliabridge.load_into(dense_bn, tmp_path / "w.h5")
