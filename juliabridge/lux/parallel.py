"""Data parallelism for imported models: each device runs the module on its slice of the batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
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
        CallArgumentError: the model's samples are not independent, or `mesh` has no `axis`.
    """
    m = model.manifest
    if m.batch is None or not m.batch.samples_independent:
        raise CallArgumentError(
            f"{m.name}: data parallelism splits the batch over devices, which needs a model whose "
            "samples are independent (manifest batch.samples_independent); this one is not "
            "(e.g. BatchNorm in train mode)"
        )
    if axis not in mesh.axis_names:
        raise CallArgumentError(f"mesh has axes {mesh.axis_names}, not {axis!r}")

    def spec(rank: int, batch_axis: int | None) -> P:
        if batch_axis is None:
            return P()
        pos = rank - 1 - batch_axis if model.layout == "julia" else batch_axis
        return P(*[axis if i == pos else None for i in range(rank)])

    in_specs = [spec(len(a.shape), a.batch_axis) for a in m.arguments if a.role == "input"]
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
        leaves = jax.tree.leaves((params, state, inputs))
        if not any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
            # Inside jit, device_put cannot move arrays committed to devices elsewhere (JAX
            # refuses them as incompatible devices), so concrete arguments move here first.
            params, state, moved = place(params, state, inputs)
            inputs = tuple(moved)
        return jitted(params, state, *inputs)

    return call
