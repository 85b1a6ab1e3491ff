"""save_params / load_params: fine-tuned weights to and from an HDF5 file Julia can read.

The file has the bundle's /params and /state layout (docs/bundle-format.md §4) with root
attributes format = "juliabridge.weights", format_version = 1; JuliaBridge.load_params reads it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import jax
import numpy as np

from .. import dtypes
from ..bundle.files import safefile
from ..bundle.manifest import MANIFEST_NAME, LuxPath, load_manifest
from ..bundle.weights import ReadRequest, open_weights, write_weights
from ..errors import BundleError, CallArgumentError, ChecksumError, SaveError, UnsafeBundleError

WEIGHTS_FORMAT = "juliabridge.weights"
WEIGHTS_FORMAT_VERSION = 1


def _leaves(tree: Any, root: str) -> list[tuple[LuxPath, Any]]:
    out: list[tuple[LuxPath, Any]] = []

    def walk(node: Any, path: LuxPath) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise CallArgumentError(f"{root}: key {k!r} is not a Lux field name")
                if isinstance(k, str) and (not k or k in (".", "..") or "/" in k or "\x00" in k):
                    raise CallArgumentError(
                        f"{root}: key {k!r} cannot name an HDF5 dataset (empty, '.', '..' or "
                        "containing '/'); use Lux field names"
                    )
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
    overwrite: bool = False,
) -> Path:
    """Write params (and state) atomically to an HDF5 file JuliaBridge.load_params reads.

    The file appears under `path` only when complete (written to a hidden temporary next to
    it, flushed, then renamed): a crash or kill midway leaves any previous file untouched.

    Args:
        model_or_params: a LuxModel, or the Flax or Equinox ``LuxModule`` wrapping one (their
            params, state and layout are used unless given), or a params tree (nested dicts
            keyed by Lux names).
        path: the file to write, in a directory that exists (none is created).
        state: the state tree to write (default: the model's, or none for a params tree).
        layout: "mlir" or "julia", the layout of the arrays given (default: the model's, or
            "mlir").
        overwrite: replace a file already at `path` (default: refuse).

    Returns:
        The path written.

    Raises:
        SaveError: writing failed (also an OSError), `path` is a directory, its directory
            does not exist, or a file is there and not `overwrite`.
        CallArgumentError: an unknown layout, a key that is not a Lux field name, or a leaf
            that is not an array of a bundle dtype.
    """
    from .model import LuxModel

    wrapped = getattr(model_or_params, "__juliabridge_trees__", None)
    if callable(wrapped):  # juliabridge.flax / juliabridge.equinox LuxModule
        params, own_state, lux = wrapped()
        state = own_state if state is None else state
        layout = layout or lux.layout
    elif isinstance(model_or_params, LuxModel):
        params = model_or_params.params
        state = model_or_params.state if state is None else state
        layout = layout or model_or_params.layout
    else:
        params = model_or_params
    layout = layout or "mlir"
    if layout not in ("mlir", "julia"):
        raise CallArgumentError(f"unknown layout {layout!r}; expected 'mlir' or 'julia'")
    arrays: dict[str, tuple[np.ndarray, str]] = {}
    for group, tree in (("params", params), ("state", state)):
        for p, leaf in _leaves(tree, group):
            arr = _to_mlir_order(leaf, layout)
            t = dtypes.from_numpy(arr.dtype)
            if t is None:
                raise CallArgumentError(
                    f"{group}.{'.'.join(map(str, p))}: a {type(leaf).__name__} of numpy dtype "
                    f"{arr.dtype} cannot be saved; save_params takes arrays of "
                    f"{', '.join(dtypes.MLIR_TO_JULIA.values())} element types"
                )
            arrays["/" + "/".join([group, *map(str, p)])] = (arr, t)
    target = Path(path)
    _check_target(target, overwrite)
    write_weights(
        target,
        arrays,
        root_attrs={"format": WEIGHTS_FORMAT, "format_version": WEIGHTS_FORMAT_VERSION},
    )
    return target


def _check_target(target: Path, overwrite: bool) -> None:
    """Refuse a missing directory (a typo would create a tree) and, unless `overwrite`, a file
    already there (fine-tuned weights are not silently replaced)."""
    parent = target.parent
    if not parent.is_dir():
        raise SaveError(
            f"{target}: the directory {parent} does not exist; create it first (save_params "
            "creates no directories)"
        )
    if os.path.lexists(target) and not target.is_dir() and not overwrite:
        raise SaveError(f"{target}: already exists; pass overwrite=True to replace it")


def load_params(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read (params, state) as nested dicts of numpy arrays (MLIR layout) from a weights file.

    `path` is a file written by save_params (or JuliaBridge), or a bundle directory (the
    weights file its manifest names, with the digests its manifest records verified as the
    data are read: each dataset's, and the whole file's sha256 when there is one). The file is
    opened like a bundle's weights: a symlink is refused (the bundle's weights file is looked
    up inside the directory, never followed elsewhere), and it must hold plain datasets only,
    each with a valid `dtype` attribute and sizes matching what is stored; libhdf5, when
    needed, runs outside this process.

    Args:
        path: a weights file, or a bundle directory.

    Returns:
        ``(params, state)``, nested dicts keyed by Lux names.

    Raises:
        BundleError: the file is missing, not a regular file, corrupt or not a weights file
            (UnsafeBundleError for a symlink or links and storage reaching other files;
            ManifestError for a bundle whose manifest is invalid).
        ChecksumError: a bundle's weights differ from its manifest's digests, or hold a
            dataset the manifest does not name (which nothing could verify).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise BundleError(
            f"expected the path of a weights file (str or os.PathLike), got {type(path).__name__}"
        )
    p = Path(path)
    what = "the weights file"
    try:
        is_dir = stat.S_ISDIR(os.stat(p).st_mode)
    except OSError:
        is_dir = False
    checks = _Checks()
    if is_dir:
        file = p / "weights.h5"
        if os.path.lexists(p / MANIFEST_NAME):
            checks = _Checks.of_bundle(p)
            file = p / checks.file
        with safefile.directory(p) as dfd:
            fd, _ = _open(file, what, dfd)
    else:
        file = p
        fd, _ = _open(file, what, None)
    try:
        return _read_trees(file, fd, checks)
    finally:
        os.close(fd)


class _Checks:
    """What a bundle's manifest says to verify in its weights file (nothing for a plain file)."""

    def __init__(self) -> None:
        self.file = "weights.h5"
        self.root: Path | None = None
        self.digests: dict[str, str] = {}
        self.algorithm: str | None = None
        self.file_sha256: str | None = None

    @staticmethod
    def of_bundle(root: Path) -> _Checks:
        m = load_manifest(root / MANIFEST_NAME)
        c = _Checks()
        c.root = root
        c.file = m.weights.file
        c.digests = {a.dataset: a.digest for a in m.arguments if a.dataset and a.digest}
        c.algorithm = m.dataset_digest
        c.file_sha256 = m.weights.sha256
        return c

    def request(self, name: str, shape: tuple[int, ...], tag: str, where: str) -> ReadRequest:
        digest = self.digests.get(name)
        if self.root is not None and digest is None and self.file_sha256 is None:
            raise ChecksumError(
                f"{self.root / self.file}: dataset {name} is not among the datasets "
                f"{MANIFEST_NAME} names and the file has no sha256 there either, so it cannot "
                "be verified; export "
                "the bundle again, or read the file itself (load_params(path/to/weights file)) "
                "if you trust it"
            )
        return ReadRequest(name, shape, tag, where, digest, self.algorithm if digest else None)


def _open(file: Path, what: str, dfd: int | None) -> tuple[int, os.stat_result]:
    try:
        return safefile.open_regular(file, what, dir_fd=dfd)
    except UnsafeBundleError:
        raise
    except BundleError as e:
        if os.path.lexists(file) and not os.path.isdir(file):
            raise
        found = "no such file" if not os.path.lexists(file) else "not a regular file"
        raise BundleError(
            f"{file}: {found}; pass a weights file written by juliabridge.save_params (or "
            "JuliaBridge's save_params), or a bundle directory"
        ) from e


def _read_trees(file: Path, fd: int, checks: _Checks) -> tuple[dict[str, Any], dict[str, Any]]:
    trees: dict[str, dict[str, Any]] = {"params": {}, "state": {}}
    with open_weights(file, fd=fd, file_sha256=checks.file_sha256) as f:
        requests = []
        for e in f.list_datasets(list(trees)):
            name = str(e["name"])
            tag = e.get("tag")
            if not isinstance(tag, str) or not dtypes.is_known(tag):
                raise BundleError(
                    f"{file}: dataset {name} has no valid 'dtype' attribute (found {tag!r}); "
                    "files written by save_params or JuliaBridge tag every dataset with its "
                    "MLIR type"
                )
            group, _, rest = name.lstrip("/").partition("/")
            requests.append(
                checks.request(name, tuple(e["shape"]), tag, ".".join([group, *rest.split("/")]))
            )
        for r, arr in f.read(requests):
            group, _, rest = r.dataset.lstrip("/").partition("/")
            steps = rest.split("/")
            node = trees[group]
            for s in steps[:-1]:
                node = node.setdefault(s, {})
            node[steps[-1]] = arr
    # Reads complete in any order; keep the file's order (Lux's, for files JuliaBridge wrote).
    order = {r.dataset: n for n, r in enumerate(requests)}
    return _ordered(trees["params"], "/params", order), _ordered(trees["state"], "/state", order)


def _ordered(tree: dict[str, Any], prefix: str, order: dict[str, int]) -> dict[str, Any]:
    def first(key: str, node: Any) -> int:
        name = f"{prefix}/{key}"
        if isinstance(node, dict):
            return min((first(f"{key}/{k}", v) for k, v in node.items()), default=0)
        return order.get(name, 0)

    out: dict[str, Any] = {}
    for k in sorted(tree, key=lambda k: first(k, tree[k])):
        v = tree[k]
        out[k] = _ordered(v, f"{prefix}/{k}", order) if isinstance(v, dict) else v
    return out
