"""Data parallelism for imported models: each device runs the module on its slice of the batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..errors import CallArgumentError
from .trees import build_tree


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
    devices = int(mesh.shape[axis])

    def spec(rank: int, batch_axis: int | None) -> P:
        if batch_axis is None:
            return P()
        pos = rank - 1 - batch_axis if model.layout == "julia" else batch_axis
        return P(*[axis if i == pos else None for i in range(rank)])

    entries = [a for a in m.arguments if a.role == "input"]
    in_specs = [spec(len(a.shape), a.batch_axis) for a in entries]

    def check_divisible(inputs: tuple[Any, ...]) -> None:
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
                    f"{m.name}: data_parallel splits {a.label} over mesh axis {axis!r} of "
                    f"{devices} devices along its batch axis ({pos}), so the batch must be a "
                    f"multiple of {devices}; got {n} samples. Pad the batch to {fit} (and "
                    f"drop the extra outputs) or call with a multiple of {devices}"
                )

    out_leaves = []
    for r in m.results:
        for p in r.paths:
            if p[0] == "output":
                out_leaves.append((p[1:], spec(len(r.shape), r.batch_axis)))
    for al in m.aliases:
        if al.path[0] == "output":
            a = m.arguments[al.argument]
            out_leaves.append((al.path[1:], spec(len(a.shape), a.batch_axis)))
    out_spec = build_tree(out_leaves)

    def local(params: Any, state: Any, *inputs: Any) -> tuple[Any, Any]:
        return model.apply(params, state, *inputs)

    sharded = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(), P(), *in_specs),
        out_specs=(out_spec, P()),
        # The module is opaque to JAX's varying-axes typing; without this check, shard_map
        # treats replicated inputs conservatively and psums their cotangents.
        check_vma=False,
    )
    replicated = NamedSharding(mesh, P())

    input_shardings = [NamedSharding(mesh, s) for s in in_specs]

    def place(params: Any, state: Any, inputs: tuple[Any, ...]) -> tuple[Any, Any, list[Any]]:
        return (
            jax.device_put(params, replicated),
            jax.device_put(state, replicated),
            [jax.device_put(x, s) for x, s in zip(inputs, input_shardings)],
        )

    def run(params: Any, state: Any, *inputs: Any) -> tuple[Any, Any]:
        # Under jit, device_put constrains the placement shard_map expects.
        params, state, placed = place(params, state, inputs)
        return sharded(params, state, *placed)

    jitted = jax.jit(run)

    def call(params: Any, state: Any, *inputs: Any) -> tuple[Any, Any]:
        check_divisible(inputs)
        leaves = jax.tree.leaves((params, state, inputs))
        if not any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
            # Inside jit, device_put cannot move arrays committed to devices elsewhere (JAX
            # refuses them as incompatible devices), so concrete arguments move here first.
            params, state, moved = place(params, state, inputs)
            inputs = tuple(moved)
        return jitted(params, state, *inputs)

    return call
