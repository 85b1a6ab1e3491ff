"""Writes Julia export directories (docs/julia-export.md) from the spec alone, as JuliaBridge.jl
would: ``juliabridge-export.json``, the flat module's text and ``weights.h5`` written with h5py
(no juliabridge code: the stored types and the ``dtype`` attribute are the spec's table, the
dataset shapes are the MLIR shapes HDF5.jl writes for a Julia array).

Values are given in MLIR (row-major) order, as @main takes them; ``julia_shape`` is written
reversed, as Julia's ``size`` is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import ml_dtypes
import numpy as np

from tests.pinned_support import lower

#: numpy dtype -> the spec's dtype name (bundle-format §3.9).
TAG = {
    np.dtype(np.float16): "f16",
    np.dtype(ml_dtypes.bfloat16): "bf16",
    np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
    np.dtype(np.bool_): "i1",
    np.dtype(np.int8): "i8",
    np.dtype(np.int16): "i16",
    np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64",
    np.dtype(np.uint8): "ui8",
    np.dtype(np.uint16): "ui16",
    np.dtype(np.uint32): "ui32",
    np.dtype(np.uint64): "ui64",
    np.dtype(np.complex64): "complex<f32>",
    np.dtype(np.complex128): "complex<f64>",
}


def stored(a: np.ndarray) -> np.ndarray:
    """As the spec stores it: 16-bit floats as uint16 bits, Bool as uint8 0/1, the rest as is
    (complex as h5py's compound {r, i})."""
    a = np.asarray(a)
    if a.dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        return a.view(np.uint16)
    if a.dtype == np.bool_:
        return a.astype(np.uint8)
    return a


@dataclass
class JArg:
    """One @main argument: role, Lux path, value (MLIR order), tied paths, dataset name."""

    role: str
    path: list[Any]
    value: np.ndarray
    tied_paths: list[list[Any]] = field(default_factory=list)
    dataset: str | None = None

    def dataset_name(self) -> str:
        group = {"parameter": "params", "state": "state"}[self.role]
        return self.dataset or "/" + "/".join([group, *map(str, self.path)])


@dataclass
class JExport:
    """What JuliaBridge.export_lux writes: the flat module and the facts around it."""

    name: str
    mlir: str
    args: list[JArg]
    #: The path of each listed @main result, in order ("output"/"state" first).
    results: list[list[Any]]
    mode: str = "test"
    #: Julia's outputs by result index; with them the inputs' values are the example inputs.
    example_outputs: dict[int, np.ndarray] | None = None
    empty: dict[str, list[list[Any]]] | None = None
    static_state: list[dict[str, Any]] | None = None
    samples_independent: bool | None = None
    metadata: dict[str, Any] | None = None
    module_file: str = "model.mlir"
    weights_file: str = "weights.h5"
    #: Top-level keys replaced in the description (for hostile variants).
    override: dict[str, Any] = field(default_factory=dict)


def description(e: JExport) -> dict[str, Any]:
    """The juliabridge-export.json object of `e`."""
    args = []
    for i, a in enumerate(e.args):
        v = np.asarray(a.value)
        entry: dict[str, Any] = {
            "index": i,
            "role": a.role,
            "path": a.path,
            "dtype": TAG[v.dtype],
            "julia_shape": list(reversed(v.shape)),
        }
        if a.role != "input":
            entry["dataset"] = a.dataset_name()
        if a.tied_paths:
            entry["tied_paths"] = a.tied_paths
        args.append(entry)
    d: dict[str, Any] = {
        "format": "juliabridge.julia-export",
        "format_version": 1,
        "name": e.name,
        "mode": e.mode,
        "producer": {
            "tool": "JuliaBridge.jl",
            "tool_version": "0.2.0",
            "julia": "1.11.2",
            "lux": "1.31.4",
            "reactant": "0.2.280",
            "created": "2026-12-06T07:00:00Z",
        },
        "module": {"file": e.module_file},
        "weights": {"file": e.weights_file},
        "arguments": args,
        "results": [{"index": k, "path": p} for k, p in enumerate(e.results)],
    }
    if e.empty is not None:
        d["empty"] = e.empty
    if e.static_state is not None:
        d["static_state"] = e.static_state
    if e.example_outputs is not None:
        d["examples"] = {
            "inputs": [
                {"argument": i, "dataset": f"/examples/inputs/{i}"}
                for i, a in enumerate(e.args)
                if a.role == "input"
            ],
            "outputs": [
                {"result": k, "dataset": f"/examples/outputs/{k}"}
                for k in sorted(e.example_outputs)
            ],
        }
    if e.samples_independent is not None:
        d["samples_independent"] = e.samples_independent
    if e.metadata is not None:
        d["metadata"] = e.metadata
    d.update(e.override)
    return d


def _put(f: h5py.File, name: str, value: np.ndarray) -> None:
    v = np.asarray(value)
    ds = f.create_dataset(name, data=stored(v))
    ds.attrs["dtype"] = TAG[v.dtype]


def write_julia_export(root: Path, e: JExport, *, text: str | None = None) -> Path:
    """Write the directory `root` for `e` (the description as `text` when given)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / e.module_file).write_text(e.mlir, encoding="utf-8")
    with h5py.File(root / e.weights_file, "w") as f:
        for a in e.args:
            if a.role != "input":
                _put(f, a.dataset_name(), a.value)
        if e.example_outputs is not None:
            for i, a in enumerate(e.args):
                if a.role == "input":
                    _put(f, f"/examples/inputs/{i}", a.value)
            for k, v in e.example_outputs.items():
                _put(f, f"/examples/outputs/{k}", v)
    body = text if text is not None else json.dumps(description(e), indent=1)
    (root / "juliabridge-export.json").write_text(body, encoding="utf-8")
    return root


def flat(fn: Callable[..., Sequence[Any]], args: list[JArg]) -> str:
    """The module of the flat function `fn(*leaves)` at the arguments' values."""
    return lower(fn, *[a.value for a in args])
