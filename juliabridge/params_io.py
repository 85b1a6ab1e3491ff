"""save_params / load_params: fine-tuned weights to and from an HDF5 file Julia can read.

The file has the bundle's /params and /state layout (docs/bundle-format.md §4) with root
attributes format = "juliabridge.weights", format_version = 1; JuliaBridge.load_params reads it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import jax
import numpy as np

from . import dtypes
from .bundle.manifest import LuxPath
from .bundle.weights import decode, open_weights, write_weights
from .errors import BundleError, CallArgumentError

WEIGHTS_FORMAT = "juliabridge.weights"
WEIGHTS_FORMAT_VERSION = 1


def _leaves(tree: Any, root: str) -> list[tuple[LuxPath, Any]]:
    out: list[tuple[LuxPath, Any]] = []

    def walk(node: Any, path: LuxPath) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise CallArgumentError(f"{root}: key {k!r} is not a Lux field name")
                walk(v, (*path, k))
        elif isinstance(node, (tuple, list)):
            for i, v in enumerate(node):
                walk(v, (*path, i + 1))
        elif node is None:
            return
        else:
            out.append((path, node))

    walk(tree, ())
    return out


def _to_mlir_order(value: Any, layout: str) -> np.ndarray:
    arr = np.asarray(jax.device_get(value))
    return arr.T if layout == "julia" else arr


def save_params(
    model_or_params: Any,
    path: str | os.PathLike[str],
    *,
    state: Any = None,
    layout: str | None = None,
) -> Path:
    """Write params (and state) atomically to an HDF5 file JuliaBridge.load_params reads.

    Pass a LuxModel (its params, state and layout are used unless given) or a params tree
    (nested dicts keyed by Lux names, MLIR layout unless `layout="julia"`).
    """
    from .model import LuxModel

    if isinstance(model_or_params, LuxModel):
        params = model_or_params.params
        state = model_or_params.state if state is None else state
        layout = layout or model_or_params.layout
    else:
        params = model_or_params
    layout = layout or "mlir"
    arrays: dict[str, tuple[np.ndarray, str]] = {}
    for group, tree in (("params", params), ("state", state)):
        for p, leaf in _leaves(tree, group):
            arr = _to_mlir_order(leaf, layout)
            t = dtypes.from_numpy(arr.dtype)
            if t is None:
                raise CallArgumentError(
                    f"{group}.{'.'.join(map(str, p))}: dtype {arr.dtype} has no Julia counterpart"
                )
            arrays["/" + "/".join([group, *map(str, p)])] = (arr, t)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_weights(
        target,
        arrays,
        root_attrs={"format": WEIGHTS_FORMAT, "format_version": WEIGHTS_FORMAT_VERSION},
    )
    return target


def load_params(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read (params, state) as nested dicts of numpy arrays (MLIR layout) from a weights file."""
    p = Path(path)
    if p.is_dir():
        p = p / "weights.h5"
    trees: dict[str, dict[str, Any]] = {"params": {}, "state": {}}
    with open_weights(p) as f:
        for group in trees:
            if group not in f:
                continue

            def visit(name: str, obj: Any, group: str = group) -> None:
                if not isinstance(obj, h5py.Dataset):
                    return
                tag = obj.attrs.get("dtype")
                tag = tag.decode() if isinstance(tag, bytes) else tag
                if not isinstance(tag, str) or not dtypes.is_known(tag):
                    raise BundleError(f"{p}: /{group}/{name} has no valid 'dtype' attribute")
                node = trees[group]
                steps = name.split("/")
                for s in steps[:-1]:
                    node = node.setdefault(s, {})
                node[steps[-1]] = decode(np.asarray(obj[()]), tag, f"{p}:/{group}/{name}")

            f[group].visititems(visit)
    return trees["params"], trees["state"]
