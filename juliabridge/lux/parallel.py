"""Data parallelism for imported models: each device runs the module on its slice of the batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..errors import CallArgumentError
from .trees import build_tree

if TYPE_CHECKING:
    from ..bundle.manifest import ArgumentEntry, Manifest


def data_parallel_apply(model: Any, mesh: Mesh, axis: str) -> Callable[..., tuple[Any, Any]]:
    """An ``apply(params, state, *inputs)`` that splits the batch over mesh axis `axis`.

    Parameters and state are replicated; each device calls the module on its own samples
    (through shard_map, so no device gathers the batch), serving any per-device batch size.
    Needs a model whose samples are independent (e.g. test mode).

    Args:
        model: a LuxModel.
        mesh: the device mesh.
        axis: the name of the mesh axis the batch is split over.

    Returns:
        ``apply(params, state, *inputs) -> (outputs, new_state)``: one jitted program; called
        with concrete arrays, it first places them on the mesh (from whatever devices they
        are on), and under an outer jit it only constrains their placement.

    Raises:
        CallArgumentError: the model's samples are not independent, `mesh` is not a Mesh or
            has no `axis`; when called, a batch the axis's devices do not divide.
    """
    m = model.manifest
    _check_model_and_mesh(m, mesh, axis)
    devices = int(mesh.shape[axis])
    entries = [a for a in m.arguments if a.role == "input"]
    in_specs = [_batch_spec(model.layout, axis, len(a.shape), a.batch_axis) for a in entries]
    sharded = jax.shard_map(
        model.apply,
        mesh=mesh,
        in_specs=(P(), P(), *in_specs),
        out_specs=(_output_spec(model, axis), P()),
        # The module is opaque to JAX's varying-axes typing; without this check, shard_map
        # treats replicated inputs conservatively and psums their cotangents.
        check_vma=False,
    )
    replicated = NamedSharding(mesh, P())
    input_shardings = [NamedSharding(mesh, s) for s in in_specs]

    def run(params: Any, state: Any, *inputs: Any) -> tuple[Any, Any]:
        # Under jit, device_put constrains the placement shard_map expects.
        params, state, placed = _place(params, state, inputs, replicated, input_shardings)
        return sharded(params, state, *placed)

    jitted = jax.jit(run)

    def call(params: Any, state: Any, *inputs: Any) -> tuple[Any, Any]:
        _check_divisible(m.name, entries, in_specs, inputs, axis, devices)
        leaves = jax.tree.leaves((params, state, inputs))
        if not any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
            # Inside jit, device_put cannot move arrays committed to devices elsewhere (JAX
            # refuses them as incompatible devices), so concrete arguments move here first.
            params, state, moved = _place(params, state, inputs, replicated, input_shardings)
            inputs = tuple(moved)
        return jitted(params, state, *inputs)

    return call


def _check_model_and_mesh(m: Manifest, mesh: Any, axis: str) -> None:
    """Refuse a model whose samples are not independent, a `mesh` that is not a Mesh, and an
    `axis` the mesh does not have."""
    if m.batch is None or not m.batch.samples_independent:
        raise CallArgumentError(
            f"{m.name}: data parallelism splits the batch over devices, which needs a model whose "
            "samples are independent (manifest batch.samples_independent); this one is not "
            "(e.g. BatchNorm in train mode)"
        )
    if not isinstance(mesh, Mesh):
        raise CallArgumentError(
            f"{m.name}: data_parallel needs a jax.sharding.Mesh (e.g. jax.make_mesh((n,), "
            f"('data',))), got a {type(mesh).__name__}"
        )
    if axis not in mesh.axis_names:
        raise CallArgumentError(
            f"{m.name}: the mesh has axes {tuple(mesh.axis_names)}, not {axis!r}; pass one of "
            f"them as the batch axis, or build the mesh with an axis named {axis!r}"
        )


def _batch_spec(layout: str, axis: str, rank: int, batch_axis: int | None) -> P:
    """The PartitionSpec splitting an array's batch axis (the manifest's, Julia-numbered in the
    julia layout) over mesh `axis`; replicated without one."""
    if batch_axis is None:
        return P()
    pos = rank - 1 - batch_axis if layout == "julia" else batch_axis
    return P(*[axis if i == pos else None for i in range(rank)])


def _output_spec(model: Any, axis: str) -> Any:
    """The PartitionSpec tree of the model's outputs: results and aliased arguments."""
    m = model.manifest
    out_leaves = []
    for r in m.results:
        for p in r.paths:
            if p[0] == "output":
                out_leaves.append(
                    (p[1:], _batch_spec(model.layout, axis, len(r.shape), r.batch_axis))
                )
    for al in m.aliases:
        if al.path[0] == "output":
            a = m.arguments[al.argument]
            out_leaves.append(
                (al.path[1:], _batch_spec(model.layout, axis, len(a.shape), a.batch_axis))
            )
    return build_tree(out_leaves)


def _check_divisible(
    name: str,
    entries: list[ArgumentEntry],
    in_specs: list[P],
    inputs: tuple[Any, ...],
    axis: str,
    devices: int,
) -> None:
    """Refuse a batch the axis's `devices` do not divide, in juliabridge's words."""
    # device_put would raise JAX's IndivisibleError (a ValueError) or, on Explicit axes,
    # a bare ValueError; the batch size is known from the shapes, traced or not.
    for a, x, s in zip(entries, inputs, in_specs):
        shape = jnp.shape(x)
        if axis not in s or len(shape) != len(s):
            continue  # no batch axis, or a wrong rank the model itself reports
        pos = tuple(s).index(axis)
        n = int(shape[pos])
        if n % devices:
            fit = -(-n // devices) * devices
            raise CallArgumentError(
                f"{name}: data_parallel splits {a.label} over mesh axis {axis!r} of "
                f"{devices} devices along its batch axis ({pos}), so the batch must be a "
                f"multiple of {devices}; got {n} samples. Pad the batch to {fit} (and "
                f"drop the extra outputs) or call with a multiple of {devices}"
            )


def _place(
    params: Any,
    state: Any,
    inputs: tuple[Any, ...],
    replicated: NamedSharding,
    input_shardings: list[NamedSharding],
) -> tuple[Any, Any, list[Any]]:
    """Parameters and state replicated, each input split as its sharding says."""
    return (
        jax.device_put(params, replicated),
        jax.device_put(state, replicated),
        [jax.device_put(x, s) for x, s in zip(inputs, input_shardings)],
    )
