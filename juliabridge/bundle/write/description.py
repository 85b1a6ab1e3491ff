"""What a bundle written from Python holds, as one frozen record: `BundleDescription` (and an
`ArgumentSpec` per @main argument). `writer.write_bundle(path, description)` checks it against
the module, decides the manifest and writes the files (docs/bundle-format.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The producer note of a bundle written without Julia, unless the description gives another.
DEFAULT_NOTE = (
    "Written by juliabridge's Python bundle writer following docs/bundle-format.md and Lux's "
    "conventions; no Julia was involved."
)

#: A Lux path as the writer takes it: names and positions from the tree's root.
PathSteps = Sequence[str | int]


@dataclass(frozen=True)
class ArgumentSpec:
    """One @main argument to write: role, Lux path and value (MLIR shape; example for inputs),
    and the other paths of the same array in its tree (spec §3.3 `tied_paths`)."""

    role: str
    path: PathSteps
    value: np.ndarray
    batch_axis: int | None = None
    tied_paths: Sequence[PathSteps] = ()


@dataclass(frozen=True)
class BundleDescription:
    """A format-3 bundle to write: the module, its arguments and results, and the manifest's
    optional sections. Only the first four fields are required."""

    #: The model name.
    name: str
    #: The forward StableHLO module; written as is, and (sanitized) as the portable artifact.
    mlir_text: str
    #: One spec per @main argument, in order (values in MLIR shape).
    arguments: Sequence[ArgumentSpec]
    #: The output paths of each @main result (may be empty for an echo).
    result_paths: Sequence[Sequence[PathSteps]]
    #: (output path, argument index) of outputs that are arguments unchanged.
    aliases: Sequence[tuple[PathSteps, int]] = ()
    #: "test" or "train".
    mode: str = "test"
    #: The manifest's batch object.
    batch: Mapping[str, Any] | None = None
    #: Reference outputs for the input values in `arguments`, in result order, or by result
    #: index (a mapping may leave results out, spec §3.7); with them the bundle gets an
    #: examples section.
    example_outputs: Sequence[np.ndarray] | Mapping[int, np.ndarray] | None = None
    #: Verify tolerances of the examples (default: spec §3.7's per-dtype values).
    rtol: float | None = None
    atol: float | None = None
    #: The batch axis of each result (None: none).
    result_batch_axes: Sequence[int | None] | None = None
    #: Per result, the argument it returns unchanged (spec §3.4), or None.
    result_echoes: Sequence[int | None] | None = None
    #: Paths of empty containers in ps ("params") and st ("state").
    empty: Mapping[str, Sequence[PathSteps]] | None = None
    #: (path in st, JSON scalar value, Julia type name) of non-array state.
    static_state: Sequence[tuple[PathSteps, Any, str]] = ()
    #: Free-form JSON.
    metadata: Mapping[str, Any] | None = None
    #: The producer note.
    note: str = DEFAULT_NOTE
    #: Fields of the manifest's producer that replace this writer's (e.g. the tool of a
    #: converted export); the note still comes from `note`.
    producer: Mapping[str, Any] | None = None
    #: Also write model.mlirbc (spec §2.1).
    portable_artifact: bool = True


__all__ = ["DEFAULT_NOTE", "ArgumentSpec", "BundleDescription", "PathSteps"]
