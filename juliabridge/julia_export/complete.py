"""A Julia export directory completed to a format-3 bundle (docs/julia-export.md §4).

Julia writes facts only: the flat module, the weights and the description. Everything a bundle
adds is computed here, and everything the bundle reader checks is checked, by the reader's own
code: the description is held against @main (argument count, shapes and dtypes; result count;
trailing results that must be echoes; state results against their state arguments), echoes are
read from the module's structure (`StableHLOModule.returned_arguments`, the rule the bundle
reader and writer apply), the completed manifest goes through `parse_manifest`, the reader's
signature and echo checks and its weights-size check, and the weights are read through the
bundle's weights reader (shape, stored type, ``dtype`` attribute, storage) and digested with
BLAKE3 (`dataset_digest`) over the very values read.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..bundle.bundle import Bundle, _check_weight_sizes, check_module
from ..bundle.files import safefile
from ..bundle.files.digest import dataset_digest
from ..bundle.manifest import (
    FORMAT,
    FORMAT_VERSION,
    JULIA_TOOL,
    MANIFEST_NAME,
    Manifest,
    parse_manifest,
)
from ..bundle.manifest.schema import DATASET_DIGEST
from ..bundle.sources import _read as read_module_file
from ..bundle.sources import _text as module_text
from ..bundle.weights import ReadRequest, open_weights
from ..errors import BundleError, ManifestError, SignatureMismatchError, UnsafeBundleError
from ..stablehlo import StableHLOModule, TensorSpec, parse_module
from ..stablehlo.module import MAX_MODULE_BYTES
from .description import DESCRIPTION_NAME, ArgumentFact, Description, read_description

#: The digest the completed bundle records (format 3: BLAKE3).
DIGEST = str(DATASET_DIGEST[FORMAT_VERSION])
#: Stands in for digests while the manifest is checked before any data is read.
_PENDING = "0" * 64


@dataclass(frozen=True)
class Completion:
    """A Julia export directory as a bundle: the in-memory Bundle (rooted at the directory,
    its manifest complete and digests computed) and the arrays read while digesting."""

    description: Description
    bundle: Bundle
    #: The module file's text as Julia wrote it.
    text: str
    #: The completed manifest as JSON (what `manifest.json` of the bundle would hold).
    manifest_json: dict[str, Any]
    #: Parameter and state values by @main argument index (MLIR shape).
    weights: dict[int, np.ndarray]
    #: Example inputs by argument index and Julia's outputs by result index; None without
    #: examples, or when not kept.
    example_inputs: dict[int, np.ndarray] | None
    example_outputs: dict[int, np.ndarray] | None


def is_julia_export(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a directory holding ``juliabridge-export.json`` (or that file).

    False for anything that cannot be examined; the bundle reader then says what it is.
    """
    if not isinstance(path, (str, os.PathLike)):
        return False
    p = Path(path)
    try:
        if p.name == DESCRIPTION_NAME and not p.is_dir():
            return os.path.lexists(p)
        return p.is_dir() and os.path.lexists(p / DESCRIPTION_NAME)
    except (OSError, ValueError):
        return False


def _root(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if p.name == DESCRIPTION_NAME and not p.is_dir():
        p = p.parent
    try:
        st = p.stat()
    except OSError as e:
        raise BundleError(f"{p}: cannot access the export directory ({e.strerror or e})") from e
    if not stat.S_ISDIR(st.st_mode):
        raise BundleError(f"{p}: expected a directory holding {DESCRIPTION_NAME}")
    return p.resolve()


def _spec_text(a: ArgumentFact) -> str:
    return f"{a.dtype}, julia_shape {list(a.julia_shape)} (MLIR {TensorSpec(a.shape, a.dtype)})"


def check_against_module(d: Description, module: StableHLOModule) -> None:
    """Hold what Julia wrote against what the module says (docs/julia-export.md §4).

    Raises:
        SignatureMismatchError: argument count, an argument's shape or dtype, the result count
            or a state result's type differ, or an unlisted trailing result is computed (not an
            argument returned unchanged); the message names both sides.
        ManifestError: the results are not the outputs followed by one new value per state
            argument, in state-argument order.
    """
    desc, mod = d.path, f"@main of {d.module_file}"
    _check_arguments(d, module, desc, mod)
    _check_trailing_results(d, module, desc, mod)
    _check_state_results(d, module, desc, mod)


def _check_arguments(d: Description, module: StableHLOModule, desc: Path, mod: str) -> None:
    """The description's arguments are @main's, in number, shape and dtype."""
    if len(d.arguments) != len(module.arguments):
        raise SignatureMismatchError(
            f"{desc} lists {len(d.arguments)} arguments but {mod} takes "
            f"{len(module.arguments)}; the description does not belong to this module. Export "
            "again"
        )
    for a, spec in zip(d.arguments, module.arguments):
        if TensorSpec(a.shape, a.dtype) == spec:
            continue
        hint = ""
        if a.dtype == spec.dtype and a.julia_shape == spec.shape and a.shape != spec.shape:
            hint = (
                " (julia_shape is written in MLIR order; it is Julia's size, the MLIR shape "
                "reversed)"
            )
        raise SignatureMismatchError(
            f"{desc}: arguments[{a.index}] ({a.label}) is {_spec_text(a)} but {mod} argument "
            f"{a.index} is {spec}{hint}; the description does not belong to this module. "
            "Export again"
        )


def _check_trailing_results(d: Description, module: StableHLOModule, desc: Path, mod: str) -> None:
    """@main returns at least the listed results, and any after them are echoes."""
    n, m = len(d.results), len(module.results)
    if m < n:
        raise SignatureMismatchError(
            f"{desc} lists {n} results but {mod} returns {m}; the description does not belong "
            "to this module. Export again"
        )
    for k in range(n, m):
        if k not in module.returned_arguments:
            raise SignatureMismatchError(
                f"{desc} lists {n} results but {mod} returns {m}, and result {k} "
                f"({module.results[k]}) is computed, not an argument returned unchanged; only "
                "echoes of arguments may follow the listed results. Export again"
            )


def _check_state_results(d: Description, module: StableHLOModule, desc: Path, mod: str) -> None:
    """The listed results are the outputs, then one new value per state argument, in order,
    each of its argument's type."""
    n = len(d.results)
    state = [a for a in d.arguments if a.role == "state"]
    by_path = {a.path: a for a in state}
    outputs = sum(1 for r in d.results if r.path[0] == "output")
    for r in d.results:
        w = f"{desc}: results[{r.index}] {list(r.path)}"
        if r.path[0] == "output":
            if r.index >= outputs:
                raise ManifestError(
                    f"{w}: an output after a state result; the flat function returns every "
                    "output leaf first, then the new state leaves"
                )
            continue
        arg = by_path.get(r.path[1:])
        if arg is None:
            known = ", ".join(s.label for s in state[:6]) or "none"
            raise ManifestError(
                f"{w}: names no state argument (state arguments: {known}); the returned state "
                "is the state tree passed in. Export again"
            )
        j = r.index - outputs
        if j >= len(state) or state[j] is not arg:
            want = state[j].label if j < len(state) else "nothing (every state leaf is listed)"
            raise ManifestError(
                f"{w}: state result {j} is {arg.label} but state argument {j} is {want}; the new "
                "state leaves come one per state argument, in the order of the state arguments. "
                "Export again"
            )
        if module.results[r.index] != TensorSpec(arg.shape, arg.dtype):
            raise SignatureMismatchError(
                f"{w}: {mod} result {r.index} is {module.results[r.index]} but the state "
                f"argument arguments[{arg.index}] ({arg.label}) is {_spec_text(arg)}; a state leaf "
                "keeps its shape and dtype. Export again"
            )
    if n - outputs != len(state):
        raise ManifestError(
            f"{desc}: {n - outputs} state results for {len(state)} state arguments; the flat "
            "function returns one new value per state argument. Export again"
        )


def batch_size(d: Description) -> int | None:
    """The common MLIR axis-0 size of every input of rank >= 1 (None: none, or they differ,
    or it is 0)."""
    dims = {a.shape[0] for a in d.arguments if a.role == "input" and a.shape}
    if len(dims) != 1:
        return None
    (b,) = dims
    return b if b >= 1 else None


def _producer(d: Description) -> dict[str, Any]:
    p = d.producer
    out: dict[str, Any] = {
        "tool": JULIA_TOOL,
        "tool_version": p["tool_version"],
        "julia": p["julia"],
        "lux": p["lux"],
        "reactant": p["reactant"],
        "made_with_julia": True,
        "note": (
            f"Completed by juliabridge {__version__} from a Julia export directory "
            f"({DESCRIPTION_NAME}): digests, echoes and batch facts computed in Python"
        ),
    }
    if p.get("created") is not None:
        out["created"] = p["created"]
    return out


def build_manifest(d: Description, module: StableHLOModule, module_sha256: str) -> dict[str, Any]:
    """The format-3 manifest (as JSON) of the directory, with pending digests.

    Batch axis 0 on every input whose axis 0 is the batch size (and on outputs of that size
    there); `samples_independent` false in train mode, else Julia's value, else false (not
    known: the model then runs only at its traced batch size). A result @main returns as an
    argument unchanged is recorded `echo_of` that argument where their batch axes agree;
    trailing unlisted results are echoes with empty paths.
    """
    b = batch_size(d)
    args = _argument_entries(d, b)
    m: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": d.name,
        "producer": _producer(d),
        "module": {"file": d.module_file, "sha256": module_sha256},
        "weights": {"file": d.weights_file},
        "mode": d.mode,
        "arguments": args,
        "results": _result_entries(d, module, args, b),
        "aliases": [],
    }
    if b is not None:
        independent = d.mode == "test" and bool(d.samples_independent)
        m["batch"] = {"size": b, "samples_independent": independent}
    m.update(_optional_sections(d))
    return m


def _argument_entries(d: Description, b: int | None) -> list[dict[str, Any]]:
    """The manifest's arguments: the description's, with pending digests and batch axis 0 on
    inputs whose axis 0 is the batch size `b`."""
    args: list[dict[str, Any]] = []
    for a in d.arguments:
        e: dict[str, Any] = {
            "index": a.index,
            "role": a.role,
            "path": list(a.path),
            "dtype": a.dtype,
            "shape": list(a.shape),
            "julia_shape": list(a.julia_shape),
        }
        if a.dataset is not None:
            e["dataset"] = a.dataset
            e[DIGEST] = _PENDING
        if a.role == "input" and b is not None and a.shape and a.shape[0] == b:
            e["batch_axis"] = 0
        if a.tied_paths:
            e["tied_paths"] = [list(p) for p in a.tied_paths]
        args.append(e)
    return args


def _result_entries(
    d: Description, module: StableHLOModule, args: list[dict[str, Any]], b: int | None
) -> list[dict[str, Any]]:
    """The manifest's results: one per @main result, with its batch axis and the argument it
    echoes (where their batch axes agree); trailing unlisted results have empty paths."""
    results: list[dict[str, Any]] = []
    for k, spec in enumerate(module.results):
        echo = module.returned_arguments.get(k)
        if k < len(d.results):
            path = d.results[k].path
            paths = [list(path)]
            axis = 0 if b is not None and path[0] == "output" and spec.shape[:1] == (b,) else None
            if echo is not None and args[echo].get("batch_axis") != axis:
                echo = None  # still the argument's value, but described as computed
        else:
            paths, axis = [], args[echo].get("batch_axis") if echo is not None else None
        r: dict[str, Any] = {
            "index": k,
            "paths": paths,
            "dtype": spec.dtype,
            "shape": list(spec.shape),
        }
        if axis is not None:
            r["batch_axis"] = axis
        if echo is not None:
            r["echo_of"] = echo
        results.append(r)
    return results


def _optional_sections(d: Description) -> dict[str, Any]:
    """The manifest's empty, static_state, examples and metadata, where the description has
    them (in that order)."""
    m: dict[str, Any] = {}
    if d.empty:
        m["empty"] = {g: [list(p) for p in d.empty.get(g, ())] for g in ("params", "state")}
    if d.static_state:
        m["static_state"] = [
            {"path": list(p), "value": v, "julia_type": t} for p, v, t in d.static_state
        ]
    if d.example_outputs is not None and d.example_inputs is not None:
        m["examples"] = {
            "inputs": [
                {"argument": i, "dataset": ds, DIGEST: _PENDING} for i, ds in d.example_inputs
            ],
            "outputs": [
                {"result": k, "dataset": ds, DIGEST: _PENDING} for k, ds in d.example_outputs
            ],
        }
    if d.metadata:
        m["metadata"] = d.metadata
    return m


def _parse(m: dict[str, Any], d: Description) -> Manifest:
    """`parse_manifest` of the completed manifest; a refusal names the description."""
    try:
        return parse_manifest(json.loads(json.dumps(m)))
    except (ManifestError, UnsafeBundleError) as e:
        text = str(e)
        if text.startswith(f"{MANIFEST_NAME}: "):
            text = text[len(MANIFEST_NAME) + 2 :]
        raise type(e)(
            f"{d.path}: completed to a bundle manifest, it breaks a rule of "
            f"docs/bundle-format.md: {text} (argument and result numbers are the "
            "description's; a result's paths[0] is its path). Export again"
        ) from None


def _requests(m: Manifest) -> list[tuple[str, int, ReadRequest]]:
    """(group, index, request) of every dataset: parameters and states, then examples."""
    out = [
        ("weights", a.index, ReadRequest(a.dataset, a.shape, a.dtype, a.label))
        for a in m.arguments
        if a.dataset is not None
    ]
    if m.examples is not None:
        for group, entries, specs, what in (
            ("inputs", m.examples.inputs, m.arguments, "example input"),
            ("outputs", m.examples.outputs, m.results, "example output"),
        ):
            for e in entries:
                spec = specs[e.index]
                where = f"{what} {spec.label}"
                out.append((group, e.index, ReadRequest(e.dataset, spec.shape, spec.dtype, where)))
    return out


def complete(
    path: str | os.PathLike[str], *, trust: bool = False, keep_examples: bool = False
) -> Completion:
    """Read a Julia export directory and complete it to a format-3 bundle in memory.

    Args:
        path: the directory (or its ``juliabridge-export.json``).
        trust: admit ops and custom calls outside the allowlist (only for modules you made).
        keep_examples: keep the example arrays (for writing a bundle); otherwise they are
            read, checked and digested, then dropped.

    Returns:
        The Completion.

    Raises:
        BundleError: a file is missing, unreadable or not a regular file (UnsafeBundleError:
            a symlink or a file name leaving the directory; ManifestError: the description
            breaks a rule; BundleVersionError: its format_version is too new).
        SignatureMismatchError: description, module and weights disagree (the message names
            both sides).
        MLIRParseError / UnsupportedModuleError: the module does not parse or is refused.
    """
    root = _root(path)
    with safefile.directory(root) as dfd:
        d = read_description(root, dfd)
        module_path = root / d.module_file
        data = read_module_file(module_path, "module", MAX_MODULE_BYTES, dfd)
        sha = hashlib.sha256(data).hexdigest()
        text = module_text(module_path, data)
        del data
        module = parse_module(text, trust=trust, origin=str(module_path))
        check_against_module(d, module)
        m_json = build_manifest(d, module, sha)
        manifest = _parse(m_json, d)
        check_module(manifest, module, module.origin)
        weights_path = root / d.weights_file
        fd, st = safefile.open_regular(weights_path, "the weights file", dir_fd=dfd)
    got, digests = _read_and_digest(manifest, weights_path, fd, st.st_size, keep_examples)
    _fill_digests(m_json, digests)
    manifest = _parse(m_json, d)
    bundle = Bundle(
        root,
        manifest,
        module,
        checksums_verified=True,
        module_source="text",
        module_source_note=(
            f"{d.module_file} of a Julia export directory, completed in memory (digests "
            "computed from the weights as read)"
        ),
    )
    examples = keep_examples and manifest.examples is not None
    return Completion(
        d,
        bundle,
        text,
        m_json,
        got["weights"],
        got["inputs"] if examples else None,
        got["outputs"] if examples else None,
    )


def _read_and_digest(
    manifest: Manifest, weights_path: Path, fd: int, size: int, keep_examples: bool
) -> tuple[dict[str, dict[int, np.ndarray]], dict[tuple[str, int], str]]:
    """Every dataset of the weights file (open as `fd`, closed here) read through the bundle's
    reader and digested: the arrays kept (weights, and examples with `keep_examples`) by group
    and index, and each dataset's digest by (group, index)."""
    got: dict[str, dict[int, np.ndarray]] = {"weights": {}, "inputs": {}, "outputs": {}}
    digests: dict[tuple[str, int], str] = {}
    try:
        _check_weight_sizes(manifest, weights_path, size)
        plan = _requests(manifest)
        keys = {id(r): (g, i) for g, i, r in plan}
        with open_weights(weights_path, fd=fd) as f:
            for r, arr in f.read([r for _, _, r in plan]):
                g, i = keys[id(r)]
                digests[(g, i)] = dataset_digest(arr, r.dtype, DIGEST)
                if g == "weights" or keep_examples:
                    got[g][i] = arr
    finally:
        os.close(fd)
    return got, digests


def _fill_digests(m_json: dict[str, Any], digests: dict[tuple[str, int], str]) -> None:
    """Replace the manifest's pending digests with the computed ones."""
    for e in m_json["arguments"]:
        if "dataset" in e:
            e[DIGEST] = digests[("weights", e["index"])]
    if "examples" in m_json:
        for e in m_json["examples"]["inputs"]:
            e[DIGEST] = digests[("inputs", e["argument"])]
        for e in m_json["examples"]["outputs"]:
            e[DIGEST] = digests[("outputs", e["result"])]


__all__ = [
    "Completion",
    "batch_size",
    "build_manifest",
    "check_against_module",
    "complete",
    "is_julia_export",
]
