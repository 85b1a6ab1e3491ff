"""Opening a bundle directory: safe paths, checksums, manifest vs MLIR vs HDF5 checks."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import BundleError, ChecksumError, SignatureMismatchError, UnsafeBundleError
from ..stablehlo import StableHLOModule, TensorSpec, parse_module
from .checksum import sha256_file
from .manifest import MANIFEST_NAME, FileRef, Manifest, load_manifest
from .weights import open_weights, read_array


@dataclass(frozen=True)
class Bundle:
    """A validated bundle: its manifest and parsed forward module."""

    root: Path
    manifest: Manifest
    module: StableHLOModule
    checksums_verified: bool

    def file(self, ref: FileRef) -> Path:
        """Absolute path of a file the manifest names."""
        return self.root / ref.file

    def read_state_and_params(self) -> dict[int, np.ndarray]:
        """Values of every parameter and state argument, by @main argument index."""
        out: dict[int, np.ndarray] = {}
        with open_weights(self.file(self.manifest.weights)) as f:
            for a in self.manifest.arguments:
                if a.dataset is not None and a.role != "input":
                    out[a.index] = read_array(f, a.dataset, a.shape, a.dtype, a.label)
        return out

    def read_examples(self) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]] | None:
        """(inputs by argument index, Julia's outputs by result index), or None without examples."""
        ex = self.manifest.examples
        if ex is None:
            return None
        args, res = self.manifest.arguments, self.manifest.results
        with open_weights(self.file(self.manifest.weights)) as f:
            ins = {
                i: read_array(f, ds, args[i].shape, args[i].dtype, f"example input {args[i].label}")
                for i, ds in ex.inputs
            }
            outs = {
                k: read_array(f, ds, res[k].shape, res[k].dtype, f"example output {res[k].label}")
                for k, ds in ex.outputs
            }
        return ins, outs


def _resolve_root(path: str | os.PathLike[str]) -> Path:
    root = Path(path)
    if root.is_file() and root.name == MANIFEST_NAME:
        root = root.parent
    if not root.exists():
        raise BundleError(f"{root}: no such bundle directory; check the path")
    if not root.is_dir():
        hint = (
            " (a .mlir file? use juliabridge.load_mlir for bare modules)"
            if root.suffix == ".mlir"
            else ""
        )
        raise BundleError(f"{root}: a bundle is a directory holding {MANIFEST_NAME}{hint}")
    if not (root / MANIFEST_NAME).is_file():
        raise BundleError(
            f"{root}: no {MANIFEST_NAME} in this directory; it is not a juliabridge bundle"
        )
    return root.resolve()


def _inside(root: Path, ref: FileRef, key: str) -> Path:
    p = root / ref.file
    if p.is_symlink():
        raise UnsafeBundleError(
            f"{p}: the manifest's {key} file is a symlink; bundles hold plain files"
        )
    if not p.is_file():
        raise BundleError(
            f"{p}: the {key} file named in {MANIFEST_NAME} is missing; the bundle is incomplete"
        )
    if p.resolve().parent != root:
        raise UnsafeBundleError(f"{p}: the {key} file resolves outside the bundle directory")
    return p


def _check_signature(
    name: str, entries: list[TensorSpec], module: list[TensorSpec], labels: list[str], origin: str
) -> None:
    if len(entries) != len(module):
        raise SignatureMismatchError(
            f"{origin}: @main has {len(module)} {name}s but the manifest lists {len(entries)}; "
            "the manifest does not belong to this module"
        )
    for i, (want, got, label) in enumerate(zip(entries, module, labels)):
        if want != got:
            raise SignatureMismatchError(
                f"{origin}: @main {name} {i} ({label}) is {got} but the manifest says {want}"
            )


def open_bundle(
    path: str | os.PathLike[str], *, verify_checksums: bool = True, trust: bool = False
) -> Bundle:
    """Validate and open a bundle directory (docs/bundle-format.md §6) without reading weights."""
    root = _resolve_root(path)
    manifest = load_manifest(root / MANIFEST_NAME)
    files = {key: _inside(root, ref, key) for key, ref in manifest.files()}
    if verify_checksums:
        for key, ref in manifest.files():
            got = sha256_file(files[key])
            if got != ref.sha256:
                raise ChecksumError(
                    f"{files[key]}: sha256 is {got} but {MANIFEST_NAME} records {ref.sha256}; the "
                    "file was modified or corrupted. Re-export the bundle, or pass "
                    "verify_checksums=False if you changed it on purpose."
                )
    module = parse_module(files["module"], trust=trust)
    _check_signature(
        "argument",
        [TensorSpec(a.shape, a.dtype) for a in manifest.arguments],
        list(module.arguments),
        [a.label for a in manifest.arguments],
        str(files["module"]),
    )
    _check_signature(
        "result",
        [TensorSpec(r.shape, r.dtype) for r in manifest.results],
        list(module.results),
        [r.label for r in manifest.results],
        str(files["module"]),
    )
    return Bundle(root, manifest, module, checksums_verified=verify_checksums)
