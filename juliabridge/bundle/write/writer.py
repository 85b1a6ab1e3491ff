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
from ...stablehlo import StableHLOModule, TensorSpec, artifact, parse_module
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
from .description import ArgumentSpec, BundleDescription

MODULE_FILE = "model.mlir"
#: The per-dataset digest this writer records: its manifest key and algorithm (spec §4.1).
DIGEST = str(DATASET_DIGEST[FORMAT_VERSION])
MODULE_ARTIFACT_FILE = "model.mlirbc"
WEIGHTS_FILE = "weights.h5"


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


def _argument_entries(
    arguments: Sequence[ArgumentSpec], module: StableHLOModule
) -> tuple[list[dict[str, Any]], dict[str, tuple[np.ndarray, str]]]:
    """The manifest's argument entries and the weights to write (dataset -> value, dtype).

    Raises:
        SignatureMismatchError: a value's shape or dtype is not its @main argument's.
    """
    arrays: dict[str, tuple[np.ndarray, str]] = {}
    entries = []
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
        entries.append(entry)
    return entries, arrays


def _result_entries(d: BundleDescription, module: StableHLOModule) -> list[dict[str, Any]]:
    """The manifest's result entries.

    Raises:
        SignatureMismatchError: an echo the description claims is a result @main computes.
    """
    results = []
    for k, (paths, res_spec) in enumerate(zip(d.result_paths, module.results)):
        r: dict[str, Any] = {
            "index": k,
            "paths": [list(p) for p in paths],
            "dtype": res_spec.dtype,
            "shape": list(res_spec.shape),
        }
        if d.result_batch_axes is not None and d.result_batch_axes[k] is not None:
            r["batch_axis"] = d.result_batch_axes[k]
        if d.result_echoes is not None and d.result_echoes[k] is not None:
            echo = d.result_echoes[k]
            if module.returned_arguments.get(k) != echo:
                # The reader refuses a claim the module does not make (spec §3.4).
                raise SignatureMismatchError(
                    f"result {k}: echo_of={echo}, but @main does not return argument {echo} "
                    "there unchanged (it computes that result); an echo is @main returning "
                    "the block argument itself"
                )
            r["echo_of"] = echo
        results.append(r)
    return results


def _examples(
    d: BundleDescription,
    module: StableHLOModule,
    arg_entries: list[dict[str, Any]],
    arrays: dict[str, tuple[np.ndarray, str]],
) -> dict[str, Any]:
    """The manifest's examples section; the inputs and outputs join `arrays` (to be written).

    Raises:
        SignatureMismatchError: an example output for a result @main does not have.
    """
    default_rtol, default_atol = reference_tolerances([s.dtype for s in module.results])
    ex_in = []
    for e in arg_entries:
        if e["role"] == "input":
            ds = f"/examples/inputs/{e['index']}"
            value = np.asarray(d.arguments[e["index"]].value)
            arrays[ds] = (value, e["dtype"])
            digest = dataset_digest(value, e["dtype"], DIGEST)
            ex_in.append({"argument": e["index"], "dataset": ds, DIGEST: digest})
    ex_out = []
    outputs = d.example_outputs
    given = sorted(outputs.items()) if isinstance(outputs, Mapping) else enumerate(outputs or ())
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
    return {
        "inputs": ex_in,
        "outputs": ex_out,
        "rtol": default_rtol if d.rtol is None else d.rtol,
        "atol": default_atol if d.atol is None else d.atol,
    }


def _manifest(
    d: BundleDescription,
    module: StableHLOModule,
    arrays: dict[str, tuple[np.ndarray, str]],
) -> dict[str, Any]:
    """The manifest to write, its files' digests still empty; every array it names joins
    `arrays`.

    Raises:
        SignatureMismatchError: the description does not match @main.
    """
    if len(d.arguments) != len(module.arguments):
        raise SignatureMismatchError(
            f"{len(d.arguments)} argument specs for a @main with {len(module.arguments)} arguments"
        )
    if len(d.result_paths) != len(module.results):
        raise SignatureMismatchError(
            f"{len(d.result_paths)} result path lists for a @main with {len(module.results)} "
            "results"
        )
    arg_entries, weights = _argument_entries(d.arguments, module)
    arrays.update(weights)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": d.name,
        "producer": {
            "tool": "juliabridge-python",
            "tool_version": __version__,
            "julia": None,
            "lux": None,
            "reactant": None,
            "made_with_julia": False,
            "note": d.note,
            "created": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **(d.producer or {}),
        },
        # No whole-file hash of the weights: each dataset has its own (spec §4.1).
        "module": {"file": MODULE_FILE, "sha256": ""},
        "weights": {"file": WEIGHTS_FILE},
        "mode": d.mode,
        "arguments": arg_entries,
        "results": _result_entries(d, module),
        "aliases": [{"path": list(p), "argument": a} for p, a in d.aliases],
    }
    if d.batch is not None:
        manifest["batch"] = dict(d.batch)
    if d.empty:
        manifest["empty"] = {g: [list(p) for p in d.empty.get(g, ())] for g in ("params", "state")}
    if d.static_state:
        manifest["static_state"] = [
            {"path": list(p), "value": v, "julia_type": t} for p, v, t in d.static_state
        ]
    if d.example_outputs is not None:
        manifest["examples"] = _examples(d, module, arg_entries, arrays)
    if d.metadata:
        manifest["metadata"] = dict(d.metadata)
    return manifest


def _write_files(
    tmp: Path,
    text: str,
    manifest: dict[str, Any],
    arrays: dict[str, tuple[np.ndarray, str]],
    artifact_bytes: bytes | None,
) -> None:
    """Write the module, its artifact, the weights and then the manifest into `tmp`, each
    synced, the digests filled in as the files are written."""
    (tmp / MODULE_FILE).write_text(text, encoding="utf-8")
    atomic.fsync_file(tmp / MODULE_FILE)
    manifest["module"]["sha256"] = sha256_file(tmp / MODULE_FILE)
    if artifact_bytes is not None:
        (tmp / MODULE_ARTIFACT_FILE).write_bytes(artifact_bytes)
        atomic.fsync_file(tmp / MODULE_ARTIFACT_FILE)
        manifest["module"]["artifact"]["sha256"] = sha256_file(tmp / MODULE_ARTIFACT_FILE)
    write_weights(tmp / WEIGHTS_FILE, arrays)
    parse_manifest(json.loads(json.dumps(manifest)))  # never write what we would not read
    (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    atomic.fsync_file(tmp / MANIFEST_NAME)


def write_bundle(
    path: str | os.PathLike[str],
    description: BundleDescription,
    *,
    overwrite: bool = False,
    trust: bool = False,
) -> Path:
    """Write the format-3 bundle `description` describes, atomically, and return its path.

    Args:
        path: the bundle directory to create (or, with `overwrite`, replace).
        description: the module, its arguments and results, and the manifest's optional
            sections (BundleDescription's fields say what each holds).
        overwrite: replace an existing bundle at `path`.
        trust: check the module as `import_lux(..., trust=True)` does (ops and custom calls
            outside the allowlist admitted, no resource budgets); a module only trust admits
            then loads only with trust=True.

    Returns:
        `path`.

    Raises:
        UnsupportedModuleError / MLIRParseError / ResourceLimitError: the module is refused
            (without `trust`) or does not parse.
        SignatureMismatchError: the specs do not match @main, or an echo in
            `description.result_echoes` is a result @main computes.
        ManifestError: the result would not be a valid manifest.
        BundleError, SaveError: the target exists or cannot be written.
    """
    target = Path(path)
    module = parse_module(description.mlir_text, trust=trust)
    arrays: dict[str, tuple[np.ndarray, str]] = {}
    manifest = _manifest(description, module, arrays)
    art_bytes = None
    if description.portable_artifact:
        art_entry, art_bytes = artifact_entry(module.text, MODULE_ARTIFACT_FILE, str(target))
        if art_entry is not None:
            manifest["module"]["artifact"] = art_entry
    tmp = _atomic_dir(target, overwrite)
    try:
        _write_files(tmp, description.mlir_text, manifest, arrays, art_bytes)
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
