"""A tiny Dense+BatchNorm(test mode) bundle written with the Python writer, for error tests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle


def _forward(x, w, b, scale, bias, mean, var):  # type: ignore[no-untyped-def]
    y = x @ w + b
    return (y - mean) / jnp.sqrt(var + 1e-5) * scale + bias


#: (role, Lux path) of each @main argument, in Reactant's order.
DENSE_BN_ARGUMENTS: list[tuple[str, list[str]]] = [
    ("input", []),
    ("parameter", ["layer_1", "weight"]),
    ("parameter", ["layer_1", "bias"]),
    ("parameter", ["layer_2", "scale"]),
    ("parameter", ["layer_2", "bias"]),
    ("state", ["layer_2", "running_mean"]),
    ("state", ["layer_2", "running_var"]),
]


def dense_bn_arrays(seed: int = 0) -> list[np.ndarray]:
    """x (5, 2), then the Lux ps/st leaves in Reactant order, all MLIR-shaped."""
    rng = np.random.default_rng(seed)
    f = np.float32
    return [
        rng.standard_normal((5, 2)).astype(f),
        rng.standard_normal((2, 3)).astype(f),
        rng.standard_normal(3).astype(f),
        (1 + 0.1 * rng.standard_normal(3)).astype(f),
        rng.standard_normal(3).astype(f),
        rng.standard_normal(3).astype(f),
        (1 + rng.random(3)).astype(f),
    ]


def dense_bn_reference(arrays: list[np.ndarray]) -> np.ndarray:
    """numpy reference of the same model (Dense then test-mode BatchNorm)."""
    x, w, b, scale, bias, mean, var = (a.astype(np.float64) for a in arrays)
    return ((x @ w + b - mean) / np.sqrt(var + 1e-5) * scale + bias).astype(np.float32)


def make_dense_bn(
    path: Path, *, seed: int = 0, portable_artifact: bool = False, **writer_options: Any
) -> Path:
    """Write the bundle (with examples) at `path`; `writer_options` are fields of its
    BundleDescription.

    Without a portable artifact unless asked: many tests edit model.mlir, which readers would
    ignore in favour of an artifact (spec §2.1).
    """
    arrays = dense_bn_arrays(seed)
    text = jax.jit(_forward).lower(*arrays).as_text()
    names = DENSE_BN_ARGUMENTS
    return write_bundle(
        path,
        BundleDescription(
            name="dense_bn",
            mlir_text=text,
            arguments=[
                ArgumentSpec(role, p, a, 0 if role == "input" else None)
                for (role, p), a in zip(names, arrays, strict=True)
            ],
            result_paths=[[["output"]]],
            aliases=[
                (["state", "layer_2", "running_mean"], 5),
                (["state", "layer_2", "running_var"], 6),
            ],
            batch={"size": 5, "samples_independent": True},
            example_outputs=[dense_bn_reference(arrays)],
            portable_artifact=portable_artifact,
            **writer_options,
        ),
        overwrite=True,
    )


def edit_manifest(bundle: Path, change: Any) -> None:
    """Apply `change(manifest_dict)` to a bundle's manifest.json in place."""
    p = bundle / "manifest.json"
    m = json.loads(p.read_text())
    change(m)
    p.write_text(json.dumps(m))


def to_format2(bundle: Path) -> Path:
    """Rewrite a bundle the Python writer made (format 3) as format 2: each dataset's sha256
    (spec §4.1, format 2) under the key `sha256` instead of its BLAKE3 (spec §8).

    The sha256 is computed from the spec alone (hashlib over the canonical bytes of the values
    h5py reads), not with juliabridge's digest code.
    """
    import h5py

    m = json.loads((bundle / "manifest.json").read_text())
    m["format_version"] = 2
    entries = [a for a in m["arguments"] if "dataset" in a]
    dtypes = {a["dataset"]: a["dtype"] for a in entries}
    for key, ref in (("inputs", "argument"), ("outputs", "result")):
        for e in (m.get("examples") or {}).get(key, []):
            owner = m["arguments"] if ref == "argument" else m["results"]
            dtypes[e["dataset"]] = owner[e[ref]]["dtype"]
            entries.append(e)
    with h5py.File(bundle / "weights.h5", "r") as f:
        for e in entries:
            if dtypes[e["dataset"]] != "f32":
                raise ValueError("to_format2 hashes f32 datasets only")
            stored = np.asarray(f[e["dataset"]][()], dtype="<f4").tobytes()
            e.pop("blake3")
            e["sha256"] = hashlib.sha256(stored).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(m, indent=1))
    return bundle


def to_format1(bundle: Path) -> Path:
    """Rewrite a bundle the Python writer made (format 3) as format 1: a whole-file weights
    sha256 instead of per-dataset digests, no portable artifacts (spec §8)."""
    m = json.loads((bundle / "manifest.json").read_text())
    m["format_version"] = 1
    for a in m["arguments"]:
        a.pop("blake3", None)
    for key in ("inputs", "outputs"):
        for e in (m.get("examples") or {}).get(key, []):
            e.pop("blake3", None)
    for key in ("module", "vjp"):
        art = (m.get(key) or {}).pop("artifact", None)
        if art is not None:
            (bundle / art["file"]).unlink()
    m.pop("static_state", None)
    for r in m["results"]:
        r.pop("echo_of", None)
    m["weights"]["sha256"] = hashlib.sha256((bundle / "weights.h5").read_bytes()).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(m, indent=1))
    return bundle
