"""Opening a bundle directory: safe paths, checksums, manifest vs MLIR vs HDF5 checks."""

from __future__ import annotations

import itertools
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import BundleError, ChecksumError, SignatureMismatchError, UnsafeBundleError
from ..stablehlo import StableHLOModule, TensorSpec, parse_module
from . import _h5core
from .checksum import sha256_file
from .digest import check_dataset_digest
from .manifest import MANIFEST_NAME, FileRef, Manifest, load_manifest, tensor_bytes
from .sources import ModuleSource, read_module_sources
from .weights import _physical_memory, open_weights


@dataclass(frozen=True)
class Bundle:
    """A validated bundle: its manifest and parsed forward module."""

    root: Path
    manifest: Manifest
    module: StableHLOModule
    checksums_verified: bool
    #: Which form of the forward module was parsed: "artifact" or "text" (spec §2.1).
    module_source: str = "text"
    #: Why that form, for `inspect` and `model.metadata`.
    module_source_note: str = ""
    _vjp: ModuleSource | None = field(default=None, repr=False)

    def file(self, ref: FileRef) -> Path:
        """Absolute path of a file the manifest names."""
        return self.root / ref.file

    @property
    def vjp_source(self) -> str | None:
        """Which form of the VJP module is used ("artifact" or "text"); None without one."""
        return None if self._vjp is None else self._vjp.used

    def vjp_module(self, *, trust: bool = False) -> StableHLOModule | None:
        """The parsed VJP module (spec §5), or None when the bundle has none.

        Raises:
            MLIRParseError, UnsupportedModuleError: it does not parse or breaks the policy.
        """
        if self._vjp is None:
            return None
        return parse_module(self._vjp.text, trust=trust, origin=self._vjp.origin)

    def verify_dataset(self, value: np.ndarray, dtype: str, sha256: str | None, what: str) -> None:
        """Check one array read from the weights file against its format-2 digest (spec §4.1).

        Does nothing when checksums are off or the manifest has no digest (format 1).

        Raises:
            ChecksumError: the data differs from what the writer recorded.
        """
        if self.checksums_verified:
            check_dataset_digest(
                value, dtype, sha256, f"{self.file(self.manifest.weights)}: {what}"
            )

    def read_examples(self) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]] | None:
        """(inputs by argument index, Julia's outputs by result index), or None without examples."""
        ex = self.manifest.examples
        if ex is None:
            return None
        args, res = self.manifest.arguments, self.manifest.results
        ins: dict[int, np.ndarray] = {}
        outs: dict[int, np.ndarray] = {}
        with open_weights(self.file(self.manifest.weights)) as f:
            for e in ex.inputs:
                a = args[e.index]
                what = f"example input {a.label} ({e.dataset})"
                ins[e.index] = f.read_array(e.dataset, a.shape, a.dtype, f"example input {a.label}")
                self.verify_dataset(ins[e.index], a.dtype, e.sha256, what)
            for e in ex.outputs:
                r = res[e.index]
                what = f"example output {r.label} ({e.dataset})"
                outs[e.index] = f.read_array(
                    e.dataset, r.shape, r.dtype, f"example output {r.label}"
                )
                self.verify_dataset(outs[e.index], r.dtype, e.sha256, what)
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
    sources = read_module_sources(root, manifest, verify=verify_checksums, isolated=not trust)
    if verify_checksums:
        for key, ref in manifest.files():
            if key in _MODULE_FILES or ref.sha256 is None:
                continue  # modules were hashed as they were read; datasets carry digests
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
    src = sources["module"]
    module = parse_module(src.text, trust=trust, origin=src.origin)
    _check_signature(
        "argument",
        [TensorSpec(a.shape, a.dtype) for a in manifest.arguments],
        list(module.arguments),
        [a.label for a in manifest.arguments],
        src.origin,
    )
    _check_signature(
        "result",
        [TensorSpec(r.shape, r.dtype) for r in manifest.results],
        list(module.results),
        [r.label for r in manifest.results],
        src.origin,
    )
    return Bundle(
        root,
        manifest,
        module,
        checksums_verified=verify_checksums,
        module_source=src.used,
        module_source_note=src.note,
        _vjp=sources.get("vjp"),
    )


#: Files read_module_sources hashes itself.
_MODULE_FILES = frozenset({"module", "module.artifact", "vjp", "vjp.artifact"})
