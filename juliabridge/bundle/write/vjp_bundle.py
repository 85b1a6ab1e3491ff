"""`juliabridge vjp BUNDLE`: store a bundle's VJP module, derived by the function the caller
passes (backends/vjp_text.py's `derive_vjp_text`: lax, else Enzyme), so this module knows files,
not backends. After this, gradients on backend='xla' need neither: any Python, any machine. Files
are written atomically, with the umask's permissions, and every failure is a JuliaBridgeError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from ...errors import (
    BundleError,
    JuliaBridgeError,
    SaveError,
    TransformError,
)
from ...stablehlo import StableHLOModule, parse_module
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


#: Derives a module's VJP module: (module, label for messages) -> (text, how it was derived).
VjpDeriver = Callable[[StableHLOModule, str], tuple[str, str]]


def add_vjp(
    path: str | os.PathLike[str],
    *,
    derive: VjpDeriver,
    overwrite: bool = False,
    verify_checksums: bool = True,
) -> Path:
    """Derive the VJP module with `derive` and record it in the manifest.

    Args:
        path: the bundle directory.
        derive: the deriver (juliabridge.backends.vjp_text.derive_vjp_text: lax, else Enzyme).
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
    text, how = derive(bundle.module, str(bundle.root))
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
