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

from .entries import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    MAX_TENSOR_BYTES,
    AliasEntry,
    ArgumentEntry,
    ArtifactRef,
    BatchInfo,
    ExampleEntry,
    Examples,
    FileRef,
    LuxPath,
    Manifest,
    PathStep,
    Producer,
    ResultEntry,
    StaticLeaf,
    default_tolerances,
    format_path,
    tensor_bytes,
)
from .load import decode_strict_json, load_manifest, manifest_advice
from .parse import parse_manifest
from .rules import PRODUCER_KEYS, REACTANT_EXPORTER, check_consistency
from .schema import (
    FORMAT,
    FORMAT_VERSION,
    JULIA_TOOL,
    MAX_DEPTH,
    MAX_JULIA_TYPE,
    MAX_PATH_STEP,
    MAX_RANK,
    MAX_STATIC_STRING,
    MODES,
    READABLE_VERSIONS,
    ROLES,
    safe_file_name,
    version_tuple,
)

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
    "PRODUCER_KEYS",
    "REACTANT_EXPORTER",
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
    "check_consistency",
    "decode_strict_json",
    "default_tolerances",
    "format_path",
    "load_manifest",
    "manifest_advice",
    "parse_manifest",
    "safe_file_name",
    "tensor_bytes",
    "version_tuple",
]
