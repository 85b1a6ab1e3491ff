"""Format-1 bundles written by hand for the pinned-behaviour tests (tests/test_pinned_*.py).

Independent of juliabridge's own writer on purpose: the manifest is plain JSON, the weights are
written with h5py following docs/bundle-format.md §4, and the checksums with hashlib. So the
tests meet a bundle as a user (or an attacker) hands it over, and keep meaning the same while
juliabridge's reader and writer are rewritten.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import jax
import ml_dtypes
import numpy as np

#: numpy dtype -> (MLIR element type, stored numpy dtype), spec §3.9 and §4.
TAGS: dict[np.dtype, tuple[str, np.dtype]] = {
    np.dtype(np.float32): ("f32", np.dtype(np.float32)),
    np.dtype(np.float64): ("f64", np.dtype(np.float64)),
    np.dtype(np.float16): ("f16", np.dtype(np.uint16)),
    np.dtype(ml_dtypes.bfloat16): ("bf16", np.dtype(np.uint16)),
    np.dtype(np.bool_): ("i1", np.dtype(np.uint8)),
    np.dtype(np.int8): ("i8", np.dtype(np.int8)),
    np.dtype(np.int32): ("i32", np.dtype(np.int32)),
    np.dtype(np.int64): ("i64", np.dtype(np.int64)),
    np.dtype(np.uint8): ("ui8", np.dtype(np.uint8)),
    np.dtype(np.uint64): ("ui64", np.dtype(np.uint64)),
    np.dtype(np.complex64): ("complex<f32>", np.dtype(np.complex64)),  # compound {r, i}
}


def tag_of(a: np.ndarray) -> str:
    """The MLIR element type of a numpy array (spec §3.9)."""
    return TAGS[np.dtype(a.dtype)][0]


def stored(a: np.ndarray) -> np.ndarray:
    """The array as the weights file stores it: 16-bit floats as bits, Bool as uint8 0/1."""
    a = np.asarray(a)
    want = TAGS[np.dtype(a.dtype)][1]
    if a.dtype == np.bool_:
        return a.astype(np.uint8)
    if want != a.dtype:
        return a.view(want)
    return a


def lower(fn: Callable[..., Any], *examples: Any) -> str:
    """StableHLO text of `fn` at the shapes and dtypes of `examples` (a public @main)."""
    specs = [jax.ShapeDtypeStruct(np.shape(e), np.asarray(e).dtype) for e in examples]
    return str(jax.jit(fn, keep_unused=True).lower(*specs).as_text())


@dataclass
class Arg:
    """One @main argument: role, Lux path, value (MLIR shape) and optional batch axis."""

    role: str
    path: list[Any]
    value: np.ndarray
    batch_axis: int | None = None
    dataset: str | None = None

    def dataset_name(self) -> str:
        group = {"parameter": "params", "state": "state"}[self.role]
        return self.dataset or "/" + "/".join([group, *map(str, self.path)])


@dataclass
class Res:
    """One @main result: where it goes in (y, st_new), its type, optional batch axis."""

    paths: list[list[Any]]
    shape: tuple[int, ...]
    dtype: str
    batch_axis: int | None = None


@dataclass
class Spec:
    """Everything a bundle holds; `write` lays it out on disk."""

    name: str
    mlir: str
    args: list[Arg]
    results: list[Res]
    aliases: list[tuple[list[Any], int]] = field(default_factory=list)
    batch: dict[str, Any] | None = None
    mode: str = "test"
    example_outputs: dict[int, np.ndarray] | None = None
    rtol: float = 1e-4
    atol: float = 1e-5
    vjp: str | None = None
    empty: dict[str, list[list[Any]]] | None = None


def results_of(fn: Callable[..., Any], args: Sequence[Arg]) -> list[tuple[tuple[int, ...], str]]:
    """(shape, MLIR dtype) of each result of `fn` on the arguments' values."""
    out = jax.eval_shape(fn, *[jax.ShapeDtypeStruct(a.value.shape, a.value.dtype) for a in args])
    leaves = out if isinstance(out, (tuple, list)) else (out,)
    return [(tuple(o.shape), TAGS[np.dtype(o.dtype)][0]) for o in leaves]


def sha256(path: Path) -> str:
    """Hex sha256 of a whole file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(root: Path, spec: Spec) -> Path:
    """Write `spec` as a format-1 bundle directory at `root` (created) and return it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.mlir").write_text(spec.mlir)
    arguments = []
    with h5py.File(root / "weights.h5", "w") as f:
        for i, a in enumerate(spec.args):
            value = np.asarray(a.value)
            entry: dict[str, Any] = {
                "index": i,
                "role": a.role,
                "path": a.path,
                "dtype": tag_of(value),
                "shape": list(value.shape),
                "julia_shape": list(reversed(value.shape)),
            }
            if a.batch_axis is not None:
                entry["batch_axis"] = a.batch_axis
            if a.role != "input":
                entry["dataset"] = a.dataset_name()
                ds = f.create_dataset(entry["dataset"], data=stored(value))
                ds.attrs["dtype"] = tag_of(value)
            arguments.append(entry)
        examples = None
        if spec.example_outputs is not None:
            ins, outs = [], []
            for i, a in enumerate(spec.args):
                if a.role == "input":
                    name = f"/examples/inputs/{i}"
                    f.create_dataset(name, data=stored(a.value)).attrs["dtype"] = tag_of(a.value)
                    ins.append({"argument": i, "dataset": name})
            for k, v in spec.example_outputs.items():
                name = f"/examples/outputs/{k}"
                f.create_dataset(name, data=stored(v)).attrs["dtype"] = tag_of(v)
                outs.append({"result": k, "dataset": name})
            examples = {"inputs": ins, "outputs": outs, "rtol": spec.rtol, "atol": spec.atol}
    manifest: dict[str, Any] = {
        "format": "juliabridge.bundle",
        "format_version": 1,
        "name": spec.name,
        "producer": {
            "tool": "pinned-tests",
            "tool_version": "1",
            "julia": None,
            "lux": None,
            "reactant": None,
            "made_with_julia": False,
            "note": "written by hand in tests/pinned_support.py",
        },
        "module": {"file": "model.mlir", "sha256": ""},
        "weights": {"file": "weights.h5", "sha256": ""},
        "mode": spec.mode,
        "arguments": arguments,
        "results": [
            {
                "index": k,
                "paths": r.paths,
                "dtype": r.dtype,
                "shape": list(r.shape),
                **({"batch_axis": r.batch_axis} if r.batch_axis is not None else {}),
            }
            for k, r in enumerate(spec.results)
        ],
        "aliases": [{"path": p, "argument": i} for p, i in spec.aliases],
    }
    if spec.batch is not None:
        manifest["batch"] = spec.batch
    if examples is not None:
        manifest["examples"] = examples
    if spec.empty is not None:
        manifest["empty"] = spec.empty
    if spec.vjp is not None:
        (root / "vjp.mlir").write_text(spec.vjp)
        manifest["vjp"] = {"file": "vjp.mlir", "sha256": ""}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    reseal(root)
    return root


def manifest(root: Path) -> dict[str, Any]:
    """The bundle's manifest as a dict."""
    return dict(json.loads((root / "manifest.json").read_text()))


def edit(root: Path, change: Callable[[dict[str, Any]], Any], *, seal: bool = True) -> Path:
    """Apply `change` to the manifest in place, then recompute the checksums (an attacker can)."""
    m = manifest(root)
    change(m)
    (root / "manifest.json").write_text(json.dumps(m, indent=1))
    if seal:
        reseal(root)
    return root


def reseal(root: Path) -> None:
    """Record the current sha256 of every file the manifest names."""
    m = manifest(root)
    for key in ("module", "weights", "vjp"):
        if key in m and (root / m[key]["file"]).is_file():
            m[key]["sha256"] = sha256(root / m[key]["file"])
    (root / "manifest.json").write_text(json.dumps(m, indent=1))


def dense_spec(seed: int = 0, *, batch: int = 4) -> tuple[Spec, Callable[..., Any]]:
    """x (batch, 2) @ w (2, 3) + b (3,), batch axis 0, samples independent; and its function."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 2)).astype(np.float32)
    w = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)

    def fn(x: Any, w: Any, b: Any) -> Any:
        return x @ w + b

    args = [
        Arg("input", [], x, batch_axis=0),
        Arg("parameter", ["layer_1", "weight"], w),
        Arg("parameter", ["layer_1", "bias"], b),
    ]
    spec = Spec(
        name="dense",
        mlir=lower(fn, x, w, b),
        args=args,
        results=[Res([["output"]], (batch, 3), "f32", batch_axis=0)],
        batch={"size": batch, "samples_independent": True},
    )
    return spec, fn
