"""load_into: weights saved by save_params (or a bundle's) back into a model or its wrapper.

The loaded trees are checked against the target's own, leaf by leaf (same Lux paths, shapes and
element types), and each array is placed where the target's array is (same sharding), so a
resumed optax state or a sharded model keeps working with the result.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import numpy as np

from ..errors import CallArgumentError, SignatureMismatchError
from .model import LuxModel
from .params_io import load_params

T = TypeVar("T")


def _key(entry: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def _name(root: str, keypath: tuple[Any, ...]) -> str:
    return ".".join([root, *(_key(k) for k in keypath)])


def _fit(root: str, loaded: Any, like: Any, file: str, layout: str) -> Any:
    """`loaded` (MLIR layout numpy arrays) as a tree shaped, typed and placed like `like`."""
    got = dict(jax.tree_util.tree_flatten_with_path(loaded)[0])
    want, treedef = jax.tree_util.tree_flatten_with_path(like)
    missing = [_name(root, p) for p, _ in want if p not in got]
    extra = [_name(root, p) for p in got if p not in dict(want)]
    if missing or extra or str(jax.tree.structure(loaded)) != str(jax.tree.structure(like)):
        raise SignatureMismatchError(
            f"{file}: its {root} tree is not the model's (missing from the file: "
            f"{missing[:3] or 'none'}; not in the model: {extra[:3] or 'none'}); load a file "
            "saved from this model (juliabridge.save_params), or read it with load_params "
            "to inspect it"
        )
    out = []
    for p, old in want:
        arr = np.asarray(got[p])
        if layout == "julia":
            arr = arr.T
        if arr.shape != tuple(np.shape(old)) or arr.dtype != np.asarray(old).dtype:
            raise SignatureMismatchError(
                f"{file}: {_name(root, p)} is {arr.dtype}{list(arr.shape)} in the file but "
                f"{np.asarray(old).dtype}{list(np.shape(old))} in the model ({layout} "
                "layout); load a file saved from this model"
            )
        sharding = getattr(old, "sharding", None)
        out.append(
            jax.device_put(arr, sharding) if sharding is not None else jax.numpy.asarray(arr)
        )
    return jax.tree_util.tree_unflatten(treedef, out)


def load_into(
    target: T,
    path: str | os.PathLike[str],
    *,
    read: Callable[[str | os.PathLike[str]], tuple[Any, Any]] = load_params,
) -> T:
    """Load the params and state saved at `path` into `target`, checked against its trees.

    Args:
        target: a `LuxModel`, or the Flax or Equinox ``LuxModule`` wrapping one.
        path: a file written by `juliabridge.save_params` (or JuliaBridge), or a bundle
            directory (``juliabridge.load_into`` also takes a Reactant export directory).
        read: what reads `path` into (params, state) numpy trees (`load_params`;
            juliabridge.importers passes the one that also reads export directories).

    Returns:
        For a `LuxModel` a copy holding the loaded trees (the original is unchanged); for an
        Equinox module a new module (Equinox modules are immutable); for a Flax NNX module the
        same module, its variables set to the loaded values.

    Raises:
        CallArgumentError: `target` is neither a model nor a wrapper.
        SignatureMismatchError: the file's trees differ from the target's (a path missing or
            extra, another shape or element type), named.
        BundleError: the file cannot be read (as `load_params`).
    """
    trees = getattr(target, "__juliabridge_trees__", None)
    if callable(trees):
        params, state, lux = trees()
    elif isinstance(target, LuxModel):
        params, state, lux = target.params, target.state, target
    else:
        raise CallArgumentError(
            f"load_into takes a LuxModel or the Flax or Equinox LuxModule wrapping one, got a "
            f"{type(target).__name__}; for a params tree use juliabridge.load_params"
        )
    file = os.fspath(path)
    loaded_params, loaded_state = read(path)
    new_params = _fit("params", loaded_params, params, file, lux.layout)
    new_state = _fit("state", loaded_state, state, file, lux.layout)
    if callable(trees):
        return target.__juliabridge_replace__(new_params, new_state)  # type: ignore[attr-defined,no-any-return]
    model = copy.copy(target)
    model.params = new_params  # type: ignore[attr-defined]
    model.state = new_state  # type: ignore[attr-defined]
    return model
