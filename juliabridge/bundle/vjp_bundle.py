"""`juliabridge vjp BUNDLE`: derive a bundle's VJP module once with Enzyme and store it.

After this, gradients on backend='xla' need no enzyme-ad: any Python, any machine. Enzyme runs
in a separate process (transforms/sandbox.py); files are written atomically, with the umask's
permissions, and every failure is a JuliaBridgeError.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import progress
from ..backends.enzyme import EnzymeBackend
from ..errors import BundleError, JuliaBridgeError, SaveError, TransformError
from ..stablehlo import parse_module
from . import open_bundle
from .atomic import clean_stale, fsync_dir, temp_path
from .checksum import sha256_file
from .manifest import MANIFEST_NAME

VJP_FILE = "vjp.mlir"


def _atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` by `data` in one rename; permissions from the umask (not mkstemp's 0600)."""
    clean_stale(path)
    tmp = temp_path(path)
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise SaveError(
            f"{path}: cannot write it ({e.strerror or e}); check that the bundle directory is "
            "writable and has space, and that nothing else (e.g. a directory) has that name"
        ) from e


def add_vjp(
    path: str | os.PathLike[str], *, overwrite: bool = False, verify_checksums: bool = True
) -> Path:
    """Derive the VJP module with Enzyme (needs enzyme-ad) and record it in the manifest.

    Args:
        path: the bundle directory.
        overwrite: replace a VJP module the bundle already has.
        verify_checksums: check the bundle's sha256 checksums before deriving.

    Returns:
        The path of the written VJP module.

    Raises:
        BundleError (and subclasses) for the bundle, BackendUnavailableError without
        enzyme-ad, TransformError when Enzyme cannot derive the VJP, SaveError when writing
        fails.
    """
    bundle = open_bundle(path, verify_checksums=verify_checksums)
    if bundle.manifest.vjp is not None and not overwrite:
        raise BundleError(
            f"{bundle.root}: already has a VJP module ({bundle.manifest.vjp.file}); pass "
            "overwrite=True (--overwrite) to derive it again"
        )
    with progress.spinner(f"{bundle.root.name}: deriving the VJP module with Enzyme"):
        text = EnzymeBackend(bundle.module).vjp_module_text()
    try:
        parse_module(text)  # refuse to store anything the loader would refuse
    except JuliaBridgeError as e:
        raise TransformError(
            f"{bundle.root}: the VJP module Enzyme produced would not load: {e}"
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
