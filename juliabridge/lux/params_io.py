"""save_params / load_params: fine-tuned weights to and from an HDF5 file Julia can read.

The file has the bundle's /params and /state layout (docs/bundle-format.md §4) with root
attributes format = "juliabridge.weights", format_version = 1; JuliaBridge.load_params reads it.
A Python-written file also records the trees' shape in the dataset /juliabridge/tree (§4.2):
which path steps are tuple positions and which containers are empty, which HDF5 names alone
cannot say, so `load_params` gives back the very tree `save_params` was given.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ..bundle.files import nearby, safefile
from ..bundle.manifest import MANIFEST_NAME, LuxPath, load_manifest
from ..bundle.weights import ReadRequest, open_weights, write_weights
from ..errors import BundleError, CallArgumentError, ChecksumError, SaveError, UnsafeBundleError
from ..support import dtypes
from ..support.slots import check_tuple_slots
from .sharded_load import ShardingSpec, load_requests
from .trees import build_tree

WEIGHTS_FORMAT = "juliabridge.weights"
WEIGHTS_FORMAT_VERSION = 1
#: The dataset holding the trees' shape (JSON as ui8 bytes); JuliaBridge.load_params ignores it.
TREE_DATASET = "/juliabridge/tree"
#: A tree record larger than this is refused before it is parsed.
MAX_TREE_BYTES = 64 * 1024 * 1024
#: Per group ("params", "state"): the leaves (dataset name -> Lux path, in tree order) and the
#: empty containers' paths.
TreeRecord = dict[str, tuple[dict[str, LuxPath], list[LuxPath]]]


def _leaves(
    tree: Any, root: str, empties: list[LuxPath] | None = None
) -> list[tuple[LuxPath, Any]]:
    """The array leaves of `tree` with their Lux paths; empty containers below the root are
    appended to `empties` when given (Lux's empty NamedTuples, e.g. a MaxPool's params)."""
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
            if not node and path and empties is not None:
                empties.append(path)
        elif isinstance(node, (tuple, list)):
            for i, v in enumerate(node):
                walk(v, (*path, i + 1))
            if not node and path and empties is not None:
                empties.append(path)
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
    record: dict[str, dict[str, list[list[str | int]]]] = {}
    for group, tree in (("params", params), ("state", state)):
        empties: list[LuxPath] = []
        leaves = _leaves(tree, group, empties)
        record[group] = {
            "leaves": [list(p) for p, _ in leaves],
            "empty": [list(p) for p in empties],
        }
        for p, leaf in leaves:
            arr = _to_mlir_order(leaf, layout)
            t = dtypes.from_numpy(arr.dtype)
            if t is None:
                raise CallArgumentError(_not_saveable(group, p, leaf, arr.dtype))
            arrays["/" + "/".join([group, *map(str, p)])] = (arr, t)
    text = json.dumps(record, separators=(",", ":")).encode()
    arrays[TREE_DATASET] = (np.frombuffer(text, dtype=np.uint8).copy(), "ui8")
    target = Path(path)
    _check_target(target, overwrite)
    write_weights(
        target,
        arrays,
        root_attrs={"format": WEIGHTS_FORMAT, "format_version": WEIGHTS_FORMAT_VERSION},
    )
    return target


def _held_wrapper(obj: Any, depth: int = 2) -> str | None:
    """The attribute path of a juliabridge wrapper held by `obj` (an outer Equinox or Flax
    module, a user's class), for the hint; None when there is none within `depth` levels."""
    try:
        fields = vars(obj)
    except TypeError:
        return None
    for name, value in fields.items():
        if callable(getattr(value, "__juliabridge_trees__", None)):
            return name
        if depth > 1 and not isinstance(value, (np.ndarray, jax.Array)):
            inner = _held_wrapper(value, depth - 1)
            if inner is not None:
                return f"{name}.{inner}"
    return None


def _not_saveable(group: str, path: LuxPath, leaf: Any, dtype: np.dtype) -> str:
    where = ".".join([group, *map(str, path)]) if path else "the object given"
    kinds = ", ".join(dtypes.MLIR_TO_JULIA.values())
    if dtype != np.dtype(object):
        return (
            f"{where}: a {type(leaf).__name__} of numpy dtype {dtype} cannot be saved; "
            f"save_params takes arrays of {kinds} element types"
        )
    held = _held_wrapper(leaf)
    if held is not None:
        return (
            f"{where}: a {type(leaf).__name__} is not a model or a params tree, but it holds a "
            f"juliabridge wrapper at .{held}; pass that (save_params(obj.{held}, path)) or its "
            "params tree"
        )
    return (
        f"{where}: a {type(leaf).__name__} is not an array; save_params takes a LuxModel, the "
        f"Flax or Equinox LuxModule wrapping one, or a tree (dicts, tuples) of {kinds} arrays"
    )


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


def load_params(
    path: str | os.PathLike[str], *, shardings: ShardingSpec | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
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
        shardings: when given, the leaves are global jax Arrays on these shardings, each
            process reading only its own shards' bytes (lux/sharded_load.py says the forms;
            a function receives ``"params.layer_1.weight"``-style paths, positions as
            numbers).

    Returns:
        ``(params, state)`` shaped like ``model.params``/``model.state``: dicts keyed by Lux
        names, tuples where Lux has positions, empty layers as empty dicts. A bundle's trees
        come from its manifest, a save_params file's from its tree record; a file JuliaBridge
        wrote has neither, so positions there are the string keys "1", "2", ....

    Raises:
        BundleError: the file is missing, not a regular file, corrupt or not a weights file
            (UnsafeBundleError for a symlink or links and storage reaching other files;
            ManifestError for a bundle whose manifest is invalid).
        ChecksumError: a bundle's weights differ from its manifest's digests, or hold a
            dataset the manifest does not name (which nothing could verify).
        CallArgumentError: `shardings` gives no Sharding fitting some array.
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
        return _read_trees(file, fd, checks, shardings)
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
        self.shape: TreeRecord | None = None

    @staticmethod
    def of_bundle(root: Path) -> _Checks:
        m = load_manifest(root / MANIFEST_NAME)
        c = _Checks()
        c.root = root
        c.file = m.weights.file
        c.digests = {a.dataset: a.digest for a in m.arguments if a.dataset and a.digest}
        c.algorithm = m.dataset_digest
        c.file_sha256 = m.weights.sha256
        c.shape = {
            g: (
                {a.dataset: a.path for a in m.arguments if a.role == role and a.dataset},
                list(m.empty.get(g, ())),
            )
            for g, role in (("params", "parameter"), ("state", "state"))
        }
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
            "JuliaBridge's save_params), or a bundle or export directory"
            f"{nearby.did_you_mean(file) if found == 'no such file' else ''}"
        ) from e


def _read_trees(
    file: Path, fd: int, checks: _Checks, shardings: ShardingSpec | None = None
) -> tuple[Any, Any]:
    groups = ("params", "state")
    flat: dict[str, Any] = {}
    with open_weights(file, fd=fd, file_sha256=checks.file_sha256) as f:
        requests = []
        record_entry = None
        for e in f.list_datasets([*groups, TREE_DATASET.split("/")[1]]):
            name = str(e["name"])
            if name == TREE_DATASET:
                record_entry = e
                continue
            if not name.startswith(("/params/", "/state/")):
                continue  # other datasets under /juliabridge are not trees
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
        read = f.read(requests) if shardings is None else load_requests(f, requests, shardings)
        for r, arr in read:
            flat[r.dataset] = arr
        record = _read_record(file, f, record_entry) if checks.root is None else None
    # Reads complete in any order; keep the file's order (Lux's, for files JuliaBridge wrote).
    names = [r.dataset for r in requests]
    if checks.shape is not None:  # a bundle: its manifest knows the trees
        record = checks.shape
    if record is not None:
        return tuple(_from_record(file, g, record[g], flat) for g in groups)  # type: ignore[return-value]
    order = {name: n for n, name in enumerate(names)}
    trees: dict[str, dict[str, Any]] = {g: {} for g in groups}
    for name, arr in flat.items():
        group, _, rest = name.lstrip("/").partition("/")
        steps = rest.split("/")
        node = trees[group]
        for s in steps[:-1]:
            node = node.setdefault(s, {})
        node[steps[-1]] = arr
    return _ordered(trees["params"], "/params", order), _ordered(trees["state"], "/state", order)


def _read_record(file: Path, f: Any, entry: dict[str, Any] | None) -> TreeRecord | None:
    """The tree record of a Python-written file, checked; None for a file without one."""
    if entry is None:
        return None
    shape = tuple(entry["shape"])
    if entry.get("tag") != "ui8" or len(shape) != 1 or shape[0] > MAX_TREE_BYTES:
        raise BundleError(
            f"{file}: dataset {TREE_DATASET} is not a tree record (expected a 1-d ui8 dataset "
            f"of at most {MAX_TREE_BYTES} bytes, found tag {entry.get('tag')!r}, shape "
            f"{list(shape)[:4]}); write the file again with juliabridge.save_params"
        )
    [(_, raw)] = list(f.read([ReadRequest(TREE_DATASET, shape, "ui8", "tree record", None, None)]))
    try:
        doc = json.loads(bytes(np.asarray(raw, dtype=np.uint8)).decode("utf-8"))
        out: TreeRecord = {}
        for g in ("params", "state"):
            leaves = [_path(p) for p in doc[g]["leaves"]]
            names = {"/" + "/".join([g, *map(str, p)]): p for p in leaves}
            if len(names) != len(leaves):
                raise ValueError("two leaves at one path")
            out[g] = (names, [_path(p) for p in doc[g]["empty"]])
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise BundleError(
            f"{file}: dataset {TREE_DATASET} does not hold a valid tree record ({type(e).__name__}"
            "); write the file again with juliabridge.save_params"
        ) from None
    for g, (names, empty) in out.items():
        check_tuple_slots([*names.values(), *empty], f"{file}: the tree record of {g}")
    return out


def _path(p: Any) -> LuxPath:
    if not isinstance(p, list) or not all(
        (isinstance(s, str) and s) or (type(s) is int and 1 <= s <= 2**31) for s in p
    ):
        raise ValueError("a path is a list of names and positions >= 1")
    return tuple(p)


def _from_record(
    file: Path, group: str, rec: tuple[dict[str, LuxPath], list[LuxPath]], flat: dict[str, Any]
) -> Any:
    """The `group` tree rebuilt from its record: tuples where steps are positions, empties kept."""
    names, empty = rec
    stored = {n for n in flat if n.startswith(f"/{group}/")}
    if set(names) != stored:
        extra = sorted(stored - set(names))[:3]
        missing = sorted(set(names) - stored)[:3]
        raise BundleError(
            f"{file}: the tree record of {group} does not match its datasets (not recorded: "
            f"{extra}, recorded but missing: {missing}); write the file again with "
            "juliabridge.save_params"
        )
    try:
        return build_tree(
            [(p, flat[n]) for n, p in names.items()], empty=empty, what=f"{file}: {group}"
        )
    except (TypeError, AttributeError) as e:  # a position and a name below one parent
        raise BundleError(
            f"{file}: the tree record of {group} mixes positions and names below one parent; "
            "write the file again with juliabridge.save_params"
        ) from e


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
