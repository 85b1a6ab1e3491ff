"""manifest.json: parsing and validation against docs/bundle-format.md (format versions 1 and 2).

Format 2 is what writers write; format 1 is still read (spec §8 lists the differences).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import dtypes
from ..errors import BundleVersionError, ManifestError, UnsafeBundleError
from ..stablehlo.nesting import JSON_SKIP, max_depth

FORMAT = "juliabridge.bundle"
#: The version writers write.
FORMAT_VERSION = 2
#: Every version this reader reads.
READABLE_VERSIONS = (1, 2)
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20
MAX_DEPTH = 64
MAX_RANK = 64
#: Largest array (in bytes) any argument or result may declare: 256 GiB. Checked on the
#: manifest alone, before any file is opened, so absurd claims (e.g. 10^12 elements) fail at once.
MAX_TENSOR_BYTES = 1 << 38
ROLES = ("input", "parameter", "state")
MODES = ("test", "train")
#: Largest integer path step (a 1-based Tuple position or Array index; spec §3.8).
MAX_PATH_STEP = 1 << 31
#: Longest static_state string value and julia_type (spec §3.11).
MAX_STATIC_STRING = 4096
MAX_JULIA_TYPE = 256

PathStep = str | int
LuxPath = tuple[PathStep, ...]

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}\Z")
_SHA = re.compile(r"[0-9a-f]{64}\Z")
_DATASET = re.compile(r"/[^\x00]{1,4096}\Z")
_VERSION = re.compile(r"(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})\Z")


def version_tuple(version: str) -> tuple[int, int, int]:
    """``"1.17.0"`` as ``(1, 17, 0)``, for comparing StableHLO versions numerically."""
    major, minor, patch = (int(p) for p in version.split("."))
    return major, minor, patch


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

    `sha256` is None only for a format-2 weights file, whose datasets carry their own digests.
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
    #: sha256 of the dataset's canonical bytes (spec §4.1); format 2 only.
    sha256: str | None = None

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
    #: The argument this result returns unchanged (spec §3.4); format 2 only.
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
    #: sha256 of the dataset's canonical bytes (spec §4.1); format 2 only.
    sha256: str | None = None


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


# --- validation helpers -------------------------------------------------------------------


def _fail(where: str, msg: str) -> ManifestError:
    return ManifestError(f"manifest.json: {where}: {msg}")


def _get(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise _fail(where, f"missing required key {key!r}")
    return _typed(obj[key], kind, f"{where}.{key}")


def _opt(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if obj.get(key) is None:
        return None
    return _typed(obj[key], kind, f"{where}.{key}")


def _typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    # bool is an int in Python; a manifest saying `"index": true` is still wrong.
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise _fail(where, f"expected {names}, found {type(value).__name__} {value!r:.80}")
    return value


def _int(value: Any, where: str, *, lo: int = 0, hi: int = 1 << 62) -> int:
    v = _typed(value, int, where)
    if not lo <= v <= hi:
        raise _fail(where, f"expected an integer in [{lo}, {hi}], found {v}")
    return int(v)


def _shape(value: Any, where: str) -> tuple[int, ...]:
    items = _typed(value, list, where)
    if len(items) > MAX_RANK:
        raise _fail(where, f"rank {len(items)} exceeds the limit of {MAX_RANK}")
    return tuple(_int(d, f"{where}[{i}]", hi=1 << 40) for i, d in enumerate(items))


def _path(value: Any, where: str) -> LuxPath:
    steps = _typed(value, list, where)
    if len(steps) > MAX_DEPTH:
        raise _fail(where, f"path deeper than {MAX_DEPTH} steps")
    out: list[PathStep] = []
    for i, s in enumerate(steps):
        s = _typed(s, (str, int), f"{where}[{i}]")
        if isinstance(s, int) and not 1 <= s <= MAX_PATH_STEP:
            raise _fail(
                f"{where}[{i}]",
                f"integer path steps are 1-based Julia positions in [1, {MAX_PATH_STEP}], "
                f"found {s}",
            )
        if isinstance(s, str):
            _utf8(s, f"{where}[{i}]")
        if isinstance(s, str) and (not s or s in (".", "..") or "/" in s or "\x00" in s):
            raise _fail(
                f"{where}[{i}]",
                f"field name {s!r} cannot be an HDF5 name (empty, '.', '..' or containing '/')",
            )
        out.append(s)
    return tuple(out)


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


def _utf8(text: str, where: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(where, f"{text!r:.80} is not valid Unicode (lone surrogate)") from None
    return text


def _dataset_name(value: str, where: str) -> str:
    if not _DATASET.match(value):
        raise _fail(
            where,
            f"expected an absolute HDF5 path like '/params/layer_1/weight', found {value!r:.80}",
        )
    return _utf8(value, where)


def _dtype(value: Any, where: str) -> str:
    d = _typed(value, str, where)
    if not dtypes.is_known(d):
        raise _fail(
            where, f"unknown element type {d!r}; expected one of {', '.join(dtypes.MLIR_TO_NUMPY)}"
        )
    return d


def safe_file_name(name: str, where: str) -> str:
    """Refuse file names that could leave the bundle directory (absolute, .., separators)."""
    try:
        name.encode("utf-8")
        printable = all(ch.isprintable() for ch in name)
    except UnicodeEncodeError:
        printable = False
    if (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\x00" in name
        or name.startswith("~")
        or not printable
        or len(name) > 255
    ):
        raise UnsafeBundleError(
            f"manifest.json: {where}: file name {name!r} is not a plain name inside the bundle "
            "directory (no paths, no '..'); a bundle may only refer to its own files"
        )
    return name


def _sha(value: Any, where: str) -> str:
    sha = _typed(value, str, where)
    if not _SHA.match(sha):
        raise _fail(where, f"expected 64 lowercase hex digits, found {sha!r:.80}")
    return sha


def _version(value: Any, where: str) -> str:
    text = _typed(value, str, where)
    if not _VERSION.match(text):
        raise _fail(where, f"expected a StableHLO version MAJOR.MINOR.PATCH, found {text!r:.80}")
    return text


def _artifact(value: Any, where: str) -> ArtifactRef:
    obj = _typed(value, dict, where)
    written_at = _version(_get(obj, "stablehlo_version", str, where), f"{where}.stablehlo_version")
    target = _version(_get(obj, "target", str, where), f"{where}.target")
    if version_tuple(target) > version_tuple(written_at):
        raise _fail(
            f"{where}.target",
            f"target {target} is newer than the writer's StableHLO {written_at}; a writer can "
            "only serialize to its own version or an older one",
        )
    return ArtifactRef(
        file=safe_file_name(_get(obj, "file", str, where), f"{where}.file"),
        sha256=_sha(_get(obj, "sha256", str, where), f"{where}.sha256"),
        stablehlo_version=written_at,
        target=target,
    )


def _file_ref(
    value: Any, where: str, *, version: int, sha_required: bool = True, artifact: bool = False
) -> FileRef:
    obj = _typed(value, dict, where)
    name = safe_file_name(_get(obj, "file", str, where), f"{where}.file")
    if sha_required or version == 1:
        sha: str | None = _sha(_get(obj, "sha256", str, where), f"{where}.sha256")
    else:
        sha = None if obj.get("sha256") is None else _sha(obj["sha256"], f"{where}.sha256")
    art = None
    if artifact and version >= 2 and obj.get("artifact") is not None:
        art = _artifact(obj["artifact"], f"{where}.artifact")
    return FileRef(name, sha, art)


#: producer.tool of bundles written by the Julia package; only those say made_with_julia.
JULIA_TOOL = "JuliaBridge.jl"


def _producer(value: Any) -> Producer:
    w = "producer"
    obj = _typed(value, dict, w)
    made = _get(obj, "made_with_julia", bool, w)
    tool = _get(obj, "tool", str, w)
    if made != (tool == JULIA_TOOL):
        raise _fail(
            f"{w}.made_with_julia",
            f"made_with_julia is {str(made).lower()} but tool is {tool!r}; it is true exactly "
            f"when tool is {JULIA_TOOL!r} (spec §3.2)",
        )
    versions = {k: _opt(obj, k, str, w) for k in ("julia", "lux", "reactant")}
    for key, v in versions.items():
        if made and v is None:
            raise _fail(f"{w}.{key}", "expected the version string of a bundle made with Julia")
        if not made and v is not None:
            raise _fail(
                f"{w}.{key}", f"expected null for a bundle made without Julia, found {v!r:.80}"
            )
    return Producer(
        tool=tool,
        tool_version=_get(obj, "tool_version", str, w),
        julia=versions["julia"],
        lux=versions["lux"],
        reactant=versions["reactant"],
        made_with_julia=made,
        note=_opt(obj, "note", str, w),
        created=_opt(obj, "created", str, w),
    )


def _argument(value: Any, i: int, version: int) -> ArgumentEntry:
    w = f"arguments[{i}]"
    obj = _typed(value, dict, w)
    index = _int(_get(obj, "index", int, w), f"{w}.index")
    if index != i:
        raise _fail(
            w, f"index is {index} but the entry is number {i}; entries must be in @main order"
        )
    role = _get(obj, "role", str, w)
    if role not in ROLES:
        raise _fail(f"{w}.role", f"expected one of {', '.join(ROLES)}, found {role!r}")
    shape = _shape(_get(obj, "shape", list, w), f"{w}.shape")
    julia_shape = _shape(_get(obj, "julia_shape", list, w), f"{w}.julia_shape")
    if julia_shape != tuple(reversed(shape)):
        raise _fail(w, f"julia_shape {list(julia_shape)} is not shape {list(shape)} reversed")
    dtype = _dtype(_get(obj, "dtype", str, w), f"{w}.dtype")
    _check_size(shape, dtype, f"{w}.shape")
    dataset = _opt(obj, "dataset", str, w)
    if dataset is not None:
        dataset = _dataset_name(dataset, f"{w}.dataset")
    if role != "input" and dataset is None:
        raise _fail(w, f"a {role} needs the HDF5 'dataset' that holds its value")
    if role == "input" and dataset is not None:
        raise _fail(
            f"{w}.dataset",
            "an input has no dataset (its example value, if any, is in examples.inputs)",
        )
    sha = None
    if version >= 2 and dataset is not None:
        sha = _sha(_get(obj, "sha256", str, w), f"{w}.sha256")
    path = _path(_get(obj, "path", list, w), f"{w}.path")
    if role != "input" and not path:
        raise _fail(
            f"{w}.path", f"a {role} path names a leaf inside the tree, so it cannot be empty"
        )
    batch_axis = _opt(obj, "batch_axis", int, w)
    if batch_axis is not None and not 0 <= batch_axis < max(len(shape), 1):
        raise _fail(f"{w}.batch_axis", f"axis {batch_axis} out of range for rank {len(shape)}")
    tied = tuple(
        _path(p, f"{w}.tied_paths[{k}]")
        for k, p in enumerate(_typed(obj.get("tied_paths", []), list, f"{w}.tied_paths"))
    )
    return ArgumentEntry(
        index=index,
        role=role,
        path=path,
        dtype=dtype,
        shape=shape,
        julia_shape=julia_shape,
        dataset=dataset,
        batch_axis=batch_axis,
        tied_paths=tied,
        sha256=sha,
    )


def _output_path(value: Any, where: str) -> LuxPath:
    p = _path(value, where)
    if not p or p[0] not in ("output", "state"):
        raise _fail(where, f"an output path starts with 'output' or 'state', found {list(p)}")
    return p


def _result(value: Any, k: int, version: int, n_args: int) -> ResultEntry:
    w = f"results[{k}]"
    obj = _typed(value, dict, w)
    index = _int(_get(obj, "index", int, w), f"{w}.index")
    if index != k:
        raise _fail(
            w, f"index is {index} but the entry is number {k}; entries must be in @main order"
        )
    echo_of = None
    if version >= 2 and obj.get("echo_of") is not None:
        if n_args == 0:
            raise _fail(f"{w}.echo_of", "refers to an argument but @main has none")
        echo_of = _int(obj["echo_of"], f"{w}.echo_of", hi=n_args - 1)
    paths = _get(obj, "paths", list, w)
    if not paths and echo_of is None:
        raise _fail(
            f"{w}.paths",
            "a result needs at least one output path (only a result with echo_of may have none)",
        )
    shape = _shape(_get(obj, "shape", list, w), f"{w}.shape")
    dtype = _dtype(_get(obj, "dtype", str, w), f"{w}.dtype")
    _check_size(shape, dtype, f"{w}.shape")
    batch_axis = _opt(obj, "batch_axis", int, w)
    if batch_axis is not None and not 0 <= batch_axis < max(len(shape), 1):
        raise _fail(f"{w}.batch_axis", f"axis {batch_axis} out of range for rank {len(shape)}")
    return ResultEntry(
        index=index,
        paths=tuple(_output_path(p, f"{w}.paths[{j}]") for j, p in enumerate(paths)),
        dtype=dtype,
        shape=shape,
        batch_axis=batch_axis,
        echo_of=echo_of,
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


def _example_entries(
    obj: dict[str, Any], group: str, key: str, limit: int, version: int
) -> tuple[ExampleEntry, ...]:
    out: list[ExampleEntry] = []
    seen: dict[int, int] = {}
    for j, e in enumerate(_get(obj, group, list, "examples")):
        w = f"examples.{group}[{j}]"
        e = _typed(e, dict, w)
        if limit == 0:
            raise _fail(f"{w}.{key}", f"refers to a {key} but @main has none")
        index = _int(_get(e, key, int, w), f"{w}.{key}", hi=limit - 1)
        if index in seen:
            raise _fail(
                f"{w}.{key}",
                f"{key} {index} is also given by examples.{group}[{seen[index]}]; each "
                "appears once",
            )
        seen[index] = j
        dataset = _dataset_name(_get(e, "dataset", str, w), f"{w}.dataset")
        sha = _sha(_get(e, "sha256", str, w), f"{w}.sha256") if version >= 2 else None
        out.append(ExampleEntry(index, dataset, sha))
    return tuple(out)


def _examples(
    value: Any, args: tuple[ArgumentEntry, ...], results: tuple[ResultEntry, ...], version: int
) -> Examples:
    w = "examples"
    obj = _typed(value, dict, w)
    ins = _example_entries(obj, "inputs", "argument", len(args), version)
    outs = _example_entries(obj, "outputs", "result", len(results), version)
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
    if not outs:
        raise _fail(f"{w}.outputs", "expected at least one reference output")
    rtol_default, atol_default = default_tolerances([results[e.index].dtype for e in outs])
    tolerances = []
    for key, default in (("rtol", rtol_default), ("atol", atol_default)):
        v = obj.get(key)
        v = default if v is None else float(_typed(v, (int, float), f"{w}.{key}"))
        if not 0 <= v < 1e6:
            raise _fail(f"{w}.{key}", f"expected a number in [0, 1e6), found {v}")
        tolerances.append(v)
    return Examples(ins, outs, tolerances[0], tolerances[1])


def _static_value(value: Any, where: str) -> bool | int | float | str | None:
    if value is None or isinstance(value, bool | float):
        return value  # strict JSON has no NaN/Infinity, so floats are finite
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 64):
            raise _fail(where, f"integer {value} fits neither Int64 nor UInt64")
        return value
    if isinstance(value, str):
        if len(value) > MAX_STATIC_STRING:
            raise _fail(where, f"string longer than {MAX_STATIC_STRING} characters")
        return _utf8(value, where)
    raise _fail(
        where,
        f"expected a JSON scalar (null, boolean, number or string), found {type(value).__name__}",
    )


def _static_state(value: Any) -> tuple[StaticLeaf, ...]:
    out = []
    for j, e in enumerate(_typed(value, list, "static_state")):
        w = f"static_state[{j}]"
        e = _typed(e, dict, w)
        path = _path(_get(e, "path", list, w), f"{w}.path")
        if not path:
            raise _fail(f"{w}.path", "a state path names a leaf inside st, so it cannot be empty")
        if "value" not in e:
            raise _fail(w, "missing required key 'value'")
        julia_type = _get(e, "julia_type", str, w)
        if not 0 < len(julia_type) <= MAX_JULIA_TYPE or not julia_type.isprintable():
            raise _fail(
                f"{w}.julia_type",
                f"expected a Julia type name of 1 to {MAX_JULIA_TYPE} printable characters, "
                f"found {julia_type!r:.80}",
            )
        out.append(StaticLeaf(path, _static_value(e["value"], f"{w}.value"), julia_type))
    return tuple(out)


def _empty(value: Any) -> dict[str, tuple[LuxPath, ...]]:
    if value is None:
        return {}
    obj = _typed(value, dict, "empty")
    out = {}
    for group in ("params", "state"):
        paths = _typed(obj.get(group, []), list, f"empty.{group}")
        out[group] = tuple(_path(p, f"empty.{group}[{i}]") for i, p in enumerate(paths))
        if any(not p for p in out[group]):
            raise _fail(f"empty.{group}", "the root cannot be listed as an empty container")
    return out


def parse_manifest(obj: Any) -> Manifest:
    """Validate a decoded manifest.json object (structure and internal consistency).

    Args:
        obj: the decoded JSON (format version 1 or 2).

    Returns:
        The validated Manifest.

    Raises:
        ManifestError: a key is missing, has the wrong type or breaks a rule of the spec; the
            message names the field (e.g. ``arguments[3].path[1]``) and what was expected.
        UnsafeBundleError: a file name could leave the bundle directory.
        BundleVersionError: the manifest is of a newer format than this reader knows.
    """
    obj = _typed(obj, dict, "top level")
    fmt = _get(obj, "format", str, "top level")
    if fmt != FORMAT:
        raise _fail(
            "format", f"expected {FORMAT!r}, found {fmt!r}; this is not a juliabridge bundle"
        )
    version = _get(obj, "format_version", int, "top level")
    if version > max(READABLE_VERSIONS):
        raise BundleVersionError(
            f"manifest.json: format_version {version} is newer than this juliabridge reads "
            f"({', '.join(map(str, READABLE_VERSIONS))}); upgrade juliabridge "
            "(pip install -U juliabridge)"
        )
    if version not in READABLE_VERSIONS:
        raise _fail(
            "format_version",
            f"expected {' or '.join(map(str, READABLE_VERSIONS))}, found {version}",
        )
    name = _get(obj, "name", str, "top level")
    if not _NAME.match(name):
        raise _fail("name", f"expected 1-128 characters of [A-Za-z0-9_.-], found {name!r:.80}")
    mode = _get(obj, "mode", str, "top level")
    if mode not in MODES:
        raise _fail("mode", f"expected 'test' or 'train', found {mode!r}")
    args = tuple(
        _argument(a, i, version) for i, a in enumerate(_get(obj, "arguments", list, "top level"))
    )
    results = tuple(
        _result(r, k, version, len(args))
        for k, r in enumerate(_get(obj, "results", list, "top level"))
    )
    aliases = []
    for j, a in enumerate(_get(obj, "aliases", list, "top level")):
        w = f"aliases[{j}]"
        a = _typed(a, dict, w)
        arg = _int(_get(a, "argument", int, w), f"{w}.argument", hi=max(len(args) - 1, 0))
        if not args:
            raise _fail(w, "refers to an argument but @main has none")
        aliases.append(AliasEntry(_output_path(_get(a, "path", list, w), f"{w}.path"), arg))
    batch = None
    if obj.get("batch") is not None:
        b = _typed(obj["batch"], dict, "batch")
        batch = BatchInfo(
            _int(_get(b, "size", int, "batch"), "batch.size", lo=1),
            _get(b, "samples_independent", bool, "batch"),
        )
        if mode == "train" and batch.samples_independent:
            raise _fail(
                "batch.samples_independent",
                "expected false in train mode: training-mode layers such as BatchNorm mix "
                "samples, so splitting a batch would silently change the results",
            )
    examples = None
    if obj.get("examples") is not None:
        examples = _examples(obj["examples"], args, results, version)
    metadata = obj.get("metadata") or {}
    static_state: tuple[StaticLeaf, ...] = ()
    if version >= 2 and obj.get("static_state") is not None:
        static_state = _static_state(obj["static_state"])
    manifest = Manifest(
        name=name,
        producer=_producer(_get(obj, "producer", dict, "top level")),
        module=_file_ref(
            _get(obj, "module", dict, "top level"), "module", version=version, artifact=True
        ),
        weights=_file_ref(
            _get(obj, "weights", dict, "top level"),
            "weights",
            version=version,
            sha_required=False,
        ),
        mode=mode,
        arguments=args,
        results=results,
        aliases=tuple(aliases),
        batch=batch,
        examples=examples,
        vjp=(
            _file_ref(obj["vjp"], "vjp", version=version, artifact=True)
            if obj.get("vjp") is not None
            else None
        ),
        metadata=_typed(metadata, dict, "metadata"),
        empty=_empty(obj.get("empty")),
        format_version=version,
        static_state=static_state,
    )
    _check_files(manifest)
    _check_consistency(manifest)
    return manifest


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
            _check_echo(m, r)
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


def _check_echo(m: Manifest, r: ResultEntry) -> None:
    """An echoed argument comes back as it went in: same shape, dtype and batch axis."""
    assert r.echo_of is not None
    a = m.arguments[r.echo_of]
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
    depth = max_depth(data, JSON_SKIP, opens=b"[{", closes=b"]}", drop=())
    if depth > MAX_DEPTH:
        raise ManifestError(
            f"{path}: JSON nested {depth} levels deep, more than the {MAX_DEPTH} a manifest may use"
        )
    try:
        obj = json.loads(
            data.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
        )
    except UnicodeDecodeError as e:
        raise ManifestError(f"{path}: not UTF-8 ({e})") from e
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}: not valid JSON: {e}") from e
    except _StrictJSONError as e:
        raise ManifestError(f"{path}: not strict JSON: {e}") from e
    except ValueError as e:  # e.g. an integer literal longer than Python converts
        raise ManifestError(f"{path}: not valid JSON: {str(e)[:200]}") from e
    except RecursionError as e:
        raise ManifestError(f"{path}: JSON nested too deeply") from e
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
            text = f"{text.rstrip('.')}. {_MANIFEST_ADVICE}"
        raise type(e)(text) from None


_MANIFEST_ADVICE = (
    "The manifest does not follow docs/bundle-format.md; export the bundle again "
    "(JuliaBridge.export_lux) or fix the entry named"
)
