"""manifest.json: parsing and validation against docs/bundle-format.md (format version 1)."""

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
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20
MAX_DEPTH = 64
MAX_RANK = 64
#: Largest array (in bytes) any argument or result may declare: 256 GiB. Checked on the
#: manifest alone, before any file is opened, so absurd claims (e.g. 10^12 elements) fail at once.
MAX_TENSOR_BYTES = 1 << 38
ROLES = ("input", "parameter", "state")
MODES = ("test", "train")

PathStep = str | int
LuxPath = tuple[PathStep, ...]

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}\Z")
_SHA = re.compile(r"[0-9a-f]{64}\Z")
_DATASET = re.compile(r"/[^\x00]{1,4096}\Z")


@dataclass(frozen=True)
class FileRef:
    """A file inside the bundle and the sha256 its bytes must have."""

    file: str
    sha256: str


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
    #: sha256 of the dataset's stored bytes (bundle format 2), None when the manifest has none.
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

    @property
    def label(self) -> str:
        """Readable name of the first output path, e.g. ``output`` or ``state.layer_2.mean``."""
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
class Examples:
    """Example inputs (by argument) and Julia's outputs (by result) in the weights file."""

    inputs: tuple[tuple[int, str], ...]
    outputs: tuple[tuple[int, str], ...]
    rtol: float
    atol: float


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

    def files(self) -> list[tuple[str, FileRef]]:
        """(manifest key, file) for every file the manifest names."""
        out = [("module", self.module), ("weights", self.weights)]
        if self.vjp is not None:
            out.append(("vjp", self.vjp))
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
        if isinstance(s, int) and s < 1:
            raise _fail(
                f"{where}[{i}]", f"integer path steps are 1-based Julia positions, found {s}"
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


def _file_ref(value: Any, where: str) -> FileRef:
    obj = _typed(value, dict, where)
    name = safe_file_name(_get(obj, "file", str, where), f"{where}.file")
    sha = _get(obj, "sha256", str, where)
    if not _SHA.match(sha):
        raise _fail(f"{where}.sha256", "expected 64 lowercase hex digits")
    return FileRef(name, sha)


def _producer(value: Any) -> Producer:
    w = "producer"
    obj = _typed(value, dict, w)
    made = _get(obj, "made_with_julia", bool, w)
    tool = _get(obj, "tool", str, w)
    if made and tool != "JuliaBridge.jl":
        raise _fail(w, f"made_with_julia is true but tool is {tool!r}, not 'JuliaBridge.jl'")
    return Producer(
        tool=tool,
        tool_version=_get(obj, "tool_version", str, w),
        julia=_opt(obj, "julia", str, w),
        lux=_opt(obj, "lux", str, w),
        reactant=_opt(obj, "reactant", str, w),
        made_with_julia=made,
        note=_opt(obj, "note", str, w),
        created=_opt(obj, "created", str, w),
    )


def _argument(value: Any, i: int) -> ArgumentEntry:
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
    digest = _opt(obj, "sha256", str, w)
    if digest is not None and not _SHA.match(digest):
        raise _fail(f"{w}.sha256", "expected 64 lowercase hex digits")
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
        path=_path(_get(obj, "path", list, w), f"{w}.path"),
        dtype=dtype,
        shape=shape,
        julia_shape=julia_shape,
        dataset=dataset,
        batch_axis=batch_axis,
        tied_paths=tied,
        sha256=digest,
    )


def _output_path(value: Any, where: str) -> LuxPath:
    p = _path(value, where)
    if not p or p[0] not in ("output", "state"):
        raise _fail(where, f"an output path starts with 'output' or 'state', found {list(p)}")
    return p


def _result(value: Any, k: int) -> ResultEntry:
    w = f"results[{k}]"
    obj = _typed(value, dict, w)
    index = _int(_get(obj, "index", int, w), f"{w}.index")
    if index != k:
        raise _fail(
            w, f"index is {index} but the entry is number {k}; entries must be in @main order"
        )
    paths = _get(obj, "paths", list, w)
    if not paths:
        raise _fail(f"{w}.paths", "a result needs at least one output path")
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
    )


def _examples(value: Any, n_args: int, n_results: int) -> Examples:
    w = "examples"
    obj = _typed(value, dict, w)
    ins = []
    for j, e in enumerate(_get(obj, "inputs", list, w)):
        e = _typed(e, dict, f"{w}.inputs[{j}]")
        arg = _int(
            _get(e, "argument", int, f"{w}.inputs[{j}]"), f"{w}.inputs[{j}].argument", hi=n_args - 1
        )
        ins.append(
            (arg, _dataset_name(_get(e, "dataset", str, f"{w}.inputs[{j}]"), f"{w}.inputs[{j}]"))
        )
    outs = []
    for j, e in enumerate(_get(obj, "outputs", list, w)):
        e = _typed(e, dict, f"{w}.outputs[{j}]")
        res = _int(
            _get(e, "result", int, f"{w}.outputs[{j}]"),
            f"{w}.outputs[{j}].result",
            hi=n_results - 1,
        )
        outs.append(
            (res, _dataset_name(_get(e, "dataset", str, f"{w}.outputs[{j}]"), f"{w}.outputs[{j}]"))
        )
    rtol = float(_typed(obj.get("rtol", 1e-4), (int, float), f"{w}.rtol"))
    atol = float(_typed(obj.get("atol", 1e-5), (int, float), f"{w}.atol"))
    if not (0 <= rtol < 1e6 and 0 <= atol < 1e6):
        raise _fail(w, "rtol and atol must be non-negative numbers")
    return Examples(tuple(ins), tuple(outs), rtol, atol)


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
    """Validate a decoded manifest.json object (structure and internal consistency)."""
    obj = _typed(obj, dict, "top level")
    fmt = _get(obj, "format", str, "top level")
    if fmt != FORMAT:
        raise _fail(
            "format", f"expected {FORMAT!r}, found {fmt!r}; this is not a juliabridge bundle"
        )
    version = _get(obj, "format_version", int, "top level")
    if version > FORMAT_VERSION:
        raise BundleVersionError(
            f"manifest.json: format_version {version} is newer than this juliabridge reads "
            f"({FORMAT_VERSION}); upgrade juliabridge (pip install -U juliabridge)"
        )
    if version < 1:
        raise _fail("format_version", f"expected 1, found {version}")
    name = _get(obj, "name", str, "top level")
    if not _NAME.match(name):
        raise _fail("name", f"expected 1-128 characters of [A-Za-z0-9_.-], found {name!r:.80}")
    mode = _get(obj, "mode", str, "top level")
    if mode not in MODES:
        raise _fail("mode", f"expected 'test' or 'train', found {mode!r}")
    args = tuple(_argument(a, i) for i, a in enumerate(_get(obj, "arguments", list, "top level")))
    results = tuple(_result(r, k) for k, r in enumerate(_get(obj, "results", list, "top level")))
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
    examples = None
    if obj.get("examples") is not None:
        examples = _examples(obj["examples"], len(args), len(results))
    metadata = obj.get("metadata") or {}
    manifest = Manifest(
        name=name,
        producer=_producer(_get(obj, "producer", dict, "top level")),
        module=_file_ref(_get(obj, "module", dict, "top level"), "module"),
        weights=_file_ref(_get(obj, "weights", dict, "top level"), "weights"),
        mode=mode,
        arguments=args,
        results=results,
        aliases=tuple(aliases),
        batch=batch,
        examples=examples,
        vjp=_file_ref(obj["vjp"], "vjp") if obj.get("vjp") is not None else None,
        metadata=_typed(metadata, dict, "metadata"),
        empty=_empty(obj.get("empty")),
        format_version=version,
    )
    _check_consistency(manifest)
    return manifest


def _check_consistency(m: Manifest) -> None:
    seen: dict[tuple[str, LuxPath], int] = {}
    datasets: dict[str, int] = {}
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
            if a.dataset in datasets:
                raise _fail(
                    f"arguments[{a.index}].dataset",
                    f"{a.dataset} is also used by argument {datasets[a.dataset]}",
                )
            datasets[a.dataset] = a.index
    # Integer and named steps cannot share a parent, and no path may be a prefix of another.
    outputs: dict[LuxPath, str] = {}
    for r in m.results:
        for p in r.paths:
            _claim(outputs, p, f"results[{r.index}]")
    for j, al in enumerate(m.aliases):
        _claim(outputs, al.path, f"aliases[{j}]")
    _check_prefixes(list(outputs), "output")
    _check_step_kinds(list(outputs), "output")
    for role in ROLES:
        _check_prefixes([p for (r, p) in seen if r == role], role)
    for group, role in (("params", "parameter"), ("state", "state")):
        empties = m.empty.get(group, ())
        leaves = {p for (r, p) in seen if r == role}
        # Every prefix of every leaf, so each empty path is checked in O(its length).
        inner = {leaf[:n] for leaf in leaves for n in range(len(leaf) + 1)}
        for e in empties:
            if e in inner or any(e[:n] in leaves for n in range(len(e) + 1)):
                raise _fail(
                    f"empty.{group}",
                    f"{list(e)} is listed as an empty container but holds or is an argument",
                )
        _check_step_kinds([*leaves, *empties], role)
    _check_step_kinds([p for (r, p) in seen if r == "input"], "input")
    # The returned state is the state tree with some leaves replaced: an output path under
    # "state" must be a leaf of that tree or a new leaf beside it, never above or below one.
    state_tree = {p for (r, p) in seen if r == "state"}
    state_tree |= {p[1:] for p in outputs if p[0] == "state"}
    _check_prefixes(list(state_tree), "state (arguments and returned state)")
    _check_step_kinds(list(state_tree), "state (arguments and returned state)")


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
