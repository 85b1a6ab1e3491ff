"""`juliabridge vjp BUNDLE`: derive a bundle's VJP module once with Enzyme and store it.

After this, gradients on backend='xla' need no enzyme-ad: any Python, any machine.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .backends.enzyme import EnzymeBackend
from .bundle import open_bundle
from .bundle.checksum import sha256_file
from .bundle.manifest import MANIFEST_NAME
from .errors import BundleError
from .stablehlo import parse_module

VJP_FILE = "vjp.mlir"


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_vjp(path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Derive the VJP module with Enzyme (needs enzyme-ad) and record it in the manifest."""
    bundle = open_bundle(path)
    if bundle.manifest.vjp is not None and not overwrite:
        raise BundleError(
            f"{bundle.root}: already has a VJP module ({bundle.manifest.vjp.file}); pass "
            "overwrite=True (--overwrite) to derive it again"
        )
    text = EnzymeBackend(bundle.module).vjp_module_text()
    parse_module(text)  # refuse to store anything the loader would refuse
    target = bundle.root / VJP_FILE
    _atomic_write(target, text.encode("utf-8"))
    manifest_path = bundle.root / MANIFEST_NAME
    raw = json.loads(manifest_path.read_text(encoding="utf-8"))
    raw["vjp"] = {"file": VJP_FILE, "sha256": sha256_file(target)}
    _atomic_write(manifest_path, (json.dumps(raw, indent=2) + "\n").encode("utf-8"))
    open_bundle(bundle.root)  # the updated bundle must validate
    return target
