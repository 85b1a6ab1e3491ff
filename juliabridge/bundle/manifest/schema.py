"""The structure of manifest.json, declared once: it checks a manifest and writes its JSON Schema.

Every object, field and leaf of the manifest (docs/bundle-format.md §3, format versions 1 to 3)
is a node below. A node does two things from the same declaration: `check` validates a decoded
JSON value, raising ManifestError (or UnsafeBundleError for file names) with a message naming the
field, and `schema` writes the node as JSON Schema (draft-07, which JSONSchema.jl and Python's
jsonschema both read). So docs/bundle-manifest.schema.json says what this reader accepts, field
by field; tests/test_manifest_schema.py fails when the shipped file and these tables differ.

The JSON Schema is necessary, not sufficient: rules that relate one part of a manifest to another
(entries in @main order, julia_shape reversed, array sizes, unique paths and datasets, the tree
shape of the output and state paths, echoed arguments) are not JSON Schema's to say and are
checked by manifest.py after the structure is.

Regenerate the shipped schema after changing a table:
``python -m juliabridge.bundle.manifest.write_schema > docs/bundle-manifest.schema.json``
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import ManifestError, UnsafeBundleError
from ...support import dtypes

FORMAT = "juliabridge.bundle"
#: The version writers write.
FORMAT_VERSION = 3
#: Every version this reader reads.
READABLE_VERSIONS = (1, 2, 3)
#: The key (and algorithm) of the per-dataset digests of each version (spec §4.1); format 1
#: has none, only the whole-file `weights.sha256`.
DATASET_DIGEST = {1: None, 2: "sha256", 3: "blake3"}
MAX_DEPTH = 64
MAX_RANK = 64
#: Largest dimension of any array.
MAX_DIM = 1 << 40
#: Largest integer an index or size may be.
MAX_INT = 1 << 62
ROLES = ("input", "parameter", "state")
MODES = ("test", "train")
#: Largest integer path step (a 1-based Tuple position or Array index; spec §3.8).
MAX_PATH_STEP = 1 << 31
#: Longest static_state string value and julia_type (spec §3.11).
MAX_STATIC_STRING = 4096
MAX_JULIA_TYPE = 256
#: producer.tool of bundles written by the Julia package; only those say made_with_julia.
JULIA_TOOL = "JuliaBridge.jl"

NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}\Z")
SHA_RE = re.compile(r"[0-9a-f]{64}\Z")
DATASET_RE = re.compile(r"/[^\x00]{1,4096}\Z")
VERSION_RE = re.compile(r"(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})\Z")

#: End of input in every engine that reads the schema (ECMA 262, PCRE, Python's re): `$` also
#: matches before a final newline in PCRE and Python, `\z`/`\Z` are not portable.
_END = r"(?![\s\S])"


def json_pattern(regex: re.Pattern[str]) -> str:
    """`regex` (anchored at the end with ``\\Z``, used with re.match) as a portable pattern."""
    return "^" + regex.pattern.replace(r"\Z", _END)


def fail(where: str, msg: str) -> ManifestError:
    """The error for field `where` (e.g. ``arguments[3].path[1]``) breaking a rule."""
    return ManifestError(f"manifest.json: {where}: {msg}")


def typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    """`value` if it is of `kind` (JSON's booleans are not integers here), else ManifestError."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise fail(where, f"expected {names}, found {type(value).__name__} {value!r:.80}")
    return value


def utf8(text: str, where: str) -> str:
    """`text` if it encodes as UTF-8 (JSON escapes can spell lone surrogates), else an error."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise fail(where, f"{text!r:.80} is not valid Unicode (lone surrogate)") from None
    return text


# --- nodes ---------------------------------------------------------------------------------


class Node:
    """One kind of JSON value: how it is checked and how it is written as JSON Schema."""

    #: A definition name in the JSON Schema; unnamed nodes are written inline.
    name: str | None = None

    def check(self, value: Any, where: str, version: int) -> Any:
        """The validated (and for arrays, tuple-converted) `value` at `where`."""
        raise NotImplementedError

    def body(self, version: int, defs: Defs) -> dict[str, Any]:
        """This node as JSON Schema, for manifests of `version`."""
        raise NotImplementedError

    def schema(self, version: int, defs: Defs) -> dict[str, Any]:
        """A reference to this node's definition when it is named, else its body."""
        return defs.ref(self, version) if self.name else self.body(version, defs)


class Defs:
    """The ``definitions`` of the schema being written: one per named node (and version, when
    the node differs between versions)."""

    def __init__(self) -> None:
        self.table: dict[str, dict[str, Any]] = {}

    def ref(self, node: Node, version: int) -> dict[str, Any]:
        if node.name is None:
            raise ManifestError("schema: only named nodes can be referenced")
        bodies = {v: node.body(v, Defs()) for v in READABLE_VERSIONS}
        same = all(b == bodies[version] for b in bodies.values())
        key = node.name if same else f"{node.name}_v{version}"
        if key not in self.table:
            self.table[key] = {}  # claimed first, so that a recursive node terminates
            self.table[key] = node.body(version, self)
        return {"$ref": f"#/definitions/{key}"}


@dataclass(frozen=True, eq=False)
class Str(Node):
    """A string, optionally matching `regex`, one of `enum` or passing `custom`."""

    regex: re.Pattern[str] | None = None
    enum: tuple[str, ...] | None = None
    #: What the message says was expected, e.g. "64 lowercase hex digits".
    expect: str = ""
    suffix: str = ""
    #: A check of its own (its own message), and the JSON Schema that approximates it.
    custom: Callable[[str, str], str] | None = None
    #: Refuse lone surrogates (for names that reach HDF5).
    unicode: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    description: str = ""

    def check(self, value: Any, where: str, version: int) -> str:
        text: str = typed(value, str, where)
        if (self.regex is not None and not self.regex.match(text)) or (
            self.enum is not None and text not in self.enum
        ):
            raise fail(where, f"expected {self.expect}, found {text!r:.80}{self.suffix}")
        if self.custom is not None:
            return self.custom(text, where)
        return utf8(text, where) if self.unicode else text

    def body(self, version: int, defs: Defs) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.description:
            out["description"] = self.description
        if self.regex is not None:
            out["pattern"] = json_pattern(self.regex)
        if self.enum is not None:
            out["enum"] = list(self.enum)
        return out | self.extra


@dataclass(frozen=True, eq=False)
class Int(Node):
    """An integer (not a boolean) in [lo, hi]."""

    lo: int = 0
    hi: int = MAX_INT
    name: str | None = None

    def check(self, value: Any, where: str, version: int) -> int:
        v = typed(value, int, where)
        if not self.lo <= v <= self.hi:
            raise fail(where, f"expected an integer in [{self.lo}, {self.hi}], found {v}")
        return int(v)

    def body(self, version: int, defs: Defs) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.lo, "maximum": self.hi}


@dataclass(frozen=True, eq=False)
class Number(Node):
    """A number in [lo, below)."""

    lo: float = 0.0
    below: float = 1e6
    #: [lo, below) as the message writes it.
    interval: str = "[0, 1e6)"

    def check(self, value: Any, where: str, version: int) -> float:
        v = float(typed(value, (int, float), where))
        if not self.lo <= v < self.below:
            raise fail(where, f"expected a number in {self.interval}, found {v}")
        return v

    def body(self, version: int, defs: Defs) -> dict[str, Any]:
        return {"type": "number", "minimum": self.lo, "exclusiveMaximum": self.below}


class Bool(Node):
    """true or false."""

    def check(self, value: Any, where: str, version: int) -> bool:
        return bool(typed(value, bool, where))

    def body(self, version: int, defs: Defs) -> dict[str, Any]:
        return {"type": "boolean"}


class AnyObject(Node):
    """A JSON object of any content (``metadata``)."""

    def check(self, value: Any, where: str, version: int) -> dict[str, Any]:
        return dict(typed(value, dict, where))

    def body(self, version: int, defs: Defs) -> dict[str, Any]:
        return {"type": "object"}


class Scalar(Node):
    """A JSON scalar that Julia can hold: null, a boolean, a finite number, a short string."""

    def check(self, value: Any, where: str, version: int) -> bool | int | float | str | None:
        if value is None or isinstance(value, bool | float):
            return value  # strict JSON has no NaN/Infinity, so floats are finite
        if isinstance(value, int):
            if not -(1 << 63) <= value < (1 << 64):
                raise fail(where, f"integer {value} fits neither Int64 nor UInt64")
            return value
        if isinstance(value, str):
            if len(value) > MAX_STATIC_STRING:
                raise fail(where, f"string longer than {MAX_STATIC_STRING} characters")
            return utf8(value, where)
        raise fail(
            where,
            "expected a JSON scalar (null, boolean, number or string), found "
            f"{type(value).__name__}",
        )

    def body(self, version: int, defs: Defs) -> dict[str, Any]:
        return {
            "anyOf": [
                {"type": ["null", "boolean", "number"], "not": {"type": "integer"}},
                {"type": "integer", "minimum": -(1 << 63), "maximum": (1 << 64) - 1},
                {"type": "string", "maxLength": MAX_STATIC_STRING},
            ]
        }


@dataclass(frozen=True, eq=False)
class Array(Node):
    """A list of `items`, at most `max_items` long (checked before any item is)."""

    items: Node
    max_items: int | None = None
    #: The message for a list that is too long; {n} and {limit} are filled in.
    too_long: str = "{n} entries, more than the limit of {limit}"
    min_items: int = 0
    too_short: str = "expected at least {limit} entries"
    name: str | None = None
    description: str = ""

    def check(self, value: Any, where: str, version: int) -> tuple[Any, ...]:
        items = typed(value, list, where)
        if self.max_items is not None and len(items) > self.max_items:
            raise fail(where, self.too_long.format(n=len(items), limit=self.max_items))
        if len(items) < self.min_items:
            raise fail(where, self.too_short.format(n=len(items), limit=self.min_items))
        return tuple(self.items.check(v, f"{where}[{i}]", version) for i, v in enumerate(items))

    def body(self, version: int, defs: Defs) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "array"}
        if self.description:
            out["description"] = self.description
        out["items"] = self.items.schema(version, defs)
        if self.min_items:
            out["minItems"] = self.min_items
        if self.max_items is not None:
            out["maxItems"] = self.max_items
        return out


@dataclass(frozen=True, eq=False)
class Step(Node):
    """One step of a Lux path: a field name, or a 1-based Tuple position / Array index."""

    name: str | None = "path_step"

    def check(self, value: Any, where: str, version: int) -> str | int:
        s = typed(value, (str, int), where)
        if isinstance(s, int):
            if not 1 <= s <= MAX_PATH_STEP:
                raise fail(
                    where,
                    f"integer path steps are 1-based Julia positions in [1, {MAX_PATH_STEP}], "
                    f"found {s}",
                )
            return s
        utf8(s, where)
        if not s or s in (".", "..") or "/" in s or "\x00" in s:
            raise fail(
                where,
                f"field name {s!r} cannot be an HDF5 name (empty, '.', '..' or containing '/')",
            )
        return s

    def body(self, version: int, defs: Defs) -> dict[str, Any]:
        return {
            "description": "A field name (also an HDF5 name) or a 1-based Julia position",
            "anyOf": [
                {"type": "string", "pattern": r"^(?!\.\.?" + _END + r")[^/\x00]+" + _END},
                {"type": "integer", "minimum": 1, "maximum": MAX_PATH_STEP},
            ],
        }


@dataclass(frozen=True, eq=False)
class Field:
    """One key of an object."""

    key: str
    node: Node
    #: Must the key be present? (A required key may still be null when `nullable`.)
    required: bool = True
    #: May the value be null (meaning the same as absent)? By default optional keys may.
    nullable: bool | None = None
    #: The first format version that has this key; older manifests' values are not read.
    since: int = 1
    #: The last format version that has this key (None: every later one); newer manifests'
    #: values are not read.
    until: int | None = None
    #: The versions in which the key is required, when not all of them (format 2 relaxes some).
    required_in: tuple[int, ...] | None = None
    default: Any = None
    description: str = ""

    def is_required(self, version: int) -> bool:
        return self.required if self.required_in is None else version in self.required_in

    def accepts_null(self, version: int) -> bool:
        return not self.is_required(version) if self.nullable is None else self.nullable


@dataclass(frozen=True)
class Rule:
    """A rule between the fields of one object: its check and, where JSON Schema can say it,
    its schema (added to the object's ``allOf``)."""

    check: Callable[[dict[str, Any], str, int], None]
    schema: Callable[[int], dict[str, Any] | None] = lambda version: None


@dataclass(frozen=True, eq=False)
class Obj(Node):
    """A JSON object with declared keys (unknown keys are allowed and ignored, spec §3)."""

    fields: tuple[Field, ...]
    rules: tuple[Rule, ...] = ()
    name: str | None = None
    description: str = ""
    #: How the children's `where` is spelled: ``{where}.{key}`` or, at the top level, ``{key}``.
    top: bool = False

    def active(self, version: int) -> list[Field]:
        return [
            f for f in self.fields if f.since <= version and (f.until is None or version <= f.until)
        ]

    def check(self, value: Any, where: str, version: int) -> dict[str, Any]:
        obj = typed(value, dict, where)
        out: dict[str, Any] = {}
        for f in self.active(version):
            at = f.key if self.top else f"{where}.{f.key}"
            if f.key not in obj:
                if f.is_required(version):
                    raise fail(where, f"missing required key {f.key!r}")
                out[f.key] = f.default
            elif obj[f.key] is None and f.accepts_null(version):
                out[f.key] = f.default
            else:
                out[f.key] = f.node.check(obj[f.key], at, version)
        for rule in self.rules:
            rule.check(out, where, version)
        return out

    def body(self, version: int, defs: Defs) -> dict[str, Any]:
        props: dict[str, Any] = {}
        for f in self.active(version):
            s = f.node.schema(version, defs)
            if f.accepts_null(version):
                s = {"anyOf": [s, {"type": "null"}]}
            if f.description:
                s = {"description": f.description} | s
            props[f.key] = s
        out: dict[str, Any] = {"type": "object"}
        if self.description:
            out["description"] = self.description
        out["required"] = [f.key for f in self.active(version) if f.is_required(version)]
        out["properties"] = props
        extra = [s for s in (r.schema(version) for r in self.rules) if s is not None]
        if extra:
            out["allOf"] = extra
        return out


# --- leaves with checks of their own ---------------------------------------------------------


def _dtype(text: str, where: str) -> str:
    if not dtypes.is_known(text):
        raise fail(
            where,
            f"unknown element type {text!r}; expected one of {', '.join(dtypes.MLIR_TO_NUMPY)}",
        )
    return text


def safe_file_name(name: str, where: str) -> str:
    """Refuse file names that could leave the bundle directory (absolute, .., separators).

    NUL and other control characters are refused as not printable.
    """
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
        or name.startswith("~")
        or not printable
        or len(name) > 255
    ):
        raise UnsafeBundleError(
            f"manifest.json: {where}: file name {name!r} is not a plain name inside the bundle "
            "directory (no paths, no '..'); a bundle may only refer to its own files"
        )
    return name


def _julia_type(text: str, where: str) -> str:
    if not 0 < len(text) <= MAX_JULIA_TYPE or not text.isprintable():
        raise fail(
            where,
            f"expected a Julia type name of 1 to {MAX_JULIA_TYPE} printable characters, "
            f"found {text!r:.80}",
        )
    return text


def version_tuple(version: str) -> tuple[int, int, int]:
    """``"1.17.0"`` as ``(1, 17, 0)``, for comparing StableHLO versions numerically."""
    major, minor, patch = (int(p) for p in version.split("."))
    return major, minor, patch


# Control characters are not printable; JSON Schema approximates str.isprintable with them.
_PRINTABLE = r"[^\x00-\x1f\x7f-\x9f]"

FILE_NAME = Str(
    custom=safe_file_name,
    name="file_name",
    description="A plain file name inside the bundle directory (no separators, not '.', '..' "
    "or starting with '~'); the reader also refuses non-printable characters",
    extra={"pattern": r"^(?!\.\.?" + _END + r")(?!~)(?:(?![/\\])" + _PRINTABLE + "){1,255}" + _END},
)
SHA256 = Str(regex=SHA_RE, expect="64 lowercase hex digits", name="sha256")
BLAKE3 = Str(regex=SHA_RE, expect="64 lowercase hex digits", name="blake3")
STABLEHLO_VERSION = Str(
    regex=VERSION_RE, expect="a StableHLO version MAJOR.MINOR.PATCH", name="stablehlo_version"
)
DTYPE = Str(
    custom=_dtype,
    name="dtype",
    description="An MLIR element type",
    extra={"enum": list(dtypes.MLIR_TO_NUMPY)},
)
DATASET = Str(
    regex=DATASET_RE,
    expect="an absolute HDF5 path like '/params/layer_1/weight'",
    unicode=True,
    name="hdf5_dataset",
)
SHAPE = Array(
    Int(hi=MAX_DIM),
    max_items=MAX_RANK,
    too_long="rank {n} exceeds the limit of {limit}",
    name="shape",
)
PATH = Array(
    Step(),
    max_items=MAX_DEPTH,
    too_long="path deeper than {limit} steps",
    name="path",
    description="A Lux path: the steps from the root of the tree to a leaf",
)


def _nonempty_path(why: str) -> Array:
    return Array(
        Step(),
        max_items=MAX_DEPTH,
        too_long="path deeper than {limit} steps",
        min_items=1,
        too_short=why,
        name="nonempty_path",
    )


@dataclass(frozen=True, eq=False)
class OutputPath(Node):
    """A path into the model's output tuple: it starts with "output" or "state"."""

    name: str | None = "output_path"

    def check(self, value: Any, where: str, version: int) -> tuple[str | int, ...]:
        p = PATH.check(value, where, version)
        if not p or p[0] not in ("output", "state"):
            raise fail(where, f"an output path starts with 'output' or 'state', found {list(p)}")
        return p

    def body(self, version: int, defs: Defs) -> dict[str, Any]:
        return {
            "type": "array",
            "items": [{"enum": ["output", "state"]}],
            "additionalItems": Step().schema(version, defs),
            "minItems": 1,
            "maxItems": MAX_DEPTH,
        }


# --- the manifest --------------------------------------------------------------------------


def _artifact_target(obj: dict[str, Any], where: str, version: int) -> None:
    target, written_at = obj["target"], obj["stablehlo_version"]
    if version_tuple(target) > version_tuple(written_at):
        raise fail(
            f"{where}.target",
            f"target {target} is newer than the writer's StableHLO {written_at}; a writer can "
            "only serialize to its own version or an older one",
        )


ARTIFACT = Obj(
    (
        Field("file", FILE_NAME),
        Field("sha256", SHA256),
        Field("stablehlo_version", STABLEHLO_VERSION),
        Field("target", STABLEHLO_VERSION),
    ),
    rules=(Rule(_artifact_target),),
    name="artifact",
    description="A StableHLO portable artifact of the module (spec §2.1); its target is at most "
    "stablehlo_version (checked by the reader)",
)


def _file_ref(*, artifact: bool, sha_in: tuple[int, ...] | None, name: str) -> Obj:
    fields = [
        Field("file", FILE_NAME),
        Field("sha256", SHA256, required_in=sha_in),
    ]
    if artifact:
        fields.append(Field("artifact", ARTIFACT, required=False, since=2))
    return Obj(tuple(fields), name=name)


MODULE_REF = _file_ref(artifact=True, sha_in=None, name="module_file")
WEIGHTS_REF = _file_ref(artifact=False, sha_in=(1,), name="weights_file")

_VERSION_KEYS = ("julia", "lux", "reactant")


def _producer_rule(obj: dict[str, Any], where: str, version: int) -> None:
    made, tool = obj["made_with_julia"], obj["tool"]
    if made != (tool == JULIA_TOOL):
        raise fail(
            f"{where}.made_with_julia",
            f"made_with_julia is {str(made).lower()} but tool is {tool!r}; it is true exactly "
            f"when tool is {JULIA_TOOL!r} (spec §3.2)",
        )
    for key in _VERSION_KEYS:
        v = obj[key]
        if made and v is None:
            raise fail(f"{where}.{key}", "expected the version string of a bundle made with Julia")
        if not made and v is not None:
            raise fail(
                f"{where}.{key}", f"expected null for a bundle made without Julia, found {v!r:.80}"
            )


def _producer_schema(version: int) -> dict[str, Any]:
    return {
        "if": {"properties": {"tool": {"const": JULIA_TOOL}}},
        "then": {
            "properties": {
                "made_with_julia": {"const": True},
                **{k: {"type": "string"} for k in _VERSION_KEYS},
            },
            "required": list(_VERSION_KEYS),
        },
        "else": {
            "properties": {
                "made_with_julia": {"const": False},
                **{k: {"type": "null"} for k in _VERSION_KEYS},
            }
        },
    }


PRODUCER = Obj(
    (
        Field("made_with_julia", Bool()),
        Field("tool", Str()),
        *(Field(k, Str(), required=False, nullable=True) for k in _VERSION_KEYS),
        Field("tool_version", Str()),
        Field("note", Str(), required=False),
        Field("created", Str(), required=False),
    ),
    rules=(Rule(_producer_rule, _producer_schema),),
    name="producer",
    description=f"Who wrote the bundle; made_with_julia is true exactly when tool is "
    f"{JULIA_TOOL!r}, and then julia, lux and reactant give their versions (spec §3.2)",
)


def _batch_axis(obj: dict[str, Any], where: str) -> None:
    axis, shape = obj["batch_axis"], obj["shape"]
    if axis is not None and not 0 <= axis < len(shape):
        raise fail(f"{where}.batch_axis", f"axis {axis} out of range for rank {len(shape)}")


def _argument_rule(obj: dict[str, Any], where: str, version: int) -> None:
    role, dataset = obj["role"], obj["dataset"]
    if role != "input" and dataset is None:
        raise fail(where, f"a {role} needs the HDF5 'dataset' that holds its value")
    if role == "input" and dataset is not None:
        raise fail(
            f"{where}.dataset",
            "an input has no dataset (its example value, if any, is in examples.inputs)",
        )
    key = DATASET_DIGEST[version]
    if key is not None and dataset is not None and obj[key] is None:
        raise fail(where, f"missing required key {key!r}")
    if role != "input" and not obj["path"]:
        raise fail(
            f"{where}.path", f"a {role} path names a leaf inside the tree, so it cannot be empty"
        )
    _batch_axis(obj, where)


def _argument_schema(version: int) -> dict[str, Any]:
    key = DATASET_DIGEST[version]
    leaf: dict[str, Any] = {
        "required": ["dataset", *([key] if key else [])],
        "properties": {
            "dataset": {"type": "string"},
            "path": {"minItems": 1},
            **({key: {"type": "string"}} if key else {}),
        },
    }
    return {
        "if": {"properties": {"role": {"const": "input"}}},
        "then": {"properties": {"dataset": {"type": "null"}}},
        "else": leaf,
    }


ARGUMENT = Obj(
    (
        Field("index", Int()),
        Field("role", Str(enum=ROLES, expect=f"one of {', '.join(ROLES)}")),
        Field("shape", SHAPE),
        Field("julia_shape", SHAPE, description="shape reversed (Julia is column-major)"),
        Field("dtype", DTYPE),
        Field("dataset", DATASET, required=False),
        Field("sha256", SHA256, required=False, since=2, until=2),
        Field("blake3", BLAKE3, required=False, since=3),
        Field("path", PATH),
        Field("batch_axis", Int(hi=MAX_RANK - 1), required=False),
        Field("tied_paths", Array(PATH), required=False, nullable=False, default=()),
    ),
    rules=(Rule(_argument_rule, _argument_schema),),
    name="argument",
    description="One @main argument (spec §3.3); a parameter or state has a dataset (and its "
    "digest: sha256 in format 2, blake3 in format 3) and a non-empty path, an input has neither",
)


def _result_rule(obj: dict[str, Any], where: str, version: int) -> None:
    if not obj["paths"] and obj.get("echo_of") is None:
        raise fail(
            f"{where}.paths",
            "a result needs at least one output path (only a result with echo_of may have none)",
        )
    _batch_axis(obj, where)


def _result_schema(version: int) -> dict[str, Any]:
    if version < 2:
        return {"properties": {"paths": {"minItems": 1}}}
    return {
        "if": {"properties": {"echo_of": {"type": "integer"}}, "required": ["echo_of"]},
        "else": {"properties": {"paths": {"minItems": 1}}},
    }


RESULT = Obj(
    (
        Field("index", Int()),
        Field("echo_of", Int(), required=False, since=2),
        Field("paths", Array(OutputPath())),
        Field("shape", SHAPE),
        Field("dtype", DTYPE),
        Field("batch_axis", Int(hi=MAX_RANK - 1), required=False),
    ),
    rules=(Rule(_result_rule, _result_schema),),
    name="result",
    description="One @main result and the output paths it fills (spec §3.4)",
)

ALIAS = Obj(
    (Field("argument", Int()), Field("path", OutputPath())),
    name="alias",
    description="An output that is @main argument `argument` returned unchanged",
)

BATCH = Obj(
    (Field("size", Int(lo=1)), Field("samples_independent", Bool())),
    name="batch",
)


def _example_entry(key: str, name: str) -> Obj:
    return Obj(
        (
            Field(key, Int()),
            Field("dataset", DATASET),
            Field("sha256", SHA256, since=2, until=2),
            Field("blake3", BLAKE3, since=3),
        ),
        name=name,
    )


EXAMPLES = Obj(
    (
        Field("inputs", Array(_example_entry("argument", "example_input"))),
        Field(
            "outputs",
            Array(
                _example_entry("result", "example_output"),
                min_items=1,
                too_short="expected at least one reference output",
            ),
        ),
        Field("rtol", Number(), required=False),
        Field("atol", Number(), required=False),
    ),
    name="examples",
    description="Example inputs (by argument) and Julia's outputs (by result) in the weights "
    "file; rtol/atol default per result dtype (spec §3.7)",
)

STATIC_LEAF = Obj(
    (
        Field("path", _nonempty_path("a state path names a leaf inside st, so it cannot be empty")),
        Field("value", Scalar(), nullable=True),
        Field(
            "julia_type",
            Str(
                custom=_julia_type,
                extra={"pattern": f"^{_PRINTABLE}{{1,{MAX_JULIA_TYPE}}}{_END}"},
            ),
        ),
    ),
    name="static_leaf",
    description="A non-array leaf of Lux's state, e.g. st.training = Val(true) (spec §3.11)",
)

EMPTY = Obj(
    tuple(
        Field(
            group,
            Array(_nonempty_path("the root cannot be listed as an empty container")),
            required=False,
            nullable=False,
            default=(),
        )
        for group in ("params", "state")
    ),
    name="empty",
    description="Empty containers of the parameter and state trees (never the root)",
)


def _train_rule(obj: dict[str, Any], where: str, version: int) -> None:
    batch = obj["batch"]
    if obj["mode"] == "train" and batch is not None and batch["samples_independent"]:
        raise fail(
            "batch.samples_independent",
            "expected false in train mode: training-mode layers such as BatchNorm mix "
            "samples, so splitting a batch would silently change the results",
        )


def _train_schema(version: int) -> dict[str, Any]:
    return {
        "if": {"properties": {"mode": {"const": "train"}}},
        "then": {
            "properties": {
                "batch": {
                    "anyOf": [
                        {"type": "null"},
                        {"properties": {"samples_independent": {"const": False}}},
                    ]
                }
            }
        },
    }


FORMAT_FIELD = Field(
    "format",
    Str(enum=(FORMAT,), expect=repr(FORMAT), suffix="; this is not a juliabridge bundle"),
)

MANIFEST = Obj(
    (
        FORMAT_FIELD,
        Field("format_version", Int(lo=min(READABLE_VERSIONS), hi=max(READABLE_VERSIONS))),
        Field("name", Str(regex=NAME_RE, expect="1-128 characters of [A-Za-z0-9_.-]")),
        Field("mode", Str(enum=MODES, expect=" or ".join(map(repr, MODES)))),
        Field("arguments", Array(ARGUMENT)),
        Field("results", Array(RESULT)),
        Field("aliases", Array(ALIAS)),
        Field("batch", BATCH, required=False),
        Field("examples", EXAMPLES, required=False),
        Field("metadata", AnyObject(), required=False, default={}),
        Field("static_state", Array(STATIC_LEAF), required=False, since=2, default=()),
        Field("producer", PRODUCER),
        Field("module", MODULE_REF),
        Field("weights", WEIGHTS_REF),
        Field("vjp", MODULE_REF, required=False),
        Field("empty", EMPTY, required=False),
    ),
    rules=(Rule(_train_rule, _train_schema),),
    top=True,
)


def _dispatch(versions: tuple[int, ...]) -> dict[str, Any]:
    """if format_version is the first version then its body, else the same for the rest."""
    ref = {"$ref": f"#/definitions/manifest_v{versions[0]}"}
    if len(versions) == 1:
        return ref
    return {
        "if": {"properties": {"format_version": {"const": versions[0]}}},
        "then": ref,
        "else": _dispatch(versions[1:]),
    }


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft-07) of manifest.json, every readable format version, from MANIFEST."""
    defs = Defs()
    by_version = {v: MANIFEST.body(v, defs) for v in READABLE_VERSIONS}
    for v, body in by_version.items():
        body["properties"]["format_version"] = {"const": v}
        body["properties"]["format"] = {"const": FORMAT}
    defs.table.update({f"manifest_v{v}": body for v, body in by_version.items()})
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "juliabridge bundle manifest (manifest.json), format versions "
        + ", ".join(map(str, READABLE_VERSIONS[:-1]))
        + f" and {READABLE_VERSIONS[-1]}",
        "description": "Generated by `python -m juliabridge.bundle.manifest.write_schema` from "
        "juliabridge/bundle/manifest/schema.py; do not edit. "
        "The structure of docs/bundle-format.md §3. "
        "Rules relating one part of a manifest to another (entry order, sizes, unique paths, "
        "the output and state trees) are checked by the reader, not by this schema.",
        "type": "object",
        "required": ["format", "format_version"],
        "properties": {
            "format": {"const": FORMAT},
            "format_version": {"enum": list(READABLE_VERSIONS)},
        },
        **_dispatch(READABLE_VERSIONS),
        "definitions": dict(sorted(defs.table.items())),
    }


def schema_text() -> str:
    """json_schema() as the text of docs/bundle-manifest.schema.json."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=True) + "\n"
