"""``juliabridge-export.json``: reading and checking the description JuliaBridge.jl writes
beside the flat module and the weights (docs/julia-export.md).

The structure is declared with the manifest's own building blocks (bundle/manifest/schema.py),
so a path, a dtype, a file name, a static leaf or an empty container is checked by the very
code that checks it in a bundle. The file is read like a bundle's manifest: opened without
following symlinks, relative to the directory's descriptor, at most 64 MiB, strict JSON.
Rules that relate the description to the module are the completion's (complete.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bundle.files import safefile
from ..bundle.manifest import (
    JULIA_TOOL,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    MODES,
    ROLES,
    LuxPath,
    decode_strict_json,
    format_path,
)
from ..bundle.manifest.schema import (
    DATASET,
    DTYPE,
    EMPTY,
    FILE_NAME,
    NAME_RE,
    PATH,
    SHAPE,
    STATIC_LEAF,
    AnyObject,
    Array,
    Bool,
    Field,
    Int,
    Obj,
    OutputPath,
    Rule,
    Str,
    typed,
)
from ..bundle.manifest.schema import fail as _fail
from ..errors import BundleError, BundleVersionError, ManifestError, UnsafeBundleError
from ..support.slots import check_tuple_slots

#: The description's file name; a directory holding it is a Julia export directory.
DESCRIPTION_NAME = "juliabridge-export.json"
#: Its `format` value.
FORMAT = "juliabridge.julia-export"
#: The version this reader reads (and the largest).
FORMAT_VERSION = 1
#: The manifest's version the structure nodes are checked at (their `since` fields).
_NODE_VERSION = 3


@dataclass(frozen=True)
class ArgumentFact:
    """One @main argument as Julia describes it."""

    index: int
    role: str
    path: LuxPath
    dtype: str
    julia_shape: tuple[int, ...]
    dataset: str | None
    tied_paths: tuple[LuxPath, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """The MLIR shape: Julia's size reversed."""
        return tuple(reversed(self.julia_shape))

    @property
    def label(self) -> str:
        """``params.layer_1.weight``-style name."""
        return format_path(
            {"input": "x", "parameter": "params", "state": "state"}[self.role], self.path
        )


@dataclass(frozen=True)
class ResultFact:
    """One of the first @main results: its path in the returned ``(y, st_new)``."""

    index: int
    path: LuxPath


@dataclass(frozen=True)
class Description:
    """A checked ``juliabridge-export.json`` (docs/julia-export.md)."""

    #: The directory holding it (resolved).
    root: Path
    name: str
    mode: str
    #: tool, tool_version, julia, lux, reactant and (optionally) created.
    producer: dict[str, str | None]
    module_file: str
    weights_file: str
    arguments: tuple[ArgumentFact, ...]
    results: tuple[ResultFact, ...]
    #: ``{"params": paths, "state": paths}`` as bundle §3.10, or empty.
    empty: dict[str, tuple[LuxPath, ...]]
    #: ``(path, value, julia_type)`` of each non-array state leaf (bundle §3.11).
    static_state: tuple[tuple[LuxPath, Any, str], ...]
    #: (argument index, dataset) of each example input, or None without examples.
    example_inputs: tuple[tuple[int, str], ...] | None
    #: (result index, dataset) of each of Julia's reference outputs, or None.
    example_outputs: tuple[tuple[int, str], ...] | None
    samples_independent: bool | None
    metadata: dict[str, Any]

    @property
    def path(self) -> Path:
        """The description file."""
        return self.root / DESCRIPTION_NAME


def _argument_rule(obj: dict[str, Any], where: str, version: int) -> None:
    role, dataset = obj["role"], obj["dataset"]
    if role == "input" and dataset is not None:
        raise _fail(
            f"{where}.dataset",
            "an input has no dataset (its example value, if any, is in examples.inputs)",
        )
    if role != "input" and dataset is None:
        raise _fail(where, f"a {role} needs the HDF5 'dataset' that holds its value")
    if role != "input" and not obj["path"]:
        root = "ps" if role == "parameter" else "st"
        raise _fail(
            f"{where}.path",
            f"a {role} path names a leaf inside the tree, so it cannot be empty (here {root} "
            f"is itself an array, which has no Lux name; JuliaBridge.jl now refuses that: wrap "
            f"it in Julia, (; weight={root}), and export again)",
        )
    if role == "input" and obj["tied_paths"]:
        raise _fail(
            f"{where}.tied_paths",
            "an input has no tied paths (ties are recorded within ps and within st)",
        )


ARGUMENT = Obj(
    (
        Field("index", Int()),
        Field("role", Str(enum=ROLES, expect=f"one of {', '.join(ROLES)}")),
        Field("path", PATH),
        Field("dtype", DTYPE),
        Field("julia_shape", SHAPE),
        Field("dataset", DATASET, required=False),
        Field("tied_paths", Array(PATH), required=False, nullable=False, default=()),
    ),
    rules=(Rule(_argument_rule),),
)
RESULT = Obj((Field("index", Int()), Field("path", OutputPath())))
FILE = Obj((Field("file", FILE_NAME),))
PRODUCER = Obj(
    (
        Field(
            "tool",
            Str(
                enum=(JULIA_TOOL,),
                expect=repr(JULIA_TOOL),
                suffix="; only JuliaBridge.jl writes this directory",
            ),
        ),
        Field("tool_version", Str()),
        Field("julia", Str()),
        Field("lux", Str()),
        Field("reactant", Str()),
        Field("created", Str(), required=False),
    )
)
EXAMPLES = Obj(
    (
        Field("inputs", Array(Obj((Field("argument", Int()), Field("dataset", DATASET))))),
        Field(
            "outputs",
            Array(
                Obj((Field("result", Int()), Field("dataset", DATASET))),
                min_items=1,
                too_short="expected at least one reference output",
            ),
        ),
    )
)
DESCRIPTION = Obj(
    (
        Field("format", Str(enum=(FORMAT,), expect=repr(FORMAT))),
        Field("format_version", Int(lo=1, hi=FORMAT_VERSION)),
        Field("name", Str(regex=NAME_RE, expect="1-128 characters of [A-Za-z0-9_.-]")),
        Field("mode", Str(enum=MODES, expect=" or ".join(map(repr, MODES)))),
        Field("producer", PRODUCER),
        Field("module", FILE),
        Field("weights", FILE),
        Field("arguments", Array(ARGUMENT)),
        Field("results", Array(RESULT)),
        Field("empty", EMPTY, required=False),
        Field("static_state", Array(STATIC_LEAF), required=False, default=()),
        Field("examples", EXAMPLES, required=False),
        Field("samples_independent", Bool(), required=False),
        Field("metadata", AnyObject(), required=False, default={}),
    ),
    top=True,
)


def _indexed(entries: tuple[dict[str, Any], ...], group: str) -> None:
    for i, e in enumerate(entries):
        if e["index"] != i:
            raise _fail(
                f"{group}[{i}].index",
                f"is {e['index']} but the entry is number {i}; entries are in @main order",
            )


def _check_files(d: dict[str, Any]) -> None:
    """The module and weights are two different files, neither the description itself."""
    taken = {DESCRIPTION_NAME.casefold(): "the description"}
    for key in ("module", "weights"):
        name = d[key]["file"]
        if name.casefold() in taken:
            raise _fail(
                f"{key}.file",
                f"{name!r} is also {taken[name.casefold()]}; each file has its own name",
            )
        taken[name.casefold()] = f"{key}.file"


def check_description(obj: Any, root: Path) -> Description:
    """Validate a decoded description (structure and the rules of docs/julia-export.md §3).

    Args:
        obj: the decoded JSON.
        root: the directory it was read from.

    Returns:
        The Description.

    Raises:
        BundleVersionError: `format_version` is newer than this juliabridge reads.
        ManifestError: a key is missing, mistyped or breaks a rule (the message names it);
            UnsafeBundleError: a file name that could leave the directory.
    """
    where = root / DESCRIPTION_NAME
    try:
        obj = typed(obj, dict, "top level")
        for key in ("format", "format_version"):
            if key not in obj:
                raise _fail("top level", f"missing required key {key!r}")
        DESCRIPTION.fields[0].node.check(obj["format"], "format", _NODE_VERSION)
        version = typed(obj["format_version"], int, "format_version")
        if version > FORMAT_VERSION:
            raise BundleVersionError(
                f"{where}: format_version {version} is newer than this juliabridge reads "
                f"({FORMAT_VERSION}); upgrade juliabridge (pip install -U juliabridge)"
            )
        d = DESCRIPTION.check(obj, "top level", _NODE_VERSION)
        _indexed(d["arguments"], "arguments")
        _indexed(d["results"], "results")
        _check_files(d)
        if d["mode"] == "train" and d["samples_independent"]:
            raise _fail(
                "samples_independent",
                "true contradicts mode 'train': training-mode layers such as BatchNorm mix the "
                "samples of a batch; leave it unset in train mode",
            )
    except (ManifestError, UnsafeBundleError) as e:
        raise _renamed(e, where) from None
    ex = d["examples"]
    empty = d["empty"]
    for group, role in (("params", "parameter"), ("state", "state")):
        args = [a for a in d["arguments"] if a["role"] == role]
        paths = [p for a in args for p in (a["path"], *a["tied_paths"])]
        paths += [] if empty is None else list(empty[group])
        paths += [s["path"] for s in d["static_state"]] if group == "state" else []
        check_tuple_slots(paths, f"{where}: the {group} tree")
    return Description(
        root=root,
        name=d["name"],
        mode=d["mode"],
        producer=dict(d["producer"]),
        module_file=d["module"]["file"],
        weights_file=d["weights"]["file"],
        arguments=tuple(
            ArgumentFact(
                a["index"],
                a["role"],
                a["path"],
                a["dtype"],
                a["julia_shape"],
                a["dataset"],
                a["tied_paths"],
            )
            for a in d["arguments"]
        ),
        results=tuple(ResultFact(r["index"], r["path"]) for r in d["results"]),
        empty={} if empty is None else {g: empty[g] for g in ("params", "state")},
        static_state=tuple((s["path"], s["value"], s["julia_type"]) for s in d["static_state"]),
        example_inputs=None
        if ex is None
        else tuple((e["argument"], e["dataset"]) for e in ex["inputs"]),
        example_outputs=None
        if ex is None
        else tuple((e["result"], e["dataset"]) for e in ex["outputs"]),
        samples_independent=d["samples_independent"],
        metadata=dict(d["metadata"]),
    )


def _renamed(e: BundleError, where: Path) -> BundleError:
    """The schema's error, naming the description file instead of manifest.json."""
    text = str(e)
    prefix = f"{MANIFEST_NAME}: "
    if text.startswith(prefix):
        text = text[len(prefix) :]
    text = text.replace("inside the bundle directory", "inside the export directory")
    return type(e)(f"{where}: {text}. See docs/julia-export.md")


def read_description(root: Path, dir_fd: int | None) -> Description:
    """Read and check ``juliabridge-export.json`` in `root` (a regular file, no symlink).

    Args:
        root: the export directory.
        dir_fd: its descriptor (`safefile.directory`), or None where the platform has none.

    Raises:
        BundleError: missing or unreadable; UnsafeBundleError: a symlink; ManifestError:
            larger than 64 MiB, not strict JSON, or breaking a rule; BundleVersionError.
    """
    path = root / DESCRIPTION_NAME
    fd, st = safefile.open_regular(path, "the export description", dir_fd=dir_fd)
    try:
        if st.st_size > MAX_MANIFEST_BYTES:
            raise ManifestError(
                f"{path}: {st.st_size} bytes is larger than the {MAX_MANIFEST_BYTES >> 20} MiB "
                "limit; a description lists arrays, it does not hold them"
            )
        data = safefile.read_all(fd, st.st_size, path, "the export description")
    finally:
        os.close(fd)
    return check_description(decode_strict_json(data, path), root)


__all__ = [
    "DESCRIPTION_NAME",
    "FORMAT",
    "FORMAT_VERSION",
    "ArgumentFact",
    "Description",
    "ResultFact",
    "check_description",
    "read_description",
]
