"""Placing arrays as the export's .py would: each mesh of the .py built from the user's devices,
each argument put with its PartitionSpec (both already reversed to row-major by Reactant,
EnzymeJAX.jl:282-290 and 303-311)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import jax
import numpy as np

from ..errors import CallArgumentError
from ..support.shown import clipped
from .pyscript import ExportScript


class HasScript(Protocol):
    """What `place` reads of an export (directory.ReactantExport is one): its parsed .py.
    A protocol, so that directory.py, which calls `place`, is not imported back."""

    @property
    def script(self) -> ExportScript:
        """The export's .py, read as data."""
        ...


def place(
    export: HasScript, inputs: Sequence[Any], devices: Sequence[Any] | None = None
) -> tuple[Any, ...]:
    """Put `inputs` on meshes of `devices` with the .py's NamedShardings.

    Args:
        export: the export whose .py records the meshes and PartitionSpecs.
        inputs: one array per @main argument.
        devices: devices for the meshes (default ``jax.devices()``); each mesh takes the first
            product-of-axis-sizes of them.

    Returns:
        The arrays, placed (arguments the .py does not shard are plain jax arrays).

    Raises:
        CallArgumentError: wrong number of inputs, too few devices for a mesh, or a spec that
            does not fit an array's rank.
    """
    script = export.script
    if len(inputs) != len(script.arguments):
        raise CallArgumentError(
            f"{script.path}: {len(script.arguments)} arguments, got {len(inputs)} arrays"
        )
    devs = list(jax.devices() if devices is None else devices)
    meshes = {}
    for m in script.meshes.values():
        need = int(np.prod(m.axis_sizes, dtype=np.int64))
        if need > len(devs):
            axes = dict(zip(m.axis_names, m.axis_sizes))
            raise CallArgumentError(
                f"{script.path}: {m.name} needs {need} devices ({axes}), only {len(devs)} "
                "given; pass devices= or run on a machine with more"
            )
        try:  # read_script bounds the axes; a mesh numpy or JAX still refuses stays typed
            grid = np.array(devs[:need], dtype=object).reshape(m.axis_sizes)
            meshes[m.name] = jax.sharding.Mesh(grid, m.axis_names)
        except (ValueError, TypeError) as e:
            raise CallArgumentError(
                f"{script.path}: {m.name} ({len(m.axis_sizes)} axes) cannot be built from "
                f"{need} devices ({type(e).__name__}: {clipped(str(e), 200)})"
            ) from e
    out = []
    for k, x in enumerate(inputs):
        p = script.placements.get(k)
        if p is None or p.kind != "NamedSharding" or p.mesh is None:
            out.append(jax.numpy.asarray(x))
            continue
        if len(p.spec) > np.ndim(x):
            raise CallArgumentError(
                f"{script.path}: {script.arguments[k].name}'s PartitionSpec {p.spec} has more "
                f"entries than the array's {np.ndim(x)} dims"
            )
        sharding = jax.sharding.NamedSharding(meshes[p.mesh], jax.sharding.PartitionSpec(*p.spec))
        try:
            out.append(jax.device_put(x, sharding))
        except ValueError as e:
            raise CallArgumentError(
                f"{script.path}: {script.arguments[k].name} cannot be placed with {p.spec} ({e})"
            ) from e
    return tuple(out)


__all__ = ["place"]
