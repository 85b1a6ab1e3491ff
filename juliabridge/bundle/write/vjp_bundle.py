"""`juliabridge vjp BUNDLE`: derive a bundle's VJP module once and store it.

The VJP is derived through the lax backend (JAX's own differentiation rules) when every op of
the module lifts, else with Enzyme where enzyme-ad imports; Enzyme runs in a separate process
(backends/enzyme/sandbox.py). After this, gradients on backend='xla' need neither: any Python, any
machine. Files are written atomically, with the umask's permissions, and every failure is a
JuliaBridgeError.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ...backends.enzyme import EnzymeBackend, enzyme_available
from ...backends.lax import LaxBackend
from ...errors import (
    BackendUnavailableError,
    BundleError,
    JuliaBridgeError,
    SaveError,
    TransformError,
    UnsupportedModuleError,
)
from ...stablehlo import StableHLOModule, parse_module
from ...support import progress
from ...transforms.derive import vjp_module_text
from .. import open_bundle
from ..files.atomic import replace_file
from ..files.checksum import sha256_file
from ..manifest import MANIFEST_NAME

VJP_FILE = "vjp.mlir"


def _atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` by `data` in one rename; permissions from the umask (not mkstemp's 0600)."""
    try:
        replace_file(path, data)
    except OSError as e:
        raise SaveError(
            f"{path}: cannot write it ({e.strerror or e}); check that the bundle directory is "
            "writable and has space, and that nothing else (e.g. a directory) has that name"
        ) from e


def derive_vjp_text(module: StableHLOModule, where: str) -> tuple[str, str]:
    """The VJP module's text (spec §5) and how it was derived: "lax" or "Enzyme".

    Raises:
        BackendUnavailableError: the module does not lift onto lax and enzyme-ad is not
            importable here.
        TransformError: Enzyme cannot derive the VJP.
    """
    try:
        lifted = LaxBackend(module)
    except UnsupportedModuleError as e:
        why_not_lax = str(e)
    else:
        with progress.spinner(f"deriving the VJP module through lax: {where}"):
            return vjp_module_text(lifted.call, module.arguments, module.results), "lax"
    if not enzyme_available():
        raise BackendUnavailableError(
            f"{where}: the VJP module cannot be derived here: the lax backend cannot lift the "
            f"module ({why_not_lax}) and enzyme-ad is not importable (its wheels are for "
            "CPython 3.11: pip install 'juliabridge[enzyme]' there and run juliabridge vjp "
            "there)"
        )
    with progress.spinner(f"deriving the VJP module with Enzyme: {where}"):
        return EnzymeBackend(module).vjp_module_text(), "Enzyme"


def add_vjp(
    path: str | os.PathLike[str], *, overwrite: bool = False, verify_checksums: bool = True
) -> Path:
    """Derive the VJP module (through lax, else Enzyme) and record it in the manifest.

    Args:
        path: the bundle directory.
        overwrite: replace a VJP module the bundle already has.
        verify_checksums: check the bundle's digests (BLAKE3 per dataset in format 3,
            sha256 in formats 1-2) before deriving.

    Returns:
        The path of the written VJP module.

    Raises:
        BundleError (and subclasses) for the bundle; SaveError when it already has a VJP
        module and not `overwrite`, or when writing fails; BackendUnavailableError when the
        module does not lift onto lax and enzyme-ad is absent; TransformError when Enzyme
        cannot derive the VJP.
    """
    bundle = open_bundle(path, verify_checksums=verify_checksums)
    if bundle.manifest.vjp is not None and not overwrite:
        # Not a malformed bundle: a refusal to replace a file, like any write refused.
        raise SaveError(
            f"{bundle.root}: already has a VJP module ({bundle.manifest.vjp.file}); pass "
            "overwrite=True (--overwrite) to derive it again"
        )
    text, how = derive_vjp_text(bundle.module, str(bundle.root))
    try:
        parse_module(text)  # refuse to store anything the loader would refuse
    except JuliaBridgeError as e:
        raise TransformError(
            f"{bundle.root}: the VJP module {how} produced would not load: {e}"
        ) from e
    target = bundle.root / VJP_FILE
    manifest_path = bundle.root / MANIFEST_NAME
    try:
        raw = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BundleError(f"{manifest_path}: cannot read it again to add the VJP ({e})") from e
    _atomic_write(target, text.encode("utf-8"))
    raw["vjp"] = {"file": VJP_FILE, "sha256": sha256_file(target)}
    _atomic_write(manifest_path, (json.dumps(raw, indent=2) + "\n").encode("utf-8"))
    open_bundle(bundle.root)  # the updated bundle must validate
    return target
