"""Sharded loading: each process creates only its own shards of every parameter and state array.

`import_lux(path, shardings=...)` and `load_params(path, shardings=...)` hand their arrays here.
Each array is made with `jax.make_array_from_callback`; before that, the boxes of the array
that this process's devices hold (`Sharding.addressable_devices_indices_map`, each distinct box
once) are read from the weights file by `bundle.weights.sharded` (their byte ranges, or one
verified pass over the dataset when it has a digest; see that module). A process never holds
a whole array it does not own, only its boxes of one dataset at a time besides those placed.

`shardings` is one of:

- a callable ``(lux_path, shape, dtype) -> Sharding | None``: `lux_path` is the argument's label
  (``"params.layer_1.weight"``, ``"state.layer_2.running_mean"``; a load_params file's
  positions read ``"params.1.weight"``), `shape` the array's shape in the layout loaded and
  `dtype` its numpy dtype;
- a pair ``(params_shardings, state_shardings)`` of trees shaped like ``(params, state)`` whose
  leaves are Shardings or None; as with JAX's prefix trees, a Sharding or None in place of a
  subtree applies to every array below it;
- one `jax.sharding.Sharding` for every array.

None means replicated over the mesh of the first `NamedSharding` given (``P()`` on it), or,
when none is, the first local device, as a load without `shardings` places it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding, make_single_device_sharding

from ..bundle import Bundle
from ..bundle.manifest import ArgumentEntry
from ..bundle.weights import ReadRequest, WeightsReader
from ..bundle.weights.sharded import Box, box_of, open_shards
from ..errors import CallArgumentError
from ..support import dtypes

__all__ = ["ShardingSpec", "load_requests", "place_arguments", "read_bundle"]

#: What `shardings=` takes (see the module's docstring).
ShardingSpec = (
    Callable[[str, tuple[int, ...], np.dtype], Sharding | None] | Sharding | tuple[Any, Any]
)


@dataclass(frozen=True)
class _Leaf:
    """One array to place: its tree ("params"/"state"), path steps, label, shape and dtype as
    loaded, and whether it is loaded transposed (Julia's layout) from its MLIR-order data."""

    group: str
    steps: tuple[str | int, ...]
    label: str
    shape: tuple[int, ...]
    dtype: np.dtype
    transposed: bool = False


def _lookup(tree: Any, leaf: _Leaf) -> Any:
    node = tree
    for step in leaf.steps:
        if node is None or isinstance(node, Sharding):  # a prefix: for everything below
            return node
        try:
            if isinstance(node, (tuple, list)):
                node = node[(step if isinstance(step, int) else int(step)) - 1]
            else:
                node = node[step]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise CallArgumentError(
                f"shardings: {leaf.label} is missing from the {leaf.group} tree of shardings "
                f"(no {step!r} there); pass trees shaped like (model.params, model.state), with "
                "None where the default placement will do"
            ) from e
    return node


def _one(spec: Any, leaf: _Leaf) -> Any:
    if isinstance(spec, Sharding):
        return spec
    if callable(spec):
        return spec(leaf.label, leaf.shape, leaf.dtype)
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        return _lookup(spec[0 if leaf.group == "params" else 1], leaf)
    raise CallArgumentError(
        f"shardings: expected a function (lux_path, shape, dtype) -> Sharding or None, a pair "
        f"(params_shardings, state_shardings) of trees, or one Sharding; got "
        f"{type(spec).__name__}"
    )


def resolve(spec: Any, leaves: Sequence[_Leaf]) -> list[Sharding]:
    """The Sharding of every leaf (None replaced by the default), each checked against the
    leaf's shape.

    Raises:
        CallArgumentError: a spec of another kind, a leaf missing from a tree of shardings, a
            value that is not a Sharding, or a Sharding that does not fit the array's shape.
    """
    got = [_one(spec, leaf) for leaf in leaves]
    for leaf, s in zip(leaves, got, strict=True):
        if s is not None and not isinstance(s, Sharding):
            raise CallArgumentError(
                f"shardings: {leaf.label} got a {type(s).__name__}; expected a "
                "jax.sharding.Sharding (e.g. NamedSharding(mesh, P('model'))) or None"
            )
    mesh = next((s.mesh for s in got if isinstance(s, NamedSharding)), None)
    default: Sharding = (
        NamedSharding(mesh, PartitionSpec())
        if mesh is not None
        else make_single_device_sharding(jax.local_devices()[0])
    )
    out = []
    for leaf, s in zip(leaves, got, strict=True):
        s = default if s is None else s
        if isinstance(s, NamedSharding) and len(s.spec) > len(leaf.shape):
            # JAX's own check of this is an IndexError from deep inside (jax 0.10.2).
            raise CallArgumentError(
                f"shardings: {leaf.label} of shape {list(leaf.shape)} (rank {len(leaf.shape)}) "
                f"got {s.spec}, which names {len(s.spec)} axes; give a PartitionSpec of at most "
                "the array's rank, or None for it"
            )
        try:
            s.shard_shape(leaf.shape)
        except (ValueError, TypeError) as e:
            raise CallArgumentError(
                f"shardings: {leaf.label} of shape {list(leaf.shape)} does not fit {s} ({e}); "
                "split only axes whose length the mesh axes divide, or pass None for it"
            ) from e
        out.append(s)
    return out


def build(
    leaf: _Leaf, sharding: Sharding, read: Callable[[list[Box]], list[np.ndarray]]
) -> jax.Array:
    """`leaf`'s global array on `sharding`, from `read(boxes)`: the arrays of the given boxes
    in MLIR order (this process's distinct boxes, read once each)."""
    shape = leaf.shape
    boxes: dict[Box, None] = {}
    for index in sharding.addressable_devices_indices_map(shape).values():
        boxes[box_of(index or (), shape, leaf.label)] = None
    wanted = list(boxes)
    mlir = [tuple(reversed(b)) for b in wanted] if leaf.transposed else wanted
    arrays = read(mlir)
    got = {b: (a.T if leaf.transposed else a) for b, a in zip(wanted, arrays, strict=True)}
    del arrays

    def shard(index: Any) -> np.ndarray:
        return got[box_of(index, shape, leaf.label)]

    out = jax.make_array_from_callback(shape, sharding, shard, dtype=leaf.dtype)
    got.clear()
    return out


def _leaf_of(a: ArgumentEntry, layout: str) -> _Leaf:
    julia = layout == "julia"
    shape = tuple(reversed(a.shape)) if julia else tuple(a.shape)
    group = "params" if a.role == "parameter" else "state"
    return _Leaf(group, tuple(a.path), a.label, shape, dtypes.to_numpy(a.dtype), julia)


def read_bundle(
    bundle: Bundle, spec: Any, layout: str
) -> Iterator[tuple[ArgumentEntry, jax.Array]]:
    """(argument, global array) for every parameter and state of `bundle`, each process
    reading only its boxes (lazily: nothing is read before the first item is asked for).

    Raises:
        CallArgumentError: `spec` does not give a Sharding fitting every array.
        BundleError, ChecksumError: as `Bundle.read_weights`.
    """
    args = [a for a in bundle.manifest.arguments if a.role != "input" and a.dataset]
    requests = bundle.weight_requests()
    leaves = [_leaf_of(a, layout) for a in args]
    shardings = resolve(spec, leaves)
    with bundle.open_weights(requests) as f:
        yield from _read(f, requests, args, leaves, shardings)


def _read(
    f: WeightsReader,
    requests: Sequence[ReadRequest],
    keys: Sequence[Any],
    leaves: Sequence[_Leaf],
    shardings: Sequence[Sharding],
) -> Iterator[tuple[Any, jax.Array]]:
    with open_shards(f) as shards:
        plans = shards.plans(requests)
        for key, r, leaf, s in zip(keys, requests, leaves, shardings, strict=True):

            def read(boxes: list[Box], r: ReadRequest = r) -> list[np.ndarray]:
                return shards.read(r, plans[r.dataset], boxes)

            yield key, build(leaf, s, read)


def place_arguments(
    weights: Iterable[tuple[ArgumentEntry, Any]], spec: Any, layout: str
) -> list[tuple[ArgumentEntry, jax.Array]]:
    """Every (argument, array) of `weights` on its sharding: arrays `read_bundle` made pass
    through, host arrays (MLIR order; a Julia export directory's) are split here."""
    items = list(weights)
    host = [(a, x) for a, x in items if not isinstance(x, jax.Array)]
    if not host:
        return items
    leaves = [_leaf_of(a, layout) for a, _ in host]
    placed = {}
    for (a, x), leaf, s in zip(host, leaves, resolve(spec, leaves), strict=True):

        def read(boxes: list[Box], x: np.ndarray = x) -> list[np.ndarray]:
            return [x[tuple(slice(lo, hi) for lo, hi in b)] for b in boxes]

        placed[a.index] = build(leaf, s, read)
    return [(a, placed.get(a.index, x)) for a, x in items]


def load_requests(
    f: WeightsReader, requests: Sequence[ReadRequest], spec: Any
) -> Iterator[tuple[ReadRequest, jax.Array]]:
    """(request, global array) for `load_params`: datasets /params/... and /state/..., each
    process reading only its boxes.

    Raises:
        CallArgumentError: `spec` does not give a Sharding fitting every array.
        X64DisabledError: a 64-bit dataset while jax_enable_x64 is off.
        BundleError, ChecksumError: as `WeightsReader.read`.
    """
    dtypes.require_x64({r.where: r.dtype for r in requests}, f"{f.path}")
    leaves = []
    for r in requests:
        group, *steps = r.dataset.strip("/").split("/")
        leaves.append(_Leaf(group, tuple(steps), r.where, tuple(r.shape), dtypes.to_numpy(r.dtype)))
    yield from _read(f, requests, requests, leaves, resolve(spec, leaves))
