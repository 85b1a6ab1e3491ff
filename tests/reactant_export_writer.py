"""Writes directories in the layout of Reactant's ``Serialization.export_to_enzymejax``.

Written from Reactant.jl (commit 76fdaf0e) src/serialization/EnzymeJAX.jl: file names at
128-132, 169 and 175; one entry per traced argument with path
``"arg." * join(string.(path), ".")`` at 142-166; the .py template at 230-422 (Julia's
triple-quoted strings dedented by hand here); and ext/ReactantNPZExt.jl:9-22 for the npz
(arrays are saved in row-major order, i.e. as @main takes them; np.savez stands in for NPZ.jl's
npzwrite).

A path holds whatever Reactant's tracer appended (src/Tracing.jl, ``append_path(path, k)``):
integer field/tuple/array positions, symbols (``:re``/``:im`` of a Complex, ``:contents`` of a
``Core.Box``, and Lux's ``:ps``/``:st``/``:st_any`` of a StatefulLuxLayer, Lux
ext/ReactantExt/tracing.jl) and Dict keys; each is printed with ``string``, so here a path is
a sequence of ints and strs printed with ``str``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class ArgInfo:
    """One traced argument: its path (1-based position, then what the tracer appended: ints,
    symbols and Dict keys as str) and value (row-major)."""

    path: Sequence[int | str]
    value: np.ndarray
    #: (mesh key, axis sizes, axis names, partition spec), Julia order, as Reactant holds them.
    sharding: tuple[str, tuple[int, ...], tuple[str, ...], tuple[str | None, ...]] | None = None
    kind: str = "NamedSharding"


@dataclass
class Export:
    function_name: str
    mlir_text: str
    args: list[ArgInfo] = field(default_factory=list)
    export_data_as_npz: bool = True


def _jtuple(shape: Sequence[int]) -> str:
    # Julia's printing of a tuple of Ints.
    return f"({shape[0]},)" if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"


def render_script(e: Export, fnid: int = 0) -> str:
    """The .py text the template produces (EnzymeJAX.jl:230-422)."""
    name = e.function_name.replace("!", "_")
    mlir_rel = f"{name}_{fnid}.mlir"
    input_rel = f"{name}_{fnid}_inputs.npz"
    arg_names = [f"arg{i}" for i in range(1, len(e.args) + 1)]
    arg_list = ", ".join(arg_names)
    infos = []
    for a in e.args:
        shape = tuple(np.shape(a.value))  # row-major = reverse(size) in Julia
        dt = np.asarray(a.value).dtype.name
        infos.append((shape, dt, "arg." + ".".join(map(str, a.path))))
    arg_docs = "\n".join(
        f"        {n}: Array of shape {_jtuple(s)} and dtype {d}. Path: {p}"
        for n, (s, d, p) in zip(arg_names, infos)
    )
    size_checks = [
        f'assert {n}.shape == {_jtuple(s)}, f"Expected shape of {n} to be {_jtuple(s)}. '
        f'Got {{{n}.shape}} (path: {p})"'
        for n, (s, d, p) in zip(arg_names, infos)
    ]
    dtype_checks = [
        f"assert {n}.dtype == np.dtype('{d}'), f\"Expected dtype of {n} to be {d}. "
        f'Got {{{n}.dtype}} (path: {p})"'
        for n, (s, d, p) in zip(arg_names, infos)
    ]
    sharded = any(a.sharding is not None for a in e.args)
    calls: list[str] = []
    if sharded:
        meshes: dict[str, str] = {}
        for n, a in zip(arg_names, e.args):
            if a.sharding is None:
                continue
            key, sizes, axes, spec = a.sharding
            if key not in meshes:
                meshes[key] = f"mesh{len(meshes)}"
                sz = ", ".join(str(x) for x in reversed(sizes))
                ax = ", ".join(reversed([f"'{x}'" for x in axes]))
                calls.append(f"{meshes[key]} = jax.make_mesh(({sz}), ({ax}))")
            calls.append(f"# Set up sharding for {n}: {a.kind}")
            if a.kind == "NoSharding":
                calls.append(f"{n} = jnp.asarray({n})")
            else:
                ps = ["None" if p is None else f"'{p}'" for p in spec]
                calls.append(
                    f"{n} = jax.device_put({n}, jax.sharding.NamedSharding({meshes[key]}, "
                    f"P({', '.join(reversed(ps))})))"
                )
        to_jax = (
            "# Apply sharding to inputs using device_put and NamedSharding\n    "
            + "\n    ".join(calls)
            + "\n"
        )
    else:
        conv = "\n".join(f"    {n} = jnp.asarray({n})" for n in arg_names)
        to_jax = f"# Convert inputs to jax arrays\n{conv}\n"
    if e.export_data_as_npz:
        loads = ", ".join(f"npz_data['arr_{i}']" for i in range(1, len(e.args) + 1))
        load_fn = (
            "def load_inputs():\n"
            '    """Load the example inputs that were exported from Julia."""\n'
            f'    npz_data = np.load(os.path.join(_script_dir, "{input_rel}"))\n'
            f"    inputs = [{loads}]\n"
            "    return tuple(inputs)\n    "
        )
    else:
        load_fn = (
            "def generate_random_inputs(key, shape, dtype):\n"
            "    key1, key2 = jax.random.split(key)\n"
            "    return jax.random.normal(key1, shape, dtype), key2\n\n"
            "def load_inputs(prng_key = None):\n"
            '    """Load random inputs for the exported function."""\n'
            "    if prng_key is None:\n"
            "        prng_key = jax.random.PRNGKey(0)\n\n"
            "    inputs = []"
        )
        for s, d, _ in infos:
            load_fn += (
                f"\n    tmp, prng_key = generate_random_inputs(prng_key, {_jtuple(s)}, "
                f"jnp.dtype('{d}'))\n    inputs.append(tmp)"
            )
        load_fn += "\n    return tuple(inputs)"
    j = "\n    "
    script = f'''"""
Auto-generated Python script for calling exported Julia/Reactant function via EnzymeJAX.

This script was generated by Reactant.Serialization.export_to_enzymejax().
"""

from enzyme_ad.jax import hlo_call
import jax
from jax.sharding import PartitionSpec as P
import jax.numpy as jnp
import numpy as np
import os

# Get the directory of this script
_script_dir = os.path.dirname(os.path.abspath(__file__))

# Load the MLIR/StableHLO code
with open(os.path.join(_script_dir, "{mlir_rel}"), "r") as f:
    _hlo_code = f.read()

{load_fn}

@jax.jit
def run_{name}({arg_list}):
    """
    Call the exported Julia function via EnzymeJAX.

    Args:
{arg_docs}

    Returns:
        The result of calling the exported function.

    Note:
        All inputs must be in row-major (Python/NumPy) order. If you're passing
        arrays from Julia, make sure to transpose them first using:
        `permutedims(arr, reverse(1:ndims(arr)))`
    """
    {j.join(dtype_checks)}
    {j.join(size_checks)}
    return hlo_call(
        {arg_list},
        source=_hlo_code,
    )

if __name__ == "__main__":
    # Load the example inputs
    ({arg_list},) = load_inputs()
    {to_jax}
    # Run the function
    print("Running {name}...")
    result = run_{name}({arg_list})
    print("Result:", result)
'''
    return script.strip() + "\n"


def write_export(directory: Path, e: Export) -> Path:
    """Write the .mlir, the npz (unless export_data_as_npz=False) and the .py; return the .py."""
    directory.mkdir(parents=True, exist_ok=True)
    name = e.function_name.replace("!", "_")
    fnid = 0
    while (directory / f"{name}_{fnid}.mlir").exists():
        fnid += 1
    (directory / f"{name}_{fnid}.mlir").write_text(e.mlir_text)
    if e.export_data_as_npz:
        np.savez(
            directory / f"{name}_{fnid}_inputs.npz",
            **{f"arr_{i}": np.asarray(a.value) for i, a in enumerate(e.args, start=1)},
        )
    py = directory / f"{name}.py"
    py.write_text(render_script(e, fnid))
    return py
