"""The manifest as Python sees it: limits, path types and the frozen entries parse.py builds."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ...support import dtypes
from .schema import (
    DATASET_DIGEST,
    FORMAT_VERSION,
)

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
    #: The bytes this manifest was parsed from, as `load_manifest` read them (at most
    #: MAX_MANIFEST_BYTES); None for a manifest made in memory (a completed Julia or Reactant
    #: export directory). Kept so that `save_jax` digests what was read, not the file again.
    source_bytes: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def source_sha256(self) -> str | None:
        """sha256 (hex) of `source_bytes`, taken when asked (None where there are none)."""
        return None if self.source_bytes is None else hashlib.sha256(self.source_bytes).hexdigest()

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
