"""manifest.json: parsing and validation against docs/bundle-format.md (format versions 1 to 3).

Format 3 is what writers write; formats 1 and 2 are still read (spec §8 lists the differences). The
structure of each object and field is declared once, in schema.py (which also writes the
published JSON Schema); this module reads a manifest through it and adds the rules that relate
one part of a manifest to another.

manifest/ owns the manifest: this module, schema.py (the declarations) and write_schema.py
(``python -m juliabridge.bundle.manifest.write_schema``). It may import errors, dtypes and
stablehlo.nesting only; the weights, the bundle reader and the writer import it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import dtypes
from ...errors import BundleVersionError, ManifestError, UnsafeBundleError
from ...stablehlo.nesting import JSON_SKIP, max_depth
from .schema import (
    DATASET_DIGEST,
    FORMAT,
    FORMAT_FIELD,
    FORMAT_VERSION,
    JULIA_TOOL,
    MANIFEST,
    MAX_DEPTH,
    MAX_JULIA_TYPE,
    MAX_PATH_STEP,
    MAX_RANK,
    MAX_STATIC_STRING,
    MODES,
    READABLE_VERSIONS,
    ROLES,
    safe_file_name,
    typed,
    version_tuple,
)
from .schema import fail as _fail

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "JULIA_TOOL",
    "MANIFEST_NAME",
    "MAX_DEPTH",
    "MAX_JULIA_TYPE",
    "MAX_MANIFEST_BYTES",
    "MAX_PATH_STEP",
    "MAX_RANK",
    "MAX_STATIC_STRING",
    "MAX_TENSOR_BYTES",
    "MODES",
    "READABLE_VERSIONS",
    "ROLES",
    "AliasEntry",
    "ArgumentEntry",
    "ArtifactRef",
    "BatchInfo",
    "ExampleEntry",
    "Examples",
    "FileRef",
    "LuxPath",
    "Manifest",
    "PathStep",
    "Producer",
    "ResultEntry",
    "StaticLeaf",
    "decode_strict_json",
    "default_tolerances",
    "format_path",
    "load_manifest",
    "parse_manifest",
    "safe_file_name",
    "tensor_bytes",
    "version_tuple",
]

MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20
#: Largest array (in bytes) any argument or result may declare: 256 GiB. Checked on the
#: manifest alone, before any file is opened, so absurd claims (e.g. 10^12 elements) fail at once.
MAX_TENSOR_BYTES = 1 << 38

PathStep = str | int
LuxPath = tuple[PathStep, ...]


@dataclass(frozen=True)
class ArtifactRef:
    """A StableHLO portable artifact (VHLO bytecode) of a module (spec §2.1)."""

    file: str
    sha256: str
    #: The StableHLO version of the writer's library (its ``get_current_version()``).
    stablehlo_version: str
    #: The VHLO version the artifact was serialized to; readers whose StableHLO reads it use it.
    target: str


@dataclass(frozen=True)
class FileRef:
    """A file inside the bundle and the sha256 its bytes must have.

    `sha256` is None only for a weights file of format 2 or later, whose datasets carry their
    own digests.
    """

    file: str
    sha256: str | None
    artifact: ArtifactRef | None = None


@dataclass(frozen=True)
class Producer:
    """Who wrote the bundle; `made_with_julia` is false for bundles made without Julia."""

    tool: str
    tool_version: str
    julia: str | None
    lux: str | None
    reactant: str | None
    made_with_julia: bool
    note: str | None = None
    created: str | None = None


@dataclass(frozen=True)
class ArgumentEntry:
    """One @main argument: its role, Lux path, MLIR shape/dtype and HDF5 dataset."""

    index: int
    role: str
    path: LuxPath
    dtype: str
    shape: tuple[int, ...]
    julia_shape: tuple[int, ...]
    dataset: str | None = None
    batch_axis: int | None = None
    tied_paths: tuple[LuxPath, ...] = ()
    #: Digest of the dataset's canonical bytes (spec §4.1), by the manifest's
    #: `dataset_digest` algorithm; None in format 1.
    digest: str | None = None

    @property
    def label(self) -> str:
        """Readable name such as ``params.layer_1.weight`` or ``x``."""
        root = {"input": "x", "parameter": "params", "state": "state"}[self.role]
        return format_path(root, self.path)


@dataclass(frozen=True)
class ResultEntry:
    """One @main result and the output paths it fills."""

    index: int
    paths: tuple[LuxPath, ...]
    dtype: str
    shape: tuple[int, ...]
    batch_axis: int | None = None
    #: The argument this result returns unchanged (spec §3.4); format 2 and later.
    echo_of: int | None = None

    @property
    def label(self) -> str:
        """Readable name of the first output path, e.g. ``output`` or ``state.layer_2.mean``."""
        if not self.paths:
            return f"result {self.index} (argument {self.echo_of} returned unchanged)"
        return format_path("", self.paths[0])


@dataclass(frozen=True)
class AliasEntry:
    """An output that is @main argument `argument` returned unchanged."""

    path: LuxPath
    argument: int


@dataclass(frozen=True)
class BatchInfo:
    """The traced batch size and whether samples are independent."""

    size: int
    samples_independent: bool


@dataclass(frozen=True)
class ExampleEntry:
    """One example dataset: the argument (inputs) or result (outputs) it belongs to."""

    index: int
    dataset: str
    #: Digest of the dataset's canonical bytes (spec §4.1), by the manifest's
    #: `dataset_digest` algorithm; None in format 1.
    digest: str | None = None


@dataclass(frozen=True)
class Examples:
    """Example inputs (by argument) and Julia's outputs (by result) in the weights file."""

    inputs: tuple[ExampleEntry, ...]
    outputs: tuple[ExampleEntry, ...]
    rtol: float
    atol: float


@dataclass(frozen=True)
class StaticLeaf:
    """A non-array leaf of Lux's state, e.g. ``st.training = Val(true)`` (spec §3.11)."""

    path: LuxPath
    value: bool | int | float | str | None
    julia_type: str


@dataclass(frozen=True)
class Manifest:
    """A validated manifest.json."""

    name: str
    producer: Producer
    module: FileRef
    weights: FileRef
    mode: str
    arguments: tuple[ArgumentEntry, ...]
    results: tuple[ResultEntry, ...]
    aliases: tuple[AliasEntry, ...]
    batch: BatchInfo | None = None
    examples: Examples | None = None
    vjp: FileRef | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    empty: dict[str, tuple[LuxPath, ...]] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    static_state: tuple[StaticLeaf, ...] = ()

    @property
    def dataset_digest(self) -> str | None:
        """The algorithm of the per-dataset digests (spec §4.1): ``"blake3"`` (format 3),
        ``"sha256"`` (format 2) or None (format 1, whose weights file has one sha256)."""
        return DATASET_DIGEST[self.format_version]

    def files(self) -> list[tuple[str, FileRef]]:
        """(manifest key, file) for every file the manifest names, artifacts included."""
        out: list[tuple[str, FileRef]] = []
        for key, ref in (("module", self.module), ("weights", self.weights), ("vjp", self.vjp)):
            if ref is None:
                continue
            out.append((key, ref))
            if ref.artifact is not None:
                out.append((f"{key}.artifact", FileRef(ref.artifact.file, ref.artifact.sha256)))
        return out


def format_path(root: str, path: LuxPath) -> str:
    """``params.layer_1.weight``-style text for a path (integer steps shown as [n])."""
    text = root
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
    return text or "<root>"


def tensor_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes of an array of `shape` and MLIR element type `dtype` (numpy itemsize)."""
    n = dtypes.to_numpy(dtype).itemsize
    for d in shape:
        n *= d
    return n


def _check_size(shape: tuple[int, ...], dtype: str, where: str) -> None:
    n = tensor_bytes(shape, dtype)
    if n > MAX_TENSOR_BYTES:
        raise _fail(
            where,
            f"shape {list(shape)} of {dtype} is {n} bytes, more than the "
            f"{MAX_TENSOR_BYTES >> 30} GiB juliabridge accepts for one array; the manifest is "
            "corrupt or forged",
        )


def default_tolerances(result_dtypes: list[str] | tuple[str, ...]) -> tuple[float, float]:
    """(rtol, atol) for verify when the manifest gives none (spec §3.7).

    Set by the least precise float type among `result_dtypes`: 16-bit 1e-2/1e-3, 32-bit
    (complex<f32> included) 1e-4/1e-5, 64-bit 1e-10/1e-12; 0/0 when no result is a float.
    """
    if any(d in ("f16", "bf16") for d in result_dtypes):
        return 1e-2, 1e-3
    if any(d in ("f32", "complex<f32>") for d in result_dtypes):
        return 1e-4, 1e-5
    if any(d in ("f64", "complex<f64>") for d in result_dtypes):
        return 1e-10, 1e-12
    return 0.0, 0.0


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
    _check_consistency(manifest)
    return manifest


#: Reactant's exporter (``Serialization.export_to_enzymejax``), as recorded in metadata and in
#: converted bundles' producer; here so that readers of a producer need not import
#: reactant_export/.
REACTANT_EXPORTER = "Reactant.Serialization.export_to_enzymejax"

PRODUCER_KEYS = (
    "tool",
    "tool_version",
    "julia",
    "lux",
    "reactant",
    "made_with_julia",
    "note",
    "created",
)


def _check_files(m: Manifest) -> None:
    """Every file the manifest names is a different file, and none is the manifest itself."""
    # Case-folded: on macOS and Windows "Model.mlir" and "model.mlir" are one file.
    taken: dict[str, str] = {MANIFEST_NAME: "the manifest"}
    for key, ref in m.files():
        folded = ref.file.casefold()
        if folded in taken:
            raise _fail(
                f"{key}.file",
                f"{ref.file!r} is also {taken[folded]}; every file of a bundle has its own name",
            )
        taken[folded] = f"{key}.file"


def _check_consistency(m: Manifest) -> None:
    seen: dict[tuple[str, LuxPath], int] = {}
    datasets: dict[str, str] = {}
    for a in m.arguments:
        for p in (a.path, *a.tied_paths):
            key = (a.role, p)
            if key in seen:
                raise _fail(
                    f"arguments[{a.index}]",
                    f"{format_path(a.role, p)} is also argument {seen[key]}; paths must be unique",
                )
            seen[key] = a.index
        if a.dataset is not None:
            _claim_dataset(datasets, a.dataset, f"arguments[{a.index}].dataset")
    if m.examples is not None:
        for group, entries in (("inputs", m.examples.inputs), ("outputs", m.examples.outputs)):
            for j, entry in enumerate(entries):
                _claim_dataset(datasets, entry.dataset, f"examples.{group}[{j}].dataset")
    for r in m.results:
        if r.echo_of is not None:
            _check_echo(m, r, r.echo_of)
    # Integer and named steps cannot share a parent, and no path may be a prefix of another.
    outputs: dict[LuxPath, str] = {}
    for r in m.results:
        for j, p in enumerate(r.paths):
            _claim(outputs, p, f"results[{r.index}].paths[{j}]")
    for j, al in enumerate(m.aliases):
        _claim(outputs, al.path, f"aliases[{j}].path")
    _check_prefixes(list(outputs), "output")
    _check_step_kinds(list(outputs), "output")
    for role in ROLES:
        _check_prefixes([p for (r, p) in seen if r == role], role)
    static = {leaf.path: j for j, leaf in enumerate(m.static_state)}
    if len(static) != len(m.static_state):
        raise _fail("static_state", "a path appears twice; each state leaf is listed once")
    for group, role in (("params", "parameter"), ("state", "state")):
        empties = m.empty.get(group, ())
        leaves = {p for (r, p) in seen if r == role}
        if role == "state":
            _check_static_paths(static, leaves)
            leaves |= set(static)
        # Every prefix of every leaf, so each empty path is checked in O(its length).
        inner = {leaf[:n] for leaf in leaves for n in range(len(leaf) + 1)}
        for e in empties:
            if e in inner or any(e[:n] in leaves for n in range(len(e) + 1)):
                raise _fail(
                    f"empty.{group}",
                    f"{list(e)} is listed as an empty container but holds or is a leaf",
                )
        _check_prefixes(list(leaves), role)
        _check_step_kinds([*leaves, *empties], role)
    _check_step_kinds([p for (r, p) in seen if r == "input"], "input")
    _check_returned_state(m)


def _check_static_paths(static: dict[LuxPath, int], state_leaves: set[LuxPath]) -> None:
    """A static leaf is a leaf of the state tree beside the arrays: not on, above or below one."""
    above = {leaf[:n] for leaf in state_leaves for n in range(len(leaf))}
    for p, j in static.items():
        w = f"static_state[{j}].path"
        if p in state_leaves:
            raise _fail(w, f"{list(p)} is also a state argument; a leaf is an array or static")
        if p in above:
            raise _fail(
                w,
                f"{list(p)} is above the state argument(s) below it; a leaf cannot also be a "
                "container",
            )
        for n in range(1, len(p)):
            if p[:n] in state_leaves:
                raise _fail(
                    w,
                    f"{list(p)} is below the state argument {list(p[:n])}; a leaf cannot also "
                    "be a container",
                )


def _claim_dataset(datasets: dict[str, str], name: str, where: str) -> None:
    if name in datasets:
        raise _fail(where, f"{name} is also used by {datasets[name]}; each dataset holds one value")
    datasets[name] = where


def _check_echo(m: Manifest, r: ResultEntry, echo_of: int) -> None:
    """An echoed argument comes back as it went in: same shape, dtype and batch axis."""
    a = m.arguments[echo_of]
    w = f"results[{r.index}]"
    if (r.shape, r.dtype) != (a.shape, a.dtype):
        raise _fail(
            w,
            f"echo_of argument {a.index} ({a.label}, {a.dtype} {list(a.shape)}) but the result "
            f"is {r.dtype} {list(r.shape)}; an echoed argument keeps its shape and dtype",
        )
    if r.batch_axis != a.batch_axis:
        raise _fail(
            f"{w}.batch_axis",
            f"expected {a.batch_axis} (the batch_axis of argument {a.index}, which it echoes), "
            f"found {r.batch_axis}",
        )


def _check_returned_state(m: Manifest) -> None:
    """new_state is the state tree: every returned state leaf is a state argument's leaf.

    Lux returns the whole state with some leaves replaced, so a value returned at
    ``["state", *p]`` must be the state argument at `p`, with its shape and dtype.
    """
    state_args = {a.path: a for a in m.arguments if a.role == "state"}
    returned: list[tuple[LuxPath, str, tuple[int, ...], str]] = []
    for r in m.results:
        returned += [
            (p, f"results[{r.index}].paths[{j}]", r.shape, r.dtype) for j, p in enumerate(r.paths)
        ]
    for j, al in enumerate(m.aliases):
        src = m.arguments[al.argument]
        returned.append((al.path, f"aliases[{j}].path", src.shape, src.dtype))
    for path, where, shape, dtype in returned:
        if path[0] != "state":
            continue
        target = state_args.get(path[1:])
        if target is None:
            raise _fail(
                where,
                f"{list(path)} is not the path of a state argument; the returned state must "
                "be the same tree as the state passed in (Lux returns st with leaves replaced)",
            )
        if (target.shape, target.dtype) != (shape, dtype):
            raise _fail(
                where,
                f"returns {dtype} {list(shape)} for {target.label}, which is "
                f"{target.dtype} {list(target.shape)}; a state leaf keeps its shape and dtype",
            )


def _check_step_kinds(paths: list[LuxPath], what: str) -> None:
    """Below one parent, steps are all integers (Tuple/Array) or all names (NamedTuple/Dict)."""
    kinds: dict[LuxPath, type] = {}
    for p in paths:
        for n, step in enumerate(p):
            kind = int if isinstance(step, int) else str
            if kinds.setdefault(p[:n], kind) is not kind:
                raise _fail(
                    what,
                    f"below {list(p[:n])} some path steps are integers and some are names; a "
                    "Julia container is either a Tuple/Array (integer steps) or a NamedTuple, "
                    "struct or Dict (names), never both",
                )


def _claim(outputs: dict[LuxPath, str], path: LuxPath, where: str) -> None:
    if path in outputs:
        raise _fail(
            where,
            f"output path {list(path)} is also given by {outputs[path]}; "
            "each output path appears once",
        )
    outputs[path] = where


def _check_prefixes(paths: list[LuxPath], what: str) -> None:
    ordered = sorted(paths, key=lambda p: (len(p), [str(s) for s in p]))
    as_set = set(paths)
    for p in ordered:
        for n in range(len(p)):
            if p[:n] in as_set:
                raise _fail(
                    what,
                    f"path {list(p[:n])} is a leaf but {list(p)} continues below it; "
                    "a leaf cannot also be a container",
                )


class _StrictJSONError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _StrictJSONError(
                f"key {key!r:.80} appears twice in one object; readers could disagree on which "
                "value counts"
            )
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise _StrictJSONError(f"{name} is not a JSON number")


def decode_strict_json(data: bytes, origin: str | Path) -> Any:
    """Decode `data` as strict JSON: UTF-8, no duplicate keys, no NaN/Infinity, at most
    MAX_DEPTH levels of nesting (measured before parsing).

    Raises:
        ManifestError: naming `origin` and what is wrong.
    """
    depth = max_depth(data, JSON_SKIP, opens=b"[{", closes=b"]}", drop=())
    if depth > MAX_DEPTH:
        raise ManifestError(
            f"{origin}: JSON nested {depth} levels deep, more than the {MAX_DEPTH} a manifest may "
            "use"
        )
    try:
        return json.loads(
            data.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
        )
    except UnicodeDecodeError as e:
        raise ManifestError(f"{origin}: not UTF-8 ({e})") from e
    except json.JSONDecodeError as e:
        raise ManifestError(f"{origin}: not valid JSON: {e}") from e
    except _StrictJSONError as e:
        raise ManifestError(f"{origin}: not strict JSON: {e}") from e
    except ValueError as e:  # e.g. an integer literal longer than Python converts
        raise ManifestError(f"{origin}: not valid JSON: {str(e)[:200]}") from e
    except RecursionError as e:
        raise ManifestError(f"{origin}: JSON nested too deeply") from e


def load_manifest(path: Path) -> Manifest:
    """Read, size-check and validate ``manifest.json`` at `path`.

    The JSON must be strict: no duplicate keys, no NaN/Infinity, at most MAX_DEPTH levels of
    nesting (measured before parsing), at most MAX_MANIFEST_BYTES bytes.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as e:
        raise ManifestError(
            f"{path}: cannot read the manifest ({e.strerror}); check its permissions"
        ) from e
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"{path}: larger than the {MAX_MANIFEST_BYTES >> 20} MiB manifest limit; a manifest "
            "describes arrays, it does not hold them, so this is not a juliabridge manifest"
        )
    obj = decode_strict_json(data, path)
    try:
        return parse_manifest(obj)
    except RecursionError as e:
        raise ManifestError(f"{path}: JSON nested too deeply") from e
    except (ManifestError, UnsafeBundleError, BundleVersionError) as e:
        # Name the actual file, and say what to do.
        text = str(e)
        if text.startswith(f"{MANIFEST_NAME}: "):
            text = f"{path}: " + text[len(MANIFEST_NAME) + 2 :]
        if not isinstance(e, BundleVersionError):
            text = f"{text.rstrip('.')}. {manifest_advice(obj)}"
        raise type(e)(text) from None


#: How to write a bundle again, by the producer.tool that wrote it (spec §3.2).
_REWRITE = {
    "JuliaBridge.jl": (
        "export the model again with JuliaBridge.export_lux and read or convert the directory "
        "it writes (juliabridge convert DIR --out NAME.bundle)"
    ),
    "juliabridge-python": (
        "write the bundle again with juliabridge.bundle.write.writer.write_bundle"
    ),
}


def manifest_advice(obj: object) -> str:
    """The advice a manifest refusal ends with: fix the entry, or rewrite the bundle with the
    tool that wrote it (read from the unvalidated `obj`, only to choose the words)."""
    producer = obj.get("producer") if isinstance(obj, dict) else None
    tool = producer.get("tool") if isinstance(producer, dict) else None
    rewrite = _REWRITE.get(tool) if isinstance(tool, str) else None
    if rewrite is None:
        rewrite = (
            "have the tool that wrote it follow the spec"
            if not isinstance(tool, str)
            else f"have the tool that wrote it ({tool[:60]!r}) follow the spec"
        )
    return (
        "The manifest does not follow docs/bundle-format.md: fix the entry named above, or "
        f"{rewrite}."
    )
