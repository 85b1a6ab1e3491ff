"""Writing format-3 bundles from Python (docs/bundle-format.md), for tests and examples made
without Julia.

Bundles written here say so: producer.tool is "juliabridge-python" and made_with_julia is false.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..._version import __version__
from ...errors import (
    BundleError,
    JuliaBridgeError,
    SaveError,
    SignatureMismatchError,
    UnsupportedModuleError,
)
from ...stablehlo import TensorSpec, artifact, parse_module
from ...support import dtypes
from ..files import atomic
from ..files.checksum import sha256_file
from ..files.digest import dataset_digest
from ..manifest import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_NAME,
    LuxPath,
    default_tolerances,
    parse_manifest,
)
from ..manifest.schema import DATASET_DIGEST
from ..weights import write_weights

MODULE_FILE = "model.mlir"
#: The per-dataset digest this writer records: its manifest key and algorithm (spec §4.1).
DIGEST = str(DATASET_DIGEST[FORMAT_VERSION])
MODULE_ARTIFACT_FILE = "model.mlirbc"
WEIGHTS_FILE = "weights.h5"

DEFAULT_NOTE = (
    "Written by juliabridge's Python bundle writer following docs/bundle-format.md and Lux's "
    "conventions; no Julia was involved."
)


@dataclass(frozen=True)
class ArgumentSpec:
    """One @main argument to write: role, Lux path and value (MLIR shape; example for inputs),
    and the other paths of the same array in its tree (spec §3.3 `tied_paths`)."""

    role: str
    path: Sequence[str | int]
    value: np.ndarray
    batch_axis: int | None = None
    tied_paths: Sequence[Sequence[str | int]] = ()


def reference_tolerances(result_dtypes: Sequence[str]) -> tuple[float, float]:
    """Default (rtol, atol) for verify, by the least precise float type among the results.

    The same defaults a reader applies when the manifest gives none (spec §3.7).
    """
    return default_tolerances(tuple(result_dtypes))


def artifact_entry(
    module_text: str, file: str, where: str
) -> tuple[dict[str, Any], bytes] | tuple[None, None]:
    """The manifest's `artifact` object and the bytes for a module, or (None, None).

    The module is serialized at artifact.ARTIFACT_TARGET (spec §2.1). A module that cannot be
    expressed at that target gets no artifact, with a RuntimeWarning: the text is always there.
    """
    try:
        art = artifact.serialize(module_text)
    except UnsupportedModuleError as e:
        warnings.warn(f"{where}: no portable artifact written: {e}", RuntimeWarning, stacklevel=3)
        return None, None
    entry = {
        "file": file,
        "sha256": "",  # filled in once the file is written
        "stablehlo_version": art.stablehlo_version,
        "target": art.target,
    }
    return entry, art.data


def dataset_name(role: str, path: LuxPath) -> str:
    """Conventional HDF5 dataset for a parameter/state path: /params/layer_1/weight."""
    group = {"parameter": "params", "state": "state"}[role]
    return "/" + "/".join([group, *(str(s) for s in path)])


def _check_target(target: Path, overwrite: bool) -> None:
    """Refuse to replace anything but a bundle (or an empty directory), and only if asked."""
    if not os.path.lexists(target):
        return
    if not overwrite:
        raise BundleError(f"{target}: already exists; pass overwrite=True to replace it")
    if target.is_symlink() or not target.is_dir():
        raise SaveError(
            f"{target}: exists and is not a directory; refusing to replace it with a bundle"
        )
    if any(target.iterdir()) and not (target / MANIFEST_NAME).is_file():
        raise SaveError(
            f"{target}: is a non-empty directory without {MANIFEST_NAME}, so not a bundle; "
            "refusing to replace it (overwrite=True only replaces bundles)"
        )


def _atomic_dir(target: Path, overwrite: bool) -> Path:
    _check_target(target, overwrite)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic.clean_stale(target)
        tmp = atomic.temp_path(target)
        tmp.mkdir()  # the umask applies, unlike mkdtemp's 0700: a bundle is shared data
    except OSError as e:
        raise SaveError(
            f"{target}: cannot create a directory in {target.parent} ({e.strerror or e}); "
            "check that it is writable"
        ) from e
    return tmp


def _commit_dir(tmp: Path, target: Path, overwrite: bool) -> None:
    """Move the finished bundle `tmp` to `target` in one step where the OS allows it.

    A new target is a single rename. An existing one is swapped with renameat2's
    RENAME_EXCHANGE on Linux, so `target` always holds a complete bundle (old, then new);
    elsewhere the old bundle is moved aside first and put back if the second rename fails.
    """
    atomic.fsync_dir(tmp)
    _check_target(target, overwrite)  # again: something may have appeared meanwhile
    if not os.path.lexists(target):
        os.replace(tmp, target)
    elif atomic.exchange(tmp, target):
        shutil.rmtree(tmp, ignore_errors=True)  # now holds the previous bundle
    else:
        old = atomic.temp_path(target)
        os.replace(target, old)
        try:
            os.replace(tmp, target)
        except BaseException:
            os.replace(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)
    atomic.fsync_dir(target.parent)


def write_bundle(
    path: str | os.PathLike[str],
    *,
    name: str,
    mlir_text: str,
    arguments: Sequence[ArgumentSpec],
    result_paths: Sequence[Sequence[Sequence[str | int]]],
    aliases: Sequence[tuple[Sequence[str | int], int]] = (),
    mode: str = "test",
    batch: dict[str, Any] | None = None,
    example_outputs: Sequence[np.ndarray] | Mapping[int, np.ndarray] | None = None,
    result_batch_axes: Sequence[int | None] | None = None,
    metadata: dict[str, Any] | None = None,
    note: str = DEFAULT_NOTE,
    overwrite: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    empty: Mapping[str, Sequence[Sequence[str | int]]] | None = None,
    result_echoes: Sequence[int | None] | None = None,
    static_state: Sequence[tuple[Sequence[str | int], Any, str]] = (),
    portable_artifact: bool = True,
    producer: Mapping[str, Any] | None = None,
) -> Path:
    """Write a format-3 bundle directory atomically and return its path.

    Args:
        path: the bundle directory to create (or, with `overwrite`, replace).
        name: the model name.
        mlir_text: the forward StableHLO module; written as is, and (sanitized) as the
            portable artifact.
        arguments: one spec per @main argument, in order (values in MLIR shape).
        result_paths: the output paths of each @main result (may be empty for an echo).
        aliases: (output path, argument index) of outputs that are arguments unchanged.
        mode: "test" or "train".
        batch: the manifest's batch object.
        example_outputs: reference outputs for the input values in `arguments`, in result
            order, or by result index (a mapping may leave results out, spec §3.7); with them
            the bundle gets an examples section.
        result_batch_axes: batch axis of each result (None: none).
        metadata: free-form JSON.
        note: the producer note.
        overwrite: replace an existing bundle at `path`.
        rtol, atol: verify tolerances (default: spec §3.7's per-dtype values).
        empty: paths of empty containers in ps ("params") and st ("state").
        result_echoes: per result, the argument it returns unchanged (spec §3.4), or None.
        static_state: (path in st, JSON scalar value, Julia type name) of non-array state.
        portable_artifact: also write model.mlirbc (spec §2.1).
        producer: fields of the manifest's producer that replace this writer's (e.g. the
            tool of a converted export); `note` still comes from `note`.

    Returns:
        `path`.

    Raises:
        SignatureMismatchError: the specs do not match @main, or an echo in `result_echoes`
            is a result @main computes.
        ManifestError: the result would not be a valid manifest.
        BundleError, SaveError: the target exists or cannot be written.
    """
    target = Path(path)
    module = parse_module(mlir_text)
    if len(arguments) != len(module.arguments):
        raise SignatureMismatchError(
            f"{len(arguments)} argument specs for a @main with {len(module.arguments)} arguments"
        )
    if len(result_paths) != len(module.results):
        raise SignatureMismatchError(
            f"{len(result_paths)} result path lists for a @main with {len(module.results)} results"
        )
    arrays: dict[str, tuple[np.ndarray, str]] = {}
    arg_entries = []
    for i, (spec, want) in enumerate(zip(arguments, module.arguments)):
        value = np.asarray(spec.value)
        got = TensorSpec(tuple(value.shape), dtypes.from_numpy(value.dtype) or str(value.dtype))
        if got != want:
            raise SignatureMismatchError(
                f"argument {i} {list(spec.path)}: value is {got}, @main wants {want}"
            )
        entry: dict[str, Any] = {
            "index": i,
            "role": spec.role,
            "path": list(spec.path),
            "dtype": want.dtype,
            "shape": list(want.shape),
            "julia_shape": list(reversed(want.shape)),
        }
        if spec.role != "input":
            entry["dataset"] = dataset_name(spec.role, tuple(spec.path))
            entry[DIGEST] = dataset_digest(value, want.dtype, DIGEST)
            arrays[entry["dataset"]] = (value, want.dtype)
        if spec.batch_axis is not None:
            entry["batch_axis"] = spec.batch_axis
        if spec.tied_paths:
            entry["tied_paths"] = [list(p) for p in spec.tied_paths]
        arg_entries.append(entry)
    results = []
    for k, (paths, res_spec) in enumerate(zip(result_paths, module.results)):
        r: dict[str, Any] = {
            "index": k,
            "paths": [list(p) for p in paths],
            "dtype": res_spec.dtype,
            "shape": list(res_spec.shape),
        }
        if result_batch_axes is not None and result_batch_axes[k] is not None:
            r["batch_axis"] = result_batch_axes[k]
        if result_echoes is not None and result_echoes[k] is not None:
            echo = result_echoes[k]
            if module.returned_arguments.get(k) != echo:
                # The reader refuses a claim the module does not make (spec §3.4).
                raise SignatureMismatchError(
                    f"result {k}: echo_of={echo}, but @main does not return argument {echo} "
                    "there unchanged (it computes that result); an echo is @main returning "
                    "the block argument itself"
                )
            r["echo_of"] = echo
        results.append(r)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": name,
        "producer": {
            "tool": "juliabridge-python",
            "tool_version": __version__,
            "julia": None,
            "lux": None,
            "reactant": None,
            "made_with_julia": False,
            "note": note,
            "created": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **(producer or {}),
        },
        # No whole-file hash of the weights: each dataset has its own (spec §4.1).
        "module": {"file": MODULE_FILE, "sha256": ""},
        "weights": {"file": WEIGHTS_FILE},
        "mode": mode,
        "arguments": arg_entries,
        "results": results,
        "aliases": [{"path": list(p), "argument": a} for p, a in aliases],
    }
    if batch is not None:
        manifest["batch"] = dict(batch)
    if empty:
        manifest["empty"] = {g: [list(p) for p in empty.get(g, ())] for g in ("params", "state")}
    if static_state:
        manifest["static_state"] = [
            {"path": list(p), "value": v, "julia_type": t} for p, v, t in static_state
        ]
    if example_outputs is not None:
        default_rtol, default_atol = reference_tolerances([s.dtype for s in module.results])
        rtol = default_rtol if rtol is None else rtol
        atol = default_atol if atol is None else atol
        ex_in = []
        for e in arg_entries:
            if e["role"] == "input":
                ds = f"/examples/inputs/{e['index']}"
                value = np.asarray(arguments[e["index"]].value)
                arrays[ds] = (value, e["dtype"])
                digest = dataset_digest(value, e["dtype"], DIGEST)
                ex_in.append({"argument": e["index"], "dataset": ds, DIGEST: digest})
        ex_out = []
        given = (
            sorted(example_outputs.items())
            if isinstance(example_outputs, Mapping)
            else list(enumerate(example_outputs))
        )
        for k, out in given:
            if not 0 <= k < len(module.results):
                raise SignatureMismatchError(
                    f"example output for result {k}, but @main has {len(module.results)} results"
                )
            out_spec = module.results[k]
            ds = f"/examples/outputs/{k}"
            value = np.asarray(out, dtype=dtypes.to_numpy(out_spec.dtype))
            arrays[ds] = (value, out_spec.dtype)
            digest = dataset_digest(value, out_spec.dtype, DIGEST)
            ex_out.append({"result": k, "dataset": ds, DIGEST: digest})
        manifest["examples"] = {"inputs": ex_in, "outputs": ex_out, "rtol": rtol, "atol": atol}
    if metadata:
        manifest["metadata"] = metadata
    art_bytes = None
    if portable_artifact:
        art_entry, art_bytes = artifact_entry(module.text, MODULE_ARTIFACT_FILE, str(target))
        if art_entry is not None:
            manifest["module"]["artifact"] = art_entry
    tmp = _atomic_dir(target, overwrite)
    try:
        (tmp / MODULE_FILE).write_text(mlir_text, encoding="utf-8")
        atomic.fsync_file(tmp / MODULE_FILE)
        manifest["module"]["sha256"] = sha256_file(tmp / MODULE_FILE)
        if art_bytes is not None:
            (tmp / MODULE_ARTIFACT_FILE).write_bytes(art_bytes)
            atomic.fsync_file(tmp / MODULE_ARTIFACT_FILE)
            manifest["module"]["artifact"]["sha256"] = sha256_file(tmp / MODULE_ARTIFACT_FILE)
        write_weights(tmp / WEIGHTS_FILE, arrays)
        parse_manifest(json.loads(json.dumps(manifest)))  # never write what we would not read
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        atomic.fsync_file(tmp / MANIFEST_NAME)
        _commit_dir(tmp, target, overwrite)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and not isinstance(e, JuliaBridgeError):
            raise SaveError(
                f"{target}: writing the bundle failed ({e}); any previous bundle there is "
                "unchanged. Check free space and permissions"
            ) from e
        raise
    return target
