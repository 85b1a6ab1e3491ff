"""From a decoded manifest object to a Manifest: the structure through schema.py, then the
rules (rules.py) relating one part to another."""

from __future__ import annotations

from typing import Any

from ...errors import BundleVersionError
from .entries import (
    MAX_TENSOR_BYTES,
    AliasEntry,
    ArgumentEntry,
    ArtifactRef,
    BatchInfo,
    ExampleEntry,
    Examples,
    FileRef,
    Manifest,
    Producer,
    ResultEntry,
    StaticLeaf,
    default_tolerances,
    tensor_bytes,
)
from .rules import PRODUCER_KEYS, _check_files, check_consistency
from .schema import (
    DATASET_DIGEST,
    FORMAT_FIELD,
    FORMAT_VERSION,
    MANIFEST,
    READABLE_VERSIONS,
    typed,
)
from .schema import fail as _fail


def _check_size(shape: tuple[int, ...], dtype: str, where: str) -> None:
    n = tensor_bytes(shape, dtype)
    if n > MAX_TENSOR_BYTES:
        raise _fail(
            where,
            f"shape {list(shape)} of {dtype} is {n} bytes, more than the "
            f"{MAX_TENSOR_BYTES >> 30} GiB juliabridge accepts for one array; the manifest is "
            "corrupt or forged",
        )


# --- from the validated structure to the Manifest -------------------------------------------


def _in_range(value: int, where: str, hi: int) -> int:
    if not 0 <= value <= hi:
        raise _fail(where, f"expected an integer in [0, {hi}], found {value}")
    return value


def _file_ref(d: dict[str, Any]) -> FileRef:
    art = d.get("artifact")
    return FileRef(
        d["file"],
        d["sha256"],
        None if art is None else ArtifactRef(**{k: art[k] for k in ARTIFACT_KEYS}),
    )


ARTIFACT_KEYS = ("file", "sha256", "stablehlo_version", "target")


def _argument(d: dict[str, Any], i: int, version: int) -> ArgumentEntry:
    w = f"arguments[{i}]"
    if d["index"] != i:
        raise _fail(
            w, f"index is {d['index']} but the entry is number {i}; entries must be in @main order"
        )
    shape, julia_shape = d["shape"], d["julia_shape"]
    if julia_shape != tuple(reversed(shape)):
        raise _fail(w, f"julia_shape {list(julia_shape)} is not shape {list(shape)} reversed")
    _check_size(shape, d["dtype"], f"{w}.shape")
    return ArgumentEntry(
        index=i,
        role=d["role"],
        path=d["path"],
        dtype=d["dtype"],
        shape=shape,
        julia_shape=julia_shape,
        dataset=d["dataset"],
        batch_axis=d["batch_axis"],
        tied_paths=d["tied_paths"],
        digest=_digest(d, version) if d["dataset"] is not None else None,
    )


def _digest(d: dict[str, Any], version: int) -> str | None:
    """The per-dataset digest of entry `d`, under its version's key (spec §4.1)."""
    key = DATASET_DIGEST[version]
    return None if key is None else d.get(key)


def _result(d: dict[str, Any], k: int, n_args: int) -> ResultEntry:
    w = f"results[{k}]"
    if d["index"] != k:
        raise _fail(
            w, f"index is {d['index']} but the entry is number {k}; entries must be in @main order"
        )
    echo_of = d.get("echo_of")
    if echo_of is not None:
        if n_args == 0:
            raise _fail(f"{w}.echo_of", "refers to an argument but @main has none")
        _in_range(echo_of, f"{w}.echo_of", n_args - 1)
    _check_size(d["shape"], d["dtype"], f"{w}.shape")
    return ResultEntry(
        index=k,
        paths=d["paths"],
        dtype=d["dtype"],
        shape=d["shape"],
        batch_axis=d["batch_axis"],
        echo_of=echo_of,
    )


def _example_entries(
    entries: tuple[dict[str, Any], ...], group: str, key: str, limit: int, version: int
) -> tuple[ExampleEntry, ...]:
    out: list[ExampleEntry] = []
    seen: dict[int, int] = {}
    for j, e in enumerate(entries):
        w = f"examples.{group}[{j}].{key}"
        if limit == 0:
            raise _fail(w, f"refers to a {key} but @main has none")
        index = _in_range(e[key], w, limit - 1)
        if index in seen:
            raise _fail(
                w,
                f"{key} {index} is also given by examples.{group}[{seen[index]}]; each "
                "appears once",
            )
        seen[index] = j
        out.append(ExampleEntry(index, e["dataset"], _digest(e, version)))
    return tuple(out)


def _examples(
    d: dict[str, Any],
    args: tuple[ArgumentEntry, ...],
    results: tuple[ResultEntry, ...],
    version: int,
) -> Examples:
    w = "examples"
    ins = _example_entries(d["inputs"], "inputs", "argument", len(args), version)
    outs = _example_entries(d["outputs"], "outputs", "result", len(results), version)
    for j, e in enumerate(ins):
        if args[e.index].role != "input":
            raise _fail(
                f"{w}.inputs[{j}].argument",
                f"argument {e.index} is a {args[e.index].role}, expected an input argument (the "
                "bundle's own parameters and states are the example's)",
            )
    missing = sorted({a.index for a in args if a.role == "input"} - {e.index for e in ins})
    if missing:
        raise _fail(
            f"{w}.inputs",
            f"no value for input argument(s) {missing}; the examples give every input",
        )
    rtol, atol = default_tolerances([results[e.index].dtype for e in outs])
    return Examples(
        ins,
        outs,
        rtol if d["rtol"] is None else d["rtol"],
        atol if d["atol"] is None else d["atol"],
    )


def parse_manifest(obj: Any) -> Manifest:
    """Validate a decoded manifest.json object (structure and internal consistency).

    Args:
        obj: the decoded JSON (format version 1, 2 or 3).

    Returns:
        The validated Manifest.

    Raises:
        ManifestError: a key is missing, has the wrong type or breaks a rule of the spec; the
            message names the field (e.g. ``arguments[3].path[1]``) and what was expected.
        UnsafeBundleError: a file name could leave the bundle directory.
        BundleVersionError: the manifest is of a newer format than this reader knows.
    """
    obj = typed(obj, dict, "top level")
    for key in ("format", "format_version"):
        if key not in obj:
            raise _fail("top level", f"missing required key {key!r}")
    FORMAT_FIELD.node.check(obj["format"], "format", FORMAT_VERSION)
    version = typed(obj["format_version"], int, "format_version")
    if version > max(READABLE_VERSIONS):
        raise BundleVersionError(
            f"manifest.json: format_version {version} is newer than this juliabridge reads "
            f"({', '.join(map(str, READABLE_VERSIONS))}); upgrade juliabridge "
            "(pip install -U juliabridge)"
        )
    if version not in READABLE_VERSIONS:
        raise _fail(
            "format_version",
            f"expected {', '.join(map(str, READABLE_VERSIONS[:-1]))} or {READABLE_VERSIONS[-1]}, "
            f"found {version}",
        )
    d = MANIFEST.check(obj, "top level", version)
    args = tuple(_argument(a, i, version) for i, a in enumerate(d["arguments"]))
    results = tuple(_result(r, k, len(args)) for k, r in enumerate(d["results"]))
    aliases = []
    for j, a in enumerate(d["aliases"]):
        w = f"aliases[{j}]"
        if not args:
            raise _fail(w, "refers to an argument but @main has none")
        aliases.append(
            AliasEntry(a["path"], _in_range(a["argument"], f"{w}.argument", len(args) - 1))
        )
    b = d["batch"]
    empty = d["empty"]
    manifest = Manifest(
        name=d["name"],
        producer=Producer(**{k: d["producer"][k] for k in PRODUCER_KEYS}),
        module=_file_ref(d["module"]),
        weights=_file_ref(d["weights"]),
        mode=d["mode"],
        arguments=args,
        results=results,
        aliases=tuple(aliases),
        batch=None if b is None else BatchInfo(b["size"], b["samples_independent"]),
        examples=None
        if d["examples"] is None
        else _examples(d["examples"], args, results, version),
        vjp=None if d["vjp"] is None else _file_ref(d["vjp"]),
        metadata=dict(d["metadata"]),
        empty={} if empty is None else {g: empty[g] for g in ("params", "state")},
        format_version=version,
        static_state=tuple(
            StaticLeaf(e["path"], e["value"], e["julia_type"]) for e in d.get("static_state", ())
        ),
    )
    _check_files(manifest)
    check_consistency(manifest)
    return manifest
