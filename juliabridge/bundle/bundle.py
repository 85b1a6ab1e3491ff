"""Opening a bundle directory: safe paths, checksums, manifest vs MLIR vs HDF5 checks."""

from __future__ import annotations

import itertools
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import BundleError, ChecksumError, SignatureMismatchError, UnsafeBundleError
from ..stablehlo import StableHLOModule, TensorSpec, parse_module
from . import _h5core
from .checksum import sha256_file
from .manifest import MANIFEST_NAME, FileRef, Manifest, load_manifest, tensor_bytes
from .weights import _physical_memory, open_weights


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

    def read_examples(self) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]] | None:
        """(inputs by argument index, Julia's outputs by result index), or None without examples."""
        ex = self.manifest.examples
        if ex is None:
            return None
        args, res = self.manifest.arguments, self.manifest.results
        with open_weights(self.file(self.manifest.weights)) as f:
            ins = {
                i: f.read_array(ds, args[i].shape, args[i].dtype, f"example input {args[i].label}")
                for i, ds in ex.inputs
            }
            outs = {
                k: f.read_array(ds, res[k].shape, res[k].dtype, f"example output {res[k].label}")
                for k, ds in ex.outputs
            }
        return ins, outs


_HF_HINT = (
    "copy it to a plain directory first (`cp -rL SRC DST`, or huggingface_hub's "
    "snapshot_download(..., local_dir=DST)), so that it holds regular files"
)


def _resolve_root(path: str | os.PathLike[str]) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise BundleError(
            f"expected the path of a bundle directory (str or os.PathLike), got "
            f"{type(path).__name__} {path!r:.80}"
        )
    root = Path(path)
    try:
        st = root.stat()
    except FileNotFoundError:
        raise BundleError(
            f"{root}: no such bundle directory; check the path (relative paths start at "
            f"{Path.cwd()})"
        ) from None
    except OSError as e:
        raise BundleError(f"{root}: cannot access it ({e.strerror}); check its permissions") from e
    if stat.S_ISREG(st.st_mode) and root.name == MANIFEST_NAME:
        root = root.parent
    elif not stat.S_ISDIR(st.st_mode):
        suffix = root.suffix.lower()
        hint = {
            ".mlir": "; for a bare StableHLO module use juliabridge.load_mlir",
            ".h5": "; this looks like a weights file: pass the bundle directory that holds it, "
            "or read fine-tuned weights with juliabridge.load_params",
            ".hdf5": "; this looks like a weights file: pass the bundle directory that holds it",
            ".json": f"; pass the directory that holds {MANIFEST_NAME}",
            ".zip": "; unpack the archive and pass the bundle directory inside it",
            ".tar": "; unpack the archive and pass the bundle directory inside it",
            ".gz": "; unpack the archive and pass the bundle directory inside it",
        }.get(suffix, f"; pass the directory that holds {MANIFEST_NAME}")
        raise BundleError(
            f"{root}: expected a bundle directory (holding {MANIFEST_NAME}, the module and the "
            f"weights), found a file{hint}"
        )
    manifest = root / MANIFEST_NAME
    try:
        mst = os.lstat(manifest)
    except FileNotFoundError:
        inner = sorted(p.name for p in _children(root) if (p / MANIFEST_NAME).is_file())
        hint = f"; did you mean {root / inner[0]}?" if inner else ""
        raise BundleError(
            f"{root}: no {MANIFEST_NAME} in this directory, so it is not a juliabridge bundle "
            f"(a bundle holds {MANIFEST_NAME}, model.mlir and weights.h5){hint}"
        ) from None
    except OSError as e:
        raise BundleError(
            f"{manifest}: cannot access it ({e.strerror}); check the permissions of {root}"
        ) from e
    if stat.S_ISLNK(mst.st_mode):
        raise UnsafeBundleError(
            f"{manifest}: is a symlink; a bundle holds regular files only (symlinks could point "
            f"anywhere). If this is a model-hub cache, {_HF_HINT}"
        )
    if not stat.S_ISREG(mst.st_mode):
        raise BundleError(f"{manifest}: expected a regular file, found {_kind(mst.st_mode)}")
    return root.resolve()


def _children(root: Path) -> list[Path]:
    try:
        return [p for p in itertools.islice(root.iterdir(), 1000) if p.is_dir()]
    except OSError:
        return []


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _inside(root: Path, ref: FileRef, key: str) -> Path:
    p = root / ref.file
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        raise BundleError(
            f"{p}: the {key} file named in {MANIFEST_NAME} ({key}.file = {ref.file!r}) is "
            "missing; the bundle is incomplete: copy or download all of its files"
        ) from None
    except (OSError, ValueError) as e:
        raise BundleError(f"{p}: cannot access the {key} file ({e})") from e
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeBundleError(
            f"{p}: the manifest's {key} file is a symlink; a bundle holds regular files only "
            f"(symlinks could point anywhere). If this is a model-hub cache, {_HF_HINT}"
        )
    if not stat.S_ISREG(st.st_mode):
        raise BundleError(
            f"{p}: the {key} file must be a regular file, found {_kind(st.st_mode)}; the bundle "
            "is damaged, export or download it again"
        )
    if p.resolve().parent != root:
        raise UnsafeBundleError(f"{p}: the {key} file resolves outside the bundle directory")
    return p


def _check_weight_sizes(manifest: Manifest, weights: Path) -> None:
    """Refuse, before the file is opened, weights the file cannot hold or memory cannot fit."""
    declared = sum(
        tensor_bytes(a.shape, a.dtype)
        for a in manifest.arguments
        if a.role != "input" and a.dataset is not None
    )
    size = weights.stat().st_size
    if declared > _h5core.expansion_budget(size):
        raise BundleError(
            f"{weights}: the manifest declares {declared} bytes of parameters and states but the "
            f"file holds only {size} bytes (juliabridge accepts at most "
            f"{_h5core.EXPANSION_FACTOR} times the file's size plus "
            f"{_h5core.EXPANSION_SLACK >> 20} MiB, even compressed); the manifest's shapes are "
            "wrong or the file is truncated. Export or download the bundle again"
        )
    memory = _physical_memory()
    if memory is not None and declared > memory:
        raise BundleError(
            f"{weights}: the parameters and states take {declared} bytes but this machine has "
            f"{memory} bytes of memory; load the bundle on a larger machine"
        )


def _check_signature(
    name: str, entries: list[TensorSpec], module: list[TensorSpec], labels: list[str], origin: str
) -> None:
    if len(entries) != len(module):
        raise SignatureMismatchError(
            f"{origin}: @main has {len(module)} {name}s but the manifest lists {len(entries)}; "
            "the manifest does not belong to this module. Export or download the bundle again"
        )
    for i, (want, got, label) in enumerate(zip(entries, module, labels)):
        if want != got:
            raise SignatureMismatchError(
                f"{origin}: @main {name} {i} ({label}) is {got} but the manifest says {want}; "
                "the manifest does not belong to this module. Export or download the bundle "
                "again"
            )


def open_bundle(
    path: str | os.PathLike[str], *, verify_checksums: bool = True, trust: bool = False
) -> Bundle:
    """Validate and open a bundle directory (docs/bundle-format.md §6) without reading weights."""
    root = _resolve_root(path)
    manifest = load_manifest(root / MANIFEST_NAME)
    files = {key: _inside(root, ref, key) for key, ref in manifest.files()}
    _check_weight_sizes(manifest, files["weights"])
    if verify_checksums:
        for key, ref in manifest.files():
            try:
                got = sha256_file(files[key])
            except OSError as e:
                raise BundleError(
                    f"{files[key]}: cannot read the {key} file ({e.strerror}); check its "
                    "permissions"
                ) from e
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
